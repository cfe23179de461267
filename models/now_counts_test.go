package models_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestNowStatsDoNotReadTheBacklog is the plan test of the metrics' figures
// that are not windowed (SLA counts maintained by migration 00032, stalled
// counts read from their index): with 5,000 sessions in human hands
// escalated over four days and 3,000 open with a next step, a metrics
// request reads at most one minute of escalations per SLA threshold from
// sessions, not the backlog (counting the sessions, as before, reads all
// 5,000), plus the stalled sessions themselves, and its figures are
// exactly those computed here
// from every session, also after writes of every kind the triggers follow
// (leaving and entering human hands, a new priority or escalation time, a
// deletion, a stalled session delegated, a new route).
func TestNowStatsDoNotReadTheBacklog(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	now := time.Date(2026, 11, 10, 12, 0, 30, 0, time.UTC)
	s.Now = func() time.Time { return now }
	// Sessions 1-10,000 in human hands every other one (priorities 1-5 and
	// an unknown 7), escalated every 69 s over the last 4 days; 3,000 open
	// ones with a next_step on five steps; the rest completed.
	err := s.DB.Exec(`INSERT INTO sessions (id, ticket_ref, goal, status, priority, state_version, queue, assignee, last_hash, escalated_at, created_at, updated_at, reason_code, next_step)
SELECT 'ses_' || lpad(i::text, 6, '0'), 'T-' || i, 'Goal ' || i,
       CASE WHEN i <= 10000 AND i % 2 = 0 THEN (CASE WHEN i % 10 = 0 THEN 'human_active' ELSE 'escalated' END)
            WHEN i > 10000 THEN 'open' ELSE 'completed' END,
       CASE WHEN i % 13 = 0 THEN 7 ELSE 1 + (i / 2) % 5 END, 3,
       (ARRAY['refunds', 'billing', 'shipping', 'accounts'])[(i / 2) % 4 + 1], '', '',
       CASE WHEN i <= 10000 AND i % 2 = 0 THEN ?::timestamptz - make_interval(secs => i * 34.5) END,
       ?::timestamptz, ?::timestamptz, '',
       CASE WHEN i > 10000 THEN 'step-' || (i % 5) ELSE '' END
FROM generate_series(1, 13000) AS i`, now, now, now).Error
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutRoute(ctx, "test:controller", "", "step-4", models.RouteInput{Queue: "q4"}); err != nil {
		t.Fatal(err)
	}
	if err := s.DB.Exec(`VACUUM ANALYZE sessions, sla_counts`).Error; err != nil {
		t.Fatal(err)
	}

	// want computes the figures from every session, in Go.
	want := func() (models.SLAStats, models.StalledStats) {
		t.Helper()
		var rows []struct {
			Status      models.Status
			Priority    int
			EscalatedAt *time.Time
			NextStep    string
		}
		if err := s.DB.Raw(`SELECT status, priority, escalated_at, next_step FROM sessions`).Scan(&rows).Error; err != nil {
			t.Fatal(err)
		}
		routed := map[string]bool{}
		var steps []string
		if err := s.DB.Raw(`SELECT step FROM routes`).Scan(&steps).Error; err != nil {
			t.Fatal(err)
		}
		for _, st := range steps {
			routed[st] = true
		}
		var sla models.SLAStats
		stalled := models.StalledStats{ByStep: map[string]int64{}}
		for _, r := range rows {
			if (r.Status == models.StatusEscalated || r.Status == models.StatusHumanActive) && r.EscalatedAt != nil {
				sla.Open++
				switch models.DefaultSLAPolicy().Clock(r.Priority, *r.EscalatedAt, now).State {
				case models.SLABreached:
					sla.Breached++
				case models.SLANearBreach:
					sla.NearBreach++
				default:
					sla.OK++
				}
			}
			if r.Status == models.StatusOpen && r.NextStep != "" && !routed[r.NextStep] {
				stalled.Sessions++
				stalled.ByStep[r.NextStep]++
			}
		}
		return sla, stalled
	}
	captured := captureSQL(t, s)
	check := func(stage string) {
		t.Helper()
		sla, stalled := want()
		*captured = (*captured)[:0]
		pm, err := s.ProductMetrics(ctx, models.MetricsOpts{From: now.Add(-24 * time.Hour), To: now})
		if err != nil {
			t.Fatal(err)
		}
		statements := append([]string(nil), *captured...)
		if sla.Open < 4000 || stalled.Sessions < 1500 || sla.Breached == 0 || sla.NearBreach == 0 || sla.OK == 0 {
			t.Fatalf("%s: the data does not test much: %+v %+v", stage, sla, stalled)
		}
		pm.SLA.BreachEvents = 0
		if pm.SLA != sla {
			t.Errorf("%s: SLA = %+v, the sessions give %+v", stage, pm.SLA, sla)
		}
		if g, e := mustJSON(t, pm.Stalled), mustJSON(t, stalled); string(g) != string(e) {
			t.Errorf("%s: stalled = %s, the sessions give %s", stage, g, e)
		}
		if got, err := s.SLAStats(ctx); err != nil || got.Open != sla.Open || got.Breached != sla.Breached || got.NearBreach != sla.NearBreach {
			t.Errorf("%s: SLAStats = %+v, %v; the sessions give %+v", stage, got, err, sla)
		}
		// Six SLA buckets, two thresholds each, one minute (at most two
		// sessions escalated in it) per threshold; and the open sessions
		// with a next step, whose index (sessions_stalled_idx) the stalled
		// count reads before it drops the routed steps (not maintained: see
		// migration 00032).
		var waiting int64
		if err := s.DB.Raw(`SELECT count(*) FROM sessions WHERE status = 'open' AND next_step <> ''`).Scan(&waiting).Error; err != nil {
			t.Fatal(err)
		}
		bound := 6*2*2 + int(waiting)
		total := 0.0
		for _, q := range statements {
			if !strings.Contains(q, "sessions") {
				continue
			}
			read, plan := sessionRowsRead(t, s, q)
			total += read
			if read > float64(bound) {
				t.Errorf("%s: a metrics statement reads %.0f session rows (bound %d, %d in human hands, %d stalled):\n%.2000s\n%.4000s",
					stage, read, bound, sla.Open, stalled.Sessions, q, plan)
			}
		}
		t.Logf("%s: %.0f session rows read", stage, total)
	}
	check("seeded")

	// Writes the triggers follow, as the write path makes them.
	for _, q := range []string{
		`UPDATE sessions SET status = 'completed' WHERE id IN ('ses_000100', 'ses_000202', 'ses_000304')`,
		`UPDATE sessions SET status = 'human_active', assignee = 'user:x' WHERE id = 'ses_000402'`,
		`UPDATE sessions SET priority = 2 WHERE id IN ('ses_000504', 'ses_000026')`,
		`UPDATE sessions SET escalated_at = escalated_at - interval '3 hours' WHERE id IN ('ses_000606', 'ses_000708')`,
		`UPDATE sessions SET escalated_at = NULL WHERE id = 'ses_000810'`,
		`UPDATE sessions SET status = 'escalated', escalated_at = ?::timestamptz - interval '50 minutes' WHERE id IN ('ses_000101', 'ses_000203')`,
		`DELETE FROM sessions WHERE id IN ('ses_000912', 'ses_010001')`,
		// Three escalations in the minute of priority 1's breach threshold
		// (11:45:30): before it, at it (breached) and after it.
		`UPDATE sessions SET priority = 1, escalated_at = ?::timestamptz - interval '15 minutes' + make_interval(secs => (substr(id, 9)::int - 4) * 10)
WHERE id IN ('ses_000002', 'ses_000004', 'ses_000006')`,
		`UPDATE sessions SET status = 'delegated' WHERE id IN ('ses_010002', 'ses_010003')`,
		`UPDATE sessions SET next_step = 'step-9' WHERE id = 'ses_010005'`,
		`UPDATE sessions SET queue = 'other' WHERE id = 'ses_010006'`,
		`UPDATE sessions SET next_step = '' WHERE id = 'ses_010007'`,
	} {
		var args []any
		if strings.Contains(q, "?") {
			args = append(args, now)
		}
		if err := s.DB.Exec(q, args...).Error; err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := s.PutRoute(ctx, "test:controller", "", "step-1", models.RouteInput{Queue: "q1"}); err != nil {
		t.Fatal(err)
	}
	check("after writes")
	var zeros int64
	if err := s.DB.Raw(`SELECT count(*) FROM sla_counts WHERE n <= 0`).Scan(&zeros).Error; err != nil || zeros != 0 {
		t.Errorf("sla_counts keeps %d rows at zero or below (%v): a minute's row goes when it falls to zero", zeros, err)
	}
	now = now.Add(37 * time.Minute)
	check("later")

	// Sessions written with the triggers off (a bulk load): migrate up's
	// repair finds the counts wrong and rebuilds them.
	if n, err := s.RepairNowCounts(ctx); err != nil || n != 0 {
		t.Fatalf("repair of exact counts = %d, %v; want 0", n, err)
	}
	err = execWithoutTriggers(s,
		`UPDATE sessions SET status = 'completed' WHERE id IN ('ses_000010', 'ses_010010')`)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Verify(ctx, models.VerifyOpts{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range rep.Problems {
		found = found || p.Kind == models.ProblemNowCounts
	}
	if !found {
		t.Errorf("verify after a write without triggers: no %s problem in %v", models.ProblemNowCounts, rep.Problems)
	}
	if n, err := s.RepairNowCounts(ctx); err != nil || n == 0 {
		t.Fatalf("repair after a write without triggers = %d, %v; want the rows it fixed", n, err)
	}
	check("repaired")
}
