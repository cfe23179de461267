package handlers_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// browser is a cookie-keeping client of a real server (web.NewServer) on a
// fresh database. It does not follow redirects, so tests see them.
type browser struct {
	t      *testing.T
	s      *models.Store
	srv    *httptest.Server
	client *http.Client
}

// newBrowser starts the whole product on s and returns a browser for it.
func newBrowser(t *testing.T, s *models.Store, cfg web.Config) *browser {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SessionKey == "" {
		cfg.SessionKey = "test-session-key-0123456789abcdefghijklmnop"
	}
	h, err := web.NewServer(s, cfg)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &browser{t: t, s: s, srv: srv, client: newClient(t)}
}

func newClient(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// fresh returns another browser (own cookies) on the same server.
func (b *browser) fresh() *browser {
	return &browser{t: b.t, s: b.s, srv: b.srv, client: newClient(b.t)}
}

// page is a response with its body read.
type page struct {
	*http.Response
	Body string
}

// Doc parses the body as HTML.
func (p page) Doc(t *testing.T) *goquery.Document {
	t.Helper()
	d, err := goquery.NewDocumentFromReader(strings.NewReader(p.Body))
	if err != nil {
		t.Fatalf("parse HTML: %v", err)
	}
	return d
}

func (b *browser) do(req *http.Request) page {
	b.t.Helper()
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatalf("read body: %v", err)
	}
	return page{Response: resp, Body: string(body)}
}

// get fetches path.
func (b *browser) get(path string, header ...string) page {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return b.do(req)
}

// post sends a form as is (tests add _csrf themselves, or leave it out).
func (b *browser) post(path string, form url.Values, header ...string) page {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return b.do(req)
}

// csrf loads a page and returns the CSRF token its forms carry.
func (b *browser) csrf(path string) string {
	b.t.Helper()
	p := b.get(path)
	tok, ok := p.Doc(b.t).Find(`input[name="_csrf"]`).First().Attr("value")
	if !ok || tok == "" {
		b.t.Fatalf("GET %s (%d): no _csrf field in the page", path, p.StatusCode)
	}
	return tok
}

// submit posts form with the CSRF token of the page at from.
func (b *browser) submit(from, path string, form url.Values) page {
	b.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	form.Set("_csrf", b.csrf(from))
	return b.post(path, form)
}

// login logs in through the form and returns the answer to the POST.
func (b *browser) login(email, password string) page {
	b.t.Helper()
	return b.submit("/login", "/login", url.Values{"email": {email}, "password": {password}})
}

// mustLogin logs in and fails the test unless it worked.
func (b *browser) mustLogin(email, password string) {
	b.t.Helper()
	if p := b.login(email, password); p.StatusCode != http.StatusSeeOther {
		b.t.Fatalf("login as %s: status %d, want 303\n%s", email, p.StatusCode, p.Body)
	}
}

// cookie returns the response's Set-Cookie of name, or nil.
func cookie(p page, name string) *http.Cookie {
	for _, c := range p.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// testPassword is every test user's password.
const testPassword = "correct horse battery"

// newUser creates a console user with role and returns it.
func newUser(t *testing.T, s *models.Store, email string, role models.Role) models.User {
	t.Helper()
	u, err := s.CreateUser(context.Background(), models.CreateUserInput{Email: email, Name: "Test " + string(role), Role: role, Password: testPassword})
	if err != nil {
		t.Fatalf("create user: %v", err)
	}
	return u
}

func TestSafeNext(t *testing.T) {
	t.Parallel()
	for next, want := range map[string]string{
		"":                              "/d",
		"/console/sessions?status=open": "/console/sessions?status=open",
		"/console":                      "/console",
		"//evil.example/x":              "/d",
		"/\\evil.example":               "/d",
		"https://evil.example/":         "/d",
		"javascript:alert(1)":           "/d",
		"console":                       "/d",
		"/login?next=/x":                "/d",
		"/logout":                       "/d",
		"/a\r\nLocation: x":             "/d",
	} {
		if got := handlers.SafeNext(next, "/d"); got != want {
			t.Errorf("SafeNext(%q) = %q, want %q", next, got, want)
		}
	}
}

func TestAllowed(t *testing.T) {
	t.Parallel()
	agent := &models.User{Role: models.RoleAgent}
	admin := &models.User{Role: models.RoleAdmin}
	switch {
	case !handlers.Allowed(agent):
		t.Error("any logged-in user should pass an empty role list")
	case !handlers.Allowed(agent, models.RoleAgent, models.RoleReviewer):
		t.Error("agent should pass a list naming agent")
	case handlers.Allowed(agent, models.RoleReviewer):
		t.Error("agent should not pass a reviewer-only list")
	case !handlers.Allowed(admin, models.RoleReviewer):
		t.Error("admin may do everything")
	case handlers.Allowed(nil):
		t.Error("nobody is not allowed")
	}
}

func TestAnonymousIsSentToLogin(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		p := b.get("/console/sessions?status=open")
		if p.StatusCode != http.StatusSeeOther {
			t.Fatalf("status %d, want 303", p.StatusCode)
		}
		if loc := p.Header.Get("Location"); loc != "/login?next="+url.QueryEscape("/console/sessions?status=open") {
			t.Fatalf("Location %q", loc)
		}
		// htmx requests are sent to the login page as a whole page.
		p = b.get("/console/sessions", "HX-Request", "true")
		if p.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(p.Header.Get("HX-Redirect"), "/login?next=") {
			t.Fatalf("htmx: status %d, HX-Redirect %q", p.StatusCode, p.Header.Get("HX-Redirect"))
		}
	})
}
