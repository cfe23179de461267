package models

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits on session input, so that no single request can bloat the state.
const (
	MaxGoalLen      = 4000
	MaxListItems    = 50
	MaxItemLen      = 2000
	MaxFacts        = 100
	MaxTicketRef    = 200
	DefaultPriority = 3
)

// CreateSessionInput is what a controller sends to start a session.
type CreateSessionInput struct {
	Goal         string         `json:"goal"`
	TicketRef    string         `json:"ticket_ref"`
	Constraints  []string       `json:"constraints"`
	Resources    []Resource     `json:"resources"`
	DoneCriteria []string       `json:"done_criteria"`
	Facts        map[string]any `json:"facts"`
	Priority     *int           `json:"priority"`
}

// Validate lists every problem with the input.
func (in CreateSessionInput) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	switch {
	case strings.TrimSpace(in.Goal) == "":
		v.Add("goal", "is required")
	case utf8.RuneCountInString(in.Goal) > MaxGoalLen:
		v.Add("goal", "must be at most %d characters", MaxGoalLen)
	}
	CheckNUL(v, "goal", in.Goal)
	if len(in.TicketRef) > MaxTicketRef {
		v.Add("ticket_ref", "must be at most %d characters", MaxTicketRef)
	}
	CheckNUL(v, "ticket_ref", in.TicketRef)
	validateList(v, "constraints", in.Constraints)
	validateList(v, "done_criteria", in.DoneCriteria)
	if len(in.Resources) > MaxListItems {
		v.Add("resources", "must have at most %d items", MaxListItems)
	}
	CheckNUL(v, "resources", in.Resources)
	for i, r := range in.Resources {
		if strings.TrimSpace(r.Name) == "" {
			v.Add(fmt.Sprintf("resources[%d].name", i), "is required")
		}
	}
	validateFacts(v, "facts", in.Facts)
	if in.Priority != nil && (*in.Priority < 1 || *in.Priority > 5) {
		v.Add("priority", "must be between 1 (most urgent) and 5")
	}
	return v.Err()
}

func validateList(v *ValidationError, field string, xs []string) {
	if len(xs) > MaxListItems {
		v.Add(field, "must have at most %d items", MaxListItems)
	}
	for i, x := range xs {
		if strings.TrimSpace(x) == "" {
			v.Add(fmt.Sprintf("%s[%d]", field, i), "must not be empty")
		} else if len(x) > MaxItemLen {
			v.Add(fmt.Sprintf("%s[%d]", field, i), "must be at most %d bytes", MaxItemLen)
		}
	}
	CheckNUL(v, field, xs)
}

func validateFacts(v *ValidationError, field string, facts map[string]any) {
	if len(facts) > MaxFacts {
		v.Add(field, "must have at most %d entries", MaxFacts)
	}
	for k := range facts {
		if strings.TrimSpace(k) == "" {
			v.Add(field, "keys must not be empty")
		}
	}
	// Facts are free-form JSON: a NUL in any key or nested value would
	// reach the jsonb column.
	CheckNUL(v, field, facts)
}

// CreateSession starts a session; it is at version 1 with status open.
func (s *Store) CreateSession(ctx context.Context, actor, idemKey string, in CreateSessionInput) (Outcome, error) {
	if err := in.Validate(); err != nil {
		return Outcome{}, err
	}
	prio := DefaultPriority
	if in.Priority != nil {
		prio = *in.Priority
	}
	p := SessionCreatedPayload{
		Goal: strings.TrimSpace(in.Goal), TicketRef: strings.TrimSpace(in.TicketRef), Priority: prio,
		Constraints: in.Constraints, Resources: in.Resources, DoneCriteria: in.DoneCriteria, Facts: in.Facts,
	}
	fp, err := fingerprintFor(idemKey, "create", p)
	if err != nil {
		return Outcome{}, err
	}
	return s.Execute(ctx, Command{Type: EventSessionCreated, Actor: actor, Payload: p, IdempotencyKey: idemKey, Fingerprint: fp})
}

// TransitionInput is a controller's pause, resume, escalate or cancel.
type TransitionInput struct {
	ExpectedVersion *int64 `json:"expected_version"`
	Reason          string `json:"reason"`
	Question        string `json:"question"`
	// Until snoozes a pause: the session resumes by itself then (RFC 3339).
	Until string `json:"until"`
}

// Validate lists every problem with the input.
func (in TransitionInput) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	if in.ExpectedVersion == nil {
		v.Add("expected_version", "is required")
	} else if *in.ExpectedVersion < 1 {
		v.Add("expected_version", "must be at least 1")
	}
	if len(in.Reason) > MaxItemLen {
		v.Add("reason", "must be at most %d bytes", MaxItemLen)
	}
	if len(in.Question) > MaxItemLen {
		v.Add("question", "must be at most %d bytes", MaxItemLen)
	}
	CheckNUL(v, "reason", in.Reason)
	CheckNUL(v, "question", in.Question)
	CheckNUL(v, "until", in.Until)
	return v.Err()
}

