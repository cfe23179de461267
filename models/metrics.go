package models

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Product metrics (DESIGN.md "Metrics"), computed from the event log over a
// window [From, To) for the whole system and per queue. The console and
// GET /api/v1/metrics share these definitions; each is spelled out on its
// type below.
//
// How they are computed: one query finds the sessions with a relevant event
// in the window (events(type, created_at, id)) and streams those sessions'
// relevant events up to To in (session_id, seq) order; payloads are sent only
// for the event types whose payload matters and are decoded in Go into one
// small struct. A per-session fold then walks each history once, so that
// things that began before the window (a lease taken yesterday, an
// interruption or a claim before From) are judged correctly, while only
// outcomes that happen inside the window are counted. The conflict rate is
// two aggregates: a count of events on events(created_at, id) and a sum over
// write_rejections.

// MetricsOpts selects the window and, optionally, one queue.
type MetricsOpts struct {
	From time.Time
	To   time.Time
	// Queue, when set, limits ProductMetrics.Queues to that queue (reported
	// even when it has no data). Overall stays system-wide.
	Queue string
}

// Validate lists every problem with the options.
func (o MetricsOpts) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", o) // every text field; see NULMessage
	if !o.To.After(o.From) {
		v.Add("window", "must end after it starts")
	}
	if o.Queue != "" && !namePattern.MatchString(o.Queue) {
		v.Add("queue", "must be 1-64 letters, digits, '.', '_' or '-'")
	}
	return v.Err()
}

// ProductMetrics are the five product metrics for a window.
type ProductMetrics struct {
	From    time.Time            `json:"from"`
	To      time.Time            `json:"to"`
	Overall MetricSet            `json:"overall"`
	Queues  map[string]MetricSet `json:"queues"`
	// SLA is where the escalations in human hands stand now (not windowed):
	// within SLA, near breach, breached, and breach events recorded.
	SLA SLAStats `json:"sla"`
	// Stalled counts the sessions stalled now (not windowed): open with a
	// next_step that has no route (models/routes.go).
	Stalled StalledStats `json:"stalled"`
}

// MetricSet is the five metrics for the whole system or one queue.
//
// Queue attribution: a delegation belongs to its queue; a re-delegation to the
// queue of the delegation it (re)queues; an interruption, escalation, claim,
// decision and review to the queue of the delegation the session was working
// on when it was interrupted or escalated. Events with no delegation to blame
// (a controller pausing an idle session) count only in Overall.
type MetricSet struct {
	HandoffSuccess    HandoffSuccess  `json:"handoff_success"`
	Rework            Rework          `json:"rework"`
	Recovery          Recovery        `json:"recovery"`
	StateConflicts    *StateConflicts `json:"state_conflicts,omitempty"`
	EscalationClarity Clarity         `json:"escalation_clarity"`
	PromptCache       PromptCache     `json:"prompt_cache"`
}

// PromptCache is the prompt-cache hit rate: of the input tokens that results
// in the window reported (usage), the share the model provider served from
// its cache. Results counts the results that reported usage; HitRate is
// null when they reported no input tokens.
type PromptCache struct {
	Results           int64    `json:"results"`
	InputTokens       int64    `json:"input_tokens"`
	CachedInputTokens int64    `json:"cached_input_tokens"`
	HitRate           *float64 `json:"hit_rate"`
}

// HandoffSuccess is the handoff success rate: of the delegations that ended
// in the window, the share that were completed on their first lease without
// retry or human.
//
// A delegation ends at the first of: a result other than a transient failure
// that is retried (result.completed, needs_input, rejected, escalated,
// failed without retry), a lease expiry that exhausts its attempts, or the
// session being escalated or cancelled by a controller while the delegation
// was open. It succeeded when it ended with result.completed on attempt 1,
// was leased exactly once (a pause that revoked a running lease makes a
// second lease) and had no lease expiry and no retried failure. Ended and
// Succeeded use the same cohort (end time in the window), so Rate is in
// [0, 1]; it is null when nothing ended.
type HandoffSuccess struct {
	Ended     int64    `json:"ended"`
	Succeeded int64    `json:"succeeded"`
	Rate      *float64 `json:"rate"`
}

