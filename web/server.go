// Package web assembles the server: configuration, Echo, middleware, routes
// and background loops.
package web

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/sessions"
	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/models"
)

// Config configures the server. The zero value works: every unset field
// gets the default documented on it.
type Config struct {
	// Addr is the listen address (host:port) of Serve; default 127.0.0.1:8080.
	Addr string
	// BodyLimit caps request bodies in bytes; default 1 MiB. Larger: 413.
	BodyLimit int64
	// SessionKey signs and encrypts the login cookie (TASKPILOTS_SESSION_KEY).
	// Empty means a random key per process: logins do not survive a restart,
	// and several replicas would not accept each other's cookies.
	SessionKey string
	// TrustProxy honours X-Forwarded-Proto (Secure cookies) and
	// X-Forwarded-For (client address for throttling and logs) from a
	// reverse proxy in a private network. Leave off when clients connect
	// directly, or they could forge both.
	TrustProxy bool
	// MaintainEvery is the longest the maintenance loop (lease rescue,
	// timers) sleeps: it runs a pass when its earliest timer is due or a
	// write here creates an earlier one, and otherwise after this long, to
	// find timers other replicas created; default 30s.
	MaintainEvery time.Duration
	// IndexUpkeepEvery is how often the server checks the indexes of
	// sessions for bloat and rebuilds the bloated ones (PostgreSQL;
	// models.UpkeepIndexes); default models.DefaultIndexUpkeepEvery,
	// negative: never.
	IndexUpkeepEvery time.Duration
	// LeaseWaitMax is the longest a lease long poll may wait; the write
	// timeout leaves room for it. Default models.MaxWaitSeconds.
	LeaseWaitMax time.Duration
	// ShutdownTimeout bounds the graceful shutdown; default 15s.
	ShutdownTimeout time.Duration
	// LoginFailuresPerAccount and LoginFailuresPerAddress are the failed
	// logins free of delay per account from one address and per address;
	// defaults 5 and 20 (an office behind one address has several people).
	// Beyond them each failure doubles the wait (from 1s, up to
	// LoginWindow), and login answers 429 while it runs. A key quiet for
	// LoginWindow (default 15 min) after its wait is forgotten. The counts
	// live in the database: every replica sees them (models.ThrottlePolicy).
	LoginFailuresPerAccount int
	LoginFailuresPerAddress int
	LoginWindow             time.Duration
	// LoginIdleTimeout ends a browser login unused this long (default 8h);
	// LoginLifetime ends it this long after sign-in (default 7 days).
	LoginIdleTimeout time.Duration
	LoginLifetime    time.Duration
	// Logger receives the server's logs; default slog.Default().
	Logger *slog.Logger
	// Reviews configures the review queue: the share of items scored twice
	// (default 10%) and how long a claim for review lasts (default 30 min).
	Reviews models.ReviewPolicy
	// WebhookEvery is the period of the webhook dispatcher's passes;
	// default 1s. Webhooks sets delivery timeouts and retries.
	WebhookEvery time.Duration
	Webhooks     models.WebhookPolicy
	// CheckpointKey signs the checkpoints over the whole log; nil turns
	// them off (verify then checks only each session's own chain).
	CheckpointKey *models.CheckpointKey
	// CheckpointEvery is how often the maintenance pass signs a checkpoint
	// when anything changed; default 10 min, negative: on demand only.
	CheckpointEvery time.Duration

	// checkpointer is shared by the maintenance loop and the routes, so
	// that one process builds one checkpoint at a time.
	checkpointer *models.Checkpointer
}

