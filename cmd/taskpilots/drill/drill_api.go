package drill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
)

// drillAPI is how the simulated controllers and workers reach the server:
// the Go SDK, one client per server and token, wrapped in a retry loop that
// rides through server kills and database restarts. A failed attempt is
// retried, on the next server, with the same Idempotency-Key, so a write
// whose answer was lost is answered from its first outcome and never
// applied twice.
type drillAPI struct {
	mu    sync.RWMutex
	eps   []endpoint
	ctrlT string
	workT string
	// giveUp is how long one call keeps retrying.
	giveUp  time.Duration
	retries sync.Map // kind → *atomic.Int64
	keys    atomic.Int64
	prefix  string
	next    atomic.Int64
}

// endpoint is one server with a client per token.
type endpoint struct {
	base       string
	ctrl, work *client.Client
}

func newDrillAPI(bases []string, ctrlToken, workToken, keyPrefix string) *drillAPI {
	a := &drillAPI{ctrlT: ctrlToken, workT: workToken, giveUp: 90 * time.Second, prefix: keyPrefix}
	for _, b := range bases {
		a.eps = append(a.eps, a.endpoint(b))
	}
	return a
}

func (a *drillAPI) endpoint(base string) endpoint {
	// Retries are ours (across servers); each attempt is bounded.
	opts := []client.Option{client.WithRetries(0), client.WithTimeout(15 * time.Second), client.WithUserAgent("taskpilots-drill")}
	return endpoint{base: base, ctrl: client.New(base, a.ctrlT, opts...), work: client.New(base, a.workT, opts...)}
}

// ep returns server i (modulo the number of servers).
func (a *drillAPI) ep(i int) endpoint {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.eps[i%len(a.eps)]
}

func (a *drillAPI) servers() int {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return len(a.eps)
}

// setBase moves server i to a new address (a restart that could not get
// its old port back).
func (a *drillAPI) setBase(i int, base string) {
	e := a.endpoint(base)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.eps[i] = e
}

// key returns a fresh idempotency key for one logical write.
func (a *drillAPI) key() string {
	return fmt.Sprintf("%s-%d", a.prefix, a.keys.Add(1))
}

func (a *drillAPI) countRetry(kind string) {
	v, _ := a.retries.LoadOrStore(kind, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// retryCounts returns the retries by cause.
func (a *drillAPI) retryCounts() map[string]int64 {
	out := map[string]int64{}
	a.retries.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

// transientKind tells whether err is worth retrying (the server or the
// network failed, not the request) and names the cause.
func transientKind(ctx context.Context, err error) (string, bool) {
	if err == nil || ctx.Err() != nil {
		return "", false
	}
	if s := client.StatusCode(err); s != 0 {
		if s >= 500 || s == http.StatusTooManyRequests {
			return strconv.Itoa(s), true
		}
		return "", false
	}
	var (
		ue *url.Error
		ne net.Error
	)
	switch {
	case errors.As(err, &ue), errors.As(err, &ne),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return "network", true
	}
	return "", false
}

// retry runs fn against the servers in turn until it succeeds, fails for a
// reason retrying cannot fix, or a.giveUp passes.
func retry(ctx context.Context, a *drillAPI, op string, fn func(i int) error) error {
	start := int(a.next.Add(1))
	deadline := time.Now().Add(a.giveUp)
	delay := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := fn((start + attempt) % a.servers())
		kind, ok := transientKind(ctx, err)
		if !ok {
			return err
		}
		a.countRetry(kind)
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: still failing after %s: %w", op, a.giveUp, err)
		}
		d := delay/2 + rand.N(delay/2+1)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(d):
		}
		delay = min(2*delay, time.Second)
	}
}

func (a *drillAPI) createSession(ctx context.Context, in client.CreateSessionInput) (client.Outcome, error) {
	key := a.key()
	var out client.Outcome
	err := retry(ctx, a, "create session", func(i int) (err error) {
		out, err = a.ep(i).ctrl.CreateSession(ctx, in, client.WithIdempotencyKey(key))
		return err
	})
	return out, err
}

