package clienttest

import (
	"context"
	"errors"
	"testing"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestClientRoutes: the SDK's route methods against the real server, and a
// routed result seen through the SDK.
func TestClientRoutes(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		ts := newTestServer(t, s, nil)
		r, err := ts.controller.PutRoute(ctx, "issue-refund", client.RouteInput{Queue: "payments", Instructions: "Refund.", MaxAttempts: 5})
		if err != nil || r.Step != "issue-refund" || r.Queue != "payments" || r.MaxAttempts != 5 || r.LeaseSeconds != 30 || r.CreatedAt.IsZero() {
			t.Fatalf("put = %+v, %v", r, err)
		}
		var ve *client.ValidationError
		if _, err := ts.controller.PutRoute(ctx, "x", client.RouteInput{Queue: "bad queue", LeaseSeconds: 4000}); !errors.As(err, &ve) {
			t.Fatalf("bad route = %v", err)
		} else if _, ok := ve.Field("lease_seconds"); !ok {
			t.Fatalf("bad route does not name lease_seconds: %v", err)
		}
		if _, err := ts.worker.PutRoute(ctx, "x", client.RouteInput{Queue: "q"}); err == nil {
			t.Fatal("a worker put a route")
		}
		if got, err := ts.worker.GetRoute(ctx, "issue-refund"); err != nil || got.Queue != "payments" {
			t.Fatalf("get = %+v, %v", got, err)
		}
		if list, err := ts.worker.Routes(ctx); err != nil || len(list) != 1 {
			t.Fatalf("list = %+v, %v", list, err)
		}

		out, err := ts.controller.CreateSession(ctx, client.CreateSessionInput{Goal: "Refund order 1182"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ts.controller.Delegate(ctx, out.SessionID, client.DelegateInput{Queue: "refunds", Step: "check", ExpectedVersion: 1}); err != nil {
			t.Fatal(err)
		}
		l, err := ts.worker.Lease(ctx, "refunds", client.LeaseInput{Worker: "w-1"})
		if err != nil || l == nil {
			t.Fatal(l, err)
		}
		res, err := ts.worker.Result(ctx, l.DelegationID, client.ResultInput{LeaseToken: l.LeaseToken, SessionID: l.SessionID, Step: l.Step,
			ResultType: "completed", Output: map[string]any{"eligible": true}, Evidence: []client.Evidence{{Claim: "paid"}}, NextStep: "issue-refund"})
		if err != nil || res.Status != "queued" {
			t.Fatalf("routed result = %+v, %v", res, err)
		}
		if l2, err := ts.worker.Lease(ctx, "payments", client.LeaseInput{Worker: "w-2"}); err != nil || l2 == nil || l2.Step != "issue-refund" {
			t.Fatalf("lease of the routed step = %+v, %v", l2, err)
		}

		if err := ts.controller.DeleteRoute(ctx, "issue-refund"); err != nil {
			t.Fatal(err)
		}
		if err := ts.controller.DeleteRoute(ctx, "issue-refund"); !client.IsNotFound(err) {
			t.Fatalf("second delete = %v", err)
		}
		if _, err := ts.worker.GetRoute(ctx, "issue-refund"); !client.IsNotFound(err) {
			t.Fatalf("get deleted = %v", err)
		}
	})
}

// TestClientDrainRoute: DrainRoute delegates a session that stalled before
// its step had a route.
func TestClientDrainRoute(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		ts := newTestServer(t, s, nil)
		out, err := ts.controller.CreateSession(ctx, client.CreateSessionInput{Goal: "Refund order 1182"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ts.controller.Delegate(ctx, out.SessionID, client.DelegateInput{Queue: "refunds", Step: "check", ExpectedVersion: 1}); err != nil {
			t.Fatal(err)
		}
		l, err := ts.worker.Lease(ctx, "refunds", client.LeaseInput{Worker: "w-1"})
		if err != nil || l == nil {
			t.Fatal(l, err)
		}
		if res, err := ts.worker.Result(ctx, l.DelegationID, client.ResultInput{LeaseToken: l.LeaseToken, SessionID: l.SessionID, Step: l.Step,
			ResultType: "completed", Output: map[string]any{}, Evidence: []client.Evidence{{Claim: "paid"}}, NextStep: "notify-customer"}); err != nil || res.Status != "open" {
			t.Fatalf("unrouted result = %+v, %v", res, err)
		}
		if _, err := ts.controller.DrainRoute(ctx, "notify-customer", 0); !client.IsNotFound(err) {
			t.Fatalf("drain without a route = %v", err)
		}
		if _, err := ts.controller.PutRoute(ctx, "notify-customer", client.RouteInput{Queue: "mail"}); err != nil {
			t.Fatal(err)
		}
		res, err := ts.controller.DrainRoute(ctx, "notify-customer", 5)
		if err != nil || len(res.Delegated) != 1 || res.Delegated[0].SessionID != out.SessionID || res.More {
			t.Fatalf("drain = %+v, %v", res, err)
		}
	})
}
