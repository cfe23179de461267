package models

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// EventType names what happened in a session.
type EventType string

// The event types. Their names are part of the audit trail and the API; do not
// rename them.
const (
	EventSessionCreated        EventType = "session.created"
	EventSessionPaused         EventType = "session.paused"
	EventSessionResumed        EventType = "session.resumed"
	EventSessionEscalated      EventType = "session.escalated"
	EventSessionCancelled      EventType = "session.cancelled"
	EventDelegationCreated     EventType = "delegation.created"
	EventDelegationLeased      EventType = "delegation.leased"
	EventDelegationExpired     EventType = "delegation.lease_expired"
	EventResultCompleted       EventType = "result.completed"
	EventResultNeedsInput      EventType = "result.needs_input"
	EventResultRejected        EventType = "result.rejected"
	EventResultEscalated       EventType = "result.escalated"
	EventResultFailed          EventType = "result.failed"
	EventInputProvided         EventType = "input.provided"
	EventHumanClaimed          EventType = "human.claimed"
	EventHumanReleased         EventType = "human.released"
	EventHumanNoted            EventType = "human.noted"
	EventHumanRequestedInput   EventType = "human.requested_input"
	EventHumanResumed          EventType = "human.resumed"
	EventHumanHandedBack       EventType = "human.handed_back"
	EventHumanCompleted        EventType = "human.completed"
	EventHumanRejected         EventType = "human.rejected"
	EventChildrenSpawned       EventType = "children.spawned"
	EventChildrenJoined        EventType = "children.joined"
	EventReviewScored          EventType = "review.scored"
	EventEscalationSLABreached EventType = "escalation.sla_breached"
	EventRiskResolved          EventType = "risk.resolved"
)

// AllEventTypes lists every event type.
var AllEventTypes = []EventType{
	EventSessionCreated, EventSessionPaused, EventSessionResumed, EventSessionEscalated,
	EventSessionCancelled, EventDelegationCreated, EventDelegationLeased, EventDelegationExpired,
	EventResultCompleted, EventResultNeedsInput, EventResultRejected, EventResultEscalated,
	EventResultFailed, EventInputProvided, EventHumanClaimed, EventHumanReleased, EventHumanNoted,
	EventHumanRequestedInput, EventHumanResumed, EventHumanHandedBack, EventHumanCompleted,
	EventHumanRejected, EventChildrenSpawned, EventChildrenJoined, EventReviewScored,
	EventEscalationSLABreached, EventRiskResolved,
}

