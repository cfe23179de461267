package models_test

import (
	"encoding/json"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/taskpilots/handoff/models"
)

// TestWebhookBodyMatchesEncodingJSON: the hand-built body is byte for byte
// what json.Marshal writes for the same WebhookBody, whatever the payload
// holds (whitespace to compact, characters json.Marshal escapes, escapes
// already there, text that is not JSON), so the first attempt and the
// retries of a delivery send the same bytes.
func TestWebhookBodyMatchesEncodingJSON(t *testing.T) {
	at := models.NewUTCTime(time.Date(2026, 3, 4, 5, 6, 7, 891000, time.UTC))
	payloads := []string{
		`{}`, `{"a":1,"b":[true,null,"x"]}`, `{"note":"refund approved by policy R-7"}`,
		"{ \"a\" : [ 1 , 2 ] ,\n\t\"b\":\"c d\" }", `{"html":"<b>&amp;</b>"}`, `{"q":"say \"hi\"\\n"}`,
		`{"ls":"a` + "\u2028" + `b` + "\u2029" + `"}`, `{"euro":"€ 5"}`, `{"k":"\u003c"}`, `"just a string"`, `42`,
	}
	for _, p := range payloads {
		b := models.WebhookBody{EventID: "evt_01", Type: models.EventSessionCreated, SessionID: "ses_01", Seq: 3,
			StateVersion: 2, CreatedAt: at, Payload: json.RawMessage(p)}
		want, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if got := models.AppendWebhookBody(nil, b); string(got) != string(want) {
			t.Errorf("payload %q:\n got %s\nwant %s", p, got, want)
		}
	}
	// Ids with characters to escape go through encoding/json too.
	b := models.WebhookBody{EventID: `e"<1>`, Type: "t\n", SessionID: "s&", Payload: json.RawMessage(`{}`)}
	want, _ := json.Marshal(b)
	if got := models.AppendWebhookBody(nil, b); string(got) != string(want) {
		t.Errorf("escaped ids:\n got %s\nwant %s", got, want)
	}
	// A payload that is not JSON is told as a string, as the feed does.
	b.Payload = json.RawMessage(`{not json`)
	var back map[string]any
	if err := json.Unmarshal(models.AppendWebhookBody(nil, b), &back); err != nil || back["payload"] != "{not json" {
		t.Errorf("invalid payload sent as %v (%v); want the text as a JSON string", back["payload"], err)
	}
}

// TestWebhookSignerMatchesStandardWebhooks: the pooled signer signs as the
// standardwebhooks package does, message after message, one signature per
// secret during a rotation.
func TestWebhookSignerMatchesStandardWebhooks(t *testing.T) {
	secrets := []string{models.NewWebhookSecret(), models.NewWebhookSecret()}
	sg, err := models.NewWebhookSigner(secrets)
	if err != nil {
		t.Fatal(err)
	}
	for i, body := range []string{`{"a":1}`, `{}`, `{"long":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`} {
		ts := time.Unix(1700000000+int64(i), 0)
		var want string
		for j, sec := range secrets {
			wh, err := standardwebhooks.NewWebhook(sec)
			if err != nil {
				t.Fatal(err)
			}
			sig, err := wh.Sign("evt_x", ts, []byte(body))
			if err != nil {
				t.Fatal(err)
			}
			if j > 0 {
				want += " "
			}
			want += sig
		}
		if got := sg.Sign("evt_x", ts, []byte(body)); got != want {
			t.Errorf("message %d signed %q, want %q", i, got, want)
		}
	}
	if _, err := models.NewWebhookSigner([]string{"whsec_!!!"}); err == nil {
		t.Error("a secret that is not base64 was accepted")
	}
}
