package main

// bench pages: how fast every console page and API read answers on the
// database as it is (build one with `bench seed`), for the scale goals in
// the README: p95 under 50 ms for the inbox and the session page at 1 M
// events, and no page more than 1.3× slower at 1 M than at 10 k (run it on
// both databases in one sitting and compare).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/web"
)

type pagesOpts struct {
	databaseURL string
	clients     int
	requests    int
	only        string
	json        bool
	cpuProfile  string
}

func pagesFlags(env *cliEnv, args []string) (pagesOpts, error) {
	fs := newFlagSet(env, "bench pages")
	var o pagesOpts
	dbURL := databaseFlag(env, fs)
	fs.IntVar(&o.clients, "clients", 8, "concurrent clients per page")
	fs.IntVar(&o.requests, "requests", 200, "requests per page (after "+strconv.Itoa(warmUpRequests)+" unmeasured warm-up requests from each client at once)")
	fs.StringVar(&o.only, "only", "", "measure only the pages whose name contains this text (several: comma-separated)")
	fs.BoolVar(&o.json, "json", false, "print the table as JSON")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured requests (server and clients, this process) to this file")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: taskpilots bench pages --database-url URL [--clients 8] [--requests 200]\n\n"+
			"Serves the console and API in-process on localhost and asks each page\n"+
			"--requests times from --clients concurrent clients, signed in as a fresh\n"+
			"admin (console) and a controller token (API). Prints p50/p95/p99 and the\n"+
			"response size per page. It adds one user and one token to the database.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	o.databaseURL = *dbURL
	switch {
	case o.clients < 1:
		return o, usageErr("--clients must be at least 1")
	case o.requests < 1:
		return o, usageErr("--requests must be at least 1")
	}
	return o, nil
}

// pageResult is one row of the table.
type pageResult struct {
	Page   string  `json:"page"`
	Path   string  `json:"path"`
	P50ms  float64 `json:"p50_ms"`
	P95ms  float64 `json:"p95_ms"`
	P99ms  float64 `json:"p99_ms"`
	Bytes  int     `json:"bytes"`
	Errors int     `json:"errors"`
}

type benchPage struct {
	name, path string
	api        bool
}

func runBenchPages(ctx context.Context, env *cliEnv, args []string) error {
	o, err := pagesFlags(env, args)
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := models.Open(ctx, o.databaseURL, models.OpenOpts{Logger: quiet, WantConns: o.clients + 4})
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := s.MigrateUp(ctx); err != nil {
		return schemaError(err)
	}
	run := strings.ToLower(models.RandomSecret(6))
	password := models.RandomSecret(24)
	u, err := s.CreateUser(ctx, models.CreateUserInput{Email: "bench-pages-" + run + "@bench.local",
		Name: "Bench Pages " + run, Role: models.RoleAdmin, Password: password})
	if err != nil {
		return fmt.Errorf("create the bench user: %w", err)
	}
	tok, _, err := s.CreateToken(ctx, "bench-pages-"+run, models.RoleController)
	if err != nil {
		return fmt.Errorf("create the bench token: %w", err)
	}
	h, err := web.NewServer(s, web.Config{Logger: quiet, SessionKey: models.RandomSecret(40)})
	if err != nil {
		return fmt.Errorf("build the server: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	browser, err := signIn(ctx, base, u.Email, password, o.clients)
	if err != nil {
		return err
	}
	// The feed serves only events the sequencer has numbered; a seeded
	// database may hold many that no server has numbered yet.
	if _, err := s.SequenceFeed(ctx); err != nil {
		return fmt.Errorf("number the feed: %w", err)
	}
	// A server's maintenance pass keeps the metric rollups current; this
	// one does not run it, so roll up once, as a running server would have.
	if _, err := s.RollupMetrics(ctx); err != nil {
		return fmt.Errorf("roll up metrics: %w", err)
	}
	pages, err := pagesToMeasure(ctx, s, o.only)
	if err != nil {
		return err
	}
	var n int64
	if err := s.DB.WithContext(ctx).Raw(`SELECT count(*) FROM events`).Scan(&n).Error; err != nil {
		return err
	}
	fmt.Fprintf(env.stderr, "bench pages: %s, %d events, %d clients × %d requests per page\n", s.Dialect, n, o.clients, o.requests)

	stopProfile, err := startCPUProfile(o.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	apiClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.clients}}
	var rows []pageResult
	for _, p := range pages {
		// A server rolls up every minute; a run that crosses the hour
		// would otherwise measure every metrics request folding the whole
		// closed hour from its events (5.4 s a request at a million events
		// seeded in that hour, 4 December), not the pages. Unmeasured.
		if _, err := s.RollupMetrics(ctx); err != nil {
			return fmt.Errorf("roll up metrics before %s: %w", p.name, err)
		}
		c, hdr := browser, http.Header{}
		if p.api {
			c = apiClient
			hdr.Set("Authorization", "Bearer "+tok)
		}
		r := measurePage(ctx, c, hdr, base, p, o)
		rows = append(rows, r)
		fmt.Fprintf(env.stderr, "  %-28s p95 %7.1f ms\n", p.name, r.P95ms)
	}
	if o.json {
		return json.NewEncoder(env.stdout).Encode(map[string]any{"dialect": s.Dialect, "events": n, "clients": o.clients, "pages": rows})
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "page\tp50 ms\tp95 ms\tp99 ms\tbytes\terrors\t\n")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%d\t%d\t\n", r.Page, r.P50ms, r.P95ms, r.P99ms, r.Bytes, r.Errors)
	}
	return tw.Flush()
}

