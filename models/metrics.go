package models

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
)

// Product metrics (README "Product metrics"), computed from the event log over a
// window [From, To) for the whole system and per queue. The console, the
// Prometheus endpoint's descriptions and GET /api/v1/metrics share these
// definitions; each is spelled out on its type below.
//
// How they are computed: one query finds the sessions with an event in the
// window (events(created_at, id)), then those sessions' events up to To are
// streamed, 500 sessions a statement, in (session_id, seq) order
// (events_session_seq_key); payloads are sent
// only for the event types whose payload matters and are decoded in Go into
// one small struct. A per-session fold then walks each history once, so that
// things that began before the window (a lease taken yesterday, an
// interruption or a claim before From) are judged correctly, while only
// outcomes that happen inside the window are counted. The conflict rate adds
// one aggregate over write_rejections (its primary key starts with the
// bucket). The whole hours of a window come from rollups of that same fold
// (metrics_rollup.go); only the partial hours at its ends are folded per
// request.

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
		// Named after the parameter to change: a custom range's end
		// (a named window always ends after it starts).
		v.Add("to", "must be after from")
	}
	if o.Queue != "" && !namePattern.MatchString(o.Queue) {
		v.Add("queue", "must be 1-64 letters, digits, '.', '_' or '-'")
	}
	return v.Err()
}

// ProductMetrics are the product metrics for a window.
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