// Transition applies a controller command (pause, resume, escalate, cancel)
// with its queue side effects.
func (s *Store) Transition(ctx context.Context, sessionID string, t EventType, actor, idemKey string, in TransitionInput) (Outcome, error) {
	if err := in.Validate(); err != nil {
		return Outcome{}, err
	}
	until, err := s.snoozeUntil(t, in)
	if err != nil {
		return Outcome{}, err
	}
	cmd := Command{
		SessionID: sessionID, Type: t, Actor: actor, ExpectedVersion: in.ExpectedVersion,
		IdempotencyKey: idemKey, Payload: ReasonPayload{Reason: in.Reason},
	}
	switch t {
	case EventSessionPaused:
		cmd.Payload = PausePayload{Reason: in.Reason, Until: until}
		cmd.Effect = s.holdDelegation
	case EventSessionResumed:
		cmd.Effect = s.releaseHeldDelegation
	case EventSessionEscalated:
		cmd.Payload = EscalatePayload{Reason: in.Reason, Question: in.Question}
		cmd.Effect = s.endDelegation(DelegationCancelled)
	case EventSessionCancelled:
		cmd.Effect = s.cancelWithChildren(actor)
	default:
		return Outcome{}, fmt.Errorf("transition %s: not a controller transition", t)
	}
	out, err := s.Execute(ctx, cmd)
	if err == nil && !out.Replayed && out.Status == StatusWaitingChildren {
		// A parent resumed while children finished: its join may be due.
		s.onChildDone(ctx, sessionID)
	}
	return out, err
}

// GetSession returns the projection row with the latest valid state, in
// one read of two primary keys.
func (s *Store) GetSession(ctx context.Context, id string) (Session, error) {
	var rows []Session
	if err := s.read(ctx).Raw(sessionRowSQL+` WHERE s.id = ?`, id).Find(&rows).Error; err != nil {
		return Session{}, fmt.Errorf("session %s: %w", id, err)
	}
	if len(rows) == 0 {
		return Session{}, &NotFoundError{Kind: "session", ID: id}
	}
	return rows[0], nil
}

// CountByStatus counts sessions per status.
func (s *Store) CountByStatus(ctx context.Context) (map[Status]int64, error) {
	var rows []struct {
		Status Status
		N      int64
	}
	if err := s.read(ctx).Raw(`SELECT status, count(*) AS n FROM sessions GROUP BY status`).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("count sessions: %w", err)
	}
	out := make(map[Status]int64, len(rows))
	for _, r := range rows {
		out[r.Status] = r.N
	}
	return out, nil
}

// ListEvents returns a session's events with seq > afterSeq, in order.
func (s *Store) ListEvents(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]Event, error) {
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	var evs []Event
	err := s.read(ctx).Where("session_id = ? AND seq > ?", sessionID, afterSeq).
		Order("seq").Limit(limit).Find(&evs).Error
	if err != nil {
		return nil, fmt.Errorf("session %s: list events: %w", sessionID, err)
	}
	return evs, nil
}

// Replay rebuilds a state by applying events in order with Apply.
func Replay(events []Event) (State, error) {
	var st State
	for _, e := range events {
		next, err := Apply(st, e)
		if err != nil {
			return st, fmt.Errorf("replay seq %d: %w", e.Seq, err)
		}
		st = next
	}
	return st, nil
}

// StateAt rebuilds a session's state as it was at version v by replaying its
// events up to the last one at version v (audit-only events after the work
// event that reached v included: they do not change the work).
func (s *Store) StateAt(ctx context.Context, sessionID string, v int64) (State, error) {
	row, err := s.GetSession(ctx, sessionID)
	if err != nil {
		return State{}, err
	}
	if v < 1 || v > row.StateVersion {
		return State{}, &ValidationError{Fields: []FieldError{{Field: "version", Message: fmt.Sprintf("must be between 1 and %d", row.StateVersion)}}}
	}
	var evs []Event
	if err := s.read(ctx).Where("session_id = ? AND version_after <= ?", sessionID, v).Order("seq").Find(&evs).Error; err != nil {
		return State{}, fmt.Errorf("session %s: load events: %w", sessionID, err)
	}
	er, err := s.sessionErasure(ctx, sessionID)
	if err != nil || er == nil {
		if err != nil {
			return State{}, err
		}
		return Replay(evs)
	}
	// Erased: the history before the erasure is gone; from its state on,
	// the later events replay as usual.
	from, err := er.decodeState()
	if err != nil {
		return State{}, err
	}
	if v < from.Version {
		return State{}, &ValidationError{Fields: []FieldError{{Field: "version", Message: fmt.Sprintf(
			"the session's history before version %d was erased on %s (erasure %s)", from.Version, er.ErasedAt.Time.Format("2006-01-02"), er.ErasureID)}}}
	}
	var st State
	for _, e := range evs {
		if st, err = replayEvent(st, e, er); err != nil {
			return st, fmt.Errorf("replay seq %d: %w", e.Seq, err)
		}
	}
	return st, nil
}
