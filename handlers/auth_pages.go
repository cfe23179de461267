package handlers

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/sessions"
	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// Cookie names. The login cookie (signed and encrypted by gorilla/sessions)
// carries only the secret of a server-side login (models.Login);
// flashes ride in a cookie of their own, so that they never touch it.
const (
	LoginCookieName = "taskpilots_login"
	FlashCookieName = "taskpilots_flash"
)

// loginSecretKey is the login cookie's one value.
const loginSecretKey = "login"

// wrongCredentials is the one message for every failed login, so that the
// form does not tell which accounts exist.
const wrongCredentials = "Wrong email or password."

// Auth serves the browser login (GET/POST /login, POST /logout), the
// account page (password change, sign out everywhere), loads the login of
// every browser request and checks its CSRF token (CSRF).
type Auth struct {
	Store *models.Store
	// Cookies signs and encrypts the login and flash cookies.
	Cookies *sessions.CookieStore
	// Logins is how long a login lasts (idle timeout, absolute lifetime).
	Logins models.LoginPolicy
	// Throttle slows password guessing (stored in the database, so every
	// replica counts together).
	Throttle models.ThrottlePolicy
	// Secure reports whether the request reached us over HTTPS, which makes
	// the cookies Secure.
	Secure func(r *http.Request) bool
	Log    *slog.Logger
}

// cookieOptions are the login cookie's attributes for this request. The
// browser may keep it for the absolute lifetime; the server ends the login
// sooner when it is idle or revoked.
func (a *Auth) cookieOptions(r *http.Request, maxAge time.Duration) *sessions.Options {
	return &sessions.Options{
		Path:     "/",
		MaxAge:   int(maxAge / time.Second),
		HttpOnly: true,
		SameSite: http.SameSiteLaxMode,
		Secure:   a.Secure != nil && a.Secure(r),
	}
}

// readCookie decodes a gorilla cookie, or starts an empty one when it is
// missing or was signed with another key (a restart without
// TASKPILOTS_SESSION_KEY) or tampered with.
func (a *Auth) readCookie(r *http.Request, name string, maxAge time.Duration) *sessions.Session {
	sess, err := a.Cookies.New(r, name)
	if err != nil {
		sess = sessions.NewSession(a.Cookies, name)
		sess.IsNew = true
	}
	sess.Options = a.cookieOptions(r, maxAge)
	return sess
}

// LoadUser reads the login cookie, resumes its login (models.ResumeLogin)
// and puts the login and its user into the context (see CurrentUser). A
// login that no longer holds (revoked, idle, too old, user disabled) is
// logged out here: the cookie is deleted and the request goes on anonymous.
func (a *Auth) LoadUser() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			p := a.Logins.WithDefaults()
			l := &login{
				store:   a.Cookies,
				session: a.readCookie(r, LoginCookieName, p.Lifetime),
				flashes: a.readCookie(r, FlashCookieName, 0),
			}
			c.Set(loginContextKey, l)
			secret, _ := l.session.Values[loginSecretKey].(string)
			if secret == "" {
				return next(c)
			}
			rec, u, err := a.Store.ResumeLogin(r.Context(), secret, p)
			switch {
			case errors.Is(err, models.ErrLoginEnded):
				a.Log.Info("login ended", "reason", err.Error(), "ip", c.RealIP())
				if err := a.clear(c, l); err != nil {
					return err
				}
			case err != nil:
				return fmt.Errorf("load logged-in user: %w", err)
			default:
				l.record, l.secret = &rec, secret
				c.Set(userContextKey, &u)
			}
			return next(c)
		}
	}
}

// clear forgets the login in this browser: the cookie is deleted.
func (a *Auth) clear(c echo.Context, l *login) error {
	l.session.Values = map[any]any{}
	l.session.Options.MaxAge = -1
	l.record, l.secret = nil, ""
	c.Set(userContextKey, nil)
	if err := l.save(c); err != nil {
		return fmt.Errorf("clear login cookie: %w", err)
	}
	return nil
}

// begin starts a new login of u for this browser and writes its cookie; the
// login's CSRF token replaces the anonymous one (rotated too, so that a
// token from before the sign-in is worthless even after a later logout).
func (a *Auth) begin(c echo.Context, u models.User) error {
	l := loginOf(c)
	if l == nil {
		return errors.New("log in: login middleware is not installed")
	}
	r := c.Request()
	p := a.Logins.WithDefaults()
	secret, rec, err := a.Store.StartLogin(r.Context(), u.ID, models.LoginMeta{UserAgent: r.UserAgent(), Address: c.RealIP()}, p)
	if err != nil {
		return err
	}
	// A fresh cookie: nothing from before the login carries over.
	l.session.Values = map[any]any{loginSecretKey: secret}
	l.session.Options = a.cookieOptions(r, p.Lifetime)
	if err := l.save(c); err != nil {
		return fmt.Errorf("log in: save cookie: %w", err)
	}
	l.record, l.secret = &rec, secret
	c.Set(userContextKey, &u)
	c.Set(CSRFContextKey, rec.CSRFSecret)
	a.setAnonymousCSRF(c, models.RandomSecret(32))
	return nil
}

