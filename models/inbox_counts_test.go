package models_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// exactInboxCounts groups the sessions in human hands as inbox_counts
// counts them, straight from sessions.
func exactInboxCounts(t *testing.T, s *models.Store) map[models.InboxCountKey]int64 {
	t.Helper()
	var rows []struct {
		models.InboxCountKey
		N int64
	}
	if err := s.DB.Raw(`SELECT status, queue, priority, reason_code, assignee, count(*) AS n FROM sessions
WHERE status IN ('escalated', 'human_active') GROUP BY status, queue, priority, reason_code, assignee`).Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	out := map[models.InboxCountKey]int64{}
	for _, r := range rows {
		out[r.InboxCountKey] = r.N
	}
	return out
}

// storedInboxCounts reads inbox_counts, zero rows left out.
func storedInboxCounts(t *testing.T, s *models.Store) map[models.InboxCountKey]int64 {
	t.Helper()
	var rows []struct {
		models.InboxCountKey
		N int64
	}
	if err := s.DB.Raw(`SELECT status, queue, priority, reason_code, assignee, n FROM inbox_counts WHERE n <> 0`).Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	out := map[models.InboxCountKey]int64{}
	for _, r := range rows {
		out[r.InboxCountKey] = r.N
	}
	return out
}

func sameCounts(a, b map[models.InboxCountKey]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestInboxCountsUnderConcurrentWrites moves sessions in and out of the
// inbox and between its counters from several writers at once (claims,
// forced releases, hand-backs to another queue, re-escalations, closes), on
// the same sessions, so that writers race for the same counter rows in
// both directions; afterwards the maintained counts equal an exact count of
// the sessions, verify finds nothing, and the inbox's chips add up.
func TestInboxCountsUnderConcurrentWrites(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		queues := []string{"refunds", "billing", "shipping"}
		var sessions []string
		for i := range 24 {
			sessions = append(sessions, escalated(ctx, t, s, 1+i%5, fmt.Sprintf("T-%d", i), queues[i%len(queues)]))
		}
		const writers, ops = 6, 60
		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			applied   = map[string]int{}
			unexpectd []error
		)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 16))
				u := models.User{ID: fmt.Sprintf("usr_w%d", w%3), Name: "W", Role: models.RoleAdmin}
				for range ops {
					id := sessions[rng.IntN(len(sessions))]
					row, err := s.GetSession(ctx, id)
					if err != nil {
						mu.Lock()
						unexpectd = append(unexpectd, err)
						mu.Unlock()
						return
					}
					v := row.StateVersion
					var op string
					switch row.Status {
					case models.StatusEscalated:
						op = "claim"
						_, err = s.ClaimEscalation(ctx, id, u, "", models.ClaimInput{ExpectedVersion: &v})
					case models.StatusHumanActive:
						switch rng.IntN(8) {
						case 0, 1, 2:
							op = "release"
							_, err = s.ForceRelease(ctx, id, u, "", models.ReleaseInput{ExpectedVersion: &v, Reason: "shift over"})
						case 3, 4, 5, 6:
							op = "hand back"
							_, err = s.HandBack(ctx, id, u, "", models.HandBackInput{ExpectedVersion: &v, Queue: queues[rng.IntN(len(queues))]})
						default:
							op = "complete"
							_, err = s.CompleteHuman(ctx, id, u, "", models.CompleteInput{ExpectedVersion: &v, Resolution: "done"})
						}
					case models.StatusQueued:
						op = "escalate"
						_, err = s.Transition(ctx, id, models.EventSessionEscalated, "test:controller", "", models.TransitionInput{ExpectedVersion: &v, Reason: "again"})
					default:
						continue
					}
					var conflict *models.ConflictError
					var illegal *models.IllegalTransitionError
					var claimed *models.ClaimedError
					mu.Lock()
					switch {
					case err == nil:
						applied[op]++
					case errors.As(err, &conflict), errors.As(err, &illegal), errors.As(err, &claimed):
						applied["lost race"]++
					default:
						unexpectd = append(unexpectd, fmt.Errorf("%s %s: %w", op, id, err))
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		for _, err := range unexpectd {
			t.Error(err)
		}
		t.Logf("applied %v", applied)
		if applied["claim"] == 0 || applied["hand back"] == 0 || applied["escalate"] == 0 || applied["release"] == 0 {
			t.Errorf("the workload did not move sessions every way: %v", applied)
		}
		exact, stored := exactInboxCounts(t, s), storedInboxCounts(t, s)
		if !sameCounts(exact, stored) {
			t.Errorf("maintained counts %v, sessions %v", stored, exact)
		}
		if drift, err := s.VerifyInboxCounts(ctx); err != nil || len(drift) != 0 {
			t.Errorf("verify inbox counts: %v %v", drift, err)
		}
		page, err := s.Inbox(ctx, models.InboxOpts{Me: "user:usr_w1", Limit: models.MaxInboxLimit})
		if err != nil {
			t.Fatal(err)
		}
		var humans int64
		for _, n := range exact {
			humans += n
		}
		if page.Counts.All != humans || int64(len(page.Rows)) != humans {
			t.Errorf("inbox counts %d sessions, lists %d, %d are in human hands", page.Counts.All, len(page.Rows), humans)
		}
		var mine int64
		for _, r := range page.Rows {
			if r.Assignee == "user:usr_w1" {
				mine++
			}
		}
		if page.Counts.Assignment[models.AssignedToMe] != mine {
			t.Errorf("mine: counted %d, listed %d", page.Counts.Assignment[models.AssignedToMe], mine)
		}
	})
}

