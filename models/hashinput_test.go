package models

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// marshalHashInput is the definition appendHashInput must reproduce.
func marshalHashInput(t testing.TB, e Event, key string, payload []byte) []byte {
	t.Helper()
	b, err := json.Marshal(hashInput{
		SessionID: e.SessionID, Seq: e.Seq, Type: e.Type, Actor: e.Actor,
		VersionBefore: e.VersionBefore, VersionAfter: e.VersionAfter, Payload: payload,
		IdempotencyKey: key, PrevHash: e.PrevHash, CreatedAt: e.CreatedAt.String(),
	})
	if err != nil {
		t.Fatalf("json.Marshal: %v", err)
	}
	return b
}

// TestHashInputMatchesMarshal: the hand-laid hash input is byte for byte
// json.Marshal's, on the shortcut and on every way off it.
func TestHashInputMatchesMarshal(t *testing.T) {
	t.Parallel()
	base := Event{SessionID: "ses_01JABC", Seq: 7, Type: EventResultCompleted, Actor: "token:worker",
		VersionBefore: 6, VersionAfter: 7, PrevHash: "ab12", CreatedAt: NewUTCTime(time.Date(2026, 11, 30, 8, 1, 2, 345678000, time.UTC))}
	payloads := []string{
		`{"a":1}`, `null`, `[]`, `"x"`, `{"note":"Refund <b>twice</b> & more"}`, `{"s":"Tom & Jerry"}`, `{"s":"a > b"}`, `{"a": 1}`, "{\n\"a\":1}",
		`{"s":"a\"b\\c"}`, `{"s":"\u003c"}`, "{\"s\":\"\u2028 line\u2029\"}", `{"s":"é 日本 \t"}`, `{"k":"\\"}`,
		`{"nested":{"list":[1,2.5e3,-0,true,false,null],"s":"  spaces inside  "}}`, "{\"s\":\"\xff\"}",
	}
	mutate := []func(e *Event, key *string){
		func(*Event, *string) {},
		func(e *Event, _ *string) { e.Actor = "user:ana & bob" },
		func(e *Event, _ *string) { e.Actor = "user:José" },
		func(e *Event, _ *string) { e.Actor = "bad\xffutf8" },
		func(e *Event, _ *string) { e.SessionID = "ses_\"quoted\"" },
		func(_ *Event, key *string) { *key = "idem-<1>" },
		func(_ *Event, key *string) { *key = "k\n" },
		func(e *Event, _ *string) { e.Seq, e.VersionBefore, e.VersionAfter = 1, 0, -3 },
	}
	for _, p := range payloads {
		if !json.Valid([]byte(p)) {
			continue // ComputeHash never passes an invalid payload
		}
		for i, m := range mutate {
			e, key := base, "key-1"
			m(&e, &key)
			got := appendHashInput([]byte("prefix"), e, key, []byte(p))
			want := append([]byte("prefix"), marshalHashInput(t, e, key, []byte(p))...)
			if !bytes.Equal(got, want) {
				t.Errorf("payload %q, mutation %d:\n got %s\nwant %s", p, i, got, want)
			}
		}
	}
}

