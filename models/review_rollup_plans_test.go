package models_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestReviewRollupPlansAtScale writes a million review scores (900,000
// items over three years, one in ten scored twice, the second score up to
// two days later) into one PostgreSQL schema, rebuilds the rollup with the
// migration's backfill, and runs every statement of a review statistics
// request for the page's windows (30, 90 and 365 days, ends inside a day
// that has scores on both sides of them, so both partial days are read from
// review_scores) under EXPLAIN (ANALYZE, BUFFERS). None may scan
// review_scores or review_items sequentially, nor a rollup table for the 30
// and 90 day windows (for a year of three, reading the small rollup tables
// whole is the planner's fair choice); each may touch only buffers that
// follow the window's days and the scores of its two partial days, never
// the million scores or the three years.
// It asserts on plans and buffers, never on time (times are logged). -short
// builds a tenth.
func TestReviewRollupPlansAtScale(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	items := 900_000
	if testing.Short() {
		items = 90_000
	}
	const days = 3 * 365
	base := time.Date(2025, 11, 1, 0, 0, 0, 0, time.UTC)
	start := time.Now()
	err := execWithoutTriggers(s, // no sessions behind the items
		fmt.Sprintf(`INSERT INTO review_items (session_id, at_version, decision_event_id, decision_type, decided_by, queue,
	escalated_at, claimed_at, decided_at, needed, scored, created_at)
SELECT 'ses_' || lpad(g::text, 9, '0'), 4, 'evt_' || g, 'human.completed', 'human:agent', 'q' || (g %% 10),
	at - interval '2 hours', CASE WHEN g %% 5 = 0 THEN NULL ELSE at - make_interval(secs => 60 + g %% 3600) END, at,
	CASE WHEN g %% 10 = 0 THEN 2 ELSE 1 END, CASE WHEN g %% 10 = 0 THEN 2 ELSE 1 END, at
FROM generate_series(0, %d) g, LATERAL (SELECT '%s'::timestamptz + make_interval(secs => g::double precision * %d / %d) AS at) t`,
			items-1, base.Format(time.RFC3339), days*24*3600, items),
		`INSERT INTO review_scores (event_id, session_id, at_version, reviewer, goal_clear, state_current, evidence_sufficient,
	risks_explicit, next_step_actionable, scored_at)
SELECT 'evs_' || n || '_' || i.session_id, i.session_id, 4, 'human:reviewer' || n,
	1 + (h % 5), 1 + (h / 5 % 5), 1 + (h / 25 % 5), 1 + (h / 125 % 5), 1 + (h / 625 % 5),
	i.decided_at + make_interval(mins => 10) + CASE WHEN n = 2 THEN make_interval(hours => h % 50) ELSE interval '0' END
FROM review_items i, generate_series(1, i.needed) n, LATERAL (SELECT abs(hashtext(i.session_id || n)) AS h) x`)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	var scores int64
	if err := s.DB.Raw(`SELECT count(*) FROM review_scores`).Scan(&scores).Error; err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d items and %d scores in %v", items, scores, time.Since(start).Round(time.Millisecond))
	ctx := t.Context()
	start = time.Now()
	migrateDownThrough(ctx, t, s, 30)
	if _, err := s.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("the migration's backfill took %v", time.Since(start).Round(time.Millisecond))
	for _, tbl := range []string{"review_items", "review_scores", "review_score_days", "review_pair_days", "review_item_days"} {
		if err := s.DB.Exec("ANALYZE " + tbl).Error; err != nil {
			t.Fatal(err)
		}
	}

	end := base.Add(days*24*time.Hour - 7*time.Hour - 13*time.Minute)
	day := 24 * time.Hour
	for _, span := range []int{30, 90, 365} {
		from, to := end.Add(-time.Duration(span)*day), end
		L, H := from.Truncate(day).Add(day), to.Truncate(day)
		u := models.NewUTCTime
		var edgeScores int64
		if err := s.DB.Raw(`SELECT count(*) FROM review_scores WHERE (scored_at >= ? AND scored_at < ?) OR (scored_at >= ? AND scored_at < ?)`,
			u(L.Add(-day)), u(L), u(H), u(H.Add(day))).Scan(&edgeScores).Error; err != nil {
			t.Fatal(err)
		}
		for name, args := range map[string][]any{
			"probe":      {u(to), u(H.Add(day))},
			"score days": {u(L), u(H)},
			"pair days":  {u(L), u(H), u(H)},
			"item days":  {u(L), u(H), u(H), u(H.Add(day)), u(L.Add(-day))},
			"edge items": {u(L.Add(-day)), u(L), u(H), u(H.Add(day))},
		} {
			sql := models.ReviewRollupQueries[name]
			began := time.Now()
			var plan []string
			if err := s.DB.Raw("EXPLAIN (ANALYZE, BUFFERS) "+sql, args...).Scan(&plan).Error; err != nil {
				t.Fatalf("%s over %d days: explain: %v", name, span, err)
			}
			took := time.Since(began)
			text := strings.Join(plan, "\n")
			if strings.Contains(text, "Seq Scan on review_scores") || strings.Contains(text, "Seq Scan on review_items") ||
				(span <= 90 && strings.Contains(text, "Seq Scan")) {
				t.Errorf("%s over %d days scans a table:\n%s", name, span, text)
			}
			buffers := 0
			if m := buffersRE.FindStringSubmatch(text); m != nil {
				for _, g := range m[1:] {
					if g != "" {
						var n int
						fmt.Sscan(g, &n)
						buffers += n
					}
				}
			}
			// A rollup day is under a page of each table (10 queues; 5
			// criteria and 3 parts × 6 scores per pair of days, about 3
			// pairs of days per day); an edge score is its index entry,
			// heap page, the item's probe and the probe for the item's
			// other score (about 12 buffers). A scan of a whole rollup
			// table (three years of days) exceeds the 30 and 90 day bounds.
			limit := 2*span + 100
			if name == "edge items" {
				limit = 12*int(edgeScores) + 100
			}
			if buffers > limit {
				t.Errorf("%s over %d days touched %d buffers, more than %d (%d scores in its partial days):\n%s",
					name, span, buffers, limit, edgeScores, text)
			}
			t.Logf("%s over %d days: %d buffers, %v (%d scores in the partial days)", name, span, buffers, took.Round(time.Microsecond), edgeScores)
		}
	}
}