// Rework is the rework rate: the share of sessions with delegated work in the
// window in which a step was delegated again in the window.
//
// Sessions counts the sessions with at least one delegation event in the
// window (delegation.created, delegation.leased, delegation.lease_expired,
// result.*, human.resumed, human.handed_back). A re-delegation is a lease
// expiry that queues the step again, a transient failure that is retried, a
// human resuming automation or handing the step back, or a delegation.created
// for a step the session already delegated or that follows a request for
// input (a needs_input or bad_input result, or a human asking for input).
// Reworked counts the sessions with at least one re-delegation in the window;
// Redelegations counts the re-delegations. Rate is null without sessions.
type Rework struct {
	Sessions      int64    `json:"sessions"`
	Reworked      int64    `json:"reworked"`
	Redelegations int64    `json:"redelegations"`
	Rate          *float64 `json:"rate"`
}

// Recovery is the mean recovery time: from an interruption to the next
// productive transition of the same session.
//
// Interruptions are delegation.lease_expired, session.paused and every
// escalation (session.escalated, result.escalated, a failed result that
// escalates, an exhausted lease expiry, a join that was not met). Productive
// transitions are delegation.leased, session.resumed and a human decision
// (human.requested_input, human.resumed, human.handed_back, human.completed,
// human.rejected). The clock starts at the first interruption and is not
// restarted by further interruptions before a productive transition (a pause
// that becomes an escalation is one outage). A cancellation ends the outage
// without a sample. A recovery counts in the window in which the productive
// transition happens, even if the interruption was earlier. Seconds are null
// without recoveries.
type Recovery struct {
	Recoveries  int64    `json:"recoveries"`
	MeanSeconds *float64 `json:"mean_seconds"`
	MaxSeconds  *float64 `json:"max_seconds"`
}

// StateConflicts is the state conflict rate: rejected stale, fenced and
// duplicate writes per 1,000 write attempts.
//
// Write attempts are the events committed in the window plus the rejections
// recorded in it (all reasons). Rejections are counted per minute: a minute
// belongs to the window when it starts in it. Conflicts are the rejections
// with reason stale, fenced or duplicate. AppliedConflicts counts results
// that were applied for a delegation attempt that already had a result or
// that was not the session's open delegation; the write path makes this
// impossible, so anything but zero is a bug to investigate. Rejections carry
// no queue when the Observer reports them, so this block is system-wide only.
type StateConflicts struct {
	WriteAttempts    int64            `json:"write_attempts"`
	Committed        int64            `json:"committed"`
	Rejected         int64            `json:"rejected"`
	ByReason         map[string]int64 `json:"by_reason"`
	Conflicts        int64            `json:"conflicts"`
	PerThousand      *float64         `json:"per_thousand"`
	AppliedConflicts int64            `json:"applied_conflicts"`
}

// Clarity is escalation clarity: how reviewers scored the escalation
// packages, and how long humans took from claim to decision.
//
// Reviews are the review.scored events in the window; Criteria gives the
// mean of each rubric criterion (scores 1-5; others are ignored) and
// MeanScore the mean of every criterion score given. A decision is the first
// human.requested_input, human.resumed, human.handed_back, human.completed or
// human.rejected after a claim; it is timed from the first human.claimed of
// that escalation (a release and a new claim do not restart the clock).
// Escalations counts the escalations opened in the window, and
// EscalationsByReason the same escalations by reason code (every code is
// listed, zero included).
type Clarity struct {
	Escalations                int64                     `json:"escalations"`
	EscalationsByReason        map[ReasonCode]int64      `json:"escalations_by_reason"`
	Reviews                    int64                     `json:"reviews"`
	MeanScore                  *float64                  `json:"mean_score"`
	Criteria                   map[string]CriterionScore `json:"criteria"`
	Decisions                  int64                     `json:"decisions"`
	MeanClaimToDecisionSeconds *float64                  `json:"mean_claim_to_decision_seconds"`
}

