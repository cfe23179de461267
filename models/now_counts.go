package models

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The metrics' figures that are not windowed: where the escalations in
// human hands stand against their SLA (SLAStats) and the stalled sessions
// (StalledStats), read in one statement (and, on PostgreSQL, a second one
// when an SLA threshold falls in a minute with escalations).
//
// On PostgreSQL the SLA figures come from counts the triggers of migration
// 00032 keep in the writing transaction: sla_counts, the sessions in human
// hands per priority and minute of escalated_at. Counting the sessions
// themselves read the whole backlog on every metrics request (8,939
// sessions in human hands at a million events); the counts are a few rows
// per priority and minute. The SLA thresholds move with the clock, so a
// threshold t (escalated at or before t) is the sum of the minutes before
// t's own plus, when sla_counts says t's minute has any, an exact count of
// that minute's sessions (sessions_inbox_idx): at most one minute of
// escalations per threshold, whatever the backlog. The stalled sessions are
// counted from sessions_stalled_idx, which holds exactly them: a maintained
// counter per step would be one row that every result naming that next
// step and every delegation of it updates, and concurrent writers would
// queue on it (see the migration)
// (TestNowStatsDoNotReadTheBacklog). SQLite counts the sessions.

// nowRow is one row of the first statement of countNow.
type nowRow struct {
	Kind     string
	Step     string
	Priority int
	N        int64
	// On PostgreSQL (kind sla): the sessions escalated in the minutes
	// before the breach and the near-breach thresholds' minutes, and in
	// those minutes. On SQLite: the breached and near-breach sessions.
	LtBreach, AtBreach, LtNear, AtNear int64
}

// slaThresholds are the breach and near-breach thresholds of a budget at
// now: escalated at or before them, a session is breached or near breach.
func slaThresholds(now time.Time, budget time.Duration) (breach, near UTCTime) {
	return NewUTCTime(now.Add(-budget)), NewUTCTime(now.Add(-time.Duration(NearBreachFraction * float64(budget))))
}

// countNow counts the SLA states and, with stalled, the stalled sessions.
func (s *Store) countNow(ctx context.Context, stalled bool) (SLAStats, StalledStats, error) {
	if s.Dialect != Postgres {
		return s.countNowSessions(ctx, stalled)
	}
	now := s.now()
	policy := s.slaPolicy()
	buckets := s.slaBuckets()
	// The thresholds' minutes per priority: a CASE over the priorities the
	// policy knows, the others sharing the default's.
	minute := func(t UTCTime) UTCTime { return NewUTCTime(t.Truncate(time.Minute)) }
	caseOf := func(pick func(budget time.Duration) UTCTime) (string, []any) {
		var b strings.Builder
		var args []any
		b.WriteString("CASE priority")
		for _, bk := range buckets {
			if bk.where != "priority = ?" {
				continue
			}
			b.WriteString(" WHEN " + strconv.Itoa(bk.args[0].(int)) + " THEN CAST(? AS timestamptz)")
			args = append(args, pick(bk.budget))
		}
		b.WriteString(" ELSE CAST(? AS timestamptz) END")
		return b.String(), append(args, pick(policy.For(DefaultPriority)))
	}
	breachMin, bArgs := caseOf(func(d time.Duration) UTCTime { b, _ := slaThresholds(now, d); return minute(b) })
	nearMin, nArgs := caseOf(func(d time.Duration) UTCTime { _, n := slaThresholds(now, d); return minute(n) })
	q := `SELECT 'sla' AS kind, '' AS step, priority, CAST(sum(n) AS bigint) AS n,
	CAST(sum(CASE WHEN escalated_min < ` + breachMin + ` THEN n ELSE 0 END) AS bigint) AS lt_breach,
	CAST(sum(CASE WHEN escalated_min = ` + breachMin + ` THEN n ELSE 0 END) AS bigint) AS at_breach,
	CAST(sum(CASE WHEN escalated_min < ` + nearMin + ` THEN n ELSE 0 END) AS bigint) AS lt_near,
	CAST(sum(CASE WHEN escalated_min = ` + nearMin + ` THEN n ELSE 0 END) AS bigint) AS at_near
FROM sla_counts WHERE n <> 0 GROUP BY priority
UNION ALL
SELECT 'breaches', '', 0, count(*), 0, 0, 0, 0 FROM events WHERE type = ?`
	args := append(append(append(append(append([]any{}, bArgs...), bArgs...), nArgs...), nArgs...), EventEscalationSLABreached)
	if stalled {
		q += `
UNION ALL
SELECT 'stalled', next_step, 0, count(*), 0, 0, 0, 0 FROM sessions WHERE ` + stalledSQL + ` GROUP BY next_step`
	}
	var rows []nowRow
	if err := s.DB.WithContext(ctx).Raw(q, args...).Scan(&rows).Error; err != nil {
		return SLAStats{}, StalledStats{}, err
	}
	var sla SLAStats
	st := StalledStats{ByStep: map[string]int64{}}
	// The sessions escalated at or before each threshold; the exact counts
	// of the thresholds' own minutes are read below, when they have any.
	type exact struct {
		priority int
		from, to UTCTime
		add      *int64
	}
	var exacts []exact
	var breachedLE, nearLE int64
	known := map[int]bool{}
	for _, bk := range buckets {
		if bk.where == "priority = ?" {
			known[bk.args[0].(int)] = true
		}
	}
	for _, r := range rows {
		switch r.Kind {
		case "breaches":
			sla.BreachEvents += r.N
		case "stalled":
			st.Sessions += r.N
			st.ByStep[r.Step] += r.N
		case "sla":
			budget := policy.For(DefaultPriority)
			if known[r.Priority] {
				budget = policy.For(r.Priority)
			}
			breach, near := slaThresholds(now, budget)
			sla.Open += r.N
			breachedLE += r.LtBreach
			nearLE += r.LtNear
			if r.AtBreach != 0 {
				exacts = append(exacts, exact{r.Priority, minute(breach), breach, &breachedLE})
			}
			if r.AtNear != 0 {
				exacts = append(exacts, exact{r.Priority, minute(near), near, &nearLE})
			}
		}
	}
	if len(exacts) > 0 {
		parts := make([]string, len(exacts))
		var eargs []any
		for i, e := range exacts {
			parts[i] = `SELECT ` + strconv.Itoa(i) + ` AS w, count(*) AS n FROM sessions WHERE ` + inHumanHandsSQL +
				` AND priority = ? AND escalated_at >= ? AND escalated_at <= ?`
			eargs = append(eargs, e.priority, e.from, e.to)
		}
		var counts []struct {
			W int
			N int64
		}
		if err := s.DB.WithContext(ctx).Raw(strings.Join(parts, "\nUNION ALL\n"), eargs...).Scan(&counts).Error; err != nil {
			return SLAStats{}, StalledStats{}, fmt.Errorf("the thresholds' minutes: %w", err)
		}
		for _, c := range counts {
			*exacts[c.W].add += c.N
		}
	}
	sla.Breached, sla.NearBreach = breachedLE, nearLE-breachedLE
	sla.OK = sla.Open - sla.Breached - sla.NearBreach
	return sla, st, nil
}

