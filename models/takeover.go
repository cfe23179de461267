package models

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Human takeover: a support agent claims an escalated session and acts on it
// under the same session id. Every action is a Command through Execute, so it
// is version-checked, idempotent, hash-chained and atomic like any other
// write. The actor is always the user (User.Actor), never a token.
//
//	escalated ──claim──▶ human_active ──release / force release──▶ escalated
//	                         │ note (by anyone, in every status)
//	                         ├─ request input ─▶ awaiting_input
//	                         ├─ resume automation / hand back ─▶ queued
//	                         └─ complete / reject ─▶ completed / rejected
//
// While a session is human_active only its assignee, or an admin, may act on
// it; everybody else gets ErrForbidden. A decision on an escalated session
// nobody holds claims it in the same transaction. Who may do what is the
// takeover policy (policy.go), checked again under the session lock.

// MaxNoteLen bounds a human's free text (notes, resolutions, reasons).
const MaxNoteLen = 4000

// CanTakeOver reports whether u may act on escalations at all: agents and
// admins may, reviewers only score packages, disabled users do nothing.
func (u User) CanTakeOver() bool {
	return !u.Disabled && (u.Role == RoleAgent || u.Role == RoleAdmin)
}

// ClaimedError is a claim on a session that another user already holds. It
// wraps the conflict or illegal-transition error that stopped the claim, so
// ErrorCode and CurrentVersion still see it, and names the holder so the
// console can say who to talk to.
type ClaimedError struct {
	SessionID      string
	Holder         string
	CurrentVersion int64
	Err            error
}

func (e *ClaimedError) Error() string {
	return fmt.Sprintf("session %s is already claimed by %s (version %d)", e.SessionID, e.Holder, e.CurrentVersion)
}

// Unwrap returns the underlying conflict or illegal-transition error.
func (e *ClaimedError) Unwrap() error { return e.Err }

// ClaimInput claims an escalation.
type ClaimInput struct {
	ExpectedVersion *int64 `json:"expected_version"`
}

// Validate lists every problem with the input.
func (in ClaimInput) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	validateExpected(v, in.ExpectedVersion)
	return v.Err()
}

// ReleaseInput gives a claimed session back to the escalation queue.
type ReleaseInput struct {
	ExpectedVersion *int64 `json:"expected_version"`
	Reason          string `json:"reason"`
}

// Validate lists every problem with the input.
func (in ReleaseInput) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	validateExpected(v, in.ExpectedVersion)
	validateText(v, "reason", in.Reason, false)
	return v.Err()
}

// NoteInput adds a note from the console, optionally backed by evidence.
// ExpectedVersion is the version the form was rendered at; it is recorded,
// never checked: notes do not conflict with anything, and one typed while
// the session moved on is still recorded.
type NoteInput struct {
	ExpectedVersion *int64 `json:"expected_version"`
	Text            string `json:"text"`
	EvidenceClaim   string `json:"evidence_claim"`
	EvidenceSource  string `json:"evidence_source"`
}

// Validate lists every problem with the input.
func (in NoteInput) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	if in.ExpectedVersion != nil && *in.ExpectedVersion < 1 {
		v.Add("expected_version", "must be at least 1")
	}
	validateText(v, "text", in.Text, true)
	if strings.TrimSpace(in.EvidenceClaim) == "" && strings.TrimSpace(in.EvidenceSource) != "" {
		v.Add("evidence_claim", "is required when a source is given")
	}
	if len(in.EvidenceClaim) > MaxItemLen {
		v.Add("evidence_claim", "must be at most %d bytes", MaxItemLen)
	}
	if len(in.EvidenceSource) > MaxItemLen {
		v.Add("evidence_source", "must be at most %d bytes", MaxItemLen)
	}
	return v.Err()
}

// NoteRequest is a note sent through the API (POST /sessions/{id}/notes):
// the same note as NoteInput, with the evidence as an object.
type NoteRequest struct {
	Text     string    `json:"text"`
	Evidence *Evidence `json:"evidence"`
	// ExpectedVersion, when given, is recorded as the version the note was
	// written against; like any note it never conflicts.
	ExpectedVersion *int64 `json:"expected_version"`
}