// CriterionScore is the mean score of one rubric criterion.
type CriterionScore struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
}

// Rejection reasons recorded in write_rejections.
const (
	RejectStale     = "stale"     // expected_version was not current
	RejectFenced    = "fenced"    // the lease expired or was superseded
	RejectDuplicate = "duplicate" // an idempotent repeat (or a key reused with another body)
	RejectInvalid   = "invalid"   // input failed validation
	RejectIllegal   = "illegal"   // transition not allowed from the current status
	RejectNotFound  = "not_found" // unknown session or delegation
	RejectError     = "error"     // anything else (forbidden, internal)
)

// ConflictReasons are the rejection reasons the state conflict rate counts.
var ConflictReasons = []string{RejectStale, RejectFenced, RejectDuplicate}

// RejectionReason maps a rejected command (as models.Observer hears it) to the
// reason recorded in write_rejections. A conflict on a lease-bound command (a
// result, a lease, a rescue) is a fence; on any other it is a stale version.
func RejectionReason(t EventType, code Code) string {
	switch code {
	case ECONFLICT:
		if t == EventDelegationLeased || t == EventDelegationExpired || strings.HasPrefix(string(t), "result.") {
			return RejectFenced
		}
		return RejectStale
	case EIDEMPOTENCY:
		return RejectDuplicate
	case EINVALID:
		return RejectInvalid
	case EILLEGAL:
		return RejectIllegal
	case ENOTFOUND:
		return RejectNotFound
	}
	return RejectError
}

// Rejection is a number of rejected writes at a time, for RecordRejections.
type Rejection struct {
	At     time.Time
	Reason string
	Queue  string
	Count  int64
}

type rejectionRow struct {
	Bucket UTCTime
	Reason string
	Queue  string
	Count  int64
}

func (rejectionRow) TableName() string { return "write_rejections" }

// RecordRejection counts one rejected write now.
func (s *Store) RecordRejection(ctx context.Context, reason, queue string) error {
	return s.RecordRejections(ctx, []Rejection{{At: s.now(), Reason: reason, Queue: queue, Count: 1}})
}

// RecordRejections adds rejected writes to their per-minute counters in one
// statement (an upsert), so that observers can batch them.
func (s *Store) RecordRejections(ctx context.Context, rs []Rejection) error {
	sum := make(map[rejectionRow]int64)
	for _, r := range rs {
		if r.Count <= 0 {
			continue
		}
		if r.Reason == "" {
			return fmt.Errorf("record rejection: reason is required")
		}
		k := rejectionRow{Bucket: NewUTCTime(r.At.UTC().Truncate(time.Minute)), Reason: r.Reason, Queue: r.Queue}
		sum[k] += r.Count
	}
	if len(sum) == 0 {
		return nil
	}
	keys := make([]rejectionRow, 0, len(sum))
	for k := range sum {
		keys = append(keys, k)
	}
	// A stable order keeps concurrent upserts from deadlocking on PostgreSQL.
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if !a.Bucket.Equal(b.Bucket.Time) {
			return a.Bucket.Before(b.Bucket.Time)
		}
		if a.Reason != b.Reason {
			return a.Reason < b.Reason
		}
		return a.Queue < b.Queue
	})
	var b strings.Builder
	b.WriteString(`INSERT INTO write_rejections (bucket, reason, queue, count) VALUES `)
	args := make([]any, 0, 4*len(keys))
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?)")
		args = append(args, k.Bucket, k.Reason, k.Queue, sum[k])
	}
	b.WriteString(` ON CONFLICT (bucket, reason, queue) DO UPDATE SET count = write_rejections.count + excluded.count`)
	if err := s.DB.WithContext(ctx).Exec(b.String(), args...).Error; err != nil {
		return fmt.Errorf("record rejections: %w", err)
	}
	return nil
}

