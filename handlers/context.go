package handlers

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/a-h/templ"
	"github.com/gorilla/sessions"
	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// Keys of values kept in echo.Context.
const (
	// CSRFContextKey is where the CSRF middleware stores the token.
	CSRFContextKey = "csrf"
	// RequestIDContextKey is where the request id middleware stores the id.
	RequestIDContextKey = "request_id"

	userContextKey  = "handoff.user"
	loginContextKey = "handoff.login"
)

// CurrentUser returns the logged-in user of the request, or nil.
func CurrentUser(c echo.Context) *models.User {
	u, _ := c.Get(userContextKey).(*models.User)
	return u
}

// CSRFToken returns the CSRF token to embed in forms (views.CSRFField does
// it for templ pages).
func CSRFToken(c echo.Context) string {
	t, _ := c.Get(CSRFContextKey).(string)
	return t
}

// RequestID returns the request's id (also in the X-Request-ID header).
func RequestID(c echo.Context) string {
	id, _ := c.Get(RequestIDContextKey).(string)
	return id
}

// PageContext builds what every page needs from the request: user, CSRF
// token, path and request id. It does not consume flashes.
func PageContext(c echo.Context) views.PageContext {
	return views.PageContext{
		User:      CurrentUser(c),
		CSRF:      CSRFToken(c),
		Path:      c.Request().URL.Path,
		RequestID: RequestID(c),
	}
}

// Render renders a templ component as the response, with the page context
// (user, CSRF token, banners) in its ctx. Pending flashes are shown and
// cleared. HTML answers are never cached: they are per user.
func Render(c echo.Context, status int, t templ.Component) error {
	p := PageContext(c)
	p.Banners = popFlashes(c)
	ctx := views.WithPageContext(c.Request().Context(), p)
	return renderWith(ctx, c, status, t)
}

// renderWith sends t as the response with status. The page is rendered into
// a pooled buffer and sent with one write and a
// Content-Length: rendered straight into the response, an 85 KB inbox went
// out in some twenty 4 KB writes, each a system call, which a profile of
// bench pages put at a third of the rendering's cost. A component that fails
// halfway now fails before anything is sent.
func renderWith(ctx context.Context, c echo.Context, status int, t templ.Component) error {
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	h.Set("Cache-Control", "no-store")
	if c.Request().Method == http.MethodHead {
		c.Response().WriteHeader(status)
		return nil
	}
	buf := renderBuffers.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledRender {
			buf.Reset()
			renderBuffers.Put(buf)
		}
	}()
	buf.Reset()
	if err := t.Render(ctx, buf); err != nil {
		return err
	}
	h.Set(echo.HeaderContentLength, strconv.Itoa(buf.Len()))
	c.Response().WriteHeader(status)
	_, err := c.Response().Write(buf.Bytes())
	return err
}

// renderBuffers pools the buffers pages are rendered into; one larger than
// maxPooledRender (a rare huge page) is left to the garbage collector.
var renderBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledRender = 1 << 20

// login is the browser's login, loaded by Auth.LoadUser: the login cookie,
// the flash cookie, and the server-side login when there is one.
type login struct {
	store   sessions.Store
	session *sessions.Session
	flashes *sessions.Session
	// record is the login that holds (nil: anonymous); secret its cookie's.
	record *models.Login
	secret string
}

// save writes the login cookie.
func (l *login) save(c echo.Context) error {
	return l.store.Save(c.Request(), c.Response().Writer, l.session)
}

func loginOf(c echo.Context) *login {
	l, _ := c.Get(loginContextKey).(*login)
	return l
}

// flashSep separates a flash's kind from its text in the cookie; gorilla
// stores flashes with gob, and plain strings need no type registration.
const flashSep = "\x00"

// AddFlash queues a banner for the next page this browser renders, the
// usual companion of a redirect after a successful form post. It writes the
// login cookie, so call it before writing the response.
func AddFlash(c echo.Context, b views.Banner) error {
	l := loginOf(c)
	if l == nil {
		return nil
	}
	l.flashes.AddFlash(b.Kind + flashSep + b.Text)
	return l.store.Save(c.Request(), c.Response().Writer, l.flashes)
}

// popFlashes returns and clears the pending flashes.
func popFlashes(c echo.Context) []views.Banner {
	l := loginOf(c)
	if l == nil || len(l.flashes.Values) == 0 {
		return nil
	}
	raw := l.flashes.Flashes()
	if len(raw) == 0 {
		return nil
	}
	out := make([]views.Banner, 0, len(raw))
	for _, f := range raw {
		s, ok := f.(string)
		if !ok {
			continue
		}
		kind, text, _ := strings.Cut(s, flashSep)
		out = append(out, views.Banner{Kind: kind, Text: text})
	}
	// Best effort: a flash shown twice is better than a page that fails.
	_ = l.store.Save(c.Request(), c.Response().Writer, l.flashes)
	return out
}

// RequireUser lets through logged-in users with one of roles (any role when
// none is given; admins always). Anonymous browsers are sent to the login
// page and come back afterwards; users with another role get 403. A user
// who must change their password is sent to the account page first.
func RequireUser(roles ...models.Role) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			u := CurrentUser(c)
			if u == nil {
				return redirectToLogin(c)
			}
			if u.MustChangePassword {
				return redirectTo(c, passwordPageURL(pageURI(c)))
			}
			if !Allowed(u, roles...) {
				return echo.NewHTTPError(http.StatusForbidden, "Your role ("+string(u.Role)+") does not give access to this page.")
			}
			return next(c)
		}
	}
}

// Allowed reports whether u holds one of roles; admins hold every role and
// an empty list allows any user.
func Allowed(u *models.User, roles ...models.Role) bool {
	if u == nil {
		return false
	}
	if u.Role == models.RoleAdmin || len(roles) == 0 {
		return true
	}
	for _, r := range roles {
		if u.Role == r {
			return true
		}
	}
	return false
}

// RequireSignedIn lets through any logged-in user, even one who must change
// their password: the account page's own routes.
func RequireSignedIn() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if CurrentUser(c) == nil {
				return redirectToLogin(c)
			}
			return next(c)
		}
	}
}

// pageURI is the request's URI when it is a page load (GET), to come back to.
func pageURI(c echo.Context) string {
	r := c.Request()
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return r.URL.RequestURI()
	}
	return ""
}

// redirectToLogin sends an anonymous browser to /login, remembering where
// it was going when that was a page (GET).
func redirectToLogin(c echo.Context) error {
	target := "/login"
	if next := pageURI(c); next != "" {
		target += "?next=" + url.QueryEscape(next)
	}
	return redirectTo(c, target)
}

// redirectTo sends the browser to target with a full page load.
func redirectTo(c echo.Context, target string) error {
	if c.Request().Header.Get("HX-Request") == "true" {
		// htmx follows HX-Redirect with a full page load; a 303 would only
		// swap the login page into a fragment.
		c.Response().Header().Set("HX-Redirect", target)
		return c.NoContent(http.StatusUnauthorized)
	}
	return c.Redirect(http.StatusSeeOther, target)
}

// SafeNext returns next when it is a same-site relative path, and def
// otherwise, so that /login?next=… cannot send users to another site.
func SafeNext(next, def string) string {
	if next == "" || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n\t") {
		return def
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(u.Path, "/") {
		return def
	}
	// Do not bounce back to the login page itself.
	if u.Path == "/login" || u.Path == "/logout" {
		return def
	}
	return u.RequestURI()
}
