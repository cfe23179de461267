package handlers

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/sessions"
	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// LoginCookieName names the browser's login session cookie.
const LoginCookieName = "taskpilots_login"

// LoginMaxAge is how long a login lasts; the signed cookie carries its
// timestamp, so an old cookie is refused even if a browser keeps it.
const LoginMaxAge = 12 * time.Hour

// Values of the login cookie: the user's id, and when they logged in (Unix
// seconds), which caps a login at LoginMaxAge even when the cookie is
// rewritten later (flashes).
const (
	userIDKey  = "uid"
	loggedInAt = "at"
)

// wrongCredentials is the one message for every failed login, so that the
// form does not tell which accounts exist.
const wrongCredentials = "Wrong email or password."

// Auth serves the browser login (GET/POST /login, POST /logout) and loads
// the logged-in user of every browser request.
type Auth struct {
	Store *models.Store
	// Cookies stores the login session (a signed, encrypted cookie).
	Cookies *sessions.CookieStore
	// Throttle limits failed logins.
	Throttle *LoginThrottle
	// Secure reports whether the request reached us over HTTPS, which makes
	// the login cookie Secure.
	Secure func(r *http.Request) bool
	Log    *slog.Logger
}

// cookieOptions are the login cookie's attributes for this request.
func (a *Auth) cookieOptions(r *http.Request) *sessions.Options {
	return &sessions.Options{
		Path:     "/",
		MaxAge:   int(LoginMaxAge / time.Second),
		HttpOnly: true,
		SameSite: http.SameSiteLaxMode,
		Secure:   a.Secure != nil && a.Secure(r),
	}
}

// LoadUser reads the login cookie and puts the user into the context (see
// CurrentUser). Users who were disabled or deleted since they logged in are
// logged out here, on their next request.
func (a *Auth) LoadUser() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			sess, err := a.Cookies.New(r, LoginCookieName)
			if err != nil {
				// A cookie signed with another key (a restart without
				// TASKPILOTS_SESSION_KEY) or tampered with: start afresh.
				sess = sessions.NewSession(a.Cookies, LoginCookieName)
				sess.IsNew = true
			}
			sess.Options = a.cookieOptions(r)
			l := &login{store: a.Cookies, session: sess}
			c.Set(loginContextKey, l)
			id, _ := sess.Values[userIDKey].(string)
			if id == "" {
				return next(c)
			}
			if at, _ := sess.Values[loggedInAt].(int64); time.Since(time.Unix(at, 0)) > LoginMaxAge {
				if err := a.clear(c, l); err != nil {
					return err
				}
				return next(c)
			}
			u, err := a.Store.GetUser(r.Context(), id)
			switch {
			case models.ErrorCode(err) == models.ENOTFOUND || (err == nil && u.Disabled):
				a.Log.Info("login ended: user disabled or removed", "user_id", id)
				if err := a.clear(c, l); err != nil {
					return err
				}
			case err != nil:
				return fmt.Errorf("load logged-in user: %w", err)
			default:
				c.Set(userContextKey, &u)
			}
			return next(c)
		}
	}
}

// clear ends the login session: the cookie is deleted.
func (a *Auth) clear(c echo.Context, l *login) error {
	l.session.Values = map[any]any{}
	l.session.Options.MaxAge = -1
	if err := l.save(c); err != nil {
		return fmt.Errorf("clear login cookie: %w", err)
	}
	return nil
}

// LoginForm serves GET /login.
func (a *Auth) LoginForm(c echo.Context) error {
	next := SafeNext(c.QueryParam("next"), "")
	if CurrentUser(c) != nil {
		return c.Redirect(http.StatusSeeOther, SafeNext(next, "/"))
	}
	d := views.LoginData{Next: next}
	if c.QueryParam("logged_out") != "" {
		d.Notice = "You have logged out."
	}
	return Render(c, http.StatusOK, views.LoginPage(d))
}

// loginForm is the body of POST /login.
type loginForm struct {
	Email    string `form:"email"`
	Password string `form:"password"`
	Next     string `form:"next"`
}

