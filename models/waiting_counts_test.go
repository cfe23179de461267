package models_test

import (
	"context"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestWaitingCountsFollowSessions checks the maintained counts of the
// sessions waiting on input (waiting_counts, migration 00037) against the
// sessions after each kind of write that moves a session into, out of or
// between queues while it waits: a worker's question, an answer, a
// cancellation, and hand-written SQL (insert, queue change, delete). The
// counts the inbox shows follow; a write with the triggers off is found by
// verify and rebuilt by migrate up's repair.
func TestWaitingCountsFollowSessions(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	check := func(stage string, want int64) {
		t.Helper()
		var drift []struct {
			Queue        string
			Stored, Real int64
		}
		if err := s.DB.Raw(`SELECT queue, coalesce(c.n, 0) AS stored, coalesce(e.n, 0) AS real
FROM (SELECT queue, count(*) AS n FROM sessions WHERE status = 'awaiting_input' GROUP BY queue) e
FULL JOIN (SELECT * FROM waiting_counts WHERE n <> 0) c USING (queue) WHERE e.n IS DISTINCT FROM c.n`).Scan(&drift).Error; err != nil {
			t.Fatal(err)
		}
		if len(drift) > 0 {
			t.Fatalf("%s: waiting_counts differs from the sessions: %+v", stage, drift)
		}
		n, err := s.CountWaitingOnInput(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tabs, err := s.InboxTabs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n != want || tabs.Waiting != want {
			t.Fatalf("%s: waiting count %d, tab %d, want %d", stage, n, tabs.Waiting, want)
		}
	}
	check("empty", 0)
	a := awaitingInput(ctx, t, s, "Which card?")
	b := awaitingInput(ctx, t, s, "Which order?")
	c := awaitingInput(ctx, t, s, "Which address?")
	check("three questions", 3)
	if _, err := s.ProvideInput(ctx, a, "test:controller", "", models.InputInput{ExpectedVersion: v64(4), Answer: "Visa"}); err != nil {
		t.Fatal(err)
	}
	check("one answered", 2)
	if _, err := s.Transition(ctx, b, models.EventSessionCancelled, "test:controller", "", models.TransitionInput{ExpectedVersion: v64(4), Reason: "gave up"}); err != nil {
		t.Fatal(err)
	}
	check("one cancelled", 1)
	for _, q := range []string{
		`UPDATE sessions SET queue = 'billing' WHERE id = '` + c + `'`,
		`INSERT INTO sessions (id, ticket_ref, goal, status, priority, state_version, queue, assignee, last_hash, created_at, updated_at, input_requested_at)
VALUES ('ses_sql_1', 'T-1', 'g', 'awaiting_input', 3, 1, 'billing', '', '', now(), now(), now()),
       ('ses_sql_2', 'T-2', 'g', 'awaiting_input', 3, 1, 'refunds', '', '', now(), now(), now()),
       ('ses_sql_3', 'T-3', 'g', 'completed', 3, 1, 'refunds', '', '', now(), now(), NULL)`,
		`UPDATE sessions SET queue = 'refunds' WHERE id = 'ses_sql_1'`,
		`UPDATE sessions SET status = 'awaiting_input' WHERE id = 'ses_sql_3'`,
		`DELETE FROM sessions WHERE id = 'ses_sql_2'`,
	} {
		if err := s.DB.Exec(q).Error; err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	check("after SQL", 3)
	// Moves between queues keep no negative and no stale row behind.
	var rows []struct {
		Queue string
		N     int64
	}
	if err := s.DB.Raw(`SELECT queue, n FROM waiting_counts WHERE n <> 0 ORDER BY queue`).Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Queue != "billing" || rows[0].N != 1 || rows[1].Queue != "refunds" || rows[1].N != 2 {
		t.Fatalf("waiting_counts = %+v, want billing 1, refunds 2", rows)
	}

	// A write with the triggers off (a bulk load): verify reports it,
	// migrate up's repair rebuilds the counts, and then has nothing to do.
	if n, err := s.RepairWaitingCounts(ctx); err != nil || n != 0 {
		t.Fatalf("repair of exact counts = %d, %v; want 0", n, err)
	}
	if err := execWithoutTriggers(s, `UPDATE sessions SET status = 'completed' WHERE id = 'ses_sql_1'`); err != nil {
		t.Fatal(err)
	}
	wantVerifyProblems(ctx, t, s, models.ProblemWaitingCounts, 1)
	if n, err := s.RepairWaitingCounts(ctx); err != nil || n != 1 {
		t.Fatalf("repair after a write without triggers = %d, %v; want 1 row fixed", n, err)
	}
	check("repaired", 2)
	wantVerifyProblems(ctx, t, s, models.ProblemWaitingCounts, 0)
	if n, err := s.RepairWaitingCounts(ctx); err != nil || n != 0 {
		t.Fatalf("second repair = %d, %v; want 0", n, err)
	}
}
