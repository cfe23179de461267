package web

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestQueueGauges scrapes the per-queue gauges: ready depth, in flight,
// oldest ready age and stalled sessions (labelled by their last queue), read
// from the database at scrape time.
func TestQueueGauges(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
		clock := &testClock{now: t0}
		s.Now = clock.Now
		m := newMetrics(s)

		// refunds: four delegations; the first (t0) is leased and completed
		// naming an unrouted step (stalled), the second is in flight, two
		// are ready since t0+5s.
		storetest.Delegated(ctx, t, s, "refunds")
		clock.Set(t0.Add(5 * time.Second))
		for range 3 {
			storetest.Delegated(ctx, t, s, "refunds")
		}
		l, err := s.Claim(ctx, "refunds", "w-1", "test:worker", "")
		if err != nil || l == nil {
			t.Fatal(l, err)
		}
		if _, err := s.SubmitResult(ctx, l.DelegationID, "test:worker", "", models.ResultInput{
			LeaseToken: l.LeaseToken, SessionID: l.SessionID, Step: l.Step, ResultType: models.ResultCompleted,
			Output: json.RawMessage(`{}`), Evidence: []models.Evidence{{Claim: "ok"}}, NextStep: "unrouted-step",
		}); err != nil {
			t.Fatal(err)
		}
		if l, err := s.Claim(ctx, "refunds", "w-2", "test:worker", ""); err != nil || l == nil {
			t.Fatal(l, err)
		}
		clock.Set(t0.Add(65 * time.Second))

		wantSamples(t, scrape(t, m.handler()), map[string]float64{
			`taskpilots_queue_ready{queue="refunds"}`:                    2,
			`taskpilots_queue_in_flight{queue="refunds"}`:                1,
			`taskpilots_queue_oldest_ready_age_seconds{queue="refunds"}`: 60,
			`taskpilots_queue_stalled_sessions{queue="refunds"}`:         1,
		})
	})
}

// TestQueueFlowGauges: a queue's flow limits are gauges per queue, only for
// the limits it has; the bucket shows what it would grant now.
func TestQueueFlowGauges(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
		clock := &testClock{now: t0}
		s.Now = clock.Now
		m := newMetrics(s)
		four, rate := 4, 2.0
		if _, err := s.PutQueueFlow(ctx, "test:admin", "", "refunds", models.QueueFlowInput{MaxInFlight: &four, MaxLeasesPerSecond: &rate}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutQueueFlow(ctx, "test:admin", "", "billing", models.QueueFlowInput{MaxInFlight: &four}); err != nil {
			t.Fatal(err)
		}
		storetest.Delegated(ctx, t, s, "refunds")
		if l, err := s.Claim(ctx, "refunds", "w-1", "test:worker", ""); err != nil || l == nil {
			t.Fatal(l, err)
		}
		body := scrape(t, m.handler())
		wantSamples(t, body, map[string]float64{
			`taskpilots_queue_max_in_flight{queue="refunds"}`:         4,
			`taskpilots_queue_max_in_flight{queue="billing"}`:         4,
			`taskpilots_queue_max_leases_per_second{queue="refunds"}`: 2,
			`taskpilots_queue_lease_tokens{queue="refunds"}`:          1,
		})
		if _, ok := body[`taskpilots_queue_max_leases_per_second{queue="billing"}`]; ok {
			t.Fatalf("a rate gauge for a queue without a rate: %v", body)
		}
	})
}
