package models_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// legal is the state machine written out by hand, status by status, as the
// product describes it. TestAllowedTable checks the transition table in
// status.go against it cell by cell, so a change to either is a deliberate
// change to both.
var legal = map[models.Status][]models.EventType{
	models.StatusOpen: {
		models.EventSessionPaused, models.EventSessionEscalated, models.EventSessionCancelled,
		models.EventDelegationCreated, models.EventChildrenSpawned, models.EventReviewScored,
		models.EventHumanNoted, models.EventRiskResolved,
	},
	models.StatusQueued: {
		models.EventSessionPaused, models.EventSessionEscalated, models.EventSessionCancelled,
		models.EventDelegationLeased, models.EventReviewScored,
		models.EventHumanNoted, models.EventRiskResolved,
	},
	models.StatusRunning: {
		models.EventSessionPaused, models.EventSessionEscalated, models.EventSessionCancelled,
		models.EventDelegationExpired, models.EventResultCompleted, models.EventResultNeedsInput,
		models.EventResultRejected, models.EventResultEscalated, models.EventResultFailed, models.EventReviewScored,
		models.EventHumanNoted, models.EventRiskResolved,
	},
	models.StatusAwaitingInput: {
		models.EventSessionPaused, models.EventSessionEscalated, models.EventSessionCancelled,
		models.EventDelegationCreated, models.EventInputProvided, models.EventReviewScored,
		models.EventHumanNoted, models.EventRiskResolved,
	},
	models.StatusPaused: {
		models.EventSessionResumed, models.EventSessionEscalated, models.EventSessionCancelled, models.EventReviewScored,
		models.EventHumanNoted, models.EventRiskResolved,
	},
	models.StatusEscalated: {
		models.EventSessionCancelled, models.EventHumanClaimed, models.EventHumanNoted,
		models.EventReviewScored, models.EventEscalationSLABreached, models.EventRiskResolved,
	},
	models.StatusHumanActive: {
		models.EventSessionCancelled, models.EventHumanReleased, models.EventHumanNoted,
		models.EventHumanRequestedInput, models.EventHumanResumed, models.EventHumanHandedBack,
		models.EventHumanCompleted, models.EventHumanRejected, models.EventReviewScored,
		models.EventEscalationSLABreached, models.EventRiskResolved,
	},
	models.StatusWaitingChildren: {
		models.EventSessionPaused, models.EventSessionEscalated, models.EventSessionCancelled,
		models.EventChildrenJoined, models.EventReviewScored,
		models.EventHumanNoted, models.EventRiskResolved,
	},
	// Notes are taken on closed sessions too: a note is never refused
	// because the session moved on.
	models.StatusCompleted: {models.EventReviewScored, models.EventHumanNoted},
	models.StatusRejected:  {models.EventReviewScored, models.EventHumanNoted},
	models.StatusCancelled: {models.EventReviewScored, models.EventHumanNoted},
}

func TestAllowedTable(t *testing.T) {
	t.Parallel()
	if len(legal) != len(models.AllStatuses) {
		t.Fatalf("expectation table covers %d statuses, there are %d", len(legal), len(models.AllStatuses))
	}
	for _, st := range models.AllStatuses {
		want := map[models.EventType]bool{}
		for _, e := range legal[st] {
			want[e] = true
		}
		for _, et := range models.AllEventTypes {
			if got := models.Allowed(st, et); got != want[et] {
				t.Errorf("Allowed(%s, %s) = %v, want %v", st, et, got, want[et])
			}
		}
		if models.Allowed(st, "bogus.event") {
			t.Errorf("Allowed(%s, unknown event) = true", st)
		}
		if st.Terminal() != (st == models.StatusCompleted || st == models.StatusRejected || st == models.StatusCancelled) {
			t.Errorf("%s.Terminal() = %v", st, st.Terminal())
		}
	}
}

