package models

import (
	"context"
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

// InputInput answers a session waiting in awaiting_input.
type InputInput struct {
	ExpectedVersion *int64         `json:"expected_version"`
	Facts           map[string]any `json:"facts"`
	Answer          string         `json:"answer"`
}

// Validate lists every problem with the input.
func (in InputInput) Validate() error {
	v := &ValidationError{}
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
	return v.Err()
}

// ProvideInput answers the open questions of a session in awaiting_input and
// opens it again (awaiting_input → open, event input.provided), so that a
// controller can delegate the next step with the new facts.
func (s *Store) ProvideInput(ctx context.Context, sessionID, actor, idemKey string, in InputInput) (Outcome, error) {
	if err := in.Validate(); err != nil {
		return Outcome{}, err
	}
	fp, err := Fingerprint("input", sessionID, in)
	if err != nil {
		return Outcome{}, fmt.Errorf("provide input to session %s: %w", sessionID, err)
	}
	answer := strings.TrimSpace(in.Answer)
	return s.Execute(ctx, Command{
		SessionID: sessionID, Type: EventInputProvided, Actor: actor, ExpectedVersion: in.ExpectedVersion,
		IdempotencyKey: idemKey, Fingerprint: fp,
		Prepare: func(tx *Tx, cur State) (any, error) {
			p := InputPayload{Facts: in.Facts, Answer: answer}
			if answer != "" {
				// The questions are read under the session lock, so the
				// answer is recorded against exactly what was asked.
				p.Facts = mergeFacts(in.Facts, map[string]any{FactInputAnswer: answer})
				if len(cur.OpenQuestions) > 0 {
					p.Facts[FactInputQuestion] = strings.Join(cur.OpenQuestions, "\n")
				}
			}
			return p, nil
		},
	})
}
