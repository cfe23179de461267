package models_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestLifecycle walks one session through delegate, lease and a completed
// result on each dialect and checks the log replays to the stored state.
func TestLifecycle(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		sid, did := storetest.Delegated(ctx, t, s, "refunds")
		l, err := s.Claim(ctx, "refunds", "w-1", "test:worker", "")
		if err != nil || l == nil {
			t.Fatalf("claim: %v %v", l, err)
		}
		if l.DelegationID != did || l.Attempt != 1 || l.Packet.BasedOnVersion != 3 {
			t.Fatalf("lease = %+v", l)
		}
		if !l.LeaseExpiresAt.After(time.Now()) {
			t.Fatalf("lease expires at %v", l.LeaseExpiresAt)
		}
		if _, err := s.Heartbeat(ctx, did, l.LeaseToken); err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
		out, err := s.SubmitResult(ctx, did, "test:worker", "k1", models.ResultInput{
			LeaseToken: l.LeaseToken, SessionID: sid, Step: "check-eligibility", ResultType: "completed",
			Output: json.RawMessage(`{"eligible": true, "amount": 240.50}`), Evidence: []models.Evidence{{Claim: "paid", Source: "orders-db:1182"}},
		})
		if err != nil {
			t.Fatalf("result: %v", err)
		}
		if out.Status != models.StatusCompleted || out.StateVersion != 4 {
			t.Fatalf("outcome = %+v", out)
		}
		rep, err := s.Verify(ctx, models.VerifyOpts{})
		if err != nil || !rep.OK() || rep.Events != 4 {
			t.Fatalf("verify = %+v, %v", rep, err)
		}
	})
}
