package web

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/models"
)

// Tuning of the metrics observer.
const (
	// rejectionFlushEvery is how long rejections are batched before they are
	// added to write_rejections (the state conflict rate's counters).
	rejectionFlushEvery = time.Second
	// rejectionMaxAge drops batched rejections that could not be written for
	// this long (the database is gone); metrics are not worth a memory leak.
	rejectionMaxAge = time.Hour
	// maxOutages bounds the sessions whose interruption is remembered for the
	// recovery-time histogram.
	maxOutages = 50000
)

// metrics holds the Prometheus collectors of one server, on a private
// registry, and is the store's models.Observer: it counts every committed
// event and every rejected write, and times recoveries from interruptions.
//
// The recovery histogram is fed by what this process commits: an
// interruption (lease expiry, pause, escalation) starts a session's clock and
// the next productive transition (lease, resume, human decision) observes it.
// With several replicas a recovery whose interruption another replica wrote
// goes unobserved here; GET /api/v1/metrics computes the exact figure from the
// event log.
type metrics struct {
	store *models.Store
	log   *slog.Logger
	reg   *prometheus.Registry

	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec
	events       *prometheus.CounterVec
	leases       prometheus.Counter
	results      *prometheus.CounterVec
	rejections   *prometheus.CounterVec
	escalations  prometheus.Counter
	recovery     prometheus.Histogram

	mu      sync.Mutex
	outages map[string]time.Time // session id → start of its interruption
	pending map[rejectionKey]int64
	timer   *time.Timer // the scheduled flush of pending, if any
}

type rejectionKey struct {
	minute time.Time
	reason string
}

// newMetrics creates the collectors and installs them as s.Observer.
func newMetrics(s *models.Store) *metrics {
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	m := &metrics{
		store: s, log: log, reg: prometheus.NewRegistry(),
		outages: map[string]time.Time{}, pending: map[rejectionKey]int64{},
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskpilots_http_requests_total",
			Help: "HTTP requests by route pattern, method and status class.",
		}, []string{"route", "method", "status_class"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "taskpilots_http_request_duration_seconds",
			Help:    "HTTP request duration by route pattern and method (lease long polls wait up to 30s).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "method"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskpilots_events_committed_total",
			Help: "Events committed to the log, by event type.",
		}, []string{"type"}),
		leases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskpilots_leases_granted_total",
			Help: "Leases granted to workers.",
		}),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskpilots_results_total",
			Help: "Worker results accepted, by result_type.",
		}, []string{"result_type"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskpilots_write_rejections_total",
			Help: "Writes refused, by reason (stale, fenced and duplicate are state conflicts).",
		}, []string{"reason"}),
		escalations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "taskpilots_escalations_opened_total",
			Help: "Sessions that escalated to humans.",
		}),
		recovery: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "taskpilots_recovery_seconds",
			Help:    "Time from an interruption (lease expiry, pause, escalation) to the next productive transition (lease, resume, human decision).",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600},
		}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.httpRequests, m.httpDuration, m.events, m.leases, m.results,
		m.rejections, m.escalations, m.recovery,
		&queueCollector{store: s, log: log},
	)
	for _, r := range []string{models.RejectStale, models.RejectFenced, models.RejectDuplicate} {
		m.rejections.WithLabelValues(r) // show conflicts as 0 before the first one
	}
	s.Observer = m
	return m
}

// middleware counts HTTP requests by route, method and status. The route is
// the pattern (c.Path()), never the raw URL, so that ids do not explode the
// number of series; requests that match no route share "unmatched", and
// methods outside the standard set share "other": both come from anonymous
// clients, so a raw label would let anyone add series without bound.
func (m *metrics) middleware() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			status := c.Response().Status
			if err != nil && !c.Response().Committed {
				// The error handler writes the response after the chain
				// returns; it maps errors exactly like this.
				status = handlers.StatusFor(err)
			}
			route := c.Path()
			if route == "" || (status == http.StatusNotFound && strings.HasSuffix(route, "/*")) {
				route = "unmatched"
			}
			method := methodLabel(c.Request().Method)
			m.httpRequests.WithLabelValues(route, method, strconv.Itoa(status/100)+"xx").Inc()
			m.httpDuration.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
			return err
		}
	}
}

// knownMethods are the methods labelled as themselves (RFC 9110 and PATCH).
var knownMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
	http.MethodConnect: true, http.MethodTrace: true,
}

// methodLabel is the method label of a request: made-up methods share one.
func methodLabel(method string) string {
	if knownMethods[method] {
		return method
	}
	return "other"
}

// handler serves /metrics.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, ErrorHandling: promhttp.ContinueOnError})
}

// escalating are the event types that may move a session into escalated.
// (human.released returns a claimed escalation to the queue; it opens none.)
var escalating = map[models.EventType]bool{
	models.EventSessionEscalated: true, models.EventResultEscalated: true, models.EventResultFailed: true,
	models.EventDelegationExpired: true, models.EventChildrenJoined: true,
}

// productive are the transitions that end an interruption.
var productive = map[models.EventType]bool{
	models.EventDelegationLeased: true, models.EventSessionResumed: true,
	models.EventHumanRequestedInput: true, models.EventHumanResumed: true, models.EventHumanHandedBack: true,
	models.EventHumanCompleted: true, models.EventHumanRejected: true,
}

