package web

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/handlers/apicontract"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/static"
	"github.com/taskpilots/handoff/views"
)

const testPassword = "correct horse battery"

// testEcho is the product's Echo on s, so that tests can add routes.
func testEcho(t *testing.T, s *models.Store, cfg Config) *echo.Echo {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.SessionKey = "test-session-key-0123456789abcdefghijklmnop"
	e, err := newEcho(s, cfg.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func serve(t *testing.T, h http.Handler) (*httptest.Server, *http.Client) {
	t.Helper()
	// API exchanges are validated against the OpenAPI document, except on
	// the routes tests add to exercise the middleware.
	srv := apicontract.Server(t, h, apicontract.Ignore("/api/v1/test/", "/api/v1/boom"))
	jar, _ := cookiejar.New(nil)
	return srv, &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func do(t *testing.T, c *http.Client, method, u string, body io.Reader, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// csrfOf returns the CSRF token in the page at u.
func csrfOf(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	_, body := do(t, c, http.MethodGet, u, nil)
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := doc.Find(`meta[name="csrf-token"]`).Attr("content")
	if tok == "" {
		t.Fatalf("no CSRF token in %s", u)
	}
	return tok
}

func postForm(t *testing.T, c *http.Client, u string, form url.Values, header ...string) (*http.Response, string) {
	t.Helper()
	return do(t, c, http.MethodPost, u, strings.NewReader(form.Encode()),
		append([]string{"Content-Type", "application/x-www-form-urlencoded"}, header...)...)
}

func login(t *testing.T, s *models.Store, c *http.Client, base string, role models.Role) {
	t.Helper()
	email := string(role) + "@example.com"
	if _, err := s.CreateUser(context.Background(), models.CreateUserInput{Email: email, Name: string(role), Role: role, Password: testPassword}); err != nil {
		t.Fatal(err)
	}
	resp, body := postForm(t, c, base+"/login", url.Values{"email": {email}, "password": {testPassword}, "_csrf": {csrfOf(t, c, base+"/login")}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d\n%s", resp.StatusCode, body)
	}
}

func TestSecurityHeadersAndRequestID(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		srv, c := serve(t, testEcho(t, s, Config{}))
		for _, path := range []string{"/login", "/healthz", "/api/v1/sessions", "/nope"} {
			resp, _ := do(t, c, http.MethodGet, srv.URL+path, nil)
			h := resp.Header
			for k, want := range map[string]string{
				"X-Content-Type-Options": "nosniff",
				"X-Frame-Options":        "DENY",
				"Referrer-Policy":        "same-origin",
			} {
				if h.Get(k) != want {
					t.Errorf("%s: %s = %q, want %q", path, k, h.Get(k), want)
				}
			}
			if csp := h.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-inline") {
				t.Errorf("%s: CSP %q", path, csp)
			}
			if !strings.HasPrefix(h.Get("X-Request-ID"), "req_") {
				t.Errorf("%s: X-Request-ID %q", path, h.Get("X-Request-ID"))
			}
			if h.Get("Strict-Transport-Security") != "" {
				t.Errorf("%s: HSTS over plain HTTP", path)
			}
		}
		// A sane caller id is kept; anything else is replaced.
		resp, _ := do(t, c, http.MethodGet, srv.URL+"/healthz", nil, "X-Request-ID", "abc-123")
		if got := resp.Header.Get("X-Request-ID"); got != "abc-123" {
			t.Errorf("request id %q, want the caller's", got)
		}
		resp, _ = do(t, c, http.MethodGet, srv.URL+"/healthz", nil, "X-Request-ID", "<script>x</script>")
		if got := resp.Header.Get("X-Request-ID"); !strings.HasPrefix(got, "req_") {
			t.Errorf("unsafe request id kept: %q", got)
		}
	})
}

func TestBodyLimit(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := testEcho(t, s, Config{BodyLimit: 1024})
		e.POST("/api/v1/test/echo", func(c echo.Context) error {
			b, err := io.ReadAll(c.Request().Body)
			if err != nil {
				return err
			}
			return c.JSON(http.StatusOK, map[string]int{"n": len(b)})
		})
		srv, c := serve(t, e)
		check := func(name string, resp *http.Response, body string) {
			t.Helper()
			if resp.StatusCode != http.StatusRequestEntityTooLarge || resp.Header.Get("Content-Type") != handlers.ProblemContentType {
				t.Fatalf("%s: %d %q %s", name, resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
			var p handlers.Problem
			if err := json.Unmarshal([]byte(body), &p); err != nil || p.Status != 413 {
				t.Fatalf("%s: problem %s", name, body)
			}
		}
		big := strings.Repeat("x", 2048)
		resp, body := do(t, c, http.MethodPost, srv.URL+"/api/v1/test/echo", strings.NewReader(big), "Content-Type", "application/json")
		check("with Content-Length", resp, body)
		// Without a Content-Length, the limit bites while reading.
		resp, body = do(t, c, http.MethodPost, srv.URL+"/api/v1/test/echo", io.MultiReader(strings.NewReader(big)), "Content-Type", "application/json")
		check("chunked", resp, body)
		// A real API route, before authentication.
		resp, body = do(t, c, http.MethodPost, srv.URL+"/api/v1/sessions", strings.NewReader(big), "Content-Type", "application/json")
		check("POST /api/v1/sessions", resp, body)
		// Under the limit is fine.
		if resp, body := do(t, c, http.MethodPost, srv.URL+"/api/v1/test/echo", strings.NewReader("{}")); resp.StatusCode != 200 {
			t.Fatalf("small body: %d %s", resp.StatusCode, body)
		}
	})
}

func TestDefaultBodyLimitIsOneMiB(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.SQLite)
	srv, c := serve(t, testEcho(t, s, Config{}))
	resp, _ := do(t, c, http.MethodPost, srv.URL+"/api/v1/sessions", bytes.NewReader(make([]byte, 1<<20+1)), "Content-Type", "application/json")
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("1 MiB + 1: %d", resp.StatusCode)
	}
}