func (a *drillAPI) delegate(ctx context.Context, id string, in client.DelegateInput) (client.Delegation, error) {
	key := a.key()
	var out client.Delegation
	err := retry(ctx, a, "delegate", func(i int) (err error) {
		out, err = a.ep(i).ctrl.Delegate(ctx, id, in, client.WithIdempotencyKey(key))
		return err
	})
	return out, err
}

// transition is pause, resume, escalate or cancel with its own key.
func (a *drillAPI) transition(ctx context.Context, verb, id string, in client.TransitionInput) (client.Outcome, error) {
	key := a.key()
	var out client.Outcome
	err := retry(ctx, a, verb, func(i int) (err error) {
		c := a.ep(i).ctrl
		switch verb {
		case "pause":
			out, err = c.Pause(ctx, id, in, client.WithIdempotencyKey(key))
		case "resume":
			out, err = c.Resume(ctx, id, in, client.WithIdempotencyKey(key))
		default:
			return fmt.Errorf("drill: unknown transition %q", verb)
		}
		return err
	})
	return out, err
}

func (a *drillAPI) session(ctx context.Context, id string) (client.Session, error) {
	var out client.Session
	err := retry(ctx, a, "get session", func(i int) (err error) {
		out, err = a.ep(i).ctrl.GetSession(ctx, id)
		return err
	})
	return out, err
}

func (a *drillAPI) events(ctx context.Context, id string) ([]client.Event, error) {
	var out []client.Event
	err := retry(ctx, a, "list events", func(i int) (err error) {
		out, err = a.ep(i).ctrl.AllEvents(ctx, id)
		return err
	})
	return out, err
}

// lease long-polls the queue once. Its key makes a retried claim whose
// answer was lost return the same lease instead of leaking it.
func (a *drillAPI) lease(ctx context.Context, queue, worker string, wait int) (*client.Lease, error) {
	key := a.key()
	var out *client.Lease
	err := retry(ctx, a, "lease", func(i int) (err error) {
		out, err = a.ep(i).work.Lease(ctx, queue, client.LeaseInput{Worker: worker, WaitSeconds: wait}, client.WithIdempotencyKey(key))
		return err
	})
	return out, err
}

// result sends a return contract with the given key (the duplicate fault
// sends the same key twice on purpose).
func (a *drillAPI) result(ctx context.Context, delegationID, key string, in client.ResultInput) (client.Outcome, error) {
	var out client.Outcome
	err := retry(ctx, a, "result", func(i int) (err error) {
		out, err = a.ep(i).work.Result(ctx, delegationID, in, client.WithIdempotencyKey(key))
		return err
	})
	return out, err
}

// metrics reads GET /api/v1/metrics for the queue over the last 24 hours
// (the smallest window the API offers).
func (a *drillAPI) metrics(ctx context.Context, queue string) (drillMetrics, error) {
	var body struct {
		From    time.Time                   `json:"from"`
		To      time.Time                   `json:"to"`
		Overall models.MetricSet            `json:"overall"`
		Queues  map[string]models.MetricSet `json:"queues"`
	}
	err := retry(ctx, a, "metrics", func(i int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.ep(i).base+"/api/v1/metrics?window=24h&queue="+url.QueryEscape(queue), nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+a.ctrlT)
		req.Header.Set("Accept", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return &client.Problem{Method: http.MethodGet, Path: "/api/v1/metrics", Status: resp.StatusCode, Detail: snippetOf(b)}
		}
		return json.Unmarshal(b, &body)
	})
	if err != nil {
		return drillMetrics{}, err
	}
	q := body.Queues[queue]
	return drillMetrics{Source: "api (24h window, queue " + queue + ")", From: body.From, To: body.To,
		HandoffSuccess: q.HandoffSuccess, Rework: q.Rework, InfraRetries: q.InfraRetries, Recovery: q.Recovery,
		StateConflicts: q.StateConflicts}, nil
}

