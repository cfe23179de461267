package handlers_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// handClock replaces the store's clock with one the test moves; set it
// before the server starts.
type handClock struct{ at atomic.Int64 }

func handClockOf(s *models.Store) *handClock {
	c := &handClock{}
	c.at.Store(time.Date(2026, 3, 4, 9, 0, 0, 0, time.UTC).UnixMicro())
	s.Now = func() time.Time { return time.UnixMicro(c.at.Load()).UTC() }
	return c
}

func (c *handClock) Add(d time.Duration) { c.at.Add(d.Microseconds()) }

// loggedIn reports whether the browser reaches a console page.
func (b *browser) loggedIn() bool {
	b.t.Helper()
	p := b.get("/console/sessions")
	switch p.StatusCode {
	case http.StatusOK:
		return true
	case http.StatusSeeOther:
		return false
	}
	b.t.Fatalf("GET /console/sessions: status %d", p.StatusCode)
	return false
}

// loginCookie returns the browser's login cookie.
func (b *browser) loginCookie() *http.Cookie {
	u, _ := url.Parse(b.srv.URL)
	for _, c := range b.client.Jar.Cookies(u) {
		if c.Name == handlers.LoginCookieName {
			return c
		}
	}
	return nil
}

// TestLoginCookieAloneIsNotALogin: the cookie names a server-side login;
// once that ends (logout), the same cookie sent again logs nobody in.
func TestLoginCookieAloneIsNotALogin(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		u := newUser(t, s, "agent@example.com", models.RoleAgent)
		b := newBrowser(t, s, web.Config{})
		b.mustLogin("agent@example.com", testPassword)
		stolen := b.loginCookie()
		if stolen == nil {
			t.Fatal("no login cookie")
		}
		var rows []models.Login
		if err := s.DB.Where("user_id = ?", u.ID).Find(&rows).Error; err != nil || len(rows) != 1 {
			t.Fatalf("login rows %d, %v; want 1", len(rows), err)
		}
		if rows[0].UserAgent == "" || rows[0].Address != "127.0.0.1" {
			t.Errorf("login row %+v: want the browser and address", rows[0])
		}

		if p := b.submit("/console/sessions", "/logout", nil); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("logout: %d", p.StatusCode)
		}
		replay := b.fresh()
		srvURL, _ := url.Parse(b.srv.URL)
		replay.client.Jar.SetCookies(srvURL, []*http.Cookie{{Name: stolen.Name, Value: stolen.Value, Path: "/"}})
		if replay.loggedIn() {
			t.Fatal("the cookie of a logged-out login still logs in")
		}
		var row models.Login
		if err := s.DB.Where("id = ?", rows[0].ID).Take(&row).Error; err != nil || !row.RevokedAt.Valid {
			t.Fatalf("after logout the login is %+v (%v), want revoked", row, err)
		}
	})
}

// TestLoginIdleTimeout: a browser unused for the idle timeout is logged out;
// one in use stays until the absolute lifetime.
func TestLoginIdleTimeout(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		clock := handClockOf(s)
		newUser(t, s, "agent@example.com", models.RoleAgent)
		b := newBrowser(t, s, web.Config{LoginIdleTimeout: time.Hour, LoginLifetime: 3 * time.Hour})
		b.mustLogin("agent@example.com", testPassword)
		for i := 0; i < 3; i++ {
			clock.Add(50 * time.Minute)
			if !b.loggedIn() {
				t.Fatalf("logged out after %d × 50 min of use", i+1)
			}
		}
		clock.Add(31 * time.Minute) // 3h01m since sign-in
		if b.loggedIn() {
			t.Fatal("still logged in past the lifetime")
		}

		b.mustLogin("agent@example.com", testPassword)
		clock.Add(time.Hour)
		p := b.get("/console/sessions")
		if p.StatusCode != http.StatusSeeOther {
			t.Fatalf("idle for an hour: status %d, want the login page", p.StatusCode)
		}
		if c := cookie(p, handlers.LoginCookieName); c == nil || c.MaxAge >= 0 {
			t.Fatal("the ended login's cookie was not deleted")
		}
	})
}

// passwordForm posts the change-password form.
func (b *browser) changePassword(current, next, confirm string) page {
	b.t.Helper()
	return b.submit(handlers.PasswordPath, handlers.PasswordPath, url.Values{
		"current_password": {current}, "new_password": {next}, "confirm_password": {confirm}})
}