// Committed implements models.Observer.
func (m *metrics) Committed(ev models.Event, next models.Status) {
	m.events.WithLabelValues(string(ev.Type)).Inc()
	switch {
	case ev.Type == models.EventDelegationLeased:
		m.leases.Inc()
	case strings.HasPrefix(string(ev.Type), "result."):
		m.results.WithLabelValues(strings.TrimPrefix(string(ev.Type), "result.")).Inc()
	}
	escalated := next == models.StatusEscalated && escalating[ev.Type]
	if escalated {
		m.escalations.Inc()
	}
	interrupted := escalated || ev.Type == models.EventDelegationExpired || ev.Type == models.EventSessionPaused
	at := ev.CreatedAt.Time

	m.mu.Lock()
	defer m.mu.Unlock()
	if productive[ev.Type] {
		if start, ok := m.outages[ev.SessionID]; ok {
			delete(m.outages, ev.SessionID)
			m.recovery.Observe(at.Sub(start).Seconds())
		}
	}
	if interrupted {
		if _, ok := m.outages[ev.SessionID]; !ok && len(m.outages) < maxOutages {
			m.outages[ev.SessionID] = at
		}
	}
	if next.Terminal() {
		delete(m.outages, ev.SessionID) // cancelled: an outage without recovery
	}
}

// Rejected implements models.Observer. It never blocks on the database: the
// rejection is counted in memory and added to write_rejections by a flush
// that runs rejectionFlushEvery later, in its own goroutine.
func (m *metrics) Rejected(t models.EventType, code models.Code) {
	reason := models.RejectionReason(t, code)
	m.rejections.WithLabelValues(reason).Inc()
	k := rejectionKey{minute: m.store.Now().UTC().Truncate(time.Minute), reason: reason}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pending[k]++
	m.scheduleFlushLocked()
}

// scheduleFlushLocked schedules a flush unless one is pending; m.mu is held.
func (m *metrics) scheduleFlushLocked() {
	if m.timer != nil {
		return
	}
	m.timer = time.AfterFunc(rejectionFlushEvery, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.flush(ctx); err != nil {
			m.log.Warn("record write rejections; retrying", "err", err)
		}
	})
}

// flush writes the batched rejections. On failure they are kept (up to
// rejectionMaxAge) and another flush is scheduled.
func (m *metrics) flush(ctx context.Context) error {
	m.mu.Lock()
	batch := m.pending
	m.pending = map[rejectionKey]int64{}
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	m.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	rs := make([]models.Rejection, 0, len(batch))
	for k, n := range batch {
		rs = append(rs, models.Rejection{At: k.minute, Reason: k.reason, Count: n})
	}
	err := m.store.RecordRejections(ctx, rs)
	if err == nil {
		return nil
	}
	cutoff := m.store.Now().Add(-rejectionMaxAge)
	m.mu.Lock()
	for k, n := range batch {
		if k.minute.After(cutoff) {
			m.pending[k] += n
		}
	}
	if len(m.pending) > 0 {
		m.scheduleFlushLocked()
	}
	m.mu.Unlock()
	return fmt.Errorf("record %d write rejection counters: %w", len(batch), err)
}

// queueGaugeTimeout bounds the scrape's one query.
const queueGaugeTimeout = 5 * time.Second

var (
	queueReadyDesc = prometheus.NewDesc("taskpilots_queue_ready",
		"Delegations claimable now, per queue (ready depth).", []string{"queue"}, nil)
	queueInFlightDesc = prometheus.NewDesc("taskpilots_queue_in_flight",
		"Leased delegations, per queue.", []string{"queue"}, nil)
	queueOldestDesc = prometheus.NewDesc("taskpilots_queue_oldest_ready_age_seconds",
		"Age of the longest waiting claimable delegation, per queue (0 when none is ready).", []string{"queue"}, nil)
	queueStalledDesc = prometheus.NewDesc("taskpilots_queue_stalled_sessions",
		"Sessions open with a next_step that has no route, by the queue they were last delegated to (the queue whose worker named the step).", []string{"queue"}, nil)
)

// queueCollector reports the per-queue gauges. They are read from the
// database when Prometheus scrapes, in one statement over partial indexes
// (models.QueueGauges), never on the request path, and agree across
// replicas because no replica keeps them in memory. Stalled sessions are
// labelled by their last queue: a stalled session has no queue of its own,
// and step names, which workers choose, would make unbounded series.
type queueCollector struct {
	store *models.Store
	log   *slog.Logger
}

// Describe implements prometheus.Collector.
func (q *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueReadyDesc
	ch <- queueInFlightDesc
	ch <- queueOldestDesc
	ch <- queueStalledDesc
}

// Collect implements prometheus.Collector. When the database does not
// answer, the gauges are reported as failed and the rest of /metrics is
// still served (promhttp.ContinueOnError).
func (q *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), queueGaugeTimeout)
	defer cancel()
	gauges, err := q.store.QueueGauges(ctx)
	if err != nil {
		q.log.Warn("queue gauges", "err", err)
		ch <- prometheus.NewInvalidMetric(queueReadyDesc, err)
		return
	}
	now := q.store.Now()
	for _, g := range gauges {
		age := 0.0
		if g.Ready > 0 && !g.OldestReady.IsZero() {
			age = max(0, now.Sub(g.OldestReady).Seconds())
		}
		ch <- prometheus.MustNewConstMetric(queueReadyDesc, prometheus.GaugeValue, float64(g.Ready), g.Queue)
		ch <- prometheus.MustNewConstMetric(queueInFlightDesc, prometheus.GaugeValue, float64(g.InFlight), g.Queue)
		ch <- prometheus.MustNewConstMetric(queueOldestDesc, prometheus.GaugeValue, age, g.Queue)
		ch <- prometheus.MustNewConstMetric(queueStalledDesc, prometheus.GaugeValue, float64(g.Stalled), g.Queue)
	}
}
