package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// metrics holds the Prometheus collectors. (Stub: being filled in.)
type metrics struct{}

// newMetrics creates the collectors and installs them as s.Observer.
func newMetrics(s *models.Store) *metrics { return &metrics{} }

// middleware counts HTTP requests by route, method and status.
func (m *metrics) middleware() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc { return next }
}

// handler serves /metrics.
func (m *metrics) handler() http.Handler { return http.NotFoundHandler() }