// Defaults.
const (
	DefaultAddr            = "127.0.0.1:8080"
	DefaultBodyLimit       = 1 << 20
	DefaultMaintainEvery   = models.DefaultMaintainMaxSleep
	DefaultShutdownTimeout = 15 * time.Second
	DefaultLoginWindow     = models.DefaultLoginWindow
	DefaultLoginIdle       = models.DefaultLoginIdleTimeout
	DefaultLoginLifetime   = models.DefaultLoginLifetime
	DefaultCheckpointEvery = 10 * time.Minute
)

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.BodyLimit <= 0 {
		c.BodyLimit = DefaultBodyLimit
	}
	if c.MaintainEvery <= 0 {
		c.MaintainEvery = DefaultMaintainEvery
	}
	if c.IndexUpkeepEvery == 0 {
		c.IndexUpkeepEvery = models.DefaultIndexUpkeepEvery
	}
	if c.LeaseWaitMax <= 0 {
		c.LeaseWaitMax = models.MaxWaitSeconds * time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.LoginFailuresPerAccount <= 0 {
		c.LoginFailuresPerAccount = 5
	}
	if c.LoginFailuresPerAddress <= 0 {
		c.LoginFailuresPerAddress = 20
	}
	if c.LoginWindow <= 0 {
		c.LoginWindow = DefaultLoginWindow
	}
	if c.LoginIdleTimeout <= 0 {
		c.LoginIdleTimeout = DefaultLoginIdle
	}
	if c.LoginLifetime <= 0 {
		c.LoginLifetime = DefaultLoginLifetime
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.WebhookEvery <= 0 {
		c.WebhookEvery = time.Second
	}
	if c.CheckpointEvery == 0 {
		c.CheckpointEvery = DefaultCheckpointEvery
	}
	return c
}

// withCheckpointer gives c its checkpointer unless it has one.
func (c Config) withCheckpointer(s *models.Store) Config {
	if c.checkpointer == nil {
		c.checkpointer = &models.Checkpointer{Store: s, Key: c.CheckpointKey, Every: max(c.CheckpointEvery, 0)}
	}
	return c
}

// NewServer returns the HTTP handler of the whole product.
func NewServer(s *models.Store, cfg Config) (http.Handler, error) {
	e, err := newEcho(s, cfg.withDefaults().withCheckpointer(s))
	if err != nil {
		return nil, err
	}
	return e, nil
}

// newEcho builds the Echo instance; tests use it to add routes of their own.
func newEcho(s *models.Store, cfg Config) (*echo.Echo, error) {
	log := cfg.Logger
	// The write path queues decided escalations for review with the
	// server's policy (models.Store.Reviews), and the maintenance pass
	// catches up with it.
	s.Reviews = cfg.Reviews
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = handlers.ErrorHandler(log)
	if cfg.TrustProxy {
		// Trusts X-Forwarded-For hops from loopback and private networks.
		e.IPExtractor = echo.ExtractIPFromXFFHeader()
	} else {
		e.IPExtractor = echo.ExtractIPDirect()
	}

	logins := models.LoginPolicy{IdleTimeout: cfg.LoginIdleTimeout, Lifetime: cfg.LoginLifetime}.WithDefaults()
	cookies, err := newCookieStore(cfg.SessionKey, logins.Lifetime, log)
	if err != nil {
		return nil, err
	}
	secure := func(r *http.Request) bool { return isHTTPS(r, cfg.TrustProxy) }
	auth := &handlers.Auth{
		Store:   s,
		Cookies: cookies,
		Logins:  logins,
		Throttle: models.ThrottlePolicy{FreePerPair: cfg.LoginFailuresPerAccount,
			FreePerAddress: cfg.LoginFailuresPerAddress, Window: cfg.LoginWindow}.WithDefaults(),
		Secure: secure,
		Log:    log,
	}
	m := newMetrics(s)

	e.Pre(headAsGet(), trimTrailingSlash())
	e.Use(
		requestID(),
		securityHeaders(cfg.TrustProxy),
		m.middleware(),
		requestLogger(log),
		recoverPanics(log),
		bodyLimit(cfg.BodyLimit),
		rejectNUL(),
		// The login first: its CSRF token is the one that counts.
		skipFor(auth.LoadUser(), isMachinePath),
		skipFor(auth.CSRF(), isMachinePath),
		// After the login's own bookkeeping: its reader's reads, and the
		// floor of its writes (read replica only).
		readScope(s, cfg.TrustProxy),
	)
	routes(e, s, cfg, auth, m)
	return e, nil
}

// newCookieStore returns the login cookie store. Separate keys for signing
// and encryption are derived from the one configured secret.
func newCookieStore(secret string, lifetime time.Duration, log *slog.Logger) (*sessions.CookieStore, error) {
	if secret == "" {
		secret = models.RandomSecret(32)
		log.Warn("TASKPILOTS_SESSION_KEY is not set: using a random key, so logins will not survive a restart " +
			"and replicas will not share them; set it to a long random string (e.g. `openssl rand -base64 48`)")
	} else if len(secret) < 32 {
		log.Warn("TASKPILOTS_SESSION_KEY is shorter than 32 characters; use a long random string")
	}
	derive := func(label string) []byte {
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte("taskpilots login cookie " + label))
		return mac.Sum(nil)
	}
	store := sessions.NewCookieStore(derive("hash"), derive("block"))
	store.Options = &sessions.Options{
		Path:     "/",
		HttpOnly: true,
		SameSite: http.SameSiteLaxMode,
	}
	// securecookie refuses a cookie older than this whatever the browser
	// says; the server-side login ends sooner when idle or revoked.
	store.MaxAge(int(lifetime / time.Second))
	return store, nil
}