// Event types the metrics fold reads, and those whose payload it decodes.
var (
	metricEventTypes = []EventType{
		EventSessionPaused, EventSessionResumed, EventSessionEscalated, EventSessionCancelled,
		EventDelegationCreated, EventDelegationLeased, EventDelegationExpired,
		EventResultCompleted, EventResultNeedsInput, EventResultRejected, EventResultEscalated, EventResultFailed,
		EventHumanClaimed, EventHumanRequestedInput, EventHumanResumed, EventHumanHandedBack,
		EventHumanCompleted, EventHumanRejected, EventChildrenJoined, EventReviewScored,
	}
	metricPayloadTypes = []EventType{
		EventDelegationCreated, EventDelegationExpired, EventHumanResumed, EventHumanHandedBack,
		EventResultCompleted, EventResultNeedsInput, EventResultRejected, EventResultEscalated, EventResultFailed,
		EventChildrenJoined, EventReviewScored,
	}
)

// metricPayload holds the few payload fields the fold needs, from whichever
// payload type carries them.
type metricPayload struct {
	DelegationID string         `json:"delegation_id"`
	Queue        string         `json:"queue"`
	Step         string         `json:"step"`
	Attempt      int            `json:"attempt"`
	Retry        bool           `json:"retry"`
	Exhausted    bool           `json:"exhausted"`
	Failure      *Failure       `json:"failure"`
	Result       string         `json:"result"`
	Scores       map[string]int `json:"scores"`
	Usage        *Usage         `json:"usage"`
}

// ProductMetrics computes the product metrics for o's window.
func (s *Store) ProductMetrics(ctx context.Context, o MetricsOpts) (ProductMetrics, error) {
	if err := o.Validate(); err != nil {
		return ProductMetrics{}, err
	}
	from, to := NewUTCTime(o.From), NewUTCTime(o.To)
	f := newMetricsFold(from.Time, to.Time)
	if err := s.foldEvents(ctx, f, from, to); err != nil {
		return ProductMetrics{}, err
	}
	conflicts, err := s.stateConflicts(ctx, from, to)
	if err != nil {
		return ProductMetrics{}, err
	}
	conflicts.AppliedConflicts = f.overall.applied
	pm := ProductMetrics{From: from.Time, To: to.Time, Overall: f.overall.set(), Queues: map[string]MetricSet{}}
	pm.Overall.StateConflicts = &conflicts
	for q, a := range f.queues {
		if o.Queue == "" || q == o.Queue {
			pm.Queues[q] = a.set()
		}
	}
	if o.Queue != "" {
		if _, ok := pm.Queues[o.Queue]; !ok {
			pm.Queues[o.Queue] = (&metricAcc{}).set()
		}
	}
	sla, err := s.SLAStats(ctx)
	if err != nil {
		return ProductMetrics{}, fmt.Errorf("metrics: %w", err)
	}
	pm.SLA = sla
	if pm.Stalled, err = s.StalledStats(ctx); err != nil {
		return ProductMetrics{}, fmt.Errorf("metrics: %w", err)
	}
	return pm, nil
}

func (s *Store) foldEvents(ctx context.Context, f *metricsFold, from, to UTCTime) error {
	rows, err := s.DB.WithContext(ctx).Raw(`SELECT e.session_id, e.seq, e.type, e.created_at,
	CASE WHEN e.type IN ? THEN e.payload ELSE '' END AS payload
FROM events e
WHERE e.session_id IN (
	SELECT DISTINCT w.session_id FROM events w
	WHERE w.type IN ? AND w.created_at >= ? AND w.created_at < ?
)
AND e.type IN ? AND e.created_at < ?
ORDER BY e.session_id, e.seq`, metricPayloadTypes, metricEventTypes, from, to, metricEventTypes, to).Rows()
	if err != nil {
		return fmt.Errorf("metrics: load events: %w", err)
	}
	defer rows.Close()
	var sf *sessionFold
	for rows.Next() {
		var (
			sid, typ, payload string
			seq               int64
			at                UTCTime
		)
		if err := rows.Scan(&sid, &seq, &typ, &at, &payload); err != nil {
			return fmt.Errorf("metrics: scan event: %w", err)
		}
		if sf == nil || sf.id != sid {
			f.finish(sf)
			sf = f.newSession(sid)
		}
		var p metricPayload
		if payload != "" {
			if err := json.Unmarshal([]byte(payload), &p); err != nil {
				return fmt.Errorf("metrics: session %s seq %d: decode %s payload: %w", sid, seq, typ, err)
			}
		}
		f.apply(sf, EventType(typ), at.Time, p)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("metrics: read events: %w", err)
	}
	f.finish(sf)
	return nil
}