func snippetOf(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// Outcomes of a human's action, whichever way it was sent.
const (
	humanOK        = "ok"
	humanConflict  = "409"
	humanInvalid   = "422"
	humanForbidden = "403"
)

// human is a simulated support agent acting on escalations: through the
// console's forms (preferred) or, when the console is unavailable, through
// the same models takeover functions the console calls.
type human interface {
	// kind is "console" or "direct".
	kind() string
	// version returns the session's state version as the human sees it.
	version(ctx context.Context, id string) (int64, error)
	// act submits one takeover action based on version, with the given
	// idempotency key, and says how it was answered.
	act(ctx context.Context, id string, a models.TakeoverAction, version int64, key string, fields map[string]string) (string, error)
}

// consoleHuman drives the console over HTTP like a browser: it logs in with
// the login form, reads the session page for the state version and the
// CSRF token, and posts the takeover forms with `_csrf`, `state_version`
// and `idempotency_key`. One cookie jar serves every server of the drill
// (cookies ignore ports and the servers share their session key).
type consoleHuman struct {
	email, password string
	http            *http.Client
	api             *drillAPI // for retry counting and server rotation

	mu   sync.Mutex
	csrf string
}

var (
	csrfMeta    = regexp.MustCompile(`name="csrf-token" content="([^"]*)"`)
	versionAttr = regexp.MustCompile(`name="state_version" value="(\d+)"`)
)

func newConsoleHuman(email, password string, api *drillAPI) (*consoleHuman, error) {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, err
	}
	return &consoleHuman{
		email: email, password: password, api: api,
		http: &http.Client{Jar: jar, Timeout: 15 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
	}, nil
}

func (h *consoleHuman) kind() string { return "console" }

// send does one request and returns the status, the Location and the body.
func (h *consoleHuman) send(ctx context.Context, method, u string, form url.Values) (int, string, string, error) {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return 0, "", "", err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("User-Agent", "taskpilots-drill")
	resp, err := h.http.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return 0, "", "", err
	}
	return resp.StatusCode, resp.Header.Get("Location"), string(b), nil
}

// serverError makes a 5xx answer retryable through transientKind.
func serverError(method, path string, status int, body string) error {
	return &client.Problem{Method: method, Path: path, Status: status, Detail: snippetOf([]byte(body))}
}

// login logs in through the login form.
func (h *consoleHuman) login(ctx context.Context) error {
	return retry(ctx, h.api, "console login", func(i int) error {
		base := h.api.ep(i).base
		st, _, body, err := h.send(ctx, http.MethodGet, base+"/login", nil)
		if err != nil {
			return err
		}
		if st >= 500 {
			return serverError("GET", "/login", st, body)
		}
		m := csrfMeta.FindStringSubmatch(body)
		if st != http.StatusOK || m == nil {
			return fmt.Errorf("GET /login: status %d without a CSRF token", st)
		}
		form := url.Values{"email": {h.email}, "password": {h.password}, "_csrf": {m[1]}}
		st, loc, body, err := h.send(ctx, http.MethodPost, base+"/login", form)
		if err != nil {
			return err
		}
		switch {
		case st >= 500:
			return serverError("POST", "/login", st, body)
		case st != http.StatusSeeOther || strings.HasPrefix(loc, "/login"):
			return fmt.Errorf("log in to the console as %s: status %d (wrong email or password, or not allowed)", h.email, st)
		}
		h.mu.Lock()
		h.csrf = m[1]
		h.mu.Unlock()
		return nil
	})
}

// page reads the session page and returns the version its forms carry.
func (h *consoleHuman) version(ctx context.Context, id string) (int64, error) {
	var v int64
	relogged := false
	err := retry(ctx, h.api, "console session page", func(i int) error {
		path := "/console/sessions/" + url.PathEscape(id)
		st, loc, body, err := h.send(ctx, http.MethodGet, h.api.ep(i).base+path, nil)
		if err != nil {
			return err
		}
		switch {
		case st >= 500:
			return serverError("GET", path, st, body)
		case (st == http.StatusSeeOther || st == http.StatusFound) && strings.HasPrefix(loc, "/login") && !relogged:
			relogged = true
			if err := h.login(ctx); err != nil {
				return err
			}
			return serverError("GET", path, http.StatusServiceUnavailable, "logged in again")
		case st != http.StatusOK:
			return fmt.Errorf("GET %s: status %d", path, st)
		}
		m := versionAttr.FindStringSubmatch(body)
		if m == nil {
			return fmt.Errorf("GET %s: the page offers no takeover form to this user", path)
		}
		v, _ = strconv.ParseInt(m[1], 10, 64)
		if c := csrfMeta.FindStringSubmatch(body); c != nil {
			h.mu.Lock()
			h.csrf = c[1]
			h.mu.Unlock()
		}
		return nil
	})
	return v, err
}

