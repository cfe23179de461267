package handlers

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// API serves the JSON API (README "JSON API") under /api/v1: thin handlers that bind a
// request strictly, check the caller's token and role, call one models
// function and answer JSON. Errors are returned, never written here; the
// server's error handler turns them into problem+json with WriteProblem.
type API struct {
	Store *models.Store
	Log   *slog.Logger
}

// Roles allowed on each kind of route. Admin tokens may call every route, so
// admin is not listed.
var (
	readRoles       = []models.Role{models.RoleController, models.RoleWorker}
	controllerRoles = []models.Role{models.RoleController}
	workerRoles     = []models.Role{models.RoleWorker}
)

// Register adds the API routes to g (the /api/v1 group). Authentication is
// attached per route rather than with g.Use, so that the public OpenAPI
// document stays public and g gets no catch-all routes of ours.
func (a *API) Register(g *echo.Group) {
	g.GET("/openapi.json", a.openAPI)
	g.GET("/metrics", ProductMetrics(a.Store), a.auth(readRoles...))

	g.POST("/sessions", a.createSession, a.auth(controllerRoles...))
	// Bulk actions (issue 14); a static path, so it wins over /sessions/:id.
	g.POST("/sessions/bulk", a.bulkSessions, a.auth(controllerRoles...))
	g.GET("/sessions", a.listSessions, a.auth(readRoles...))
	g.GET("/sessions/:id", a.getSession, a.auth(readRoles...))
	g.GET("/sessions/:id/events", a.listEvents, a.auth(readRoles...))
	g.GET("/sessions/:id/state", a.stateAt, a.auth(readRoles...))
	g.GET("/sessions/:id/packet", a.packet, a.auth(readRoles...))
	g.POST("/sessions/:id/pause", a.transition(models.EventSessionPaused), a.auth(controllerRoles...))
	g.POST("/sessions/:id/resume", a.transition(models.EventSessionResumed), a.auth(controllerRoles...))
	g.POST("/sessions/:id/escalate", a.transition(models.EventSessionEscalated), a.auth(controllerRoles...))
	g.POST("/sessions/:id/cancel", a.transition(models.EventSessionCancelled), a.auth(controllerRoles...))
	g.POST("/sessions/:id/delegations", a.delegate, a.auth(controllerRoles...))
	g.POST("/sessions/:id/children", a.children, a.auth(controllerRoles...))

	// Answering a request for input (v1.1).
	g.POST("/sessions/:id/input", a.provideInput, a.auth(controllerRoles...))
	// Human and controller notes (issue 11).
	g.POST("/sessions/:id/notes", a.addNote, a.auth(controllerRoles...))

	g.POST("/queues/:queue/lease", a.lease, a.auth(workerRoles...))
	// Per-queue flow control (models/flow.go): read by every role, set by
	// admins.
	g.GET("/queues", a.listQueues, a.auth(readRoles...))
	g.GET("/queues/:queue", a.getQueue, a.auth(readRoles...))
	g.PUT("/queues/:queue", a.putQueue, a.auth())
	// Lease fault injection for recovery drills: admin tokens only.
	g.POST("/queues/:queue/expire-leases", a.expireLeases, a.auth())
	g.POST("/delegations/:id/heartbeat", a.heartbeat, a.auth(workerRoles...))
	g.POST("/delegations/:id/result", a.submitResult, a.auth(workerRoles...))
	// Results in batches: the same role rule as the single result's.
	g.POST("/results", a.submitResults, a.auth(workerRoles...))

	// Step routes (models/routes.go).
	g.GET("/routes", a.listRoutes, a.auth(readRoles...))
	g.GET("/routes/:step", a.getRoute, a.auth(readRoles...))
	g.PUT("/routes/:step", a.putRoute, a.auth(controllerRoles...))
	g.DELETE("/routes/:step", a.deleteRoute, a.auth(controllerRoles...))
	g.POST("/routes/:step/drain", a.drainRoute, a.auth(controllerRoles...))
	// The event feed (controllers follow what happened).
	g.GET("/events", a.listFeed, a.auth(controllerRoles...))

	// Webhooks: admin tokens only (auth with no roles admits admins alone).
	g.POST("/webhooks", a.createWebhook, a.auth())
	g.GET("/webhooks", a.listWebhooks, a.auth())
	g.DELETE("/webhooks/:id", a.deleteWebhook, a.auth())
	g.POST("/webhooks/:id/rotate-secret", a.rotateWebhookSecret, a.auth())
	g.GET("/webhooks/:id/deliveries", a.listDeliveries, a.auth())
	g.POST("/webhooks/:id/deliveries/:event_id/redeliver", a.redeliver, a.auth())
}