// Validate lists every problem with the request.
func (in NoteRequest) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	if in.ExpectedVersion != nil && *in.ExpectedVersion < 1 {
		v.Add("expected_version", "must be at least 1")
	}
	validateText(v, "text", in.Text, true)
	if e := in.Evidence; e != nil {
		if strings.TrimSpace(e.Claim) == "" {
			v.Add("evidence.claim", "is required when evidence is given")
		} else if len(e.Claim) > MaxItemLen {
			v.Add("evidence.claim", "must be at most %d bytes", MaxItemLen)
		}
		if len(e.Source) > MaxItemLen {
			v.Add("evidence.source", "must be at most %d bytes", MaxItemLen)
		}
	}
	return v.Err()
}

// ResolveRiskInput marks one open risk resolved from the console.
type ResolveRiskInput struct {
	Risk string `json:"risk"`
	Note string `json:"note"`
}

// Validate lists every problem with the input.
func (in ResolveRiskInput) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	if strings.TrimSpace(in.Risk) == "" {
		v.Add("risk", "is required")
	} else if len(in.Risk) > MaxItemLen {
		v.Add("risk", "must be at most %d bytes", MaxItemLen)
	}
	validateText(v, "note", in.Note, false)
	return v.Err()
}

// RequestInputInput asks the requester (or a controller) a question; the
// session waits in awaiting_input until ProvideInput answers it.
type RequestInputInput struct {
	ExpectedVersion *int64 `json:"expected_version"`
	Question        string `json:"question"`
}

// Validate lists every problem with the input.
func (in RequestInputInput) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	validateExpected(v, in.ExpectedVersion)
	if strings.TrimSpace(in.Question) == "" {
		v.Add("question", "is required")
	} else if len(in.Question) > MaxItemLen {
		v.Add("question", "must be at most %d bytes", MaxItemLen)
	}
	return v.Err()
}

// ResumeInput gives a claimed session back to automation with edited
// instructions and/or facts. The form is prefilled from the escalation
// package, so queue and step are required here rather than guessed.
type ResumeInput struct {
	ExpectedVersion *int64         `json:"expected_version"`
	Queue           string         `json:"queue"`
	Step            string         `json:"step"`
	Instructions    string         `json:"instructions"`
	Facts           map[string]any `json:"facts"`
	MaxAttempts     *int           `json:"max_attempts"`
	LeaseSeconds    *int           `json:"lease_seconds"`
	Note            string         `json:"note"`
}

// Validate lists every problem with the input.
func (in ResumeInput) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	validateExpected(v, in.ExpectedVersion)
	validateDelegation(v, in.Queue, in.Step, in.Instructions, in.MaxAttempts, in.LeaseSeconds)
	validateFacts(v, "facts", in.Facts)
	validateText(v, "note", in.Note, false)
	return v.Err()
}

// HandBackInput re-queues the escalated step unchanged. Queue, when set,
// overrides the queue of the escalated delegation (a different team's
// workers); it is required when the escalation had no delegation.
type HandBackInput struct {
	ExpectedVersion *int64 `json:"expected_version"`
	Queue           string `json:"queue"`
	Note            string `json:"note"`
}

// Validate lists every problem with the input.
func (in HandBackInput) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	validateExpected(v, in.ExpectedVersion)
	if in.Queue != "" && !namePattern.MatchString(in.Queue) {
		v.Add("queue", "must be 1-64 letters, digits, '.', '_' or '-'")
	}
	validateText(v, "note", in.Note, false)
	return v.Err()
}

// CompleteInput finishes a session by hand.
type CompleteInput struct {
	ExpectedVersion *int64 `json:"expected_version"`
	Resolution      string `json:"resolution"`
}

// Validate lists every problem with the input.
func (in CompleteInput) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	validateExpected(v, in.ExpectedVersion)
	validateText(v, "resolution", in.Resolution, true)
	return v.Err()
}

// RejectInput rejects a session by hand.
type RejectInput struct {
	ExpectedVersion *int64 `json:"expected_version"`
	Reason          string `json:"reason"`
}

// Validate lists every problem with the input.
func (in RejectInput) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	validateExpected(v, in.ExpectedVersion)
	validateText(v, "reason", in.Reason, true)
	return v.Err()
}

func validateExpected(v *ValidationError, ev *int64) {
	if ev == nil {
		v.Add("expected_version", "is required")
	} else if *ev < 1 {
		v.Add("expected_version", "must be at least 1")
	}
}