func TestCSRFProtectsWrites(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := testEcho(t, s, Config{})
		// A console form that writes: it creates a session.
		e.POST("/console/test/create", func(c echo.Context) error {
			if _, err := s.CreateSession(c.Request().Context(), handlers.CurrentUser(c).Actor(), "", models.CreateSessionInput{Goal: c.FormValue("goal")}); err != nil {
				return err
			}
			return c.Redirect(http.StatusSeeOther, "/console/sessions")
		}, handlers.RequireUser())
		srv, c := serve(t, e)
		login(t, s, c, srv.URL, models.RoleAgent)
		sessions := func() int {
			page, err := s.ListSessions(context.Background(), models.SessionQuery{Limit: models.MaxSessionsLimit})
			if err != nil {
				t.Fatal(err)
			}
			return len(page.Sessions)
		}

		resp, _ := postForm(t, c, srv.URL+"/console/test/create", url.Values{"goal": {"no token"}})
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("without token: %d, want 403", resp.StatusCode)
		}
		resp, _ = postForm(t, c, srv.URL+"/console/test/create", url.Values{"goal": {"forged"}, "_csrf": {"forged"}})
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("forged token: %d, want 403", resp.StatusCode)
		}
		tok := csrfOf(t, c, srv.URL+"/console/sessions")
		resp, _ = postForm(t, c, srv.URL+"/console/test/create", url.Values{"goal": {"cross-site"}, "_csrf": {tok}}, "Sec-Fetch-Site", "cross-site")
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("cross-site: %d, want 403", resp.StatusCode)
		}
		// A valid token in the query string is refused: URLs leak (logs,
		// history, Referer), so only the body or the header may carry it.
		resp, _ = postForm(t, c, srv.URL+"/console/test/create?_csrf="+url.QueryEscape(tok), url.Values{"goal": {"query token"}})
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("token in the query string: %d, want 403", resp.StatusCode)
		}
		if n := sessions(); n != 0 {
			t.Fatalf("%d sessions written by refused requests", n)
		}

		// The form field and the htmx header both work.
		if resp, body := postForm(t, c, srv.URL+"/console/test/create", url.Values{"goal": {"form"}, "_csrf": {tok}}); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("with form token: %d %s", resp.StatusCode, body)
		}
		if resp, body := postForm(t, c, srv.URL+"/console/test/create", url.Values{"goal": {"htmx"}}, "X-CSRF-Token", tok, "HX-Request", "true"); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("with header token: %d %s", resp.StatusCode, body)
		}
		if n := sessions(); n != 2 {
			t.Fatalf("%d sessions, want 2", n)
		}
	})
}