// MetricSet is the metrics for the whole system or one queue.
//
// Queue attribution: a delegation belongs to its queue; a re-delegation to the
// queue of the delegation it (re)queues; an interruption, escalation, claim,
// decision and review to the queue of the delegation the session was working
// on when it was interrupted or escalated; a committed event or a rejected
// write to the session's queue at that moment (the queue it was last
// delegated to). Events with no queue to blame (a controller pausing a
// session it never delegated) count only in Overall.
type MetricSet struct {
	HandoffSuccess    HandoffSuccess  `json:"handoff_success"`
	Rework            Rework          `json:"rework"`
	InfraRetries      InfraRetries    `json:"infra_retries"`
	Recovery          Recovery        `json:"recovery"`
	StateConflicts    *StateConflicts `json:"state_conflicts"`
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
// window in which a step was delegated again in the window because the work
// itself had to be redone.
//
// Sessions counts the sessions with at least one delegation event in the
// window (delegation.created, delegation.leased, delegation.lease_expired,
// result.*, human.resumed, human.handed_back). A re-delegation is a human
// resuming automation or handing the step back, or a delegation.created for
// a step the session already delegated (a retry after a failure result, an
// escalation or a rejection) or that follows a request for input (a
// needs_input or bad_input result, or a human asking for input). Lease
// expiries and retried transient failures are infrastructure retries
// (InfraRetries), not rework: a crashed worker did not make the work wrong.
// Reworked counts the sessions with at least one re-delegation in the
// window; Redelegations counts the re-delegations. Rate is null without
// sessions.
type Rework struct {
	Sessions      int64    `json:"sessions"`
	Reworked      int64    `json:"reworked"`
	Redelegations int64    `json:"redelegations"`
	Rate          *float64 `json:"rate"`
}

// InfraRetries counts the retries the infrastructure caused, apart from
// rework: lease expiries that queued the step again (a worker crashed, hung
// or lost its network) and transient failures that were retried. Sessions
// is Rework.Sessions; Affected counts those with at least one
// infrastructure retry in the window and Rate is Affected/Sessions (null
// without sessions). An expiry that exhausts the attempts is not a retry: it
// escalates (reason retries_exhausted) and counts there.
type InfraRetries struct {
	Sessions          int64    `json:"sessions"`
	Affected          int64    `json:"affected"`
	Retries           int64    `json:"retries"`
	LeaseExpiries     int64    `json:"lease_expiries"`
	TransientFailures int64    `json:"transient_failures"`
	Rate              *float64 `json:"rate"`
}

// Recovery is the mean recovery time: from the last sign of life before an
// interruption to the next productive transition of the same session.
//
// An interruption and its last sign of life: a lease expiry, from the
// worker's last heartbeat or, without one, its lease start (not from the
// expiry's detection, which comes a lease or more later; expiries recorded
// before last_seen_at existed use the lease start); a pause, from the pause;
// an escalation (session.escalated, result.escalated, a failed result that
// escalates, a join that was not met), from the escalation. Productive
// transitions are a re-lease (delegation.leased) and a resume
// (session.resumed), which end a machine recovery, and a human decision
// (human.requested_input, human.resumed, human.handed_back,
// human.completed, human.rejected), which ends a human wait. The clock
// starts at the first interruption and is not restarted by further
// interruptions before a productive transition (a pause that becomes an
// escalation, or a lease expiry that exhausts the attempts and escalates, is
// one outage, and one human wait if a human ends it). A cancellation ends
// the outage without a sample. A recovery counts in the window in which the
// productive transition happens, even if the interruption was earlier.
//
// Machine and Human report the two kinds apart; Recoveries, MeanSeconds
// and MaxSeconds are over both (kept for existing readers; a mean over
// seconds of machine recovery and hours of human wait says little).
// Seconds are null without recoveries.
type Recovery struct {
	Recoveries  int64         `json:"recoveries"`
	MeanSeconds *float64      `json:"mean_seconds"`
	MaxSeconds  *float64      `json:"max_seconds"`
	Machine     RecoveryTimes `json:"machine"`
	Human       RecoveryTimes `json:"human"`
}

// RecoveryTimes is one kind of recovery: how many, their mean and maximum.
type RecoveryTimes struct {
	Recoveries  int64    `json:"recoveries"`
	MeanSeconds *float64 `json:"mean_seconds"`
	MaxSeconds  *float64 `json:"max_seconds"`
}

// StateConflicts is the state conflict rate: rejected stale and fenced
// writes per 1,000 write attempts.
//
// Write attempts are the events committed in the window plus the writes
// rejected in it (every reason but replay). A conflict is a rejection with
// reason stale (the expected_version was not current) or fenced (the lease
// expired or was superseded). An idempotent replay (a repeat that got the
// first outcome back) is neither a conflict nor an attempt: it is counted in
// Replays only, so a replay never changes the rate. Rejections are counted
// per minute, when they happen (write_rejections): a minute belongs to the
// window when it starts in it. A rejection belongs to the queue of its
// session (or, for a lease claim, the queue claimed from); committed events
// to their session's queue after the event.
//
// AppliedConflicts counts results that were applied for a delegation
// attempt that already had a result or that was not the session's open
// delegation; the write path makes this impossible, so anything but zero is
// a bug to investigate.
type StateConflicts struct {
	WriteAttempts    int64            `json:"write_attempts"`
	Committed        int64            `json:"committed"`
	Rejected         int64            `json:"rejected"`
	ByReason         map[string]int64 `json:"by_reason"`
	Conflicts        int64            `json:"conflicts"`
	PerThousand      *float64         `json:"per_thousand"`
	Replays          int64            `json:"replays"`
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
	RejectStale     = "stale"      // expected_version was not current
	RejectFenced    = "fenced"     // the lease expired or was superseded
	RejectReplay    = "replay"     // an idempotent repeat: the first outcome, nothing written
	RejectKeyReused = "key_reused" // an idempotency key reused with another request
	RejectInvalid   = "invalid"    // input failed validation
	RejectIllegal   = "illegal"    // transition not allowed from the current status
	RejectNotFound  = "not_found"  // unknown session or delegation
	RejectError     = "error"      // anything else (forbidden, internal)
)

// legacyDuplicate is the reason under which rejections were counted before
// replays and reused keys were told apart (and, wrongly, as conflicts).
// Nearly all of them were replays, so they are read as replays: neither
// conflicts nor write attempts.
const legacyDuplicate = "duplicate"

// ConflictReasons are the rejection reasons the state conflict rate counts.
var ConflictReasons = []string{RejectStale, RejectFenced}

// RejectionReason maps a rejected command to the reason recorded in
// write_rejections. A conflict on a lease-bound command (a result, a lease,
// a rescue) is a fence; on any other it is a stale version. (An idempotent
// replay is not an error; the write path records it as RejectReplay.)
func RejectionReason(t EventType, code Code) string {
	switch code {
	case ECONFLICT:
		if t == EventDelegationLeased || t == EventDelegationExpired || strings.HasPrefix(string(t), "result.") {
			return RejectFenced
		}
		return RejectStale
	case EIDEMPOTENCY:
		return RejectKeyReused
	case EINVALID:
		return RejectInvalid
	case EILLEGAL:
		return RejectIllegal
	case ENOTFOUND:
		return RejectNotFound
	}
	return RejectError
}

// errReplayed stands for an idempotent replay in rejected: the command
// succeeded, but as a repeat that wrote nothing.
var errReplayed = errors.New("idempotent replay")

// rejectionRecordTimeout bounds the counter upsert of one rejection.
const rejectionRecordTimeout = 5 * time.Second

// rejected counts a refused write (err) of type t on a session of queue,
// durably, before the refusal is returned to the caller, and then tells the
// Observer.
//
// Why its own transaction: "nothing is written" on a rejection is
// the write path's promise, and the rejected transaction is exactly what
// gets rolled back; on PostgreSQL the conflict often surfaces as a failed
// statement (which aborts the transaction) or only at COMMIT, sent in the
// same round trip. A savepoint would cost a round trip on every write, even
// the ones that succeed. So the counter is one upsert (its own autocommit
// transaction) into the per-minute, per-reason, per-queue row of
// write_rejections, run after the rollback and before the caller hears of
// the rejection: once a client has its 409, the count is in the database
// and survives a crash or restart of the process. (A crash between the
// rollback and the upsert loses that one count, and its client, having no
// answer, retries.) The context may be cancelled already; the count is still
// written. A write the database never judged (unreachable database, the
// caller gone) is not a write attempt and is not counted.
func (s *Store) rejected(ctx context.Context, t EventType, err error, queue string) {
	code := ErrorCode(err)
	if code == EUNAVAILABLE || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return
	}
	reason := RejectReplay
	if !errors.Is(err, errReplayed) {
		reason = RejectionReason(t, code)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rejectionRecordTimeout)
	defer cancel()
	if rerr := s.RecordRejections(ctx, []Rejection{{At: s.now(), Reason: reason, Queue: queue, Count: 1}}); rerr != nil && s.Logger != nil {
		s.Logger.Warn("count rejected write", "type", t, "reason", reason, "queue", queue, "err", rerr)
	}
	if s.Observer != nil {
		s.Observer.Rejected(t, reason, queue)
	}
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

// metricPayloadTypes are the event types whose payload the fold decodes; it
// reads every event of the sessions it folds (each one is a write attempt
// of the conflict rate) but only these payloads.
var metricPayloadTypes = []EventType{
	EventDelegationCreated, EventDelegationExpired, EventHumanResumed, EventHumanHandedBack,
	EventResultCompleted, EventResultNeedsInput, EventResultRejected, EventResultEscalated, EventResultFailed,
	EventChildrenJoined, EventReviewScored,
}

// metricPayload holds the few payload fields the fold needs, from whichever
// payload type carries them.
type metricPayload struct {
	DelegationID string         `json:"delegation_id"`
	Queue        string         `json:"queue"`
	Step         string         `json:"step"`
	Attempt      int            `json:"attempt"`
	Retry        bool           `json:"retry"`
	Exhausted    bool           `json:"exhausted"`
	LastSeenAt   string         `json:"last_seen_at"`
	Failure      *Failure       `json:"failure"`
	Result       string         `json:"result"`
	Scores       map[string]int `json:"scores"`
	Usage        *Usage         `json:"usage"`
}

// ProductMetrics computes the product metrics for o's window: from the
// hourly rollups for the whole hours of the window that are rolled up, and
// by folding the event log for the rest (metrics_rollup.go).
func (s *Store) ProductMetrics(ctx context.Context, o MetricsOpts) (ProductMetrics, error) {
	return s.productMetrics(ctx, o, true)
}

// productMetrics is ProductMetrics, with or without the rollups (the
// equivalence tests compute both).
func (s *Store) productMetrics(ctx context.Context, o MetricsOpts, rollups bool) (ProductMetrics, error) {
	pm, err := s.windowMetrics(ctx, o, rollups)
	if err != nil {
		return ProductMetrics{}, err
	}
	return pm, s.nowStats(ctx, &pm)
}

// nowStats fills the figures of pm that are not windowed (SLA, stalled).
func (s *Store) nowStats(ctx context.Context, pm *ProductMetrics) error {
	sla, stalled, err := s.countNow(ctx, true)
	if err != nil {
		return fmt.Errorf("metrics: sla and stalled counts: %w", err)
	}
	pm.SLA, pm.Stalled = sla, stalled
	return nil
}

// windowMetrics is ProductMetrics without the figures that are not
// windowed (SLA, Stalled): from the rollups and the folded partial hours
// (windowsMetrics), or, without rollups, by folding the whole window.
func (s *Store) windowMetrics(ctx context.Context, o MetricsOpts, rollups bool) (ProductMetrics, error) {
	if err := o.Validate(); err != nil {
		return ProductMetrics{}, err
	}
	if rollups {
		pms, err := s.windowsMetrics(ctx, []MetricsOpts{o})
		if err != nil {
			return ProductMetrics{}, err
		}
		return pms[0], nil
	}
	from, to := NewUTCTime(o.From), NewUTCTime(o.To)
	f := newMetricsFold(from.Time, to.Time)
	if err := s.foldEvents(ctx, f, from, to); err != nil {
		return ProductMetrics{}, err
	}
	if err := s.foldRejections(ctx, f, from, to); err != nil {
		return ProductMetrics{}, err
	}
	pm := ProductMetrics{From: from.Time, To: to.Time, Overall: f.overall.set(), Queues: map[string]MetricSet{}}
	for q, a := range f.queues {
		pm.Queues[q] = a.set()
	}
	return pm.ForQueue(o.Queue), nil
}

// ForQueue returns pm with Queues limited to queue (reported even when it
// has no data); an empty queue keeps them all. Overall stays system-wide.
func (pm ProductMetrics) ForQueue(queue string) ProductMetrics {
	if queue == "" {
		return pm
	}
	m, ok := pm.Queues[queue]
	if !ok {
		m = (&metricAcc{}).set()
	}
	pm.Queues = map[string]MetricSet{queue: m}
	return pm
}

// BusiestQueues lists at most n of pm's queues, the most sessions with
// delegated work first (then the most write attempts, then by name), for
// views that cannot show every queue.
func (pm ProductMetrics) BusiestQueues(n int) []string {
	qs := make([]string, 0, len(pm.Queues))
	for q := range pm.Queues {
		qs = append(qs, q)
	}
	attempts := func(m MetricSet) int64 {
		if m.StateConflicts == nil {
			return 0
		}
		return m.StateConflicts.WriteAttempts
	}
	sort.Slice(qs, func(i, j int) bool {
		a, b := pm.Queues[qs[i]], pm.Queues[qs[j]]
		if a.Rework.Sessions != b.Rework.Sessions {
			return a.Rework.Sessions > b.Rework.Sessions
		}
		if attempts(a) != attempts(b) {
			return attempts(a) > attempts(b)
		}
		return qs[i] < qs[j]
	})
	if n >= 0 && len(qs) > n {
		qs = qs[:n]
	}
	return qs
}

// The fold's two reads (TestMetricsRollupPlansAtScale EXPLAINs them): the
// sessions with an event in the window (events_created_idx), then, a chunk
// of those sessions at a time in id order, their histories up to the
// window's end (events_session_seq_key). As one statement (session_id IN
// (SELECT ...)) PostgreSQL judged a hash join over a sequential scan of
// every event cheaper than that many index ranges, and read a million
// events to fold a few hundred sessions.
const (
	// spanSessionsSQL is also a branch of the reads of several spans
	// (foldSpans), which is why the ordering is not part of it.
	spanSessionsSQL = `SELECT DISTINCT session_id FROM events WHERE created_at >= ? AND created_at < ?`
	foldSessionsSQL = spanSessionsSQL + ` ORDER BY session_id`
	foldEventsSQL   = `SELECT e.session_id, e.seq, e.type, e.created_at,
	CASE WHEN e.type IN ? THEN e.payload ELSE '' END AS payload
FROM events e
WHERE e.session_id IN ? AND e.created_at < ?
ORDER BY e.session_id, e.seq`
)

// foldChunkSize is how many sessions' histories one statement of the fold
// reads.
const foldChunkSize = 500

func (s *Store) foldEvents(ctx context.Context, f *metricsFold, from, to UTCTime) error {
	db := s.read(ctx)
	var ids []string
	// Planned for its range every time (see customPlan): an hour, a slice
	// or a window, with anything from no events to a million.
	if err := s.customPlan(db).Raw(foldSessionsSQL, from, to).Scan(&ids).Error; err != nil {
		return fmt.Errorf("metrics: sessions of the window: %w", err)
	}
	// Each session's events come in one chunk, together (ORDER BY
	// session_id), whatever the order of the chunks; sorted so that a
	// request reads the sessions in the same order every time.
	sort.Strings(ids)
	size := foldChunkSize
	if s.foldChunkOverride > 0 {
		size = s.foldChunkOverride
	}
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), size)]
		ids = ids[len(chunk):]
		if err := s.foldChunk(db, f, chunk, to); err != nil {
			return err
		}
	}
	return nil
}

