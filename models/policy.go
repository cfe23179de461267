package models

import (
	"context"
	"fmt"
	"strings"
)

// The takeover policy: one function decides which takeover action a user
// may take on a session in a given state, and why not. The routes derive
// the roles they let through from it (ActionRoles), the session page offers
// exactly the actions it allows (TakeoverActions), and the commands check it
// again under the session lock (takeoverCommand), so the three cannot drift.

// Session controls a human may use besides the takeover decisions.
const (
	// ActAcceptRecommendation resumes automation with the step the
	// escalation package recommends, on the session's queue: one click.
	ActAcceptRecommendation TakeoverAction = "accept-recommendation"
	ActPause                TakeoverAction = "pause"
	// ActUnpause resumes a paused session ("resume" is taken by resuming
	// automation from human hands).
	ActUnpause TakeoverAction = "unpause"
	ActCancel  TakeoverAction = "cancel"
	// ActEscalate pulls a session into human hands (status escalated).
	ActEscalate TakeoverAction = "escalate"
	// ActReassign is an admin handing a session in human hands to another
	// agent or admin: they hold it now (bulk actions; see Reassign).
	ActReassign TakeoverAction = "reassign"
)

// PanelActions are the actions of the session page's takeover panel, in the
// order it offers them. ActResolveRisk is offered per open risk instead.
var PanelActions = []TakeoverAction{
	ActAcceptRecommendation, ActClaim, ActProvideInput,
	ActComplete, ActResume, ActHandBack, ActRequestInput, ActReject,
	ActNote, ActRelease, ActForceRelease,
	ActUnpause, ActPause, ActEscalate, ActCancel,
}

// AllTakeoverActions is every action the policy rules on. Reassign has no
// form on the session page (it needs a person to hand the session to); the
// console's bulk form offers it.
var AllTakeoverActions = append(append([]TakeoverAction{}, PanelActions...), ActResolveRisk, ActReassign)

// decisionAction reports whether a decides the session's fate: these need
// the session held by the actor, and on an unclaimed escalation they claim
// it in the same transaction.
func decisionAction(a TakeoverAction) bool {
	switch a {
	case ActComplete, ActReject, ActResume, ActHandBack, ActRequestInput, ActAcceptRecommendation:
		return true
	}
	return false
}

// controlAction reports whether a is a session control (pause, unpause,
// cancel, escalate): admins only, in any status the transition table allows.
func controlAction(a TakeoverAction) bool {
	switch a {
	case ActPause, ActUnpause, ActCancel, ActEscalate:
		return true
	}
	return false
}

// controlEvent is the event a session control writes.
func controlEvent(a TakeoverAction) EventType {
	switch a {
	case ActPause:
		return EventSessionPaused
	case ActUnpause:
		return EventSessionResumed
	case ActCancel:
		return EventSessionCancelled
	case ActEscalate:
		return EventSessionEscalated
	}
	return ""
}

// refusal is why the policy says no: the role (forbidden, 403) or the
// session's state (illegal now, 422).
type refusal int

const (
	allowed refusal = iota
	refusedRole
	refusedState
)

// TakeoverPolicy reports whether u may take action a on a session in state
// st and, when not, why (a sentence for people).
func TakeoverPolicy(a TakeoverAction, u User, st State) (bool, string) {
	r, why := takeoverPolicy(a, u, st)
	return r == allowed, why
}

// RecommendedStep is the step and queue "accept recommendation" resumes
// automation with, or ok=false when the package recommends nothing that can
// be queued.
func RecommendedStep(st State) (step, queue string, ok bool) {
	if st.Escalation == nil || st.Escalation.RecommendedNext == "" || st.Queue == "" {
		return "", "", false
	}
	return st.Escalation.RecommendedNext, st.Queue, true
}