func validateText(v *ValidationError, field, s string, required bool) {
	switch {
	case required && strings.TrimSpace(s) == "":
		v.Add(field, "is required")
	case utf8.RuneCountInString(s) > MaxNoteLen:
		v.Add(field, "must be at most %d characters", MaxNoteLen)
	}
	CheckNUL(v, field, s)
}

// takeover is what every takeover action shares: who may act, the command
// skeleton and the holder check under the session lock.
type takeover struct {
	sessionID string
	user      User
	action    TakeoverAction
	in        interface{ Validate() error }
}

// takeoverCommand checks the role and the input, and returns a Command whose
// Prepare enforces, under the session lock, that only the assignee (or an
// admin) acts on a human_active session. prepare, if set, runs after that
// check and may compute the payload from the current state.
func (s *Store) takeoverCommand(t takeover, typ EventType, idemKey string, expected *int64, payload any,
	prepare func(tx *Tx, cur State) (any, error)) (Command, error) {
	if err := roleError(t.action, t.sessionID, t.user); err != nil {
		return Command{}, err
	}
	if err := t.in.Validate(); err != nil {
		return Command{}, err
	}
	// The fingerprint is taken from the request, not the payload, because
	// payloads may hold fresh ids (a new delegation) that differ on a repeat.
	fp, err := Fingerprint("takeover", t.action, t.sessionID, t.in)
	if err != nil {
		return Command{}, fmt.Errorf("%s on session %s: %w", t.action, t.sessionID, err)
	}
	actor := t.user.Actor()
	return Command{
		SessionID: t.sessionID, Type: typ, Actor: actor, ExpectedVersion: expected,
		Payload: payload, IdempotencyKey: idemKey, Fingerprint: fp,
		Prepare: func(tx *Tx, cur State) (any, error) {
			// The policy again, under the lock, on the state the command
			// will change (a claim's refusal becomes *ClaimedError later).
			if err := policyError(t.action, t.sessionID, t.user, cur); err != nil {
				return nil, err
			}
			if prepare != nil {
				return prepare(tx, cur)
			}
			return nil, nil
		},
	}, nil
}

// ClaimEscalation makes u the one human holding an escalated session
// (escalated → human_active). A claim on a session someone else already
// holds fails with *ClaimedError naming the holder.
func (s *Store) ClaimEscalation(ctx context.Context, sessionID string, u User, idemKey string, in ClaimInput) (Outcome, error) {
	t := takeover{sessionID: sessionID, user: u, action: ActClaim, in: in}
	cmd, err := s.takeoverCommand(t, EventHumanClaimed, idemKey, in.ExpectedVersion, HumanPayload{User: u.Actor()}, nil)
	if err != nil {
		return Outcome{}, err
	}
	out, err := s.Execute(ctx, cmd)
	if err != nil {
		return out, s.explainClaimed(ctx, sessionID, u.Actor(), err)
	}
	return out, nil
}

// executeDecision runs a decision's command. On an escalated session nobody
// holds yet it first claims the session for the user, in the same
// transaction (Command.Then): the claim and the decision are two events with
// consecutive seqs, or nothing is written. The path is chosen from a read
// before the transaction; the claim names the form's expected version, so if
// anything changed in between (someone else claimed) the claim is refused as
// stale, and the decision with it.
func (s *Store) executeDecision(ctx context.Context, t takeover, cmd Command) (Outcome, error) {
	row, err := s.GetSession(ctx, t.sessionID)
	if err != nil {
		return Outcome{}, err
	}
	actor := t.user.Actor()
	if row.Status != StatusEscalated || !decisionAction(t.action) {
		out, err := s.Execute(ctx, cmd)
		if err != nil {
			// A stale form on a session someone else claimed since says who.
			return out, s.explainClaimed(ctx, t.sessionID, actor, err)
		}
		return out, nil
	}
	decision := cmd
	claim := Command{
		SessionID: t.sessionID, Type: EventHumanClaimed, Actor: actor, ExpectedVersion: cmd.ExpectedVersion,
		Payload: HumanPayload{User: actor}, IdempotencyKey: cmd.IdempotencyKey, Fingerprint: cmd.Fingerprint,
		Prepare: func(tx *Tx, cur State) (any, error) {
			return nil, policyError(ActClaim, t.sessionID, t.user, cur)
		},
		Then: func(tx *Tx, next State, ev Event) (*Command, error) { return &decision, nil },
	}
	out, err := s.Execute(ctx, claim)
	if err != nil {
		return out, s.explainClaimed(ctx, t.sessionID, actor, err)
	}
	return out, nil
}