// LoginForm serves GET /login.
func (a *Auth) LoginForm(c echo.Context) error {
	next := SafeNext(c.QueryParam("next"), "")
	if CurrentUser(c) != nil {
		return c.Redirect(http.StatusSeeOther, SafeNext(next, "/"))
	}
	d := views.LoginData{Next: next}
	switch {
	case c.QueryParam("everywhere") != "":
		d.Notice = "You have signed out everywhere: every browser logged in as you must log in again."
	case c.QueryParam("logged_out") != "":
		d.Notice = "You have logged out."
	}
	return Render(c, http.StatusOK, views.LoginPage(d))
}

// LoginInput is the decoded body of POST /login.
type LoginInput struct {
	// Email is trimmed and lower-cased: how accounts are looked up and
	// throttled.
	Email string
	// TypedEmail is what the user typed, trimmed, to show again.
	TypedEmail string
	Password   string
	// Next is a same-site path to go on to, or "".
	Next string
}

// DecodeLoginForm reads the login form of c's request body. It fails only
// when the body cannot be read as a form (the error handler answers 4xx).
func DecodeLoginForm(c echo.Context) (LoginInput, error) {
	var f struct {
		Email    string `form:"email"`
		Password string `form:"password"`
		Next     string `form:"next"`
	}
	if err := c.Bind(&f); err != nil {
		return LoginInput{}, err
	}
	typed := strings.TrimSpace(f.Email)
	return LoginInput{Email: strings.ToLower(typed), TypedEmail: typed, Password: f.Password, Next: SafeNext(f.Next, "")}, nil
}

// waitMessage says how long to wait, in seconds (rounded up).
func waitMessage(c echo.Context, wait time.Duration) string {
	secs := int(math.Ceil(wait.Seconds()))
	c.Response().Header().Set("Retry-After", strconv.Itoa(secs))
	return fmt.Sprintf("Too many failed attempts. Try again in %d s.", secs)
}

// logEmail is a typed email as logs show it: bounded, since the form
// accepts anything up to the body limit.
func logEmail(email string) string {
	if len(email) > 254 {
		return email[:254] + "…"
	}
	return email
}

