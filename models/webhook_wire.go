package models

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
	"time"
)

// What a delivery puts on the wire: its body and its signature. Both are
// built once per event by hand rather than by encoding/json and the
// standardwebhooks package, which on the dispatcher's profile cost a
// reflection walk, a re-scan of the payload and four copies of the body per
// event. The output is byte for byte what those produce
// (webhook_wire_test.go checks it against both), so a delivery's first
// attempt (from the feed page) and its retries (from the claim) send the
// same bytes.

// AppendWebhookBody appends the JSON body of a delivery to dst: exactly
// what json.Marshal(b) writes, the payload compacted and HTML-escaped as
// json.Marshal does with a json.RawMessage. A payload that is not valid
// JSON (a tampered row) is sent as a JSON string, as the feed tells it.
func AppendWebhookBody(dst []byte, b WebhookBody) []byte { return appendWebhookBody(dst, b, false) }

// appendWebhookBody is AppendWebhookBody; valid says the payload is known
// to be valid JSON already (ReadFeed checked it), which spares a scan.
func appendWebhookBody(dst []byte, b WebhookBody, valid bool) []byte {
	dst = append(dst, `{"event_id":`...)
	dst = appendJSONString(dst, b.EventID)
	dst = append(dst, `,"type":`...)
	dst = appendJSONString(dst, string(b.Type))
	dst = append(dst, `,"session_id":`...)
	dst = appendJSONString(dst, b.SessionID)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendInt(dst, b.Seq, 10)
	dst = append(dst, `,"state_version":`...)
	dst = strconv.AppendInt(dst, b.StateVersion, 10)
	dst = append(dst, `,"created_at":`...)
	dst = appendJSONString(dst, b.CreatedAt.Time.UTC().Format(time.RFC3339Nano))
	dst = append(dst, `,"payload":`...)
	dst = appendPayload(dst, b.Payload, valid)
	return append(dst, '}')
}

// appendJSONString appends s quoted as json.Marshal quotes it. Ids, types
// and times are plain ASCII and are copied as they are; anything else goes
// through encoding/json.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// appendPayload appends a stored payload as json.Marshal writes a
// json.RawMessage: compacted, with <, >, &, U+2028 and U+2029 escaped. The
// payloads the write path stores are compact already and rarely hold those
// characters, so after the validity check a plain scan usually finds that
// the bytes can be copied as they are.
func appendPayload(dst []byte, p json.RawMessage, valid bool) []byte {
	if len(p) == 0 || !valid && !json.Valid(p) {
		q, _ := json.Marshal(string(p))
		return append(dst, q...)
	}
	if verbatimJSON(p) {
		return append(dst, p...)
	}
	q, err := json.Marshal(p)
	if err != nil { // valid JSON always compacts; kept for safety
		q, _ = json.Marshal(string(p))
	}
	return append(dst, q...)
}

// verbatimJSON reports whether valid JSON p is unchanged by compacting and
// HTML-escaping: no whitespace outside strings, and none of the bytes that
// json.Marshal escapes (0xE2 starts U+2028 and U+2029, and other
// characters, which then take the slow path).
func verbatimJSON(p []byte) bool {
	in := false
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '<' || c == '>' || c == '&' || c == 0xE2:
			return false
		case in:
			if c == '\\' {
				i++ // the escaped byte, whatever it is
			} else if c == '"' {
				in = false
			}
		case c == '"':
			in = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			return false
		}
	}
	return true
}

// WebhookSigner signs deliveries with a webhook's secrets per the Standard
// Webhooks specification. The secrets are decoded once, and each one's
// keyed HMAC state is pooled and reset between messages instead of being
// set up again per event. Safe for concurrent use.
type WebhookSigner struct {
	macs []*sync.Pool // one per secret, of hash.Hash keyed with it
}

// NewWebhookSigner decodes the secrets (whsec_ and base64) in the order
// their signatures are to appear.
func NewWebhookSigner(secrets []string) (*WebhookSigner, error) {
	s := &WebhookSigner{}
	for _, sec := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sec, webhookSecretPrefix))
		if err != nil {
			return nil, fmt.Errorf("webhook secret: %w", err)
		}
		s.macs = append(s.macs, &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }})
	}
	return s, nil
}

// Sign returns the webhook-signature header value: "v1,<base64 HMAC-SHA256
// of msgID.timestamp.body>" per secret, space-separated.
func (s *WebhookSigner) Sign(msgID string, ts time.Time, body []byte) string {
	var sum [sha256.Size]byte
	out := make([]byte, 0, len(s.macs)*(4+base64.StdEncoding.EncodedLen(sha256.Size)))
	// "<msgID>.<timestamp>." then the body, without copying the body.
	head := make([]byte, 0, len(msgID)+22)
	head = append(append(head, msgID...), '.')
	head = append(strconv.AppendInt(head, ts.Unix(), 10), '.')
	for i, p := range s.macs {
		h := p.Get().(hash.Hash)
		h.Reset()
		_, _ = h.Write(head)
		_, _ = h.Write(body)
		mac := h.Sum(sum[:0])
		p.Put(h)
		if i > 0 {
			out = append(out, ' ')
		}
		out = append(out, "v1,"...)
		out = base64.StdEncoding.AppendEncode(out, mac)
	}
	return string(out)
}
