package handlers

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// CSRF protection. A logged-in browser's token is its login's (stored with
// the login, made at sign-in): a token from before the sign-in, from another
// login, or from a login that ended is refused. An anonymous browser (the
// login form) gets a token in a cookie of its own, compared with the form's
// (double submit); it is replaced at sign-in.

// CSRFField is the form field that carries the CSRF token; htmx sends the
// X-CSRF-Token header instead (static/app.js).
const CSRFField = "_csrf"

// AnonCSRFCookieName holds the token of a browser that is not logged in.
const AnonCSRFCookieName = "taskpilots_csrf"

// anonCSRFMaxAge keeps the login form's token for a working day.
const anonCSRFMaxAge = 12 * time.Hour

// ErrCSRFInQuery is a token in the URL: URLs leak (logs, history, Referer),
// so only the body or the header may carry it.
var ErrCSRFInQuery = errors.New("CSRF token in the query string")

// CSRFTokenFrom returns the CSRF token a request carries: the X-CSRF-Token
// header, else the _csrf field of a url-encoded or multipart body. The query
// string never supplies it: a request with _csrf in its query is refused
// with ErrCSRFInQuery, whatever its body holds.
func CSRFTokenFrom(r *http.Request) (string, error) {
	if r.URL.Query().Has(CSRFField) {
		return "", ErrCSRFInQuery
	}
	if t := r.Header.Get(echo.HeaderXCSRFToken); t != "" {
		return t, nil
	}
	// PostFormValue reads the body only (never the query); a body that is
	// not a form gives "".
	return r.PostFormValue(CSRFField), nil
}

// safeMethod reports the methods that must not change state, which the
// CSRF check lets through.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions || m == http.MethodTrace
}

// CSRF checks every state-changing browser request; install it after
// LoadUser, which finds the login whose token counts. Browsers that say a
// request comes from another site (Sec-Fetch-Site: cross-site) are refused
// even with a token. The bearer-token API is exempt (the caller skips it):
// browsers do not attach bearer tokens by themselves.
func (a *Auth) CSRF() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			var want string
			if l := loginOf(c); l != nil && l.record != nil {
				want = l.record.CSRFSecret
			} else {
				want = a.anonymousCSRF(c)
			}
			c.Set(CSRFContextKey, want)
			if safeMethod(r.Method) {
				return next(c)
			}
			if r.Header.Get(echo.HeaderSecFetchSite) == "cross-site" {
				return ErrCSRF
			}
			got, err := CSRFTokenFrom(r)
			if err != nil || got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
				return ErrCSRF
			}
			return next(c)
		}
	}
}

// anonymousCSRF returns the anonymous browser's token, making (and setting)
// one when it has none.
func (a *Auth) anonymousCSRF(c echo.Context) string {
	if ck, err := c.Cookie(AnonCSRFCookieName); err == nil && len(ck.Value) >= 32 {
		return ck.Value
	}
	t := models.RandomSecret(32)
	a.setAnonymousCSRF(c, t)
	return t
}

func (a *Auth) setAnonymousCSRF(c echo.Context, token string) {
	r := c.Request()
	c.SetCookie(&http.Cookie{
		Name: AnonCSRFCookieName, Value: token, Path: "/",
		MaxAge: int(anonCSRFMaxAge / time.Second), HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: a.Secure != nil && a.Secure(r),
	})
}