// TestApplyRejectsIllegal applies every event type the table forbids to a
// state in each status: Apply must answer *IllegalTransitionError carrying
// the current version and return its input unchanged.
func TestApplyRejectsIllegal(t *testing.T) {
	t.Parallel()
	for _, st := range models.AllStatuses {
		for _, et := range models.AllEventTypes {
			if models.Allowed(st, et) && et != models.EventSessionCreated {
				continue
			}
			in := models.State{SessionID: "ses_x", Goal: "g", Status: st, Version: 7, Facts: map[string]any{"k": "v"}}
			before := canon(t, in)
			e := models.Event{SessionID: "ses_x", Seq: 8, Type: et, Actor: "test", VersionBefore: 7, VersionAfter: 8, Payload: "{}"}
			out, err := models.Apply(in, e)
			var ie *models.IllegalTransitionError
			if !errors.As(err, &ie) {
				t.Errorf("Apply(%s, %s) error = %v, want *IllegalTransitionError", st, et, err)
				continue
			}
			if ie.CurrentVersion != 7 || ie.From != st || ie.Event != et || models.ErrorCode(err) != models.EILLEGAL {
				t.Errorf("Apply(%s, %s) error = %+v", st, et, ie)
			}
			if canon(t, in) != before || canon(t, out) != before {
				t.Errorf("Apply(%s, %s) changed the state on error", st, et)
			}
		}
	}
	// Nothing but session.created may start a session.
	_, err := models.Apply(models.State{}, models.Event{SessionID: "ses_y", Seq: 1, Type: models.EventSessionPaused, VersionAfter: 1, Payload: "{}"})
	var ie *models.IllegalTransitionError
	if !errors.As(err, &ie) {
		t.Fatalf("event before creation: %v", err)
	}
	// An event whose versions do not follow the state is refused too.
	in := models.State{SessionID: "ses_x", Status: models.StatusOpen, Version: 3}
	if _, err := models.Apply(in, models.Event{SessionID: "ses_x", Seq: 5, Type: models.EventSessionPaused, VersionBefore: 4, VersionAfter: 5, Payload: "{}"}); err == nil {
		t.Fatal("Apply accepted an event with a gap in versions")
	}
}

func canon(t testing.TB, v any) string {
	t.Helper()
	b, err := models.Canonical(v)
	if err != nil {
		t.Fatalf("canonical: %v", err)
	}
	return string(b)
}

// history builds a session's events by hand, covering every payload-carrying
// event type, for the purity test.
type history struct {
	t   testing.TB
	evs []models.Event
}

func (h *history) add(typ models.EventType, actor string, payload any) {
	b, err := json.Marshal(payload)
	if err != nil {
		h.t.Fatal(err)
	}
	n := int64(len(h.evs))
	h.evs = append(h.evs, models.Event{
		ID: fmt.Sprintf("evt_%d", n+1), SessionID: "ses_p", Seq: n + 1, Type: typ, Actor: actor,
		VersionBefore: n, VersionAfter: n + 1, Payload: string(b),
	})
}

