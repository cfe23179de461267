package models_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestWorkerWritesTouchNoCounterRows holds the maintained counts (the
// *_counts tables kept by triggers on sessions and reviews, and the inbox
// search's copy inbox_rows) off the workers'
// path. A counter row is one row for every writer of its key: a count that
// every delegation, lease or result updated would make concurrent workers
// queue on its lock until commit (a per-step counter of open sessions did:
// bench cycles fell to about a third). Every counter table of the schema,
// present and future, gets a trigger that fails any write to it; the
// worker cycle — delegate, lease, heartbeat, a result naming the next step
// (the session waits for it, stalled), delegate that step, lease, a last
// result, batched leases and results — must still succeed, and an
// escalation, which counts must follow, must fail on the guard.
func TestWorkerWritesTouchNoCounterRows(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	var tables []string
	if err := s.DB.Raw(`SELECT table_name FROM information_schema.tables
WHERE table_schema = current_schema() AND (table_name LIKE '%\_counts' OR table_name = 'inbox_rows') ORDER BY 1`).Scan(&tables).Error; err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"inbox_counts", "review_counts", "sla_counts", "waiting_counts", "inbox_rows"} {
		if !strings.Contains(strings.Join(tables, " "), want) {
			t.Fatalf("counter tables %v: %s missing, the guard would prove nothing", tables, want)
		}
	}
	guard := []string{`CREATE FUNCTION counter_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'a write touched the counter table %', TG_TABLE_NAME;
END;
$$`}
	for _, tb := range tables {
		guard = append(guard, `CREATE TRIGGER counter_guard BEFORE INSERT OR UPDATE OR DELETE ON `+tb+
			` FOR EACH ROW EXECUTE FUNCTION counter_guard()`)
	}
	for _, q := range guard {
		if err := s.DB.Exec(q).Error; err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	const queue = "workers"
	result := func(l *models.Lease, next string) {
		t.Helper()
		if _, err := s.SubmitResult(ctx, l.DelegationID, "token:worker", "", models.ResultInput{
			LeaseToken: l.LeaseToken, SessionID: l.SessionID, Step: l.Step, ResultType: models.ResultCompleted,
			Output: json.RawMessage(`{"ok":true}`), Evidence: []models.Evidence{{Claim: "checked", Source: "db:1"}}, NextStep: next,
		}); err != nil {
			t.Fatalf("result (next step %q): %v", next, err)
		}
	}
	claim := func() *models.Lease {
		t.Helper()
		l, err := s.Claim(ctx, queue, "w-1", "token:worker", "")
		if err != nil || l == nil {
			t.Fatalf("claim: %+v, %v", l, err)
		}
		return l
	}
	sid, _ := storetest.Delegated(ctx, t, s, queue)
	l := claim()
	if _, err := s.Heartbeat(ctx, l.DelegationID, l.LeaseToken); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	result(l, "issue-refund")
	v := int64(4)
	if _, err := s.Delegate(ctx, sid, "test:controller", "", models.DelegateInput{Queue: queue, Step: "issue-refund", ExpectedVersion: &v}); err != nil {
		t.Fatalf("delegate the next step: %v", err)
	}
	result(claim(), "")

	// Batched: several sessions leased at once, their results in one call.
	for range 3 {
		storetest.Delegated(ctx, t, s, queue)
	}
	ls, err := s.ClaimBatch(ctx, queue, "w-2", "token:worker", "", 3)
	if err != nil || len(ls) != 3 {
		t.Fatalf("batch claim: %d leases, %v", len(ls), err)
	}
	var items []models.ResultSubmission
	for _, l := range ls {
		items = append(items, models.ResultSubmission{DelegationID: l.DelegationID, Input: models.ResultInput{
			LeaseToken: l.LeaseToken, SessionID: l.SessionID, Step: l.Step, ResultType: models.ResultCompleted,
			Output: json.RawMessage(`{"ok":true}`), Evidence: []models.Evidence{{Claim: "checked", Source: "db:2"}}, NextStep: "ship",
		}})
	}
	outs, err := s.SubmitResults(ctx, "token:worker", items)
	if err != nil {
		t.Fatalf("batched results: %v", err)
	}
	for i, o := range outs {
		if o.Err != nil {
			t.Fatalf("batched result %d: %v", i, o.Err)
		}
	}

	// The guard is live: a session entering human hands moves counts.
	v = 4 // created, delegated, leased, result (open, waiting for its next step)
	_, err = s.Transition(ctx, ls[0].SessionID, models.EventSessionEscalated, "test:controller", "", models.TransitionInput{ExpectedVersion: &v, Reason: "needs a human"})
	if err == nil || !strings.Contains(err.Error(), "counter table") {
		t.Fatalf("an escalation wrote no counter row (%v): the guard is not in place", err)
	}
}