// countNowSessions is countNow on SQLite: one aggregate over the sessions
// in human hands per SLA bucket, the breach events and the stalled
// sessions by step, in one statement.
func (s *Store) countNowSessions(ctx context.Context, stalled bool) (SLAStats, StalledStats, error) {
	now := s.now()
	var parts []string
	var args []any
	for _, b := range s.slaBuckets() {
		breachAt, nearAt := slaThresholds(now, b.budget)
		parts = append(parts, `SELECT 'sla' AS kind, '' AS step, 0 AS priority, count(*) AS n,
	coalesce(sum(CASE WHEN escalated_at <= ? THEN 1 ELSE 0 END), 0) AS lt_breach,
	coalesce(sum(CASE WHEN escalated_at > ? AND escalated_at <= ? THEN 1 ELSE 0 END), 0) AS at_breach, 0 AS lt_near, 0 AS at_near
FROM sessions WHERE `+inHumanHandsSQL+` AND `+b.where)
		args = append(append(args, breachAt, breachAt, nearAt), b.args...)
	}
	parts = append(parts, `SELECT 'breaches', '', 0, count(*), 0, 0, 0, 0 FROM events WHERE type = ?`)
	args = append(args, EventEscalationSLABreached)
	if stalled {
		parts = append(parts, `SELECT 'stalled', next_step, 0, count(*), 0, 0, 0, 0 FROM sessions WHERE `+stalledSQL+` GROUP BY next_step`)
	}
	var rows []nowRow
	if err := s.DB.WithContext(ctx).Raw(strings.Join(parts, "\nUNION ALL\n"), args...).Scan(&rows).Error; err != nil {
		return SLAStats{}, StalledStats{}, err
	}
	var sla SLAStats
	st := StalledStats{ByStep: map[string]int64{}}
	for _, r := range rows {
		switch r.Kind {
		case "sla":
			sla.Open += r.N
			sla.Breached += r.LtBreach
			sla.NearBreach += r.AtBreach
		case "breaches":
			sla.BreachEvents += r.N
		case "stalled":
			st.Sessions += r.N
			st.ByStep[r.Step] += r.N
		}
	}
	sla.OK = sla.Open - sla.Breached - sla.NearBreach
	return sla, st, nil
}

// nowCountsDriftSQL counts the rows of sla_counts that differ from the
// sessions (one grouped read of the backlog), for RepairNowCounts.
const nowCountsDriftSQL = `SELECT count(*) FROM (SELECT priority, date_bin('1 minute', escalated_at, timestamptz '1970-01-01 00:00:00+00') AS escalated_min, count(*) AS n
	FROM sessions WHERE ` + inHumanHandsSQL + ` GROUP BY 1, 2) e
	FULL JOIN (SELECT * FROM sla_counts WHERE n <> 0) c USING (priority, escalated_min) WHERE e.n IS DISTINCT FROM c.n`

// slaCountsTable is sla_counts (migration 00032) as a derivedTable.
var slaCountsTable = derivedTable{name: "sla_counts", what: "sla counts", driftSQL: nowCountsDriftSQL,
	rebuildSQL: `INSERT INTO sla_counts (priority, escalated_min, n)
SELECT priority, date_bin('1 minute', escalated_at, timestamptz '1970-01-01 00:00:00+00'), count(*) FROM sessions
WHERE ` + inHumanHandsSQL + ` GROUP BY 1, 2`}

// RepairNowCounts checks the maintained SLA counts of PostgreSQL
// (migration 00032) against the sessions and, when they differ, rebuilds
// them. It returns how many rows were wrong.
func (s *Store) RepairNowCounts(ctx context.Context) (int64, error) {
	return s.repair(ctx, slaCountsTable)
}