func (s *Store) stateConflicts(ctx context.Context, from, to UTCTime) (StateConflicts, error) {
	c := StateConflicts{ByReason: map[string]int64{}}
	db := s.DB.WithContext(ctx)
	if err := db.Raw(`SELECT count(*) FROM events WHERE created_at >= ? AND created_at < ?`, from, to).
		Scan(&c.Committed).Error; err != nil {
		return c, fmt.Errorf("metrics: count events: %w", err)
	}
	var rows []struct {
		Reason string
		N      int64
	}
	if err := db.Raw(`SELECT reason, CAST(SUM(count) AS bigint) AS n FROM write_rejections
WHERE bucket >= ? AND bucket < ? GROUP BY reason`, from, to).Scan(&rows).Error; err != nil {
		return c, fmt.Errorf("metrics: count rejections: %w", err)
	}
	for _, r := range rows {
		c.ByReason[r.Reason] = r.N
		c.Rejected += r.N
	}
	for _, r := range ConflictReasons {
		c.Conflicts += c.ByReason[r]
	}
	c.WriteAttempts = c.Committed + c.Rejected
	if c.WriteAttempts > 0 {
		c.PerThousand = ratio(1000*c.Conflicts, c.WriteAttempts)
	}
	return c, nil
}

// metricAcc accumulates one MetricSet.
type metricAcc struct {
	ended, succeeded                  int64
	sessions, reworked, redelegations int64
	recoveries                        int64
	recoverySum, recoveryMax          time.Duration
	escalations, reviews              int64
	byReason                          map[ReasonCode]int64
	scoreSum, scoreN                  int64
	criteria                          map[string]*[2]int64 // sum, count
	decisions                         int64
	decisionSum                       time.Duration
	applied                           int64
	usageResults, inputTokens, cached int64
}

func ratio(n, d int64) *float64 {
	if d == 0 {
		return nil
	}
	r := float64(n) / float64(d)
	return &r
}

func seconds(d time.Duration, n int64) *float64 {
	if n == 0 {
		return nil
	}
	r := d.Seconds() / float64(n)
	return &r
}

func (a *metricAcc) set() MetricSet {
	m := MetricSet{
		HandoffSuccess: HandoffSuccess{Ended: a.ended, Succeeded: a.succeeded, Rate: ratio(a.succeeded, a.ended)},
		Rework: Rework{Sessions: a.sessions, Reworked: a.reworked, Redelegations: a.redelegations,
			Rate: ratio(a.reworked, a.sessions)},
		Recovery: Recovery{Recoveries: a.recoveries, MeanSeconds: seconds(a.recoverySum, a.recoveries)},
		EscalationClarity: Clarity{
			Escalations: a.escalations, Reviews: a.reviews, Criteria: map[string]CriterionScore{},
			Decisions: a.decisions, MeanClaimToDecisionSeconds: seconds(a.decisionSum, a.decisions),
			EscalationsByReason: make(map[ReasonCode]int64, len(AllReasonCodes)),
		},
	}
	m.PromptCache = PromptCache{Results: a.usageResults, InputTokens: a.inputTokens, CachedInputTokens: a.cached,
		HitRate: ratio(a.cached, a.inputTokens)}
	for _, c := range AllReasonCodes {
		m.EscalationClarity.EscalationsByReason[c] = a.byReason[c]
	}
	if a.recoveries > 0 {
		m.Recovery.MaxSeconds = seconds(a.recoveryMax, 1)
	}
	if a.scoreN > 0 {
		m.EscalationClarity.MeanScore = ratio(a.scoreSum, a.scoreN)
	}
	for c, v := range a.criteria {
		m.EscalationClarity.Criteria[c] = CriterionScore{Count: v[1], Mean: float64(v[0]) / float64(v[1])}
	}
	return m
}

