package clienttest

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/handlers/apicontract"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// Package clienttest runs the Go client (the module in client/) against the
// real server on PostgreSQL and SQLite. Every exchange is validated against
// the OpenAPI document, so the client and the server are held to the same
// contract. The client module's own tests need no server.

// testServer is the real server on a real store, with a controller and a
// worker client.
type testServer struct {
	store      *models.Store
	url        string
	controller *client.Client
	worker     *client.Client
	ctrlToken  string
	workToken  string
}

// newTestServer serves the product on s. wrap, if set, sits in front of the
// server's handler (to lose answers on purpose).
func newTestServer(t *testing.T, s *models.Store, wrap func(http.Handler) http.Handler) *testServer {
	t.Helper()
	ctx := context.Background()
	ctrl, _, err := s.CreateToken(ctx, "test-controller", models.RoleController)
	if err != nil {
		t.Fatal(err)
	}
	work, _, err := s.CreateToken(ctx, "test-worker", models.RoleWorker)
	if err != nil {
		t.Fatal(err)
	}
	h, err := web.NewServer(s, web.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("web.NewServer: %v", err)
	}
	// Validated behind any wrap, so that answers a wrap loses on purpose
	// were still checked when the server gave them.
	h = apicontract.Handler(t, h)
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	opts := []client.Option{client.WithBackoff(5*time.Millisecond, 50*time.Millisecond)}
	return &testServer{
		store: s, url: srv.URL, ctrlToken: ctrl, workToken: work,
		controller: client.New(srv.URL, ctrl, opts...), worker: client.New(srv.URL, work, opts...),
	}
}

// delegated creates a session and delegates a step through the API.
func (ts *testServer) delegated(t *testing.T, queue string, facts map[string]any) (client.Outcome, client.Delegation) {
	t.Helper()
	ctx := context.Background()
	s, err := ts.controller.CreateSession(ctx, client.CreateSessionInput{
		Goal: "Refund order 1182 if eligible", TicketRef: "T-1182", Facts: facts,
		Resources: []client.Resource{{Name: "orders-db", URI: "db://orders"}},
	})
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	d, err := ts.controller.Delegate(ctx, s.SessionID, client.DelegateInput{Queue: queue, Step: "check-eligibility", ExpectedVersion: s.StateVersion})
	if err != nil {
		t.Fatalf("delegate: %v", err)
	}
	return s, d
}

func completed(l *client.Lease) client.ResultInput {
	return client.ResultInput{
		LeaseToken: l.LeaseToken, SessionID: l.SessionID, Step: l.Step, ResultType: client.ResultCompleted,
		Output: map[string]any{"eligible": true}, Evidence: []client.Evidence{{Claim: "order paid", Source: "orders-db:1182"}},
	}
}

