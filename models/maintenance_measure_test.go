package models_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestMeasureIdlePass reports what an idle maintenance pass costs at 20,000
// sessions with 2,000 already-breached escalations and 500 waiting parents
// (README, "Maintenance"), next to the queries the pass used to send every
// 500 ms. Set TASKPILOTS_MEASURE_IDLE=1 to run it; it asserts nothing on time.
func TestMeasureIdlePass(t *testing.T) {
	if os.Getenv("TASKPILOTS_MEASURE_IDLE") == "" {
		t.Skip("set TASKPILOTS_MEASURE_IDLE=1 to measure")
	}
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO sessions (id, goal, status, priority, state_version, last_hash, created_at, updated_at)
		 SELECT 'm' || g, 'goal', 'completed', 1 + g % 5, 10, 'h', now() - interval '3 days', now() - interval '2 days'
		 FROM generate_series(1, 17000) g`,
		`INSERT INTO sessions (id, goal, status, priority, state_version, last_hash, escalated_at, created_at, updated_at)
		 SELECT 'e' || g, 'goal', 'escalated', 1 + g % 5, 10, 'h', now() - interval '4 days', now() - interval '5 days', now() - interval '4 days'
		 FROM generate_series(1, 2000) g`,
		`INSERT INTO sessions (id, goal, status, priority, state_version, last_hash, created_at, updated_at)
		 SELECT 'p' || g, 'goal', 'waiting_children', 3, 5, 'h', now() - interval '1 day', now() - interval '1 day'
		 FROM generate_series(1, 500) g`,
		`INSERT INTO sessions (id, parent_id, goal, status, priority, state_version, last_hash, created_at, updated_at)
		 SELECT 'c' || g, 'p' || (1 + g % 500), 'goal', 'queued', 3, 2, 'h', now(), now()
		 FROM generate_series(1, 1000) g`,
		`INSERT INTO events (id, session_id, seq, type, actor, version_before, version_after, payload, prev_hash, hash, created_at)
		 SELECT s.id || '-' || g, s.id, g, 'note.added', 'a', g - 1, g, '{}', 'h', 'h', s.created_at + g * interval '1 minute'
		 FROM sessions s, generate_series(1, 10) g`,
		`INSERT INTO events (id, session_id, seq, type, actor, version_before, version_after, payload, prev_hash, hash, created_at)
		 SELECT s.id || '-spawn', s.id, 11, 'children.spawned', 'a', 10, 11, '{}', 'h', 'h', now() - interval '1 day'
		 FROM sessions s WHERE s.status = 'waiting_children'`,
		`INSERT INTO events (id, session_id, seq, type, actor, version_before, version_after, payload, prev_hash, hash, created_at)
		 SELECT s.id || '-breach', s.id, 11, 'escalation.sla_breached', 'system:sla', 10, 11, '{}', 'h', 'h', now() - interval '3 days'
		 FROM sessions s WHERE s.status = 'escalated'`,
		`UPDATE sessions SET sla_breached_for = escalated_at WHERE status = 'escalated'`,
		`INSERT INTO session_states (session_id, state) SELECT id, '{}' FROM sessions ON CONFLICT DO NOTHING`,
		`ANALYZE`,
	} {
		if err := s.DB.Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	// The queries of the former pass, as it sent them every 500 ms.
	old := []string{
		`SELECT * FROM delegations WHERE status = 'leased' AND lease_expires_at < now() ORDER BY lease_expires_at LIMIT 200`,
		`SELECT id FROM sessions WHERE status = 'waiting_children' AND join_due_at <= now() ORDER BY join_due_at LIMIT 200`,
		`SELECT p.id FROM sessions p WHERE p.status = 'waiting_children' AND NOT EXISTS (
	SELECT 1 FROM sessions c WHERE c.parent_id = p.id AND c.status NOT IN ('completed', 'rejected', 'cancelled')
	  AND c.created_at >= (SELECT max(e.created_at) FROM events e WHERE e.session_id = p.id AND e.type = 'children.spawned'))
ORDER BY p.id LIMIT 200`,
		`SELECT id FROM sessions WHERE status = 'paused' AND resume_at <= now() ORDER BY resume_at LIMIT 200`,
	}
	for _, b := range []struct{ where, budget string }{{"priority = 1", "15 minutes"}, {"priority = 2", "1 hour"},
		{"priority = 3", "4 hours"}, {"priority = 4", "24 hours"}, {"priority = 5", "72 hours"}, {"priority NOT IN (1,2,3,4,5)", "4 hours"}} {
		old = append(old, `SELECT s.id, s.escalated_at FROM sessions AS s WHERE status IN ('escalated', 'human_active') AND escalated_at IS NOT NULL
AND `+b.where+` AND s.escalated_at <= now() - interval '`+b.budget+`'
AND NOT EXISTS (SELECT 1 FROM events e WHERE e.session_id = s.id AND e.type = 'escalation.sla_breached' AND e.created_at >= s.escalated_at)
ORDER BY s.escalated_at, s.id LIMIT 200`)
	}
	const passes = 20
	start := time.Now()
	for range passes {
		for _, q := range old {
			var ids []map[string]any
			if err := s.DB.Raw(q).Scan(&ids).Error; err != nil {
				t.Fatal(err)
			}
		}
	}
	oldPer := time.Since(start) / passes
	if _, err := s.Maintain(ctx); err != nil { // the first pass's catch-up
		t.Fatal(err)
	}
	count := countStatements(t, s)
	start = time.Now()
	for range passes {
		if r, _, err := s.MaintainNext(ctx); err != nil || r != (models.MaintenanceReport{}) {
			t.Fatalf("%+v %v", r, err)
		}
	}
	newPer := time.Since(start) / passes
	var plan []string
	s.DB.Raw(`EXPLAIN ANALYZE SELECT (SELECT min(lease_expires_at) FROM delegations WHERE status = 'leased'),
	(SELECT min(escalated_at) FROM sessions WHERE status IN ('escalated', 'human_active') AND escalated_at IS NOT NULL AND sla_breached_for IS DISTINCT FROM escalated_at AND priority = 1),
	(SELECT max(updated_at) FROM sessions WHERE parent_id IS NOT NULL)`).Scan(&plan)
	for _, l := range plan {
		t.Log(l)
	}
	t.Logf("idle pass at 20,500 sessions, 2,000 breached: before %d statements, %v; after %d statements, %v",
		len(old), oldPer, count()/passes, newPer)
}