func longHistory(t testing.TB) []models.Event {
	h := &history{t: t}
	dlg := func(id, step string) models.DelegationPayload {
		return models.DelegationPayload{DelegationID: id, Queue: "refunds", Step: step, MaxAttempts: 3, LeaseSeconds: 30}
	}
	h.add(models.EventSessionCreated, "ctl", models.SessionCreatedPayload{Goal: "Refund 1182", TicketRef: "T-1182", Priority: 2,
		Constraints: []string{"over 200 EUR needs a human"}, Facts: map[string]any{"total": json.Number("240.50")}})
	h.add(models.EventDelegationCreated, "ctl", dlg("d1", "check"))
	h.add(models.EventDelegationLeased, "w", models.LeasePayload{DelegationID: "d1", Attempt: 1, Worker: "w-1"})
	h.add(models.EventResultFailed, "w", models.ResultPayload{DelegationID: "d1", Attempt: 1, Step: "check", ResultType: "failed",
		Failure: &models.Failure{Class: models.FailureTransient, Message: "timeout"}, Retry: true, NextAttempt: 2})
	h.add(models.EventDelegationLeased, "w", models.LeasePayload{DelegationID: "d1", Attempt: 2, Worker: "w-2"})
	h.add(models.EventDelegationExpired, "sys", models.ExpiredPayload{DelegationID: "d1", Attempt: 2, Worker: "w-2", NextAttempt: 3})
	h.add(models.EventDelegationLeased, "w", models.LeasePayload{DelegationID: "d1", Attempt: 3, Worker: "w-3"})
	h.add(models.EventResultEscalated, "w", models.ResultPayload{DelegationID: "d1", Attempt: 3, Step: "check", ResultType: "escalated",
		Evidence: []models.Evidence{{Claim: "paid", Source: "orders-db"}}, Risks: []string{"fraud"}, NextStep: "refund",
		Question: "Approve?", Uncertainty: &models.Uncertainty{Level: 0.4}})
	h.add(models.EventEscalationSLABreached, "sys", struct{}{})
	h.add(models.EventHumanNoted, "user:a", models.HumanPayload{User: "user:a", Text: "looking", Evidence: &models.Evidence{Claim: "called"}})
	h.add(models.EventRiskResolved, "user:a", models.RiskResolvedPayload{User: "user:a", Risks: []string{"fraud"}, Note: "card holder confirmed"})
	h.add(models.EventHumanClaimed, "user:a", models.HumanPayload{User: "user:a"})
	h.add(models.EventHumanReleased, "user:a", models.HumanPayload{User: "user:a"})
	h.add(models.EventHumanClaimed, "user:b", models.HumanPayload{User: "user:b"})
	h.add(models.EventHumanRequestedInput, "user:b", models.HumanPayload{User: "user:b", Question: "Which card?"})
	h.add(models.EventInputProvided, "ctl", models.InputPayload{Facts: map[string]any{"card": "visa"}})
	h.add(models.EventDelegationCreated, "ctl", dlg("d2", "refund"))
	h.add(models.EventDelegationLeased, "w", models.LeasePayload{DelegationID: "d2", Attempt: 1, Worker: "w-1"})
	h.add(models.EventResultFailed, "w", models.ResultPayload{DelegationID: "d2", Attempt: 1, Step: "refund", ResultType: "failed",
		Failure: &models.Failure{Class: models.FailurePermanent, Message: "card expired"}})
	h.add(models.EventHumanClaimed, "user:b", models.HumanPayload{User: "user:b"})
	h.add(models.EventHumanResumed, "user:b", models.HumanDelegationPayload{User: "user:b", DelegationPayload: models.DelegationPayload{
		DelegationID: "d3", Queue: "refunds", Step: "refund", MaxAttempts: 3, LeaseSeconds: 30, Instructions: "use bank transfer", Note: "ok"}})
	h.add(models.EventSessionPaused, "ctl", models.ReasonPayload{Reason: "weekend"})
	h.add(models.EventSessionResumed, "ctl", models.ReasonPayload{})
	h.add(models.EventDelegationLeased, "w", models.LeasePayload{DelegationID: "d3", Attempt: 1, Worker: "w-4"})
	h.add(models.EventResultCompleted, "w", models.ResultPayload{DelegationID: "d3", Attempt: 1, Step: "refund", ResultType: "completed",
		Output: json.RawMessage(`{"refunded":240.50}`), Evidence: []models.Evidence{{Claim: "refund sent"}}, NextStep: "notify"})
	h.add(models.EventChildrenSpawned, "ctl", models.ChildrenPayload{Join: models.Join{Policy: "all", Children: []string{"c1", "c2"}}})
	h.add(models.EventChildrenJoined, "sys", models.JoinPayload{Result: "met", Children: []models.ChildOutcome{{SessionID: "c1", Status: models.StatusCompleted}}})
	h.add(models.EventReviewScored, "user:r", models.ReviewPayload{Reviewer: "user:r", AtVersion: 8, Scores: map[string]int{"clarity": 4}})
	h.add(models.EventDelegationCreated, "ctl", dlg("d4", "notify"))
	h.add(models.EventDelegationLeased, "w", models.LeasePayload{DelegationID: "d4", Attempt: 1, Worker: "w-1"})
	h.add(models.EventResultNeedsInput, "w", models.ResultPayload{DelegationID: "d4", Attempt: 1, Step: "notify", ResultType: "needs_input", Question: "email?"})
	h.add(models.EventSessionEscalated, "ctl", models.EscalatePayload{Reason: "stuck", Question: "?"})
	h.add(models.EventHumanClaimed, "user:a", models.HumanPayload{User: "user:a"})
	h.add(models.EventHumanCompleted, "user:a", models.HumanPayload{User: "user:a", Resolution: "done by hand"})
	return h.evs
}

