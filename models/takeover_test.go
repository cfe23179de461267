package models_test

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// snap is what a rejected command must leave untouched: the session's
// events, its projection row, its delegations and the idempotency records.
type snap struct {
	Events      int64
	Row         models.Session
	Delegations []models.Delegation
	IdemKeys    int64
}

// fataler is the part of testing.TB (and *rapid.T) the helpers need.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func snapshot(t fataler, s *models.Store, sid string) snap {
	t.Helper()
	var sn snap
	db := s.DB.WithContext(context.Background())
	if err := db.Model(&models.Event{}).Where("session_id = ?", sid).Count(&sn.Events).Error; err != nil {
		t.Fatalf("count events: %v", err)
	}
	if err := db.Where("id = ?", sid).Take(&sn.Row).Error; err != nil {
		t.Fatalf("read session: %v", err)
	}
	if err := db.Where("session_id = ?", sid).Order("id").Find(&sn.Delegations).Error; err != nil {
		t.Fatalf("read delegations: %v", err)
	}
	if err := db.Table("idempotency_keys").Count(&sn.IdemKeys).Error; err != nil {
		t.Fatalf("count idempotency keys: %v", err)
	}
	return sn
}

func assertUnchanged(t fataler, s *models.Store, sid string, before snap) {
	t.Helper()
	after := snapshot(t, s, sid)
	b, _ := json.Marshal(before)
	a, _ := json.Marshal(after)
	if string(a) != string(b) {
		t.Fatalf("a rejected command wrote something:\nbefore %s\nafter  %s", b, a)
	}
}

func mustUser(t testing.TB, s *models.Store, email string, role models.Role) models.User {
	t.Helper()
	u, err := s.CreateUser(context.Background(), models.CreateUserInput{Email: email, Name: strings.Split(email, "@")[0], Role: role, Password: "correct-horse-1"})
	if err != nil {
		t.Fatalf("create user %s: %v", email, err)
	}
	return u
}

func mustState(t fataler, s *models.Store, sid string) models.State {
	t.Helper()
	row, err := s.GetSession(context.Background(), sid)
	if err != nil {
		t.Fatalf("get session: %v", err)
	}
	st, err := row.Decode()
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return st
}

func v64(v int64) *int64 { return &v }

// fieldsOf returns the sorted field names of a validation error, or fails.
func fieldsOf(t testing.TB, err error) []string {
	t.Helper()
	var ve *models.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("want *ValidationError, got %T %v", err, err)
	}
	var fs []string
	for _, f := range ve.Fields {
		fs = append(fs, f.Field)
	}
	sort.Strings(fs)
	return fs
}

func wantFields(t testing.TB, err error, want ...string) {
	t.Helper()
	got := fieldsOf(t, err)
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("validation fields = %v, want %v (%v)", got, want, err)
	}
}

func wantConflict(t testing.TB, err error, current int64) {
	t.Helper()
	var ce *models.ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("want *ConflictError, got %T %v", err, err)
	}
	if ce.CurrentVersion != current {
		t.Fatalf("conflict current version = %d, want %d", ce.CurrentVersion, current)
	}
}

func wantForbidden(t testing.TB, err error) {
	t.Helper()
	if !errors.Is(err, models.ErrForbidden) || models.ErrorCode(err) != models.EFORBIDDEN {
		t.Fatalf("want ErrForbidden, got %T %v", err, err)
	}
}

func wantIllegal(t testing.TB, err error, current int64) {
	t.Helper()
	var ie *models.IllegalTransitionError
	if !errors.As(err, &ie) {
		t.Fatalf("want *IllegalTransitionError, got %T %v", err, err)
	}
	if ie.CurrentVersion != current {
		t.Fatalf("illegal transition current version = %d, want %d", ie.CurrentVersion, current)
	}
}