func TestLifecycle(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		ts := newTestServer(t, s, nil)

		none, err := ts.worker.Lease(ctx, "refunds", client.LeaseInput{Worker: "w-1", WaitSeconds: 0})
		if err != nil || none != nil {
			t.Fatalf("lease from an empty queue = %+v, %v; want nil, nil (204)", none, err)
		}

		sess, d := ts.delegated(t, "refunds", map[string]any{"order_total": "120 EUR"})
		if sess.Status != client.StatusOpen || sess.StateVersion != 1 || !strings.HasPrefix(sess.SessionID, "ses_") {
			t.Fatalf("created = %+v", sess)
		}
		if d.StateVersion != 2 || d.Status != client.StatusQueued || !strings.HasPrefix(d.DelegationID, "dlg_") || d.SessionID != sess.SessionID {
			t.Fatalf("delegation = %+v", d)
		}

		l, err := ts.worker.Lease(ctx, "refunds", client.LeaseInput{Worker: "w-1", WaitSeconds: 1})
		if err != nil || l == nil {
			t.Fatalf("lease = %v, %v", l, err)
		}
		if l.DelegationID != d.DelegationID || l.Attempt != 1 || l.Queue != "refunds" || l.LeaseToken == "" {
			t.Fatalf("lease = %+v", l)
		}
		if l.Packet.SessionID != sess.SessionID || l.Packet.BasedOnVersion != 3 || l.Packet.Goal == "" ||
			l.Packet.ConfirmedFacts["order_total"] != "120 EUR" || len(l.Packet.Resources) != 1 || l.Packet.PrefixHash == "" {
			t.Fatalf("packet = %+v", l.Packet)
		}
		exp, err := ts.worker.Heartbeat(ctx, l.DelegationID, l.LeaseToken)
		if err != nil || exp.IsZero() {
			t.Fatalf("heartbeat = %v, %v", exp, err)
		}
		p, err := ts.worker.Packet(ctx, sess.SessionID)
		if err != nil || p.PrefixHash != l.Packet.PrefixHash || p.BasedOnVersion != 3 {
			t.Fatalf("packet = %+v, %v", p, err)
		}

		out, err := ts.worker.Result(ctx, l.DelegationID, completed(l))
		if err != nil {
			t.Fatalf("result: %v", err)
		}
		if out.Status != client.StatusCompleted || out.StateVersion != 4 || out.SessionID != sess.SessionID {
			t.Fatalf("result outcome = %+v", out)
		}

		got, err := ts.worker.GetSession(ctx, sess.SessionID)
		if err != nil || got.Status != client.StatusCompleted || got.StateVersion != 4 || got.Goal != "Refund order 1182 if eligible" || len(got.State) == 0 {
			t.Fatalf("session = %+v, %v", got, err)
		}
		evs, err := ts.worker.AllEvents(ctx, sess.SessionID)
		if err != nil {
			t.Fatal(err)
		}
		wantTypes := []string{"session.created", "delegation.created", "delegation.leased", "result.completed"}
		if len(evs) != len(wantTypes) {
			t.Fatalf("events = %+v", evs)
		}
		for i, e := range evs {
			if e.Type != wantTypes[i] || e.Seq != int64(i+1) || e.VersionAfter != int64(i+1) || e.Hash == "" {
				t.Fatalf("event %d = %+v", i, e)
			}
			if i > 0 && e.PrevHash != evs[i-1].Hash {
				t.Fatalf("event %d prev_hash %q, want %q", i, e.PrevHash, evs[i-1].Hash)
			}
		}
		var rp struct {
			ResultType string `json:"result_type"`
			Evidence   []client.Evidence
		}
		if err := evs[3].DecodePayload(&rp); err != nil || rp.ResultType != "completed" || len(rp.Evidence) != 1 {
			t.Fatalf("result payload = %+v, %v", rp, err)
		}
		page, err := ts.worker.Events(ctx, sess.SessionID, 2, 1)
		if err != nil || len(page.Events) != 1 || page.Events[0].Seq != 3 || page.NextAfterSeq != 3 {
			t.Fatalf("events page = %+v, %v", page, err)
		}
		st, err := ts.worker.StateAt(ctx, sess.SessionID, 2)
		if err != nil || !strings.Contains(string(st), `"queued"`) || strings.Contains(string(st), `"completed"`) {
			t.Fatalf("state at 2 = %s, %v", st, err)
		}
		if rep, err := s.Verify(ctx, models.VerifyOpts{}); err != nil || !rep.OK() {
			t.Fatalf("verify = %+v, %v", rep, err)
		}
	})
}

func TestTypedErrors(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		ts := newTestServer(t, s, nil)
		sess, _ := ts.delegated(t, "refunds", nil)

		// 409: a stale expected_version, with the current version.
		_, err := ts.controller.Pause(ctx, sess.SessionID, client.TransitionInput{ExpectedVersion: 1})
		var ce *client.ConflictError
		if !errors.As(err, &ce) || ce.CurrentVersion != 2 || !client.IsConflict(err) || !errors.Is(err, client.ErrConflict) {
			t.Fatalf("stale pause = %#v; want *ConflictError at version 2", err)
		}
		var p *client.Problem
		if !errors.As(err, &p) || p.Status != http.StatusConflict || client.StatusCode(err) != 409 {
			t.Fatalf("conflict does not unwrap to a 409 *Problem: %v", err)
		}

		// 422: every offending field is listed.
		_, err = ts.controller.Delegate(ctx, sess.SessionID, client.DelegateInput{Step: "x", ExpectedVersion: 2, LeaseSeconds: 4000, MaxAttempts: 50})
		var ve *client.ValidationError
		if !errors.As(err, &ve) || !client.IsValidation(err) {
			t.Fatalf("bad delegate = %v; want *ValidationError", err)
		}
		for _, f := range []string{"queue", "lease_seconds", "max_attempts"} {
			if _, ok := ve.Field(f); !ok {
				t.Errorf("validation error does not name %s: %+v", f, ve.Fields)
			}
		}

		// 422: an illegal transition (resume of a session that is not paused).
		if _, err := ts.controller.Resume(ctx, sess.SessionID, client.TransitionInput{ExpectedVersion: 2}); !client.IsValidation(err) {
			t.Fatalf("illegal resume = %v; want 422", err)
		}
		// 404, 401, 403.
		if _, err := ts.worker.GetSession(ctx, "ses_nope"); !client.IsNotFound(err) {
			t.Fatalf("unknown session = %v; want 404", err)
		}
		bad := client.New(ts.url, "tpk_not-a-token")
		if _, err := bad.GetSession(ctx, sess.SessionID); !client.IsUnauthorized(err) {
			t.Fatalf("bad token = %v; want 401", err)
		}
		if _, err := ts.worker.CreateSession(ctx, client.CreateSessionInput{Goal: "x"}); !client.IsForbidden(err) {
			t.Fatalf("worker creating a session = %v; want 403", err)
		}
		// A 4xx is not retried: the session is still at version 2.
		got, err := ts.controller.GetSession(ctx, sess.SessionID)
		if err != nil || got.StateVersion != 2 {
			t.Fatalf("session after refused writes = %+v, %v", got, err)
		}
	})
}

