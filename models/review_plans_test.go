package models_test

import (
	"context"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestReviewQueuePlansOnPostgres checks that every query of a reviewer's
// pages (the queue, its counts, their claims, an item's view) reaches
// review_items, review_scores and review_claims through indexes at 50,000
// scored items: the work follows the backlog and the reviewer, not the
// history of scores.
func TestReviewQueuePlansOnPostgres(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	const n = 50_000
	for _, q := range []string{
		`INSERT INTO sessions (id, goal, status, priority, state_version, last_hash, created_at, updated_at)
SELECT 'ses_' || lpad(i::text, 6, '0'), 'Goal', 'completed', 2, 6, '', now() - interval '30 days', now() - interval '29 days'
FROM generate_series(1, ?) AS i`,
		// All but the last 300 items are scored; 10% needed two scores.
		`INSERT INTO review_items (session_id, at_version, decision_event_id, decision_type, decided_by, queue, escalated_at, decided_at, needed, scored, created_at)
SELECT 'ses_' || lpad(i::text, 6, '0'), 3, 'evt_d' || i, 'human.resolved', 'user:usr_' || (i % 7), 'refunds',
       now() - interval '30 days', now() - interval '30 days' + make_interval(secs => i), CASE WHEN i % 10 = 0 THEN 2 ELSE 1 END,
       CASE WHEN i > ? - 300 THEN 0 WHEN i % 10 = 0 THEN 2 ELSE 1 END, now()
FROM generate_series(1, ?) AS i`,
		`INSERT INTO review_scores (event_id, session_id, at_version, reviewer, goal_clear, state_current, evidence_sufficient, risks_explicit, next_step_actionable, scored_at)
SELECT 'evt_s' || i || '_' || k, 'ses_' || lpad(i::text, 6, '0'), 3, 'user:usr_' || ((i + k) % 20 + 10), 4, 4, 4, 4, 4,
       now() - interval '29 days' + make_interval(secs => i)
FROM generate_series(1, ? - 300) AS i, generate_series(1, 2) AS k WHERE k = 1 OR i % 10 = 0`,
		`INSERT INTO review_claims (session_id, at_version, reviewer, claimed_at, expires_at)
SELECT 'ses_' || lpad(i::text, 6, '0'), 3, 'user:usr_11', now(), now() + interval '30 minutes'
FROM generate_series(? - 299, ? - 290) AS i`,
		// Lapsed claims of the scored items, as a busy history leaves them.
		`INSERT INTO review_claims (session_id, at_version, reviewer, claimed_at, expires_at)
SELECT 'ses_' || lpad(i::text, 6, '0'), 3, 'user:usr_' || (i % 20 + 10), now() - interval '29 days', now() - interval '29 days'
FROM generate_series(1, ?) AS i WHERE i % 3 = 0 AND i <= ? - 300`,
	} {
		args := []any{n}
		switch strings.Count(q, "?") {
		case 2:
			args = []any{n, n}
		}
		if err := s.DB.Exec(q, args...).Error; err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DB.Exec(`INSERT INTO session_states (session_id, state) SELECT id, '{}' FROM sessions ON CONFLICT DO NOTHING`).Error; err != nil {
		t.Fatal(err)
	}
	if err := s.DB.Exec(`ANALYZE sessions; ANALYZE review_items; ANALYZE review_scores; ANALYZE review_claims`).Error; err != nil {
		t.Fatal(err)
	}
	reviewer := models.User{ID: "usr_11", Role: models.RoleReviewer}
	captured := captureSQL(t, s)
	page, err := s.ReviewQueue(ctx, models.ReviewQueueOpts{Reviewer: reviewer, Limit: 50})
	if err != nil || page.Counts.Open != 300 || page.Counts.Mine != 10 || len(page.Rows) != 50 {
		t.Fatalf("queue: open %d mine %d rows %d, %v", page.Counts.Open, page.Counts.Mine, len(page.Rows), err)
	}
	if _, err := s.ReviewQueue(ctx, models.ReviewQueueOpts{Reviewer: reviewer, Mine: true, After: page.Next}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetReviewView(ctx, models.ReviewKey{SessionID: page.Rows[0].SessionID, AtVersion: 3}, reviewer); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, q := range *captured {
		if !strings.Contains(q, "review_") {
			continue
		}
		checked++
		var plan []string
		if err := s.DB.Raw("EXPLAIN " + q).Scan(&plan).Error; err != nil {
			t.Fatalf("explain %s: %v", q, err)
		}
		text := strings.Join(plan, "\n")
		for _, table := range []string{"review_items", "review_scores", "review_claims"} {
			if strings.Contains(text, "Seq Scan on "+table) {
				t.Errorf("scans %s sequentially:\n%s\n%s", table, q, text)
			}
		}
	}
	if checked < 6 {
		t.Errorf("checked %d reviewer queries, want the queue, its counts and the view", checked)
	}
}
