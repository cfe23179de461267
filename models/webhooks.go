package models

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Webhooks (README "Receiving webhooks"): an admin registers a URL and the event
// types it wants; every matching committed event is POSTed to it, signed per
// the Standard Webhooks specification, at least once, in each session's seq
// order (the feed's order, README "Following the event feed").
//
// Webhooks are built on the event feed, never on the write path: the write
// path does not know they exist. A dispatcher (web.Dispatcher) repeats:
//
//  1. EnqueueWebhookDeliveries: for each webhook, read the feed after the
//     webhook's cursor and insert one delivery row per matching event, in the
//     transaction that moves the cursor (a compare-and-set on the old cursor,
//     so two replicas never both enqueue a page: the loser's insert rolls
//     back). The feed hands out events in commit order, so the cursor never
//     skips an event that commits late.
//  2. RescueWebhookDeliveries: deliveries whose lease expired (a dispatcher
//     died mid-delivery) become pending again, like the lease rescue.
//  3. ClaimWebhookDeliveries: one statement claims due deliveries (FOR
//     UPDATE SKIP LOCKED on PostgreSQL) and leases them; a delivery is due
//     only when no earlier seq of its session is still pending or sending
//     for that webhook, which is what keeps each session's order.
//  4. FinishWebhookDelivery records the attempt: delivered, or pending again
//     after an exponential backoff with jitter, or failed once the retries
//     have run for GiveUpAfter (24 h by default). Only the holder of the
//     lease can finish, so a rescued delivery's late answer changes nothing.
//
// A delivery's states:
//
//	pending --claim--> sending --2xx--> delivered
//	   ^                  |  \--error, within GiveUpAfter--> pending
//	   |                  |   \-error, after GiveUpAfter---> failed
//	   +--lease expired---+
//	delivered | failed --redeliver--> pending

// DeliveryStatus is the state of one webhook delivery.
type DeliveryStatus string

// The delivery states.
const (
	DeliveryPending   DeliveryStatus = "pending"
	DeliverySending   DeliveryStatus = "sending"
	DeliveryDelivered DeliveryStatus = "delivered"
	DeliveryFailed    DeliveryStatus = "failed"
)

// Admin actions on webhooks, recorded in the admin audit log.
const (
	AdminWebhookCreate     = "webhook.create"
	AdminWebhookDelete     = "webhook.delete"
	AdminWebhookRotate     = "webhook.rotate_secret"
	AdminWebhookRedeliver  = "webhook.redeliver"
	webhookSecretPrefix    = "whsec_"
	webhookSecretBytes     = 32
	maxWebhookURLLen       = 2000
	maxWebhookDescription  = 500
	DefaultDeliveriesLimit = 50
	MaxDeliveriesLimit     = 500
)

// WebhookRotationGrace is how long the previous secret keeps signing
// deliveries after a rotation, so receivers can switch without losing any.
const WebhookRotationGrace = 24 * time.Hour

// WebhookPolicy is how deliveries are sent and retried. The zero value gets
// the defaults documented on each field.
type WebhookPolicy struct {
	// Timeout bounds one delivery request; default 10 s.
	Timeout time.Duration
	// BaseDelay is the first retry's delay, doubled per attempt up to
	// MaxDelay; each delay is then jittered to between half and all of it.
	// Defaults 5 s and 1 h.
	BaseDelay time.Duration
	MaxDelay  time.Duration
	// GiveUpAfter is how long after it was queued a delivery is retried
	// before it is marked failed; default 24 h.
	GiveUpAfter time.Duration
	// Lease is how long a claimed delivery is held before another
	// dispatcher may take it over; default Timeout + 30 s.
	Lease time.Duration
}

// WithDefaults fills the zero fields.
func (p WebhookPolicy) WithDefaults() WebhookPolicy {
	if p.Timeout <= 0 {
		p.Timeout = 10 * time.Second
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = 5 * time.Second
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = time.Hour
	}
	if p.GiveUpAfter <= 0 {
		p.GiveUpAfter = 24 * time.Hour
	}
	if p.Lease <= 0 {
		p.Lease = p.Timeout + 30*time.Second
	}
	return p
}

// Backoff is the delay before the retry that follows failed attempt n
// (1-based): BaseDelay·2^(n-1), capped at MaxDelay, jittered to [d/2, d] so
// that deliveries failing together do not retry together.
func (p WebhookPolicy) Backoff(attempt int) time.Duration {
	p = p.WithDefaults()
	d := p.MaxDelay
	if attempt < 1 {
		attempt = 1
	}
	if attempt < 40 {
		if x := float64(p.BaseDelay) * math.Pow(2, float64(attempt-1)); x < float64(p.MaxDelay) {
			d = time.Duration(x)
		}
	}
	return d/2 + time.Duration(mrand.Int64N(int64(d/2)+1))
}

// Webhook is a registered receiver. Secret is kept in clear because every
// delivery is signed with it.
type Webhook struct {
	ID                 string `gorm:"primaryKey"`
	URL                string
	Types              string // JSON array; [] means every type
	Description        string
	Secret             string
	OldSecret          *string
	OldSecretExpiresAt *UTCTime
	CursorPos          int64
	CreatedBy          string
	CreatedAt          UTCTime
}

// TableName pins the table name for GORM.
func (Webhook) TableName() string { return "webhooks" }

// EventTypes returns the subscribed types; empty means every type.
func (w Webhook) EventTypes() []EventType {
	var ts []EventType
	_ = json.Unmarshal([]byte(w.Types), &ts)
	return ts
}

// signingSecrets are the secrets deliveries are signed with at now: the
// current one and, during a rotation's grace, the previous one.
func (w Webhook) signingSecrets(now time.Time) []string {
	out := []string{w.Secret}
	if w.OldSecret != nil && w.OldSecretExpiresAt != nil && now.Before(w.OldSecretExpiresAt.Time) {
		out = append(out, *w.OldSecret)
	}
	return out
}

// WebhookView is a webhook as the API and the console show it: never its
// secret. Pending and Failed count its deliveries in those states.
type WebhookView struct {
	ID          string      `json:"id"`
	URL         string      `json:"url"`
	Types       []EventType `json:"types"`
	Description string      `json:"description"`
	CreatedBy   string      `json:"created_by"`
	CreatedAt   UTCTime     `json:"created_at"`
	// SecretRotationEndsAt is when the previous secret stops signing, while
	// a rotation's grace runs.
	SecretRotationEndsAt *UTCTime `json:"secret_rotation_ends_at"`
	Pending              int64    `json:"pending"`
	Failed               int64    `json:"failed"`
}

