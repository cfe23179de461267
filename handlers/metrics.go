package handlers

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// ProductMetrics serves GET /api/v1/metrics. (Stub: being filled in.)
func ProductMetrics(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]any{}) }
}
