package client

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Webhooks (admin tokens): register receivers of committed events, read
// their delivery log, rotate their secrets. Receivers check deliveries with
// VerifyWebhook and dedupe on the webhook-id header.

// WebhookInput registers a webhook. Empty Types means every event type.
type WebhookInput struct {
	URL         string   `json:"url"`
	Types       []string `json:"types,omitempty"`
	Description string   `json:"description,omitempty"`
}

// WebhookCreated is a registered webhook and its secret, shown only here.
type WebhookCreated struct {
	ID     string `json:"id"`
	Secret string `json:"secret"`
}

// Webhook is a registered webhook as listed (never its secret).
type Webhook struct {
	ID          string    `json:"id"`
	URL         string    `json:"url"`
	Types       []string  `json:"types"`
	Description string    `json:"description"`
	CreatedBy   string    `json:"created_by"`
	CreatedAt   time.Time `json:"created_at"`
	// SecretRotationEndsAt is when the previous secret stops signing,
	// while a rotation's grace runs.
	SecretRotationEndsAt *time.Time `json:"secret_rotation_ends_at"`
	Pending              int64      `json:"pending"`
	Failed               int64      `json:"failed"`
}

// Delivery is one event's delivery to a webhook.
type Delivery struct {
	EventID       string     `json:"event_id"`
	SessionID     string     `json:"session_id"`
	Seq           int64      `json:"seq"`
	Status        string     `json:"status"` // pending, sending, delivered, failed
	Attempt       int        `json:"attempt"`
	StatusCode    *int       `json:"status_code"`
	Error         string     `json:"error"`
	DeliveredAt   *time.Time `json:"delivered_at"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
}

// SecretRotated is a webhook's new secret; the old one keeps signing
// deliveries (as a second signature) until OldSecretSignsUntil.
type SecretRotated struct {
	ID                  string    `json:"id"`
	Secret              string    `json:"secret"`
	OldSecretSignsUntil time.Time `json:"old_secret_signs_until"`
}

// WebhookEvent is the body of a delivery.
type WebhookEvent struct {
	EventID      string          `json:"event_id"`
	Type         string          `json:"type"`
	SessionID    string          `json:"session_id"`
	Seq          int64           `json:"seq"`
	StateVersion int64           `json:"state_version"`
	CreatedAt    time.Time       `json:"created_at"`
	Payload      json.RawMessage `json:"payload"`
}

// CreateWebhook registers a webhook. Keep the returned secret: it is not
// shown again, except to a repeat with the same WithIdempotencyKey (which
// registers nothing more).
func (c *Client) CreateWebhook(ctx context.Context, in WebhookInput, opts ...CallOption) (WebhookCreated, error) {
	var out WebhookCreated
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/webhooks", body: in, out: &out}, opts)
	return out, err
}

// Webhooks lists the registered webhooks.
func (c *Client) Webhooks(ctx context.Context) ([]Webhook, error) {
	var out struct {
		Webhooks []Webhook `json:"webhooks"`
	}
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/webhooks", out: &out}, nil)
	return out.Webhooks, err
}

// DeleteWebhook removes a webhook; its pending deliveries are dropped.
func (c *Client) DeleteWebhook(ctx context.Context, id string, opts ...CallOption) error {
	return c.do(ctx, request{method: http.MethodDelete, path: "/api/v1/webhooks/" + esc(id)}, opts)
}

// WebhookDeliveries returns a webhook's delivery log, newest event first
// (limit 0 leaves the server's default).
func (c *Client) WebhookDeliveries(ctx context.Context, id string, limit int) ([]Delivery, error) {
	var out struct {
		Deliveries []Delivery `json:"deliveries"`
	}
	r := request{method: http.MethodGet, path: "/api/v1/webhooks/" + esc(id) + "/deliveries", out: &out}
	if limit > 0 {
		r.query = map[string][]string{"limit": {strconv.Itoa(limit)}}
	}
	err := c.do(ctx, r, nil)
	return out.Deliveries, err
}

// RotateWebhookSecret gives a webhook a new secret. A repeat with the same
// WithIdempotencyKey answers the same secret and rotates nothing.
func (c *Client) RotateWebhookSecret(ctx context.Context, id string, opts ...CallOption) (SecretRotated, error) {
	var out SecretRotated
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/webhooks/" + esc(id) + "/rotate-secret", body: struct{}{}, out: &out}, opts)
	return out, err
}

// RedeliverWebhook queues an event's delivery to a webhook again.
func (c *Client) RedeliverWebhook(ctx context.Context, id, eventID string, opts ...CallOption) error {
	return c.do(ctx, request{method: http.MethodPost, path: "/api/v1/webhooks/" + esc(id) + "/deliveries/" + esc(eventID) + "/redeliver", body: struct{}{}}, opts)
}

// WebhookTolerance is how far webhook-timestamp may be from the receiver's
// clock, against replays (the Standard Webhooks default).
const WebhookTolerance = 5 * time.Minute

// Errors of VerifyWebhook.
var (
	ErrWebhookHeaders   = errors.New("webhook: missing or malformed webhook-id, webhook-timestamp or webhook-signature")
	ErrWebhookTimestamp = errors.New("webhook: timestamp outside the tolerance")
	ErrWebhookSignature = errors.New("webhook: no matching signature")
)

// VerifyWebhook checks a delivery per the Standard Webhooks specification:
// one of the space-separated "v1,<base64>" signatures in webhook-signature
// must be the HMAC-SHA256, keyed by the base64-decoded part of secret after
// "whsec_", of "<webhook-id>.<webhook-timestamp>.<body>", and the timestamp
// must be within WebhookTolerance of now. Pass the raw body, before any JSON
// decoding. During a secret rotation deliveries carry a signature per
// secret, so either the old or the new secret verifies.
func VerifyWebhook(secret string, header http.Header, body []byte) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || len(key) == 0 {
		return fmt.Errorf("webhook: the secret is not whsec_ followed by base64")
	}
	id, ts, sigs := header.Get("webhook-id"), header.Get("webhook-timestamp"), header.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return ErrWebhookHeaders
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrWebhookHeaders
	}
	if d := time.Since(time.Unix(sec, 0)); d > WebhookTolerance || d < -WebhookTolerance {
		return ErrWebhookTimestamp
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(sigs) {
		version, sig, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrWebhookSignature
}