// workerEscalated delegates a step to queue, leases it and has the worker
// escalate it; it returns the session (escalated, version 4) and delegation.
func workerEscalated(ctx context.Context, t testing.TB, s *models.Store, queue string) (string, string) {
	t.Helper()
	sid := storetest.Session(ctx, t, s, nil)
	out, err := s.Delegate(ctx, sid, "test:controller", "", models.DelegateInput{
		Queue: queue, Step: "check-eligibility", Instructions: "Check the refund policy.", ExpectedVersion: v64(1),
		MaxAttempts: storetest.Ptr(4), LeaseSeconds: storetest.Ptr(90),
	})
	if err != nil {
		t.Fatalf("delegate: %v", err)
	}
	var dc models.DelegationCreated
	if err := out.DecodeData(&dc); err != nil {
		t.Fatal(err)
	}
	l, err := s.Claim(ctx, queue, "w-1", "test:worker", "")
	if err != nil || l == nil {
		t.Fatalf("claim: %v %v", l, err)
	}
	res, err := s.SubmitResult(ctx, dc.DelegationID, "test:worker", "", models.ResultInput{
		LeaseToken: l.LeaseToken, SessionID: sid, Step: "check-eligibility", ResultType: models.ResultEscalated,
		Evidence: []models.Evidence{{Claim: "order total 240 EUR", Source: "orders-db:1182"}},
		Risks:    []string{"above the 200 EUR threshold"}, NextStep: "issue-refund", Question: "Approve a 240 EUR refund?",
		Uncertainty: &models.Uncertainty{Level: 0.3, Notes: "policy unclear"},
	})
	if err != nil {
		t.Fatalf("escalate: %v", err)
	}
	if res.Status != models.StatusEscalated || res.StateVersion != 4 {
		t.Fatalf("escalated outcome = %+v", res)
	}
	return sid, dc.DelegationID
}

// controllerEscalated escalates a fresh open session (no delegation).
func controllerEscalated(ctx context.Context, t testing.TB, s *models.Store) string {
	t.Helper()
	sid := storetest.Session(ctx, t, s, nil)
	if _, err := s.Transition(ctx, sid, models.EventSessionEscalated, "test:controller", "", models.TransitionInput{
		ExpectedVersion: v64(1), Reason: "VIP customer", Question: "Call them?",
	}); err != nil {
		t.Fatalf("escalate: %v", err)
	}
	return sid
}

type people struct{ a, b, admin, reviewer models.User }

func staff(t testing.TB, s *models.Store) people {
	return people{
		a:        mustUser(t, s, "ann@example.com", models.RoleAgent),
		b:        mustUser(t, s, "bob@example.com", models.RoleAgent),
		admin:    mustUser(t, s, "root@example.com", models.RoleAdmin),
		reviewer: mustUser(t, s, "rita@example.com", models.RoleReviewer),
	}
}

func TestTakeoverClaim(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		p := staff(t, s)
		sid := controllerEscalated(ctx, t, s)

		before := snapshot(t, s, sid)
		_, err := s.ClaimEscalation(ctx, sid, p.a, "", models.ClaimInput{})
		wantFields(t, err, "expected_version")
		_, err = s.ClaimEscalation(ctx, sid, p.reviewer, "", models.ClaimInput{ExpectedVersion: v64(2)})
		wantForbidden(t, err)
		_, err = s.ClaimEscalation(ctx, sid, p.a, "", models.ClaimInput{ExpectedVersion: v64(1)})
		wantConflict(t, err, 2)
		assertUnchanged(t, s, sid, before)

		out, err := s.ClaimEscalation(ctx, sid, p.a, "claim-1", models.ClaimInput{ExpectedVersion: v64(2)})
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		if out.Status != models.StatusHumanActive || out.StateVersion != 3 {
			t.Fatalf("claim outcome = %+v", out)
		}
		st := mustState(t, s, sid)
		if st.Assignee != p.a.Actor() || st.Escalation == nil {
			t.Fatalf("state after claim: assignee %q escalation %v", st.Assignee, st.Escalation)
		}
		row, _ := s.GetSession(ctx, sid)
		if row.Assignee != p.a.Actor() {
			t.Fatalf("assignee column = %q", row.Assignee)
		}

		// A second claim, stale or current, says who holds the session.
		before = snapshot(t, s, sid)
		_, err = s.ClaimEscalation(ctx, sid, p.b, "", models.ClaimInput{ExpectedVersion: v64(2)})
		if h, ok := models.IsClaimed(err); !ok || h != p.a.Actor() || models.ErrorCode(err) != models.ECONFLICT {
			t.Fatalf("stale second claim: %T %v", err, err)
		}
		wantConflict(t, err, 3)
		_, err = s.ClaimEscalation(ctx, sid, p.b, "", models.ClaimInput{ExpectedVersion: v64(3)})
		if h, ok := models.IsClaimed(err); !ok || h != p.a.Actor() || models.ErrorCode(err) != models.EILLEGAL {
			t.Fatalf("current second claim: %T %v", err, err)
		}
		wantIllegal(t, err, 3)
		if !strings.Contains(err.Error(), p.a.Actor()) {
			t.Fatalf("error does not name the holder: %v", err)
		}
		// The same claim again with its key replays the first outcome.
		again, err := s.ClaimEscalation(ctx, sid, p.a, "claim-1", models.ClaimInput{ExpectedVersion: v64(2)})
		if err != nil || !again.Replayed || again.EventID != out.EventID {
			t.Fatalf("replayed claim = %+v, %v", again, err)
		}
		assertUnchanged(t, s, sid, before)

		// A claim on a session that is not escalated is illegal.
		open := storetest.Session(ctx, t, s, nil)
		_, err = s.ClaimEscalation(ctx, open, p.a, "", models.ClaimInput{ExpectedVersion: v64(1)})
		wantIllegal(t, err, 1)
		if _, ok := models.IsClaimed(err); ok {
			t.Fatalf("an open session is not claimed: %v", err)
		}
	})
}