func TestRequireUserRoles(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := testEcho(t, s, Config{})
		e.GET("/console/test/admin", func(c echo.Context) error { return c.String(200, "admin page") }, handlers.RequireUser(models.RoleAdmin))
		e.GET("/console/test/review", func(c echo.Context) error { return c.String(200, "review page") }, handlers.RequireUser(models.RoleReviewer))
		srv, agent := serve(t, e)
		login(t, s, agent, srv.URL, models.RoleAgent)
		resp, body := do(t, agent, http.MethodGet, srv.URL+"/console/test/admin", nil)
		if resp.StatusCode != http.StatusForbidden || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("agent on admin page: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if !strings.Contains(body, `data-testid="error-page"`) {
			t.Fatalf("no error page:\n%s", body)
		}
		_, admin := serve(t, e)
		login(t, s, admin, srv.URL, models.RoleAdmin)
		for _, p := range []string{"/console/test/admin", "/console/test/review"} {
			if resp, _ := do(t, admin, http.MethodGet, srv.URL+p, nil); resp.StatusCode != 200 {
				t.Fatalf("admin on %s: %d", p, resp.StatusCode)
			}
		}
	})
}

func TestPanicsBecomeCalm500s(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.SQLite)
	e := testEcho(t, s, Config{})
	e.GET("/boom", func(echo.Context) error { panic("secret detail") })
	e.GET("/api/v1/boom", func(echo.Context) error { panic("secret detail") })
	srv, c := serve(t, e)
	for _, p := range []string{"/boom", "/api/v1/boom"} {
		resp, body := do(t, c, http.MethodGet, srv.URL+p, nil)
		if resp.StatusCode != 500 || strings.Contains(body, "secret detail") {
			t.Fatalf("%s: %d %s", p, resp.StatusCode, body)
		}
	}
}

func TestStaticAssets(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.SQLite)
	srv, c := serve(t, testEcho(t, s, Config{}))
	for name, ctype := range map[string]string{"htmx.min.js": "javascript", "app.js": "javascript", "app.css": "text/css"} {
		resp, body := do(t, c, http.MethodGet, srv.URL+static.URL(name), nil)
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), ctype) || len(body) == 0 {
			t.Fatalf("%s: %d %q", name, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if cc := resp.Header.Get("Cache-Control"); !strings.Contains(cc, "max-age=31536000") {
			t.Errorf("%s: Cache-Control %q", name, cc)
		}
		// An unversioned URL is revalidated rather than cached for a year.
		resp, _ = do(t, c, http.MethodGet, srv.URL+"/static/"+name, nil)
		if cc := resp.Header.Get("Cache-Control"); strings.Contains(cc, "31536000") {
			t.Errorf("%s unversioned: Cache-Control %q", name, cc)
		}
		etag := resp.Header.Get("ETag")
		if resp, _ := do(t, c, http.MethodGet, srv.URL+"/static/"+name, nil, "If-None-Match", etag); resp.StatusCode != http.StatusNotModified {
			t.Errorf("%s: revalidation %d", name, resp.StatusCode)
		}
	}
	// HEAD works like GET, without a body.
	for _, p := range []string{static.URL("app.css"), "/healthz", "/login"} {
		resp, body := do(t, c, http.MethodHead, srv.URL+p, nil)
		if resp.StatusCode != 200 || body != "" {
			t.Errorf("HEAD %s: %d, %d bytes", p, resp.StatusCode, len(body))
		}
	}
	for _, p := range []string{"/static/", "/static/nope.js", "/static/../go.mod"} {
		if resp, _ := do(t, c, http.MethodGet, srv.URL+p, nil); resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMovedPermanently {
			t.Errorf("%s: %d", p, resp.StatusCode)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := Config{}.withDefaults()
	if c.BodyLimit != 1<<20 || c.MaintainEvery != models.DefaultMaintainMaxSleep || c.Addr == "" || c.Logger == nil ||
		c.LoginFailuresPerAccount != 5 || c.LoginWindow != 15*time.Minute || c.LeaseWaitMax != models.MaxWaitSeconds*time.Second {
		t.Fatalf("defaults %+v", c)
	}
	c = Config{BodyLimit: 10, MaintainEvery: time.Second}.withDefaults()
	if c.BodyLimit != 10 || c.MaintainEvery != time.Second {
		t.Fatalf("set values replaced: %+v", c)
	}
}

// urlLogger captures the URL Serve logs when it listens.
type urlLogger struct {
	url chan string
}

func (h *urlLogger) Enabled(context.Context, slog.Level) bool { return true }
func (h *urlLogger) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "listening" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "url" {
				h.url <- a.Value.String()
			}
			return true
		})
	}
	return nil
}
func (h *urlLogger) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *urlLogger) WithGroup(string) slog.Handler      { return h }

