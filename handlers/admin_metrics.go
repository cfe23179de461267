package handlers

import (
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/views"
)

// MetricsBuckets is how many buckets each dashboard window is split into
// for its trend lines: two hours, one day, three days.
var MetricsBuckets = map[string]int{"24h": 12, "7d": 7, "30d": 10}

// customBuckets is how many trend buckets a custom range of length d has:
// as many as the window it is closest to above.
func customBuckets(d time.Duration) int {
	switch {
	case d <= 2*24*time.Hour:
		return MetricsBuckets["24h"]
	case d <= 14*24*time.Hour:
		return MetricsBuckets["7d"]
	}
	return MetricsBuckets["30d"]
}

// MetricsBarQueues is how many queues the dashboard's per-queue bars show
// unless all are asked for (queues=all): the busiest first, so that the
// page stays small with many queues.
const MetricsBarQueues = 12

// MetricsDashboard serves GET /console/admin/metrics?window=24h|7d|30d
// (or from=TIME&to=TIME)&queue=NAME&queues=all: the product metrics of the window, with a trend
// line and bars per queue each, computed by models.MetricsDashboard with
// the definitions of the API.
func MetricsDashboard(s *models.Store) echo.HandlerFunc {
	return func(c echo.Context) error {
		queue := strings.TrimSpace(c.QueryParam("queue"))
		window, o, err := MetricsRange(c.QueryParam("window"), c.QueryParam("from"), c.QueryParam("to"), queue, s.Now())
		if err != nil {
			return err
		}
		d := views.MetricsDashData{Window: window, Windows: []string{"24h", "7d", "30d"}, Queue: queue,
			AllQueues: c.QueryParam("queues") == "all"}
		buckets, ok := MetricsBuckets[window]
		if !ok {
			buckets = customBuckets(o.To.Sub(o.From))
		}
		total, trend, err := s.MetricsDashboard(c.Request().Context(), o, buckets)
		if err != nil {
			return err
		}
		// The queue list comes from the unfiltered window, so the choice
		// stays complete while one queue is shown.
		for q := range total.Queues {
			d.Queues = append(d.Queues, q)
		}
		sort.Strings(d.Queues)
		limit := MetricsBarQueues
		if d.AllQueues {
			limit = -1
		}
		d.BarQueues = total.BusiestQueues(limit)
		d.Total, d.Trend = total.ForQueue(queue), trend
		return Render(c, http.StatusOK, views.MetricsDashPage(d))
	}
}
