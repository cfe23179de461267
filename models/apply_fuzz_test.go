package models_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/taskpilots/handoff/models"
)

// fuzzStates are states in most statuses, built with Apply from a plausible
// history, for FuzzApply to start from.
func fuzzStates(tb testing.TB) []models.State {
	tb.Helper()
	var (
		out []models.State
		st  models.State
		seq int64
	)
	step := func(t models.EventType, payload string) {
		seq++
		e := models.Event{SessionID: "ses_fuzz", Seq: seq, Type: t, Actor: "token:fuzz",
			VersionBefore: st.Version, VersionAfter: st.Version + models.VersionStep(t), Payload: payload}
		next, err := models.Apply(st, e)
		if err != nil {
			tb.Fatalf("seed history: %s: %v", t, err)
		}
		st = next
		out = append(out, st)
	}
	out = append(out, st) // the empty state before session.created
	step(models.EventSessionCreated, `{"goal":"Refund order 1182","ticket_ref":"T-1","priority":2,"facts":{"total":"240 EUR","n":1.50}}`)
	step(models.EventDelegationCreated, `{"delegation_id":"dlg_1","queue":"refunds","step":"check","max_attempts":2,"lease_seconds":30}`)
	step(models.EventDelegationLeased, `{"delegation_id":"dlg_1","attempt":1,"worker":"w1"}`)
	step(models.EventSessionPaused, `{"reason":"hold"}`)
	step(models.EventSessionResumed, `{}`)
	step(models.EventDelegationLeased, `{"delegation_id":"dlg_1","attempt":1,"worker":"w2"}`)
	step(models.EventResultEscalated, `{"delegation_id":"dlg_1","attempt":1,"step":"check","result_type":"escalated","question":"Approve?","evidence":[{"claim":"paid"}]}`)
	step(models.EventEscalationSLABreached, `{"priority":2}`) // audit-only: seq runs ahead of the version
	step(models.EventHumanClaimed, `{"user":"user:u1"}`)
	step(models.EventHumanHandedBack, `{"user":"user:u1","delegation_id":"dlg_2","queue":"refunds","step":"check","max_attempts":2,"lease_seconds":30}`)
	step(models.EventDelegationLeased, `{"delegation_id":"dlg_2","attempt":1,"worker":"w1"}`)
	step(models.EventResultNeedsInput, `{"delegation_id":"dlg_2","attempt":1,"step":"check","result_type":"needs_input","question":"Which card?"}`)
	step(models.EventInputProvided, `{"facts":{"card":"visa"}}`)
	step(models.EventChildrenSpawned, `{"join":{"policy":"all","children":["ses_c1"]}}`)
	step(models.EventChildrenJoined, `{"result":"met","children":[{"session_id":"ses_c1","status":"completed"}]}`)
	step(models.EventDelegationCreated, `{"delegation_id":"dlg_3","queue":"refunds","step":"pay","max_attempts":1,"lease_seconds":30}`)
	step(models.EventDelegationLeased, `{"delegation_id":"dlg_3","attempt":1,"worker":"w1"}`)
	step(models.EventResultCompleted, `{"delegation_id":"dlg_3","attempt":1,"step":"pay","result_type":"completed","output":{"ok":true},"evidence":[{"claim":"paid"}]}`)
	return out
}

// canonical is the stored encoding of a state, or a test failure.
func canonical(t *testing.T, s models.State) []byte {
	t.Helper()
	b, err := models.Canonical(s)
	if err != nil {
		t.Fatalf("state does not encode: %v", err)
	}
	return b
}

