package models

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Bounded counts. The console shows how many sessions each view, filter and
// chip holds. An exact count(*) reads every matching row, so its cost grows
// with the data: at a million sessions "Completed" alone is hundreds of
// thousands of index entries per page view. The console's counts therefore
// stop at CountCap+1 rows ("1,000+"): each is a LIMIT inside a subquery over
// an index range, so a page view costs the same at 10,000 sessions as at
// 10,000,000. Exact numbers at any size are the metrics' business.

// CountCap is the largest count the console shows exactly; a bounded count
// above it is "more than CountCap" (see CountMore).
const CountCap = 1000

// CountMore reports whether a bounded count stands for "more than CountCap".
func CountMore(n int64) bool { return n > CountCap }

// boundedCount is a query counting the rows of sessions matching where, up to
// CountCap+1: "SELECT count(*) FROM (SELECT 1 FROM sessions WHERE … ORDER BY
// … LIMIT 1001)". order names the columns of the index that should serve
// the count: without it, a LIMIT over a common status makes a sequential
// scan look cheap to the planner (it expects to stop early), and where the
// matching rows sit at the end of the table that scan reads all of it.
func boundedCount(where, order string) string {
	return "SELECT count(*) AS n FROM (SELECT 1 FROM sessions WHERE " + where + " ORDER BY " + order +
		" LIMIT " + strconv.Itoa(CountCap+1) + ") AS b"
}

// The index orders of the bounded counts (see boundedCount).
const (
	inboxOrder   = "priority, escalated_at, id"       // sessions_inbox_idx
	waitingOrder = "input_requested_at, id"           // sessions_waiting_input_idx
	stalledOrder = "next_step, queue, updated_at, id" // sessions_stalled_idx
	statusOrder  = "status, updated_at, id"           // sessions_status_updated_idx
)

// countQuery is one bounded count of a batch: its key, its WHERE, the
// columns of the index that serves it (see boundedCount) and its arguments.
type countQuery struct {
	key   int
	where string
	order string
	args  []any
	// count, when set, replaces the bounded count: a statement of one row
	// and one column n (a count maintained elsewhere, see humansCount).
	count string
}

// boundedCounts runs several bounded counts over sessions in one statement
// (a UNION ALL of keyed counts) and returns the count of each key.
func (s *Store) boundedCounts(ctx context.Context, qs []countQuery) (map[int]int64, error) {
	out := make(map[int]int64, len(qs))
	if len(qs) == 0 {
		return out, nil
	}
	parts := make([]string, len(qs))
	var args []any
	for i, q := range qs {
		if q.count != "" {
			parts[i] = "SELECT " + strconv.Itoa(q.key) + " AS k, n FROM (" + q.count + ") AS b" + strconv.Itoa(i)
		} else {
			parts[i] = "SELECT " + strconv.Itoa(q.key) + " AS k, count(*) AS n FROM (SELECT 1 FROM sessions WHERE " + q.where +
				" ORDER BY " + q.order + " LIMIT " + strconv.Itoa(CountCap+1) + ") AS b" + strconv.Itoa(i)
		}
		args = append(args, q.args...)
	}
	var rows []struct {
		K int
		N int64
	}
	if err := s.read(ctx).Raw(strings.Join(parts, "\nUNION ALL\n"), args...).Scan(&rows).Error; err != nil {
		return nil, err
	}
	for _, r := range rows {
		out[r.K] = r.N
	}
	return out, nil
}

// CountByStatusCapped counts sessions per status, each up to CountCap+1:
// one bounded range read of sessions_status_updated_idx per status, for the
// sessions page's chips. CountByStatus gives exact numbers at the cost of a
// full read.
func (s *Store) CountByStatusCapped(ctx context.Context) (map[Status]int64, error) {
	qs := make([]countQuery, len(AllStatuses))
	for i, st := range AllStatuses {
		// A literal, like the inbox's statuses, so that every branch is
		// planned for its own status.
		qs[i] = countQuery{key: i, where: "status = '" + string(st) + "'", order: statusOrder}
	}
	got, err := s.boundedCounts(ctx, qs)
	if err != nil {
		return nil, fmt.Errorf("count sessions by status: %w", err)
	}
	out := make(map[Status]int64, len(AllStatuses))
	for i, st := range AllStatuses {
		if got[i] > 0 {
			out[st] = got[i]
		}
	}
	return out, nil
}

// CountStalledCapped counts the stalled sessions up to CountCap+1, through
// sessions_stalled_idx anti-joined with routes.
func (s *Store) CountStalledCapped(ctx context.Context) (int64, error) {
	var n int64
	if err := s.read(ctx).Raw(boundedCount(stalledSQL, stalledOrder)).Scan(&n).Error; err != nil {
		return 0, fmt.Errorf("count stalled sessions: %w", err)
	}
	return n, nil
}

// InboxTabCounts are the numbers on the inbox's view tabs, each bounded.
type InboxTabCounts struct {
	// Humans counts the sessions in human hands (escalated or claimed).
	Humans int64
	// Waiting counts the sessions waiting on input.
	Waiting int64
	// Stalled counts the stalled sessions.
	Stalled int64
}

// humansCount counts the sessions in human hands from inbox_counts
// (maintained by the triggers of migration 00029), capped at CountCap+1
// like the bounded counts it sits next to: it sums a few hundred counter
// rows instead of reading a thousand index entries of the backlog.
var humansCount = cappedCounterSum("inbox_counts")

// cappedCounterSum is a count from a table of maintained counts (column
// n), capped at CountCap+1 like the bounded counts it sits next to.
func cappedCounterSum(table string) string {
	return `SELECT CAST(CASE WHEN coalesce(sum(n), 0) > ` + strconv.Itoa(CountCap+1) + ` THEN ` + strconv.Itoa(CountCap+1) +
		` ELSE coalesce(sum(n), 0) END AS BIGINT) AS n FROM ` + table + ` WHERE n > 0`
}

// InboxTabs counts the inbox's three views in one statement, each up to
// CountCap+1.
func (s *Store) InboxTabs(ctx context.Context) (InboxTabCounts, error) {
	waiting := s.waitingCount()
	waiting.key = 1
	got, err := s.boundedCounts(ctx, []countQuery{
		{key: 0, count: humansCount},
		waiting,
		{key: 2, where: stalledSQL, order: stalledOrder},
	})
	if err != nil {
		return InboxTabCounts{}, fmt.Errorf("count inbox views: %w", err)
	}
	return InboxTabCounts{Humans: got[0], Waiting: got[1], Stalled: got[2]}, nil
}