// metricsFold walks session histories and accumulates the metrics.
type metricsFold struct {
	from, to time.Time
	overall  *metricAcc
	queues   map[string]*metricAcc
}

func newMetricsFold(from, to time.Time) *metricsFold {
	return &metricsFold{from: from, to: to, overall: &metricAcc{}, queues: map[string]*metricAcc{}}
}

// add applies fn to the overall accumulator and, if queue is set, to the
// queue's.
func (f *metricsFold) add(queue string, fn func(a *metricAcc)) {
	fn(f.overall)
	if queue != "" {
		fn(f.queue(queue))
	}
}

// queue returns the accumulator of a queue, creating it.
func (f *metricsFold) queue(q string) *metricAcc {
	a := f.queues[q]
	if a == nil {
		a = &metricAcc{}
		f.queues[q] = a
	}
	return a
}

// foldDelegation is the open delegation of a session, as the fold sees it.
type foldDelegation struct {
	id, queue string
	leases    int
	troubled  bool // a lease expired or a failure was retried
}

// sessionFold is what the fold remembers about one session's history.
type sessionFold struct {
	id          string
	open        *foldDelegation
	steps       map[string]bool
	inputLoop   bool // input was requested since the last delegation
	interrupted bool
	outageStart time.Time
	outageQueue string
	claimed     bool
	claimedAt   time.Time
	escQueue    string
	results     map[string]bool // delegation id + attempt with a result
	// Delegation activity in the window, for the rework rate.
	active, reworked           bool
	activeQueues, reworkQueues map[string]bool
}

func (f *metricsFold) newSession(id string) *sessionFold {
	return &sessionFold{id: id, steps: map[string]bool{}, results: map[string]bool{},
		activeQueues: map[string]bool{}, reworkQueues: map[string]bool{}}
}

// finish adds a session's rework verdict.
func (f *metricsFold) finish(sf *sessionFold) {
	if sf == nil || !sf.active {
		return
	}
	f.overall.sessions++
	if sf.reworked {
		f.overall.reworked++
	}
	for q := range sf.activeQueues {
		a := f.queue(q)
		a.sessions++
		if sf.reworkQueues[q] {
			a.reworked++
		}
	}
}

func (sf *sessionFold) openQueue() string {
	if sf.open == nil {
		return ""
	}
	return sf.open.queue
}