// signIn (as the drill's console human) logs in through the login form, as a browser does, and returns a
// client carrying the login cookie.
func signIn(ctx context.Context, base, email, password string, conns int) (*http.Client, error) {
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Transport: &http.Transport{MaxIdleConnsPerHost: conns},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/login", nil)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := csrfMetaTag.FindSubmatch(body)
	if m == nil || len(m[1]) == 0 {
		return nil, errors.New("sign in: no CSRF token on the login page")
	}
	form := url.Values{"email": {email}, "password": {password}, "_csrf": {string(m[1])}}
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, base+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = c.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		return nil, fmt.Errorf("sign in: the login form answered %d", resp.StatusCode)
	}
	return c, nil
}

// pagesToMeasure lists the pages, with ids taken from the data: the session
// with the longest history, an escalated session, a queue and a word that
// occur in it.
func pagesToMeasure(ctx context.Context, s *models.Store, only string) ([]benchPage, error) {
	var longest, escalated, queue string
	db := s.DB.WithContext(ctx)
	if err := db.Raw(`SELECT id FROM sessions ORDER BY state_version DESC LIMIT 1`).Scan(&longest).Error; err != nil {
		return nil, fmt.Errorf("pick the longest session: %w", err)
	}
	if err := db.Raw(`SELECT id FROM sessions WHERE status = 'escalated' ORDER BY updated_at DESC LIMIT 1`).Scan(&escalated).Error; err != nil {
		return nil, fmt.Errorf("pick an escalated session: %w", err)
	}
	if err := db.Raw(`SELECT queue FROM sessions WHERE queue <> '' LIMIT 1`).Scan(&queue).Error; err != nil {
		return nil, fmt.Errorf("pick a queue: %w", err)
	}
	if escalated == "" {
		escalated = longest
	}
	// A custom metrics range with ends inside hours (so that both partial
	// hours are folded from the events): the 10 days up to 2 days ago.
	now := s.Now().UTC()
	custom := "from=" + url.QueryEscape(now.Add(-10*24*time.Hour-17*time.Minute).Format(time.RFC3339)) +
		"&to=" + url.QueryEscape(now.Add(-2*24*time.Hour+23*time.Minute).Format(time.RFC3339))
	all := []benchPage{
		{name: "inbox", path: "/console"},
		{name: "inbox, search", path: "/console?q=refund"},
		{name: "inbox, queue filter", path: "/console?queue=" + url.QueryEscape(queue)},
		{name: "inbox, waiting on input", path: "/console/inbox/waiting"},
		{name: "sessions list", path: "/console/sessions"},
		{name: "session, escalated", path: "/console/sessions/" + escalated},
		{name: "session, longest history", path: "/console/sessions/" + longest},
		{name: "review queue", path: "/console/reviews"},
		{name: "review statistics", path: "/console/reviews/stats"},
		{name: "audit trail", path: "/console/audit"},
		{name: "metrics 24h", path: "/console/admin/metrics?window=24h"},
		{name: "metrics 7d", path: "/console/admin/metrics?window=7d"},
		{name: "metrics 30d", path: "/console/admin/metrics?window=30d"},
		{name: "metrics custom", path: "/console/admin/metrics?" + custom},
		{name: "metrics 24h, all queues", path: "/console/admin/metrics?window=24h&queues=all"},
		{name: "API sessions list", path: "/api/v1/sessions?limit=50", api: true},
		{name: "API sessions, search", path: "/api/v1/sessions?limit=50&q=refund", api: true},
		{name: "API session", path: "/api/v1/sessions/" + escalated, api: true},
		{name: "API events feed", path: "/api/v1/events?limit=100", api: true},
		{name: "API metrics 24h", path: "/api/v1/metrics?window=24h", api: true},
		{name: "API metrics 7d", path: "/api/v1/metrics?window=7d", api: true},
		{name: "API metrics 30d", path: "/api/v1/metrics?window=30d", api: true},
		{name: "API metrics custom", path: "/api/v1/metrics?" + custom, api: true},
	}
	if longest == "" {
		return nil, errors.New("the database has no sessions: build one with `taskpilots bench seed`")
	}
	var out []benchPage
	for _, p := range all {
		if only == "" || slices.ContainsFunc(strings.Split(only, ","), func(w string) bool { return w != "" && strings.Contains(p.name, w) }) {
			out = append(out, p)
		}
	}
	return out, nil
}

