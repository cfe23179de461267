package handlers

import (
	"net/http"
	"sort"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// MetricsBuckets is how many buckets each dashboard window is split into
// for its trend lines: two hours, one day, three days.
var MetricsBuckets = map[string]int{"24h": 12, "7d": 7, "30d": 10}

// MetricsDashboard serves GET /console/admin/metrics?window=24h|7d|30d
// &queue=NAME: the product metrics of the window, with a trend line
// and a bar per queue each, computed by models.ProductMetrics like the API.
func MetricsDashboard(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		window := c.QueryParam("window")
		if window == "" {
			window = DefaultMetricWindow
		}
		queue := strings.TrimSpace(c.QueryParam("queue"))
		o, err := MetricsWindow(window, queue, s.Now())
		if err != nil {
			return err
		}
		ctx := c.Request().Context()
		d := views.MetricsDashData{Window: window, Windows: []string{"24h", "7d", "30d"}, Queue: queue}
		// The queue list comes from the unfiltered window, so the choice
		// stays complete while one queue is shown.
		all := o
		all.Queue = ""
		if d.Total, err = s.ProductMetrics(ctx, all); err != nil {
			return err
		}
		for q := range d.Total.Queues {
			d.Queues = append(d.Queues, q)
		}
		sort.Strings(d.Queues)
		if queue != "" {
			if d.Total, err = s.ProductMetrics(ctx, o); err != nil {
				return err
			}
		}
		if d.Trend, err = s.MetricsTrend(ctx, o, MetricsBuckets[window]); err != nil {
			return err
		}
		return Render(c, http.StatusOK, views.MetricsDashPage(d))
	}
}