// explainClaimed turns a stale or illegal claim into a *ClaimedError when the
// reason is that somebody else holds the session. The holder is read after
// the failed transaction; it only feeds the message.
func (s *Store) explainClaimed(ctx context.Context, sessionID, actor string, err error) error {
	if c := ErrorCode(err); c != ECONFLICT && c != EILLEGAL {
		return err
	}
	row, gerr := s.GetSession(ctx, sessionID)
	if gerr != nil || row.Status != StatusHumanActive || row.Assignee == "" || row.Assignee == actor {
		return err
	}
	return &ClaimedError{SessionID: sessionID, Holder: row.Assignee, CurrentVersion: row.StateVersion, Err: err}
}

// Release gives a session u holds back to the escalation queue
// (human_active → escalated). An admin may release anyone's claim; that is
// recorded as forced.
func (s *Store) Release(ctx context.Context, sessionID string, u User, idemKey string, in ReleaseInput) (Outcome, error) {
	return s.release(ctx, sessionID, u, idemKey, in, ActRelease)
}

// ForceRelease is an admin taking a claim away from whoever holds it, e.g.
// an agent who went home. Only admins may; others get ErrForbidden.
func (s *Store) ForceRelease(ctx context.Context, sessionID string, admin User, idemKey string, in ReleaseInput) (Outcome, error) {
	if err := roleError(ActForceRelease, sessionID, admin); err != nil {
		return Outcome{}, err
	}
	return s.release(ctx, sessionID, admin, idemKey, in, ActForceRelease)
}

func (s *Store) release(ctx context.Context, sessionID string, u User, idemKey string, in ReleaseInput, action TakeoverAction) (Outcome, error) {
	t := takeover{sessionID: sessionID, user: u, action: action, in: in}
	actor := u.Actor()
	cmd, err := s.takeoverCommand(t, EventHumanReleased, idemKey, in.ExpectedVersion, nil,
		func(tx *Tx, cur State) (any, error) {
			return HumanPayload{User: actor, Forced: cur.Assignee != actor, Reason: strings.TrimSpace(in.Reason)}, nil
		})
	if err != nil {
		return Outcome{}, err
	}
	return s.Execute(ctx, cmd)
}

// AddNote records a support agent's or an admin's note (and optional
// evidence) on a session in any status, closed ones included. Anyone who
// may take over escalations may add one, holder or not: a note changes no
// status and takes nothing from the holder. It names no expected version and
// so never conflicts; the version the author saw is kept with the note.
func (s *Store) AddNote(ctx context.Context, sessionID string, u User, idemKey string, in NoteInput) (Outcome, error) {
	if err := roleError(ActNote, sessionID, u); err != nil {
		return Outcome{}, err
	}
	if err := in.Validate(); err != nil {
		return Outcome{}, err
	}
	req := NoteRequest{Text: in.Text, ExpectedVersion: in.ExpectedVersion}
	if c := strings.TrimSpace(in.EvidenceClaim); c != "" {
		req.Evidence = &Evidence{Claim: c, Source: in.EvidenceSource}
	}
	return s.note(ctx, sessionID, u.Actor(), idemKey, req)
}

// AddNoteAs records a note sent through the API by actor (a controller's
// or an admin's token); see AddNote.
func (s *Store) AddNoteAs(ctx context.Context, sessionID, actor, idemKey string, in NoteRequest) (Outcome, error) {
	if err := in.Validate(); err != nil {
		return Outcome{}, err
	}
	return s.note(ctx, sessionID, actor, idemKey, in)
}

func (s *Store) note(ctx context.Context, sessionID, actor, idemKey string, in NoteRequest) (Outcome, error) {
	p := HumanPayload{User: actor, Text: strings.TrimSpace(in.Text)}
	if in.ExpectedVersion != nil {
		p.SeenVersion = *in.ExpectedVersion
	}
	if e := in.Evidence; e != nil {
		p.Evidence = &Evidence{Claim: strings.TrimSpace(e.Claim), Source: strings.TrimSpace(e.Source)}
	}
	fp, err := fingerprintFor(idemKey, "note", sessionID, in)
	if err != nil {
		return Outcome{}, fmt.Errorf("note on session %s: %w", sessionID, err)
	}
	return s.Execute(ctx, Command{
		SessionID: sessionID, Type: EventHumanNoted, Actor: actor,
		Payload: p, IdempotencyKey: idemKey, Fingerprint: fp,
	})
}

