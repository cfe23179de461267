package models_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestExpireLeases: the injection expires the share (rounded up) of one
// queue's live leases and no other, fences their workers, the rescuer
// queues them again as the next attempt, bad shares are refused, and the
// admin log records it.
func TestExpireLeases(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		leases := map[string]*models.Lease{}
		for range 4 {
			storetest.Delegated(ctx, t, s, "refunds")
			l, err := s.Claim(ctx, "refunds", "w-1", "token:worker", "")
			if err != nil || l == nil {
				t.Fatalf("claim: %v", err)
			}
			leases[l.DelegationID] = l
		}
		storetest.Delegated(ctx, t, s, "other")
		otherLease, err := s.Claim(ctx, "other", "w-2", "token:worker", "")
		if err != nil || otherLease == nil {
			t.Fatalf("claim other: %v", err)
		}
		for _, share := range []*float64{nil, storetest.Ptr(0.0), storetest.Ptr(-0.1), storetest.Ptr(1.5)} {
			var ve *models.ValidationError
			if _, err := s.ExpireLeases(ctx, "token:admin", "refunds", models.ExpireLeasesInput{Share: share}); !errors.As(err, &ve) || ve.Fields[0].Field != "share" {
				t.Fatalf("share %v: %v, want a validation error on share", share, err)
			}
		}
		rep, err := s.ExpireLeases(ctx, "token:admin", "refunds", models.ExpireLeasesInput{Share: storetest.Ptr(0.3)})
		if err != nil || rep.Leased != 4 || len(rep.Expired) != 2 {
			t.Fatalf("expire 0.3 of 4: %+v, %v; want 2 of 4", rep, err)
		}
		for _, e := range rep.Expired {
			if _, err := s.Heartbeat(ctx, e.DelegationID, leases[e.DelegationID].LeaseToken); err == nil {
				t.Fatalf("heartbeat of the expired lease of %s accepted", e.DelegationID)
			}
		}
		if _, err := s.Heartbeat(ctx, otherLease.DelegationID, otherLease.LeaseToken); err != nil {
			t.Fatalf("the other queue's lease: %v", err)
		}
		// Rescued at once, through the rescuer's code: nothing left for it.
		if n, err := s.RescueExpired(ctx, 100); err != nil || n != 0 {
			t.Fatalf("rescue after the injection: %d, %v; want nothing left", n, err)
		}
		for _, e := range rep.Expired {
			var d models.Delegation
			if err := s.DB.Where("id = ?", e.DelegationID).Take(&d).Error; err != nil || d.Status != models.DelegationQueued || d.Attempt != 2 {
				t.Fatalf("delegation %s after the injection: %+v, %v; want queued as attempt 2", e.DelegationID, d, err)
			}
			// The expiry records the worker's real last sign of life (its
			// claim, just now), not a lease length before the injection.
			var payload string
			s.DB.Raw(`SELECT payload FROM events WHERE session_id = ? AND type = ?`, e.SessionID, models.EventDelegationExpired).Scan(&payload)
			var p models.ExpiredPayload
			if err := json.Unmarshal([]byte(payload), &p); err != nil {
				t.Fatalf("expiry payload %q: %v", payload, err)
			}
			seen, err := time.Parse(time.RFC3339Nano, p.LastSeenAt)
			if err != nil || rep.At.Sub(seen) > 5*time.Second || seen.After(rep.At.Time) {
				t.Fatalf("last seen %q, injection at %s: want the claim's time", p.LastSeenAt, rep.At)
			}
		}
		var audits int64
		s.DB.Raw(`SELECT count(*) FROM admin_audit WHERE action = ? AND target_id = ?`, models.AdminExpireLeases, "refunds").Scan(&audits)
		if audits != 1 {
			t.Fatalf("%d admin log rows, want 1", audits)
		}
		if vr, err := s.Verify(ctx, models.VerifyOpts{}); err != nil || !vr.OK() {
			t.Fatalf("verify: %+v, %v", vr.Problems, err)
		}
	})
}