// isHTTPS reports whether the client reached us over TLS, directly or (when
// the proxy is trusted) through a proxy that terminated it.
func isHTTPS(r *http.Request, trustProxy bool) bool {
	if r.TLS != nil {
		return true
	}
	return trustProxy && r.Header.Get(echo.HeaderXForwardedProto) == "https"
}

// Serve runs the server until ctx is done, with the background loops:
// maintenance (lease rescue, timers), the event feed's sequencer, the
// webhook dispatcher and, on PostgreSQL, the LISTEN loop that wakes long
// polls when other processes queue work or sequence events.
func Serve(ctx context.Context, s *models.Store, cfg Config) error {
	cfg = cfg.withDefaults().withCheckpointer(s)
	log := cfg.Logger
	if !cfg.checkpointer.Enabled() {
		log.Warn("checkpoints are off: no signing key, so deleting a whole session or cutting the end of one would go unnoticed; " +
			"set --checkpoint-key (TASKPILOTS_CHECKPOINT_KEY_FILE) to a key file shared by every replica")
	}
	h, err := NewServer(s, cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}

	// Requests derive from base, which is cancelled late in a shutdown so
	// that long polls end instead of holding the shutdown for their full wait.
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		// Long polls answer after their wait; the API caps it at
		// models.MaxWaitSeconds whatever LeaseWaitMax says.
		WriteTimeout:   max(cfg.LeaseWaitMax, models.MaxWaitSeconds*time.Second) + 30*time.Second,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		BaseContext:    func(net.Listener) context.Context { return base },
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	bg, stopBg := context.WithCancel(ctx)
	defer stopBg()
	var wg sync.WaitGroup
	wg.Go(func() { maintainLoop(bg, s, cfg.MaintainEvery, log) })
	wg.Go(func() { checkpointLoop(bg, cfg.checkpointer, log) })
	if s.Dialect == models.Postgres && cfg.IndexUpkeepEvery > 0 {
		wg.Go(func() { indexUpkeepLoop(bg, s, cfg.IndexUpkeepEvery, log) })
	}
	wg.Go(func() { s.RunSequencer(bg, time.Second) })
	wg.Go(func() {
		d := &Dispatcher{Store: s, Policy: cfg.Webhooks, Log: log}
		d.Run(bg, cfg.WebhookEvery)
	})
	if s.Dialect == models.Postgres {
		wg.Go(func() {
			if err := s.Listen(bg); err != nil {
				log.Error("queue listener ended", "err", err)
			}
		})
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("listening", "url", openURL(ln.Addr()), "dialect", s.Dialect)

	select {
	case err := <-served:
		stopBg()
		wg.Wait()
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}

	log.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	shCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	grace := time.AfterFunc(min(2*time.Second, cfg.ShutdownTimeout/2), cancelBase)
	defer grace.Stop()
	err = srv.Shutdown(shCtx)
	if err != nil {
		log.Warn("graceful shutdown timed out; closing connections", "err", err)
		_ = srv.Close()
	}
	stopBg()
	wg.Wait()
	if serveErr := <-served; serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("http server: %w", serveErr)
	}
	log.Info("stopped")
	return nil
}

