package clienttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// resultLog collects what a Worker reported.
type resultLog struct {
	mu      sync.Mutex
	results map[string][]string // delegation id → result types applied
	errs    []error
	done    chan struct{}
	want    int
	applied int
}

func newResultLog(want int) *resultLog {
	return &resultLog{results: map[string][]string{}, done: make(chan struct{}), want: want}
}

func (r *resultLog) record(l *client.Lease, in client.ResultInput, out client.Outcome, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs = append(r.errs, err)
		return
	}
	r.results[l.DelegationID] = append(r.results[l.DelegationID], in.ResultType)
	if in.ResultType == client.ResultCompleted {
		r.applied++
		if r.applied == r.want {
			close(r.done)
		}
	}
}

func TestWorkerRunsDelegations(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ts := newTestServer(t, s, nil)
		const n = 24
		ids := map[string]bool{}
		for range n {
			_, d := ts.delegated(t, "refunds", map[string]any{"order_total": "50 EUR"})
			ids[d.DelegationID] = true
		}
		log := newResultLog(n)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w := &client.Worker{
			Client: ts.worker, Queue: "refunds", Name: "w-test", Concurrency: 4, WaitSeconds: 1, OnResult: log.record,
			Handler: func(ctx context.Context, l *client.Lease) (client.ResultInput, error) {
				if l.Packet.ConfirmedFacts["order_total"] != "50 EUR" {
					return client.ResultInput{}, client.Permanent(fmt.Errorf("packet without facts: %+v", l.Packet))
				}
				// Leave LeaseToken, SessionID and Step for the Worker to fill in.
				return client.ResultInput{ResultType: client.ResultCompleted,
					Evidence: []client.Evidence{{Claim: "total is 50 EUR", Source: "facts.order_total"}}}, nil
			},
		}
		errc := make(chan error, 1)
		go func() { errc <- w.Run(ctx) }()
		select {
		case <-log.done:
		case err := <-errc:
			t.Fatalf("Run returned early: %v", err)
		}
		cancel()
		if err := <-errc; err != nil {
			t.Fatalf("Run: %v", err)
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		if len(log.errs) > 0 {
			t.Fatalf("result errors: %v", log.errs)
		}
		for id := range ids {
			if got := log.results[id]; len(got) != 1 || got[0] != client.ResultCompleted {
				t.Errorf("delegation %s results %v; want exactly one completed", id, got)
			}
		}
		counts, err := s.CountByStatus(context.Background())
		if err != nil || counts[models.StatusCompleted] != n {
			t.Fatalf("statuses = %v, %v", counts, err)
		}
	})
}

func TestWorkerReportsHandlerErrors(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	ts := newTestServer(t, s, nil)
	bad, _ := ts.delegated(t, "billing", nil)
	perm, _ := ts.delegated(t, "billing", nil)
	log := newResultLog(-1)
	var mu sync.Mutex
	seen := 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &client.Worker{
		Client: ts.worker, Queue: "billing", Name: "w-err", WaitSeconds: 1,
		OnResult: func(l *client.Lease, in client.ResultInput, out client.Outcome, err error) {
			log.record(l, in, out, err)
			mu.Lock()
			seen++
			if seen == 2 {
				cancel()
			}
			mu.Unlock()
		},
		Handler: func(ctx context.Context, l *client.Lease) (client.ResultInput, error) {
			if l.SessionID == bad.SessionID {
				return client.ResultInput{}, client.BadInput(errors.New("no invoice number"))
			}
			return client.ResultInput{}, client.Permanent(errors.New("invoice system refuses"))
		},
	}
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{bad.SessionID: client.StatusAwaitingInput, perm.SessionID: client.StatusEscalated} {
		got, err := ts.controller.GetSession(context.Background(), id)
		if err != nil || got.Status != want {
			t.Errorf("session %s = %s, %v; want %s", id, got.Status, err, want)
		}
	}
}

// A heartbeat refused with 409 (the session was paused, revoking the lease)
// cancels the handler's context with ErrLeaseLost and drops the result.
func TestWorkerStopsOnLostLease(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	ts := newTestServer(t, s, nil)
	sess, _ := ts.controller.CreateSession(context.Background(), client.CreateSessionInput{Goal: "Ship order 7"})
	if _, err := ts.controller.Delegate(context.Background(), sess.SessionID, client.DelegateInput{
		Queue: "shipping", Step: "book-carrier", ExpectedVersion: 1, LeaseSeconds: 1,
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cause := make(chan error, 1)
	reported := make(chan error, 1)
	w := &client.Worker{
		Client: ts.worker, Queue: "shipping", Name: "w-lost", WaitSeconds: 1,
		OnResult: func(l *client.Lease, in client.ResultInput, out client.Outcome, err error) { reported <- err },
		Handler: func(hctx context.Context, l *client.Lease) (client.ResultInput, error) {
			// The controller pauses the session while the worker holds it.
			if _, err := ts.controller.Pause(context.Background(), l.SessionID, client.TransitionInput{ExpectedVersion: l.Packet.BasedOnVersion, Reason: "customer called"}); err != nil {
				t.Errorf("pause: %v", err)
			}
			<-hctx.Done()
			cause <- context.Cause(hctx)
			return client.ResultInput{}, hctx.Err()
		},
	}
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	if got := <-cause; !errors.Is(got, client.ErrLeaseLost) {
		t.Fatalf("handler context cause = %v; want ErrLeaseLost", got)
	}
	if got := <-reported; !errors.Is(got, client.ErrLeaseLost) {
		t.Fatalf("OnResult err = %v; want ErrLeaseLost", got)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	got, err := ts.controller.GetSession(context.Background(), sess.SessionID)
	if err != nil || got.Status != client.StatusPaused || got.StateVersion != 4 {
		t.Fatalf("session = %s v%d, %v; want paused at 4 (no result applied)", got.Status, got.StateVersion, err)
	}
}

// Cancelling Run stops leasing, but work in flight finishes and its result
// is sent before Run returns.
func TestWorkerGracefulShutdown(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	ts := newTestServer(t, s, nil)
	ts.delegated(t, "accounts", nil)
	ts.delegated(t, "accounts", nil)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	w := &client.Worker{
		Client: ts.worker, Queue: "accounts", Name: "w-grace", WaitSeconds: 1,
		Handler: func(hctx context.Context, l *client.Lease) (client.ResultInput, error) {
			once.Do(func() { close(started) })
			select {
			case <-release:
			case <-hctx.Done():
				return client.ResultInput{}, hctx.Err()
			}
			return client.ResultInput{ResultType: client.ResultCompleted, Evidence: []client.Evidence{{Claim: "account found"}}}, nil
		},
	}
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	<-started
	cancel()
	select {
	case err := <-errc:
		t.Fatalf("Run returned before in-flight work finished: %v", err)
	default:
	}
	close(release)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	counts, err := s.CountByStatus(context.Background())
	if err != nil || counts[models.StatusCompleted] != 1 || counts[models.StatusQueued] != 1 {
		t.Fatalf("statuses = %v, %v; want one completed (the in-flight one) and one still queued", counts, err)
	}
}