func TestChangePasswordPage(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		newUser(t, s, "agent@example.com", models.RoleAgent)
		b := newBrowser(t, s, web.Config{})
		other := b.fresh()
		b.mustLogin("agent@example.com", testPassword)
		other.mustLogin("agent@example.com", testPassword)

		doc := getDoc(b, handlers.PasswordPath)
		form := doc.Find(`form[data-testid="password-form"]`)
		for _, name := range []string{"current_password", "new_password", "confirm_password", "_csrf"} {
			if form.Find(`input[name="`+name+`"]`).Length() != 1 {
				t.Errorf("password form lacks %s", name)
			}
		}
		if n := doc.Find(`[data-testid="logins"] tbody tr`).Length(); n != 2 {
			t.Errorf("%d logins listed, want 2", n)
		}

		// Mistakes are shown inline, with 422, and change nothing.
		const strong = "violet staple orbit 42"
		for _, tc := range []struct{ current, next, confirm, field string }{
			{"wrong password!", strong, strong, "current_password"},
			{testPassword, "password1234", "password1234", "new_password"},
			{testPassword, "short", "short", "new_password"},
			{testPassword, strong, strong + "x", "confirm_password"},
		} {
			p := b.changePassword(tc.current, tc.next, tc.confirm)
			if p.StatusCode != http.StatusUnprocessableEntity {
				t.Fatalf("%+v: status %d, want 422", tc, p.StatusCode)
			}
			if msg := p.Doc(t).Find(`[data-testid="field-error"][data-field="` + tc.field + `"]`).Text(); msg == "" {
				t.Errorf("%+v: no inline error on %s\n%s", tc, tc.field, p.Body)
			}
			if strings.Contains(p.Body, tc.next) || strings.Contains(p.Body, tc.current) {
				t.Errorf("%+v: a password is echoed back", tc)
			}
		}
		if !other.loggedIn() || !b.loggedIn() {
			t.Fatal("a refused change logged someone out")
		}

		p := b.changePassword(testPassword, strong, strong)
		if p.StatusCode != http.StatusSeeOther {
			t.Fatalf("change: status %d\n%s", p.StatusCode, p.Body)
		}
		if !b.loggedIn() {
			t.Fatal("the browser that changed the password was logged out")
		}
		if other.loggedIn() {
			t.Fatal("another browser stays logged in after a password change")
		}
		if p := b.fresh().login("agent@example.com", testPassword); p.StatusCode != http.StatusUnauthorized {
			t.Fatalf("old password: status %d", p.StatusCode)
		}
		b.fresh().mustLogin("agent@example.com", strong)
	})
}

// TestChangePasswordThrottled: guessing the current password through the
// form is throttled like the login form.
func TestChangePasswordThrottled(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		handClockOf(s)
		newUser(t, s, "agent@example.com", models.RoleAgent)
		b := newBrowser(t, s, web.Config{LoginFailuresPerAccount: 2})
		b.mustLogin("agent@example.com", testPassword)
		const strong = "violet staple orbit 42"
		for i := 0; i < 2; i++ {
			if p := b.changePassword("guess "+string(rune('a'+i))+" wrong!!", strong, strong); p.StatusCode != http.StatusUnprocessableEntity {
				t.Fatalf("guess %d: %d", i, p.StatusCode)
			}
		}
		p := b.changePassword(testPassword, strong, strong)
		if p.StatusCode != http.StatusTooManyRequests || p.Header.Get("Retry-After") == "" {
			t.Fatalf("after 2 wrong guesses: status %d, want 429 with Retry-After", p.StatusCode)
		}
		if msg := p.Doc(t).Find(`[data-testid="form-error"]`).Text(); !strings.Contains(msg, "Try again in") {
			t.Errorf("message %q", msg)
		}
	})
}

func TestSignOutEverywhere(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		newUser(t, s, "agent@example.com", models.RoleAgent)
		newUser(t, s, "other@example.com", models.RoleAgent)
		b := newBrowser(t, s, web.Config{})
		second, stranger := b.fresh(), b.fresh()
		b.mustLogin("agent@example.com", testPassword)
		second.mustLogin("agent@example.com", testPassword)
		stranger.mustLogin("other@example.com", testPassword)

		p := b.submit(handlers.PasswordPath, "/console/account/sign-out-everywhere", nil)
		if p.StatusCode != http.StatusSeeOther || !strings.HasPrefix(p.Header.Get("Location"), "/login") {
			t.Fatalf("sign out everywhere: %d %q", p.StatusCode, p.Header.Get("Location"))
		}
		if b.loggedIn() || second.loggedIn() {
			t.Fatal("a login of the user survived sign out everywhere")
		}
		if !stranger.loggedIn() {
			t.Fatal("another user was signed out")
		}
		if msg := b.get(p.Header.Get("Location")).Doc(t).Find(".banner").Text(); !strings.Contains(msg, "signed out everywhere") {
			t.Errorf("notice %q", msg)
		}
	})
}

