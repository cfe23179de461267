package clienttest

import (
	"context"
	"testing"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestTraceCrossesTheQueue: a controller delegates under a context with a
// traceparent (client.WithTraceparent), the lease exposes it
// (Lease.Traceparent), and client.Worker sends it with the result, so the
// controller's delegation.created and the worker's result.completed events
// carry the same traceparent; the lease request, sent without one, records
// none.
func TestTraceCrossesTheQueue(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ts := newTestServer(t, s, nil)
		const tp, tstate = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "congo=t61rcWkgMzE"
		ctx := context.Background()
		sess, err := ts.controller.CreateSession(ctx, client.CreateSessionInput{Goal: "Refund order 1182"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ts.controller.Delegate(client.WithTraceparent(ctx, tp, tstate), sess.SessionID,
			client.DelegateInput{Queue: "traced", Step: "check", ExpectedVersion: sess.StateVersion}); err != nil {
			t.Fatal(err)
		}
		log := newResultLog(1)
		var seen string
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		w := &client.Worker{Client: ts.worker, Queue: "traced", Name: "w-trace", WaitSeconds: 1, OnResult: log.record,
			Handler: func(ctx context.Context, l *client.Lease) (client.ResultInput, error) {
				seen, _ = client.Traceparent(ctx)
				if l.Traceparent != tp || l.Tracestate != tstate {
					t.Errorf("lease trace context %q %q; want %q %q", l.Traceparent, l.Tracestate, tp, tstate)
				}
				return client.ResultInput{ResultType: client.ResultCompleted, Evidence: []client.Evidence{{Claim: "ok", Source: "test"}}}, nil
			}}
		errc := make(chan error, 1)
		go func() { errc <- w.Run(wctx) }()
		<-log.done
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if seen != tp {
			t.Errorf("handler context traceparent %q; want the lease's", seen)
		}
		evs, err := s.ListEvents(ctx, sess.SessionID, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		want := map[models.EventType]string{models.EventSessionCreated: "", models.EventDelegationCreated: tp,
			models.EventDelegationLeased: "", models.EventResultCompleted: tp}
		for _, ev := range evs {
			if ev.Traceparent != want[ev.Type] {
				t.Errorf("%s: traceparent %q; want %q", ev.Type, ev.Traceparent, want[ev.Type])
			}
		}
	})
}
