package models

// Lease fault injection for recovery drills against a real queue: expire a
// share of a queue's live leases at once, as if their workers had gone
// silent together. The lease expiry moves to now and the rescuer's own code
// (rescueLease) runs on each at once: delegation.lease_expired by
// system:rescuer, the delegation queued again as its next attempt (or the
// session escalated when the attempts are exhausted), exactly as for a lost
// worker, and the workers still holding them are fenced (their heartbeats
// and results get 409). The expiry records the worker's real last sign of
// life (its claim or last heartbeat), so the queue's recovery metrics time
// the recovery from there, not from a lease length before the injection. `taskpilots drill
// --queue Q --expire-share F` calls it through POST
// /api/v1/queues/{queue}/expire-leases and times the recovery.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// AdminExpireLeases is the admin log action of a lease fault injection.
const AdminExpireLeases = "queue.expire_leases"

// ExpireLeasesInput is the body of POST /queues/{queue}/expire-leases.
type ExpireLeasesInput struct {
	// Share of the queue's live leases to expire, in (0, 1].
	Share *float64 `json:"share"`
}

// Validate checks the share.
func (in ExpireLeasesInput) Validate() error {
	v := &ValidationError{}
	switch {
	case in.Share == nil:
		v.Add("share", "is required: the share of the queue's live leases to expire, in (0, 1]")
	case math.IsNaN(*in.Share) || *in.Share <= 0 || *in.Share > 1:
		v.Add("share", "must be greater than 0 and at most 1, got %v", *in.Share)
	}
	return v.Err()
}

// ExpiredLease is one lease the injection expired.
type ExpiredLease struct {
	DelegationID string `json:"delegation_id"`
	SessionID    string `json:"session_id"`
	Attempt      int    `json:"attempt"`
	Worker       string `json:"worker"`
}

// ExpireLeasesReport is what an injection did.
type ExpireLeasesReport struct {
	Queue string  `json:"queue"`
	Share float64 `json:"share"`
	// Leased is how many live leases the queue had; Expired how many were
	// expired (the share of Leased, rounded up).
	Leased  int            `json:"leased"`
	Expired []ExpiredLease `json:"expired"`
	At      UTCTime        `json:"at"`
}

// ExpireLeases expires ceil(share × live leases) of queue's live leases,
// chosen at random, and records the injection in the admin log.
func (s *Store) ExpireLeases(ctx context.Context, actor, queue string, in ExpireLeasesInput) (ExpireLeasesReport, error) {
	queue = strings.TrimSpace(queue)
	if err := in.Validate(); err != nil {
		return ExpireLeasesReport{}, err
	}
	if queue == "" {
		return ExpireLeasesReport{}, &ValidationError{Fields: []FieldError{{Field: "queue", Message: "is required"}}}
	}
	now := NewUTCTime(s.now())
	rep := ExpireLeasesReport{Queue: queue, Share: *in.Share, At: now, Expired: []ExpiredLease{}}
	var live []Delegation
	if err := s.DB.WithContext(ctx).Where("queue = ? AND status = ? AND lease_expires_at > ?", queue, DelegationLeased, now).
		Order("id").Find(&live).Error; err != nil {
		return rep, fmt.Errorf("expire leases: read the queue's leases: %w", err)
	}
	rep.Leased = len(live)
	n := int(math.Ceil(*in.Share * float64(len(live))))
	rand.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
	for _, d := range live[:n] {
		// Guarded by the lease token: a lease that moved meanwhile (a
		// result, a heartbeat's renewal is fine) is left alone.
		res := s.DB.WithContext(ctx).Exec(`UPDATE delegations SET lease_expires_at = ? WHERE id = ? AND status = ? AND lease_token = ?`,
			now, d.ID, DelegationLeased, d.LeaseToken)
		if res.Error != nil {
			return rep, fmt.Errorf("expire lease of %s: %w", d.ID, res.Error)
		}
		if res.RowsAffected != 1 {
			continue
		}
		rep.Expired = append(rep.Expired, ExpiredLease{DelegationID: d.ID, SessionID: d.SessionID, Attempt: d.Attempt, Worker: d.LeasedBy})
		lastSeen := d.LeaseExpiresAt.Time.Add(-time.Duration(d.LeaseSeconds) * time.Second)
		d.LeaseExpiresAt = NullTime{Time: now, Valid: true}
		switch err := s.rescueLease(ctx, d, lastSeen); {
		case err == nil, errors.Is(err, errSkip), ErrorCode(err) == EILLEGAL:
			// Rescued, or a result or pause got there first (a running
			// rescuer finishes whatever is left).
		default:
			return rep, fmt.Errorf("expire lease of %s: rescue: %w", d.ID, err)
		}
	}
	ids := make([]string, len(rep.Expired))
	for i, e := range rep.Expired {
		ids[i] = e.DelegationID
	}
	if err := s.recordAdmin(s.DB.WithContext(ctx), actor, AdminExpireLeases, "queue", queue, nil,
		map[string]any{"share": *in.Share, "leased": rep.Leased, "expired": ids}); err != nil {
		return rep, err
	}
	return rep, nil
}