// TestAdminActionsEndLogins: an admin's disable and password reset end the
// user's logins at once (enabling again does not bring them back).
func TestAdminActionsEndLogins(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		base := newBrowser(t, s, web.Config{})
		admin, _ := agent(t, base, "Root Admin", models.RoleAdmin)
		user, u := agent(t, base, "Ann Agent", models.RoleAgent)
		if p := admin.submit("/console/admin/users", "/console/admin/users/"+u.ID+"/disable", nil); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("disable: %d", p.StatusCode)
		}
		if p := admin.submit("/console/admin/users", "/console/admin/users/"+u.ID+"/enable", nil); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("enable: %d", p.StatusCode)
		}
		if user.loggedIn() {
			t.Fatal("a login survived disabling the user")
		}

		user.mustLogin(u.Email, testPassword)
		p := admin.submit("/console/admin/users", "/console/admin/users/"+u.ID+"/reset-password", nil)
		if p.StatusCode != http.StatusOK {
			t.Fatalf("reset: %d", p.StatusCode)
		}
		if user.loggedIn() {
			t.Fatal("a login survived a password reset")
		}
		pw := strings.TrimSpace(p.Doc(t).Find(`[data-testid="secret-value"]`).Text())
		if pw == "" {
			t.Fatalf("no reset password shown:\n%s", p.Body)
		}
		// The admin saw it: the user must choose their own first.
		p = user.login(u.Email, pw)
		if p.StatusCode != http.StatusSeeOther || p.Header.Get("Location") != handlers.PasswordPath {
			t.Fatalf("login with the reset password: %d %q, want the password page", p.StatusCode, p.Header.Get("Location"))
		}
	})
}

// TestFirstAdminMustChangePassword: the generated first admin reaches only
// the account page until they choose their own password.
func TestFirstAdminMustChangePassword(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		email, pw, ok, err := s.EnsureAdmin(context.Background())
		if err != nil || !ok {
			t.Fatalf("EnsureAdmin: %v %v", ok, err)
		}
		b := newBrowser(t, s, web.Config{})
		next := b.get("/console/admin/users").Header.Get("Location")
		nu, _ := url.Parse(next)
		form := url.Values{"email": {email}, "password": {pw}, "next": {nu.Query().Get("next")}}
		form.Set("_csrf", b.csrf(next))
		p := b.post("/login", form)
		if p.StatusCode != http.StatusSeeOther || p.Header.Get("Location") != handlers.PasswordPath+"?next=%2Fconsole%2Fadmin%2Fusers" {
			t.Fatalf("first sign-in: %d %q, want the password page", p.StatusCode, p.Header.Get("Location"))
		}
		for _, path := range []string{"/console", "/console/sessions", "/console/admin/users", "/console/reviews"} {
			p := b.get(path)
			if p.StatusCode != http.StatusSeeOther || !strings.HasPrefix(p.Header.Get("Location"), handlers.PasswordPath) {
				t.Errorf("GET %s before the change: %d %q", path, p.StatusCode, p.Header.Get("Location"))
			}
		}
		if p := b.get("/console/sessions", "HX-Request", "true"); p.Header.Get("HX-Redirect") == "" {
			t.Errorf("htmx request before the change: no HX-Redirect (%d)", p.StatusCode)
		}
		// Forms are held back too.
		if p := b.submit(handlers.PasswordPath, "/console/admin/users", url.Values{"email": {"x@example.com"}}); p.StatusCode != http.StatusSeeOther {
			t.Errorf("POST before the change: %d", p.StatusCode)
		}
		doc := getDoc(b, handlers.PasswordPath)
		if doc.Find(`[data-testid="must-change"]`).Length() != 1 {
			t.Error("no must-change notice")
		}
		if v, _ := doc.Find(`input[name="next"]`).Attr("value"); v != "" {
			t.Errorf("next %q on a page opened without one", v)
		}
		const strong = "violet staple orbit 42"
		if p := b.submit(handlers.PasswordPath+"?next=/console/admin/users", handlers.PasswordPath,
			url.Values{"current_password": {pw}, "new_password": {strong}, "confirm_password": {strong}, "next": {"/console/admin/users"}}); p.StatusCode != http.StatusSeeOther || p.Header.Get("Location") != "/console/admin/users" {
			t.Fatalf("change: %d %q", p.StatusCode, p.Header.Get("Location"))
		}
		if p := b.get("/console/admin/users"); p.StatusCode != http.StatusOK {
			t.Fatalf("after the change: %d", p.StatusCode)
		}
		if msg := squash(getDoc(b, "/console/sessions").Find(".banner")); msg != "" && !strings.Contains(msg, "password") {
			t.Logf("banner %q", msg)
		}
	})
}