// CanResolveRisks reports whether u may mark the open risks of a session in
// st resolved: any support agent or admin, holder or not, while the session
// is not closed. The session page asks it before offering the buttons.
func CanResolveRisks(st State, u User) bool {
	ok, _ := TakeoverPolicy(ActResolveRisk, u, st)
	return ok
}

// ResolveRisk marks one open risk of a session resolved (risk.resolved).
// Like a note it names no version: the only precondition is that the risk
// is still open, checked under the session lock (422 naming "risk").
func (s *Store) ResolveRisk(ctx context.Context, sessionID string, u User, idemKey string, in ResolveRiskInput) (Outcome, error) {
	if err := roleError(ActResolveRisk, sessionID, u); err != nil {
		return Outcome{}, err
	}
	if err := in.Validate(); err != nil {
		return Outcome{}, err
	}
	fp, err := fingerprintFor(idemKey, "resolve-risk", sessionID, in)
	if err != nil {
		return Outcome{}, fmt.Errorf("resolve risk on session %s: %w", sessionID, err)
	}
	actor := u.Actor()
	return s.Execute(ctx, Command{
		SessionID: sessionID, Type: EventRiskResolved, Actor: actor, IdempotencyKey: idemKey, Fingerprint: fp,
		Payload: RiskResolvedPayload{User: actor, Risks: []string{in.Risk}, Note: strings.TrimSpace(in.Note)},
		Prepare: func(tx *Tx, cur State) (any, error) {
			if cur.Status.Terminal() {
				return nil, nil // Execute reports the illegal transition
			}
			v := &ValidationError{}
			for _, r := range cur.Risks {
				if r == in.Risk {
					return nil, nil
				}
			}
			v.Add("risk", "is not an open risk of session %s", sessionID)
			return nil, v
		},
	})
}

// RequestInput asks a question and parks the session in awaiting_input
// (human_active → awaiting_input); the claim ends with it.
func (s *Store) RequestInput(ctx context.Context, sessionID string, u User, idemKey string, in RequestInputInput) (Outcome, error) {
	t := takeover{sessionID: sessionID, user: u, action: ActRequestInput, in: in}
	p := HumanPayload{User: u.Actor(), Question: strings.TrimSpace(in.Question)}
	cmd, err := s.takeoverCommand(t, EventHumanRequestedInput, idemKey, in.ExpectedVersion, p, nil)
	if err != nil {
		return Outcome{}, err
	}
	return s.executeDecision(ctx, t, cmd)
}

// ResumeAutomation re-delegates a claimed session to a queue with the
// human's edited instructions and facts (human_active → queued). The
// delegation row is written in the same transaction, exactly as Delegate
// writes it.
func (s *Store) ResumeAutomation(ctx context.Context, sessionID string, u User, idemKey string, in ResumeInput) (Outcome, error) {
	return s.resume(ctx, sessionID, u, idemKey, in, ActResume)
}

func (s *Store) resume(ctx context.Context, sessionID string, u User, idemKey string, in ResumeInput, action TakeoverAction) (Outcome, error) {
	t := takeover{sessionID: sessionID, user: u, action: action, in: in}
	p := HumanDelegationPayload{User: u.Actor(), DelegationPayload: DelegationPayload{
		DelegationID: NewID("dlg"), Queue: in.Queue, Step: strings.TrimSpace(in.Step), Instructions: in.Instructions,
		MaxAttempts: intOr(in.MaxAttempts, DefaultMaxAttempts), LeaseSeconds: intOr(in.LeaseSeconds, DefaultLeaseSeconds),
		Facts: in.Facts, Note: strings.TrimSpace(in.Note),
	}}
	cmd, err := s.takeoverCommand(t, EventHumanResumed, idemKey, in.ExpectedVersion, p, nil)
	if err != nil {
		return Outcome{}, err
	}
	cmd.Effect = s.insertDelegation(p.DelegationPayload, time.Time{})
	return s.executeDecision(ctx, t, cmd)
}

