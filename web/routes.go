package web

import (
	"bytes"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/static"
)

// routes registers every route of the product.
func routes(e *echo.Echo, s *models.Store, cfg Config, auth *handlers.Auth, m *metrics) {
	log := cfg.Logger

	// Operations.
	e.GET("/healthz", handlers.Healthz)
	e.GET("/readyz", handlers.Readyz(s))
	e.GET("/metrics", echo.WrapHandler(m.handler()))
	e.GET(static.Prefix+"*", serveStatic)

	// Browser: login and the console.
	// Support agents start in their inbox; reviewers in their review queue.
	e.GET("/", func(c echo.Context) error {
		if u := handlers.CurrentUser(c); u != nil && u.Role == models.RoleReviewer {
			return c.Redirect(http.StatusFound, "/console/reviews")
		}
		return c.Redirect(http.StatusFound, "/console")
	})
	e.GET("/login", auth.LoginForm)
	e.POST("/login", auth.Login)
	e.POST("/logout", auth.Logout)
	// The account page: any signed-in user, even one who must change their
	// password first (every other console page sends them here).
	account := handlers.RequireSignedIn()
	e.GET(handlers.PasswordPath, auth.PasswordPage, account)
	e.POST(handlers.PasswordPath, auth.ChangePassword, account)
	e.POST("/console/account/sign-out-everywhere", auth.SignOutEverywhere, account)
	e.POST("/console/account/time-zone", auth.SetTimeZone, account)

	console := e.Group("/console", handlers.RequireUser())
	console.GET("/sessions", handlers.SessionsPage(s))
	consoleRoutes(e, s)
	reviewAdminRoutes(e, s, cfg)

	// The API reference, rendered from the OpenAPI document (public).
	e.GET(handlers.APIDocsPath, handlers.APIDocs)

	// The JSON API (README "JSON API", handlers/openapi.json). Body limit, CSRF exemption and problem+json
	// errors apply to it through the global middleware and error handler.
	api := e.Group("/api/v1")
	(&handlers.API{Store: s, Log: log}).Register(api)
	if !hasRoute(e, http.MethodGet, "/api/v1/metrics") {
		api.GET("/metrics", handlers.ProductMetrics(s))
	}
}

// hasRoute reports whether method path is registered already; Echo would
// silently replace a duplicate.
func hasRoute(e *echo.Echo, method, path string) bool {
	for _, r := range e.Routes() {
		if r.Method == method && r.Path == path {
			return true
		}
	}
	return false
}

// serveStatic serves the embedded assets. A URL carrying the asset's current
// version (static.URL) is cached for a year; any other is revalidated.
func serveStatic(c echo.Context) error {
	name := c.Param("*")
	if name == "" || strings.HasSuffix(name, "/") {
		return echo.ErrNotFound
	}
	b, err := fs.ReadFile(static.FS, name)
	if err != nil {
		return echo.ErrNotFound
	}
	h := c.Response().Header()
	version := static.Version(name)
	if c.QueryParam("v") == version {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "public, max-age=300, must-revalidate")
	}
	h.Set("ETag", `"`+version+`"`)
	http.ServeContent(c.Response(), c.Request(), name, time.Time{}, bytes.NewReader(b))
	return nil
}