// TestInboxCountsVerifyAndRepair: counts that drifted from the sessions (a
// write with the triggers off, a hand edit) are reported by VerifyInboxCounts
// and by a whole verify, and RepairInboxCounts rebuilds them.
func TestInboxCountsVerifyAndRepair(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		tick(s)
		escalated(ctx, t, s, 2, "T-1", "refunds")
		b := escalated(ctx, t, s, 3, "T-2", "billing")
		claim(ctx, t, s, b, "user:usr_me")
		for _, q := range []string{
			`UPDATE inbox_counts SET n = n + 4 WHERE queue = 'refunds'`,
			`INSERT INTO inbox_counts VALUES ('escalated', 'legal', 1, 'worker', '', 7)`,
			`DELETE FROM inbox_counts WHERE queue = 'billing'`,
		} {
			if err := s.DB.Exec(q).Error; err != nil {
				t.Fatal(err)
			}
		}
		drift, err := s.VerifyInboxCounts(ctx)
		if err != nil || len(drift) != 3 {
			t.Fatalf("drift %+v, %v: want 3 combinations", drift, err)
		}
		wantVerifyProblems(ctx, t, s, models.ProblemInboxCounts, 3)
		fixed, err := s.RepairInboxCounts(ctx)
		if err != nil || len(fixed) != 3 {
			t.Fatalf("repair: %+v, %v", fixed, err)
		}
		if drift, err := s.VerifyInboxCounts(ctx); err != nil || len(drift) != 0 {
			t.Errorf("after repair: %+v, %v", drift, err)
		}
		if !sameCounts(exactInboxCounts(t, s), storedInboxCounts(t, s)) {
			t.Error("repair left counts that differ from the sessions")
		}
		// The counters keep working after the rebuild.
		escalated(ctx, t, s, 1, "T-3", "refunds")
		if !sameCounts(exactInboxCounts(t, s), storedInboxCounts(t, s)) {
			t.Error("counts after a write following the repair differ from the sessions")
		}
	})
}

// rowsRead sums, over the plan of EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON),
// the rows every node reading one of relations produced or filtered out,
// times its loops: how many of their rows or index entries the statement
// read. It returns the plan too, for the failure message.
func rowsRead(t *testing.T, s *models.Store, sql string, relations ...string) (float64, string) {
	t.Helper()
	plan, text := explainPlan(t, s, sql)
	var walk func(n map[string]any) float64
	walk = func(n map[string]any) float64 {
		var sum float64
		if rel, _ := n["Relation Name"].(string); slices.Contains(relations, rel) {
			loops, _ := n["Actual Loops"].(float64)
			for _, k := range []string{"Actual Rows", "Rows Removed by Filter", "Rows Removed by Index Recheck"} {
				v, _ := n[k].(float64)
				sum += v * loops
			}
		}
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			if m, ok := k.(map[string]any); ok {
				sum += walk(m)
			}
		}
		return sum
	}
	return walk(plan), text
}

