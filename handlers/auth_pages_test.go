package handlers_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

func TestLoginFormPage(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		p := b.get("/login?next=/console/sessions")
		if p.StatusCode != http.StatusOK {
			t.Fatalf("status %d", p.StatusCode)
		}
		doc := p.Doc(t)
		form := doc.Find(`form[data-testid="login-form"]`)
		if form.Length() != 1 {
			t.Fatalf("no login form:\n%s", p.Body)
		}
		if m, _ := form.Attr("method"); m != "post" {
			t.Errorf("form method %q", m)
		}
		for _, sel := range []string{`input[name="email"][type="email"]`, `input[name="password"][type="password"]`, `input[name="_csrf"]`, `label[for="email"]`, `label[for="password"]`} {
			if form.Find(sel).Length() != 1 {
				t.Errorf("login form lacks %s", sel)
			}
		}
		if v, _ := form.Find(`input[name="next"]`).Attr("value"); v != "/console/sessions" {
			t.Errorf("next = %q", v)
		}
		if doc.Find("script:not([src])").Length() != 0 {
			t.Error("inline script: the CSP forbids it")
		}
	})
}

func TestLoginSuccess(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		u := newUser(t, s, "Agent@Example.com", models.RoleAgent)
		b := newBrowser(t, s, web.Config{})

		// Emails are matched case-insensitively and trimmed.
		p := b.login("  agent@example.COM ", testPassword)
		if p.StatusCode != http.StatusSeeOther || p.Header.Get("Location") != "/" {
			t.Fatalf("status %d Location %q, want 303 to /\n%s", p.StatusCode, p.Header.Get("Location"), p.Body)
		}
		c := cookie(p, handlers.LoginCookieName)
		if c == nil {
			t.Fatal("no login cookie")
		}
		if !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Path != "/" {
			t.Errorf("cookie HttpOnly=%v SameSite=%v Path=%q; want HttpOnly, Lax, /", c.HttpOnly, c.SameSite, c.Path)
		}
		if c.MaxAge != int(models.DefaultLoginLifetime/time.Second) {
			t.Errorf("cookie MaxAge %d, want the login lifetime", c.MaxAge)
		}
		if c.Secure {
			t.Error("Secure cookie over plain HTTP without a trusted proxy")
		}
		if strings.Contains(c.Value, u.ID) {
			t.Error("cookie value is not encrypted")
		}

		if p := b.get("/"); p.StatusCode != http.StatusFound || p.Header.Get("Location") != "/console" {
			t.Fatalf("GET / = %d %q", p.StatusCode, p.Header.Get("Location"))
		}
		id := storetest.Session(ctx, t, s, &storetest.SessionOpts{TicketRef: "T-1182"})
		p = b.get("/console/sessions")
		if p.StatusCode != http.StatusOK {
			t.Fatalf("sessions page: %d\n%s", p.StatusCode, p.Body)
		}
		doc := p.Doc(t)
		if got := doc.Find(`[data-testid="current-user"]`).Text(); got != u.Name {
			t.Errorf("current user %q, want %q", got, u.Name)
		}
		row := doc.Find(`tr[data-session-id="` + id + `"]`)
		if row.Length() != 1 {
			t.Fatalf("session %s not listed:\n%s", id, p.Body)
		}
		if got := row.Find(`[data-field="ticket_ref"]`).Text(); got != "T-1182" {
			t.Errorf("ticket %q", got)
		}

		// GET /login while logged in goes on to the console.
		if p := b.get("/login"); p.StatusCode != http.StatusSeeOther {
			t.Errorf("GET /login logged in: %d", p.StatusCode)
		}
	})
}

func TestLoginRedirectsToNext(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		newUser(t, s, "rev@example.com", models.RoleReviewer)
		b := newBrowser(t, s, web.Config{})
		next := b.get("/console/sessions?status=open").Header.Get("Location")
		form := url.Values{"email": {"rev@example.com"}, "password": {testPassword}}
		form.Set("_csrf", b.csrf(next))
		u, _ := url.Parse(next)
		form.Set("next", u.Query().Get("next"))
		p := b.post("/login", form)
		if p.StatusCode != http.StatusSeeOther || p.Header.Get("Location") != "/console/sessions?status=open" {
			t.Fatalf("status %d Location %q", p.StatusCode, p.Header.Get("Location"))
		}

		// Another site as next is ignored.
		b2 := b.fresh()
		form = url.Values{"email": {"rev@example.com"}, "password": {testPassword}, "next": {"//evil.example/"}}
		form.Set("_csrf", b2.csrf("/login"))
		if p := b2.post("/login", form); p.Header.Get("Location") != "/" {
			t.Fatalf("open redirect: Location %q", p.Header.Get("Location"))
		}
	})
}