func takeoverPolicy(a TakeoverAction, u User, st State) (refusal, string) {
	if !u.CanTakeOver() {
		if u.Disabled {
			return refusedRole, "your account is disabled"
		}
		return refusedRole, fmt.Sprintf("your role (%s) cannot act on sessions", u.Role)
	}
	admin := u.Role == RoleAdmin
	held := st.Status == StatusHumanActive && st.Assignee != ""
	self := held && st.Assignee == u.Actor()
	switch {
	case a == ActNote:
		// A note is taken from anyone, in every status, closed ones too.
		return allowed, ""
	case a == ActResolveRisk:
		if st.Status.Terminal() {
			return refusedState, "the session is closed"
		}
		if len(st.Risks) == 0 {
			return refusedState, "the session has no open risk"
		}
		return allowed, ""
	case a == ActProvideInput:
		if st.Status != StatusAwaitingInput {
			return refusedState, "the session is not waiting for input"
		}
		return allowed, ""
	case a == ActClaim:
		if st.Status != StatusEscalated {
			if held {
				return refusedState, "the session is held already"
			}
			return refusedState, "only an escalated session can be claimed"
		}
		return allowed, ""
	case a == ActRelease:
		if !held {
			return refusedState, "nobody holds the session"
		}
		if !self {
			return refusedRole, "only the holder releases; an admin force-releases"
		}
		return allowed, ""
	case a == ActForceRelease:
		if !admin {
			return refusedRole, "only an admin can force a release"
		}
		if !held {
			return refusedState, "nobody holds the session"
		}
		if self {
			return refusedState, "you hold it: release it instead"
		}
		return allowed, ""
	case a == ActReassign:
		if !admin {
			return refusedRole, "only an admin can reassign a session"
		}
		if st.Status != StatusEscalated && !held {
			return refusedState, "only a session in human hands (escalated or held) can be reassigned"
		}
		return allowed, ""
	case decisionAction(a):
		if a == ActAcceptRecommendation {
			if _, _, ok := RecommendedStep(st); !ok {
				return refusedState, "the escalation recommends no next step on a known queue"
			}
		}
		switch {
		case st.Status == StatusEscalated:
			// Deciding on an unclaimed escalation claims it first, in the
			// same transaction.
			return allowed, ""
		case st.Status != StatusHumanActive:
			return refusedState, "the session is not in human hands"
		case self || admin:
			// An admin may decide on a session someone else holds, e.g.
			// an agent who went home; the decision ends that claim.
			return allowed, ""
		default:
			return refusedRole, "someone else holds the session; only they or an admin can decide"
		}
	case controlAction(a):
		if !admin {
			return refusedRole, "only an admin can pause, resume, cancel or escalate a session"
		}
		return controlRefusal(a, st)
	}
	return refusedState, fmt.Sprintf("unknown action %q", a)
}

// controlRefusal is the state part of the policy for a session control:
// the transition table. A controller's token, which the policy's user roles
// do not cover, is judged by it alone (bulk actions through the API).
func controlRefusal(a TakeoverAction, st State) (refusal, string) {
	if !Allowed(st.Status, controlEvent(a)) {
		return refusedState, fmt.Sprintf("a session that is %s cannot be %s", st.Status, controlVerb(a))
	}
	return allowed, ""
}

func controlVerb(a TakeoverAction) string {
	switch a {
	case ActPause:
		return "paused"
	case ActUnpause:
		return "resumed"
	case ActCancel:
		return "cancelled"
	}
	return "escalated"
}

// TakeoverActions lists what u may do to a session in state st, in the
// order the console offers it: exactly the panel actions TakeoverPolicy
// allows.
func TakeoverActions(st State, u User) []TakeoverAction {
	var out []TakeoverAction
	for _, a := range PanelActions {
		if ok, _ := TakeoverPolicy(a, u, st); ok {
			out = append(out, a)
		}
	}
	return out
}