func TestTakeoverRelease(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		p := staff(t, s)
		sid := controllerEscalated(ctx, t, s)
		if _, err := s.ClaimEscalation(ctx, sid, p.a, "", models.ClaimInput{ExpectedVersion: v64(2)}); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, s, sid)
		_, err := s.Release(ctx, sid, p.b, "", models.ReleaseInput{ExpectedVersion: v64(3)})
		wantForbidden(t, err)
		_, err = s.Release(ctx, sid, p.a, "", models.ReleaseInput{ExpectedVersion: v64(2)})
		wantConflict(t, err, 3)
		_, err = s.ForceRelease(ctx, sid, p.b, "", models.ReleaseInput{ExpectedVersion: v64(3)})
		wantForbidden(t, err)
		_, err = s.Release(ctx, sid, p.a, "", models.ReleaseInput{ExpectedVersion: v64(0), Reason: strings.Repeat("x", models.MaxNoteLen+1)})
		wantFields(t, err, "expected_version", "reason")
		assertUnchanged(t, s, sid, before)

		out, err := s.Release(ctx, sid, p.a, "", models.ReleaseInput{ExpectedVersion: v64(3), Reason: "end of shift"})
		if err != nil || out.Status != models.StatusEscalated || out.StateVersion != 4 {
			t.Fatalf("release = %+v, %v", out, err)
		}
		if st := mustState(t, s, sid); st.Assignee != "" || st.Escalation == nil {
			t.Fatalf("after release: %+v", st)
		}
		// Released: B may claim now; then the admin takes it away by force.
		if _, err := s.ClaimEscalation(ctx, sid, p.b, "", models.ClaimInput{ExpectedVersion: v64(4)}); err != nil {
			t.Fatalf("claim after release: %v", err)
		}
		out, err = s.ForceRelease(ctx, sid, p.admin, "", models.ReleaseInput{ExpectedVersion: v64(5), Reason: "Bob is off sick"})
		if err != nil || out.Status != models.StatusEscalated {
			t.Fatalf("force release = %+v, %v", out, err)
		}
		evs, err := s.ListEvents(ctx, sid, 5, 10)
		if err != nil || len(evs) != 1 {
			t.Fatalf("events = %v, %v", evs, err)
		}
		var hp models.HumanPayload
		if err := json.Unmarshal([]byte(evs[0].Payload), &hp); err != nil {
			t.Fatal(err)
		}
		if evs[0].Actor != p.admin.Actor() || !hp.Forced || hp.Reason != "Bob is off sick" {
			t.Fatalf("force release event = %+v %+v", evs[0], hp)
		}
		// Releasing a session nobody holds is illegal.
		_, err = s.Release(ctx, sid, p.a, "", models.ReleaseInput{ExpectedVersion: v64(6)})
		wantIllegal(t, err, 6)
	})
}