func (w Webhook) view(now time.Time) WebhookView {
	v := WebhookView{ID: w.ID, URL: w.URL, Types: w.EventTypes(), Description: w.Description, CreatedBy: w.CreatedBy, CreatedAt: w.CreatedAt}
	if v.Types == nil {
		v.Types = []EventType{}
	}
	if len(w.signingSecrets(now)) > 1 {
		v.SecretRotationEndsAt = w.OldSecretExpiresAt
	}
	return v
}

// WebhookInput registers a webhook.
type WebhookInput struct {
	URL         string   `json:"url"`
	Types       []string `json:"types"`
	Description string   `json:"description"`
}

// Validate names every offending field.
func (in WebhookInput) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	u, err := url.Parse(in.URL)
	switch {
	case strings.TrimSpace(in.URL) == "":
		v.Add("url", "is required: the absolute http or https URL that receives the deliveries")
	case len(in.URL) > maxWebhookURLLen:
		v.Add("url", "must be at most %d characters", maxWebhookURLLen)
	case err != nil:
		v.Add("url", "is not a valid URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		v.Add("url", "must be an absolute http:// or https:// URL")
	case u.Host == "" || u.Hostname() == "":
		v.Add("url", "must name a host")
	case u.User != nil:
		v.Add("url", "must not carry credentials; deliveries are signed instead")
	case u.Fragment != "":
		v.Add("url", "must not have a #fragment")
	}
	for i, t := range in.Types {
		if !knownEventType(EventType(t)) {
			v.Add(fmt.Sprintf("types[%d]", i), "unknown event type %q", t)
		}
	}
	if len(in.Description) > maxWebhookDescription {
		v.Add("description", "must be at most %d characters", maxWebhookDescription)
	}
	return v.Err()
}

