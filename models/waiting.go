package models

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// The "Waiting on input" view of the inbox: sessions in awaiting_input,
// the longest waiting first. How long a session has waited is read from the
// event log (the event that asked the question), not from a column, so it
// needs no schema change and cannot drift from the history.

// enteredAwaitingInput are the events that move a session into
// awaiting_input by asking something. (session.resumed also returns a paused
// session there, but the question has been waiting since it was asked.)
// While a session waits, none of these can happen again without it leaving
// awaiting_input first, so the newest of them is when the current wait began.
var enteredAwaitingInput = []EventType{EventResultNeedsInput, EventResultFailed, EventHumanRequestedInput}

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
	// Total counts every session waiting for input.
	Total int64
}

type waitingKey struct {
	Since UTCTime `json:"w"`
	ID    string  `json:"i"`
}

// WaitingOnInput returns one page of the sessions in awaiting_input, the
// longest waiting first (then by id), after the cursor after. A page is one
// query: each awaiting_input row (found through the status index) looks up
// its newest asking event through events (session_id, type, seq).
func (s *Store) WaitingOnInput(ctx context.Context, after string, limit int) (WaitingPage, error) {
	if limit <= 0 {
		limit = DefaultInboxLimit
	}
	limit = min(limit, MaxInboxLimit)
	types := make([]string, len(enteredAwaitingInput))
	for i, t := range enteredAwaitingInput {
		types[i] = "'" + string(t) + "'"
	}
	// The asking event always exists for a session that reached
	// awaiting_input through the write path; updated_at covers a database
	// edited by hand rather than dropping the row.
	inner := `SELECT s.id, s.ticket_ref, s.goal, s.priority, s.state_version, s.current_step, s.queue,
	COALESCE((SELECT e.created_at FROM events e WHERE e.session_id = s.id AND e.type IN (` + strings.Join(types, ", ") + `)
		ORDER BY e.seq DESC LIMIT 1), s.updated_at) AS waiting_since
FROM sessions s WHERE s.status = '` + string(StatusAwaitingInput) + `'`
	q := `SELECT * FROM (` + inner + `) AS w`
	var args []any
	if after != "" {
		var k waitingKey
		if err := decodeCursor(after, &k); err != nil || k.ID == "" || k.Since.IsZero() {
			return WaitingPage{}, &ValidationError{Fields: []FieldError{{Field: "after", Message: "is not a cursor of this view"}}}
		}
		q += ` WHERE (waiting_since, id) > (` + s.timeParam() + `, ?)`
		args = append(args, k.Since, k.ID)
	}
	q += ` ORDER BY waiting_since, id LIMIT ?`
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

// CountWaitingOnInput counts the sessions in awaiting_input.
func (s *Store) CountWaitingOnInput(ctx context.Context) (int64, error) {
	var n int64
	if err := s.DB.WithContext(ctx).Model(&Session{}).Where("status = ?", StatusAwaitingInput).Count(&n).Error; err != nil {
		return 0, fmt.Errorf("count waiting on input: %w", err)
	}
	return n, nil
}

// CountInHumanHands counts the sessions of the inbox (escalated or
// claimed), for the tab of the "Waiting on input" view.
func (s *Store) CountInHumanHands(ctx context.Context) (int64, error) {
	var n int64
	if err := s.DB.WithContext(ctx).Model(&Session{}).Where(inboxWhere).Count(&n).Error; err != nil {
		return 0, fmt.Errorf("count inbox: %w", err)
	}
	return n, nil
}