// FuzzHashInput holds appendHashInput to json.Marshal on arbitrary fields
// and payloads.
func FuzzHashInput(f *testing.F) {
	f.Add("ses_1", "token:w", "k", "ph", `{"a":"<b>"}`, int64(3))
	f.Add("ses_\u2028", "user:é", "", "", "{ \"a\" : [1, 2] }", int64(-1))
	f.Add("s", "a", "k\x00", "p", `"\u2029"`, int64(0))
	f.Fuzz(func(t *testing.T, sid, actor, key, prev, payload string, seq int64) {
		e := Event{SessionID: sid, Seq: seq, Type: EventType(actor + "x"), Actor: actor, VersionBefore: seq - 1,
			VersionAfter: seq, PrevHash: prev, CreatedAt: NewUTCTime(time.Unix(seq%1e9, 0))}
		// A stored payload may be corrupted into anything: it must hash,
		// never panic.
		stored := e
		stored.Payload, stored.IdempotencyKey = payload, &key
		_ = ComputeHash(stored)
		if !json.Valid([]byte(payload)) {
			return
		}
		want := marshalHashInput(t, e, key, []byte(payload))
		if got := appendHashInput(nil, e, key, []byte(payload)); !bytes.Equal(got, want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
		if got := appendStoredHashInput(nil, e, key, payload); !bytes.Equal(got, want) {
			t.Fatalf("stored payload:\n got %s\nwant %s", got, want)
		}
	})
}

// decodeReference is decodeJSON's definition: a Decoder with UseNumber.
func decodeReference(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

// FuzzDecodeJSON holds decodeJSON — goccy/go-json first, then encoding/json's
// in-place shortcut, then its Decoder — to the Decoder it stands for: same
// value, same error, on every payload type Apply reads (number-free ones,
// and ones with interfaces, which always take the Decoder), on State and
// on any (DecodeTargets).
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{"delegation_id":"dlg_1","attempt":1,"worker":"w1"}`, `{"delegation_id":"dlg_1"} trailing`, `{"attempt":"x"}`,
		`{"attempt":1.5}`, `{"reason":"r","until":"2026-01-01T00:00:00Z"}`, `{"goal":"g","facts":{"n":1.50}}`, ` {"a":1} `,
		`{"Delegation_ID":"case"}`, `[1]`, `null`, `{"attempt":1}{"attempt":2}`, `{"delegation_id":"\ud800"}`,
		`{"output":{"n":1e400,"m":-0,"k":1.0E+2,"s":"\u2028\u00e9"},"evidence":[{"claim":"c","source":"s"}],"next_step":"n"}`,
		`{"facts":{"a":{"b":[1,2,{"c":null}]}},"completed_steps":[{"step":"s","output":{"x":true}}],"version":3}`,
		`{"goal":"g","goal":"h","GOAL":"i"}`, `{"priority":1.0}`, `{"priority":9223372036854775808}`, "{\"goal\":\"\xff\"}",
		`{"facts":{"a":1,}}`, `{"facts":[1]}`, `{"version":"3"}`, `{"output":{"a":1} }`, `"x"`, `{"status":null,"facts":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, newV := range DecodeTargets {
			got, want := newV(), newV()
			gotErr, wantErr := decodeJSON(b, got), decodeReference(b, want)
			if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
				t.Fatalf("%T %q: error %v, Decoder gives %v", got, b, gotErr, wantErr)
			}
			// DeepEqual, not the printed values: it follows pointers and
			// tells a nil map or slice from an empty one, and json.Number
			// from float64.
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%T %q:\n got %#v\nwant %#v", got, b, got, want)
			}
		}
	})
}

// TestNumberFree: the shortcut is taken exactly for destinations where
// UseNumber cannot matter.
func TestNumberFree(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		v    any
		want bool
	}{
		{LeasePayload{}, true}, {PausePayload{}, true}, {SessionCreatedPayload{}, false}, {State{}, false},
		{map[string]any{}, false}, {[]json.RawMessage{}, false}, {struct{ N json.Number }{}, true},
	} {
		if got := numberFree(reflect.TypeOf(c.v)); got != c.want {
			t.Errorf("numberFree(%T) = %v, want %v", c.v, got, c.want)
		}
	}
}

// TestDecodeJSONDeepNesting: values nested as deep as encoding/json accepts
// (10,000 levels, the most a stored payload can hold, since request bodies
// are decoded by encoding/json first) decode to the same value through
// decodeJSON, and deeper ones get encoding/json's error, not a crash.
func TestDecodeJSONDeepNesting(t *testing.T) {
	t.Parallel()
	for _, depth := range []int{9_999, 10_000, 10_001, 200_000} {
		b := []byte(`{"output":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`)
		for _, newV := range DecodeTargets {
			got, want := newV(), newV()
			gotErr, wantErr := decodeJSON(b, got), decodeReference(b, want)
			if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
				t.Fatalf("depth %d into %T: error %v, encoding/json gives %v", depth, got, gotErr, wantErr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("depth %d into %T: values differ", depth, got)
			}
		}
	}
}