// FuzzApply feeds the transition function random events: any event type
// (or an unknown one), any payload bytes, consistent or skewed versions, on
// a state from a real history or one decoded from fuzzed JSON. Apply must
// never panic and never change its input; it either refuses (returning the
// input unchanged) or returns a state moved on by the version rule of the
// event's type (invariant 10), deterministically,
// that survives being stored and read back byte for byte.
func FuzzApply(f *testing.F) {
	states := fuzzStates(f)
	payloads := []string{
		`{}`, `null`, `[]`, `"x"`, `{"delegation_id":"dlg_1","attempt":1,"worker":"w"}`,
		`{"delegation_id":"dlg_2","attempt":1,"step":"check","result_type":"failed","failure":{"class":"transient"},"retry":true,"next_attempt":2}`,
		`{"delegation_id":"dlg_3","attempt":1,"step":"pay","result_type":"failed"}`,
		`{"delegation_id":"dlg_1","attempt":2,"next_attempt":3,"exhausted":true}`,
		`{"result":"conflict","children":[{"session_id":"ses_c1","status":"completed","evidence":[{"claim":"x"}]}],"reason":"disagree"}`,
		`{"user":"user:u1","resolution":"done","evidence":{"claim":"c"}}`,
		`{"goal":"g","facts":{"a":1e400}}`, `{"join":null}`, "{\"reason\":\"\xff\"}", `{"until":"2026-01-01T00:00:00Z"}`,
	}
	for i := range states {
		for j, p := range payloads {
			f.Add(uint8(i), uint8((i*7+j)%len(models.AllEventTypes)), []byte(p), int8(0), []byte(nil))
		}
	}
	f.Add(uint8(3), uint8(6), []byte(`{"delegation_id":"dlg_1"}`), int8(1), []byte(nil))
	f.Add(uint8(0), uint8(0), []byte(`{"goal":"g"}`), int8(0), []byte(`{"session_id":"s","status":"running","version":4,"delegation":{"id":"dlg_1"}}`))
	f.Add(uint8(0), uint8(200), []byte(`{}`), int8(-1), []byte(`{"status":"bogus","version":9223372036854775807}`))

	f.Fuzz(func(t *testing.T, stateIdx, typeIdx uint8, payload []byte, skew int8, stateJSON []byte) {
		s := states[int(stateIdx)%len(states)]
		if len(stateJSON) > 0 {
			var decoded models.State
			if err := json.Unmarshal(stateJSON, &decoded); err != nil {
				return
			}
			s = decoded
		}
		typ := models.EventType(fmt.Sprintf("fuzz.unknown_%d", typeIdx))
		if n := len(models.AllEventTypes); int(typeIdx) < 2*n {
			typ = models.AllEventTypes[int(typeIdx)%n]
		}
		id := s.SessionID
		if id == "" {
			id = "ses_fuzz"
		}
		e := models.Event{SessionID: id, Seq: s.Version + 1 + int64(skew), Type: typ, Actor: "token:fuzz",
			VersionBefore: s.Version + int64(skew/2), VersionAfter: s.Version + models.VersionStep(typ) + int64(skew%3), Payload: string(payload)}
		before := canonical(t, s)

		next, err := models.Apply(s, e)
		if after := canonical(t, s); !bytes.Equal(before, after) {
			t.Fatalf("Apply(%s) changed its input:\nbefore %s\nafter  %s", typ, before, after)
		}
		// The replay loop's variant, on a copy of its own, agrees.
		var own models.State
		ownDec := json.NewDecoder(bytes.NewReader(before))
		ownDec.UseNumber()
		if err := ownDec.Decode(&own); err != nil {
			t.Fatalf("the state does not decode: %v", err)
		}
		owned, ownErr := models.ApplyOwned(own, e)
		if (ownErr == nil) != (err == nil) || (err == nil && !bytes.Equal(canonical(t, owned), canonical(t, next))) {
			t.Fatalf("applyOwned(%s) differs from Apply: %v / %v\n%s\n%s", typ, ownErr, err, canonical(t, owned), canonical(t, next))
		}
		if err != nil {
			if got := canonical(t, next); !bytes.Equal(got, before) {
				t.Fatalf("Apply(%s) refused (%v) but returned a different state:\n%s\nwant %s", typ, err, got, before)
			}
			return
		}
		// Work moves the version by one, audit-only events not at all, but
		// for those written before the rule (seq and version still equal).
		step := models.VersionStep(typ)
		legacy := step == 0 && next.Version == s.Version+1 && e.Seq == e.VersionAfter
		if next.Version != s.Version+step && !legacy {
			t.Fatalf("Apply(%s) moved version %d to %d; want +%d", typ, s.Version, next.Version, step)
		}
		stored := canonical(t, next)
		again, err := models.Apply(s, e)
		if err != nil || !bytes.Equal(canonical(t, again), stored) {
			t.Fatalf("Apply(%s) is not deterministic: %v\n%s\n%s", typ, err, stored, canonical(t, again))
		}
		// What the projection stores must read back as the same state.
		var back models.State
		dec := json.NewDecoder(bytes.NewReader(stored))
		dec.UseNumber()
		if err := dec.Decode(&back); err != nil {
			t.Fatalf("the stored state does not decode: %v\n%s", err, stored)
		}
		if b := canonical(t, back); !bytes.Equal(b, stored) {
			t.Fatalf("the stored state does not read back the same:\n%s\n%s", stored, b)
		}
	})
}