func TestTakeoverNote(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		p := staff(t, s)
		sid := controllerEscalated(ctx, t, s)
		before := snapshot(t, s, sid)
		_, err := s.AddNote(ctx, sid, p.a, "", models.NoteInput{ExpectedVersion: v64(0), Text: "  ", EvidenceSource: "crm:42"})
		wantFields(t, err, "expected_version", "text", "evidence_claim")
		assertUnchanged(t, s, sid, before)

		// Notes are allowed on an unclaimed escalation, by any agent.
		out, err := s.AddNote(ctx, sid, p.b, "", models.NoteInput{ExpectedVersion: v64(2), Text: "Customer called again"})
		if err != nil || out.Status != models.StatusEscalated || out.StateVersion != 3 {
			t.Fatalf("note = %+v, %v", out, err)
		}
		if _, err := s.ClaimEscalation(ctx, sid, p.a, "", models.ClaimInput{ExpectedVersion: v64(3)}); err != nil {
			t.Fatal(err)
		}
		// A non-holder's note is taken too: it takes nothing from the holder.
		out, err = s.AddNote(ctx, sid, p.b, "", models.NoteInput{ExpectedVersion: v64(4), Text: "me too"})
		if err != nil || out.Status != models.StatusHumanActive || out.StateVersion != 5 {
			t.Fatalf("non-holder note = %+v, %v", out, err)
		}
		// A note typed against an old version is recorded, never refused,
		// and remembers the version its author saw.
		out, err = s.AddNote(ctx, sid, p.a, "", models.NoteInput{ExpectedVersion: v64(3), Text: "stale"})
		if err != nil || out.StateVersion != 6 {
			t.Fatalf("stale note = %+v, %v", out, err)
		}
		st := mustState(t, s, sid)
		if n := st.Notes[len(st.Notes)-1]; n.Text != "stale" || n.SeenVersion != 3 || n.AtVersion != 6 || st.Assignee != p.a.Actor() {
			t.Fatalf("stale note recorded as %+v (assignee %s)", n, st.Assignee)
		}

		_, err = s.AddNote(ctx, sid, p.a, "", models.NoteInput{Text: "Paid by card",
			EvidenceClaim: "card payment settled", EvidenceSource: "psp:ch_123"})
		if err != nil {
			t.Fatalf("note with evidence: %v", err)
		}
		st = mustState(t, s, sid)
		if len(st.Notes) != 4 || st.Notes[3].By != p.a.Actor() || st.Notes[3].Evidence == nil || st.Status != models.StatusHumanActive {
			t.Fatalf("notes = %+v", st.Notes)
		}
		if last := st.Evidence[len(st.Evidence)-1]; last.Source != "psp:ch_123" {
			t.Fatalf("evidence = %+v", st.Evidence)
		}
		if _, err := s.AddNote(ctx, sid, p.admin, "", models.NoteInput{ExpectedVersion: v64(7), Text: "Looks right"}); err != nil {
			t.Fatalf("admin note: %v", err)
		}
		// Reviewers score packages; they do not write notes.
		before = snapshot(t, s, sid)
		_, err = s.AddNote(ctx, sid, p.reviewer, "", models.NoteInput{Text: "x"})
		wantForbidden(t, err)
		assertUnchanged(t, s, sid, before)

		// Notes are taken in every status: open, and closed.
		open := storetest.Session(ctx, t, s, nil)
		if _, err := s.AddNote(ctx, open, p.a, "", models.NoteInput{ExpectedVersion: v64(1), Text: "x"}); err != nil {
			t.Fatalf("note on an open session: %v", err)
		}
		if _, err := s.Transition(ctx, open, models.EventSessionCancelled, "test:controller", "", models.TransitionInput{ExpectedVersion: v64(2), Reason: "dup"}); err != nil {
			t.Fatal(err)
		}
		out, err = s.AddNote(ctx, open, p.b, "", models.NoteInput{ExpectedVersion: v64(2), Text: "closed as a duplicate of T-9"})
		if err != nil || out.Status != models.StatusCancelled {
			t.Fatalf("note on a cancelled session = %+v, %v", out, err)
		}
		if rep, err := s.Verify(ctx, models.VerifyOpts{SessionIDs: []string{open, sid}}); err != nil || !rep.OK() {
			t.Fatalf("verify: %v %+v", err, rep.Problems)
		}
	})
}

