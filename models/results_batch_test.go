package models_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// leased creates n sessions with a delegation on queue each and leases them.
func leased(ctx context.Context, t *testing.T, s *models.Store, queue string, n int) []models.Lease {
	t.Helper()
	for range n {
		storetest.Delegated(ctx, t, s, queue)
	}
	ls, err := s.ClaimBatch(ctx, queue, "w-1", "test:worker", "", n)
	if err != nil || len(ls) != n {
		t.Fatalf("claim batch = %d leases, %v", len(ls), err)
	}
	return ls
}

func completed(l models.Lease, key string) models.ResultSubmission {
	return models.ResultSubmission{DelegationID: l.DelegationID, IdempotencyKey: key, Input: models.ResultInput{
		LeaseToken: l.LeaseToken, SessionID: l.SessionID, Step: l.Step, ResultType: models.ResultCompleted,
		Output: json.RawMessage(`{"eligible": true}`), Evidence: []models.Evidence{{Claim: "order paid"}},
	}}
}

// TestSubmitResultsMixed sends a batch where some items are fenced, break
// the contract or are stale, and checks each gets its own outcome in order,
// the valid ones commit, the failed ones write nothing, a repeat of the
// batch replays the first outcomes, and every invariant holds.
func TestSubmitResultsMixed(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	ls := leased(ctx, t, s, "rb", 6)
	items := make([]models.ResultSubmission, len(ls))
	for i, l := range ls {
		items[i] = completed(l, fmt.Sprintf("rb-%d", i))
	}
	items[1].Input.LeaseToken = "not-the-token" // fenced
	items[3].Input.ResultType = "bogus"         // contract
	items[4].Input.Step = "another-step"        // contract (mismatch)
	g0 := s.GroupStats()
	out, err := s.SubmitResults(ctx, "test:worker", items)
	if err != nil || len(out) != len(items) {
		t.Fatalf("submit results = %d, %v", len(out), err)
	}
	var le *models.LeaseError
	if !errors.As(out[1].Err, &le) {
		t.Errorf("fenced item: %+v", out[1])
	}
	for _, i := range []int{3, 4} {
		var ve *models.ValidationError
		if !errors.As(out[i].Err, &ve) {
			t.Errorf("invalid item %d: %+v", i, out[i])
		}
	}
	for _, i := range []int{0, 2, 5} {
		if out[i].Err != nil || out[i].Outcome.SessionID != ls[i].SessionID || out[i].Outcome.Status != models.StatusCompleted {
			t.Errorf("item %d: %+v", i, out[i])
		}
	}
	if gs := s.GroupStats(); gs.Groups-g0.Groups != 1 {
		t.Errorf("group stats %+v, want one group", gs)
	}
	for _, i := range []int{1, 3, 4} {
		evs, err := s.ListEvents(ctx, ls[i].SessionID, 0, 100)
		if err != nil || len(evs) != 3 { // created, delegated, leased
			t.Errorf("failed item %d: %d events, %v", i, len(evs), err)
		}
	}
	// The same batch again: the committed items replay, nothing new.
	again, err := s.SubmitResults(ctx, "test:worker", items)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2, 5} {
		if again[i].Err != nil || !again[i].Outcome.Replayed || again[i].Outcome.EventID != out[i].Outcome.EventID {
			t.Errorf("replayed item %d: %+v, first %+v", i, again[i], out[i])
		}
	}
	// The fenced item, now with its token, commits on its own.
	items[1].Input.LeaseToken = ls[1].LeaseToken
	if o, err := s.SubmitResults(ctx, "test:worker", items[1:2]); err != nil || o[0].Err != nil {
		t.Errorf("fixed item: %+v, %v", o, err)
	}
	if _, err := s.SubmitResults(ctx, "test:worker", make([]models.ResultSubmission, models.MaxResultBatch+1)); models.ErrorCode(err) != models.EINVALID {
		t.Errorf("too many results: %v", err)
	}
	rep, err := s.Verify(ctx, models.VerifyOpts{})
	if err != nil || !rep.OK() {
		t.Fatalf("verify: %+v, %v", rep.Problems, err)
	}
}

// TestSubmitResultsRoundTrips pins what a batch of results costs: one item
// costs what SubmitResult does (TestLifecycleRoundTrips), and n items cost
// n+1 round trips (BEGIN with the first item's lock; each next item's lock
// with the previous item's writes; COMMIT with the last's) and five
// statements each (the two lock reads, the projection with its event, the
// delegation, the idempotency key) plus BEGIN and COMMIT.
func TestSubmitResultsRoundTrips(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	measure := func(name string, wantTrips, wantStatements int64, items []models.ResultSubmission) {
		t.Helper()
		st0, rt0 := s.WireStats()
		out, err := s.SubmitResults(ctx, "test:worker", items)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			if o.Err != nil {
				t.Fatalf("%s: item %d: %v", name, i, o.Err)
			}
		}
		st1, rt1 := s.WireStats()
		if rt1-rt0 != wantTrips || st1-st0 != wantStatements {
			t.Errorf("%s: %d round trips, %d statements; want %d and %d", name, rt1-rt0, st1-st0, wantTrips, wantStatements)
		}
	}
	ls := leased(ctx, t, s, "rb-rt", 1)
	measure("one result", 2, 7, []models.ResultSubmission{completed(ls[0], "rt-1")})
	const n = 20
	ls = leased(ctx, t, s, "rb-rt", n)
	items := make([]models.ResultSubmission, n)
	for i, l := range ls {
		items[i] = completed(l, fmt.Sprintf("rt-n-%d", i))
	}
	measure(fmt.Sprintf("%d results", n), n+1, 5*n+2, items)
}
