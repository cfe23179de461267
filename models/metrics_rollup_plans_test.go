package models_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestMetricsRollupPlansAtScale fills the rollup tables of one PostgreSQL
// schema with a year of hours (10 queues, about a million session-hour
// rows, what a million events make and more, and a million rows of
// metric_session_firsts) and checks that the reads of
// a metrics request, for the 24 h, 7 d and 30 d windows and a custom one,
// read an index and never scan a table sequentially. It asserts on plans,
// never on time (times are logged). -short builds a tenth.
func TestMetricsRollupPlansAtScale(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	rows := 1_000_000
	if testing.Short() {
		rows = 100_000
	}
	const hours = 365 * 24
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	start := time.Now()
	for _, q := range []string{
		fmt.Sprintf(`INSERT INTO metric_session_hours (bucket, queue, session_id, reworked, infra)
SELECT '2026-01-01'::timestamptz + make_interval(hours => (g::bigint * %d / %d)::int), 'q' || (g %% 10), 'ses_' || lpad((g / 3)::text, 9, '0'), g %% 7 = 0, g %% 11 = 0
FROM generate_series(0, %d) g`, hours, rows, rows-1),
		fmt.Sprintf(`INSERT INTO metric_rollups (bucket, queue, name, value)
SELECT '2026-01-01'::timestamptz + make_interval(hours => h), q, n, h %% 13 + 1
FROM generate_series(0, %d) h, unnest(ARRAY['*','q0','q1','q2','q3','q4','q5','q6','q7','q8','q9']) q,
	unnest(ARRAY['ended','succeeded','committed','machine_n','machine_sum','machine_max','escalations','decisions']) n
WHERE h %% %d = 0`, hours-1, max(1, 1_000_000/rows)),
		// Per hour, queue and kind, sessions whose previous hour of the
		// kind was none, the hour before, 2 and 24 hours before.
		fmt.Sprintf(`INSERT INTO metric_session_firsts (bucket, queue, kind, prev, n)
SELECT b, q, k, CASE WHEN gap = 0 THEN '1970-01-01'::timestamptz ELSE b - make_interval(hours => gap) END, h %% 17 + 1
FROM generate_series(0, %d) h, LATERAL (SELECT '2026-01-01'::timestamptz + make_interval(hours => h) AS b) hb,
	unnest(ARRAY['*','q0','q1','q2','q3','q4','q5','q6','q7','q8','q9']) q,
	unnest(ARRAY['active','reworked','infra']) k, unnest(ARRAY[0, 1, 2, 24]) gap
WHERE h %% %d = 0`, hours-1, max(1, 1_000_000/rows)),
		`ANALYZE metric_session_hours`, `ANALYZE metric_rollups`, `ANALYZE metric_session_firsts`,
	} {
		if err := s.DB.Exec(q).Error; err != nil {
			t.Fatalf("build: %v", err)
		}
	}
	t.Logf("built the rollup tables in %v", time.Since(start).Round(time.Millisecond))
	end := base.Add(hours * time.Hour)
	windows := map[string][2]time.Time{
		"24h": {end.Add(-24 * time.Hour), end}, "7d": {end.Add(-7 * 24 * time.Hour), end},
		"30d": {end.Add(-30 * 24 * time.Hour), end}, "custom": {base.Add(100 * 24 * time.Hour), base.Add(120 * 24 * time.Hour)},
	}
	ids := make([]string, 500)
	for i := range ids {
		ids[i] = fmt.Sprintf("ses_%09d", rows/3-1-i*7)
	}
	for name, sql := range models.MetricRollupQueries {
		for wname, win := range windows {
			a, b := models.NewUTCTime(win[0]), models.NewUTCTime(win[1])
			// Parameters in order: the ids (if any), the window, and its
			// start again (the previous hours before it).
			var args []any
			if strings.Contains(sql, "session_id IN ?") {
				args = append(args, ids)
			}
			args = append(args, a, b, a)[:strings.Count(sql, "?")]
			var plan []string
			if err := s.DB.Raw("EXPLAIN "+sql, args...).Scan(&plan).Error; err != nil {
				t.Fatalf("%s %s: explain: %v", name, wname, err)
			}
			text := strings.Join(plan, "\n")
			if strings.Contains(text, "Seq Scan") {
				t.Errorf("%s over %s scans a table:\n%s", name, wname, text)
			}
			began := time.Now()
			if err := s.DB.Exec(sql, args...).Error; err != nil {
				t.Fatalf("%s %s: %v", name, wname, err)
			}
			t.Logf("%s over %s: %v", name, wname, time.Since(began).Round(time.Microsecond))
		}
	}

	// A dashboard request reads its window and its 12 trend buckets with
	// one statement per read, a branch per window (the one-window
	// statement): each branch must keep its index.
	for name, sql := range models.MetricRollupUnions(13) {
		if name == "span sessions" || name == "rejections" {
			continue // span sessions: over events, below
		}
		var args []any
		for b := 0; b < 13; b++ {
			win := [2]time.Time{end.Add(-24*time.Hour + time.Duration(b)*2*time.Hour), end.Add(-22*time.Hour + time.Duration(b)*2*time.Hour)}
			if b == 0 {
				win = windows["24h"]
			}
			a, e := models.NewUTCTime(win[0]), models.NewUTCTime(win[1])
			switch name {
			case "sums":
				args = append(args, a, e)
			case "sessions":
				args = append(args, a, e, a)
			case "edge sessions":
				args = append(args, ids, a, e)
			}
		}
		var plan []string
		if err := s.DB.Raw("EXPLAIN "+sql, args...).Scan(&plan).Error; err != nil {
			t.Fatalf("%s over 13 windows: explain: %v", name, err)
		}
		if text := strings.Join(plan, "\n"); strings.Contains(text, "Seq Scan") {
			t.Errorf("%s over 13 windows scans a table:\n%s", name, text)
		}
	}

	// The fold of a window's partial hours: 200,000 events of 20,000
	// sessions over 30 days (the foreign key to sessions is not checked
	// while they are written).
	events := rows / 5
	err := execWithoutTriggers(s,
		fmt.Sprintf(`INSERT INTO events (id, session_id, seq, type, actor, version_before, version_after, payload, prev_hash, hash, created_at)
SELECT 'evt_' || g, 'ses_' || lpad((g / 10)::text, 9, '0'), g %% 10 + 1, 'delegation.leased', 'worker:w', g %% 10, g %% 10 + 1, '{}', '', '',
	'2026-12-01'::timestamptz - make_interval(secs => (%d - g)::double precision * %d / %d)
FROM generate_series(0, %d) g`, events, 30*24*3600, events, events-1),
		`ANALYZE events`)
	if err != nil {
		t.Fatalf("build events: %v", err)
	}
	end = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	edge := [2]models.UTCTime{models.NewUTCTime(end.Add(-40 * time.Minute)), models.NewUTCTime(end)}
	var edgeIDs []string
	if err := s.DB.Raw(models.MetricFoldQueries["sessions"], edge[0], edge[1]).Scan(&edgeIDs).Error; err != nil || len(edgeIDs) == 0 {
		t.Fatalf("sessions of the last 40 minutes: %d, %v", len(edgeIDs), err)
	}
	for name, args := range map[string][]any{
		"sessions": {edge[0], edge[1]},
		"events":   {[]string{"delegation.created"}, edgeIDs[:min(len(edgeIDs), 500)], edge[1]},
	} {
		var plan []string
		if err := s.DB.Raw("EXPLAIN "+models.MetricFoldQueries[name], args...).Scan(&plan).Error; err != nil {
			t.Fatalf("fold %s: explain: %v", name, err)
		}
		if text := strings.Join(plan, "\n"); strings.Contains(text, "Seq Scan") {
			t.Errorf("the fold's %s query over a partial hour scans a table:\n%s", name, text)
		}
	}
	// Both partial hours of a window in one read.
	first := [2]models.UTCTime{models.NewUTCTime(end.Add(-24*time.Hour - 40*time.Minute)), models.NewUTCTime(end.Add(-24 * time.Hour))}
	for name, args := range map[string][]any{
		"span sessions": {first[0], first[1], edge[0], edge[1]},
	} {
		var plan []string
		if err := s.DB.Raw("EXPLAIN "+models.MetricRollupUnions(2)[name], args...).Scan(&plan).Error; err != nil {
			t.Fatalf("%s: explain: %v", name, err)
		}
		if text := strings.Join(plan, "\n"); strings.Contains(text, "Seq Scan") {
			t.Errorf("the %s of a window's two ends scan a table:\n%s", name, text)
		}
	}
}
