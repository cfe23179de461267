package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestBenchLifecycles runs the lifecycle bench briefly through both APIs on
// both dialects, one lease per call and in batches: lifecycles complete
// without errors, and with --batch every lease call returns the whole batch
// (each worker has its own queue, so it leases exactly what it delegated).
func TestBenchLifecycles(t *testing.T) {
	eachURL(t, func(t *testing.T, dbURL string) {
		for _, mode := range []string{"inproc", "http"} {
			for _, batch := range []int{1, 4} {
				name := fmt.Sprintf("%s batch %d", mode, batch)
				r := runCLI(t, nil, "", "bench", "--database-url", dbURL, "--mode", mode, "--workers", "2",
					"--batch", fmt.Sprint(batch), "--queue-per-worker", "--wait", "1", "--duration", "1s", "--json")
				if r.code != 0 {
					t.Fatalf("%s exited %d: %s", name, r.code, r.stderr)
				}
				lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
				var rep benchReport
				if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil {
					t.Fatalf("%s: last line is not the JSON report: %v", name, err)
				}
				if rep.Lifecycles == 0 || rep.Errors != 0 || rep.Batch != batch {
					t.Fatalf("%s: report = %+v\n%s", name, rep, r.stdout)
				}
				if rep.LeasesPerCall != float64(batch) {
					t.Errorf("%s: %.3f leases per lease call, want %d", name, rep.LeasesPerCall, batch)
				}
			}
		}
	})
}

func TestBenchFlagsBatch(t *testing.T) {
	for _, args := range [][]string{{"--batch", "0"}, {"--batch", "101"}, {"--batch", "2", "--webhook-rounds", "1"}} {
		r := runCLI(t, nil, "", append([]string{"bench", "--database-url", "sqlite::memory:"}, args...)...)
		if r.code != 2 {
			t.Errorf("bench %v exited %d, want 2: %s", args, r.code, r.stderr)
		}
	}
}
