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

// CustomMetricWindow is the window's name for a range given by from and to.
const CustomMetricWindow = "custom"

// MetricsRange is MetricsWindow, or, when from or to is given, the custom
// range [from, to) (RFC 3339 times; both are required) under the window name
// CustomMetricWindow. It returns the window's name.
func MetricsRange(window, from, to, queue string, now time.Time) (string, models.MetricsOpts, error) {
	if from == "" && to == "" {
		if window == "" {
			window = DefaultMetricWindow
		}
		o, err := MetricsWindow(window, queue, now)
		return window, o, err
	}
	v := &models.ValidationError{}
	parse := func(field, text string) time.Time {
		t, err := time.Parse(time.RFC3339, text)
		if err != nil {
			v.Add(field, "must be an RFC 3339 time, e.g. 2026-11-02T09:00:00Z")
		}
		return t
	}
	o := models.MetricsOpts{From: parse("from", from), To: parse("to", to), Queue: queue}
	if err := v.Err(); err != nil {
		return "", o, err
	}
	return CustomMetricWindow, o, o.Validate()
}

// ProductMetrics serves GET /api/v1/metrics?window=24h|7d|30d&queue=NAME (or
// from=TIME&to=TIME for a custom range): the product metrics (README "Product metrics")
// for the window ending now, overall and per queue (only NAME when queue is
// given).
func ProductMetrics(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		window, o, err := MetricsRange(c.QueryParam("window"), c.QueryParam("from"), c.QueryParam("to"),
			c.QueryParam("queue"), s.Now())
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