// HandBack re-queues the step that escalated, unchanged, on the queue it came
// from or on in.Queue (human_active → queued). Step, instructions, attempts
// and lease length come from the escalated delegation, read under the
// session lock.
func (s *Store) HandBack(ctx context.Context, sessionID string, u User, idemKey string, in HandBackInput) (Outcome, error) {
	t := takeover{sessionID: sessionID, user: u, action: ActHandBack, in: in}
	actor := u.Actor()
	var p HumanDelegationPayload
	cmd, err := s.takeoverCommand(t, EventHumanHandedBack, idemKey, in.ExpectedVersion, nil,
		func(tx *Tx, cur State) (any, error) {
			if cur.Status != StatusHumanActive {
				// Let Execute report the illegal transition with the current status.
				return HumanDelegationPayload{User: actor}, nil
			}
			d, err := handBackDelegation(tx, cur, in, actor)
			if err != nil {
				return nil, err
			}
			p = d
			return p, nil
		})
	if err != nil {
		return Outcome{}, err
	}
	cmd.Effect = func(tx *Tx, next State, ev Event) (any, error) {
		return s.insertDelegation(p.DelegationPayload, time.Time{})(tx, next, ev)
	}
	return s.executeDecision(ctx, t, cmd)
}

// handBackDelegation builds the hand-back delegation from the escalation.
func handBackDelegation(tx *Tx, cur State, in HandBackInput, actor string) (HumanDelegationPayload, error) {
	step := cur.CurrentStep
	var prev *Delegation
	if e := cur.Escalation; e != nil {
		if e.Step != "" {
			step = e.Step
		}
		if e.DelegationID != "" {
			rows, err := selectTx[Delegation](tx, `SELECT * FROM delegations WHERE id = ?`, e.DelegationID)
			if err != nil {
				return HumanDelegationPayload{}, fmt.Errorf("hand back session %s: read delegation %s: %w", cur.SessionID, e.DelegationID, err)
			}
			if len(rows) == 1 {
				prev = &rows[0]
			}
		}
	}
	p := HumanDelegationPayload{User: actor, DelegationPayload: DelegationPayload{
		DelegationID: NewID("dlg"), Queue: in.Queue, Step: step,
		MaxAttempts: DefaultMaxAttempts, LeaseSeconds: DefaultLeaseSeconds, Note: strings.TrimSpace(in.Note),
	}}
	if prev != nil {
		if p.Queue == "" {
			p.Queue = prev.Queue
		}
		if p.Step == "" {
			p.Step = prev.Step
		}
		p.Instructions = prev.Instructions
		p.MaxAttempts = prev.MaxAttempts
		p.LeaseSeconds = prev.LeaseSeconds
	}
	v := &ValidationError{}
	if p.Queue == "" {
		v.Add("queue", "is required: the escalation has no delegation to take the queue from")
	}
	if p.Step == "" {
		v.Add("step", "the session has no step to hand back; resume automation with a step instead")
	}
	return p, v.Err()
}

// CompleteHuman finishes a claimed session with the human's resolution
// (human_active → completed).
func (s *Store) CompleteHuman(ctx context.Context, sessionID string, u User, idemKey string, in CompleteInput) (Outcome, error) {
	t := takeover{sessionID: sessionID, user: u, action: ActComplete, in: in}
	p := HumanPayload{User: u.Actor(), Resolution: strings.TrimSpace(in.Resolution)}
	cmd, err := s.takeoverCommand(t, EventHumanCompleted, idemKey, in.ExpectedVersion, p, nil)
	if err != nil {
		return Outcome{}, err
	}
	// A claimed session has no open delegation; ending any is a safety net
	// that keeps the queue from working a finished session.
	cmd.Effect = s.endDelegation(DelegationCancelled)
	return s.executeDecision(ctx, t, cmd)
}

// RejectHuman rejects a claimed session with the human's reason
// (human_active → rejected).
func (s *Store) RejectHuman(ctx context.Context, sessionID string, u User, idemKey string, in RejectInput) (Outcome, error) {
	t := takeover{sessionID: sessionID, user: u, action: ActReject, in: in}
	p := HumanPayload{User: u.Actor(), Reason: strings.TrimSpace(in.Reason)}
	cmd, err := s.takeoverCommand(t, EventHumanRejected, idemKey, in.ExpectedVersion, p, nil)
	if err != nil {
		return Outcome{}, err
	}
	cmd.Effect = s.endDelegation(DelegationCancelled)
	return s.executeDecision(ctx, t, cmd)
}

