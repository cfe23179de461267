package handlers

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// readyTimeout bounds the readiness checks, so that a hung database makes
// /readyz fail instead of hang.
const readyTimeout = 3 * time.Second

// Healthz serves GET /healthz: the process is up and serving.
func Healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// Readyz serves GET /readyz: the database answers and its schema is exactly
// the one this binary expects. Otherwise 503 problem+json names the reason in
// generic words: /readyz is anonymous, and a driver's error names the
// database user, database and host, so the detail goes to the log only.
func Readyz(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), readyTimeout)
		defer cancel()
		log := s.Logger
		if log == nil {
			log = slog.Default()
		}
		if err := s.Ping(ctx); err != nil {
			log.Warn("not ready: database unreachable", "err", err)
			return notReady(c, "database unreachable")
		}
		if err := s.CheckSchema(ctx); err != nil {
			log.Warn("not ready: database schema", "err", err)
			switch {
			case errors.Is(err, models.ErrSchemaBehind):
				return notReady(c, "migrations pending")
			case errors.Is(err, models.ErrSchemaNewer):
				return notReady(c, "database schema is newer than this binary")
			default:
				return notReady(c, "database unreachable")
			}
		}
		return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
	}
}

func notReady(c echo.Context, reason string) error {
	p := Problem{
		Type:   "https://taskpilots.dev/problems/not_ready",
		Title:  http.StatusText(http.StatusServiceUnavailable),
		Status: http.StatusServiceUnavailable,
		Detail: reason,
		Errors: []models.FieldError{},
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.Blob(p.Status, ProblemContentType, mustJSON(p))
}
