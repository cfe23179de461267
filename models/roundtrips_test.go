package models_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestLifecycleRoundTrips pins what the hot commands cost on PostgreSQL in
// round trips, which is what bounds throughput (README, "Benchmark
// results"): a statement that slips out of its batch shows up here rather
// than as a slower benchmark. Every command carries an idempotency key, as
// the SDK's do.
func TestLifecycleRoundTrips(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	measure := func(name string, wantTrips, wantStatements int64, fn func()) {
		t.Helper()
		st0, rt0 := s.WireStats()
		fn()
		st1, rt1 := s.WireStats()
		if rt1-rt0 != wantTrips || st1-st0 != wantStatements {
			t.Errorf("%s: %d round trips, %d statements; want %d and %d", name, rt1-rt0, st1-st0, wantTrips, wantStatements)
		}
	}
	var sid string
	// One batch, run by PostgreSQL as one implicit transaction: the
	// session with its event, and the idempotency record.
	measure("create", 1, 2, func() {
		out, err := s.CreateSession(ctx, "test:controller", "rt-create", models.CreateSessionInput{Goal: "Refund order 1182"})
		if err != nil {
			t.Fatal(err)
		}
		sid = out.SessionID
	})
	// BEGIN + lock; projection with event, delegation, idempotency, COMMIT.
	v := int64(1)
	measure("delegate", 2, 6, func() {
		if _, err := s.Delegate(ctx, sid, "test:controller", "rt-delegate", models.DelegateInput{
			Queue: "rt-queue", Step: "check", ExpectedVersion: &v}); err != nil {
			t.Fatal(err)
		}
	})
	// BEGIN + the claim that also locks the session; projection with
	// event, idempotency, COMMIT.
	var lease *models.Lease
	measure("lease", 2, 5, func() {
		var err error
		if lease, err = s.Claim(ctx, "rt-queue", "w-1", "test:worker", "rt-lease"); err != nil || lease == nil {
			t.Fatalf("claim = %v, %v", lease, err)
		}
	})
	// BEGIN + session and delegation locked together; projection with
	// event, delegation, idempotency, COMMIT.
	measure("result", 2, 7, func() {
		if _, err := s.SubmitResult(ctx, lease.DelegationID, "test:worker", "rt-result", models.ResultInput{
			LeaseToken: lease.LeaseToken, SessionID: sid, Step: lease.Step, ResultType: models.ResultCompleted,
			Output: json.RawMessage(`{"eligible": true}`), Evidence: []models.Evidence{{Claim: "order paid"}},
		}); err != nil {
			t.Fatal(err)
		}
	})

	// A completed result whose next_step has a route: the route is read in
	// the lock's batch and the routed delegation (its event and row) is
	// queued with the result's writes, so routing costs two statements and
	// no round trip.
	if _, err := s.PutRoute(ctx, "test:controller", "", "issue-refund", models.RouteInput{Queue: "rt-queue-2"}); err != nil {
		t.Fatal(err)
	}
	sid2, _ := storetest.Delegated(ctx, t, s, "rt-queue")
	lease, err := s.Claim(ctx, "rt-queue", "w-1", "test:worker", "")
	if err != nil || lease == nil || lease.SessionID != sid2 {
		t.Fatalf("claim = %v, %v", lease, err)
	}
	measure("routed result", 2, 10, func() {
		out, err := s.SubmitResult(ctx, lease.DelegationID, "test:worker", "rt-routed", models.ResultInput{
			LeaseToken: lease.LeaseToken, SessionID: sid2, Step: lease.Step, ResultType: models.ResultCompleted,
			Output: json.RawMessage(`{"eligible": true}`), Evidence: []models.Evidence{{Claim: "order paid"}},
			NextStep: "issue-refund",
		})
		if err != nil || out.Status != models.StatusQueued {
			t.Fatalf("routed result = %+v, %v", out, err)
		}
	})
}