func (h *consoleHuman) act(ctx context.Context, id string, a models.TakeoverAction, version int64, key string, fields map[string]string) (string, error) {
	path := "/console/sessions/" + url.PathEscape(id) + "/" + string(a)
	var outcome string
	relogged := false
	err := retry(ctx, h.api, "console "+string(a), func(i int) error {
		h.mu.Lock()
		token := h.csrf
		h.mu.Unlock()
		form := url.Values{"_csrf": {token}, "state_version": {strconv.FormatInt(version, 10)}, "idempotency_key": {key}}
		for k, v := range fields {
			form.Set(k, v)
		}
		st, loc, body, err := h.send(ctx, http.MethodPost, h.api.ep(i).base+path, form)
		if err != nil {
			return err
		}
		switch {
		case st >= 500:
			return serverError("POST", path, st, body)
		case (st == http.StatusSeeOther || st == http.StatusFound) && strings.HasPrefix(loc, "/login"):
			if relogged {
				return fmt.Errorf("POST %s: logged out again after logging in", path)
			}
			relogged = true
			if err := h.login(ctx); err != nil {
				return err
			}
			return serverError("POST", path, http.StatusServiceUnavailable, "logged in again")
		case st == http.StatusSeeOther:
			outcome = humanOK
		case st == http.StatusConflict:
			outcome = humanConflict
		case st == http.StatusUnprocessableEntity:
			outcome = humanInvalid
		case st == http.StatusForbidden:
			outcome = humanForbidden
		default:
			return fmt.Errorf("POST %s: unexpected status %d", path, st)
		}
		return nil
	})
	return outcome, err
}

// directHuman takes over through the models functions the console calls,
// for deployments whose console the drill cannot log in to.
type directHuman struct {
	store func() *models.Store
	user  models.User
	api   *drillAPI
}

func (h *directHuman) kind() string { return "direct" }

func (h *directHuman) version(ctx context.Context, id string) (int64, error) {
	var v int64
	err := retryDB(ctx, h.api, func() error {
		row, err := h.store().GetSession(ctx, id)
		v = row.StateVersion
		return err
	})
	return v, err
}

func (h *directHuman) act(ctx context.Context, id string, a models.TakeoverAction, version int64, key string, f map[string]string) (string, error) {
	ev := &version
	var err error
	err = retryDB(ctx, h.api, func() error {
		s, u := h.store(), h.user
		switch a {
		case models.ActClaim:
			_, err = s.ClaimEscalation(ctx, id, u, key, models.ClaimInput{ExpectedVersion: ev})
		case models.ActRelease:
			_, err = s.Release(ctx, id, u, key, models.ReleaseInput{ExpectedVersion: ev, Reason: f["reason"]})
		case models.ActHandBack:
			_, err = s.HandBack(ctx, id, u, key, models.HandBackInput{ExpectedVersion: ev, Queue: f["queue"]})
		case models.ActComplete:
			_, err = s.CompleteHuman(ctx, id, u, key, models.CompleteInput{ExpectedVersion: ev, Resolution: f["resolution"]})
		default:
			return fmt.Errorf("drill: direct human cannot %s", a)
		}
		return err
	})
	switch models.ErrorCode(err) {
	case "":
		return humanOK, nil
	case models.ECONFLICT:
		return humanConflict, nil
	case models.EINVALID, models.EILLEGAL:
		return humanInvalid, nil
	case models.EFORBIDDEN:
		return humanForbidden, nil
	}
	return "", err
}

// retryDB retries fn while the database is unreachable (a restart), for the
// drill's own database reads and the direct human.
func retryDB(ctx context.Context, a *drillAPI, fn func() error) error {
	deadline := time.Now().Add(a.giveUp)
	delay := 100 * time.Millisecond
	for {
		err := fn()
		if err == nil || models.ErrorCode(err) != models.EINTERNAL || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		a.countRetry("database")
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}
