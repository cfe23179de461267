package models_test

import (
	"context"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestTextValidatorsRefuseNUL: the models validators refuse NUL themselves,
// so a caller that is not the HTTP layer (CLI, console handlers) cannot
// reach the database with it either.
func TestTextValidatorsRefuseNUL(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		fieldsOf := func(err error) []string {
			ve, ok := err.(*models.ValidationError)
			if !ok {
				t.Fatalf("err = %v (%T), want *models.ValidationError", err, err)
			}
			var out []string
			for _, f := range ve.Fields {
				out = append(out, f.Field)
			}
			return out
		}
		_, err := s.CreateSession(ctx, "test", "", models.CreateSessionInput{Goal: "a\x00", DoneCriteria: []string{"x\x00"},
			Facts: map[string]any{"nested": map[string]any{"deep": "\x00"}}})
		if got := fieldsOf(err); len(got) != 3 || got[0] != "goal" || got[1] != "done_criteria[0]" || got[2] != "facts.nested.deep" {
			t.Errorf("create: fields %v", got)
		}
		sid := storetest.Session(ctx, t, s, nil)
		v := int64(1)
		_, err = s.Transition(ctx, sid, models.EventSessionEscalated, "test", "", models.TransitionInput{ExpectedVersion: &v, Reason: "r\x00"})
		if got := fieldsOf(err); len(got) != 1 || got[0] != "reason" {
			t.Errorf("escalate: fields %v", got)
		}
		if got := fieldsOf(models.NoteInput{Text: "n\x00", EvidenceClaim: "c", EvidenceSource: "s\x00"}.Validate()); len(got) != 2 || got[0] != "text" || got[1] != "evidence_source" {
			t.Errorf("note: fields %v", got)
		}
	})
}
