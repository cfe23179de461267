package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
)

// TestEraseCommand: on a seeded database of each dialect (every event
// type), `erase` erases a handful of tickets, `verify` stays clean, a
// second run changes nothing, and bad flags or an unknown ticket fail.
func TestEraseCommand(t *testing.T) {
	eachURL(t, func(t *testing.T, dbURL string) {
		if r := runCLI(t, nil, "", "bench", "seed", "--database-url", dbURL, "--sessions", "40", "--events", "300", "--progress", "0"); r.code != 0 {
			t.Fatalf("bench seed exited %d", r.code)
		}
		s, err := models.Open(context.Background(), dbURL, models.OpenOpts{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		var tickets []string
		err = s.DB.Raw(`SELECT ticket_ref FROM sessions WHERE ticket_ref <> '' GROUP BY ticket_ref ORDER BY count(*) DESC, ticket_ref LIMIT 5`).Scan(&tickets).Error
		s.Close()
		if err != nil || len(tickets) == 0 {
			t.Fatalf("tickets: %v %v", tickets, err)
		}
		for _, args := range [][]string{
			{"erase", "--database-url", dbURL, "--ticket", tickets[0]},
			{"erase", "--database-url", dbURL, "--reason", "request"},
		} {
			if r := runCLI(t, nil, "", args...); r.code != 2 {
				t.Fatalf("%v: exit %d, want 2", args, r.code)
			}
		}
		if r := runCLI(t, nil, "", "erase", "--database-url", dbURL, "--ticket", "T-no-such", "--reason", "request"); r.code == 0 {
			t.Fatal("erase of an unknown ticket succeeded")
		}
		for _, ticket := range tickets {
			r := runCLI(t, nil, "", "erase", "--database-url", dbURL, "--ticket", ticket, "--reason", "GDPR request", "--json")
			var rep models.EraseReport
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil || rep.Events == 0 {
				t.Fatalf("erase %s: exit %d, %q %q", ticket, r.code, r.stdout, r.stderr)
			}
		}
		if r := runCLI(t, nil, "", "verify", "--database-url", dbURL); r.code != 0 {
			t.Fatalf("verify after erase: exit %d: %s", r.code, r.stdout)
		}
		r := runCLI(t, nil, "", "erase", "--database-url", dbURL, "--ticket", tickets[0], "--reason", "GDPR request")
		if r.code != 0 || !strings.Contains(r.stdout, "nothing left to erase") {
			t.Fatalf("second erase: exit %d, %q", r.code, r.stdout)
		}
	})
}