// TestCSRFBoundToLogin: once logged in, only the login's own token counts:
// the token of the login form (from before the sign-in) and the token of
// another login of the same user are refused.
func TestCSRFBoundToLogin(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		newUser(t, s, "agent@example.com", models.RoleAgent)
		b := newBrowser(t, s, web.Config{})
		before := b.csrf("/login")
		b.post("/login", url.Values{"email": {"agent@example.com"}, "password": {testPassword}, "_csrf": {before}})
		if !b.loggedIn() {
			t.Fatal("login failed")
		}
		after := b.csrf("/console/sessions")
		if after == before {
			t.Fatal("the CSRF token was not rotated at sign-in")
		}
		other := b.fresh()
		other.mustLogin("agent@example.com", testPassword)
		otherToken := other.csrf("/console/sessions")

		for name, tok := range map[string]string{"pre-login": before, "another login's": otherToken, "empty": ""} {
			if p := b.post("/logout", url.Values{"_csrf": {tok}}); p.StatusCode != http.StatusForbidden {
				t.Errorf("%s token: status %d, want 403", name, p.StatusCode)
			}
			if p := b.post("/logout", url.Values{}, "X-CSRF-Token", tok); p.StatusCode != http.StatusForbidden {
				t.Errorf("%s token in the header: status %d, want 403", name, p.StatusCode)
			}
		}
		// Never from the query string, even the right one.
		if p := b.post("/logout?_csrf="+url.QueryEscape(after), url.Values{}); p.StatusCode != http.StatusForbidden {
			t.Errorf("token in the query: status %d, want 403", p.StatusCode)
		}
		if !b.loggedIn() {
			t.Fatal("logged out by a refused request")
		}
		if p := b.post("/logout", url.Values{"_csrf": {after}}); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("own token: %d", p.StatusCode)
		}
		// After logout, the login's token is worthless on the login form.
		if p := b.post("/login", url.Values{"email": {"agent@example.com"}, "password": {testPassword}, "_csrf": {after}}); p.StatusCode != http.StatusForbidden {
			t.Fatalf("ended login's token on the login form: %d", p.StatusCode)
		}
		// And so is the token of before the first sign-in (rotated then).
		if p := b.post("/login", url.Values{"email": {"agent@example.com"}, "password": {testPassword}, "_csrf": {before}}); p.StatusCode != http.StatusForbidden {
			t.Fatalf("pre-sign-in token after logout: %d", p.StatusCode)
		}
	})
}

// TestLoginThrottleOtherAddress: an attacker failing over and over from one
// address is refused there, with how long to wait; the user, from another
// address, logs in at once. The counts are in the database: a second server
// on it (another replica) refuses the attacker too.
func TestLoginThrottleOtherAddress(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		handClockOf(s)
		newUser(t, s, "agent@example.com", models.RoleAgent)
		cfg := web.Config{TrustProxy: true, LoginFailuresPerAccount: 3, LoginFailuresPerAddress: 10}
		attacker := newBrowser(t, s, cfg)
		from := func(b *browser, addr, password string) page {
			form := url.Values{"email": {"agent@example.com"}, "password": {password}, "_csrf": {b.csrf("/login")}}
			return b.post("/login", form, "X-Forwarded-For", addr)
		}
		for i := 0; i < 3; i++ {
			if p := from(attacker, "203.0.113.5", "wrong password!"); p.StatusCode != http.StatusUnauthorized {
				t.Fatalf("guess %d: %d", i, p.StatusCode)
			}
		}
		p := from(attacker, "203.0.113.5", "wrong password!")
		if p.StatusCode != http.StatusTooManyRequests || p.Header.Get("Retry-After") != "1" {
			t.Fatalf("attacker after 3 failures: %d Retry-After %q, want 429 and 1", p.StatusCode, p.Header.Get("Retry-After"))
		}
		if msg := p.Doc(t).Find(`[data-testid="login-error"]`).Text(); !strings.Contains(msg, "Try again in 1 s") {
			t.Errorf("message %q", msg)
		}
		replica := newBrowser(t, s, cfg)
		if p := from(replica, "203.0.113.5", testPassword); p.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("attacker on another replica: %d, want 429", p.StatusCode)
		}
		user := attacker.fresh()
		if p := from(user, "198.51.100.7", testPassword); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("user from another address: %d, want 303", p.StatusCode)
		}
	})
}
