package web

import (
	"context"
	"encoding/json"
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

// maxOutages bounds the sessions whose interruption is remembered for the
// recovery-time histogram.
const maxOutages = 50000

// metrics holds the Prometheus collectors of one server, on a private
// registry, and is the store's models.Observer: it counts every committed
// event and every rejected write, and times recoveries from interruptions.
// Counters that make sense per queue carry a queue label ("" for sessions
// never delegated); sum them without it for the totals. The rejection
// counters the API's state conflict rate reads are written by the store
// itself, durably, when the rejection happens (models.Store.rejected); the
// counters here are this process's view for Prometheus.
//
// The recovery histogram is fed by what this process commits, with the
// definitions of models.Recovery: an interruption (lease expiry, from the
// worker's last sign of life; pause; escalation) starts a session's clock
// and the next productive transition observes it, as kind "machine" (a
// lease, a resume) or "human" (a human decision). With several replicas a
// recovery whose interruption another replica wrote goes unobserved here;
// GET /api/v1/metrics computes the exact figure from the event log.
type metrics struct {
	store *models.Store
	log   *slog.Logger
	reg   *prometheus.Registry

	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec
	events       *prometheus.CounterVec
	writes       *prometheus.CounterVec
	leases       prometheus.Counter
	results      *prometheus.CounterVec
	rejections   *prometheus.CounterVec
	infraRetries *prometheus.CounterVec
	escalations  *prometheus.CounterVec
	recovery     *prometheus.HistogramVec

	mu      sync.Mutex
	outages map[string]outage // session id → its interruption
}

// outage is an interruption of a session: its last sign of life and the
// queue it is blamed on.
type outage struct {
	since time.Time
	queue string
}

// newMetrics creates the collectors and installs them as s.Observer.
func newMetrics(s *models.Store) *metrics {
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	m := &metrics{
		store: s, log: log, reg: prometheus.NewRegistry(),
		outages: map[string]outage{},
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
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskpilots_writes_committed_total",
			Help: "Events committed to the log, by the session's queue: with the rejections other than replay, the write attempts of the state conflict rate.",
		}, []string{"queue"}),
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
			Help: "Writes refused, by reason and the session's queue (stale and fenced are state conflicts; replay is an idempotent repeat, not a write attempt).",
		}, []string{"reason", "queue"}),
		infraRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskpilots_infra_retries_total",
			Help: "Steps queued again by the infrastructure, not rework: cause lease_expired (a lease ran out) or transient (a transient failure retried).",
		}, []string{"queue", "cause"}),
		escalations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "taskpilots_escalations_opened_total",
			Help: "Sessions that escalated to humans, by queue.",
		}, []string{"queue"}),
		recovery: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "taskpilots_recovery_seconds",
			Help: "Time from the last sign of life before an interruption (a lease expiry's last heartbeat or lease start, a pause, an escalation) " +
				"to the next productive transition: kind machine (a lease, a resume) or human (a human decision).",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600},
		}, []string{"queue", "kind"}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.httpRequests, m.httpDuration, m.events, m.writes, m.leases, m.results,
		m.rejections, m.infraRetries, m.escalations, m.recovery,
		&queueCollector{store: s, log: log},
	)
	for _, r := range models.ConflictReasons {
		m.rejections.WithLabelValues(r, "") // show conflicts as 0 before the first one
	}
	if s.HasReadReplica() {
		m.reg.MustRegister(replicaCollectors(s)...)
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

// productive are the transitions that end an interruption, and whether
// they end a human wait (true) or a machine recovery.
var productive = map[models.EventType]bool{
	models.EventDelegationLeased: false, models.EventSessionResumed: false,
	models.EventHumanRequestedInput: true, models.EventHumanResumed: true, models.EventHumanHandedBack: true,
	models.EventHumanCompleted: true, models.EventHumanRejected: true,
}

// committedPayload is the part of an expiry's or a result's payload the
// observer reads.
type committedPayload struct {
	LastSeenAt string `json:"last_seen_at"`
	Exhausted  bool   `json:"exhausted"`
	Retry      bool   `json:"retry"`
}

// Committed implements models.Observer.
func (m *metrics) Committed(ev models.Event, next models.Status, queue string) {
	m.events.WithLabelValues(string(ev.Type)).Inc()
	m.writes.WithLabelValues(queue).Inc()
	at := ev.CreatedAt.Time
	since := at
	var p committedPayload
	switch {
	case ev.Type == models.EventDelegationLeased:
		m.leases.Inc()
	case ev.Type == models.EventDelegationExpired:
		// Only an expiry's and a failure's payload are read, and only
		// three fields of it; a bad payload cannot have been committed.
		_ = json.Unmarshal([]byte(ev.Payload), &p)
		if seen, err := time.Parse(time.RFC3339Nano, p.LastSeenAt); err == nil && !seen.After(at) {
			since = seen
		}
		if !p.Exhausted {
			m.infraRetries.WithLabelValues(queue, "lease_expired").Inc()
		}
	case strings.HasPrefix(string(ev.Type), "result."):
		m.results.WithLabelValues(strings.TrimPrefix(string(ev.Type), "result.")).Inc()
		if ev.Type == models.EventResultFailed {
			_ = json.Unmarshal([]byte(ev.Payload), &p)
			if p.Retry {
				m.infraRetries.WithLabelValues(queue, "transient").Inc()
			}
		}
	}
	escalated := next == models.StatusEscalated && escalating[ev.Type]
	if escalated {
		m.escalations.WithLabelValues(queue).Inc()
	}
	interrupted := escalated || ev.Type == models.EventDelegationExpired || ev.Type == models.EventSessionPaused

	m.mu.Lock()
	defer m.mu.Unlock()
	if human, ok := productive[ev.Type]; ok {
		if o, ok := m.outages[ev.SessionID]; ok {
			delete(m.outages, ev.SessionID)
			kind := "machine"
			if human {
				kind = "human"
			}
			m.recovery.WithLabelValues(o.queue, kind).Observe(at.Sub(o.since).Seconds())
		}
	}
	if interrupted {
		if _, ok := m.outages[ev.SessionID]; !ok && len(m.outages) < maxOutages {
			m.outages[ev.SessionID] = outage{since: since, queue: queue}
		}
	}
	if next.Terminal() {
		delete(m.outages, ev.SessionID) // cancelled: an outage without recovery
	}
}

// Rejected implements models.Observer. The store has counted the rejection
// in write_rejections already; this is the process's Prometheus counter.
func (m *metrics) Rejected(_ models.EventType, reason, queue string) {
	m.rejections.WithLabelValues(reason, queue).Inc()
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

// The per-queue flow limits (models/flow.go), reported for the queues that
// have them.
var (
	queueMaxInFlightDesc = prometheus.NewDesc("taskpilots_queue_max_in_flight",
		"The queue's max_in_flight: at most this many of its delegations leased and unexpired at once (queues with the limit only).", []string{"queue"}, nil)
	queueMaxRateDesc = prometheus.NewDesc("taskpilots_queue_max_leases_per_second",
		"The queue's max_leases_per_second (queues with the limit only).", []string{"queue"}, nil)
	queueTokensDesc = prometheus.NewDesc("taskpilots_queue_lease_tokens",
		"Leases the queue's token bucket would grant right now (queues with a rate limit only).", []string{"queue"}, nil)
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
	ch <- queueMaxInFlightDesc
	ch <- queueMaxRateDesc
	ch <- queueTokensDesc
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
	flows, err := q.store.QueueFlowGauges(ctx)
	if err != nil {
		q.log.Warn("queue flow gauges", "err", err)
		ch <- prometheus.NewInvalidMetric(queueMaxInFlightDesc, err)
		return
	}
	for _, f := range flows {
		if f.MaxInFlight != nil {
			ch <- prometheus.MustNewConstMetric(queueMaxInFlightDesc, prometheus.GaugeValue, float64(*f.MaxInFlight), f.Queue)
		}
		if f.MaxLeasesPerSecond != nil {
			ch <- prometheus.MustNewConstMetric(queueMaxRateDesc, prometheus.GaugeValue, *f.MaxLeasesPerSecond, f.Queue)
			ch <- prometheus.MustNewConstMetric(queueTokensDesc, prometheus.GaugeValue, f.Tokens, f.Queue)
		}
	}
}

// replicaCollectors report where the routed reads went (models.ReplicaStats).
func replicaCollectors(s *models.Store) []prometheus.Collector {
	reads := func(target string, pick func(models.ReplicaStats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "taskpilots_read_replica_reads_total",
			Help:        "Routed reads (console lists, audit, metrics, API reads of GET requests) by the server that answered: standby or primary.",
			ConstLabels: prometheus.Labels{"target": target},
		}, func() float64 { return float64(pick(s.ReplicaStats())) })
	}
	return []prometheus.Collector{
		reads("standby", func(st models.ReplicaStats) int64 { return st.Standby }),
		reads("primary", func(st models.ReplicaStats) int64 { return st.Primary }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "taskpilots_read_replica_failovers_total",
			Help: "Routed reads the standby failed that the primary answered instead.",
		}, func() float64 { return float64(s.ReplicaStats().Failovers) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "taskpilots_read_replica_down",
			Help: "1 while the read replica is marked down and reads go to the primary.",
		}, func() float64 {
			if s.ReplicaStats().Down {
				return 1
			}
			return 0
		}),
	}
}