// Event is one immutable record of a transition in a session. Seq runs 1..n
// per session: the event's position in the hash chain. VersionBefore and
// VersionAfter are the state version around it: one apart for an event that
// changes the work, equal for an audit-only one (version_rule.go), so
// VersionAfter <= Seq. Hash covers the canonical encoding of the event
// including PrevHash, the hash of the session's previous event.
type Event struct {
	ID             string    `gorm:"primaryKey" json:"id"`
	SessionID      string    `json:"session_id"`
	Seq            int64     `json:"seq"`
	Type           EventType `json:"type"`
	Actor          string    `json:"actor"`
	VersionBefore  int64     `json:"version_before"`
	VersionAfter   int64     `json:"version_after"`
	Payload        string    `json:"payload"`
	IdempotencyKey *string   `json:"idempotency_key"`
	PrevHash       string    `json:"prev_hash"`
	Hash           string    `json:"hash"`
	CreatedAt      UTCTime   `json:"created_at"`
	// Traceparent and Tracestate are the W3C trace context of the request
	// that caused the event ("" for none): metadata, not hashed
	// (models/trace.go).
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// TableName pins the table name for GORM.
func (Event) TableName() string { return "events" }

// Payloads of the events. Fields are only ever added, never renamed, because
// old events must keep replaying.

// SessionCreatedPayload starts a session.
type SessionCreatedPayload struct {
	Goal         string         `json:"goal"`
	TicketRef    string         `json:"ticket_ref,omitempty"`
	ParentID     string         `json:"parent_id,omitempty"`
	ParentGoal   string         `json:"parent_goal,omitempty"`
	Priority     int            `json:"priority"`
	Constraints  []string       `json:"constraints,omitempty"`
	Resources    []Resource     `json:"resources,omitempty"`
	DoneCriteria []string       `json:"done_criteria,omitempty"`
	Facts        map[string]any `json:"facts,omitempty"`
}

// ReasonPayload carries a free-text reason (pause, resume, cancel, reject).
type ReasonPayload struct {
	Reason string `json:"reason,omitempty"`
}

// PausePayload pauses a session; with Until it is a snooze, and the
// maintenance pass resumes the session at that time (RFC 3339).
type PausePayload struct {
	Reason string `json:"reason,omitempty"`
	Until  string `json:"until,omitempty"`
}

// EscalatePayload is a controller's or the system's escalation.
type EscalatePayload struct {
	Reason   string `json:"reason,omitempty"`
	Question string `json:"question,omitempty"`
}

// DelegationPayload creates a delegation (also used by human resume and hand back).
type DelegationPayload struct {
	DelegationID string         `json:"delegation_id"`
	Queue        string         `json:"queue"`
	Step         string         `json:"step"`
	Instructions string         `json:"instructions,omitempty"`
	MaxAttempts  int            `json:"max_attempts"`
	LeaseSeconds int            `json:"lease_seconds"`
	Facts        map[string]any `json:"facts,omitempty"`
	Note         string         `json:"note,omitempty"`
	// AvailableAt, when set, schedules the delegation: it is not claimable
	// before this time (RFC 3339).
	AvailableAt string `json:"available_at,omitempty"`
	// PacketMaxBytes is the delegation's context packet budget (0: default).
	PacketMaxBytes int `json:"packet_max_bytes,omitempty"`
}

// LeasePayload records that a worker holds the delegation's lease.
type LeasePayload struct {
	DelegationID string `json:"delegation_id"`
	Attempt      int    `json:"attempt"`
	Worker       string `json:"worker"`
}

// ExpiredPayload records a lease that ran out; the delegation is queued again
// as NextAttempt, or, when Exhausted, the session escalates.
type ExpiredPayload struct {
	DelegationID string `json:"delegation_id"`
	Attempt      int    `json:"attempt"`
	Worker       string `json:"worker,omitempty"`
	NextAttempt  int    `json:"next_attempt"`
	Exhausted    bool   `json:"exhausted,omitempty"`
	// LastSeenAt is the worker's last sign of life (RFC 3339): its last
	// heartbeat, or the lease start without one. The recovery time of the
	// interruption starts here, not at the expiry's detection. Events
	// written before it was recorded lack it.
	LastSeenAt string `json:"last_seen_at,omitempty"`
}

// Failure is the failure part of a failed result.
type Failure struct {
	Class   string `json:"class"`
	Message string `json:"message,omitempty"`
}

// Failure classes of a failed result.
const (
	FailureTransient = "transient"
	FailureBadInput  = "bad_input"
	FailurePermanent = "permanent"
)

// ResultPayload is an accepted return contract. Retry and NextAttempt are
// decided by the write path before the event is written, so that Apply stays
// a function of the event alone.
type ResultPayload struct {
	DelegationID string          `json:"delegation_id"`
	Attempt      int             `json:"attempt"`
	Step         string          `json:"step"`
	ResultType   string          `json:"result_type"`
	Output       json.RawMessage `json:"output,omitempty"`
	Evidence     []Evidence      `json:"evidence,omitempty"`
	Uncertainty  *Uncertainty    `json:"uncertainty,omitempty"`
	NextStep     string          `json:"next_step,omitempty"`
	Question     string          `json:"question,omitempty"`
	Risks        []string        `json:"risks,omitempty"`
	Failure      *Failure        `json:"failure,omitempty"`
	Retry        bool            `json:"retry,omitempty"`
	NextAttempt  int             `json:"next_attempt,omitempty"`
	RetryAt      string          `json:"retry_at,omitempty"`
	Usage        *Usage          `json:"usage,omitempty"`
	// ResolvedRisks are open risks the worker names as resolved.
	ResolvedRisks []string `json:"resolved_risks,omitempty"`
}

// InputPayload answers a session's open questions with facts.
type InputPayload struct {
	Facts  map[string]any `json:"facts,omitempty"`
	Answer string         `json:"answer,omitempty"`
	// Question is the open questions the answer answered, one per line, as
	// they stood when it was given.
	Question string `json:"question,omitempty"`
}

// HumanPayload is what a human did in a takeover.
type HumanPayload struct {
	User       string    `json:"user"`
	Forced     bool      `json:"forced,omitempty"`
	Text       string    `json:"text,omitempty"`
	Evidence   *Evidence `json:"evidence,omitempty"`
	Question   string    `json:"question,omitempty"`
	Resolution string    `json:"resolution,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	// SeenVersion is the version a note was typed against; notes never
	// conflict, so it may be older than the version the note is recorded at.
	SeenVersion int64 `json:"seen_version,omitempty"`
}

// HumanDelegationPayload is a human resuming automation or handing back.
type HumanDelegationPayload struct {
	User string `json:"user"`
	DelegationPayload
}

// ChildrenPayload records a fan-out.
type ChildrenPayload struct {
	Join Join `json:"join"`
}

// ChildOutcome is one child's result as recorded by a join.
type ChildOutcome struct {
	SessionID string          `json:"session_id"`
	Status    Status          `json:"status"`
	Output    json.RawMessage `json:"output,omitempty"`
	Evidence  []Evidence      `json:"evidence,omitempty"`
	Goal      string          `json:"goal,omitempty"`
	Outcome   string          `json:"outcome,omitempty"`
}

// JoinPayload records that a join contract was met, timed out or conflicted.
type JoinPayload struct {
	Result   string         `json:"result"` // met, timeout, conflict, unmet
	Children []ChildOutcome `json:"children"`
	Reason   string         `json:"reason,omitempty"`
}

// ReviewPayload is a reviewer's score of an escalation package.
type ReviewPayload struct {
	Reviewer  string         `json:"reviewer"`
	AtVersion int64          `json:"at_version"`
	Scores    map[string]int `json:"scores"`
	Comment   string         `json:"comment,omitempty"`
}

// maxKept bounds the lists the state keeps, so that the state and everything
// built from it stay small whatever the length of the history.
const (
	maxKeptSteps    = 20
	maxKeptEvidence = 20
	maxKeptNotes    = 20
	maxKeptRisks    = 20
)

func keepLast[T any](xs []T, n int) []T {
	if len(xs) <= n {
		return xs
	}
	return append([]T(nil), xs[len(xs)-n:]...)
}

// Apply is the one pure, deterministic function that applies an event to a
// state. Live writes and replay both call it, so a session's stored state is
// by construction what its events replay to. It never mutates s.
func Apply(s State, e Event) (State, error) {
	if err := applicable(s, e); err != nil {
		return s, err
	}
	n := s.clone()
	if err := applyPayload(&n, e); err != nil {
		return s, fmt.Errorf("apply %s seq %d: %w", e.Type, e.Seq, err)
	}
	n.Version = e.VersionAfter
	return n, nil
}

// applyOwned is Apply for a caller that owns s and drops it for the result,
// as a replay loop does: the same checks and the same payload rules, on s
// itself instead of a copy (copying the state's lists and maps per event
// was a tenth of verify's CPU). On error s is left part-way and must not be
// used again.
func applyOwned(s State, e Event) (State, error) {
	if err := applicable(s, e); err != nil {
		return s, err
	}
	if err := applyPayload(&s, e); err != nil {
		return s, fmt.Errorf("apply %s seq %d: %w", e.Type, e.Seq, err)
	}
	s.Version = e.VersionAfter
	return s, nil
}

// applicable checks that e may apply to s: the transition is allowed and the
// versions follow.
func applicable(s State, e Event) error {
	if IsErasedPayload(e.Payload) {
		return fmt.Errorf("apply %s seq %d: %w", e.Type, e.Seq, ErrErasedEvent)
	}
	if e.Type == EventSessionCreated {
		if s.Version != 0 {
			return &IllegalTransitionError{SessionID: s.SessionID, From: s.Status, Event: e.Type, CurrentVersion: s.Version}
		}
	} else if s.Version == 0 {
		return &IllegalTransitionError{SessionID: e.SessionID, Event: e.Type}
	} else if !Allowed(s.Status, e.Type) {
		return &IllegalTransitionError{SessionID: s.SessionID, From: s.Status, Event: e.Type, CurrentVersion: s.Version}
	}
	// The version moves by the rule of the event's type (invariant 10);
	// audit-only events written before the rule moved it too and still
	// replay as written. Seq is never behind the version.
	if e.VersionBefore != s.Version || e.Seq < e.VersionAfter ||
		(e.VersionAfter != s.Version+VersionStep(e.Type) && !legacyAuditEvent(e)) {
		return fmt.Errorf("apply %s seq %d: versions %d→%d do not follow state version %d",
			e.Type, e.Seq, e.VersionBefore, e.VersionAfter, s.Version)
	}
	return nil
}

func applyPayload(n *State, e Event) error {
	payload := []byte(e.Payload)
	switch e.Type {
	case EventSessionCreated:
		var p SessionCreatedPayload
		if err := decodeJSON(payload, &p); err != nil {
			return err
		}
		*n = State{
			SessionID: e.SessionID, ParentID: p.ParentID, TicketRef: p.TicketRef, Goal: p.Goal,
			Priority: p.Priority, Status: StatusOpen, Constraints: p.Constraints,
			Resources: p.Resources, DoneCriteria: p.DoneCriteria, Facts: p.Facts,
		}
		if p.ParentGoal != "" {
			n.Facts = mergeFacts(n.Facts, map[string]any{"parent_goal": p.ParentGoal})
		}
		stampFacts(n, n.Facts, e.VersionAfter)
		n.RunReason = &RunReason{Kind: RunFirst, Attempt: 1, AtVersion: e.VersionAfter}
	case EventSessionPaused:
		var p PausePayload
		if err := decodeJSON(payload, &p); err != nil {
			return err
		}
		n.PausedUntil = p.Until
		n.PausedFrom = n.Status
		if n.Status == StatusRunning {
			// Pausing revokes the lease; resuming queues the work again.
			n.PausedFrom = StatusQueued
			if n.Delegation != nil {
				n.Delegation.Worker = ""
			}
		}
		n.Status = StatusPaused
	case EventSessionResumed:
		n.Status = n.PausedFrom
		n.PausedFrom = ""
		n.PausedUntil = ""
	case EventSessionEscalated:
		var p EscalatePayload
		if err := decodeJSON(payload, &p); err != nil {
			return err
		}
		n.PausedFrom = ""
		n.PausedUntil = ""
		escalate(n, e, escalation{code: escalationCode(e.Type, "", ""), reason: p.Reason, question: p.Question})
	case EventSessionCancelled:
		var p ReasonPayload
		if err := decodeJSON(payload, &p); err != nil {
			return err
		}
		n.Status = StatusCancelled
		n.Outcome = "cancelled: " + p.Reason
		n.Delegation = nil
		n.Assignee = ""
		n.PausedFrom = ""
		n.PausedUntil = ""
	case EventDelegationCreated:
		var p DelegationPayload
		if err := decodeJSON(payload, &p); err != nil {
			return err
		}
		delegate(n, p)
		stampFacts(n, p.Facts, e.VersionAfter)
		nextRun(n, e, nil)
	case EventDelegationLeased:
		var p LeasePayload
		if err := decodeJSON(payload, &p); err != nil {
			return err
		}
		if n.Delegation == nil || n.Delegation.ID != p.DelegationID {
			return fmt.Errorf("lease of %s, but the session waits on %v", p.DelegationID, n.Delegation)
		}
		n.Delegation.Attempt = p.Attempt
		n.Delegation.Worker = p.Worker
		n.Status = StatusRunning
		if n.RunReason != nil && n.RunReason.Attempt != p.Attempt {
			r := *n.RunReason
			r.Attempt = p.Attempt
			n.RunReason = &r
		}
	case EventDelegationExpired:
		var p ExpiredPayload
		if err := decodeJSON(payload, &p); err != nil {
			return err
		}
		if n.Delegation == nil || n.Delegation.ID != p.DelegationID {
			return fmt.Errorf("expiry of %s, but the session waits on %v", p.DelegationID, n.Delegation)
		}
		n.Delegation.Worker = ""
		msg := "the lease ran out before the worker reported a result or heartbeat"
		if p.Worker != "" {
			msg = "the lease of " + p.Worker + " ran out before it reported a result or heartbeat"
		}
		n.Failures = keepLast(append(n.Failures, AttemptFailure{
			DelegationID: p.DelegationID, Step: n.Delegation.Step, Attempt: p.Attempt, Class: FailureLeaseExpired,
			Message: msg, Worker: p.Worker, AtVersion: e.VersionAfter,
		}), maxKeptFailures)
		if p.Exhausted {
			reason := fmt.Sprintf("lease expired on attempt %d of %d", p.Attempt, n.Delegation.MaxAttempts)
			escalate(n, e, escalation{code: escalationCode(e.Type, "", ""), reason: reason, detail: msg})
			return nil
		}
		n.Delegation.Attempt = p.NextAttempt
		n.Status = StatusQueued
		detail := fmt.Sprintf("the lease of attempt %d expired", p.Attempt)
		if p.Worker != "" {
			detail = fmt.Sprintf("the lease of attempt %d (worker %s) expired", p.Attempt, p.Worker)
		}
		n.RunReason = &RunReason{Kind: RunLeaseExpired, Detail: detail, Attempt: p.NextAttempt, AtVersion: e.VersionAfter}
	case EventResultCompleted, EventResultNeedsInput, EventResultRejected, EventResultEscalated, EventResultFailed:
		var p ResultPayload
		if err := decodeJSON(payload, &p); err != nil {
			return err
		}
		return applyResult(n, e, p)
	case EventInputProvided:
		var p InputPayload
		if err := decodeJSON(payload, &p); err != nil {
			return err
		}
		n.Facts = mergeFacts(n.Facts, p.Facts)
		stampFacts(n, p.Facts, e.VersionAfter)
		answered := inputRunReason(n, e, p)
		n.OpenQuestions = nil
		n.Status = StatusOpen
		n.RunReason = answered
	case EventHumanClaimed:
		var p HumanPayload
		if err := decodeJSON(payload, &p); err != nil {
			return err
		}
		n.Assignee = p.User
		n.Status = StatusHumanActive
	case EventHumanReleased:
		n.Assignee = ""
		n.Status = StatusEscalated
	case EventHumanNoted:
		var p HumanPayload
		if err := decodeJSON(payload, &p); err != nil {
			return err
		}
		n.Notes = keepLast(append(n.Notes, Note{By: p.User, Text: p.Text, Evidence: p.Evidence, AtVersion: e.VersionAfter, SeenVersion: p.SeenVersion}), maxKeptNotes)
		if p.Evidence != nil {
			n.Evidence = keepLast(append(n.Evidence, *p.Evidence), maxKeptEvidence)
		}
	case EventHumanRequestedInput:
		var p HumanPayload
		if err := decodeJSON(payload, &p); err != nil {
			return err
		}
		n.OpenQuestions = append(n.OpenQuestions, p.Question)
		n.Assignee = ""
		n.Status = StatusAwaitingInput
	case EventHumanResumed, EventHumanHandedBack:
		var p HumanDelegationPayload
		if err := decodeJSON(payload, &p); err != nil {
			return err
		}
		n.Assignee = ""
		n.Escalation = nil
		if p.Note != "" {
			n.Notes = keepLast(append(n.Notes, Note{By: p.User, Text: p.Note, AtVersion: e.VersionAfter}), maxKeptNotes)
		}
		delegate(n, p.DelegationPayload)
		stampFacts(n, p.Facts, e.VersionAfter)
		nextRun(n, e, humanRunReason(e, p))
	case EventHumanCompleted:
		var p HumanPayload
		if err := decodeJSON(payload, &p); err != nil {
			return err
		}
		n.Outcome = p.Resolution
		n.Status = StatusCompleted
		n.Delegation = nil
	case EventHumanRejected:
		var p HumanPayload
		if err := decodeJSON(payload, &p); err != nil {
			return err
		}
		n.Outcome = "rejected: " + p.Reason
		n.Status = StatusRejected
		n.Delegation = nil
	case EventChildrenSpawned:
		var p ChildrenPayload
		if err := decodeJSON(payload, &p); err != nil {
			return err
		}
		j := p.Join
		n.Join = &j
		n.Status = StatusWaitingChildren
	case EventChildrenJoined:
		var p JoinPayload
		if err := decodeJSON(payload, &p); err != nil {
			return err
		}
		for _, c := range p.Children {
			n.Evidence = keepLast(append(n.Evidence, c.Evidence...), maxKeptEvidence)
		}
		if n.Join != nil {
			n.Join.Result = p.Result
		}
		n.Joined = &JoinedChildren{Result: p.Result, AtVersion: e.VersionAfter, Children: p.Children}
		if n.Join != nil {
			n.Joined.Policy = n.Join.Policy
		}
		n.RunReason = &RunReason{Kind: RunAfterJoin, Detail: joinDetail(p), Attempt: 1, AtVersion: e.VersionAfter}
		if p.Result != "met" {
			escalate(n, e, escalation{code: escalationCode(e.Type, "", p.Result), reason: "join " + p.Result + ": " + p.Reason, detail: p.Reason, children: p.Children})
			n.Escalation.Children = p.Children
			return nil
		}
		n.Status = StatusOpen
	case EventReviewScored:
		n.Reviews++
	case EventEscalationSLABreached:
		// Recorded for the audit trail and metrics; the state only counts it.
	case EventRiskResolved:
		var p RiskResolvedPayload
		if err := decodeJSON(payload, &p); err != nil {
			return err
		}
		resolveRisks(n, p.Risks, p.User, p.Note, e.VersionAfter)
	default:
		return fmt.Errorf("unknown event type %q", e.Type)
	}
	return nil
}

func applyResult(n *State, e Event, p ResultPayload) error {
	d := n.Delegation
	if d == nil || d.ID != p.DelegationID {
		return fmt.Errorf("result for %s, but the session waits on %v", p.DelegationID, d)
	}
	n.Evidence = keepLast(append(n.Evidence, p.Evidence...), maxKeptEvidence)
	// Resolved first, so that a worker may resolve a risk and report a new
	// one of the same text in one result.
	resolveRisks(n, p.ResolvedRisks, e.Actor, "resolved by the result of "+p.Step, e.VersionAfter)
	n.Risks = keepLast(append(n.Risks, p.Risks...), maxKeptRisks)
	n.Uncertainty = p.Uncertainty
	n.NextStep = p.NextStep
	record := StepRecord{
		Step: p.Step, DelegationID: p.DelegationID, Attempt: p.Attempt, By: e.Actor,
		ResultType: p.ResultType, Output: p.Output, Evidence: p.Evidence, NextStep: p.NextStep, AtVersion: e.VersionAfter,
	}
	// A result uses up the reason its run had; a retried failure gives the
	// next attempt its own.
	n.RunReason = nil
	switch e.Type {
	case EventResultCompleted:
		n.CompletedSteps = keepLast(append(n.CompletedSteps, record), maxKeptSteps)
		n.Delegation = nil
		if p.NextStep != "" {
			n.Status = StatusOpen
		} else {
			n.Status = StatusCompleted
			n.Outcome = "completed by " + e.Actor
		}
	case EventResultNeedsInput:
		n.Delegation = nil
		if p.Question != "" {
			n.OpenQuestions = append(n.OpenQuestions, p.Question)
		}
		n.Status = StatusAwaitingInput
	case EventResultRejected:
		n.Delegation = nil
		n.Status = StatusRejected
		n.Outcome = "rejected by " + e.Actor
	case EventResultEscalated:
		escalate(n, e, escalation{code: escalationCode(e.Type, "", ""), reason: "worker escalated " + p.Step, question: p.Question, next: p.NextStep, u: p.Uncertainty})
	case EventResultFailed:
		if p.Failure == nil {
			return fmt.Errorf("failed result without failure")
		}
		n.Failures = keepLast(append(n.Failures, AttemptFailure{
			DelegationID: p.DelegationID, Step: p.Step, Attempt: p.Attempt, Class: p.Failure.Class,
			Message: p.Failure.Message, Worker: e.Actor, AtVersion: e.VersionAfter,
		}), maxKeptFailures)
		switch {
		case p.Failure.Class == FailureTransient && p.Retry:
			d.Attempt = p.NextAttempt
			d.Worker = ""
			n.Status = StatusQueued
			detail := p.Failure.Message
			if detail == "" {
				detail = "transient failure without a message"
			}
			n.RunReason = &RunReason{Kind: RunRetry, Detail: detail, Attempt: p.NextAttempt, AtVersion: e.VersionAfter}
		case p.Failure.Class == FailureBadInput:
			n.Delegation = nil
			n.OpenQuestions = append(n.OpenQuestions, "Input rejected by "+p.Step+": "+p.Failure.Message)
			n.Status = StatusAwaitingInput
		default:
			reason := fmt.Sprintf("%s failure in %s: %s", p.Failure.Class, p.Step, p.Failure.Message)
			if p.Failure.Class == FailureTransient {
				reason = fmt.Sprintf("transient failures exhausted %d attempts in %s: %s", d.MaxAttempts, p.Step, p.Failure.Message)
			}
			code := escalationCode(e.Type, p.Failure.Class, "")
			escalate(n, e, escalation{code: code, reason: reason, question: p.Question, next: p.NextStep, u: p.Uncertainty, detail: p.Failure.Message})
		}
	}
	return nil
}

func delegate(n *State, p DelegationPayload) {
	n.Facts = mergeFacts(n.Facts, p.Facts)
	n.OpenQuestions = nil
	n.Delegation = &ActiveDelegation{
		ID: p.DelegationID, Queue: p.Queue, Step: p.Step, Instructions: p.Instructions,
		Attempt: 1, MaxAttempts: p.MaxAttempts, LeaseSeconds: p.LeaseSeconds, PacketMaxBytes: p.PacketMaxBytes,
	}
	n.CurrentStep = p.Step
	n.Queue = p.Queue
	n.Status = StatusQueued
}

// escalate moves the session to escalated and builds its escalation package
// from the state as it is now: the reason code, a question that names the
// decision, the failed attempts of the escalated delegation as evidence, and
// a recommended action.
func escalate(n *State, e Event, c escalation) {
	next, u := c.next, c.u
	if next == "" {
		next = n.NextStep
	}
	if u == nil {
		u = n.Uncertainty
	}
	question, action := packageText(n, c, n.Delegation)
	pkg := &Escalation{
		Reason: c.reason, ReasonCode: c.code, Question: question, RecommendedAction: action,
		Goal: n.Goal, Facts: n.Facts, Evidence: n.Evidence, Risks: n.Risks, RecommendedNext: next, Uncertainty: u,
		Step: n.CurrentStep, By: e.Actor, AtVersion: e.VersionAfter,
	}
	if pg, ok := n.Facts["parent_goal"].(string); ok {
		pkg.ParentGoal = pg
	}
	for _, s := range n.CompletedSteps {
		pkg.CompletedSteps = append(pkg.CompletedSteps, s.Step)
	}
	if d := n.Delegation; d != nil {
		pkg.DelegationID = d.ID
		pkg.Attempts, pkg.MaxAttempts = d.Attempt, d.MaxAttempts
		pkg.Failures = failuresOf(n.Failures, d.ID)
		if len(pkg.Failures) > 0 {
			// The failures are the evidence a human needs first; the
			// package's list is its own copy, the state's evidence is not
			// changed.
			ev := make([]Evidence, 0, len(n.Evidence)+len(pkg.Failures))
			pkg.Evidence = append(append(ev, n.Evidence...), failureEvidence(pkg.Failures)...)
		}
	}
	n.Escalation = pkg
	n.Delegation = nil
	n.Assignee = ""
	n.Status = StatusEscalated
}

func mergeFacts(into, add map[string]any) map[string]any {
	if len(add) == 0 {
		return into
	}
	out := make(map[string]any, len(into)+len(add))
	for k, v := range into {
		out[k] = v
	}
	for k, v := range add {
		out[k] = v
	}
	return out
}

// stampFacts records that version v set the facts in add (FactVersions), so
// that the packet can keep the newest facts when it must trim.
func stampFacts(n *State, add map[string]any, v int64) {
	if len(add) == 0 {
		return
	}
	fv := make(map[string]int64, len(n.FactVersions)+len(add))
	for k, x := range n.FactVersions {
		fv[k] = x
	}
	for k := range add {
		fv[k] = v
	}
	n.FactVersions = fv
}

// nextRun sets the run reason of a new delegation: reason when the event
// brings its own (a human's decision), else the reason waiting since the
// last result (an answer, a join), else a first run.
func nextRun(n *State, e Event, reason *RunReason) {
	switch {
	case reason != nil:
		n.RunReason = reason
	case n.RunReason != nil && (n.RunReason.Kind == RunAfterInput || n.RunReason.Kind == RunAfterJoin || n.RunReason.Kind == RunAfterHuman):
		r := *n.RunReason
		r.Attempt = 1
		n.RunReason = &r
	default:
		n.RunReason = &RunReason{Kind: RunFirst, Attempt: 1, AtVersion: e.VersionAfter}
	}
}

// inputRunReason is the reason of the run after an answer: the answer and
// the questions it answered, read from the state before they are cleared.
func inputRunReason(n *State, e Event, p InputPayload) *RunReason {
	r := &RunReason{Kind: RunAfterInput, Detail: p.Answer, Attempt: 1, By: e.Actor, AtVersion: e.VersionAfter}
	if len(n.OpenQuestions) > 0 {
		r.Question = strings.Join(n.OpenQuestions, "\n")
	} else if q, ok := p.Facts[FactInputQuestion].(string); ok {
		r.Question = q
	}
	if r.Detail == "" {
		keys := make([]string, 0, len(p.Facts))
		for k := range p.Facts {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		r.Detail = "answered with facts: " + strings.Join(keys, ", ")
	}
	return r
}

// humanRunReason is the reason of the run a human resumed or handed back.
func humanRunReason(e Event, p HumanDelegationPayload) *RunReason {
	decision := "resumed automation"
	if e.Type == EventHumanHandedBack {
		decision = "handed the step back"
	}
	detail := p.User + " " + decision + " at step " + p.Step
	if p.Note != "" {
		detail += ": " + p.Note
	}
	return &RunReason{Kind: RunAfterHuman, Detail: detail, Attempt: 1, By: p.User, AtVersion: e.VersionAfter}
}

// joinDetail summarises a join for the run reason.
func joinDetail(p JoinPayload) string {
	if p.Reason == "" {
		return "join " + p.Result
	}
	return "join " + p.Result + ": " + p.Reason
}

// EventTime is the event's creation time as a time.Time.
func (e Event) EventTime() time.Time { return e.CreatedAt.Time }