// Login serves POST /login: throttle → authenticate → start a login.
func (a *Auth) Login(c echo.Context) error {
	in, err := DecodeLoginForm(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	d := views.LoginData{Email: in.TypedEmail, Next: in.Next}
	ip := c.RealIP()

	wait, err := a.Store.LoginWait(ctx, a.Throttle, in.Email, ip)
	if err != nil {
		return err
	}
	if wait > 0 {
		d.Error = waitMessage(c, wait)
		a.Log.Warn("login throttled", "email", logEmail(in.Email), "ip", ip, "wait", wait)
		return Render(c, http.StatusTooManyRequests, views.LoginPage(d))
	}

	u, err := a.Store.Authenticate(ctx, in.Email, in.Password)
	if err != nil {
		if !errors.Is(err, models.ErrUnauthorized) {
			return fmt.Errorf("log in: %w", err)
		}
		if _, err := a.Store.RecordLoginFailure(ctx, a.Throttle, in.Email, ip); err != nil {
			return err
		}
		a.Log.Info("login failed", "email", logEmail(in.Email), "ip", ip, "reason", err)
		d.Error = wrongCredentials
		return Render(c, http.StatusUnauthorized, views.LoginPage(d))
	}

	if err := a.Store.ClearLoginFailures(ctx, a.Throttle, in.Email, ip); err != nil {
		return err
	}
	if err := a.begin(c, u); err != nil {
		return err
	}
	a.Log.Info("login", "user_id", u.ID, "role", u.Role, "ip", ip)
	if u.MustChangePassword {
		return c.Redirect(http.StatusSeeOther, passwordPageURL(in.Next))
	}
	return c.Redirect(http.StatusSeeOther, SafeNext(in.Next, "/"))
}

// Logout serves POST /logout: the login is revoked, the cookie deleted.
func (a *Auth) Logout(c echo.Context) error {
	u := CurrentUser(c)
	if l := loginOf(c); l != nil {
		if l.secret != "" {
			if err := a.Store.EndLogin(c.Request().Context(), l.secret); err != nil {
				return err
			}
		}
		if err := a.clear(c, l); err != nil {
			return err
		}
	}
	if u != nil {
		a.Log.Info("logout", "user_id", u.ID)
	}
	return c.Redirect(http.StatusSeeOther, "/login?logged_out=1")
}

// PasswordPath is the account page: change your password, sign out
// everywhere.
const PasswordPath = "/console/account/password"

// passwordPageURL is the account page, going on to next afterwards.
func passwordPageURL(next string) string {
	if next = SafeNext(next, ""); next != "" && next != PasswordPath {
		return PasswordPath + "?next=" + url.QueryEscape(next)
	}
	return PasswordPath
}

func (a *Auth) renderPassword(c echo.Context, status int, d views.PasswordData) error {
	u := CurrentUser(c)
	d.MustChange = u.MustChangePassword
	d.Next = SafeNext(d.Next, "")
	d.MinLength = models.MinPasswordLen
	if d.TimeZoneError == "" {
		d.TimeZone = u.TimeZone
	}
	logins, err := a.Store.ListUserLogins(c.Request().Context(), u.ID, a.Logins)
	if err != nil {
		return err
	}
	for _, l := range logins {
		d.Logins = append(d.Logins, views.LoginRow{
			Started: l.CreatedAt.Time, LastSeen: l.LastSeenAt.Time, UserAgent: l.UserAgent, Address: l.Address,
			Current: loginOf(c) != nil && loginOf(c).record != nil && loginOf(c).record.ID == l.ID,
		})
	}
	return Render(c, status, views.PasswordPage(d))
}

// PasswordPage serves GET /console/account/password.
func (a *Auth) PasswordPage(c echo.Context) error {
	return a.renderPassword(c, http.StatusOK, views.PasswordData{Next: c.QueryParam("next")})
}

// ChangePassword serves POST /console/account/password. A wrong current
// password counts as a failed login (the form would otherwise let whoever
// holds a stolen login guess the password unthrottled). On success every
// login of the user is revoked and this browser gets a new one.
func (a *Auth) ChangePassword(c echo.Context) error {
	ctx := c.Request().Context()
	u := CurrentUser(c)
	next := SafeNext(c.FormValue("next"), "")
	d := views.PasswordData{Next: next}
	ip := c.RealIP()
	wait, err := a.Store.LoginWait(ctx, a.Throttle, u.Email, ip)
	if err != nil {
		return err
	}
	if wait > 0 {
		d.Error = waitMessage(c, wait)
		return a.renderPassword(c, http.StatusTooManyRequests, d)
	}
	in := models.ChangePasswordInput{Current: c.FormValue("current_password"), New: c.FormValue("new_password"), Confirm: c.FormValue("confirm_password")}
	changed, err := a.Store.ChangePassword(ctx, u.ID, in)
	if errs, ok := fieldErrors(err); ok {
		if _, wrong := errs["current_password"]; wrong {
			if _, err := a.Store.RecordLoginFailure(ctx, a.Throttle, u.Email, ip); err != nil {
				return err
			}
		}
		d.Errors = errs
		d.Error = "Your password was not changed."
		return a.renderPassword(c, http.StatusUnprocessableEntity, d)
	}
	if err != nil {
		return err
	}
	if err := a.begin(c, changed); err != nil {
		return err
	}
	a.Log.Info("password changed", "user_id", u.ID, "ip", ip)
	if err := AddFlash(c, views.Banner{Kind: "success", Text: "Your password is changed. Every other browser logged in as you was signed out."}); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, SafeNext(next, "/"))
}

// SignOutEverywhere serves POST /console/account/sign-out-everywhere: every
// login of the user is revoked, this one included.
func (a *Auth) SignOutEverywhere(c echo.Context) error {
	u := CurrentUser(c)
	n, err := a.Store.RevokeUserLogins(c.Request().Context(), u.ID)
	if err != nil {
		return err
	}
	if l := loginOf(c); l != nil {
		if err := a.clear(c, l); err != nil {
			return err
		}
	}
	a.Log.Info("signed out everywhere", "user_id", u.ID, "logins", n)
	return c.Redirect(http.StatusSeeOther, "/login?everywhere=1")
}

// SetTimeZone serves POST /console/account/time-zone: the user's time zone,
// the fallback for times shown without the browser's zone. A name that is
// not a time zone re-renders the form with the error and what was typed.
func (a *Auth) SetTimeZone(c echo.Context) error {
	u := CurrentUser(c)
	tz := strings.TrimSpace(c.FormValue("time_zone"))
	err := a.Store.SetTimeZone(c.Request().Context(), u.ID, tz)
	if errs, ok := fieldErrors(err); ok {
		return a.renderPassword(c, http.StatusUnprocessableEntity, views.PasswordData{TimeZone: tz, TimeZoneError: "The time zone " + errs["time_zone"] + "."})
	}
	if err != nil {
		return err
	}
	text := "Time zone saved: " + tz + "."
	if tz == "" {
		text = "Time zone cleared: times without script are shown in UTC."
	}
	if err := AddFlash(c, views.Banner{Kind: "success", Text: text}); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, PasswordPath)
}