// foldChunk folds the histories (up to to) of some sessions.
func (s *Store) foldChunk(db *gorm.DB, f *metricsFold, ids []string, to UTCTime) error {
	rows, err := db.Raw(foldEventsSQL, metricPayloadTypes, ids, to).Rows()
	if err != nil {
		return fmt.Errorf("metrics: load events: %w", err)
	}
	defer rows.Close()
	var sf *sessionFold
	for rows.Next() {
		ev, err := scanFoldEvent(rows)
		if err != nil {
			return err
		}
		if sf == nil || sf.id != ev.sessionID {
			f.finish(sf)
			sf = f.newSession(ev.sessionID)
		}
		f.step(sf, ev)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("metrics: read events: %w", err)
	}
	f.finish(sf)
	return nil
}

// rejectionsSQL counts the rejected writes of a window per queue and
// reason (write_rejections' primary key starts with the bucket).
const rejectionsSQL = `SELECT queue, reason, CAST(SUM(count) AS bigint) AS n FROM write_rejections
WHERE bucket >= ? AND bucket < ? GROUP BY queue, reason`

// foldRejections adds the rejected writes counted in the window, per queue.
func (s *Store) foldRejections(ctx context.Context, f *metricsFold, from, to UTCTime) error {
	var rows []struct {
		Queue  string
		Reason string
		N      int64
	}
	if err := s.read(ctx).Raw(rejectionsSQL, from, to).Scan(&rows).Error; err != nil {
		return fmt.Errorf("metrics: count rejections: %w", err)
	}
	for _, r := range rows {
		addRejections(f, r.Queue, r.Reason, r.N)
	}
	return nil
}

