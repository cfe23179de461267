package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchCycles runs bench cycles briefly on both dialects, with group
// commit and batched results on and off: cycles complete without errors,
// and on PostgreSQL batched results do group.
func TestBenchCycles(t *testing.T) {
	eachURL(t, func(t *testing.T, dbURL string) {
		for _, flags := range [][]string{{"--group-commit", "--batch-results"}, {"--group-commit=false", "--batch-results=false"}} {
			args := append([]string{"bench", "cycles", "--database-url", dbURL, "--sessions", "40", "--producers", "4",
				"--workers", "2", "--batch", "8", "--duration", "1s", "--json"}, flags...)
			r := runCLI(t, nil, "", args...)
			if r.code != 0 {
				t.Fatalf("%v exited %d: %s", flags, r.code, r.stderr)
			}
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			var rep cyclesReport
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil {
				t.Fatalf("last line is not the JSON report: %v", err)
			}
			if rep.Cycles == 0 || rep.Errors != 0 || rep.StatementsPerCycle <= 0 {
				t.Fatalf("%v: report = %+v", flags, rep)
			}
			if strings.HasPrefix(dbURL, "postgres") && rep.BatchResults && rep.Groups == 0 {
				t.Errorf("%v: batched results on PostgreSQL formed no group: %+v", flags, rep)
			}
		}
	})
}