func TestServeRescuesExpiredLeasesAndShutsDown(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		_, dlg := storetest.Delegated(ctx, t, s, "refunds")
		l, err := s.Claim(ctx, "refunds", "w-1", "test:worker", "")
		if err != nil || l == nil {
			t.Fatalf("claim: %v %v", l, err)
		}
		// The clock moves past the lease before the server starts; the
		// maintenance loop must then rescue it on its own.
		s.Now = func() time.Time { return time.Now().Add(time.Hour) }

		logs := &urlLogger{url: make(chan string, 1)}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- Serve(runCtx, s, Config{Addr: "127.0.0.1:0", MaintainEvery: 20 * time.Millisecond, Logger: slog.New(logs), SessionKey: "k"})
		}()
		var base string
		select {
		case base = <-logs.url:
		case err := <-done:
			t.Fatalf("Serve returned early: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("Serve did not start")
		}
		resp, err := http.Get(base + "healthz")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("healthz over the network: %v %v", resp, err)
		}
		resp.Body.Close()

		deadline := time.Now().Add(30 * time.Second)
		for {
			d, err := s.GetDelegation(ctx, dlg)
			if err != nil {
				t.Fatal(err)
			}
			if d.Status == models.DelegationQueued {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("lease not rescued: %+v", d)
			}
			time.Sleep(20 * time.Millisecond)
		}

		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Serve did not shut down")
		}
	})
}

func TestFlashShowsOnce(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, models.SQLite)
	e := testEcho(t, s, Config{})
	e.POST("/console/test/flash", func(c echo.Context) error {
		if err := handlers.AddFlash(c, views.Banner{Kind: "success", Text: "Claimed the session."}); err != nil {
			return err
		}
		return c.Redirect(http.StatusSeeOther, "/console/sessions")
	}, handlers.RequireUser())
	srv, c := serve(t, e)
	login(t, s, c, srv.URL, models.RoleAgent)
	tok := csrfOf(t, c, srv.URL+"/console/sessions")
	if resp, _ := postForm(t, c, srv.URL+"/console/test/flash", url.Values{"_csrf": {tok}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("flash post: %d", resp.StatusCode)
	}
	banner := func() string {
		_, body := do(t, c, http.MethodGet, srv.URL+"/console/sessions", nil)
		doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		return doc.Find("#banners .banner-success").Text()
	}
	if got := banner(); got != "Claimed the session." {
		t.Fatalf("banner %q", got)
	}
	if got := banner(); got != "" {
		t.Fatalf("banner shown twice: %q", got)
	}
	// The flash did not end the login.
	if resp, _ := do(t, c, http.MethodGet, srv.URL+"/console/sessions", nil); resp.StatusCode != 200 {
		t.Fatalf("logged out by the flash: %d", resp.StatusCode)
	}
}
