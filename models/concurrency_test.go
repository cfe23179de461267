package models_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestConcurrentSameVersion sends 50 pauses based on the same version at
// once. Exactly one may win; every other one must be told, with a
// *ConflictError, that the session moved on to the winner's version. A
// command based on a stale version never reaches the status check, so no
// loser sees "illegal transition".
func TestConcurrentSameVersion(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		sid, _ := storetest.Delegated(ctx, t, s, "refunds")
		before := snapshot(t, s, sid)
		const n = 50
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			outs  = make([]models.Outcome, n)
			errs  = make([]error, n)
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				outs[i], errs[i] = s.Transition(ctx, sid, models.EventSessionPaused, fmt.Sprintf("test:controller-%d", i), "",
					models.TransitionInput{ExpectedVersion: v64(2), Reason: "customer asked to wait"})
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for i, err := range errs {
			if err == nil {
				won++
				if outs[i].StateVersion != 3 || outs[i].Status != models.StatusPaused {
					t.Fatalf("winner outcome = %+v", outs[i])
				}
				continue
			}
			var ce *models.ConflictError
			if !errors.As(err, &ce) || ce.CurrentVersion != 3 || ce.ExpectedVersion != 2 {
				t.Fatalf("loser %d: %T %v", i, err, err)
			}
		}
		if won != 1 {
			t.Fatalf("%d pauses won, want exactly 1", won)
		}
		after := snapshot(t, s, sid)
		if after.Events != before.Events+1 || after.Row.StateVersion != before.Row.StateVersion+1 {
			t.Fatalf("events %d→%d, version %d→%d", before.Events, after.Events, before.Row.StateVersion, after.Row.StateVersion)
		}
		if rep, err := s.Verify(ctx, models.VerifyOpts{}); err != nil || !rep.OK() {
			t.Fatalf("verify = %+v, %v", rep, err)
		}
	})
}

// TestConcurrentClaim has 20 workers race for 5 delegations: 5 leases, no
// delegation leased twice, each session one leased event.
func TestConcurrentClaim(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		want := map[string]string{} // delegation → session
		for range 5 {
			sid, did := storetest.Delegated(ctx, t, s, "refunds")
			want[did] = sid
		}
		const n = 20
		var (
			wg     sync.WaitGroup
			start  = make(chan struct{})
			leases = make([]*models.Lease, n)
			errs   = make([]error, n)
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				leases[i], errs[i] = s.Claim(ctx, "refunds", fmt.Sprintf("w-%d", i), "test:worker", "")
			}()
		}
		close(start)
		wg.Wait()
		got := map[string]int{}
		tokens := map[string]bool{}
		for i, l := range leases {
			if errs[i] != nil {
				t.Fatalf("claim %d: %v", i, errs[i])
			}
			if l == nil {
				continue
			}
			got[l.DelegationID]++
			if want[l.DelegationID] != l.SessionID || l.Attempt != 1 || tokens[l.LeaseToken] {
				t.Fatalf("lease %d = %+v", i, l)
			}
			tokens[l.LeaseToken] = true
		}
		if len(got) != 5 {
			t.Fatalf("%d delegations leased, want 5: %v", len(got), got)
		}
		for did, c := range got {
			if c != 1 {
				t.Fatalf("delegation %s leased %d times", did, c)
			}
			d, err := s.GetDelegation(ctx, did)
			if err != nil || d.Status != models.DelegationLeased || d.LeaseToken == nil || !tokens[*d.LeaseToken] {
				t.Fatalf("delegation row = %+v, %v", d, err)
			}
		}
		var leased int64
		s.DB.Model(&models.Event{}).Where("type = ?", models.EventDelegationLeased).Count(&leased)
		if leased != 5 {
			t.Fatalf("%d delegation.leased events, want 5", leased)
		}
		if l, err := s.Claim(ctx, "refunds", "w-late", "test:worker", ""); l != nil || err != nil {
			t.Fatalf("claim on an empty queue = %v, %v", l, err)
		}
		if rep, err := s.Verify(ctx, models.VerifyOpts{}); err != nil || !rep.OK() {
			t.Fatalf("verify = %+v, %v", rep, err)
		}
	})
}
