package web

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/models"
)

// isMachinePath reports paths that browsers' login sessions and CSRF tokens
// do not concern: the bearer-token API, assets, probes and metrics.
func isMachinePath(c echo.Context) bool {
	p := c.Request().URL.Path
	return strings.HasPrefix(p, "/api/") || strings.HasPrefix(p, "/static/") ||
		p == "/healthz" || p == "/readyz" || p == "/metrics"
}

// skipFor runs mw except where skip says so.
func skipFor(mw echo.MiddlewareFunc, skip func(echo.Context) bool) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		wrapped := mw(next)
		return func(c echo.Context) error {
			if skip(c) {
				return next(c)
			}
			return wrapped(c)
		}
	}
}

// validRequestID is what we accept from a client's X-Request-ID; anything
// else is replaced, so that ids stay safe to log and echo back.
var validRequestID = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// requestID gives each request an id (the caller's X-Request-ID when it is
// sane), echoes it in the response and keeps it for logs and error pages.
func requestID() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			id := c.Request().Header.Get(echo.HeaderXRequestID)
			if !validRequestID.MatchString(id) {
				id = models.NewID("req")
			}
			c.Response().Header().Set(echo.HeaderXRequestID, id)
			c.Set(handlers.RequestIDContextKey, id)
			return next(c)
		}
	}
}

// contentSecurityPolicy allows only our own scripts, styles and images: no
// inline scripts, so htmx configuration and page behaviour live in
// static/app.js.
const contentSecurityPolicy = "default-src 'self'; base-uri 'self'; form-action 'self'; " +
	"frame-ancestors 'none'; object-src 'none'"

// securityHeaders sets the headers that keep browsers strict with our pages.
func securityHeaders(trustProxy bool) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			h := c.Response().Header()
			h.Set("Content-Security-Policy", contentSecurityPolicy)
			h.Set("X-Content-Type-Options", "nosniff")
			h.Set("Referrer-Policy", "same-origin")
			h.Set("X-Frame-Options", "DENY")
			h.Set("Cross-Origin-Opener-Policy", "same-origin")
			h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=()")
			// Only over HTTPS: HSTS on plain HTTP is ignored, and on a
			// laptop's localhost it would be wrong.
			if isHTTPS(c.Request(), trustProxy) {
				h.Set("Strict-Transport-Security", "max-age=31536000")
			}
			return next(c)
		}
	}
}

// requestLogger logs one line per request. It hands errors to the error
// handler itself, so that the logged status is the one the client got.
func requestLogger(log *slog.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			if err != nil {
				c.Error(err)
			}
			r := c.Request()
			status := c.Response().Status
			level := slog.LevelInfo
			switch {
			case r.Context().Err() != nil:
				// The client went away mid-request; its status is moot.
				level = slog.LevelInfo
			case status >= 500:
				level = slog.LevelError
			case isMachinePath(c) && !strings.HasPrefix(r.URL.Path, "/api/") && status < 400:
				// Probes, scrapes and assets would drown the useful lines.
				level = slog.LevelDebug
			}
			attrs := []slog.Attr{
				slog.String("method", r.Method),
				slog.String("path", r.URL.Path),
				slog.String("route", c.Path()),
				slog.Int("status", status),
				slog.Duration("duration", time.Since(start)),
				slog.String("ip", c.RealIP()),
				slog.String("request_id", handlers.RequestID(c)),
			}
			if u := handlers.CurrentUser(c); u != nil {
				attrs = append(attrs, slog.String("user_id", u.ID))
			}
			log.LogAttrs(r.Context(), level, "request", attrs...)
			return nil
		}
	}
}

// recoverPanics turns a panic into a 500 instead of a dropped connection,
// and logs the stack, which the error returned no longer carries.
func recoverPanics(log *slog.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			defer func() {
				r := recover()
				if r == nil {
					return
				}
				if r == http.ErrAbortHandler {
					panic(r)
				}
				stack := make([]byte, 8<<10)
				stack = stack[:runtime.Stack(stack, false)]
				log.Error("panic", "panic", fmt.Sprint(r), "path", c.Request().URL.Path,
					"request_id", handlers.RequestID(c), "stack", string(stack))
				err = fmt.Errorf("panic: %v", r)
			}()
			return next(c)
		}
	}
}

// bodyLimit refuses bodies over limit bytes with 413 (problem+json on the
// API, by the error handler).
func bodyLimit(limit int64) echo.MiddlewareFunc {
	return middleware.BodyLimit(fmt.Sprintf("%dB", limit))
}

