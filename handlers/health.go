package handlers

import (
	"context"
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
// the one this binary expects. Otherwise 503 problem+json names the reason.
func Readyz(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), readyTimeout)
		defer cancel()
		if err := s.Ping(ctx); err != nil {
			return notReady(c, "database unreachable: "+err.Error())
		}
		if err := s.CheckSchema(ctx); err != nil {
			return notReady(c, "database schema not ready: "+err.Error())
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
