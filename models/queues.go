package models

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// KnownQueueWindow is how recent a worker's lease must be for its queue to
// count as known.
const KnownQueueWindow = 7 * 24 * time.Hour

// maxKnownQueues bounds the list a confirmation names.
const maxKnownQueues = 50

// QueueKnown reports whether work sent to queue is likely to be picked up:
// a route sends steps there, or a worker leased from it within
// KnownQueueWindow. A queue nobody knows is most often a typo, and work sent
// there waits forever, so the console asks before handing back or resuming
// to it. Two index seeks (routes_queue_idx, delegations_worked_queue_idx).
func (s *Store) QueueKnown(ctx context.Context, queue string) (bool, error) {
	db := s.DB.WithContext(ctx)
	var n int64
	if err := db.Raw(`SELECT COUNT(*) FROM (SELECT 1 FROM routes WHERE queue = ? LIMIT 1) r`, queue).Scan(&n).Error; err != nil {
		return false, fmt.Errorf("queue %q: routes: %w", queue, err)
	}
	if n > 0 {
		return true, nil
	}
	since := NewUTCTime(s.now().Add(-KnownQueueWindow))
	err := db.Raw(`SELECT COUNT(*) FROM (SELECT 1 FROM delegations WHERE queue = ? AND leased_by <> '' AND updated_at >= ? LIMIT 1) d`,
		queue, since).Scan(&n).Error
	if err != nil {
		return false, fmt.Errorf("queue %q: recent leases: %w", queue, err)
	}
	return n > 0, nil
}

// KnownQueues lists the queues QueueKnown accepts, sorted, at most 50: what
// a confirmation offers instead of an unknown queue.
func (s *Store) KnownQueues(ctx context.Context) ([]string, error) {
	db := s.DB.WithContext(ctx)
	var routed, worked []string
	if err := db.Raw(`SELECT DISTINCT queue FROM routes ORDER BY queue LIMIT ?`, maxKnownQueues).Scan(&routed).Error; err != nil {
		return nil, fmt.Errorf("known queues: routes: %w", err)
	}
	since := NewUTCTime(s.now().Add(-KnownQueueWindow))
	if err := db.Raw(`SELECT DISTINCT queue FROM delegations WHERE leased_by <> '' AND updated_at >= ? ORDER BY queue LIMIT ?`,
		since, maxKnownQueues).Scan(&worked).Error; err != nil {
		return nil, fmt.Errorf("known queues: recent leases: %w", err)
	}
	seen := map[string]bool{}
	var out []string
	for _, q := range append(routed, worked...) {
		if !seen[q] {
			seen[q] = true
			out = append(out, q)
		}
	}
	sort.Strings(out)
	if len(out) > maxKnownQueues {
		out = out[:maxKnownQueues]
	}
	return out, nil
}