// TestApplyPure applies each event of a long history and checks that Apply
// neither changes its input nor gives a different answer the second time.
func TestApplyPure(t *testing.T) {
	t.Parallel()
	var st models.State
	for _, e := range longHistory(t) {
		before := canon(t, st)
		a, err := models.Apply(st, e)
		if err != nil {
			t.Fatalf("apply %s: %v", e.Type, err)
		}
		if canon(t, st) != before {
			t.Fatalf("Apply(%s) mutated its input", e.Type)
		}
		b, err := models.Apply(st, e)
		if err != nil || canon(t, a) != canon(t, b) {
			t.Fatalf("Apply(%s) is not deterministic: %v", e.Type, err)
		}
		if a.Version != e.VersionAfter {
			t.Fatalf("Apply(%s) version = %d, want %d", e.Type, a.Version, e.VersionAfter)
		}
		// Mutating the output must not reach back into the input either.
		if a.Facts != nil {
			a.Facts["poison"] = true
			if canon(t, st) != before {
				t.Fatalf("Apply(%s) output shares memory with its input", e.Type)
			}
		}
		st = b
	}
	if st.Status != models.StatusCompleted || st.Outcome != "done by hand" || st.Reviews != 1 {
		t.Fatalf("final state = %+v", st)
	}
	// Replay is the same fold.
	r, err := models.Replay(longHistory(t))
	if err != nil || canon(t, r) != canon(t, st) {
		t.Fatalf("replay differs: %v", err)
	}
}

// TestApplyTargets checks the status each event leads to in the history.
func TestApplyTargets(t *testing.T) {
	t.Parallel()
	want := []models.Status{
		models.StatusOpen, models.StatusQueued, models.StatusRunning, models.StatusQueued, models.StatusRunning,
		models.StatusQueued, models.StatusRunning, models.StatusEscalated, models.StatusEscalated, models.StatusEscalated,
		models.StatusEscalated, models.StatusHumanActive, models.StatusEscalated, models.StatusHumanActive, models.StatusAwaitingInput, models.StatusOpen,
		models.StatusQueued, models.StatusRunning, models.StatusEscalated, models.StatusHumanActive, models.StatusQueued,
		models.StatusPaused, models.StatusQueued, models.StatusRunning, models.StatusOpen, models.StatusWaitingChildren,
		models.StatusOpen, models.StatusOpen, models.StatusQueued, models.StatusRunning, models.StatusAwaitingInput,
		models.StatusEscalated, models.StatusHumanActive, models.StatusCompleted,
	}
	evs := longHistory(t)
	if len(evs) != len(want) {
		t.Fatalf("%d events, %d expectations", len(evs), len(want))
	}
	var st models.State
	for i, e := range evs {
		var err error
		if st, err = models.Apply(st, e); err != nil {
			t.Fatal(err)
		}
		if st.Status != want[i] {
			t.Fatalf("after %d %s: status %s, want %s", e.Seq, e.Type, st.Status, want[i])
		}
	}
}