func TestTakeoverRequestInputAndProvide(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		p := staff(t, s)
		sid := controllerEscalated(ctx, t, s)
		if _, err := s.ClaimEscalation(ctx, sid, p.a, "", models.ClaimInput{ExpectedVersion: v64(2)}); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, s, sid)
		_, err := s.RequestInput(ctx, sid, p.a, "", models.RequestInputInput{ExpectedVersion: v64(3)})
		wantFields(t, err, "question")
		_, err = s.RequestInput(ctx, sid, p.b, "", models.RequestInputInput{ExpectedVersion: v64(3), Question: "?"})
		wantForbidden(t, err)
		_, err = s.RequestInput(ctx, sid, p.a, "", models.RequestInputInput{ExpectedVersion: v64(2), Question: "?"})
		wantConflict(t, err, 3)
		assertUnchanged(t, s, sid, before)

		out, err := s.RequestInput(ctx, sid, p.a, "", models.RequestInputInput{ExpectedVersion: v64(3), Question: "Which order number?"})
		if err != nil || out.Status != models.StatusAwaitingInput || out.StateVersion != 4 {
			t.Fatalf("request input = %+v, %v", out, err)
		}
		st := mustState(t, s, sid)
		if st.Assignee != "" || len(st.OpenQuestions) != 1 || st.OpenQuestions[0] != "Which order number?" {
			t.Fatalf("after request input: %+v", st)
		}

		before = snapshot(t, s, sid)
		_, err = s.ProvideInput(ctx, sid, "test:controller", "", models.InputInput{})
		wantFields(t, err, "expected_version", "answer")
		_, err = s.ProvideInput(ctx, sid, "test:controller", "", models.InputInput{ExpectedVersion: v64(4), Facts: map[string]any{"": 1, "input_answer": 2}})
		wantFields(t, err, "facts", "facts")
		_, err = s.ProvideInput(ctx, sid, "test:controller", "", models.InputInput{ExpectedVersion: v64(3), Answer: "1182"})
		wantConflict(t, err, 4)
		assertUnchanged(t, s, sid, before)

		out, err = s.ProvideInput(ctx, sid, "test:controller", "in-1", models.InputInput{ExpectedVersion: v64(4), Answer: "Order 1182", Facts: map[string]any{"order_id": "1182"}})
		if err != nil || out.Status != models.StatusOpen || out.StateVersion != 5 {
			t.Fatalf("provide input = %+v, %v", out, err)
		}
		st = mustState(t, s, sid)
		if len(st.OpenQuestions) != 0 || st.Facts["order_id"] != "1182" || st.Facts[models.FactInputAnswer] != "Order 1182" ||
			st.Facts[models.FactInputQuestion] != "Which order number?" {
			t.Fatalf("after input: %+v", st)
		}
		again, err := s.ProvideInput(ctx, sid, "test:controller", "in-1", models.InputInput{ExpectedVersion: v64(4), Answer: "Order 1182", Facts: map[string]any{"order_id": "1182"}})
		if err != nil || !again.Replayed || again.StateVersion != 5 {
			t.Fatalf("replayed input = %+v, %v", again, err)
		}
		_, err = s.ProvideInput(ctx, sid, "test:controller", "", models.InputInput{ExpectedVersion: v64(5), Answer: "again"})
		wantIllegal(t, err, 5)
	})
}