// NewWebhookSecret returns a fresh secret: whsec_ and the base64 of 32
// random bytes, the form Standard Webhooks libraries accept.
func NewWebhookSecret() string {
	b := make([]byte, webhookSecretBytes)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return webhookSecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// CreateWebhook registers a webhook and returns it with its secret, which is
// shown once. It receives the events committed from now on: its cursor
// starts at the feed's current end. An idempotency key replays the first
// answer, secret included: the key is scoped to the caller, so only the
// caller that created the webhook gets the secret again, and a client that
// lost the first answer would otherwise hold a webhook it cannot verify.
func (s *Store) CreateWebhook(ctx context.Context, actor, idemKey string, in WebhookInput) (WebhookView, string, error) {
	in.URL = strings.TrimSpace(in.URL)
	in.Description = strings.TrimSpace(in.Description)
	if err := in.Validate(); err != nil {
		return WebhookView{}, "", err
	}
	types := []string{}
	seen := map[string]bool{}
	for _, t := range in.Types {
		if !seen[t] {
			seen[t] = true
			types = append(types, t)
		}
	}
	tj, err := json.Marshal(types)
	if err != nil {
		return WebhookView{}, "", fmt.Errorf("create webhook: %w", err)
	}
	fp, err := fingerprintFor(idemKey, "webhook.create", in.URL, types, in.Description)
	if err != nil {
		return WebhookView{}, "", fmt.Errorf("create webhook: %w", err)
	}
	out, err := s.Idempotent(ctx, actor, idemKey, fp, func(tx *Tx) (Outcome, error) {
		w := Webhook{
			ID: NewID("whk"), URL: in.URL, Types: string(tj), Description: in.Description,
			Secret: NewWebhookSecret(), CreatedBy: actor, CreatedAt: NewUTCTime(s.now()),
		}
		head, err := selectTx[int64](tx, `SELECT COALESCE(max(pos), 0) FROM feed`)
		if err != nil {
			return Outcome{}, fmt.Errorf("read the feed's end: %w", err)
		}
		if len(head) == 1 {
			w.CursorPos = head[0]
		}
		tx.Later(failWith("insert webhook"),
			`INSERT INTO webhooks (id, url, types, description, secret, cursor_pos, created_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			w.ID, w.URL, w.Types, w.Description, w.Secret, w.CursorPos, w.CreatedBy, w.CreatedAt)
		if err := s.adminLater(tx, actor, AdminWebhookCreate, "webhook", w.ID, nil, w.view(s.now())); err != nil {
			return Outcome{}, err
		}
		return dataOutcome(webhookCreated{Webhook: w.view(s.now()), Secret: w.Secret})
	})
	if err != nil {
		return WebhookView{}, "", fmt.Errorf("create webhook: %w", err)
	}
	var c webhookCreated
	if err := out.DecodeData(&c); err != nil {
		return WebhookView{}, "", fmt.Errorf("create webhook: %w", err)
	}
	return c.Webhook, c.Secret, nil
}

// webhookCreated is what a create records under its idempotency key.
type webhookCreated struct {
	Webhook WebhookView `json:"webhook"`
	Secret  string      `json:"secret"`
}

// secretRotated is what a rotation records under its idempotency key.
type secretRotated struct {
	Secret string  `json:"secret"`
	Until  UTCTime `json:"until"`
}

// dataOutcome carries v through Idempotent, which stores what a repeat
// answers.
func dataOutcome(v any) (Outcome, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Data: b}, nil
}

// webhookTx reads and locks a webhook in tx; a missing one is a
// NotFoundError.
func (s *Store) webhookTx(tx *Tx, id string) (Webhook, error) {
	// The columns of Webhook, by name: the table has more (the
	// dispatcher's lease), which the by-name scan would refuse.
	ws, err := selectTx[Webhook](tx, `SELECT id, url, types, description, secret, old_secret, old_secret_expires_at,
	cursor_pos, created_by, created_at FROM webhooks WHERE id = ?`+s.forUpdate(), id)
	if err != nil {
		return Webhook{}, fmt.Errorf("get webhook %s: %w", id, err)
	}
	if len(ws) == 0 {
		return Webhook{}, &NotFoundError{Kind: "webhook", ID: id}
	}
	return ws[0], nil
}

// ListWebhooks lists every webhook, oldest first, with its counts of pending
// and failed deliveries.
func (s *Store) ListWebhooks(ctx context.Context) ([]WebhookView, error) {
	var ws []Webhook
	db := s.DB.WithContext(ctx)
	if err := db.Order("created_at, id").Limit(1000).Find(&ws).Error; err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	var counts []struct {
		WebhookID string
		Status    DeliveryStatus
		N         int64
	}
	if err := db.Raw(`SELECT webhook_id, status, COUNT(*) AS n FROM webhook_deliveries
WHERE status IN ('pending', 'sending', 'failed') GROUP BY webhook_id, status`).Scan(&counts).Error; err != nil {
		return nil, fmt.Errorf("count webhook deliveries: %w", err)
	}
	now := s.now()
	out := make([]WebhookView, len(ws))
	idx := map[string]int{}
	for i, w := range ws {
		out[i] = w.view(now)
		idx[w.ID] = i
	}
	for _, c := range counts {
		i, ok := idx[c.WebhookID]
		if !ok {
			continue
		}
		if c.Status == DeliveryFailed {
			out[i].Failed += c.N
		} else {
			out[i].Pending += c.N
		}
	}
	return out, nil
}

// GetWebhook returns one webhook (without its secret).
func (s *Store) GetWebhook(ctx context.Context, id string) (WebhookView, error) {
	w, err := s.webhook(s.DB.WithContext(ctx), id)
	if err != nil {
		return WebhookView{}, err
	}
	return w.view(s.now()), nil
}

func (s *Store) webhook(db *gorm.DB, id string) (Webhook, error) {
	var w Webhook
	err := db.Where("id = ?", id).Take(&w).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Webhook{}, &NotFoundError{Kind: "webhook", ID: id}
	}
	if err != nil {
		return Webhook{}, fmt.Errorf("get webhook %s: %w", id, err)
	}
	return w, nil
}

// DeleteWebhook removes a webhook and its delivery log: nothing more is
// sent to it, including deliveries that were pending. An idempotency key
// replays the first answer, so a repeated delete does not turn into a 404.
func (s *Store) DeleteWebhook(ctx context.Context, actor, idemKey, id string) error {
	fp, err := fingerprintFor(idemKey, "webhook.delete", id)
	if err != nil {
		return err
	}
	_, err = s.Idempotent(ctx, actor, idemKey, fp, func(tx *Tx) (Outcome, error) {
		w, err := s.webhookTx(tx, id)
		if err != nil {
			return Outcome{}, err
		}
		tx.Later(failWith("delete deliveries of webhook %s", id), `DELETE FROM webhook_deliveries WHERE webhook_id = ?`, id)
		tx.Later(failWith("delete webhook %s", id), `DELETE FROM webhooks WHERE id = ?`, id)
		return Outcome{}, s.adminLater(tx, actor, AdminWebhookDelete, "webhook", id, w.view(s.now()), nil)
	})
	return err
}

// RotateWebhookSecret gives the webhook a new secret, returned once (and
// again to a repeat with the same idempotency key, like a create). For
// WebhookRotationGrace the previous secret signs every delivery too (a
// second signature in webhook-signature), so receivers can switch over
// without rejecting anything.
func (s *Store) RotateWebhookSecret(ctx context.Context, actor, idemKey, id string) (string, UTCTime, error) {
	fp, err := fingerprintFor(idemKey, "webhook.rotate", id)
	if err != nil {
		return "", UTCTime{}, err
	}
	out, err := s.Idempotent(ctx, actor, idemKey, fp, func(tx *Tx) (Outcome, error) {
		secret := NewWebhookSecret()
		until := NewUTCTime(s.now().Add(WebhookRotationGrace))
		w, err := s.webhookTx(tx, id)
		if err != nil {
			return Outcome{}, err
		}
		tx.Later(failWith("rotate secret of webhook %s", id),
			`UPDATE webhooks SET secret = ?, old_secret = ?, old_secret_expires_at = ? WHERE id = ?`,
			secret, w.Secret, until, id)
		if err := s.adminLater(tx, actor, AdminWebhookRotate, "webhook", id, nil, map[string]any{"old_secret_signs_until": until}); err != nil {
			return Outcome{}, err
		}
		return dataOutcome(secretRotated{Secret: secret, Until: until})
	})
	if err != nil {
		return "", UTCTime{}, err
	}
	var r secretRotated
	if err := out.DecodeData(&r); err != nil {
		return "", UTCTime{}, fmt.Errorf("rotate secret of webhook %s: %w", id, err)
	}
	return r.Secret, r.Until, nil
}

// Delivery is one event for one webhook and where its delivery stands.
type Delivery struct {
	WebhookID      string         `json:"-"`
	EventID        string         `json:"event_id"`
	SessionID      string         `json:"session_id"`
	Seq            int64          `json:"seq"`
	FeedPos        int64          `json:"-"`
	Status         DeliveryStatus `json:"status"`
	Attempt        int            `json:"attempt"`
	StatusCode     *int           `json:"status_code"`
	Error          string         `json:"error"`
	NextAttemptAt  *UTCTime       `json:"next_attempt_at"`
	LeaseToken     *string        `json:"-"`
	LeaseExpiresAt *UTCTime       `json:"-"`
	DeliveredAt    *UTCTime       `json:"delivered_at"`
	QueuedAt       UTCTime        `json:"queued_at"`
	CreatedAt      UTCTime        `json:"-"`
	UpdatedAt      UTCTime        `json:"updated_at"`
}

// TableName pins the table name for GORM.
func (Delivery) TableName() string { return "webhook_deliveries" }

// ListWebhookDeliveries returns the webhook's delivery log, newest event
// first. An unknown webhook is a NotFoundError.
func (s *Store) ListWebhookDeliveries(ctx context.Context, webhookID string, limit int) ([]Delivery, error) {
	if limit < 1 || limit > MaxDeliveriesLimit {
		v := &ValidationError{}
		v.Add("limit", "must be an integer between 1 and %d", MaxDeliveriesLimit)
		return nil, v
	}
	db := s.DB.WithContext(ctx)
	if _, err := s.webhook(db, webhookID); err != nil {
		return nil, err
	}
	ds := []Delivery{}
	if err := db.Where("webhook_id = ?", webhookID).Order("feed_pos DESC").Limit(limit).Find(&ds).Error; err != nil {
		return nil, fmt.Errorf("list deliveries of webhook %s: %w", webhookID, err)
	}
	return ds, nil
}

// RedeliverWebhook queues the delivery of an event to a webhook again, due
// now, with a fresh GiveUpAfter. A delivery being sent right now is left
// alone (it is already on its way). An idempotency key replays the first
// answer: a repeat does not queue the delivery once more.
func (s *Store) RedeliverWebhook(ctx context.Context, actor, idemKey, webhookID, eventID string) error {
	fp, err := fingerprintFor(idemKey, "webhook.redeliver", webhookID, eventID)
	if err != nil {
		return err
	}
	_, err = s.Idempotent(ctx, actor, idemKey, fp, func(tx *Tx) (Outcome, error) {
		now := NewUTCTime(s.now())
		st, err := selectTx[string](tx, `SELECT status FROM webhook_deliveries WHERE webhook_id = ? AND event_id = ?`+s.forUpdate(), webhookID, eventID)
		if err != nil {
			return Outcome{}, fmt.Errorf("redeliver %s to %s: %w", eventID, webhookID, err)
		}
		if len(st) == 0 {
			return Outcome{}, &NotFoundError{Kind: "delivery", ID: webhookID + "/" + eventID}
		}
		if DeliveryStatus(st[0]) == DeliverySending {
			return Outcome{}, nil
		}
		tx.Later(failWith("redeliver %s to %s", eventID, webhookID),
			`UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = ?, queued_at = ?, updated_at = ?
WHERE webhook_id = ? AND event_id = ?`, now, now, now, webhookID, eventID)
		return Outcome{}, s.adminLater(tx, actor, AdminWebhookRedeliver, "webhook", webhookID, map[string]any{"event_id": eventID, "status": DeliveryStatus(st[0])}, nil)
	})
	return err
}

// EnqueueWebhookDeliveries moves every webhook's cursor over up to limit
// feed events and inserts a pending delivery for each event it subscribes
// to, in the transaction that moves the cursor. It returns how many
// deliveries it inserted and how many webhooks there are (none: the
// dispatcher has nothing else to do either). Safe from several processes at once: the cursor
// moves by compare-and-set, and a page another process enqueued first is
// dropped.
func (s *Store) EnqueueWebhookDeliveries(ctx context.Context, limit int) (enqueued, webhooks int, err error) {
	var ws []Webhook
	if err := s.DB.WithContext(ctx).Select("id", "types", "cursor_pos").Order("id").Find(&ws).Error; err != nil {
		return 0, 0, fmt.Errorf("enqueue webhook deliveries: %w", err)
	}
	total := 0
	var errs []error
	for _, w := range ws {
		n, err := s.enqueueWebhook(ctx, w, limit)
		total += n
		if err != nil {
			errs = append(errs, fmt.Errorf("webhook %s: %w", w.ID, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return total, len(ws), fmt.Errorf("enqueue webhook deliveries: %w", err)
	}
	return total, len(ws), nil
}

func (s *Store) enqueueWebhook(ctx context.Context, w Webhook, limit int) (int, error) {
	// The feed is read outside the transaction: it is immutable up to the
	// positions it hands out, and on SQLite the one connection must not be
	// held by a transaction while the feed is read.
	page, err := s.ReadFeed(ctx, FeedQuery{After: EncodeFeedCursor(w.CursorPos), Types: w.EventTypes(), Limit: limit})
	if err != nil {
		return 0, fmt.Errorf("read feed: %w", err)
	}
	next := w.CursorPos
	for _, ev := range page.Events {
		next = max(next, ev.Pos)
	}
	if page.NextCursor != "" {
		if p, err := DecodeFeedCursor(page.NextCursor); err == nil {
			next = max(next, p)
		}
	}
	if next == w.CursorPos {
		return 0, nil
	}
	now := NewUTCTime(s.now())
	rows := make([]Delivery, 0, len(page.Events))
	for _, ev := range page.Events {
		rows = append(rows, Delivery{
			WebhookID: w.ID, EventID: ev.EventID, SessionID: ev.SessionID, Seq: ev.Seq, FeedPos: ev.Pos,
			Status: DeliveryPending, NextAttemptAt: &now, QueuedAt: now, CreatedAt: now, UpdatedAt: now,
		})
	}
	inserted := 0
	err = s.Transact(ctx, func(tx *gorm.DB) error {
		// A page leased by a dispatcher's fast path is its to record.
		res := tx.Exec(`UPDATE webhooks SET cursor_pos = ? WHERE id = ? AND cursor_pos = ?
AND (lease_expires_at IS NULL OR lease_expires_at <= ?)`, next, w.ID, w.CursorPos, now)
		if res.Error != nil {
			return fmt.Errorf("move cursor: %w", res.Error)
		}
		if res.RowsAffected == 0 {
			return nil // another process enqueued this page, or the webhook is gone
		}
		if len(rows) == 0 {
			return nil
		}
		ins := tx.Clauses(clause.OnConflict{DoNothing: true}).CreateInBatches(&rows, 200)
		if ins.Error != nil {
			return fmt.Errorf("insert deliveries: %w", ins.Error)
		}
		inserted = int(ins.RowsAffected)
		return nil
	})
	return inserted, err
}

// RescueWebhookDeliveries makes deliveries whose lease expired pending
// again (their dispatcher stopped mid-delivery); the attempt counts as
// failed. It returns how many it rescued.
func (s *Store) RescueWebhookDeliveries(ctx context.Context) (int, error) {
	now := NewUTCTime(s.now())
	res := s.DB.WithContext(ctx).Exec(`UPDATE webhook_deliveries
SET status = 'pending', next_attempt_at = ?, lease_token = NULL, lease_expires_at = NULL, updated_at = ?,
    error = 'lease expired: the dispatcher stopped before the attempt finished'
WHERE status = 'sending' AND lease_expires_at <= ?`, now, now, now)
	if res.Error != nil {
		return 0, fmt.Errorf("rescue webhook deliveries: %w", res.Error)
	}
	return int(res.RowsAffected), nil
}

// DeliveryJob is a claimed delivery with what sending it takes.
type DeliveryJob struct {
	WebhookID  string
	EventID    string
	SessionID  string
	Seq        int64
	Attempt    int
	LeaseToken string
	QueuedAt   UTCTime
	URL        string
	// Secrets sign the delivery: the current one first, then the previous
	// one during a rotation's grace. Signer signs with them, set up once for
	// all the jobs of a webhook in a page or a claim.
	Secrets []string
	Signer  *WebhookSigner
	// Body is the JSON POSTed: {"event_id","type","session_id","seq",
	// "state_version","created_at","payload"}. It is built from the stored
	// event, so every attempt sends the same bytes.
	Body []byte
	// feedPos is the event's feed position (pages of the fast path only).
	feedPos int64
}

// WebhookBody is the JSON body of a delivery.
type WebhookBody struct {
	EventID      string          `json:"event_id"`
	Type         EventType       `json:"type"`
	SessionID    string          `json:"session_id"`
	Seq          int64           `json:"seq"`
	StateVersion int64           `json:"state_version"`
	CreatedAt    UTCTime         `json:"created_at"`
	Payload      json.RawMessage `json:"payload"`
}

// webhookClaimSQL claims up to n due deliveries in one statement. A delivery is due
// when it is pending, its time has come, and no earlier seq of its session
// is still open for the same webhook: that is the per-session order.
func (s *Store) webhookClaimSQL() string {
	const due = `d.status = 'pending' AND d.next_attempt_at <= ?
	AND NOT EXISTS (SELECT 1 FROM webhook_deliveries p
		WHERE p.webhook_id = d.webhook_id AND p.session_id = d.session_id AND p.seq < d.seq
		AND p.status IN ('pending', 'sending'))
	ORDER BY d.next_attempt_at, d.feed_pos
	LIMIT ?`
	if s.Dialect == Postgres {
		return `WITH next AS (
	SELECT d.webhook_id, d.event_id FROM webhook_deliveries d
	WHERE ` + due + `
	FOR UPDATE OF d SKIP LOCKED
)
UPDATE webhook_deliveries w
SET status = 'sending', attempt = w.attempt + 1, lease_token = ?, lease_expires_at = ?, updated_at = ?
FROM next WHERE w.webhook_id = next.webhook_id AND w.event_id = next.event_id
RETURNING w.webhook_id, w.event_id, w.session_id, w.seq, w.attempt, w.lease_token, w.queued_at`
	}
	return `UPDATE webhook_deliveries
SET status = 'sending', attempt = attempt + 1, lease_token = ?, lease_expires_at = ?, updated_at = ?
WHERE rowid IN (SELECT d.rowid FROM webhook_deliveries d WHERE ` + due + `)
RETURNING webhook_id, event_id, session_id, seq, attempt, lease_token, queued_at`
}

// ClaimWebhookDeliveries leases up to n due deliveries for lease and returns
// them ready to send.
func (s *Store) ClaimWebhookDeliveries(ctx context.Context, n int, lease time.Duration) ([]DeliveryJob, error) {
	now := s.now()
	nowT, until, token := NewUTCTime(now), NewUTCTime(now.Add(lease)), NewID("wls")
	var args []any
	if s.Dialect == Postgres {
		args = []any{nowT, n, token, until, nowT}
	} else {
		args = []any{token, until, nowT, nowT, n}
	}
	var claimed []struct {
		WebhookID  string
		EventID    string
		SessionID  string
		Seq        int64
		Attempt    int
		LeaseToken string
		QueuedAt   UTCTime
	}
	db := s.DB.WithContext(ctx)
	if err := db.Raw(s.webhookClaimSQL(), args...).Scan(&claimed).Error; err != nil {
		return nil, fmt.Errorf("claim webhook deliveries: %w", err)
	}
	if len(claimed) == 0 {
		return nil, nil
	}
	hookIDs, eventIDs := make([]string, 0, len(claimed)), make([]string, 0, len(claimed))
	for _, c := range claimed {
		hookIDs = append(hookIDs, c.WebhookID)
		eventIDs = append(eventIDs, c.EventID)
	}
	var hooks []Webhook
	if err := db.Select("id", "url", "secret", "old_secret", "old_secret_expires_at").Where("id IN ?", slices.Compact(slices.Sorted(slices.Values(hookIDs)))).Find(&hooks).Error; err != nil {
		return nil, fmt.Errorf("claim webhook deliveries: load webhooks: %w", err)
	}
	var evs []Event
	if err := db.Select("id", "session_id", "seq", "type", "actor", "version_after", "payload", "created_at").
		Where("id IN ?", eventIDs).Find(&evs).Error; err != nil {
		return nil, fmt.Errorf("claim webhook deliveries: load events: %w", err)
	}
	hookBy := map[string]Webhook{}
	for _, h := range hooks {
		hookBy[h.ID] = h
	}
	evBy := map[string]Event{}
	for _, e := range evs {
		evBy[e.ID] = e
	}
	signers := map[string]*WebhookSigner{}
	jobs := make([]DeliveryJob, 0, len(claimed))
	for _, c := range claimed {
		h, ok1 := hookBy[c.WebhookID]
		e, ok2 := evBy[c.EventID]
		if !ok1 || !ok2 {
			continue // deleted meanwhile; the lease lapses and the row goes with its webhook
		}
		// A receiver has no identity: review scores still blind are
		// redacted (judged at delivery, so a score told after the
		// double review ended is told whole).
		red, err := s.RedactReviews(ctx, ReviewReader{}, []Event{e})
		if err != nil {
			return nil, fmt.Errorf("claim webhook deliveries: %w", err)
		}
		body := AppendWebhookBody(nil, WebhookBody{
			EventID: e.ID, Type: e.Type, SessionID: e.SessionID, Seq: e.Seq,
			StateVersion: e.VersionAfter, CreatedAt: e.CreatedAt, Payload: json.RawMessage(red[0].Payload),
		})
		secrets := h.signingSecrets(now)
		sg, ok := signers[h.ID]
		if !ok {
			// A secret that does not decode leaves Signer nil: the
			// attempt fails with the reason (web.Dispatcher.send).
			sg, _ = NewWebhookSigner(secrets)
			signers[h.ID] = sg
		}
		jobs = append(jobs, DeliveryJob{
			WebhookID: c.WebhookID, EventID: c.EventID, SessionID: c.SessionID, Seq: c.Seq, Attempt: c.Attempt,
			LeaseToken: c.LeaseToken, QueuedAt: c.QueuedAt, URL: h.URL, Secrets: secrets, Signer: sg, Body: body,
		})
	}
	return jobs, nil
}

// SignWebhook returns the webhook-signature header value for a delivery: one
// "v1,<signature>" per secret, space-separated, as the Standard Webhooks
// specification allows during a key rotation.
func SignWebhook(secrets []string, msgID string, ts time.Time, body []byte) (string, error) {
	sg, err := NewWebhookSigner(secrets)
	if err != nil {
		return "", err
	}
	return sg.Sign(msgID, ts, body), nil
}

// DeliveryResult is the outcome of one attempt: the receiver's status code
// (0 when there was no answer) and what went wrong, if anything.
type DeliveryResult struct {
	StatusCode int
	Err        string
}

// OK reports whether the receiver accepted the delivery (2xx).
func (r DeliveryResult) OK() bool { return r.Err == "" && r.StatusCode >= 200 && r.StatusCode < 300 }

// FinishWebhookDelivery records an attempt's outcome. It changes nothing
// when the lease was lost (rescued and claimed again elsewhere), and reports
// the status the delivery is left in.
func (s *Store) FinishWebhookDelivery(ctx context.Context, job DeliveryJob, r DeliveryResult, p WebhookPolicy) (DeliveryStatus, error) {
	p = p.WithDefaults()
	now := s.now()
	nowT := NewUTCTime(now)
	var code *int
	if r.StatusCode != 0 {
		code = &r.StatusCode
	}
	errText := r.Err
	if errText == "" && !r.OK() {
		errText = fmt.Sprintf("receiver answered %d", r.StatusCode)
	}
	if len(errText) > 1000 {
		errText = errText[:1000]
	}
	var (
		status DeliveryStatus
		res    *gorm.DB
		db     = s.DB.WithContext(ctx)
	)
	const where = ` WHERE webhook_id = ? AND event_id = ? AND status = 'sending' AND lease_token = ?`
	switch {
	case r.OK():
		status = DeliveryDelivered
		res = db.Exec(`UPDATE webhook_deliveries SET status = 'delivered', status_code = ?, error = '', delivered_at = ?,
next_attempt_at = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = ?`+where,
			code, nowT, nowT, job.WebhookID, job.EventID, job.LeaseToken)
	case now.Sub(job.QueuedAt.Time) >= p.GiveUpAfter:
		status = DeliveryFailed
		res = db.Exec(`UPDATE webhook_deliveries SET status = 'failed', status_code = ?, error = ?,
next_attempt_at = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = ?`+where,
			code, errText, nowT, job.WebhookID, job.EventID, job.LeaseToken)
	default:
		status = DeliveryPending
		next := NewUTCTime(now.Add(p.Backoff(job.Attempt)))
		res = db.Exec(`UPDATE webhook_deliveries SET status = 'pending', status_code = ?, error = ?,
next_attempt_at = ?, lease_token = NULL, lease_expires_at = NULL, updated_at = ?`+where,
			code, errText, next, nowT, job.WebhookID, job.EventID, job.LeaseToken)
	}
	if res.Error != nil {
		return "", fmt.Errorf("finish delivery of %s to %s: %w", job.EventID, job.WebhookID, res.Error)
	}
	if res.RowsAffected == 0 {
		return "", fmt.Errorf("finish delivery of %s to %s: %w", job.EventID, job.WebhookID, ErrLeaseLost)
	}
	return status, nil
}

// ErrLeaseLost is an attempt finished after its lease was taken over.
var ErrLeaseLost = errors.New("the delivery's lease was lost; another dispatcher owns it")

// FinishWebhookDeliveries records the outcomes of a claimed batch (jobs[i]
// had results[i]). The deliveries accepted with the same status code are
// recorded in one statement, since on a busy system almost all are, so the
// dispatcher costs the database a few statements per batch rather than one
// per event; the others go through FinishWebhookDelivery one by one. It
// returns the status each delivery was left in ("" where the lease was
// lost) and the first error.
func (s *Store) FinishWebhookDeliveries(ctx context.Context, jobs []DeliveryJob, results []DeliveryResult, p WebhookPolicy) ([]DeliveryStatus, error) {
	out := make([]DeliveryStatus, len(jobs))
	byCode := map[int][]int{} // status code -> indexes of accepted jobs
	var errs []error
	for i, r := range results {
		if r.OK() {
			byCode[r.StatusCode] = append(byCode[r.StatusCode], i)
			continue
		}
		st, err := s.FinishWebhookDelivery(ctx, jobs[i], r, p)
		out[i] = st
		if err != nil {
			errs = append(errs, err)
		}
	}
	now := NewUTCTime(s.now())
	for code, idx := range byCode {
		keys := make([][]any, 0, len(idx))
		var tokens []string
		for _, i := range idx {
			keys = append(keys, []any{jobs[i].WebhookID, jobs[i].EventID})
			tokens = append(tokens, jobs[i].LeaseToken)
		}
		slicesSortCompact(&tokens)
		var done []struct {
			WebhookID string
			EventID   string
		}
		err := s.DB.WithContext(ctx).Raw(`UPDATE webhook_deliveries SET status = 'delivered', status_code = ?, error = '',
delivered_at = ?, next_attempt_at = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = ?
WHERE (webhook_id, event_id) IN ? AND status = 'sending' AND lease_token IN ?
RETURNING webhook_id, event_id`, code, now, now, keys, tokens).Scan(&done).Error
		if err != nil {
			errs = append(errs, fmt.Errorf("finish %d deliveries: %w", len(idx), err))
			continue
		}
		ok := make(map[[2]string]bool, len(done))
		for _, d := range done {
			ok[[2]string{d.WebhookID, d.EventID}] = true
		}
		for _, i := range idx {
			if ok[[2]string{jobs[i].WebhookID, jobs[i].EventID}] {
				out[i] = DeliveryDelivered
			} else {
				errs = append(errs, fmt.Errorf("finish delivery of %s to %s: %w", jobs[i].EventID, jobs[i].WebhookID, ErrLeaseLost))
			}
		}
	}
	return out, errors.Join(errs...)
}

func slicesSortCompact(xs *[]string) {
	sort.Strings(*xs)
	*xs = slices.Compact(*xs)
}

// WebhookCursor is what the dispatcher needs of a webhook to follow the
// feed for it.
type WebhookCursor struct {
	ID        string
	Types     string
	CursorPos int64
	// Open is whether the webhook had a pending or sending delivery when
	// the cursors were read: when none has, a pass need not look for due
	// or expired deliveries.
	Open bool
}

// WebhookCursors lists every webhook's feed cursor.
func (s *Store) WebhookCursors(ctx context.Context) ([]WebhookCursor, error) {
	var ws []WebhookCursor
	if err := s.DB.WithContext(ctx).Raw(`SELECT id, types, cursor_pos, EXISTS (SELECT 1 FROM webhook_deliveries d
	WHERE d.webhook_id = webhooks.id AND d.status IN ('pending', 'sending')) AS open FROM webhooks ORDER BY id`).Scan(&ws).Error; err != nil {
		return nil, fmt.Errorf("list webhook cursors: %w", err)
	}
	return ws, nil
}

// WebhookPage is a webhook's next page of the feed, leased for sending
// straight from the feed (the dispatcher's fast path): a delivery row is
// written only once the page was sent, in its final state, in the
// transaction that moves the webhook's cursor past the page. That is one row
// write per event instead of three (insert pending, claim, finish), and the
// event's payload comes with the feed page instead of a lookup per claim.
//
// Guarantees, as on the claim path: at least once (a dispatcher that dies
// before recording leaves the cursor where it was, and the page is sent
// again when the lease expires); each session in seq order (the feed tells a
// session's events in seq order; Held marks the events of sessions that
// still have an open delivery, which go to the claim path behind it, and
// the dispatcher sends a session's events one after the other, stopping at
// the first failure); restarts continue from the stored cursor.
type WebhookPage struct {
	WebhookID string
	// From and To are the cursor before and after the page.
	From, To int64
	Token    string
	Leased   UTCTime
	// Jobs are the page's matching events in feed order, ready to send
	// (Attempt 1). Held[i]: an earlier delivery of Jobs[i]'s session is
	// still pending or sending, so it must not be sent now.
	Jobs []DeliveryJob
	Held []bool
	// Full is true when the feed may have more for this webhook at once.
	Full bool
}

// LeaseWebhookPage reads the webhook's next page of the feed after its
// cursor and, if it moves the cursor, leases it for lease. It returns nil
// when there is nothing new, or when another dispatcher holds the webhook
// (or moved its cursor meanwhile).
func (s *Store) LeaseWebhookPage(ctx context.Context, w WebhookCursor, limit int, lease time.Duration) (*WebhookPage, error) {
	var types []EventType
	_ = json.Unmarshal([]byte(w.Types), &types)
	fp, err := s.ReadFeed(ctx, FeedQuery{After: EncodeFeedCursor(w.CursorPos), Types: types, Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("webhook %s: read feed: %w", w.ID, err)
	}
	next, _ := DecodeFeedCursor(fp.NextCursor)
	if next <= w.CursorPos {
		return nil, nil
	}
	now := s.now()
	page := &WebhookPage{WebhookID: w.ID, From: w.CursorPos, To: next, Token: NewID("wls"), Leased: NewUTCTime(now),
		Full: len(fp.Events) == limit}
	sessions := make([]string, 0, len(fp.Events))
	for _, e := range fp.Events {
		sessions = append(sessions, e.SessionID)
	}
	slicesSortCompact(&sessions)
	h, open, ok, err := s.leaseWebhook(ctx, w, page, now.Add(lease), sessions)
	if err != nil || !ok {
		return nil, err
	}
	if len(fp.Events) == 0 {
		return page, nil
	}
	held := make(map[string]bool, len(open))
	for _, id := range open {
		held[id] = true
	}
	secrets := h.signingSecrets(now)
	// A secret that does not decode leaves Signer nil: each attempt then
	// fails with the reason (web.Dispatcher.send).
	signer, _ := NewWebhookSigner(secrets)
	page.Jobs = make([]DeliveryJob, 0, len(fp.Events))
	page.Held = make([]bool, 0, len(fp.Events))
	for _, e := range fp.Events {
		// ReadFeed checked the payload (a row that is not JSON is told
		// as a string), so the body is built without a second look.
		body := appendWebhookBody(make([]byte, 0, 160+len(e.Payload)), WebhookBody{
			EventID: e.EventID, Type: e.Type, SessionID: e.SessionID, Seq: e.Seq,
			StateVersion: e.VersionAfter, CreatedAt: e.CreatedAt, Payload: e.Payload,
		}, true)
		page.Jobs = append(page.Jobs, DeliveryJob{
			WebhookID: w.ID, EventID: e.EventID, SessionID: e.SessionID, Seq: e.Seq, Attempt: 1,
			LeaseToken: page.Token, QueuedAt: page.Leased, URL: h.URL, Secrets: secrets, Signer: signer, Body: body,
			feedPos: e.Pos,
		})
		page.Held = append(page.Held, held[e.SessionID])
	}
	return page, nil
}

// leaseWebhook takes the lease of the webhook's page (a compare-and-set on
// its cursor, refused while another dispatcher's lease runs) and returns
// the webhook's URL and secrets, and which of sessions still have an open
// (pending or sending) delivery to it. ok is false when the lease was not
// taken. On PostgreSQL that is one statement.
func (s *Store) leaseWebhook(ctx context.Context, w WebhookCursor, page *WebhookPage, until time.Time, sessions []string) (h Webhook, open []string, ok bool, err error) {
	const lease = `UPDATE webhooks SET lease_token = ?, lease_expires_at = ?
WHERE id = ? AND cursor_pos = ? AND (lease_expires_at IS NULL OR lease_expires_at <= ?)
RETURNING url, secret, old_secret, old_secret_expires_at`
	args := []any{page.Token, NewUTCTime(until), w.ID, w.CursorPos, page.Leased}
	if s.pool != nil {
		// The sessions with an open delivery come back with the lease.
		const q = `UPDATE webhooks SET lease_token = $1, lease_expires_at = $2
WHERE id = $3 AND cursor_pos = $4 AND (lease_expires_at IS NULL OR lease_expires_at <= $5)
RETURNING ARRAY(SELECT DISTINCT session_id FROM webhook_deliveries
	WHERE webhook_id = webhooks.id AND status IN ('pending', 'sending') AND session_id = ANY($6::text[])),
	url, secret, old_secret, old_secret_expires_at`
		a := append(args, sessions)
		rows, err := s.pool.Query(ctx, q, a...)
		if err != nil {
			return h, nil, false, fmt.Errorf("webhook %s: lease page: %w", w.ID, err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := rows.Scan(&open, &h.URL, &h.Secret, &h.OldSecret, &h.OldSecretExpiresAt); err != nil {
				return h, nil, false, fmt.Errorf("webhook %s: lease page: %w", w.ID, err)
			}
			ok = true
		}
		if err := rows.Err(); err != nil {
			return h, nil, false, fmt.Errorf("webhook %s: lease page: %w", w.ID, err)
		}
		return h, open, ok, nil
	}
	var hooks []Webhook
	db := s.DB.WithContext(ctx)
	if err := db.Raw(lease, args...).Scan(&hooks).Error; err != nil {
		return h, nil, false, fmt.Errorf("webhook %s: lease page: %w", w.ID, err)
	}
	if len(hooks) != 1 {
		return h, nil, false, nil
	}
	if len(sessions) > 0 {
		if err := db.Raw(`SELECT DISTINCT session_id FROM webhook_deliveries
WHERE webhook_id = ? AND status IN ('pending', 'sending') AND session_id IN ?`, w.ID, sessions).Scan(&open).Error; err != nil {
			return h, nil, false, fmt.Errorf("webhook %s: open deliveries: %w", w.ID, err)
		}
	}
	return hooks[0], open, true, nil
}

// RecordWebhookPage records a leased page: for each job, its attempt's
// result if sent[i], else (held, or behind a failure of its session) a
// pending delivery due now, which the claim path sends in order. It moves
// the cursor past the page and releases the lease, in one transaction, and
// returns the status each delivery was left in. If the lease was lost (it
// expired and another dispatcher took the page), nothing is recorded and the
// error is ErrLeaseLost: the other dispatcher sends the page again.
func (s *Store) RecordWebhookPage(ctx context.Context, page *WebhookPage, sent []bool, results []DeliveryResult, p WebhookPolicy) ([]DeliveryStatus, error) {
	p = p.WithDefaults()
	now := s.now()
	nowT := NewUTCTime(now)
	out := make([]DeliveryStatus, len(page.Jobs))
	rows := make([]Delivery, len(page.Jobs))
	for i, j := range page.Jobs {
		d := Delivery{WebhookID: j.WebhookID, EventID: j.EventID, SessionID: j.SessionID, Seq: j.Seq, FeedPos: j.feedPos,
			QueuedAt: page.Leased, CreatedAt: nowT, UpdatedAt: nowT}
		r := results[i]
		switch {
		case !sent[i]:
			d.Status, d.NextAttemptAt = DeliveryPending, &nowT
		case r.OK():
			code := r.StatusCode
			d.Status, d.Attempt, d.StatusCode, d.DeliveredAt = DeliveryDelivered, 1, &code, &nowT
		default:
			d.Attempt = 1
			if r.StatusCode != 0 {
				code := r.StatusCode
				d.StatusCode = &code
			}
			d.Error = r.Err
			if d.Error == "" {
				d.Error = fmt.Sprintf("receiver answered %d", r.StatusCode)
			}
			if len(d.Error) > 1000 {
				d.Error = d.Error[:1000]
			}
			if now.Sub(page.Leased.Time) >= p.GiveUpAfter {
				d.Status = DeliveryFailed
			} else {
				next := NewUTCTime(now.Add(p.Backoff(1)))
				d.Status, d.NextAttemptAt = DeliveryPending, &next
			}
		}
		rows[i] = d
		out[i] = d.Status
	}
	var err error
	if s.pool != nil {
		err = s.retry(ctx, func() error { return s.recordPagePostgres(ctx, page, rows, nowT) })
	} else {
		err = s.recordPageSQLite(ctx, page, rows)
	}
	if err != nil {
		return nil, fmt.Errorf("webhook %s: record page after %d: %w", page.WebhookID, page.From, err)
	}
	return out, nil
}

// recordPageSQL moves the cursor past the page, releases the lease and
// inserts the page's delivery rows, in ONE statement: the rows travel as
// one array per column (unnest), so that neither the statement's text nor
// its parameter count grows with the page, and the insert happens only
// when the compare-and-set on the cursor did (a statement is atomic). The
// nullable columns travel as plain integers, 0 for NULL (no status code is
// 0; times as Unix microseconds), which pgx encodes without reflection.
const recordPageSQL = `WITH moved AS (
	UPDATE webhooks SET cursor_pos = $1, lease_token = NULL, lease_expires_at = NULL
	WHERE id = $2 AND cursor_pos = $3 AND lease_token = $4
	RETURNING id
), ins AS (
	INSERT INTO webhook_deliveries (webhook_id, event_id, session_id, seq, feed_pos, status, attempt,
		status_code, error, next_attempt_at, queued_at, delivered_at, created_at, updated_at)
	SELECT moved.id, r.event_id, r.session_id, r.seq, r.feed_pos, r.status, r.attempt,
		NULLIF(r.code, 0), r.error, timestamptz 'epoch' + NULLIF(r.next_us, 0) * interval '1 microsecond',
		$5::timestamptz, timestamptz 'epoch' + NULLIF(r.delivered_us, 0) * interval '1 microsecond',
		$6::timestamptz, $6::timestamptz
	FROM moved, unnest($7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::text[], $12::int[],
		$13::int[], $14::text[], $15::bigint[], $16::bigint[])
		AS r(event_id, session_id, seq, feed_pos, status, attempt, code, error, next_us, delivered_us)
	ON CONFLICT DO NOTHING
)
SELECT count(*) FROM moved`

func (s *Store) recordPagePostgres(ctx context.Context, page *WebhookPage, rows []Delivery, now UTCTime) error {
	n := len(rows)
	var (
		events, sessions, statuses, errs = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		seqs, poss, next, delivered      = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		attempts, codes                  = make([]int32, n), make([]int32, n)
	)
	for i, d := range rows {
		events[i], sessions[i], statuses[i], errs[i] = d.EventID, d.SessionID, string(d.Status), d.Error
		seqs[i], poss[i], attempts[i] = d.Seq, d.FeedPos, int32(d.Attempt)
		if d.StatusCode != nil {
			codes[i] = int32(*d.StatusCode)
		}
		if d.NextAttemptAt != nil {
			next[i] = d.NextAttemptAt.UnixMicro()
		}
		if d.DeliveredAt != nil {
			delivered[i] = d.DeliveredAt.UnixMicro()
		}
	}
	var moved int64
	if err := s.pool.QueryRow(ctx, recordPageSQL, page.To, page.WebhookID, page.From, page.Token, page.Leased, now,
		events, sessions, seqs, poss, statuses, attempts, codes, errs, next, delivered).Scan(&moved); err != nil {
		return err
	}
	if moved == 0 {
		return ErrLeaseLost
	}
	return nil
}

// recordPageSQLite is recordPagePostgres on SQLite, in a transaction.
func (s *Store) recordPageSQLite(ctx context.Context, page *WebhookPage, rows []Delivery) error {
	return s.Transact(ctx, func(tx *gorm.DB) error {
		res := tx.Exec(`UPDATE webhooks SET cursor_pos = ?, lease_token = NULL, lease_expires_at = NULL
WHERE id = ? AND cursor_pos = ? AND lease_token = ?`, page.To, page.WebhookID, page.From, page.Token)
		if res.Error != nil {
			return fmt.Errorf("move cursor: %w", res.Error)
		}
		if res.RowsAffected == 0 {
			return ErrLeaseLost
		}
		if len(rows) == 0 {
			return nil
		}
		// One multi-row INSERT per 200 rows, built here rather than by
		// GORM's reflection, which cost more CPU than the rest of the
		// recording.
		for len(rows) > 0 {
			n := min(len(rows), 200)
			var q strings.Builder
			q.WriteString(`INSERT INTO webhook_deliveries (webhook_id, event_id, session_id, seq, feed_pos, status, attempt,
status_code, error, next_attempt_at, queued_at, delivered_at, created_at, updated_at) VALUES `)
			args := make([]any, 0, 14*n)
			for i, d := range rows[:n] {
				if i > 0 {
					q.WriteString(", ")
				}
				q.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
				args = append(args, d.WebhookID, d.EventID, d.SessionID, d.Seq, d.FeedPos, d.Status, d.Attempt,
					d.StatusCode, d.Error, d.NextAttemptAt, d.QueuedAt, d.DeliveredAt, d.CreatedAt, d.UpdatedAt)
			}
			q.WriteString(" ON CONFLICT DO NOTHING")
			if err := tx.Exec(q.String(), args...).Error; err != nil {
				return fmt.Errorf("insert deliveries: %w", err)
			}
			rows = rows[n:]
		}
		return nil
	})
}