// warmUpRequests is how many unmeasured requests each client sends before
// a page is measured.
const warmUpRequests = 3

// measurePage asks one page o.requests times from o.clients goroutines.
func measurePage(ctx context.Context, c *http.Client, hdr http.Header, base string, p benchPage, o pagesOpts) pageResult {
	get := func() (time.Duration, int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+p.path, nil)
		if err != nil {
			return 0, 0, err
		}
		req.Header = hdr.Clone()
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return 0, 0, err
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s answered %d", p.path, resp.StatusCode)
		}
		return d, int(n), err
	}
	// Warm up with every client at once, not one after another: the
	// measured run holds up to --clients database connections, and a
	// connection's first requests read the catalog and plan each statement
	// (40–600 ms under load). One client's warm-up opened one connection,
	// so the other clients' first requests were measured cold, and they
	// alone made the p95 of a 100-request run (inbox at 8 clients: 305 ms
	// against 67 ms warm).
	var warm sync.WaitGroup
	for range o.clients {
		warm.Go(func() {
			for range warmUpRequests {
				_, _, _ = get()
			}
		})
	}
	warm.Wait()
	var (
		mu    sync.Mutex
		lat   []time.Duration
		size  int
		fails int
		wg    sync.WaitGroup
		next  = make(chan struct{}, o.requests)
	)
	for range o.requests {
		next <- struct{}{}
	}
	close(next)
	for range o.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				d, n, err := get()
				mu.Lock()
				if err != nil {
					fails++
				} else {
					lat = append(lat, d)
					size = n
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.Sort(lat)
	pct := func(q float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		i := min(len(lat)-1, int(q*float64(len(lat))))
		return round3(float64(lat[i].Microseconds()) / 1000)
	}
	return pageResult{Page: p.name, Path: p.path, P50ms: pct(0.50), P95ms: pct(0.95), P99ms: pct(0.99), Bytes: size, Errors: fails}
}

// csrfMetaTag finds the console's CSRF token in a page (as the drill's
// console human does).
var csrfMetaTag = regexp.MustCompile(`name="csrf-token" content="([^"]*)"`)
