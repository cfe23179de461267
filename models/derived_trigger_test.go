package models_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestWorkerWritesSkipDerivedTrigger pins the cost that migration 38 took
// off every session write on PostgreSQL: PostgreSQL prepares the WHEN
// clause of each row trigger an UPDATE may fire once per statement, and
// every session write is a statement of one row, so the tables kept from
// the sessions (inbox_counts, sla_counts, inbox_rows, waiting_counts) are
// kept by one AFTER UPDATE trigger with one short clause. The test fails
// when an UPDATE trigger is added to sessions beside it, and when a
// worker's writes (delegate, lease, heartbeat, result) reach the trigger's
// function: it replaces the function with one that fails, runs two
// delegate → lease → result cycles, and then checks that an escalation
// does reach it.
func TestWorkerWritesSkipDerivedTrigger(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()

	var names []string
	// tgtype bit 4 (16) is TRIGGER_TYPE_UPDATE.
	if err := s.DB.Raw(`SELECT tgname FROM pg_trigger
		WHERE tgrelid = 'sessions'::regclass AND NOT tgisinternal AND tgtype & 16 <> 0 ORDER BY tgname`).Scan(&names).Error; err != nil {
		t.Fatal(err)
	}
	if want := []string{"sessions_derived_update", "sessions_search_doc_update"}; !slices.Equal(names, want) {
		t.Fatalf("UPDATE triggers on sessions: %v, want %v (a row trigger's WHEN clause is prepared on every session write)", names, want)
	}

	if err := s.DB.Exec(`CREATE OR REPLACE FUNCTION sessions_derived_track() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'derived trigger called: % -> %', OLD.status, NEW.status;
END;
$$`).Error; err != nil {
		t.Fatal(err)
	}

	id, dlg := storetest.Delegated(ctx, t, s, "derived")
	result := func(dlg, rt string) error {
		t.Helper()
		l, err := s.Claim(ctx, "derived", "w-1", "test:worker", "")
		if err != nil || l == nil || l.DelegationID != dlg {
			t.Fatalf("claim: %+v, %v (want delegation %s)", l, err, dlg)
		}
		if _, err := s.Heartbeat(ctx, l.DelegationID, l.LeaseToken); err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
		in := models.ResultInput{LeaseToken: l.LeaseToken, SessionID: id, Step: l.Step, ResultType: rt,
			Output: json.RawMessage(`{"checked":true}`), Evidence: []models.Evidence{{Claim: "order paid", Source: "orders-db"}}}
		switch rt {
		case models.ResultCompleted:
			in.NextStep = "issue-refund"
		case models.ResultEscalated:
			in.Question = "Approve the refund?"
		}
		_, err = s.SubmitResult(ctx, l.DelegationID, "test:worker", "", in)
		return err
	}
	if err := result(dlg, models.ResultCompleted); err != nil {
		t.Fatalf("completed result: %v", err)
	}
	sess, err := s.GetSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	v := sess.StateVersion
	out, err := s.Delegate(ctx, id, "test:controller", "", models.DelegateInput{Queue: "derived", Step: "issue-refund", ExpectedVersion: &v})
	if err != nil {
		t.Fatalf("second delegation: %v", err)
	}
	var d models.DelegationCreated
	if err := out.DecodeData(&d); err != nil {
		t.Fatal(err)
	}
	err = result(d.DelegationID, models.ResultEscalated)
	if err == nil || !strings.Contains(err.Error(), "derived trigger called: running -> escalated") {
		t.Fatalf("escalated result: %v, want the derived trigger's function called", err)
	}
}
