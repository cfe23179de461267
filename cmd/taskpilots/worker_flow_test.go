package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/handlers/apicontract"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/demo"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// TestDemoWorkerFlowsThroughRoutes runs the demo worker against a seeded
// demo server: the refund waiting in the queue (T-1238) flows through the
// demo's routes, check-eligibility → issue-refund → notify-customer, to
// completed, with two delegations by system:router and no controller; the
// deliberately unrouted T-1247 stays stalled.
func TestDemoWorkerFlowsThroughRoutes(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if _, err := demo.Seed(ctx, s); err != nil {
			t.Fatal(err)
		}
		token, _, err := s.CreateToken(ctx, "flow-worker", models.RoleWorker)
		if err != nil {
			t.Fatal(err)
		}
		h, err := web.NewServer(s, web.Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		// API exchanges are validated against the OpenAPI document.
		srv := httptest.NewServer(apicontract.Handler(t, h))
		defer srv.Close()
		dw := &demoWorker{seed: 1, log: slog.New(slog.DiscardHandler)}
		w := &client.Worker{Client: client.New(srv.URL, token), Queues: DemoQueues, Name: "flow", Concurrency: len(DemoQueues),
			WaitSeconds: 1, GracePeriod: time.Second, Handler: dw.handle}
		done := make(chan error, 1)
		go func() { done <- w.Run(wctx) }()

		refund := sessionByTicket(ctx, t, s, "T-1238")
		deadline := time.Now().Add(30 * time.Second)
		var st models.State
		for {
			row, err := s.GetSession(ctx, refund)
			if err != nil {
				t.Fatal(err)
			}
			if st, err = row.Decode(); err != nil {
				t.Fatal(err)
			}
			if st.Status.Terminal() || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
		<-done
		var steps []string
		for _, c := range st.CompletedSteps {
			steps = append(steps, c.Step)
		}
		if st.Status != models.StatusCompleted || strings.Join(steps, ",") != "check-eligibility,issue-refund,notify-customer" {
			t.Fatalf("T-1238 = %s after %v", st.Status, steps)
		}
		evs, err := s.ListEvents(ctx, refund, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		routed := 0
		for _, e := range evs {
			if e.Type == models.EventDelegationCreated && e.Actor == models.RouterActor {
				routed++
			}
		}
		if routed != 2 {
			t.Fatalf("T-1238 has %d delegations by the router, want 2", routed)
		}
		lost, err := s.GetSession(ctx, sessionByTicket(ctx, t, s, "T-1247"))
		if err != nil {
			t.Fatal(err)
		}
		if step, err := s.StalledStep(ctx, lost); err != nil || step != demo.UnroutedStep {
			t.Fatalf("T-1247 stalled on %q, %v", step, err)
		}
	})
}

func sessionByTicket(ctx context.Context, t *testing.T, s *models.Store, ref string) string {
	t.Helper()
	page, err := s.ListSessions(ctx, models.SessionQuery{TicketRef: ref})
	if err != nil || len(page.Sessions) == 0 {
		t.Fatalf("session of %s: %v", ref, err)
	}
	return page.Sessions[0].ID
}