// Login serves POST /login: throttle → authenticate → set the cookie.
func (a *Auth) Login(c echo.Context) error {
	var f loginForm
	if err := c.Bind(&f); err != nil {
		return err
	}
	email := strings.ToLower(strings.TrimSpace(f.Email))
	d := views.LoginData{Email: strings.TrimSpace(f.Email), Next: SafeNext(f.Next, "")}
	keys := []string{"account:" + email, "address:" + c.RealIP()}

	if wait := a.Throttle.Blocked(keys...); wait > 0 {
		minutes := int(math.Ceil(wait.Minutes()))
		c.Response().Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		d.Error = fmt.Sprintf("Too many failed attempts. Wait %d minute%s, then try again.", minutes, plural(minutes))
		a.Log.Warn("login throttled", "email", email, "ip", c.RealIP())
		return Render(c, http.StatusTooManyRequests, views.LoginPage(d))
	}

	u, err := a.Store.Authenticate(c.Request().Context(), email, f.Password)
	if err != nil {
		if !errors.Is(err, models.ErrUnauthorized) {
			return fmt.Errorf("log in: %w", err)
		}
		a.Throttle.Fail(keys...)
		a.Log.Info("login failed", "email", email, "ip", c.RealIP(), "reason", err)
		d.Error = wrongCredentials
		return Render(c, http.StatusUnauthorized, views.LoginPage(d))
	}

	a.Throttle.Reset(keys[0])
	l := loginOf(c)
	if l == nil {
		return errors.New("log in: login middleware is not installed")
	}
	// A fresh session: nothing from before the login carries over.
	l.session.Values = map[any]any{userIDKey: u.ID, loggedInAt: time.Now().Unix()}
	l.session.Options = a.cookieOptions(c.Request())
	if err := l.save(c); err != nil {
		return fmt.Errorf("log in: save cookie: %w", err)
	}
	a.Log.Info("login", "user_id", u.ID, "role", u.Role, "ip", c.RealIP())
	return c.Redirect(http.StatusSeeOther, SafeNext(f.Next, "/"))
}

// Logout serves POST /logout.
func (a *Auth) Logout(c echo.Context) error {
	if l := loginOf(c); l != nil {
		if err := a.clear(c, l); err != nil {
			return err
		}
	}
	if u := CurrentUser(c); u != nil {
		a.Log.Info("logout", "user_id", u.ID)
	}
	return c.Redirect(http.StatusSeeOther, "/login?logged_out=1")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// LoginThrottle counts failed logins per key (an account, a client address)
// in a sliding window and blocks a key that reached its limit. It lives in
// the process's memory: each server process counts on its own and a restart
// forgets, which bounds guessing well enough for a console behind a login.
type LoginThrottle struct {
	// Limit returns the failures allowed per window for a key.
	limit  func(key string) int
	window time.Duration
	now    func() time.Time

	mu    sync.Mutex
	fails map[string][]time.Time
}

// maxThrottleKeys bounds the memory an attacker can make the throttle use.
const maxThrottleKeys = 100_000

// NewLoginThrottle allows perAccount failures per account and perAddress per
// client address within window. Keys are "account:EMAIL" and "address:IP".
func NewLoginThrottle(perAccount, perAddress int, window time.Duration, now func() time.Time) *LoginThrottle {
	if now == nil {
		now = time.Now
	}
	return &LoginThrottle{
		limit: func(key string) int {
			if strings.HasPrefix(key, "address:") {
				return perAddress
			}
			return perAccount
		},
		window: window,
		now:    now,
		fails:  map[string][]time.Time{},
	}
}

// recent drops failures older than the window; the caller holds mu.
func (t *LoginThrottle) recent(key string, now time.Time) []time.Time {
	fs := t.fails[key]
	i := 0
	for i < len(fs) && now.Sub(fs[i]) >= t.window {
		i++
	}
	fs = fs[i:]
	if len(fs) == 0 {
		delete(t.fails, key)
		return nil
	}
	t.fails[key] = fs
	return fs
}

// Blocked returns how long until the first of keys that reached its limit
// may try again, or 0 when none is blocked.
func (t *LoginThrottle) Blocked(keys ...string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	var wait time.Duration
	for _, k := range keys {
		fs := t.recent(k, now)
		if n := t.limit(k); len(fs) >= n && n > 0 {
			// Unblocked when enough of the oldest failures leave the window.
			w := fs[len(fs)-n].Add(t.window).Sub(now)
			wait = max(wait, w)
		}
	}
	return wait
}

// Fail records a failed login for each key.
func (t *LoginThrottle) Fail(keys ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if len(t.fails) >= maxThrottleKeys {
		for k := range t.fails {
			t.recent(k, now)
		}
	}
	for _, k := range keys {
		fs := append(t.recent(k, now), now)
		// Only the newest limit failures matter for blocking.
		if n := t.limit(k); n > 0 && len(fs) > n {
			fs = fs[len(fs)-n:]
		}
		if len(t.fails) < maxThrottleKeys || t.fails[k] != nil {
			t.fails[k] = fs
		}
	}
}

// Reset forgets the failures of key (an account after a successful login).
func (t *LoginThrottle) Reset(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.fails, key)
}
