package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// seedSessions creates a few sessions through the real write path and
// returns the id of one that has at least two events.
func seedSessions(t *testing.T, s *models.Store) (delegated string) {
	t.Helper()
	ctx := context.Background()
	storetest.Session(ctx, t, s, nil)
	storetest.Session(ctx, t, s, &storetest.SessionOpts{Goal: "Explain the late delivery of order 77", TicketRef: "T-77", Priority: 1})
	delegated, _ = storetest.Delegated(ctx, t, s, "refunds")
	storetest.Delegated(ctx, t, s, "billing")
	return delegated
}

func TestVerifyClean(t *testing.T) {
	eachURL(t, func(t *testing.T, dbURL string) {
		migratedURL(t, dbURL)
		seedSessions(t, openTestStore(t, dbURL))

		r := runCLI(t, nil, "", "verify", "--database-url", dbURL, "--json")
		if r.code != 0 {
			t.Fatalf("verify on a clean database exited %d", r.code)
		}
		wantContains(t, "summary", r.stdout, "verified 4 sessions, 6 events in ", ": no problems\n")
		// Progress goes to stderr, not to the report.
		wantContains(t, "progress", r.stderr, "verify: 4/4 sessions (100%)")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		var rep verifyJSON
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil {
			t.Fatalf("last line is not the JSON report: %v", err)
		}
		if !rep.OK || rep.Sessions != 4 || rep.Events != 6 || rep.Problems == nil || len(rep.Problems) != 0 {
			t.Fatalf("report = %+v", rep)
		}
	})
}

// TestVerifyTamper changes one event's payload behind the application's
// back, as an attacker with database access would; verify must name it.
func TestVerifyTamper(t *testing.T) {
	eachURL(t, func(t *testing.T, dbURL string) {
		migratedURL(t, dbURL)
		s := openTestStore(t, dbURL)
		victim := seedSessions(t, s)

		res := s.DB.Exec(`UPDATE events SET payload = ? WHERE session_id = ? AND seq = 2`,
			`{"queue":"refunds","step":"issue-refund","instructions":"refund 5000 EUR","max_attempts":3,"lease_seconds":30}`, victim)
		if res.Error != nil || res.RowsAffected != 1 {
			t.Fatalf("tamper: %v, %d rows", res.Error, res.RowsAffected)
		}

		r := runCLI(t, nil, "", "verify", "--database-url", dbURL, "--json")
		if r.code == 0 {
			t.Fatalf("verify of a tampered log exited 0")
		}
		wantContains(t, "problems", r.stdout, "session "+victim+" seq 2: hash: ")
		wantContains(t, "stderr", r.stderr, "problem")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		var rep verifyJSON
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil {
			t.Fatalf("last line is not the JSON report: %v", err)
		}
		if rep.OK || len(rep.Problems) == 0 {
			t.Fatalf("report = %+v", rep)
		}
		for _, p := range rep.Problems {
			if p.SessionID != victim {
				t.Errorf("problem in an untouched session: %+v", p)
			}
		}

		// Only the victim when asked for it by id; an unknown id is an error.
		r = runCLI(t, nil, "", "verify", "--database-url", dbURL, victim)
		if r.code != 1 || !strings.Contains(r.stdout, "verified 1 session, 2 events") {
			t.Fatalf("verify %s: %d", victim, r.code)
		}
		r = runCLI(t, nil, "", "verify", "--database-url", dbURL, "ses_nope")
		if r.code == 0 || !strings.Contains(r.stderr, "ses_nope not found") {
			t.Fatalf("verify of an unknown id: %d", r.code)
		}
	})
}

func TestVerifyRefusesUnmigrated(t *testing.T) {
	dbURL := "sqlite:" + t.TempDir() + "/v.db"
	r := runCLI(t, nil, "", "verify", "--database-url", dbURL)
	if r.code == 0 || !strings.Contains(r.stderr, "migrate up") {
		t.Fatalf("verify on an unmigrated database: %d", r.code)
	}
}

// fakeClock advances only when told to.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestProgressLog(t *testing.T) {
	var buf bytes.Buffer
	c := &fakeClock{t: time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)}
	p := newProgressWriter(&buf, false, c.now)
	// 1000 sessions in batches of 20: a line per tenth, none in between.
	for done := int64(20); done <= 1000; done += 20 {
		c.t = c.t.Add(10 * time.Millisecond)
		p.update(done, 1000)
	}
	p.finish()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 10 || strings.Contains(buf.String(), "\r") {
		t.Fatalf("%d lines:\n%s", len(lines), buf.String())
	}
	if lines[9] != "verify: 1000/1000 sessions (100%), 2000 sessions/s" {
		t.Fatalf("last line %q", lines[9])
	}

	// A slow run still reports every two seconds.
	buf.Reset()
	p = newProgressWriter(&buf, false, c.now)
	for done := int64(1); done <= 5; done++ {
		c.t = c.t.Add(time.Second)
		p.update(done, 1000)
	}
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Fatalf("%d lines in 5 s:\n%s", n, buf.String())
	}
}

func TestProgressTerminal(t *testing.T) {
	var buf bytes.Buffer
	c := &fakeClock{t: time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)}
	p := newProgressWriter(&buf, true, c.now)
	for done := int64(100); done <= 300; done += 100 {
		c.t = c.t.Add(time.Second)
		p.update(done, 300)
	}
	p.finish()
	out := buf.String()
	if strings.Count(out, "\r") != 4 || strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("terminal output %q", out)
	}
	wantContains(t, "terminal", out, "\rverify: 300/300 sessions (100%), 100 sessions/s")
}
