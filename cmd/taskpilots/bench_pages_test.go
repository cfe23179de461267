package main

import (
	"encoding/json"
	"testing"
)

// TestBenchPages: on a small seeded database of each dialect, every page the
// page benchmark measures answers 200 with a body, so the benchmark's table
// never reports timings of error pages.
func TestBenchPages(t *testing.T) {
	eachURL(t, func(t *testing.T, dbURL string) {
		if r := runCLI(t, nil, "", "bench", "seed", "--database-url", dbURL, "--sessions", "60", "--events", "400", "--progress", "0"); r.code != 0 {
			t.Fatalf("bench seed exited %d", r.code)
		}
		r := runCLI(t, nil, "", "bench", "pages", "--database-url", dbURL, "--requests", "2", "--clients", "1", "--json")
		if r.code != 0 {
			t.Fatalf("bench pages exited %d", r.code)
		}
		var rep struct {
			Events int64        `json:"events"`
			Pages  []pageResult `json:"pages"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("output is not JSON: %v", err)
		}
		if rep.Events != 400 || len(rep.Pages) < 15 {
			t.Fatalf("report: %d events, %d pages", rep.Events, len(rep.Pages))
		}
		for _, p := range rep.Pages {
			if p.Errors != 0 || p.Bytes == 0 {
				t.Errorf("%s (%s): %d errors, %d bytes", p.Page, p.Path, p.Errors, p.Bytes)
			}
		}
	})
}