// addRejections adds n rejected writes of a queue for a reason to f.
func addRejections(f *metricsFold, queue, reason string, n int64) {
	if reason == legacyDuplicate {
		reason = RejectReplay
	}
	f.add(queue, func(a *metricAcc) {
		if a.rejections == nil {
			a.rejections = map[string]int64{}
		}
		a.rejections[reason] += n
	})
}

// metricAcc accumulates one MetricSet.
type metricAcc struct {
	ended, succeeded                   int64
	sessions, reworked, redelegations  int64
	infraAffected, expiries, transient int64
	machine, human                     recoveryAcc
	escalations, reviews               int64
	byReason                           map[ReasonCode]int64
	scoreSum, scoreN                   int64
	criteria                           map[string]*[2]int64 // sum, count
	decisions                          int64
	decisionSum                        time.Duration
	committed, applied                 int64
	rejections                         map[string]int64 // by reason
	usageResults, inputTokens, cached  int64
}

// recoveryAcc accumulates the recoveries of one kind.
type recoveryAcc struct {
	n        int64
	sum, max time.Duration
}

func (r *recoveryAcc) add(d time.Duration) {
	r.n++
	r.sum += d
	r.max = max(r.max, d)
}

func (r recoveryAcc) times() RecoveryTimes {
	t := RecoveryTimes{Recoveries: r.n, MeanSeconds: seconds(r.sum, r.n)}
	if r.n > 0 {
		t.MaxSeconds = seconds(r.max, 1)
	}
	return t
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
	both := recoveryAcc{n: a.machine.n + a.human.n, sum: a.machine.sum + a.human.sum, max: max(a.machine.max, a.human.max)}
	all := both.times()
	m := MetricSet{
		HandoffSuccess: HandoffSuccess{Ended: a.ended, Succeeded: a.succeeded, Rate: ratio(a.succeeded, a.ended)},
		Rework: Rework{Sessions: a.sessions, Reworked: a.reworked, Redelegations: a.redelegations,
			Rate: ratio(a.reworked, a.sessions)},
		InfraRetries: InfraRetries{Sessions: a.sessions, Affected: a.infraAffected, Retries: a.expiries + a.transient,
			LeaseExpiries: a.expiries, TransientFailures: a.transient, Rate: ratio(a.infraAffected, a.sessions)},
		Recovery: Recovery{Recoveries: all.Recoveries, MeanSeconds: all.MeanSeconds, MaxSeconds: all.MaxSeconds,
			Machine: a.machine.times(), Human: a.human.times()},
		EscalationClarity: Clarity{
			Escalations: a.escalations, Reviews: a.reviews, Criteria: map[string]CriterionScore{},
			Decisions: a.decisions, MeanClaimToDecisionSeconds: seconds(a.decisionSum, a.decisions),
			EscalationsByReason: make(map[ReasonCode]int64, len(AllReasonCodes)),
		},
	}
	c := &StateConflicts{Committed: a.committed, ByReason: map[string]int64{}, AppliedConflicts: a.applied}
	for r, n := range a.rejections {
		if r == RejectReplay {
			c.Replays += n
			continue
		}
		c.ByReason[r] += n
		c.Rejected += n
	}
	for _, r := range ConflictReasons {
		c.Conflicts += c.ByReason[r]
	}
	c.WriteAttempts = c.Committed + c.Rejected
	c.PerThousand = ratio(1000*c.Conflicts, c.WriteAttempts)
	m.StateConflicts = c
	m.PromptCache = PromptCache{Results: a.usageResults, InputTokens: a.inputTokens, CachedInputTokens: a.cached,
		HitRate: ratio(a.cached, a.inputTokens)}
	for _, c := range AllReasonCodes {
		m.EscalationClarity.EscalationsByReason[c] = a.byReason[c]
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
	// onActive, if set, hears about every session with delegation activity
	// in the window once its history is folded (for the rollups' distinct
	// session counts).
	onActive func(sf *sessionFold)
}

func newMetricsFold(from, to time.Time) *metricsFold {
	return &metricsFold{from: from, to: to, overall: &metricAcc{}, queues: map[string]*metricAcc{}}
}

// in reports whether at is in the window.
func (f *metricsFold) in(at time.Time) bool { return !at.Before(f.from) && at.Before(f.to) }

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
	leasedAt  time.Time // start of the current lease, zero when not leased
	troubled  bool      // a lease expired or a failure was retried
}