// tokenKey is where auth leaves the caller's token in the echo context.
const tokenKey = "handlers.api_token"

// auth authenticates the bearer token and admits admins and the given roles.
// A missing or unknown token is a 401 that says how to authenticate; a known
// token of the wrong role is a 403.
func (a *API) auth(roles ...models.Role) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			secret, ok := bearer(c.Request().Header.Get(echo.HeaderAuthorization))
			if !ok {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="taskpilots"`)
				return fmt.Errorf("%w: send Authorization: Bearer <token>", models.ErrUnauthorized)
			}
			tok, err := a.Store.AuthenticateToken(c.Request().Context(), secret)
			if err != nil {
				if models.ErrorCode(err) == models.EUNAUTH {
					c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="taskpilots", error="invalid_token"`)
				}
				return err
			}
			if tok.Role != models.RoleAdmin && !hasRole(tok.Role, roles) {
				return fmt.Errorf("%w: a %s token may not %s %s", models.ErrForbidden, tok.Role, c.Request().Method, c.Path())
			}
			c.Set(tokenKey, tok)
			// W3C trace context: a valid traceparent (and tracestate) is
			// kept with the events the request causes; an invalid one is
			// ignored, as the recommendation says (models/trace.go).
			h := c.Request().Header
			if tc := models.ParseTrace(h.Get("traceparent"), h.Get("tracestate")); !tc.IsZero() {
				c.SetRequest(c.Request().WithContext(models.WithTrace(c.Request().Context(), tc)))
			}
			return next(c)
		}
	}
}

func bearer(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func hasRole(r models.Role, roles []models.Role) bool {
	for _, x := range roles {
		if x == r {
			return true
		}
	}
	return false
}

// actor is how the authenticated caller appears in events; it also scopes
// idempotency keys, so two callers cannot collide on a key.
func actor(c echo.Context) string {
	tok, _ := c.Get(tokenKey).(models.APIToken)
	return tok.Actor()
}

// readerOf is the caller as a reader of review scores (blind double review).
func readerOf(c echo.Context) models.ReviewReader {
	tok, _ := c.Get(tokenKey).(models.APIToken)
	return models.ReaderOfToken(tok)
}

// writeOutcome answers a write. Every write's body is built from the
// models.Outcome alone (never from a read after the write), so that an
// idempotent repeat, which gets the stored first outcome back, answers with
// the same status and the same bytes.
func writeOutcome(c echo.Context, status int, out models.Outcome, body any) error {
	markReplayed(c, out.Replayed)
	return c.JSON(status, body)
}

// markReplayed sets Idempotent-Replayed: true on the answer to a repeat
// that got the stored first answer back.
func markReplayed(c echo.Context, replayed bool) {
	if replayed {
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
}

// sessionWritten is the answer to a command on a session.
type sessionWritten struct {
	SessionID    string        `json:"session_id"`
	Status       models.Status `json:"status"`
	StateVersion int64         `json:"state_version"`
}

func written(out models.Outcome) sessionWritten {
	return sessionWritten{SessionID: out.SessionID, Status: out.Status, StateVersion: out.StateVersion}
}

func (a *API) log() *slog.Logger {
	if a.Log != nil {
		return a.Log
	}
	return slog.Default()
}