// IsClaimed reports whether err is a claim refused because another user
// holds the session, and who that is.
func IsClaimed(err error) (holder string, ok bool) {
	var ce *ClaimedError
	if errors.As(err, &ce) {
		return ce.Holder, true
	}
	return "", false
}

// ReassignInput hands a session in human hands to another person.
type ReassignInput struct {
	ExpectedVersion *int64 `json:"expected_version"`
	// To is the user id (or email) of the agent or admin who holds the
	// session afterwards.
	To     string `json:"to"`
	Reason string `json:"reason"`
}

// Validate lists every problem with the input.
func (in ReassignInput) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	validateExpected(v, in.ExpectedVersion)
	if strings.TrimSpace(in.To) == "" {
		v.Add("to", "is required: the agent or admin to hand the session to")
	}
	validateText(v, "reason", in.Reason, false)
	return v.Err()
}

// reassignTarget finds the person a session is handed to: an enabled user
// who may take over sessions.
func (s *Store) reassignTarget(ctx context.Context, to string) (User, error) {
	u, err := s.FindUser(ctx, strings.TrimSpace(to))
	if ErrorCode(err) == ENOTFOUND || (err == nil && !u.CanTakeOver()) {
		return User{}, &ValidationError{Fields: []FieldError{{Field: "to", Message: "is not an enabled agent or admin"}}}
	}
	return u, err
}

// Reassign is an admin handing a session in human hands to another agent or
// admin (issue 14): an escalated session becomes held by them
// (human.claimed, recorded with the admin as actor and them as the user); a
// session someone else holds is force-released and claimed for them in the
// same transaction (two events, consecutive seqs, or nothing). Handing it to
// the person who holds it already is refused (422 naming "to").
func (s *Store) Reassign(ctx context.Context, sessionID string, admin User, idemKey string, in ReassignInput) (Outcome, error) {
	if err := roleError(ActReassign, sessionID, admin); err != nil {
		return Outcome{}, err
	}
	if err := in.Validate(); err != nil {
		return Outcome{}, err
	}
	target, err := s.reassignTarget(ctx, in.To)
	if err != nil {
		return Outcome{}, err
	}
	fp, err := fingerprintFor(idemKey, "takeover", ActReassign, sessionID, in)
	if err != nil {
		return Outcome{}, fmt.Errorf("reassign session %s: %w", sessionID, err)
	}
	actor, to := admin.Actor(), target.Actor()
	claim := Command{
		SessionID: sessionID, Type: EventHumanClaimed, Actor: actor, ExpectedVersion: in.ExpectedVersion,
		Payload: HumanPayload{User: to, Reason: strings.TrimSpace(in.Reason)}, IdempotencyKey: idemKey, Fingerprint: fp,
	}
	check := func(tx *Tx, cur State) (any, error) {
		if err := policyError(ActReassign, sessionID, admin, cur); err != nil {
			return nil, err
		}
		if cur.Assignee == to {
			return nil, &ValidationError{Fields: []FieldError{{Field: "to", Message: "holds the session already"}}}
		}
		return nil, nil
	}
	row, err := s.GetSession(ctx, sessionID)
	if err != nil {
		return Outcome{}, err
	}
	if row.Status != StatusHumanActive {
		claim.Prepare = check
		return s.Execute(ctx, claim)
	}
	// Held by someone else: release it (forced) and claim it for them. The
	// path is chosen from a read; the expected version makes a session that
	// changed since refuse as stale.
	follow := claim
	follow.Prepare = nil
	release := Command{
		SessionID: sessionID, Type: EventHumanReleased, Actor: actor, ExpectedVersion: in.ExpectedVersion,
		IdempotencyKey: idemKey, Fingerprint: fp,
		Prepare: func(tx *Tx, cur State) (any, error) {
			if _, err := check(tx, cur); err != nil {
				return nil, err
			}
			return HumanPayload{User: actor, Forced: true, Reason: strings.TrimSpace(in.Reason)}, nil
		},
		Then: func(tx *Tx, next State, ev Event) (*Command, error) { return &follow, nil },
	}
	return s.Execute(ctx, release)
}