// apply folds one event, at time at, into the session and the accumulators.
func (f *metricsFold) apply(sf *sessionFold, t EventType, at time.Time, p metricPayload) {
	in := !at.Before(f.from) && at.Before(f.to)
	touch := func(queue string, redo bool) {
		if !in {
			return
		}
		sf.active = true
		sf.activeQueues[queue] = true
		if redo {
			sf.reworked = true
			sf.reworkQueues[queue] = true
			f.add(queue, func(a *metricAcc) { a.redelegations++ })
		}
	}
	end := func(success bool) {
		d := sf.open
		sf.open = nil
		if d == nil || !in {
			return
		}
		f.add(d.queue, func(a *metricAcc) {
			a.ended++
			if success {
				a.succeeded++
			}
		})
	}
	interrupt := func(queue string) {
		if !sf.interrupted {
			sf.interrupted, sf.outageStart, sf.outageQueue = true, at, queue
		}
	}
	escalate := func(queue string) {
		interrupt(queue)
		sf.escQueue = queue
		if in {
			class := ""
			if p.Failure != nil {
				class = p.Failure.Class
			}
			code := escalationCode(t, class, p.Result)
			f.add(queue, func(a *metricAcc) {
				a.escalations++
				if a.byReason == nil {
					a.byReason = map[ReasonCode]int64{}
				}
				a.byReason[code]++
			})
		}
	}
	productive := func() {
		if !sf.interrupted {
			return
		}
		sf.interrupted = false
		if !in {
			return
		}
		d := at.Sub(sf.outageStart)
		f.add(sf.outageQueue, func(a *metricAcc) {
			a.recoveries++
			a.recoverySum += d
			a.recoveryMax = max(a.recoveryMax, d)
		})
	}
	decision := func() {
		productive()
		if !sf.claimed {
			return
		}
		sf.claimed = false
		if !in {
			return
		}
		d := at.Sub(sf.claimedAt)
		f.add(sf.escQueue, func(a *metricAcc) {
			a.decisions++
			a.decisionSum += d
		})
	}

	switch t {
	case EventDelegationCreated, EventHumanResumed, EventHumanHandedBack:
		if t != EventDelegationCreated {
			decision()
		}
		if sf.open != nil {
			end(false) // superseded; the write path never leaves one open
		}
		redo := t != EventDelegationCreated || sf.steps[p.Step] || sf.inputLoop
		sf.open = &foldDelegation{id: p.DelegationID, queue: p.Queue}
		sf.steps[p.Step] = true
		sf.inputLoop = false
		touch(p.Queue, redo)
	case EventDelegationLeased:
		if sf.open != nil {
			sf.open.leases++
			touch(sf.open.queue, false)
		}
		productive()
	case EventDelegationExpired:
		q := sf.openQueue()
		if sf.open != nil {
			sf.open.troubled = true
		}
		interrupt(q)
		if p.Exhausted {
			touch(q, false)
			escalate(q)
			end(false)
		} else {
			touch(q, true)
		}
	case EventResultCompleted, EventResultNeedsInput, EventResultRejected, EventResultEscalated, EventResultFailed:
		q := sf.openQueue()
		key := p.DelegationID + "#" + strconv.Itoa(p.Attempt)
		if in && (sf.results[key] || sf.open == nil || sf.open.id != p.DelegationID) {
			f.add(q, func(a *metricAcc) { a.applied++ })
		}
		sf.results[key] = true
		if u := p.Usage; u != nil && u.InputTokens != nil && in {
			f.add(q, func(a *metricAcc) {
				a.usageResults++
				a.inputTokens += *u.InputTokens
				if u.CachedInputTokens != nil {
					a.cached += *u.CachedInputTokens
				}
			})
		}
		if t == EventResultFailed && p.Retry {
			if sf.open != nil {
				sf.open.troubled = true
			}
			touch(q, true)
			return
		}
		touch(q, false)
		success := t == EventResultCompleted && p.Attempt == 1 && sf.open != nil &&
			sf.open.leases == 1 && !sf.open.troubled
		end(success)
		switch {
		case t == EventResultNeedsInput:
			sf.inputLoop = true
		case t == EventResultFailed && p.Failure != nil && p.Failure.Class == FailureBadInput:
			sf.inputLoop = true
		case t == EventResultEscalated, t == EventResultFailed:
			escalate(q)
		}
	case EventSessionPaused:
		interrupt(sf.openQueue())
	case EventSessionResumed:
		productive()
	case EventSessionEscalated:
		escalate(sf.openQueue())
		end(false)
	case EventSessionCancelled:
		end(false)
		sf.interrupted, sf.claimed = false, false
	case EventChildrenJoined:
		if p.Result != "met" {
			escalate("")
		}
	case EventHumanClaimed:
		if !sf.claimed {
			sf.claimed, sf.claimedAt = true, at
		}
	case EventHumanRequestedInput:
		decision()
		sf.inputLoop = true
	case EventHumanCompleted, EventHumanRejected:
		decision()
	case EventReviewScored:
		if !in {
			return
		}
		f.add(sf.escQueue, func(a *metricAcc) {
			a.reviews++
			for c, v := range p.Scores {
				if v < 1 || v > 5 {
					continue
				}
				if a.criteria == nil {
					a.criteria = map[string]*[2]int64{}
				}
				cs := a.criteria[c]
				if cs == nil {
					cs = &[2]int64{}
					a.criteria[c] = cs
				}
				cs[0] += int64(v)
				cs[1]++
				a.scoreSum += int64(v)
				a.scoreN++
			}
		})
	}
}
