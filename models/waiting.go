package models

import (
	"context"
	"fmt"
	"time"
)

// The "Waiting on input" view of the inbox: sessions in awaiting_input,
// the longest waiting first. How long a session has waited is the projection
// column input_requested_at (migration 00007): set when the question is
// asked and kept while the session waits, so the view is a keyset read of a
// partial index.

// WaitingRow is one session waiting for input.
type WaitingRow struct {
	ID           string
	TicketRef    string
	Goal         string
	Priority     int
	StateVersion int64
	CurrentStep  string
	Queue        string
	// WaitingSince is when the session entered awaiting_input.
	WaitingSince UTCTime
}

// Waited is how long the session has waited at now.
func (r WaitingRow) Waited(now time.Time) time.Duration { return now.Sub(r.WaitingSince.Time) }

// WaitingPage is one page of the sessions waiting for input.
type WaitingPage struct {
	Rows []WaitingRow
	// Next is the cursor of the next page, empty on the last page.
	Next string
	// Total counts the sessions waiting for input, up to CountCap+1.
	Total int64
}

type waitingKey struct {
	Since UTCTime `json:"w"`
	ID    string  `json:"i"`
}

// WaitingOnInput returns one page of the sessions in awaiting_input, the
// longest waiting first (then by id), after the cursor after: one range read
// of sessions_waiting_input_idx, and a count.
func (s *Store) WaitingOnInput(ctx context.Context, after string, limit int) (WaitingPage, error) {
	if limit <= 0 {
		limit = DefaultInboxLimit
	}
	limit = min(limit, MaxInboxLimit)
	// The status is a literal so that the planner matches the partial index.
	q := `SELECT id, ticket_ref, goal, priority, state_version, current_step, queue, input_requested_at AS waiting_since
FROM sessions WHERE status = 'awaiting_input' AND input_requested_at IS NOT NULL`
	var args []any
	if after != "" {
		var k waitingKey
		if err := decodeCursor(after, &k); err != nil || k.ID == "" || k.Since.IsZero() {
			return WaitingPage{}, &ValidationError{Fields: []FieldError{{Field: "after", Message: "is not a cursor of this view"}}}
		}
		q += ` AND (input_requested_at, id) > (` + s.timeParam() + `, ?)`
		args = append(args, k.Since, k.ID)
	}
	q += ` ORDER BY input_requested_at, id LIMIT ?`
	args = append(args, limit+1)
	var rows []WaitingRow
	if err := s.DB.WithContext(ctx).Raw(q, args...).Scan(&rows).Error; err != nil {
		return WaitingPage{}, fmt.Errorf("waiting on input: %w", err)
	}
	page := WaitingPage{Rows: rows}
	if len(rows) > limit {
		page.Rows = rows[:limit]
		last := page.Rows[limit-1]
		page.Next = encodeCursor(waitingKey{Since: last.WaitingSince, ID: last.ID})
	}
	var err error
	page.Total, err = s.CountWaitingOnInput(ctx)
	return page, err
}

// waitingWhere selects the sessions waiting on input; a literal, so that the
// planner matches the partial sessions_waiting_input_idx.
const waitingWhere = `status = 'awaiting_input'`

// CountWaitingOnInput counts the sessions in awaiting_input, up to
// CountCap+1 (see CountCap).
func (s *Store) CountWaitingOnInput(ctx context.Context) (int64, error) {
	var n int64
	if err := s.DB.WithContext(ctx).Raw(s.waitingCount().count).Scan(&n).Error; err != nil {
		return 0, fmt.Errorf("count waiting on input: %w", err)
	}
	return n, nil
}

// waitingCount is the count of the sessions waiting on input as a count of
// a batch (boundedCounts; key 0): on PostgreSQL the sum of waiting_counts,
// which the triggers of migration 00037 keep in the writing transaction (a
// bounded count read up to 1,001 index entries at a million events, on
// every inbox view's tab); on SQLite the bounded count over
// sessions_waiting_input_idx.
func (s *Store) waitingCount() countQuery {
	if s.Dialect == Postgres {
		return countQuery{count: cappedCounterSum("waiting_counts")}
	}
	return countQuery{count: boundedCount(waitingWhere, waitingOrder)}
}

// waitingCountsDriftSQL counts the queues whose row of waiting_counts
// differs from the sessions waiting there (one grouped read of them).
const waitingCountsDriftSQL = `SELECT count(*) FROM (SELECT queue, count(*) AS n FROM sessions WHERE ` + waitingWhere + ` GROUP BY queue) e
	FULL JOIN (SELECT * FROM waiting_counts WHERE n <> 0) c USING (queue) WHERE e.n IS DISTINCT FROM c.n`

// waitingCountsTable is waiting_counts (migration 00037) as a derivedTable.
var waitingCountsTable = derivedTable{name: "waiting_counts", what: "waiting counts", driftSQL: waitingCountsDriftSQL,
	rebuildSQL: `INSERT INTO waiting_counts (queue, n) SELECT queue, count(*) FROM sessions WHERE ` + waitingWhere + ` GROUP BY queue`}

// RepairWaitingCounts checks the maintained counts of the sessions waiting
// on input (PostgreSQL, migration 00037) against the sessions and, when
// they differ, rebuilds them. It returns how many rows were wrong.
func (s *Store) RepairWaitingCounts(ctx context.Context) (int64, error) {
	return s.repair(ctx, waitingCountsTable)
}

// CountInHumanHands counts the sessions of the inbox (escalated or
// claimed), for the tab of the "Waiting on input" view, up to CountCap+1.
func (s *Store) CountInHumanHands(ctx context.Context) (int64, error) {
	var n int64
	if err := s.DB.WithContext(ctx).Raw(humansCount).Scan(&n).Error; err != nil {
		return 0, fmt.Errorf("count inbox: %w", err)
	}
	return n, nil
}