// openURL is the address a person should open: a wildcard host is
// reachable as localhost.
func openURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String() + "/"
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// maintainLoop runs the maintenance loop (models.Store.RunMaintenance)
// until ctx is done, logging what passes did. Failures are retried: a
// database blip must not stop lease rescue for good.
func maintainLoop(ctx context.Context, s *models.Store, maxSleep time.Duration, log *slog.Logger) {
	var (
		failing    bool
		lastLogged time.Time
	)
	s.RunMaintenance(ctx, jitter(maxSleep), func(rep models.MaintenanceReport, err error) {
		switch {
		case err != nil:
			// While the database is down, one line per half minute is enough.
			if !failing || time.Since(lastLogged) > 30*time.Second {
				log.Error("maintenance pass failed", "err", err)
				lastLogged = time.Now()
			}
			failing = true
		default:
			if failing {
				log.Info("maintenance recovered")
			}
			failing = false
			if rep != (models.MaintenanceReport{}) {
				log.Info("maintenance", "rescued_leases", rep.Rescued, "joins", rep.Joined,
					"snoozes_ended", rep.Resumed, "sla_breaches", rep.SLABreaches, "review_items", rep.ReviewItems)
			}
		}
	})
}

// indexUpkeepLoop checks the indexes of sessions every period (with
// jitter, so replicas spread out; an advisory lock keeps them from
// rebuilding at once) and rebuilds the bloated ones. Its own loop, like the
// checkpoints: a rebuild takes seconds and must not delay lease rescue.
func indexUpkeepLoop(ctx context.Context, s *models.Store, every time.Duration, log *slog.Logger) {
	t := time.NewTimer(jitter(every))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rep, err := s.UpkeepIndexes(ctx, models.IndexUpkeepOpts{})
		switch {
		case err != nil && ctx.Err() == nil:
			log.Error("index upkeep failed", "err", err)
		case err == nil:
			for _, d := range rep.Dropped {
				log.Info("index upkeep dropped an interrupted rebuild's leftover", "index", d)
			}
			for _, is := range rep.Rebuilt {
				log.Info("index upkeep rebuilt a bloated index", "index", is.Name, "bytes_before", is.Bytes, "bytes_after", is.After, "estimate", is.Estimate)
			}
			for _, ts := range rep.TablesRewritten {
				log.Info("index upkeep rewrote a bloated counter table", "table", ts.Name, "rows", ts.Rows, "pages_before", ts.Pages, "pages_after", ts.After, "needs", ts.Needs, "took", ts.Took)
			}
			for _, name := range rep.TablesBusy {
				log.Info("index upkeep left a bloated counter table for the next round: its writers held it past the lock wait", "table", name)
			}
		}
		t.Reset(jitter(every))
	}
}

// checkpointLoop is the maintenance pass's checkpoint part, in a loop of its
// own so that building a checkpoint over many sessions never delays lease
// rescue. It signs one at start and then whenever one is due.
func checkpointLoop(ctx context.Context, cp *models.Checkpointer, log *slog.Logger) {
	if !cp.Enabled() || cp.Every <= 0 {
		return
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		maintainCheckpoint(ctx, cp, log)
		// Tick decides whether one is due; looking a few times per period
		// keeps the period accurate without a timer per replica.
		t.Reset(jitter(min(cp.Every/4, time.Minute)))
	}
}

// maintainCheckpoint signs a checkpoint when one is due (Checkpointer.Tick
// decides; at most one attempt per period, so a refusal is logged once per
// period). A refusal means the log changed behind the last checkpoint.
func maintainCheckpoint(ctx context.Context, cp *models.Checkpointer, log *slog.Logger) {
	tctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	c, written, err := cp.Tick(tctx)
	var refused *models.CheckpointRefusedError
	switch {
	case errors.As(err, &refused):
		log.Error("tamper evidence: "+refused.Error(), "problems", len(refused.Problems))
	case err != nil && ctx.Err() == nil:
		log.Error("checkpoint failed", "err", err)
	case written:
		log.Info("checkpoint signed", "seq", c.Seq, "sessions", c.Sessions, "events", c.Events, "root", c.Root)
	}
}

func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.4-0.2)*float64(d))
}
