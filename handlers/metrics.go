package handlers

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// MetricWindows are the windows GET /api/v1/metrics accepts, ending now.
var MetricWindows = map[string]time.Duration{
	"24h": 24 * time.Hour,
	"7d":  7 * 24 * time.Hour,
	"30d": 30 * 24 * time.Hour,
}

// DefaultMetricWindow is the window when none is asked for.
const DefaultMetricWindow = "24h"

// MetricsResponse is the body of GET /api/v1/metrics.
type MetricsResponse struct {
	Window  string                      `json:"window"`
	From    time.Time                   `json:"from"`
	To      time.Time                   `json:"to"`
	Overall models.MetricSet            `json:"overall"`
	Queues  map[string]models.MetricSet `json:"queues"`
	// Stalled counts the sessions stalled now, whatever the window.
	Stalled models.StalledStats `json:"stalled"`
}

// MetricsWindow turns the window and queue query parameters into
// models.MetricsOpts ending at now; an unknown window or a bad queue name is
// a *models.ValidationError naming the parameter.
func MetricsWindow(window, queue string, now time.Time) (models.MetricsOpts, error) {
	if window == "" {
		window = DefaultMetricWindow
	}
	d, ok := MetricWindows[window]
	if !ok {
		return models.MetricsOpts{}, &models.ValidationError{Fields: []models.FieldError{
			{Field: "window", Message: "must be one of 24h, 7d, 30d"},
		}}
	}
	to := now.UTC().Truncate(time.Second)
	o := models.MetricsOpts{From: to.Add(-d), To: to, Queue: queue}
	return o, o.Validate()
}

// ProductMetrics serves GET /api/v1/metrics?window=24h|7d|30d&queue=NAME: the
// product metrics of DESIGN.md for the window ending now, overall and per
// queue (only NAME when queue is given).
func ProductMetrics(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		window := c.QueryParam("window")
		if window == "" {
			window = DefaultMetricWindow
		}
		o, err := MetricsWindow(window, c.QueryParam("queue"), s.Now())
		if err != nil {
			return err
		}
		pm, err := s.ProductMetrics(c.Request().Context(), o)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, MetricsResponse{
			Window: window, From: pm.From, To: pm.To, Overall: pm.Overall, Queues: pm.Queues, Stalled: pm.Stalled,
		})
	}
}
