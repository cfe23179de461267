// Package client is the Go SDK of TaskPilots Handoff for workers and
// controllers. It speaks the JSON API under /api/v1, as the server's OpenAPI
// document describes it (GET /api/v1/openapi.json, rendered at /api/docs),
// with a method for every operation and typed requests and answers. It
// decodes problem+json errors into typed errors and retries safely: network errors and 502/503/504 (and 429) answers are
// retried with backoff, always re-sending the same Idempotency-Key, so a
// retried write is applied at most once.
//
// A controller creates a session and delegates a step:
//
//	c := client.New("http://localhost:8080", os.Getenv("TASKPILOTS_TOKEN"))
//	s, err := c.CreateSession(ctx, client.CreateSessionInput{Goal: "Refund order 1182 if eligible"})
//	if err != nil {
//		return err
//	}
//	_, err = c.Delegate(ctx, s.SessionID, client.DelegateInput{
//		Queue: "refunds", Step: "check-eligibility", ExpectedVersion: s.StateVersion,
//	})
//
// A worker runs a Worker loop, which leases, heartbeats and reports results:
//
//	w := &client.Worker{Client: c, Queue: "refunds", Name: "w-1", Concurrency: 4,
//		Handler: func(ctx context.Context, l *client.Lease) (client.ResultInput, error) {
//			return client.ResultInput{ResultType: client.ResultCompleted,
//				Evidence: []client.Evidence{{Claim: "order paid", Source: "orders-db:1182"}}}, nil
//		}}
//	err := w.Run(ctx) // until ctx is cancelled, then finishes in-flight work
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client calls the TaskPilots Handoff API. It is safe for concurrent use.
type Client struct {
	base       string
	token      string
	http       *http.Client
	maxRetries int
	minBackoff time.Duration
	maxBackoff time.Duration
	timeout    time.Duration
	userAgent  string
	log        *slog.Logger
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client. Its Timeout should be zero or longer
// than the longest long poll (30 s); the Client bounds each attempt itself.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithRetries sets how many times a failed attempt is retried (default 4).
// Zero disables retries.
func WithRetries(n int) Option { return func(c *Client) { c.maxRetries = max(0, n) } }

// WithBackoff sets the first and the largest delay between retries (default
// 100 ms and 5 s); delays double per retry, with jitter.
func WithBackoff(first, largest time.Duration) Option {
	return func(c *Client) { c.minBackoff, c.maxBackoff = first, max(first, largest) }
}

// WithTimeout bounds each attempt of a request (default 30 s); a lease's
// long poll gets its wait on top.
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// WithLogger logs retries at debug level and given-up retries at warn.
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// New returns a client for the server at baseURL (e.g.
// "http://localhost:8080"; a trailing /api/v1 is accepted) using the bearer
// token.
func New(baseURL, token string, opts ...Option) *Client {
	base := strings.TrimRight(baseURL, "/")
	base = strings.TrimSuffix(base, "/api/v1")
	c := &Client{
		base: base, token: token, maxRetries: 4,
		minBackoff: 100 * time.Millisecond, maxBackoff: 5 * time.Second, timeout: 30 * time.Second,
		userAgent: "taskpilots-go-client/1", log: slog.New(discardHandler{}),
	}
	for _, o := range opts {
		o(c)
	}
	if c.http == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Workers run many concurrent calls to one host: keep their
		// connections instead of reopening them.
		t.MaxIdleConns = 256
		t.MaxIdleConnsPerHost = 256
		c.http = &http.Client{Transport: t}
	}
	return c
}

// BaseURL returns the server's base URL.
func (c *Client) BaseURL() string { return c.base }

// CallOption configures one call.
type CallOption func(*callOpts)

type callOpts struct {
	idemKey string
}

// WithIdempotencyKey sets the Idempotency-Key of a write. A repeat of the
// call with the same key and body returns the first answer and writes
// nothing. Without it each call gets a fresh random key, which its retries
// reuse.
func WithIdempotencyKey(key string) CallOption { return func(o *callOpts) { o.idemKey = key } }

// NewIdempotencyKey returns a random key suitable for WithIdempotencyKey.
func NewIdempotencyKey() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return "idk_" + base64.RawURLEncoding.EncodeToString(b)
}

// request describes one logical call.
type request struct {
	method string
	path   string
	query  url.Values
	body   any
	out    any
	noBody *bool // set to true on 204
	wait   time.Duration
}

// retryableStatus are the answers that mean "the request did not reach the
// application or it could not answer": safe to retry with the same key.
func retryableStatus(code int) bool {
	switch code {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusTooManyRequests:
		return true
	}
	return false
}