// sessionFold is what the fold remembers about one session's history.
type sessionFold struct {
	id          string
	queue       string // the queue the session was last delegated to
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
	// Delegation activity in the window, for the rework rate and the
	// infrastructure retries.
	active, reworked, infra                 bool
	activeQueues, reworkQueues, infraQueues map[string]bool
}

func (f *metricsFold) newSession(id string) *sessionFold {
	return &sessionFold{id: id, steps: map[string]bool{}, results: map[string]bool{},
		activeQueues: map[string]bool{}, reworkQueues: map[string]bool{}, infraQueues: map[string]bool{}}
}

// finish adds a session's rework and infrastructure verdicts.
func (f *metricsFold) finish(sf *sessionFold) {
	if sf == nil || !sf.active {
		return
	}
	if f.onActive != nil {
		f.onActive(sf)
	}
	f.overall.sessions++
	if sf.reworked {
		f.overall.reworked++
	}
	if sf.infra {
		f.overall.infraAffected++
	}
	for q := range sf.activeQueues {
		a := f.queue(q)
		a.sessions++
		if sf.reworkQueues[q] {
			a.reworked++
		}
		if sf.infraQueues[q] {
			a.infraAffected++
		}
	}
}

func (sf *sessionFold) openQueue() string {
	if sf.open == nil {
		return ""
	}
	return sf.open.queue
}

