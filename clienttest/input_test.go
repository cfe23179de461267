package clienttest

import (
	"context"
	"errors"
	"testing"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestProvideInput answers a worker's question through the client,
// delegating the next step; a second answer is a *ValidationError and a
// stale one a *ConflictError with the current version.
func TestProvideInput(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		ts := newTestServer(t, s, nil)
		id, did := storetest.Delegated(ctx, t, s, "refunds")
		l, err := s.Claim(ctx, "refunds", "w-1", "token:worker", "")
		if err != nil || l == nil {
			t.Fatalf("lease: %v %v", l, err)
		}
		if _, err := s.SubmitResult(ctx, did, "token:worker", "", models.ResultInput{LeaseToken: l.LeaseToken, SessionID: id,
			Step: "check-eligibility", ResultType: models.ResultNeedsInput, Question: "Which card?"}); err != nil {
			t.Fatal(err)
		}

		_, err = ts.controller.ProvideInput(ctx, id, client.InputInput{ExpectedVersion: 3, Answer: "Visa"})
		var ce *client.ConflictError
		if !errors.As(err, &ce) || ce.CurrentVersion != 4 {
			t.Fatalf("stale answer = %v", err)
		}
		out, err := ts.controller.ProvideInput(ctx, id, client.InputInput{ExpectedVersion: 4, Answer: "Visa",
			Delegate: &client.InputDelegate{Queue: "payments", Step: "issue-refund", LeaseSeconds: 60}})
		if err != nil || out.Status != "queued" || out.StateVersion != 6 || out.SessionID != id {
			t.Fatalf("answer = %+v, %v", out, err)
		}
		_, err = ts.controller.ProvideInput(ctx, id, client.InputInput{ExpectedVersion: 6, Answer: "again"})
		var ve *client.ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("second answer = %v", err)
		}
		_, err = ts.controller.ProvideInput(ctx, id, client.InputInput{ExpectedVersion: 6, Delegate: &client.InputDelegate{Queue: "bad queue!"}})
		if !errors.As(err, &ve) {
			t.Fatalf("invalid answer = %v", err)
		}
		for _, f := range []string{"answer", "delegate.queue", "delegate.step"} {
			if _, ok := ve.Field(f); !ok {
				t.Errorf("422 does not name %s: %v", f, ve.Fields)
			}
		}
	})
}