// toStatus drives a fresh session to status st through the real write path
// and returns its id. Each session gets its own queue so that claims never
// pick up another test's work.
func toStatus(ctx context.Context, t testing.TB, s *models.Store, st models.Status) string {
	t.Helper()
	must := func(_ models.Outcome, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("to %s: %v", st, err)
		}
	}
	sid := storetest.Session(ctx, t, s, nil)
	queue := "q-" + strings.ToLower(sid[len(sid)-10:])
	running := func() *models.Lease {
		must(s.Delegate(ctx, sid, "test:controller", "", models.DelegateInput{Queue: queue, Step: "check", ExpectedVersion: v64(1)}))
		l, err := s.Claim(ctx, queue, "w-1", "test:worker", "")
		if err != nil || l == nil {
			t.Fatalf("to %s: claim %v %v", st, l, err)
		}
		return l
	}
	result := func(l *models.Lease, in models.ResultInput) {
		in.LeaseToken, in.SessionID, in.Step = l.LeaseToken, sid, l.Step
		must(s.SubmitResult(ctx, l.DelegationID, "test:worker", "", in))
	}
	tr := func(et models.EventType, v int64) {
		must(s.Transition(ctx, sid, et, "test:controller", "", models.TransitionInput{ExpectedVersion: v64(v), Reason: "test"}))
	}
	switch st {
	case models.StatusOpen:
	case models.StatusQueued:
		must(s.Delegate(ctx, sid, "test:controller", "", models.DelegateInput{Queue: queue, Step: "check", ExpectedVersion: v64(1)}))
	case models.StatusRunning:
		running()
	case models.StatusAwaitingInput:
		result(running(), models.ResultInput{ResultType: models.ResultNeedsInput, Question: "Which order?"})
	case models.StatusPaused:
		tr(models.EventSessionPaused, 1)
	case models.StatusEscalated:
		tr(models.EventSessionEscalated, 1)
	case models.StatusHumanActive:
		tr(models.EventSessionEscalated, 1)
		u := mustUser(t, s, "h-"+strings.ToLower(sid[len(sid)-12:])+"@example.com", models.RoleAgent)
		must(s.ClaimEscalation(ctx, sid, u, "", models.ClaimInput{ExpectedVersion: v64(2)}))
	case models.StatusWaitingChildren:
		must(s.SpawnChildren(ctx, sid, "test:controller", "", models.SpawnInput{ExpectedVersion: v64(1),
			Join:     models.JoinInput{Policy: models.JoinAll},
			Children: []models.ChildInput{{Goal: "Check the carrier", Queue: queue, Step: "check"}}}))
	case models.StatusCompleted:
		result(running(), models.ResultInput{ResultType: models.ResultCompleted, Evidence: []models.Evidence{{Claim: "done"}}})
	case models.StatusRejected:
		result(running(), models.ResultInput{ResultType: models.ResultRejected})
	case models.StatusCancelled:
		tr(models.EventSessionCancelled, 1)
	default:
		t.Fatalf("toStatus: unknown status %s", st)
	}
	if got := mustState(t, s, sid).Status; got != st {
		t.Fatalf("toStatus(%s) reached %s", st, got)
	}
	return sid
}

// TestExecuteIllegalTransitions sends every event type the table forbids to
// a real session in each status, on both dialects: each is refused with
// *IllegalTransitionError carrying the current version, and nothing is
// written.
func TestExecuteIllegalTransitions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		for _, st := range models.AllStatuses {
			sid := toStatus(ctx, t, s, st)
			cur := mustState(t, s, sid).Version
			before := snapshot(t, s, sid)
			for _, et := range models.AllEventTypes {
				if et == models.EventSessionCreated || models.Allowed(st, et) {
					continue
				}
				_, err := s.Execute(ctx, models.Command{SessionID: sid, Type: et, Actor: "test:controller",
					ExpectedVersion: v64(cur), Payload: struct{}{}, IdempotencyKey: "k-" + string(et)})
				wantIllegal(t, err, cur)
			}
			assertUnchanged(t, s, sid, before)
		}
		rep, err := s.Verify(ctx, models.VerifyOpts{})
		if err != nil || !rep.OK() {
			t.Fatalf("verify = %+v, %v", rep, err)
		}
	})
}