func TestTakeoverResumeAutomation(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		p := staff(t, s)
		sid, _ := workerEscalated(ctx, t, s, "refunds")
		if _, err := s.ClaimEscalation(ctx, sid, p.a, "", models.ClaimInput{ExpectedVersion: v64(4)}); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, s, sid)
		_, err := s.ResumeAutomation(ctx, sid, p.a, "", models.ResumeInput{ExpectedVersion: v64(5), Queue: "bad queue!", LeaseSeconds: storetest.Ptr(0)})
		wantFields(t, err, "queue", "step", "lease_seconds")
		good := models.ResumeInput{ExpectedVersion: v64(5), Queue: "refunds", Step: "issue-refund",
			Instructions: "Approved by a human: refund 240 EUR to the card.", Facts: map[string]any{"approved_amount": "240 EUR"}, Note: "approved"}
		_, err = s.ResumeAutomation(ctx, sid, p.b, "", good)
		wantForbidden(t, err)
		stale := good
		stale.ExpectedVersion = v64(4)
		_, err = s.ResumeAutomation(ctx, sid, p.a, "", stale)
		wantConflict(t, err, 5)
		assertUnchanged(t, s, sid, before)

		out, err := s.ResumeAutomation(ctx, sid, p.a, "resume-1", good)
		if err != nil || out.Status != models.StatusQueued || out.StateVersion != 6 {
			t.Fatalf("resume = %+v, %v", out, err)
		}
		again, err := s.ResumeAutomation(ctx, sid, p.a, "resume-1", good)
		if err != nil || !again.Replayed || string(again.Data) != string(out.Data) {
			t.Fatalf("replayed resume = %+v, %v", again, err)
		}
		var dc models.DelegationCreated
		if err := out.DecodeData(&dc); err != nil {
			t.Fatal(err)
		}
		st := mustState(t, s, sid)
		if st.Escalation != nil || st.Assignee != "" || st.Delegation == nil || st.Delegation.ID != dc.DelegationID ||
			st.Facts["approved_amount"] != "240 EUR" || st.Notes[len(st.Notes)-1].Text != "approved" {
			t.Fatalf("after resume: %+v", st)
		}
		var open int64
		s.DB.Model(&models.Delegation{}).Where("session_id = ? AND status IN ('queued','leased')", sid).Count(&open)
		if open != 1 {
			t.Fatalf("%d open delegations, want 1", open)
		}
		l, err := s.Claim(ctx, "refunds", "w-2", "test:worker", "")
		if err != nil || l == nil || l.DelegationID != dc.DelegationID || l.Step != "issue-refund" ||
			l.Packet.Instructions != good.Instructions || l.Packet.ConfirmedFacts["approved_amount"] != "240 EUR" {
			t.Fatalf("lease after resume = %+v, %v", l, err)
		}
	})
}

func TestTakeoverHandBack(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		p := staff(t, s)
		sid, first := workerEscalated(ctx, t, s, "refunds")
		if _, err := s.ClaimEscalation(ctx, sid, p.a, "", models.ClaimInput{ExpectedVersion: v64(4)}); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, s, sid)
		_, err := s.HandBack(ctx, sid, p.b, "", models.HandBackInput{ExpectedVersion: v64(5)})
		wantForbidden(t, err)
		_, err = s.HandBack(ctx, sid, p.a, "", models.HandBackInput{ExpectedVersion: v64(4)})
		wantConflict(t, err, 5)
		_, err = s.HandBack(ctx, sid, p.a, "", models.HandBackInput{Queue: "no such queue"})
		wantFields(t, err, "expected_version", "queue")
		assertUnchanged(t, s, sid, before)

		out, err := s.HandBack(ctx, sid, p.a, "", models.HandBackInput{ExpectedVersion: v64(5), Note: "try again"})
		if err != nil || out.Status != models.StatusQueued || out.StateVersion != 6 {
			t.Fatalf("hand back = %+v, %v", out, err)
		}
		var dc models.DelegationCreated
		if err := out.DecodeData(&dc); err != nil {
			t.Fatal(err)
		}
		d, err := s.GetDelegation(ctx, dc.DelegationID)
		if err != nil {
			t.Fatal(err)
		}
		if dc.DelegationID == first || d.Queue != "refunds" || d.Step != "check-eligibility" || d.Instructions != "Check the refund policy." ||
			d.MaxAttempts != 4 || d.LeaseSeconds != 90 || d.Status != models.DelegationQueued || d.Attempt != 1 {
			t.Fatalf("handed-back delegation = %+v", d)
		}

		// The user may pick another queue.
		sid2, _ := workerEscalated(ctx, t, s, "refunds-eu")
		if _, err := s.ClaimEscalation(ctx, sid2, p.a, "", models.ClaimInput{ExpectedVersion: v64(4)}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.HandBack(ctx, sid2, p.a, "", models.HandBackInput{ExpectedVersion: v64(5), Queue: "billing"}); err != nil {
			t.Fatalf("hand back to billing: %v", err)
		}
		if st := mustState(t, s, sid2); st.Delegation == nil || st.Delegation.Queue != "billing" || st.Delegation.Step != "check-eligibility" {
			t.Fatalf("after hand back to billing: %+v", st.Delegation)
		}

		// An escalation without a delegation has nothing to hand back.
		sid3 := controllerEscalated(ctx, t, s)
		if _, err := s.ClaimEscalation(ctx, sid3, p.a, "", models.ClaimInput{ExpectedVersion: v64(2)}); err != nil {
			t.Fatal(err)
		}
		before = snapshot(t, s, sid3)
		_, err = s.HandBack(ctx, sid3, p.a, "", models.HandBackInput{ExpectedVersion: v64(3)})
		wantFields(t, err, "queue", "step")
		assertUnchanged(t, s, sid3, before)
	})
}