// do runs a call with retries. Writes carry the same Idempotency-Key on
// every attempt.
func (c *Client) do(ctx context.Context, r request, opts []CallOption) error {
	var o callOpts
	for _, f := range opts {
		f(&o)
	}
	var body []byte
	if r.body != nil {
		var err error
		if body, err = json.Marshal(r.body); err != nil {
			return fmt.Errorf("%s %s: encode request: %w", r.method, r.path, err)
		}
	}
	key := o.idemKey
	if key == "" && r.method != http.MethodGet {
		key = NewIdempotencyKey()
	}
	u := c.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	for attempt := 0; ; attempt++ {
		retry, after, err := c.attempt(ctx, r, u, body, key)
		if !retry || attempt >= c.maxRetries || ctx.Err() != nil {
			if retry && err != nil && attempt > 0 {
				c.log.Warn("giving up after retries", "method", r.method, "path", r.path, "attempts", attempt+1, "err", err)
			}
			return err
		}
		delay := c.backoff(attempt, after)
		c.log.Debug("retrying", "method", r.method, "path", r.path, "attempt", attempt+1, "delay", delay, "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// backoff is the delay before retry number attempt+1: exponential with
// jitter, or the server's Retry-After when it said one.
func (c *Client) backoff(attempt int, after time.Duration) time.Duration {
	d := c.minBackoff << min(attempt, 20)
	if d <= 0 || d > c.maxBackoff {
		d = c.maxBackoff
	}
	d = d/2 + time.Duration(mathrand.Int64N(int64(d/2)+1))
	if after > d {
		d = min(after, c.maxBackoff*4)
	}
	return d
}

// attempt sends one attempt. It reports whether the failure may be retried
// and the server's Retry-After.
func (c *Client) attempt(ctx context.Context, r request, u string, body []byte, key string) (retry bool, after time.Duration, err error) {
	timeout := c.timeout + r.wait
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(actx, r.method, u, rd)
	if err != nil {
		return false, 0, fmt.Errorf("%s %s: %w", r.method, r.path, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("User-Agent", c.userAgent)
	if tp, ts := Traceparent(ctx); tp != "" {
		req.Header.Set("traceparent", tp)
		if ts != "" {
			req.Header.Set("tracestate", ts)
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return false, 0, fmt.Errorf("%s %s: %w", r.method, r.path, ctx.Err())
		}
		return retryableNetErr(err), 0, fmt.Errorf("%s %s: %w", r.method, r.path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		if ctx.Err() != nil {
			return false, 0, fmt.Errorf("%s %s: %w", r.method, r.path, ctx.Err())
		}
		return retryableNetErr(err), 0, fmt.Errorf("%s %s: read answer: %w", r.method, r.path, err)
	}
	switch {
	case resp.StatusCode == http.StatusNoContent:
		if r.noBody != nil {
			*r.noBody = true
		}
		return false, 0, nil
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		if r.out == nil {
			return false, 0, nil
		}
		if err := json.Unmarshal(data, r.out); err != nil {
			return false, 0, fmt.Errorf("%s %s: decode answer: %w", r.method, r.path, err)
		}
		return false, 0, nil
	}
	perr := decodeProblem(r.method, r.path, resp.StatusCode, data)
	if retryableStatus(resp.StatusCode) {
		return true, retryAfter(resp.Header.Get("Retry-After")), perr
	}
	return false, 0, perr
}

// retryableNetErr tells transport failures worth retrying from mistakes
// that will fail again (a malformed URL, say).
func retryableNetErr(err error) bool {
	var ue *url.Error
	if errors.As(err, &ue) {
		var ne net.Error
		if errors.As(ue.Err, &ne) {
			return true
		}
		var oe *net.OpError
		if errors.As(ue.Err, &oe) {
			return true
		}
		if errors.Is(ue.Err, io.EOF) || errors.Is(ue.Err, io.ErrUnexpectedEOF) || errors.Is(ue.Err, context.DeadlineExceeded) {
			return true
		}
		return !strings.Contains(ue.Err.Error(), "unsupported protocol scheme")
	}
	return true
}

func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return time.Until(t)
	}
	return 0
}

func esc(s string) string { return url.PathEscape(s) }

// CreateSession starts a session (controller). It answers at version 1,
// status open.
func (c *Client) CreateSession(ctx context.Context, in CreateSessionInput, opts ...CallOption) (Outcome, error) {
	var out Outcome
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/sessions", body: in, out: &out}, opts)
	return out, err
}

// GetSession returns a session with its latest valid state.
func (c *Client) GetSession(ctx context.Context, id string) (Session, error) {
	var out Session
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/sessions/" + esc(id), out: &out}, nil)
	return out, err
}

// Events returns up to limit events of a session with seq > afterSeq (limit
// 0 leaves the server's default). Continue from page.NextAfterSeq.
func (c *Client) Events(ctx context.Context, id string, afterSeq int64, limit int) (EventsPage, error) {
	q := url.Values{}
	q.Set("after_seq", strconv.FormatInt(afterSeq, 10))
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out EventsPage
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/sessions/" + esc(id) + "/events", query: q, out: &out}, nil)
	return out, err
}

// AllEvents pages through every event of a session.
func (c *Client) AllEvents(ctx context.Context, id string) ([]Event, error) {
	var all []Event
	after := int64(0)
	for {
		p, err := c.Events(ctx, id, after, 1000)
		if err != nil {
			return all, err
		}
		all = append(all, p.Events...)
		if len(p.Events) == 0 || p.NextAfterSeq <= after {
			return all, nil
		}
		after = p.NextAfterSeq
	}
}

// StateAt returns the session's state as it was at version v, rebuilt by
// replay on the server, as raw JSON.
func (c *Client) StateAt(ctx context.Context, id string, v int64) (json.RawMessage, error) {
	q := url.Values{}
	q.Set("version", strconv.FormatInt(v, 10))
	var out json.RawMessage
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/sessions/" + esc(id) + "/state", query: q, out: &out}, nil)
	return out, err
}

// Packet returns the session's current context packet.
func (c *Client) Packet(ctx context.Context, id string) (Packet, error) {
	var out Packet
	err := c.do(ctx, request{method: http.MethodGet, path: "/api/v1/sessions/" + esc(id) + "/packet", out: &out}, nil)
	return out, err
}

func (c *Client) transition(ctx context.Context, id, verb string, in TransitionInput, opts []CallOption) (Outcome, error) {
	var out Outcome
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/sessions/" + esc(id) + "/" + verb, body: in, out: &out}, opts)
	return out, err
}

// Pause pauses a session (controller); its delegation is held and any lease
// revoked.
func (c *Client) Pause(ctx context.Context, id string, in TransitionInput, opts ...CallOption) (Outcome, error) {
	return c.transition(ctx, id, "pause", in, opts)
}

// Snooze pauses a session until a time (controller): it resumes by itself
// then. in.Until is set from until.
func (c *Client) Snooze(ctx context.Context, id string, until time.Time, in TransitionInput, opts ...CallOption) (Outcome, error) {
	in.Until = until.UTC().Format(time.RFC3339Nano)
	return c.transition(ctx, id, "pause", in, opts)
}

// Resume resumes a paused session (controller).
func (c *Client) Resume(ctx context.Context, id string, in TransitionInput, opts ...CallOption) (Outcome, error) {
	return c.transition(ctx, id, "resume", in, opts)
}

// Escalate hands a session to humans (controller).
func (c *Client) Escalate(ctx context.Context, id string, in TransitionInput, opts ...CallOption) (Outcome, error) {
	return c.transition(ctx, id, "escalate", in, opts)
}

// Cancel cancels a session (controller).
func (c *Client) Cancel(ctx context.Context, id string, in TransitionInput, opts ...CallOption) (Outcome, error) {
	return c.transition(ctx, id, "cancel", in, opts)
}

// Delegate queues a step of a session (controller).
func (c *Client) Delegate(ctx context.Context, sessionID string, in DelegateInput, opts ...CallOption) (Delegation, error) {
	var out Delegation
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/sessions/" + esc(sessionID) + "/delegations", body: in, out: &out}, opts)
	return out, err
}

// SpawnChildren fans a session out into child sessions (controller).
func (c *Client) SpawnChildren(ctx context.Context, sessionID string, in SpawnChildrenInput, opts ...CallOption) (Children, error) {
	var out Children
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/sessions/" + esc(sessionID) + "/children", body: in, out: &out}, opts)
	return out, err
}

// Lease asks queue for work (worker), waiting up to in.WaitSeconds for some.
// It returns (nil, nil) when nothing became available in time.
func (c *Client) Lease(ctx context.Context, queue string, in LeaseInput, opts ...CallOption) (*Lease, error) {
	var (
		out  Lease
		none bool
	)
	err := c.do(ctx, request{
		method: http.MethodPost, path: "/api/v1/queues/" + esc(queue) + "/lease", body: in, out: &out,
		noBody: &none, wait: time.Duration(in.WaitSeconds) * time.Second,
	}, opts)
	if err != nil || none {
		return nil, err
	}
	if out.Queue == "" {
		out.Queue = queue
	}
	return &out, nil
}

// LeaseBatch leases up to max (1 to 100) delegations of queue in one claim,
// long-polling up to in.WaitSeconds for the first; it returns none (nil,
// nil) when nothing came. Each lease is one of its own, as Lease returns
// it: its own token, expiry, heartbeats and result.
func (c *Client) LeaseBatch(ctx context.Context, queue string, in LeaseInput, max int, opts ...CallOption) ([]Lease, error) {
	var (
		out struct {
			Leases []Lease `json:"leases"`
		}
		none bool
	)
	body := struct {
		LeaseInput
		Max int `json:"max"`
	}{in, max}
	err := c.do(ctx, request{
		method: http.MethodPost, path: "/api/v1/queues/" + esc(queue) + "/lease", body: body, out: &out,
		noBody: &none, wait: time.Duration(in.WaitSeconds) * time.Second,
	}, opts)
	if err != nil || none {
		return nil, err
	}
	for i := range out.Leases {
		if out.Leases[i].Queue == "" {
			out.Leases[i].Queue = queue
		}
	}
	return out.Leases, nil
}

// Heartbeat extends a held lease and returns its new expiry. A
// *ConflictError means the lease is no longer held: stop working on it.
func (c *Client) Heartbeat(ctx context.Context, delegationID, leaseToken string, opts ...CallOption) (time.Time, error) {
	var out struct {
		LeaseExpiresAt time.Time `json:"lease_expires_at"`
	}
	err := c.do(ctx, request{
		method: http.MethodPost, path: "/api/v1/delegations/" + esc(delegationID) + "/heartbeat",
		body: map[string]string{"lease_token": leaseToken}, out: &out,
	}, opts)
	return out.LeaseExpiresAt, err
}

// Result sends the return contract of a delegation (worker). A
// *ConflictError means the lease expired or was superseded; a
// *ValidationError lists every contract violation (the lease stays usable).
func (c *Client) Result(ctx context.Context, delegationID string, in ResultInput, opts ...CallOption) (Outcome, error) {
	var out Outcome
	err := c.do(ctx, request{method: http.MethodPost, path: "/api/v1/delegations/" + esc(delegationID) + "/result", body: in, out: &out}, opts)
	return out, err
}

// ResultItem is one result of a batch (SubmitResults): the delegation it
// answers, its idempotency key (a new one when empty, so that a retried
// batch replays what committed) and the return contract.
type ResultItem struct {
	DelegationID   string `json:"delegation_id"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	ResultInput
}

// ResultEntry is what one result of a batch came to: the answer the single
// Result call would have had, its HTTP status and either its Outcome or its
// error (a *ConflictError, a *ValidationError, a *Problem).
type ResultEntry struct {
	Status   int
	Outcome  Outcome
	Replayed bool
	Err      error
}

// SubmitResults sends up to 100 results in one call (worker). Each is
// judged and applied on its own, as Result would (a fenced or invalid one
// fails alone and writes nothing), and all are written in one transaction
// on the server. The entries are in the order of items; the error is for
// the call as a whole (a *ValidationError naming results for too many).
func (c *Client) SubmitResults(ctx context.Context, items []ResultItem, opts ...CallOption) ([]ResultEntry, error) {
	body := struct {
		Results []ResultItem `json:"results"`
	}{Results: make([]ResultItem, len(items))}
	for i, it := range items {
		if it.IdempotencyKey == "" {
			it.IdempotencyKey = NewIdempotencyKey()
		}
		body.Results[i] = it
	}
	var out struct {
		Results []struct {
			Status   int             `json:"status"`
			Outcome  *Outcome        `json:"outcome"`
			Replayed bool            `json:"replayed"`
			Problem  json.RawMessage `json:"problem"`
		} `json:"results"`
	}
	const path = "/api/v1/results"
	if err := c.do(ctx, request{method: http.MethodPost, path: path, body: body, out: &out}, opts); err != nil {
		return nil, err
	}
	entries := make([]ResultEntry, len(out.Results))
	for i, r := range out.Results {
		entries[i] = ResultEntry{Status: r.Status, Replayed: r.Replayed}
		switch {
		case r.Outcome != nil && r.Status < 300:
			entries[i].Outcome = *r.Outcome
		default:
			entries[i].Err = decodeProblem(http.MethodPost, path, r.Status, r.Problem)
		}
	}
	return entries, nil
}