// Causes of an infrastructure retry.
const (
	infraExpiry    = "lease_expired"
	infraTransient = "transient"
)

// apply folds one event, at time at, into the session and the accumulators.
// foldEvent is one event of a history being folded, its payload decoded.
type foldEvent struct {
	sessionID string
	typ       EventType
	at        time.Time
	payload   metricPayload
}

// scanFoldEvent scans a row of foldEventsSQL (or the spans' reading of the
// same columns) and decodes its payload.
func scanFoldEvent(rows *sql.Rows) (foldEvent, error) {
	var (
		sid, typ, payload string
		seq               int64
		at                UTCTime
	)
	if err := rows.Scan(&sid, &seq, &typ, &at, &payload); err != nil {
		return foldEvent{}, fmt.Errorf("metrics: scan event: %w", err)
	}
	ev := foldEvent{sessionID: sid, typ: EventType(typ), at: at.Time}
	if payload != "" {
		if err := json.Unmarshal([]byte(payload), &ev.payload); err != nil {
			return foldEvent{}, fmt.Errorf("metrics: session %s seq %d: decode %s payload: %w", sid, seq, typ, err)
		}
	}
	return ev, nil
}

// step applies ev to sf and, when it falls in the window, counts it as a
// committed write: the session's queue after the event, as the Observer and
// a rejection see it.
func (f *metricsFold) step(sf *sessionFold, ev foldEvent) {
	f.apply(sf, ev.typ, ev.at, ev.payload)
	if f.in(ev.at) {
		f.add(sf.queue, func(a *metricAcc) { a.committed++ })
	}
}

