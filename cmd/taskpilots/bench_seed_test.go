package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
)

// TestBenchSeed builds a small database with `bench seed` on each dialect:
// the counts are exactly the ones asked for, the stories end in the mix of
// statuses they promise, and the log verifies clean (every event was written
// by the real commands, hash chains and projections included).
func TestBenchSeed(t *testing.T) {
	eachURL(t, func(t *testing.T, dbURL string) {
		r := runCLI(t, nil, "", "bench", "seed", "--database-url", dbURL, "--sessions", "200", "--events", "2000", "--workers", "4", "--json", "--progress", "0")
		if r.code != 0 {
			t.Fatalf("bench seed exited %d", r.code)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		var rep seedReport
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil {
			t.Fatalf("last line is not the JSON report: %v", err)
		}
		if rep.Sessions != 200 || rep.Events != 2000 {
			t.Fatalf("report = %+v, want 200 sessions and 2000 events", rep)
		}
		s := openTestStore(t, dbURL)
		ctx := context.Background()
		var sessions, events, scored int64
		s.DB.Raw(`SELECT count(*) FROM sessions`).Scan(&sessions)
		s.DB.Raw(`SELECT count(*) FROM events`).Scan(&events)
		s.DB.Raw(`SELECT count(*) FROM events WHERE type = ?`, models.EventReviewScored).Scan(&scored)
		if sessions != 200 || events != 2000 {
			t.Fatalf("database has %d sessions and %d events, want 200 and 2000", sessions, events)
		}
		// The feed numbered every event, as a server's sequencer would have.
		var fed int64
		s.DB.Raw(`SELECT count(*) FROM feed`).Scan(&fed)
		if fed != 2000 {
			t.Errorf("%d events in the feed, want all 2000", fed)
		}
		if scored == 0 || scored != rep.Reviews {
			t.Errorf("%d review.scored events, report says %d", scored, rep.Reviews)
		}
		counts, err := s.CountByStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range []models.Status{models.StatusCompleted, models.StatusEscalated, models.StatusHumanActive,
			models.StatusAwaitingInput, models.StatusQueued, models.StatusPaused, models.StatusCancelled, models.StatusOpen, models.StatusRejected} {
			if counts[st] == 0 {
				t.Errorf("no session ended %s: %v", st, counts)
			}
		}
		// A long tail of histories: some session is far above the average.
		var longest int64
		s.DB.Raw(`SELECT max(last_seq) FROM sessions`).Scan(&longest)
		if longest < 30 {
			t.Errorf("longest history has %d events, want a long tail (average 10)", longest)
		}
		rv, err := s.Verify(ctx, models.VerifyOpts{})
		if err != nil || !rv.OK() || rv.Sessions != 200 || rv.Events != 2000 {
			t.Fatalf("verify: %v, %+v", err, rv)
		}
	})
}

func TestBenchSeedFlags(t *testing.T) {
	for _, args := range [][]string{{"--sessions", "0"}, {"--sessions", "10", "--events", "9"}, {"--workers", "-1"}} {
		r := runCLI(t, nil, "", append([]string{"bench", "seed", "--database-url", "sqlite::memory:"}, args...)...)
		if r.code != 2 {
			t.Errorf("bench seed %v exited %d, want 2", args, r.code)
		}
	}
}

func TestAsyncCommits(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u@h/db?sslmode=disable":       "postgres://u@h/db?sslmode=disable&synchronous_commit=off",
		"postgres://u@h/db?synchronous_commit=on": "postgres://u@h/db?synchronous_commit=on",
		"sqlite:/tmp/x.db":                        "sqlite:/tmp/x.db",
	} {
		if got := asyncCommits(in); got != want {
			t.Errorf("asyncCommits(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestBenchIdle runs `bench idle` briefly on a seeded database: it settles
// the database (every event in the feed), runs the replicas without
// requests, and reads the inbox with one client.
func TestBenchIdle(t *testing.T) {
	eachURL(t, func(t *testing.T, dbURL string) {
		if r := runCLI(t, nil, "", "bench", "seed", "--database-url", dbURL, "--sessions", "50", "--events", "300", "--progress", "0"); r.code != 0 {
			t.Fatalf("bench seed exited %d", r.code)
		}
		r := runCLI(t, nil, "", "bench", "idle", "--database-url", dbURL, "--replicas", "2", "--duration", "1s", "--warmup", "0s", "--inbox", "--json")
		if r.code != 0 {
			t.Fatalf("bench idle exited %d", r.code)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		var rep idleReport
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil {
			t.Fatalf("last line is not the JSON report: %v", err)
		}
		if rep.Replicas != 2 || rep.Sessions != 50 || rep.Events != 300 || rep.InboxReads == 0 || rep.InboxP99Ms <= 0 {
			t.Fatalf("report = %+v", rep)
		}
		// The backends' CPU is read only where PostgreSQL runs on this
		// machine, which CI does not promise: not asserted.
	})
}
