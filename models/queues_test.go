package models_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestQueueKnown checks the rule on both databases: a route makes a queue
// known, so does a worker's lease within 7 days, an older lease does not;
// and on PostgreSQL with 20,000 delegations both questions are index reads.
func TestQueueKnown(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		now := time.Now().UTC()
		s.Now = func() time.Time { return now }
		putRoute(ctx, t, s, "notify", "mail")
		_, _ = storetest.Delegated(ctx, t, s, "refunds")
		if l, err := s.Claim(ctx, "refunds", "w-1", "token:worker", ""); err != nil || l == nil {
			t.Fatalf("lease: %v %v", l, err)
		}
		_, _ = storetest.Delegated(ctx, t, s, "queued-only") // never leased
		_, _ = storetest.Delegated(ctx, t, s, "stale")
		if l, err := s.Claim(ctx, "stale", "w-2", "token:worker", ""); err != nil || l == nil {
			t.Fatalf("lease: %v %v", l, err)
		}
		if err := s.DB.Exec(`UPDATE delegations SET updated_at = ? WHERE queue = 'stale'`, models.NewUTCTime(now.Add(-8*24*time.Hour))).Error; err != nil {
			t.Fatal(err)
		}
		for q, want := range map[string]bool{"mail": true, "refunds": true, "queued-only": false, "stale": false, "refundz": false} {
			if got, err := s.QueueKnown(ctx, q); err != nil || got != want {
				t.Errorf("QueueKnown(%s) = %v, %v; want %v", q, got, err, want)
			}
		}
		if got, err := s.KnownQueues(ctx); err != nil || !slices.Equal(got, []string{"mail", "refunds"}) {
			t.Errorf("KnownQueues = %v, %v", got, err)
		}
		if s.Dialect != models.Postgres {
			return
		}
		err := s.DB.Exec(`INSERT INTO delegations (id, session_id, queue, step, status, priority, attempt, max_attempts,
	lease_seconds, leased_by, available_at, created_at, updated_at)
SELECT 'dlg_pad_' || i, (SELECT id FROM sessions LIMIT 1), 'q' || (i % 40), 'check', 'done', 3, 1, 3, 30, 'w-' || (i % 7), now(), now(), now() - make_interval(hours => i % 500)
FROM generate_series(1, 20000) AS i`).Error
		if err != nil {
			t.Fatal(err)
		}
		if err := s.DB.Exec(`ANALYZE delegations; ANALYZE routes`).Error; err != nil {
			t.Fatal(err)
		}
		captured := captureSQL(t, s)
		if _, err := s.QueueKnown(ctx, "refundz"); err != nil {
			t.Fatal(err)
		}
		for _, q := range *captured {
			var plan []string
			if err := s.DB.Raw("EXPLAIN " + q).Scan(&plan).Error; err != nil {
				t.Fatal(err)
			}
			text := strings.Join(plan, "\n")
			if strings.Contains(text, "Seq Scan on delegations") || !strings.Contains(text, "_queue_idx") && !strings.Contains(text, "Seq Scan on routes") {
				t.Errorf("%s\n%s", q, text)
			}
		}
	})
}