func TestLoginWrongPassword(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		newUser(t, s, "agent@example.com", models.RoleAgent)
		b := newBrowser(t, s, web.Config{})
		var messages []string
		for _, email := range []string{"agent@example.com", "nobody@example.com"} {
			p := b.login(email, "wrong password!")
			if p.StatusCode != http.StatusUnauthorized {
				t.Fatalf("%s: status %d, want 401", email, p.StatusCode)
			}
			if c := cookie(p, handlers.LoginCookieName); c != nil {
				t.Fatalf("%s: login cookie set on failure", email)
			}
			doc := p.Doc(t)
			msg := strings.TrimSpace(doc.Find(`[data-testid="login-error"]`).Text())
			if !strings.Contains(strings.ToLower(msg), "wrong email or password") {
				t.Fatalf("%s: inline error %q", email, msg)
			}
			// The form keeps the email, never the password.
			if v, _ := doc.Find(`input[name="email"]`).Attr("value"); v != email {
				t.Errorf("email field %q", v)
			}
			if v, ok := doc.Find(`input[name="password"]`).Attr("value"); ok && v != "" {
				t.Error("password echoed back")
			}
			messages = append(messages, msg)
		}
		if messages[0] != messages[1] {
			t.Errorf("messages differ for a known and an unknown email: %q vs %q", messages[0], messages[1])
		}
		if p := b.get("/console/sessions"); p.StatusCode != http.StatusSeeOther {
			t.Errorf("not logged in, yet /console/sessions = %d", p.StatusCode)
		}
	})
}

func TestLoginThrottle(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		handClockOf(s) // the waits run on the store's clock, which stands still here
		newUser(t, s, "agent@example.com", models.RoleAgent)
		newUser(t, s, "other@example.com", models.RoleAgent)
		b := newBrowser(t, s, web.Config{LoginFailuresPerAccount: 3, LoginFailuresPerAddress: 5})
		for i := 0; i < 3; i++ {
			if p := b.login("agent@example.com", "wrong password!"); p.StatusCode != http.StatusUnauthorized {
				t.Fatalf("attempt %d: status %d", i+1, p.StatusCode)
			}
		}
		// Blocked now, even with the right password.
		p := b.login("agent@example.com", testPassword)
		if p.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("after 3 failures: status %d, want 429", p.StatusCode)
		}
		if cookie(p, handlers.LoginCookieName) != nil {
			t.Fatal("login cookie set while throttled")
		}
		if p.Header.Get("Retry-After") == "" {
			t.Error("no Retry-After")
		}
		if msg := p.Doc(t).Find(`[data-testid="login-error"]`).Text(); !strings.Contains(msg, "Too many failed attempts. Try again in 1 s.") {
			t.Errorf("inline message %q", msg)
		}

		// Another account from the same address still works...
		if p := b.fresh().login("other@example.com", testPassword); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("other account: status %d", p.StatusCode)
		}
		// ...until the address itself has failed too often (3 + 2 = 5).
		for i := 0; i < 2; i++ {
			b.login("someone"+string(rune('a'+i))+"@example.com", "wrong password!")
		}
		if p := b.fresh().login("other@example.com", testPassword); p.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("address over its limit: status %d, want 429", p.StatusCode)
		}
	})
}

func TestLoginNeedsCSRF(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		newUser(t, s, "agent@example.com", models.RoleAgent)
		b := newBrowser(t, s, web.Config{})
		b.get("/login") // has the CSRF cookie, but the form field is missing
		p := b.post("/login", url.Values{"email": {"agent@example.com"}, "password": {testPassword}})
		if p.StatusCode != http.StatusForbidden {
			t.Fatalf("status %d, want 403", p.StatusCode)
		}
		if cookie(p, handlers.LoginCookieName) != nil {
			t.Fatal("logged in without a CSRF token")
		}
		// A wrong token is refused the same way.
		p = b.post("/login", url.Values{"email": {"agent@example.com"}, "password": {testPassword}, "_csrf": {"forged"}})
		if p.StatusCode != http.StatusForbidden || cookie(p, handlers.LoginCookieName) != nil {
			t.Fatalf("forged token: status %d", p.StatusCode)
		}
		// A cross-site form post is refused even with a token.
		form := url.Values{"email": {"agent@example.com"}, "password": {testPassword}, "_csrf": {b.csrf("/login")}}
		if p := b.post("/login", form, "Sec-Fetch-Site", "cross-site"); p.StatusCode != http.StatusForbidden {
			t.Fatalf("cross-site: status %d, want 403", p.StatusCode)
		}
	})
}

