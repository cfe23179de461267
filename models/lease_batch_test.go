package models_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestClaimBatch: a batch claim leases up to max delegations in claim
// order, each a lease of its own (token, delegation.leased event, fencing),
// and replays its list under the same idempotency key.
func TestClaimBatch(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		var dels []string
		for range 4 {
			_, did := storetest.Delegated(ctx, t, s, "batch")
			dels = append(dels, did)
		}
		ls, err := s.ClaimBatch(ctx, "batch", "w-1", "test:worker", "batch-key", 3)
		if err != nil || len(ls) != 3 {
			t.Fatalf("claim batch = %+v, %v", ls, err)
		}
		tokens := map[string]bool{}
		for i, l := range ls {
			if l.DelegationID != dels[i] || l.Attempt != 1 || tokens[l.LeaseToken] || l.Packet.SessionID != l.SessionID {
				t.Fatalf("lease %d = %+v; want delegation %s with a token of its own", i, l, dels[i])
			}
			tokens[l.LeaseToken] = true
			evs, err := s.ListEvents(ctx, l.SessionID, 0, 100)
			if err != nil || evs[len(evs)-1].Type != models.EventDelegationLeased {
				t.Fatalf("events of %s: %+v, %v", l.SessionID, evs, err)
			}
		}
		again, err := s.ClaimBatch(ctx, "batch", "w-1", "test:worker", "batch-key", 3)
		if err != nil || len(again) != 3 || again[0].LeaseToken != ls[0].LeaseToken {
			t.Fatalf("replay = %+v, %v; want the first outcome", again, err)
		}
		// Fencing is per lease: another lease's token is refused.
		in := models.ResultInput{ResultType: models.ResultCompleted, Output: json.RawMessage(`{}`),
			Evidence:   []models.Evidence{{Claim: "order paid"}},
			LeaseToken: ls[1].LeaseToken, SessionID: ls[0].SessionID, Step: ls[0].Step}
		if _, err := s.SubmitResult(ctx, ls[0].DelegationID, "test:worker", "", in); models.ErrorCode(err) != models.ECONFLICT {
			t.Fatalf("result with another lease's token = %v; want a conflict", err)
		}
		in.LeaseToken = ls[0].LeaseToken
		if _, err := s.SubmitResult(ctx, ls[0].DelegationID, "test:worker", "", in); err != nil {
			t.Fatalf("result with its own token: %v", err)
		}
		rest, err := s.ClaimBatch(ctx, "batch", "w-2", "test:worker", "", 100)
		if err != nil || len(rest) != 1 || rest[0].DelegationID != dels[3] {
			t.Fatalf("second batch = %+v, %v", rest, err)
		}
		if none, err := s.ClaimBatch(ctx, "batch", "w-2", "test:worker", "", 5); err != nil || none != nil {
			t.Fatalf("empty queue = %+v, %v", none, err)
		}
		if _, err := s.ClaimBatch(ctx, "batch", "w-2", "test:worker", "", 101); models.ErrorCode(err) != models.EINVALID {
			t.Fatalf("max 101 = %v; want invalid", err)
		}
		if rep, err := s.Verify(ctx, models.VerifyOpts{}); err != nil || !rep.OK() {
			t.Fatalf("verify = %+v, %v", rep, err)
		}
	})
}

// TestClaimBatchConcurrent: batch leasers racing for one queue never get
// the same delegation or session, and together they lease all of it.
func TestClaimBatchConcurrent(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		const n = 60
		for range n {
			storetest.Delegated(ctx, t, s, "race")
		}
		var (
			mu       sync.Mutex
			sessions = map[string]string{}
			wg       sync.WaitGroup
		)
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				worker := []string{"w-a", "w-b", "w-c", "w-d"}[w]
				for {
					ls, err := s.ClaimBatch(ctx, "race", worker, "test:worker", "", 7)
					if err != nil {
						t.Errorf("%s: %v", worker, err)
						return
					}
					if len(ls) == 0 {
						return
					}
					mu.Lock()
					for _, l := range ls {
						if other, dup := sessions[l.SessionID]; dup {
							t.Errorf("session %s leased to %s and %s", l.SessionID, other, worker)
						}
						sessions[l.SessionID] = worker
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(sessions) != n {
			t.Fatalf("%d sessions leased; want %d", len(sessions), n)
		}
		if rep, err := s.Verify(ctx, models.VerifyOpts{}); err != nil || !rep.OK() {
			t.Fatalf("verify = %+v, %v", rep, err)
		}
	})
}

// TestClaimBatchRoundTrips pins a batch claim's cost on PostgreSQL: one
// statement picks, leases and locks all N (claimBatchSQL), in the BEGIN's
// round trip; the N events with their projections and the idempotency
// record go in the COMMIT's. Two round trips whatever N, like one lease,
// and no per-lease claim statement.
func TestClaimBatchRoundTrips(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	for _, n := range []int{1, 5} {
		queue := "rt-batch-" + string(rune('0'+n))
		for range n {
			storetest.Delegated(ctx, t, s, queue)
		}
		st0, rt0 := s.WireStats()
		ls, err := s.ClaimBatch(ctx, queue, "w-1", "test:worker", "rt-batch-"+queue, n)
		st1, rt1 := s.WireStats()
		if err != nil || len(ls) != n {
			t.Fatalf("claim batch of %d = %d leases, %v", n, len(ls), err)
		}
		// The claim, one statement per lease (its event with the
		// projection), the idempotency record and COMMIT: as a single
		// lease (TestLifecycleRoundTrips) plus one per further lease.
		if rt1-rt0 != 2 || st1-st0 != int64(4+n) {
			t.Errorf("batch of %d: %d round trips, %d statements; want 2 and %d", n, rt1-rt0, st1-st0, 4+n)
		}
	}
}
