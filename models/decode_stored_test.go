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
// reviews), each decoded into every payload type Apply reads (so that
// type mismatches are compared too), State and any (DecodeTargets). Where encoding/json succeeds the fast decoder must succeed with
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
	check := func(what string, b []byte) {
		t.Helper()
		for _, newV := range models.DecodeTargets {
			fast, std, fastOK, stdErr := models.DecodeBoth(b, newV)
			switch {
			case stdErr == nil && !fastOK:
				t.Errorf("%s into %T: the fast decoder failed where encoding/json decodes: %s", what, std, b)
			case stdErr != nil && fastOK:
				t.Errorf("%s into %T: the fast decoder accepted what encoding/json rejects (%v): %s", what, std, stdErr, b)
			case fastOK && !reflect.DeepEqual(fast, std):
				t.Errorf("%s into %T: %s\n fast %#v\n  std %#v", what, std, b, fast, std)
			}
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
		check(e.Type, []byte(e.Payload))
	}
	for _, st := range states {
		check("state", []byte(st))
	}
	if len(seen) < 15 {
		t.Errorf("the demo wrote %d event types, want at least 15: %v", len(seen), seen)
	}
}
