package models

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Fact keys under which ProvideInput records a free-text answer, so that the
// next worker's packet carries the answer (confirmed facts) after the open
// questions it answers are cleared.
const (
	FactInputAnswer   = "input_answer"
	FactInputQuestion = "input_question"
)

// InputInput answers a session waiting in awaiting_input
// (POST /sessions/{id}/input, and the console's answer form).
type InputInput struct {
	ExpectedVersion *int64         `json:"expected_version"`
	Facts           map[string]any `json:"facts"`
	Answer          string         `json:"answer"`
	// Delegate, when set, queues the next step in the same transaction as
	// the answer, so the session never sits open between the two.
	Delegate *InputDelegate `json:"delegate"`
}

// InputDelegate is the next step an answer delegates: the fields of
// POST /sessions/{id}/delegations other than the version and the facts,
// which the answer itself carries.
type InputDelegate struct {
	Queue        string `json:"queue"`
	Step         string `json:"step"`
	Instructions string `json:"instructions"`
	MaxAttempts  *int   `json:"max_attempts"`
	LeaseSeconds *int   `json:"lease_seconds"`
	AvailableAt  string `json:"available_at"`
	DelaySeconds *int   `json:"delay_seconds"`
}

// delegateInput is d as the DelegateInput that Delegate takes.
func (d InputDelegate) delegateInput() DelegateInput {
	return DelegateInput{
		Queue: d.Queue, Step: d.Step, Instructions: d.Instructions,
		MaxAttempts: d.MaxAttempts, LeaseSeconds: d.LeaseSeconds,
		AvailableAt: d.AvailableAt, DelaySeconds: d.DelaySeconds,
	}
}

// delegatePrefix is how the delegate part's fields are named in errors.
const delegatePrefix = "delegate."

// Validate lists every problem with the input.
func (in InputInput) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	validateExpected(v, in.ExpectedVersion)
	validateFacts(v, "facts", in.Facts)
	if len(in.Facts) == 0 && strings.TrimSpace(in.Answer) == "" {
		v.Add("answer", "an answer or at least one fact is required")
	}
	validateText(v, "answer", in.Answer, false)
	for _, k := range []string{FactInputAnswer, FactInputQuestion} {
		if _, ok := in.Facts[k]; ok {
			v.Add("facts", "key %q is reserved for the answer", k)
		}
	}
	if d := in.Delegate; d != nil {
		// The same checks as POST /delegations, named inside "delegate".
		dv := &ValidationError{}
		validateDelegation(dv, d.Queue, d.Step, d.Instructions, d.MaxAttempts, d.LeaseSeconds)
		validateSchedule(dv, d.AvailableAt, d.DelaySeconds)
		for _, f := range prefixFields(dv, delegatePrefix).Fields {
			v.Add(f.Field, "%s", f.Message)
		}
	}
	return v.Err()
}

// prefixFields names every field of ve inside an object (prefix "delegate.").
func prefixFields(ve *ValidationError, prefix string) *ValidationError {
	out := &ValidationError{Fields: make([]FieldError, len(ve.Fields))}
	for i, f := range ve.Fields {
		out.Fields[i] = FieldError{Field: prefix + f.Field, Message: f.Message}
	}
	return out
}

// ProvideInputAs is a console user answering a session waiting for input.
// The people who may answer are the people who take over escalations
// (User.CanTakeOver: agents and admins), so the console offers the form to
// exactly those whom this accepts.
func (s *Store) ProvideInputAs(ctx context.Context, sessionID string, u User, idemKey string, in InputInput) (Outcome, error) {
	if err := roleError(ActProvideInput, sessionID, u); err != nil {
		return Outcome{}, err
	}
	return s.ProvideInput(ctx, sessionID, u.Actor(), idemKey, in)
}

// ProvideInput answers the open questions of a session in awaiting_input
// (event input.provided, awaiting_input → open). The event's payload carries
// the answer, the questions it answered and the facts, so that the next
// worker's packet can say why it runs. With in.Delegate the next step is
// delegated in the same transaction (a chained delegation.created, status
// queued); a refused delegation leaves the answer unwritten too.
func (s *Store) ProvideInput(ctx context.Context, sessionID, actor, idemKey string, in InputInput) (Outcome, error) {
	if err := in.Validate(); err != nil {
		return Outcome{}, err
	}
	// The fingerprint is taken from the request, not the payload, because
	// a chained delegation holds a fresh id that differs on a repeat.
	fp, err := Fingerprint("input", sessionID, in)
	if err != nil {
		return Outcome{}, fmt.Errorf("provide input to session %s: %w", sessionID, err)
	}
	var follow *Command
	if in.Delegate != nil {
		cmd, err := s.delegateCommand(sessionID, actor, in.Delegate.delegateInput())
		if err != nil {
			var ve *ValidationError
			if errors.As(err, &ve) {
				return Outcome{}, prefixFields(ve, delegatePrefix)
			}
			return Outcome{}, fmt.Errorf("provide input to session %s: %w", sessionID, err)
		}
		follow = &cmd
	}
	answer := strings.TrimSpace(in.Answer)
	cmd := Command{
		SessionID: sessionID, Type: EventInputProvided, Actor: actor, ExpectedVersion: in.ExpectedVersion,
		IdempotencyKey: idemKey, Fingerprint: fp,
		Prepare: func(tx *Tx, cur State) (any, error) {
			// The questions are read under the session lock, so the
			// answer is recorded against exactly what was asked.
			p := InputPayload{Facts: in.Facts, Answer: answer, Question: strings.Join(cur.OpenQuestions, "\n")}
			if answer != "" {
				p.Facts = mergeFacts(in.Facts, map[string]any{FactInputAnswer: answer})
				if p.Question != "" {
					p.Facts[FactInputQuestion] = p.Question
				}
			}
			return p, nil
		},
	}
	if follow != nil {
		cmd.Then = func(*Tx, State, Event) (*Command, error) { return follow, nil }
	}
	return s.Execute(ctx, cmd)
}
