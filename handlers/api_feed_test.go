package handlers_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// feedEnv is an API server with the feed's sequencer running, as Serve runs it.
func feedEnv(t *testing.T, s *models.Store) *apiEnv {
	t.Helper()
	e := newAPIEnv(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.RunSequencer(ctx, time.Hour); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return e
}

type feedAnswer struct {
	Events []struct {
		EventID      string         `json:"event_id"`
		SessionID    string         `json:"session_id"`
		Seq          int64          `json:"seq"`
		Type         string         `json:"type"`
		Actor        string         `json:"actor"`
		VersionAfter int64          `json:"version_after"`
		Payload      map[string]any `json:"payload"`
		CreatedAt    time.Time      `json:"created_at"`
	} `json:"events"`
	NextCursor string `json:"next_cursor"`
}

func (e *apiEnv) feed(token, query string) feedAnswer {
	e.t.Helper()
	var a feedAnswer
	wantStatus(e.t, e.get(token, "/events?"+query), http.StatusOK).Decode(e.t, &a)
	if a.NextCursor == "" || a.Events == nil {
		e.t.Fatalf("feed answer without next_cursor or events: %+v", a)
	}
	return a
}

// createAndDelegate makes a session with one delegation through the API.
func (e *apiEnv) createAndDelegate(queue string) string {
	e.t.Helper()
	var out struct {
		SessionID string `json:"session_id"`
	}
	wantStatus(e.t, e.post(e.controller, "/sessions", map[string]any{"goal": "Refund order 1182"}), http.StatusCreated).Decode(e.t, &out)
	wantStatus(e.t, e.post(e.controller, "/sessions/"+out.SessionID+"/delegations",
		map[string]any{"queue": queue, "step": "check", "expected_version": 1}), http.StatusCreated)
	return out.SessionID
}

// waitSequenced waits until the feed holds n events (the sequencer runs
// after commit, off the request).
func (e *apiEnv) waitSequenced(n int) {
	e.t.Helper()
	a := e.feed(e.controller, "limit=1000")
	for deadline := time.Now().Add(20 * time.Second); len(a.Events) < n; {
		if time.Now().After(deadline) {
			e.t.Fatalf("feed holds %d events, want %d", len(a.Events), n)
		}
		time.Sleep(5 * time.Millisecond)
		a = e.feed(e.controller, "limit=1000")
	}
}

func TestAPIFeedFiltersAndPaging(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := feedEnv(t, s)
		a := e.createAndDelegate("refunds")
		b := e.createAndDelegate("billing")
		e.waitSequenced(4)

		all := e.feed(e.admin, "")
		if len(all.Events) != 4 {
			t.Fatalf("feed = %+v", all)
		}
		want := []struct {
			sid string
			seq int64
			typ string
		}{{a, 1, "session.created"}, {a, 2, "delegation.created"}, {b, 1, "session.created"}, {b, 2, "delegation.created"}}
		for i, w := range want {
			ev := all.Events[i]
			if ev.SessionID != w.sid || ev.Seq != w.seq || ev.Type != w.typ || ev.VersionAfter != w.seq || ev.EventID == "" ||
				ev.Actor == "" || ev.CreatedAt.IsZero() || ev.Payload == nil {
				t.Errorf("event %d = %+v, want %+v", i, ev, w)
			}
		}
		if all.Events[1].Payload["queue"] != "refunds" {
			t.Errorf("payload is not the event's JSON object: %+v", all.Events[1].Payload)
		}

		// Paging by next_cursor: one event per page, each once, in order.
		var paged []string
		cursor := ""
		for range 10 {
			p := e.feed(e.controller, "limit=1&after="+url.QueryEscape(cursor))
			if len(p.Events) == 0 {
				break
			}
			paged = append(paged, p.Events[0].EventID)
			cursor = p.NextCursor
		}
		if len(paged) != 4 {
			t.Fatalf("paged %v", paged)
		}
		for i := range paged {
			if paged[i] != all.Events[i].EventID {
				t.Errorf("page %d = %s, want %s", i, paged[i], all.Events[i].EventID)
			}
		}
		end := cursor

		// Filters.
		if p := e.feed(e.controller, "types=delegation.created,session.paused"); len(p.Events) != 2 ||
			p.Events[0].SessionID != a || p.Events[1].SessionID != b || p.NextCursor != end {
			t.Errorf("types filter = %+v (cursor %s, want %s)", p, p.NextCursor, end)
		}
		if p := e.feed(e.controller, "queue=billing"); len(p.Events) != 2 || p.Events[0].SessionID != b {
			t.Errorf("queue filter = %+v", p)
		}
		if p := e.feed(e.controller, "session_id="+a); len(p.Events) != 2 || p.Events[1].SessionID != a {
			t.Errorf("session filter = %+v", p)
		}
		if p := e.feed(e.controller, "queue=nowhere&types=session.created"); len(p.Events) != 0 || p.NextCursor != end {
			t.Errorf("empty filtered page = %+v; its cursor must move to the end %s", p, end)
		}

		// after=now: nothing old; the next event follows the returned cursor.
		now := e.feed(e.controller, "after=now")
		if len(now.Events) != 0 || now.NextCursor != end {
			t.Fatalf("after=now = %+v", now)
		}
		c := e.createAndDelegate("refunds")
		e.waitSequenced(6)
		if p := e.feed(e.controller, "after="+url.QueryEscape(now.NextCursor)); len(p.Events) != 2 || p.Events[0].SessionID != c {
			t.Errorf("after the end = %+v", p)
		}
	})
}