// flaky forwards requests to the real server but, for the first attempt of
// every write, throws the server's answer away and says 503 (or drops the
// connection): the write happened, the client does not know. It records the
// Idempotency-Key of every attempt.
type flaky struct {
	next     http.Handler
	dropConn bool
	mu       sync.Mutex
	seen     map[string]int // idempotency key → attempts
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if r.Method != http.MethodPost || key == "" {
		f.next.ServeHTTP(w, r)
		return
	}
	f.mu.Lock()
	f.seen[key]++
	first := f.seen[key] == 1
	f.mu.Unlock()
	if !first {
		f.next.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	f.next.ServeHTTP(rec, r)
	if f.dropConn {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
			return
		}
	}
	w.Header().Set("Retry-After", "0")
	http.Error(w, "upstream went away", http.StatusServiceUnavailable)
}

func TestRetriesReuseTheIdempotencyKey(t *testing.T) {
	for _, drop := range []bool{false, true} {
		name := "503"
		if drop {
			name = "connection-dropped"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := storetest.New(t, models.Postgres)
			ctx := context.Background()
			f := &flaky{dropConn: drop, seen: map[string]int{}}
			ts := newTestServer(t, s, func(h http.Handler) http.Handler { f.next = h; return f })

			// Every write below is applied by its first attempt, whose
			// answer is lost; the retry must get the first outcome back.
			sess, d := ts.delegated(t, "refunds", nil)
			l, err := ts.worker.Lease(ctx, "refunds", client.LeaseInput{Worker: "w-1", WaitSeconds: 1})
			if err != nil || l == nil || l.DelegationID != d.DelegationID {
				t.Fatalf("lease = %+v, %v", l, err)
			}
			out, err := ts.worker.Result(ctx, l.DelegationID, completed(l))
			if err != nil || out.Status != client.StatusCompleted || out.StateVersion != 4 {
				t.Fatalf("result = %+v, %v", out, err)
			}
			evs, err := ts.worker.AllEvents(ctx, sess.SessionID)
			if err != nil || len(evs) != 4 {
				t.Fatalf("events = %d, %v; want exactly 4 (nothing applied twice)", len(evs), err)
			}
			var n int64
			if err := s.DB.Model(&models.Session{}).Count(&n).Error; err != nil || n != 1 {
				t.Fatalf("sessions = %d, %v; want 1", n, err)
			}
			f.mu.Lock()
			if len(f.seen) != 4 {
				t.Fatalf("distinct idempotency keys = %d (%v); want one per logical call (4)", len(f.seen), f.seen)
			}
			for k, attempts := range f.seen {
				if attempts != 2 {
					t.Errorf("key %s sent %d times; want 2 (first attempt + one retry)", k, attempts)
				}
			}
			f.mu.Unlock()
			// A caller-chosen key: a deliberate repeat returns the first answer.
			a, err := ts.controller.CreateSession(ctx, client.CreateSessionInput{Goal: "once"}, client.WithIdempotencyKey("my-key"))
			if err != nil {
				t.Fatal(err)
			}
			b, err := ts.controller.CreateSession(ctx, client.CreateSessionInput{Goal: "once"}, client.WithIdempotencyKey("my-key"))
			if err != nil || b != a {
				t.Fatalf("repeat = %+v, %v; want %+v", b, err, a)
			}
		})
	}
}

func TestSpawnChildren(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	ts := newTestServer(t, s, nil)
	parent, err := ts.controller.CreateSession(ctx, client.CreateSessionInput{Goal: "Refund and reship order 9"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := ts.controller.SpawnChildren(ctx, parent.SessionID, client.SpawnChildrenInput{
		ExpectedVersion: parent.StateVersion,
		Join:            client.JoinInput{Policy: "all", TimeoutSeconds: 600},
		Children: []client.ChildInput{
			{Goal: "Refund order 9", Queue: "refunds", Step: "refund"},
			{Goal: "Reship order 9", Queue: "shipping", Step: "reship"},
		},
	})
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	if len(out.Children) != 2 || out.StateVersion != 2 || out.Status != client.StatusWaitingChildren {
		t.Fatalf("spawn = %+v", out)
	}
	for _, c := range out.Children {
		got, err := ts.worker.GetSession(ctx, c.SessionID)
		if err != nil || got.ParentID == nil || *got.ParentID != parent.SessionID {
			t.Fatalf("child %s = %+v, %v; want parent %s", c.SessionID, got, err, parent.SessionID)
		}
	}
	// A stale fan-out is a conflict naming the current version.
	_, err = ts.controller.SpawnChildren(ctx, parent.SessionID, client.SpawnChildrenInput{
		ExpectedVersion: 1, Join: client.JoinInput{Policy: "any"},
		Children: []client.ChildInput{{Goal: "x", Queue: "refunds", Step: "x"}},
	})
	var ce *client.ConflictError
	if !errors.As(err, &ce) || ce.CurrentVersion != 2 {
		t.Fatalf("stale spawn = %v; want a conflict at version 2", err)
	}
}
