package models_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/demo"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestDecodeJSONAgreesOnStoredData holds decodeJSON's fast decoder to
// encoding/json on what the product stores: every event payload and state
// the demo seed writes (every status, takeovers, input requests, children,
// reviews), each payload decoded into every payload type Apply reads (so
// that type mismatches are compared too) and into any, each state into
// State. Where encoding/json succeeds the fast decoder must succeed with
// the same value; where it fails, decodeJSON uses encoding/json's answer,
// so only a fast success on an input encoding/json rejects is wrong.
// FuzzDecodeJSON does the same on arbitrary bytes.
func TestDecodeJSONAgreesOnStoredData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := storetest.New(t, models.SQLite)
	if _, err := demo.Seed(ctx, s); err != nil {
		t.Fatalf("seed: %v", err)
	}
	types := []any{
		models.SessionCreatedPayload{}, models.PausePayload{}, models.EscalatePayload{}, models.ReasonPayload{},
		models.DelegationPayload{}, models.LeasePayload{}, models.ExpiredPayload{}, models.ResultPayload{},
		models.InputPayload{}, models.HumanPayload{}, models.HumanDelegationPayload{}, models.ChildrenPayload{},
		models.JoinPayload{}, models.RiskResolvedPayload{}, new(any),
	}
	check := func(what string, b []byte, v any) {
		t.Helper()
		fast, std, fastOK, stdErr := models.DecodeBoth(b, v)
		switch {
		case stdErr == nil && !fastOK:
			t.Errorf("%s into %T: the fast decoder failed where encoding/json decodes: %s", what, v, b)
		case stdErr != nil && fastOK:
			t.Errorf("%s into %T: the fast decoder accepted what encoding/json rejects (%v): %s", what, v, stdErr, b)
		case fastOK && !reflect.DeepEqual(fast, std):
			t.Errorf("%s into %T: %s\n fast %#v\n  std %#v", what, v, b, fast, std)
		}
	}
	var events []struct{ Type, Payload string }
	if err := s.DB.Raw(`SELECT type, payload FROM events`).Scan(&events).Error; err != nil {
		t.Fatal(err)
	}
	var states []string
	if err := s.DB.Raw(`SELECT state FROM session_states`).Scan(&states).Error; err != nil {
		t.Fatal(err)
	}
	if len(events) < 150 || len(states) < 24 {
		t.Fatalf("the demo wrote %d events and %d states, want at least 150 and 24", len(events), len(states))
	}
	seen := map[string]bool{}
	for _, e := range events {
		seen[e.Type] = true
		for _, v := range types {
			check(e.Type, []byte(e.Payload), v)
		}
	}
	for _, st := range states {
		check("state", []byte(st), models.State{})
	}
	if len(seen) < 15 {
		t.Errorf("the demo wrote %d event types, want at least 15: %v", len(seen), seen)
	}
}