func TestLogout(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		newUser(t, s, "agent@example.com", models.RoleAgent)
		b := newBrowser(t, s, web.Config{})
		b.mustLogin("agent@example.com", testPassword)

		// Without the token, logout is refused and the login stays.
		if p := b.post("/logout", url.Values{}); p.StatusCode != http.StatusForbidden {
			t.Fatalf("logout without CSRF: %d", p.StatusCode)
		}
		if p := b.get("/console/sessions"); p.StatusCode != http.StatusOK {
			t.Fatalf("logged out by a forged request: %d", p.StatusCode)
		}

		p := b.submit("/console/sessions", "/logout", nil)
		if p.StatusCode != http.StatusSeeOther || !strings.HasPrefix(p.Header.Get("Location"), "/login") {
			t.Fatalf("logout: %d %q", p.StatusCode, p.Header.Get("Location"))
		}
		if c := cookie(p, handlers.LoginCookieName); c == nil || c.MaxAge >= 0 {
			t.Fatalf("logout did not delete the cookie: %+v", c)
		}
		if p := b.get("/console/sessions"); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("still logged in after logout: %d", p.StatusCode)
		}
		if msg := b.get("/login?logged_out=1").Doc(t).Find(".banner").Text(); !strings.Contains(msg, "logged out") {
			t.Errorf("no logged-out notice: %q", msg)
		}
	})
}

func TestDisabledUserIsLoggedOut(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		u := newUser(t, s, "agent@example.com", models.RoleAgent)
		b := newBrowser(t, s, web.Config{})
		b.mustLogin("agent@example.com", testPassword)
		if err := s.DB.Model(&models.User{}).Where("id = ?", u.ID).Update("disabled", true).Error; err != nil {
			t.Fatal(err)
		}
		p := b.get("/console/sessions")
		if p.StatusCode != http.StatusSeeOther || !strings.HasPrefix(p.Header.Get("Location"), "/login") {
			t.Fatalf("disabled user: %d %q", p.StatusCode, p.Header.Get("Location"))
		}
		if c := cookie(p, handlers.LoginCookieName); c == nil || c.MaxAge >= 0 {
			t.Fatal("the disabled user's cookie was not deleted")
		}
		// And cannot log in again; the message does not say why.
		p = b.login("agent@example.com", testPassword)
		if p.StatusCode != http.StatusUnauthorized || cookie(p, handlers.LoginCookieName) != nil {
			t.Fatalf("disabled user logged in: %d", p.StatusCode)
		}
	})
}

func TestLoginCookieSecureBehindTrustedProxy(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		newUser(t, s, "agent@example.com", models.RoleAgent)
		for _, trust := range []bool{true, false} {
			b := newBrowser(t, s, web.Config{TrustProxy: trust})
			form := url.Values{"email": {"agent@example.com"}, "password": {testPassword}, "_csrf": {b.csrf("/login")}}
			p := b.post("/login", form, "X-Forwarded-Proto", "https")
			c := cookie(p, handlers.LoginCookieName)
			if c == nil {
				t.Fatalf("trust=%v: no cookie (status %d)", trust, p.StatusCode)
			}
			if c.Secure != trust {
				t.Errorf("trust=%v: Secure=%v", trust, c.Secure)
			}
		}
	})
}

func TestLoginWithAnotherKeyIsIgnored(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		newUser(t, s, "agent@example.com", models.RoleAgent)
		b := newBrowser(t, s, web.Config{SessionKey: "first key, long enough to be taken seriously"})
		b.mustLogin("agent@example.com", testPassword)
		// Another server with another key (the cookie jar ignores ports, so
		// the same cookie goes there): the cookie is worthless there.
		other := newBrowser(t, s, web.Config{SessionKey: "second key, long enough to be taken seriously"})
		other.client = b.client
		if p := other.get("/console/sessions"); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("cookie accepted under another key: %d", p.StatusCode)
		}
	})
}
