package clienttest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestNotesAndResolvedRisks: a controller's notes are taken in any status
// and reach the state; a worker's result resolves an open risk, and naming
// one that is not open is a typed 422.
func TestNotesAndResolvedRisks(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		ts := newTestServer(t, s, nil)
		sess, _ := ts.delegated(t, "notes-q", nil)

		out, err := ts.controller.AddNote(ctx, sess.SessionID, client.NoteInput{Text: "Customer is a VIP",
			Evidence: &client.Evidence{Claim: "CRM tier gold", Source: "crm:42"}, ExpectedVersion: 1})
		if err != nil || out.Status != client.StatusQueued || out.StateVersion != 3 {
			t.Fatalf("note = %+v, %v", out, err)
		}
		_, err = ts.controller.AddNote(ctx, sess.SessionID, client.NoteInput{})
		var ve *client.ValidationError
		if !errors.As(err, &ve) || client.StatusCode(err) != http.StatusUnprocessableEntity || len(ve.Fields) != 1 || ve.Fields[0].Field != "text" {
			t.Fatalf("empty note: %v", err)
		}
		if _, err := ts.worker.AddNote(ctx, sess.SessionID, client.NoteInput{Text: "x"}); client.StatusCode(err) != http.StatusForbidden {
			t.Fatalf("worker note: %v", err)
		}

		l, err := ts.worker.Lease(ctx, "notes-q", client.LeaseInput{Worker: "w-1"})
		if err != nil || l == nil {
			t.Fatalf("lease: %v %v", l, err)
		}
		in := completed(l)
		in.Risks, in.NextStep = []string{"chargeback pending"}, "refund"
		if _, err := ts.worker.Result(ctx, l.DelegationID, in); err != nil {
			t.Fatal(err)
		}
		d, err := ts.controller.Delegate(ctx, sess.SessionID, client.DelegateInput{Queue: "notes-q", Step: "refund", ExpectedVersion: 5})
		if err != nil {
			t.Fatalf("delegate: %v", err)
		}
		l, err = ts.worker.Lease(ctx, "notes-q", client.LeaseInput{Worker: "w-1"})
		if err != nil || l == nil || l.DelegationID != d.DelegationID {
			t.Fatalf("lease 2: %v %v", l, err)
		}
		in = completed(l)
		in.ResolvedRisks = []string{"not open"}
		_, err = ts.worker.Result(ctx, l.DelegationID, in)
		if !errors.As(err, &ve) || ve.Fields[0].Field != "resolved_risks[0]" {
			t.Fatalf("unknown resolved risk: %v", err)
		}
		in.ResolvedRisks = []string{"chargeback pending"}
		if _, err := ts.worker.Result(ctx, l.DelegationID, in); err != nil {
			t.Fatalf("result resolving the risk: %v", err)
		}
		got, err := ts.controller.GetSession(ctx, sess.SessionID)
		if err != nil {
			t.Fatal(err)
		}
		var st models.State
		if err := json.Unmarshal(got.State, &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Notes) != 1 || st.Notes[0].Text != "Customer is a VIP" || st.Notes[0].SeenVersion != 1 ||
			len(st.Risks) != 0 || len(st.ResolvedRisks) != 1 || st.Status != models.StatusCompleted {
			t.Fatalf("state: notes %+v risks %v resolved %+v status %s", st.Notes, st.Risks, st.ResolvedRisks, st.Status)
		}
		// A closed session still takes a note.
		if out, err := ts.controller.AddNote(ctx, sess.SessionID, client.NoteInput{Text: "Refund confirmed by the bank"}); err != nil || out.Status != client.StatusCompleted {
			t.Fatalf("note on a closed session = %+v, %v", out, err)
		}
	})
}
