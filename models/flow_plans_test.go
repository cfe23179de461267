package models_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"gorm.io/gorm"
)

// TestClaimPlansWithFlow: the flow-control part of the claim statements
// leaves the pick on delegations_claim_idx and the update on the primary
// key. (With the cap as the pick's LIMIT, a subquery the planner estimates
// at a tenth of the queue, the update joined through a sequential scan of
// delegations.) 200,000 queued delegations,
// analysed; single and batch claims, for a queue with limits and one
// without.
func TestClaimPlansWithFlow(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	// No session rows: the foreign key is not checked while seeding.
	err := s.DB.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`SET LOCAL session_replication_role = replica`).Error; err != nil {
			return err
		}
		return tx.Exec(`INSERT INTO delegations (id, session_id, queue, step, status, priority, attempt, max_attempts, lease_seconds, available_at, created_at, updated_at)
			SELECT 'dlg_' || g, 'ses_' || g, CASE WHEN g % 2 = 0 THEN 'deep' ELSE 'limited' END, 's', 'queued', 3, 1, 3, 30,
				now() - g * interval '1 second', now(), now()
			FROM generate_series(1, 200000) g`).Error
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 5
	if _, err := s.PutQueueFlow(ctx, "test:admin", "", "limited", models.QueueFlowInput{MaxInFlight: &n}); err != nil {
		t.Fatal(err)
	}
	if err := s.DB.Exec(`ANALYZE delegations`).Error; err != nil {
		t.Fatal(err)
	}
	now := models.NewUTCTime(time.Now())
	for _, queue := range []string{"deep", "limited"} {
		for name, q := range s.ClaimStatements(queue, now) {
			var lines []string
			if err := s.DB.Raw("EXPLAIN "+q[0].(string), q[1].([]any)...).Scan(&lines).Error; err != nil {
				t.Fatalf("%s %s: %v", queue, name, err)
			}
			plan := strings.Join(lines, "\n")
			// (The batch sorts its own few rows for row_number and its
			// answer's order, as before.)
			if !strings.Contains(plan, "Index Scan using delegations_claim_idx") || strings.Contains(plan, "Seq Scan on delegations") {
				t.Errorf("%s claim on %s: want the pick on delegations_claim_idx and no scan of delegations:\n%s", name, queue, plan)
			}
		}
	}
}