// ActionRoles are the roles that may take action a on some session: what a
// route lets through before the command checks the session's state.
func ActionRoles(a TakeoverAction) []Role {
	var out []Role
	for _, r := range UserRoles {
		for _, st := range policyProbeStates(r) {
			if ok, _ := TakeoverPolicy(a, User{ID: "probe", Role: r}, st); ok {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// policyProbeStates are states that exercise every branch of the policy for
// a user with role r: every status, unheld and held by them and by another.
func policyProbeStates(Role) []State {
	var out []State
	for _, s := range AllStatuses {
		base := State{Status: s, Risks: []string{"r"}, Queue: "q",
			Escalation: &Escalation{RecommendedNext: "next"}}
		out = append(out, base)
		if s == StatusHumanActive {
			self, other := base, base
			self.Assignee, other.Assignee = User{ID: "probe"}.Actor(), "user:other"
			out = append(out, self, other)
		}
	}
	return out
}

// roleError is the policy's answer for u and a before the session is read:
// ErrForbidden when u's role (or a disabled account) rules a out in every
// state, nil otherwise (the state is checked under the lock).
func roleError(a TakeoverAction, sessionID string, u User) error {
	if r, why := takeoverPolicy(a, u, State{}); r == refusedRole {
		return fmt.Errorf("%s on session %s by %s (%s): %s: %w", a, sessionID, u.Email, u.Role, why, ErrForbidden)
	}
	return nil
}

// policyError turns a refusal into the error the commands return.
func policyError(a TakeoverAction, sessionID string, u User, st State) error {
	r, why := takeoverPolicy(a, u, st)
	switch r {
	case refusedRole:
		return fmt.Errorf("%s on session %s by %s (%s): %s: %w", a, sessionID, u.Email, u.Role, why, ErrForbidden)
	case refusedState:
		return &IllegalTransitionError{SessionID: sessionID, From: st.Status, Event: actionEvent(a), CurrentVersion: st.Version}
	}
	return nil
}

// actionEvent is the event an action writes, for refusals.
func actionEvent(a TakeoverAction) EventType {
	switch a {
	case ActClaim:
		return EventHumanClaimed
	case ActRelease, ActForceRelease:
		return EventHumanReleased
	case ActReassign:
		return EventHumanClaimed
	case ActNote:
		return EventHumanNoted
	case ActResolveRisk:
		return EventRiskResolved
	case ActProvideInput:
		return EventInputProvided
	case ActRequestInput:
		return EventHumanRequestedInput
	case ActResume, ActAcceptRecommendation:
		return EventHumanResumed
	case ActHandBack:
		return EventHumanHandedBack
	case ActComplete:
		return EventHumanCompleted
	case ActReject:
		return EventHumanRejected
	}
	return controlEvent(a)
}

// AcceptInput accepts the escalation's recommended next step.
type AcceptInput struct {
	ExpectedVersion *int64 `json:"expected_version"`
}

// Validate lists every problem with the input.
func (in AcceptInput) Validate() error {
	v := &ValidationError{}
	validateExpected(v, in.ExpectedVersion)
	return v.Err()
}

// AcceptRecommendation resumes automation with the step the escalation
// package recommends, on the session's queue (RecommendedStep): the one-click
// decision. Like every decision it claims an unclaimed escalation first, in
// the same transaction. The step is read from the state at the form's
// version; a session that moved on since is refused as stale.
func (s *Store) AcceptRecommendation(ctx context.Context, sessionID string, u User, idemKey string, in AcceptInput) (Outcome, error) {
	if err := in.Validate(); err != nil {
		return Outcome{}, err
	}
	row, err := s.GetSession(ctx, sessionID)
	if err != nil {
		return Outcome{}, err
	}
	st, err := row.Decode()
	if err != nil {
		return Outcome{}, err
	}
	if st.Version != *in.ExpectedVersion {
		return Outcome{}, s.explainClaimed(ctx, sessionID, u.Actor(),
			&ConflictError{SessionID: sessionID, ExpectedVersion: *in.ExpectedVersion, CurrentVersion: st.Version})
	}
	if err := policyError(ActAcceptRecommendation, sessionID, u, st); err != nil {
		return Outcome{}, err
	}
	step, queue, _ := RecommendedStep(st)
	return s.resume(ctx, sessionID, u, idemKey, ResumeInput{
		ExpectedVersion: in.ExpectedVersion, Queue: queue, Step: step,
		Note: "Accepted the recommended next step.",
	}, ActAcceptRecommendation)
}

// ControlInput is an admin's pause, unpause, cancel or escalate from the
// console, with an optional reason.
type ControlInput struct {
	ExpectedVersion *int64 `json:"expected_version"`
	Reason          string `json:"reason"`
}

// ControlSession pauses, resumes (unpauses), cancels or escalates a session
// for an admin in the console: the controller's transition (Transition),
// recorded as the user. The policy decides who may; the transition table
// which statuses allow it, checked under the lock.
func (s *Store) ControlSession(ctx context.Context, sessionID string, u User, a TakeoverAction, idemKey string, in ControlInput) (Outcome, error) {
	if !controlAction(a) {
		return Outcome{}, fmt.Errorf("control %s: not a session control", a)
	}
	// The role part of the policy does not depend on the state; the
	// status part is the transition table, which Execute checks.
	if err := roleError(a, sessionID, u); err != nil {
		return Outcome{}, err
	}
	v := &ValidationError{}
	validateText(v, "reason", in.Reason, false)
	if err := v.Err(); err != nil {
		return Outcome{}, err
	}
	return s.Transition(ctx, sessionID, controlEvent(a), u.Actor(), idemKey,
		TransitionInput{ExpectedVersion: in.ExpectedVersion, Reason: strings.TrimSpace(in.Reason)})
}

// NextInInbox is the session "submit and next" opens after a decision: the
// most urgent session of the inbox that u can decide on now (an unclaimed
// escalation or one u holds), other than skip; "" when there is none.
func (s *Store) NextInInbox(ctx context.Context, u User, skip string) (string, error) {
	page, err := s.Inbox(ctx, InboxOpts{Me: AssigneeOf(u), Limit: DefaultInboxLimit})
	if err != nil {
		return "", fmt.Errorf("next in inbox: %w", err)
	}
	for _, r := range page.Rows {
		if r.ID == skip {
			continue
		}
		if r.Status == StatusEscalated || (r.Status == StatusHumanActive && r.Assignee == u.Actor()) {
			return r.ID, nil
		}
	}
	return "", nil
}