// rejectNUL refuses a NUL character (U+0000) in the path or the query string
// of any request: PostgreSQL cannot compare or store NUL, so without this a
// NUL in an id or a filter was a 500 on PostgreSQL. An id with NUL names
// nothing: 404. A query parameter with NUL is a 422 naming it (problem+json
// on the API, the error page in the console). Bodies are checked where they
// are read: JSON by handlers' bind, forms by the models validators, whose
// 422 the console shows inline.
func rejectNUL() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if models.HasNUL(r.URL.Path) {
				return echo.ErrNotFound
			}
			v := &models.ValidationError{}
			checkValues(v, r.URL.Query())
			if err := v.Err(); err != nil {
				return err
			}
			return next(c)
		}
	}
}

// checkValues adds a NUL problem for every parameter of vals whose name or
// any of whose values holds NUL.
func checkValues(v *models.ValidationError, vals url.Values) {
	for _, name := range slices.Sorted(maps.Keys(vals)) { // a stable order of errors
		xs := vals[name]
		if models.HasNUL(name) {
			v.Add(strings.ReplaceAll(name, "\x00", `\u0000`), models.NULMessage)
			continue
		}
		for _, x := range xs {
			if models.HasNUL(x) {
				v.Add(name, models.NULMessage)
				break
			}
		}
	}
}

// headAsGet answers HEAD like GET without the body (Echo routes HEAD only
// where registered), so that probes and link checkers may use HEAD.
func headAsGet() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if r.Method != http.MethodHead {
				return next(c)
			}
			r.Method = http.MethodGet
			res := c.Response()
			res.Writer = bodyless{res.Writer}
			defer func() { r.Method = http.MethodHead }()
			return next(c)
		}
	}
}

// bodyless drops the body of a HEAD answer; headers and status still go.
type bodyless struct{ http.ResponseWriter }

func (bodyless) Write(b []byte) (int, error) { return len(b), nil }

// Unwrap lets http.ResponseController reach the connection.
func (w bodyless) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// trimTrailingSlash redirects browser paths ending in "/" to the path
// without it, so that /console/sessions/ is not a 404. Only page loads are
// redirected, and never on the API: a redirect turns a POST into a GET.
func trimTrailingSlash() echo.MiddlewareFunc {
	return middleware.RemoveTrailingSlashWithConfig(middleware.TrailingSlashConfig{
		RedirectCode: http.StatusMovedPermanently,
		Skipper: func(c echo.Context) bool {
			r := c.Request()
			return strings.HasPrefix(r.URL.Path, "/api/") || (r.Method != http.MethodGet && r.Method != http.MethodHead)
		},
	})
}

// ReadFloorCookie carries a browser's read floor (models.ReadScope): the
// primary's WAL position after its last write, until the read replica has
// replayed it. It only ever sends its own reads to the primary, so it is
// neither signed nor secret.
const ReadFloorCookie = "taskpilots_read_floor"

// readFloorMaxAge bounds how long a browser's floor outlives a standby that
// never catches up (it is dropped as soon as the standby has replayed it).
const readFloorMaxAge = 5 * time.Minute

// readScope gives every request its reader (models.WithReadScope) when the
// store has a read replica: GET and HEAD reads may go to the standby, and a
// reader's own writes stay visible to it. An API client is known by its
// bearer token (its floor stays in this process's memory); a browser brings
// its floor in ReadFloorCookie. A successful write request records the
// primary's position as the reader's floor before its answer goes out, so
// the client's next read cannot overtake it.
func readScope(s *models.Store, trustProxy bool) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		if !s.HasReadReplica() {
			return next
		}
		return func(c echo.Context) error {
			r := c.Request()
			safe := r.Method == http.MethodGet || r.Method == http.MethodHead
			key, browser := "", true
			var floor models.LSN
			if scheme, tok, ok := strings.Cut(strings.TrimSpace(r.Header.Get(echo.HeaderAuthorization)), " "); ok && strings.EqualFold(scheme, "bearer") {
				sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
				key, browser = "token:"+hex.EncodeToString(sum[:16]), false
			} else if ck, err := r.Cookie(ReadFloorCookie); err == nil {
				floor, _ = models.ParseLSN(ck.Value)
			}
			ctx, sc := models.WithReadScope(r.Context(), key, floor, safe)
			c.SetRequest(r.WithContext(ctx))
			c.Response().Before(func() {
				if !safe && c.Response().Status < 400 {
					s.NoteRequestWrite(ctx)
				}
				f, changed := sc.Floor()
				if !browser || !changed {
					return
				}
				ck := &http.Cookie{Name: ReadFloorCookie, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode,
					Secure: isHTTPS(r, trustProxy)}
				if f == 0 {
					ck.MaxAge = -1
				} else {
					ck.Value, ck.MaxAge = f.String(), int(readFloorMaxAge/time.Second)
				}
				http.SetCookie(c.Response(), ck)
			})
			return next(c)
		}
	}
}