func TestTakeoverCompleteReject(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		p := staff(t, s)
		sid := controllerEscalated(ctx, t, s)
		if _, err := s.ClaimEscalation(ctx, sid, p.a, "", models.ClaimInput{ExpectedVersion: v64(2)}); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, s, sid)
		_, err := s.CompleteHuman(ctx, sid, p.a, "", models.CompleteInput{ExpectedVersion: v64(3), Resolution: " "})
		wantFields(t, err, "resolution")
		_, err = s.CompleteHuman(ctx, sid, p.b, "", models.CompleteInput{ExpectedVersion: v64(3), Resolution: "done"})
		wantForbidden(t, err)
		_, err = s.CompleteHuman(ctx, sid, p.a, "", models.CompleteInput{ExpectedVersion: v64(2), Resolution: "done"})
		wantConflict(t, err, 3)
		_, err = s.RejectHuman(ctx, sid, p.a, "", models.RejectInput{})
		wantFields(t, err, "expected_version", "reason")
		_, err = s.RejectHuman(ctx, sid, p.b, "", models.RejectInput{ExpectedVersion: v64(3), Reason: "no"})
		wantForbidden(t, err)
		_, err = s.RejectHuman(ctx, sid, p.reviewer, "", models.RejectInput{ExpectedVersion: v64(3), Reason: "no"})
		wantForbidden(t, err)
		assertUnchanged(t, s, sid, before)

		out, err := s.CompleteHuman(ctx, sid, p.a, "", models.CompleteInput{ExpectedVersion: v64(3), Resolution: "Refunded 240 EUR by hand"})
		if err != nil || out.Status != models.StatusCompleted || out.StateVersion != 4 {
			t.Fatalf("complete = %+v, %v", out, err)
		}
		if st := mustState(t, s, sid); st.Outcome != "Refunded 240 EUR by hand" {
			t.Fatalf("outcome = %q", st.Outcome)
		}
		_, err = s.RejectHuman(ctx, sid, p.a, "", models.RejectInput{ExpectedVersion: v64(4), Reason: "late"})
		wantIllegal(t, err, 4)

		// An admin may decide on another agent's claim.
		sid2 := controllerEscalated(ctx, t, s)
		if _, err := s.ClaimEscalation(ctx, sid2, p.b, "", models.ClaimInput{ExpectedVersion: v64(2)}); err != nil {
			t.Fatal(err)
		}
		out, err = s.RejectHuman(ctx, sid2, p.admin, "", models.RejectInput{ExpectedVersion: v64(3), Reason: "duplicate of T-1182"})
		if err != nil || out.Status != models.StatusRejected {
			t.Fatalf("admin reject = %+v, %v", out, err)
		}
		if st := mustState(t, s, sid2); st.Outcome != "rejected: duplicate of T-1182" {
			t.Fatalf("outcome = %q", st.Outcome)
		}
		rep, err := s.Verify(ctx, models.VerifyOpts{})
		if err != nil || !rep.OK() {
			t.Fatalf("verify = %+v, %v", rep, err)
		}
	})
}
