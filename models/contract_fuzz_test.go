package models_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/taskpilots/handoff/models"
)

// encodeContract encodes a result the way it travels: JSON without HTML
// escaping, so that re-encoding never grows the output it carries.
func encodeContract(t *testing.T, in models.ResultInput) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(in); err != nil {
		t.Fatalf("a decoded result does not encode: %v", err)
	}
	return bytes.TrimSpace(b.Bytes())
}

// FuzzResultContract decodes arbitrary bytes as a worker's return contract
// and validates it. Validate must never panic; a refusal must be a
// ValidationError naming each offending field (the same ones every time);
// a contract it accepts must encode, decode and validate again unchanged.
// (The API decodes strictly before this; json.Unmarshal is the lenient
// superset, so every body the API lets through is covered.)
func FuzzResultContract(f *testing.F) {
	for _, s := range []string{
		`{"lease_token":"lt_1","session_id":"ses_1","step":"check","result_type":"completed","output":{"eligible":true},"evidence":[{"claim":"order paid","source":"orders-db:1182"}],"uncertainty":{"level":0.1,"notes":"fx"},"next_step":"refund"}`,
		`{"lease_token":"lt_1","session_id":"ses_1","step":"check","result_type":"needs_input","question":"Which order?"}`,
		`{"lease_token":"lt_1","session_id":"ses_1","step":"check","result_type":"escalated","next_step":"approve","risks":["refund twice"]}`,
		`{"lease_token":"lt_1","session_id":"ses_1","step":"check","result_type":"failed","failure":{"class":"transient","message":"timeout"}}`,
		`{"lease_token":"lt_1","session_id":"ses_1","step":"check","result_type":"rejected","output":null}`,
		`{"result_type":"completed"}`,
		`{"lease_token":"","session_id":"","step":"  ","result_type":"done","uncertainty":{"level":1.5},"failure":{"class":"bad"}}`,
		`{"lease_token":"lt","session_id":"s","step":"x","result_type":"completed","evidence":[{"claim":""},{"claim":"ok","source":"<b>&</b>"}]}`,
		`{"lease_token":"lt","session_id":"s","step":"x","result_type":"failed","failure":null}`,
		`{"lease_token":"lt","session_id":"s","step":"x","result_type":"completed","evidence":[{"claim":"c"}],"failure":{"class":"permanent"}}`,
		`{"lease_token":"lt","session_id":"s","step":"x","result_type":"completed","evidence":[{"claim":"c"}],"output":"\u2028<script>"}`,
		`{"output":[1,2,{"a":-0.0e-5}],"uncertainty":{"level":-0}}`,
		`[]`, `null`, `{}`, `{"evidence":"nope"}`, "{\"step\":\"\xff\xfe\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var in models.ResultInput
		if err := json.Unmarshal(data, &in); err != nil {
			return
		}
		err := in.Validate()
		if err != nil {
			var ve *models.ValidationError
			if !errors.As(err, &ve) || len(ve.Fields) == 0 {
				t.Fatalf("Validate refused %s with %T %v; want a ValidationError listing fields", data, err, err)
			}
			for _, fe := range ve.Fields {
				if fe.Field == "" || fe.Message == "" {
					t.Fatalf("a field error without field or message: %+v", fe)
				}
			}
			if again := in.Validate(); again == nil || again.Error() != err.Error() {
				t.Fatalf("Validate is not deterministic: %v, then %v", err, again)
			}
			return
		}
		b := encodeContract(t, in)
		var back models.ResultInput
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("an accepted contract re-encodes to invalid JSON %s: %v", b, err)
		}
		if err := back.Validate(); err != nil {
			t.Fatalf("an accepted contract is refused after a round trip: %v\nfirst %s\nthen %s", err, data, b)
		}
		if b2 := encodeContract(t, back); !bytes.Equal(b, b2) {
			t.Fatalf("the contract's encoding is not stable:\n%s\n%s", b, b2)
		}
	})
}