func (f *metricsFold) apply(sf *sessionFold, t EventType, at time.Time, p metricPayload) {
	in := f.in(at)
	touch := func(queue string) {
		if in {
			sf.active = true
			sf.activeQueues[queue] = true
		}
	}
	redo := func(queue string) {
		touch(queue)
		if in {
			sf.reworked = true
			sf.reworkQueues[queue] = true
			f.add(queue, func(a *metricAcc) { a.redelegations++ })
		}
	}
	retry := func(queue, cause string) {
		touch(queue)
		if in {
			sf.infra = true
			sf.infraQueues[queue] = true
			f.add(queue, func(a *metricAcc) {
				if cause == infraExpiry {
					a.expiries++
				} else {
					a.transient++
				}
			})
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
	// interrupt starts an outage whose last sign of life was at since,
	// unless one is under way already.
	interrupt := func(queue string, since time.Time) {
		if !sf.interrupted {
			sf.interrupted, sf.outageStart, sf.outageQueue = true, since, queue
		}
	}
	escalate := func(queue string) {
		interrupt(queue, at)
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
	productive := func(human bool) {
		if !sf.interrupted {
			return
		}
		sf.interrupted = false
		if !in {
			return
		}
		d := at.Sub(sf.outageStart)
		f.add(sf.outageQueue, func(a *metricAcc) {
			if human {
				a.human.add(d)
			} else {
				a.machine.add(d)
			}
		})
	}
	decision := func() {
		productive(true)
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
		again := t != EventDelegationCreated || sf.steps[p.Step] || sf.inputLoop
		sf.open = &foldDelegation{id: p.DelegationID, queue: p.Queue}
		sf.queue = p.Queue
		sf.steps[p.Step] = true
		sf.inputLoop = false
		if again {
			redo(p.Queue)
		} else {
			touch(p.Queue)
		}
	case EventDelegationLeased:
		if sf.open != nil {
			sf.open.leases++
			sf.open.leasedAt = at
			touch(sf.open.queue)
		}
		productive(false)
	case EventDelegationExpired:
		q := sf.openQueue()
		since := at
		if sf.open != nil {
			sf.open.troubled = true
			if !sf.open.leasedAt.IsZero() {
				since = sf.open.leasedAt // events from before last_seen_at was recorded
			}
			sf.open.leasedAt = time.Time{}
		}
		if seen, err := parseTime(p.LastSeenAt); err == nil && !seen.After(at) {
			since = seen
		}
		interrupt(q, since)
		if p.Exhausted {
			touch(q)
			escalate(q)
			end(false)
		} else {
			retry(q, infraExpiry)
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
				sf.open.leasedAt = time.Time{}
			}
			retry(q, infraTransient)
			return
		}
		touch(q)
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
		if sf.open != nil {
			sf.open.leasedAt = time.Time{} // a pause revokes a running lease
		}
		interrupt(sf.openQueue(), at)
	case EventSessionResumed:
		productive(false)
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