// explainPlan runs sql under EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) and
// returns the top node of its plan, and the plan as text for messages.
func explainPlan(t *testing.T, s *models.Store, sql string) (map[string]any, string) {
	t.Helper()
	var out []string
	if err := s.DB.Raw("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql).Scan(&out).Error; err != nil {
		t.Fatalf("explain %s: %v", sql, err)
	}
	var plans []struct {
		Plan map[string]any `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(strings.Join(out, "")), &plans); err != nil {
		t.Fatal(err)
	}
	return plans[0].Plan, strings.Join(out, "\n")
}

// sessionRowsRead is rowsRead over sessions.
func sessionRowsRead(t *testing.T, s *models.Store, sql string) (float64, string) {
	t.Helper()
	return rowsRead(t, s, sql, "sessions")
}

// TestInboxCountsDoNotReadTheBacklog is the plan test of the maintained
// counts: with 5,000 sessions in human hands and 2,000 waiting on input,
// every unsearched inbox page (each filter), the inbox's tab counts and the
// waiting view read no more session rows than the page itself needs, a branch of Limit+1 rows per priority: the counts
// come from inbox_counts, not from the backlog. Grouping the backlog, as the
// counts did before migration 00029, reads all 5,000.
func TestInboxCountsDoNotReadTheBacklog(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	const humans = 5000
	err := s.DB.Exec(`INSERT INTO sessions (id, ticket_ref, goal, status, priority, state_version, queue, assignee, last_hash, escalated_at, created_at, updated_at, reason_code)
SELECT 'ses_' || lpad(i::text, 6, '0'), 'T-' || i, 'Goal ' || i,
       CASE WHEN i % 2 = 1 THEN 'completed' WHEN i % 10 = 0 THEN 'human_active' ELSE 'escalated' END,
       1 + (i / 2) % 5, 3,
       (ARRAY['refunds', 'billing', 'shipping', 'accounts'])[(i / 2) % 4 + 1],
       CASE WHEN i % 10 = 0 THEN 'user:usr_' || (i % 7) ELSE '' END,
       '',
       CASE WHEN i % 2 = 1 THEN NULL ELSE timestamptz '2026-11-01 00:00:00+00' + make_interval(secs => (i * 7919) % 86400) END,
       timestamptz '2026-11-01 00:00:00+00', timestamptz '2026-11-01 00:00:00+00',
       CASE WHEN i % 2 = 1 THEN '' WHEN i % 16 = 2 THEN 'leases_exhausted' ELSE 'worker' END
FROM generate_series(1, ?) AS i`, 2*humans).Error
	if err != nil {
		t.Fatal(err)
	}
	// And more sessions waiting on input than a bounded count reads: the
	// waiting view's count and the tab come from waiting_counts (00037).
	const waiting = 2000
	err = s.DB.Exec(`INSERT INTO sessions (id, ticket_ref, goal, status, priority, state_version, queue, assignee, last_hash, created_at, updated_at, input_requested_at)
SELECT 'ses_w' || lpad(i::text, 6, '0'), 'W-' || i, 'Goal ' || i, 'awaiting_input', 3, 4,
       (ARRAY['refunds', 'billing', 'shipping', 'accounts'])[i % 4 + 1], '', '',
       timestamptz '2026-11-01 00:00:00+00', timestamptz '2026-11-01 00:00:00+00',
       timestamptz '2026-11-01 00:00:00+00' + make_interval(secs => i)
FROM generate_series(1, ?) AS i`, waiting).Error
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DB.Exec(`VACUUM ANALYZE sessions, inbox_counts, waiting_counts`).Error; err != nil {
		t.Fatal(err)
	}
	const limit = 20
	bound := float64(6 * (limit + 1))
	captured := captureSQL(t, s)
	check := func(name string, call func() error) {
		t.Helper()
		*captured = (*captured)[:0]
		if err := call(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, q := range *captured {
			read, plan := sessionRowsRead(t, s, q)
			t.Logf("%s: %.0f session rows read", name, read)
			if read > bound {
				t.Errorf("%s reads %.0f session rows (bound %.0f, %d in human hands):\n%.1500s\n%.3000s", name, read, bound, humans, q, plan)
			}
		}
	}
	for _, f := range []models.InboxFilter{
		{},
		{Queue: "billing"},
		{Status: models.StatusHumanActive},
		{Priority: 3},
		{Assignment: models.AssignedToMe},
		{Reason: models.ReasonLeasesExhausted},
	} {
		check(fmt.Sprintf("inbox %+v", f), func() error {
			page, err := s.Inbox(ctx, models.InboxOpts{InboxFilter: f, Me: "user:usr_3", Limit: limit})
			if err == nil && f == (models.InboxFilter{}) && page.Counts.All != models.CountCap+1 {
				t.Errorf("inbox count %d, want the bound %d", page.Counts.All, models.CountCap+1)
			}
			return err
		})
	}
	check("inbox tabs", func() error {
		tabs, err := s.InboxTabs(ctx)
		if err == nil && (tabs.Humans != models.CountCap+1 || tabs.Waiting != models.CountCap+1) {
			t.Errorf("humans tab %d, waiting tab %d; want the bound %d", tabs.Humans, tabs.Waiting, models.CountCap+1)
		}
		return err
	})
	check("count in human hands", func() error { _, err := s.CountInHumanHands(ctx); return err })
	check("waiting view", func() error {
		page, err := s.WaitingOnInput(ctx, "", limit)
		if err == nil && (page.Total != models.CountCap+1 || len(page.Rows) != limit) {
			t.Errorf("waiting view: %d rows, count %d; want %d and the bound %d", len(page.Rows), page.Total, limit, models.CountCap+1)
		}
		return err
	})
}

// wantVerifyProblems runs a whole verify and wants exactly n problems of the
// maintained counts' kind, each printed under that kind.
func wantVerifyProblems(ctx context.Context, t *testing.T, s *models.Store, kind string, n int) {
	t.Helper()
	rep, err := s.Verify(ctx, models.VerifyOpts{})
	if err != nil {
		t.Fatal(err)
	}
	var found int
	for _, p := range rep.Problems {
		if p.Kind == kind {
			found++
			if !strings.HasPrefix(p.String(), kind+": ") {
				t.Errorf("problem %q", p.String())
			}
		}
	}
	if found != n {
		js, _ := json.Marshal(rep.Problems)
		t.Errorf("verify reports %d %s problems, want %d: %s", found, kind, n, js)
	}
}
