package models

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// roundTripCanonical is Canonical's definition: encode, decode into generic
// values keeping numbers as written, encode again.
func roundTripCanonical(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var generic any
	if err := decodeJSON(b, &generic); err != nil {
		return nil, err
	}
	return json.Marshal(generic)
}

// tricky strings: escapes a decode rewrites, characters encoding/json
// escapes, non-ASCII, U+2028, invalid UTF-8.
var trickyStrings = []string{
	"", "a", "b", "A", "é", "€", "<tag>", "a&b", "\u2028", "\u2029x", "\x00", "\n", "\t", "tab\there",
	"quote\"d", `back\slash`, "\xff\xfe", "日本", "z", "aa", "a\u0000b",
}

// rawJSON draws JSON text of the kind a RawMessage may hold: spaces,
// escapes that decode to plain characters, duplicate keys, numbers in any
// spelling.
func rawJSON(t *rapid.T, depth int) string {
	kinds := []string{"num", "str", "lit"}
	if depth < 3 {
		kinds = append(kinds, "obj", "arr")
	}
	switch rapid.SampledFrom(kinds).Draw(t, "raw kind") {
	case "num":
		return rapid.SampledFrom([]string{"0", "-1", "1.0", "1e2", "1E+2", "3.14159", "-0.5e-3", "12345678901234567890"}).Draw(t, "num")
	case "str":
		return rapid.SampledFrom([]string{`"x"`, `"\u0041"`, `"\/"`, `"a\nb"`, `"\u00e9"`, `"\ud83d\ude00"`, `"<"`, `"\u2028"`, "\"\u2028\""}).Draw(t, "str")
	case "lit":
		return rapid.SampledFrom([]string{"true", "false", "null"}).Draw(t, "lit")
	case "obj":
		n := rapid.IntRange(0, 4).Draw(t, "members")
		var b bytes.Buffer
		b.WriteString("{ ")
		for i := range n {
			if i > 0 {
				b.WriteString(" , ")
			}
			key := rapid.SampledFrom([]string{`"a"`, `"b"`, `"\u0061"`, `"B"`, `"é"`, `"a b"`, `"z"`}).Draw(t, "key")
			fmt.Fprintf(&b, "%s : %s", key, rawJSON(t, depth+1))
		}
		b.WriteString(" }")
		return b.String()
	default:
		n := rapid.IntRange(0, 3).Draw(t, "elems")
		var b bytes.Buffer
		b.WriteString("[")
		for i := range n {
			if i > 0 {
				b.WriteString(",\n")
			}
			b.WriteString(rawJSON(t, depth+1))
		}
		b.WriteString("]")
		return b.String()
	}
}

// goValue draws a Go value of the kinds payloads hold: maps, slices,
// structs with unsorted fields, numbers, strings, raw JSON.
func goValue(t *rapid.T, depth int) any {
	kinds := []string{"string", "int", "float", "bool", "nil", "raw", "number"}
	if depth < 3 {
		kinds = append(kinds, "map", "slice", "struct")
	}
	switch rapid.SampledFrom(kinds).Draw(t, "kind") {
	case "string":
		return rapid.SampledFrom(trickyStrings).Draw(t, "s")
	case "int":
		return rapid.Int64().Draw(t, "i")
	case "float":
		return rapid.Float64().Draw(t, "f")
	case "bool":
		return rapid.Bool().Draw(t, "b")
	case "nil":
		return nil
	case "raw":
		return json.RawMessage(rawJSON(t, depth))
	case "number":
		return json.Number(rapid.SampledFrom([]string{"1", "1.50", "2e10", "-0"}).Draw(t, "n"))
	case "map":
		m := map[string]any{}
		for range rapid.IntRange(0, 4).Draw(t, "entries") {
			m[rapid.SampledFrom(trickyStrings).Draw(t, "key")] = goValue(t, depth+1)
		}
		return m
	case "slice":
		var s []any
		for range rapid.IntRange(0, 3).Draw(t, "len") {
			s = append(s, goValue(t, depth+1))
		}
		return s
	default:
		return struct {
			Zed    any    `json:"zed"`
			Alpha  string `json:"alpha"`
			Mid    any    `json:"mid,omitempty"`
			Quoted string `json:"quoted\u00e9"`
		}{goValue(t, depth+1), rapid.SampledFrom(trickyStrings).Draw(t, "alpha"), goValue(t, depth+1), "x"}
	}
}

// TestCanonicalRoundTripProperty holds Canonical's in-place rewrite to its
// definition, byte for byte: event hashes and stored payloads depend on it.
func TestCanonicalRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := goValue(t, 0)
		want, wantErr := roundTripCanonical(v)
		got, err := Canonical(v)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("errors differ: Canonical %v, round trip %v", err, wantErr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("Canonical = %s\nround trip = %s", got, want)
		}
	})
}

// TestCanonicalPayloads checks the real payload types, whose fields are not
// declared in key order.
func TestCanonicalPayloads(t *testing.T) {
	for _, v := range []any{
		DelegationPayload{DelegationID: "dlg_1", Queue: "refunds", Step: "check", Instructions: "Check <this> & that", MaxAttempts: 3, LeaseSeconds: 30,
			Facts: map[string]any{"b": json.Number("1.0"), "a": []any{"x", json.RawMessage(`{"z":1, "a" : [ 2 ]}`)}}},
		ResultPayload{DelegationID: "dlg_1", Attempt: 1, Step: "check", ResultType: ResultCompleted,
			Output: json.RawMessage(`{"eligible": true, "amount": 1e2, "note": "\u00e9\/"}`)},
		LeasePayload{DelegationID: "dlg_1", Attempt: 2, Worker: "w-€"},
		[]any{"delegate", "ses_1", DelegateInput{Queue: "q", Step: "s"}},
		// Duplicate keys (one of them escaped): a decode keeps the last.
		json.RawMessage(`{"b": 1, "\u0061": 2, "a": 3, "c": {"z": [1], "z": {"y": 0, "x": 1}}}`),
		map[string]any{"k": json.RawMessage(`{"\u00e9": "\/", "é": null}`)},
	} {
		want, err := roundTripCanonical(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Canonical(v)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%T: Canonical = %s\nround trip = %s", v, got, want)
		}
	}
}

func BenchmarkCanonical(b *testing.B) {
	p := ResultPayload{DelegationID: "dlg_01KB0000000000000000000000", Attempt: 1, Step: "check-eligibility", ResultType: ResultCompleted,
		Output:   json.RawMessage(`{"eligible": true, "order": {"id": "100001", "total": "120 EUR"}}`),
		Evidence: []Evidence{{Claim: "order paid 2026-11-20", Source: "orders-db/1182"}}}
	b.Run("rewrite", func(b *testing.B) {
		for b.Loop() {
			if _, err := Canonical(p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("round-trip", func(b *testing.B) {
		for b.Loop() {
			if _, err := roundTripCanonical(p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