// TestAPIFeedLongPoll: a long poll answers when a matching event commits
// (not before, for an event that does not match), and empty at its deadline.
func TestAPIFeedLongPoll(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := feedEnv(t, s)
		start := time.Now()
		idle := e.feed(e.controller, "after=now&wait_seconds=1")
		if len(idle.Events) != 0 || time.Since(start) < time.Second {
			t.Fatalf("idle long poll answered %+v after %s; want empty after 1s", idle, time.Since(start))
		}

		got := make(chan feedAnswer, 1)
		go func() {
			var a feedAnswer
			r := e.get(e.controller, "/events?types=delegation.created&wait_seconds=30&after="+url.QueryEscape(idle.NextCursor))
			if r.Status == http.StatusOK {
				r.Decode(t, &a)
			}
			got <- a
		}()
		time.Sleep(50 * time.Millisecond)
		sid := e.createAndDelegate("refunds")
		select {
		case a := <-got:
			if len(a.Events) != 1 || a.Events[0].SessionID != sid || a.Events[0].Type != "delegation.created" {
				t.Fatalf("woken with %+v", a)
			}
		case <-time.After(25 * time.Second):
			t.Fatal("the long poll was not woken by the delegation")
		}
	})
}

func TestAPIFeedBadInput(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := feedEnv(t, s)
		e.createAndDelegate("refunds")
		e.waitSequenced(2)
		before := e.feed(e.controller, "")
		for q, fields := range map[string][]string{
			"limit=0":                          {"limit"},
			"limit=1001":                       {"limit"},
			"limit=ten":                        {"limit"},
			"wait_seconds=31":                  {"wait_seconds"},
			"wait_seconds=-1":                  {"wait_seconds"},
			"types=session.created,bogus.type": {"types"},
			"after=not-a-cursor":               {"after"},
			"after=f" + "AAAA":                 {"after"},
			"sesion_id=ses_x":                  {"sesion_id"},
			"limit=5&limit=6":                  {"limit"},
			"after=zz&limit=0&wait_seconds=99&types=nope&colour=red": {"after", "limit", "wait_seconds", "types", "colour"},
		} {
			t.Run(q, func(t *testing.T) {
				wantFields(t, wantProblem(t, e.get(e.controller, "/events?"+q), http.StatusUnprocessableEntity), fields...)
			})
		}
		// Reads write nothing, refused or not.
		if after := e.feed(e.controller, ""); len(after.Events) != len(before.Events) || after.NextCursor != before.NextCursor {
			t.Errorf("feed changed: %+v then %+v", before, after)
		}
	})
}

func TestAPIFeedRoles(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := feedEnv(t, s)
		wantProblem(t, e.get(e.worker, "/events"), http.StatusForbidden)
		wantProblem(t, e.get("", "/events"), http.StatusUnauthorized)
		e.feed(e.controller, "")
		e.feed(e.admin, "")
	})
}
