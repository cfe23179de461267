package models

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
)

// Metric rollups: the product metrics of every closed hour, per queue, so
// that a request does not fold a month of events.
//
// Why whole-hour rollups of the request's own fold: every figure of the
// fold is counted at the event that causes it (f.in(at) gates every
// increment), and what a session's history leads up to (its open
// delegation, an outage under way) does not depend on the window. So the
// counters of a window are the sums of the counters of its hours (maxima
// the maximum), exactly, and an hour's counters are what the fold computes
// for that hour. RollupMetrics, run by the maintenance loop, folds each
// closed hour once and stores its counters per queue (metric_rollups; '*'
// is the whole system) and the sessions it saw active, reworked or retried
// per queue (metric_session_hours: the rework and infrastructure rates
// count sessions, which do not add up across hours). A window counts each
// session once, at its first hour in the window: metric_session_firsts
// keeps, per hour, queue and kind, how many sessions had their previous
// such hour at each earlier time, so a window's distinct count is a sum
// over its hours of the rows whose previous hour is before the window,
// without a sort of every session-hour row.
//
// A request for [from, to) reads the rollups of the whole hours inside it
// that are rolled up, and folds the event log only for the partial hours
// at its two ends (and for any hour not rolled up yet); the sessions active
// at the ends are counted once, checked against the whole hours' rows. The
// cost of a request is therefore a few aggregates over per-hour rows plus
// the fold of at most two hours of activity, whatever the window.
//
// An hour is rolled up once it ended metricRollupGrace ago: a write is
// stamped with its time before it commits, and the grace is how long a
// write transaction may take to commit and still be counted in its hour.
// (The write path's transactions last milliseconds; one that stays open
// longer than the grace would be left out of its hour's rollup.)

// metricRollupGrace is how long after an hour ends it is rolled up.
const metricRollupGrace = 5 * time.Minute

// metricSlice is the length of the slices of the open hour that are rolled
// up before the hour is, and metricSliceGrace how long after a slice ends
// it is: a request folds at most slice + grace (+ the pass interval) of
// events at its end. The slices can wait less than the hour because they
// are provisional: the hour's own fold, 5 minutes after it ends, replaces
// them, so a write that commits more than a minute after its time stamp is
// missing from its slice only until then.
const (
	metricSlice      = 5 * time.Minute
	metricSliceGrace = time.Minute
)

// overallQueue is the queue name under which the rollups keep the whole
// system's figures; no queue can be called that (namePattern).
const overallQueue = "*"

// metricRollupLockSQL serialises the RollupMetrics passes of several
// processes. The key names the schema: advisory locks are per database, and
// deployments (and tests) that keep their tables in schemas of one database
// would otherwise wait for each other's passes.
const metricRollupLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended('taskpilots metric_rollups ' || current_schema(), 0))`

type metricRollupRow struct {
	Bucket UTCTime
	Queue  string
	Name   string
	Value  int64
}

func (metricRollupRow) TableName() string { return "metric_rollups" }

type metricSessionHour struct {
	Bucket    UTCTime
	Queue     string
	SessionID string
	Reworked  bool
	Infra     bool
}

func (metricSessionHour) TableName() string { return "metric_session_hours" }

// metricSessionFirst counts the sessions of a queue that had an hour of a
// kind (active, reworked, infra) with their previous hour of that kind at
// Prev (noPrevHour when none): a window [a, b) counts each session once, at
// its hour in the window whose previous one is before a, so its distinct
// count is SUM(n) over its hours' rows with prev < a (migration 00024).
type metricSessionFirst struct {
	Bucket UTCTime
	Queue  string
	Kind   string
	Prev   UTCTime
	N      int64
}

func (metricSessionFirst) TableName() string { return "metric_session_firsts" }

// The kinds of metricSessionFirst.
const (
	kindActive   = "active"
	kindReworked = "reworked"
	kindInfra    = "infra"
)

// noPrevHour is metricSessionFirst.Prev for a session's first hour of a
// kind.
var noPrevHour = NewUTCTime(time.Unix(0, 0))

// prevHoursSQL finds, for sessions of an hour being rolled up, their latest
// earlier hour of each kind per queue (metric_session_hours_session_idx).
const prevHoursSQL = `SELECT session_id, queue, MAX(bucket) AS active,
	MAX(CASE WHEN reworked THEN bucket END) AS reworked,
	MAX(CASE WHEN infra THEN bucket END) AS infra
FROM metric_session_hours WHERE session_id IN ? AND bucket < ? GROUP BY session_id, queue`

// sessionFirsts turns the session rows of an hour into its
// metricSessionFirst rows, reading each session's previous hours.
func sessionFirsts(db *gorm.DB, hour UTCTime, sessions []metricSessionHour) ([]metricSessionFirst, error) {
	type key struct{ queue, kind string }
	prevs := map[[2]string][3]UTCTime{}
	ids := make([]string, 0, len(sessions))
	seen := map[string]bool{}
	for _, r := range sessions {
		if !seen[r.SessionID] {
			seen[r.SessionID] = true
			ids = append(ids, r.SessionID)
		}
	}
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 500)]
		ids = ids[len(chunk):]
		var rows []struct {
			SessionID string
			Queue     string
			Active    NullTime
			Reworked  NullTime
			Infra     NullTime
		}
		if err := db.Raw(prevHoursSQL, chunk, hour).Scan(&rows).Error; err != nil {
			return nil, fmt.Errorf("metric rollups: previous hours: %w", err)
		}
		for _, r := range rows {
			p := [3]UTCTime{noPrevHour, noPrevHour, noPrevHour}
			for i, t := range []NullTime{r.Active, r.Reworked, r.Infra} {
				if t.Valid {
					p[i] = t.Time
				}
			}
			prevs[[2]string{r.SessionID, r.Queue}] = p
		}
	}
	counts := map[key]map[int64]int64{} // by prev, in Unix nanoseconds
	add := func(q, kind string, prev UTCTime) {
		k := key{q, kind}
		if counts[k] == nil {
			counts[k] = map[int64]int64{}
		}
		counts[k][prev.UnixNano()]++
	}
	for _, r := range sessions {
		p, ok := prevs[[2]string{r.SessionID, r.Queue}]
		if !ok {
			p = [3]UTCTime{noPrevHour, noPrevHour, noPrevHour}
		}
		add(r.Queue, kindActive, p[0])
		if r.Reworked {
			add(r.Queue, kindReworked, p[1])
		}
		if r.Infra {
			add(r.Queue, kindInfra, p[2])
		}
	}
	var out []metricSessionFirst
	for k, m := range counts {
		for prev, n := range m {
			out = append(out, metricSessionFirst{Bucket: hour, Queue: k.queue, Kind: k.kind, Prev: NewUTCTime(time.Unix(0, prev)), N: n})
		}
	}
	return out, nil
}

// counters calls fn with every additive counter (and maximum, names ending
// in _max) of a, skipping zeros; the distinct session counts are not among
// them.
func (a *metricAcc) counters(fn func(name string, v int64)) {
	emit := func(name string, v int64) {
		if v != 0 {
			fn(name, v)
		}
	}
	emit("ended", a.ended)
	emit("succeeded", a.succeeded)
	emit("redelegations", a.redelegations)
	emit("expiries", a.expiries)
	emit("transient", a.transient)
	emit("machine_n", a.machine.n)
	emit("machine_sum", int64(a.machine.sum))
	emit("machine_max", int64(a.machine.max))
	emit("human_n", a.human.n)
	emit("human_sum", int64(a.human.sum))
	emit("human_max", int64(a.human.max))
	emit("escalations", a.escalations)
	emit("reviews", a.reviews)
	emit("score_sum", a.scoreSum)
	emit("score_n", a.scoreN)
	emit("decisions", a.decisions)
	emit("decision_sum", int64(a.decisionSum))
	emit("committed", a.committed)
	emit("applied", a.applied)
	emit("usage_results", a.usageResults)
	emit("input_tokens", a.inputTokens)
	emit("cached", a.cached)
	for c, n := range a.byReason {
		emit("reason:"+string(c), n)
	}
	for c, v := range a.criteria {
		emit("crit_sum:"+c, v[0])
		emit("crit_n:"+c, v[1])
	}
}

// addCounter adds one counter (as counters names it) to a; a maximum is
// raised instead.
func (a *metricAcc) addCounter(name string, v int64) {
	switch name {
	case "ended":
		a.ended += v
	case "succeeded":
		a.succeeded += v
	case "redelegations":
		a.redelegations += v
	case "expiries":
		a.expiries += v
	case "transient":
		a.transient += v
	case "machine_n":
		a.machine.n += v
	case "machine_sum":
		a.machine.sum += time.Duration(v)
	case "machine_max":
		a.machine.max = max(a.machine.max, time.Duration(v))
	case "human_n":
		a.human.n += v
	case "human_sum":
		a.human.sum += time.Duration(v)
	case "human_max":
		a.human.max = max(a.human.max, time.Duration(v))
	case "escalations":
		a.escalations += v
	case "reviews":
		a.reviews += v
	case "score_sum":
		a.scoreSum += v
	case "score_n":
		a.scoreN += v
	case "decisions":
		a.decisions += v
	case "decision_sum":
		a.decisionSum += time.Duration(v)
	case "committed":
		a.committed += v
	case "applied":
		a.applied += v
	case "usage_results":
		a.usageResults += v
	case "input_tokens":
		a.inputTokens += v
	case "cached":
		a.cached += v
	default:
		kind, key, _ := strings.Cut(name, ":")
		switch kind {
		case "reason":
			if a.byReason == nil {
				a.byReason = map[ReasonCode]int64{}
			}
			a.byReason[ReasonCode(key)] += v
		case "crit_sum", "crit_n":
			if a.criteria == nil {
				a.criteria = map[string]*[2]int64{}
			}
			cs := a.criteria[key]
			if cs == nil {
				cs = &[2]int64{}
				a.criteria[key] = cs
			}
			if kind == "crit_sum" {
				cs[0] += v
			} else {
				cs[1] += v
			}
		}
	}
}

// accOf returns the accumulator of a rollup queue name ('*' is overall).
func (f *metricsFold) accOf(queue string) *metricAcc {
	if queue == overallQueue {
		return f.overall
	}
	return f.queue(queue)
}

// mergeCounters adds g's counters (not its session counts) into f.
func (f *metricsFold) mergeCounters(g *metricsFold) {
	g.overall.counters(f.overall.addCounter)
	for q, a := range g.queues {
		dst := f.queue(q)
		a.counters(dst.addCounter)
	}
}

// Session activity flags, per queue, of a session in a span of time.
const (
	activeFlag   = 1
	reworkedFlag = 2
	infraFlag    = 4
)

// sessionFlags is what a fold saw of one session: flags per queue ('*' for
// the whole system).
func sessionFlags(sf *sessionFold) map[string]uint8 {
	m := map[string]uint8{}
	for q := range sf.activeQueues {
		fl := uint8(activeFlag)
		if sf.reworkQueues[q] {
			fl |= reworkedFlag
		}
		if sf.infraQueues[q] {
			fl |= infraFlag
		}
		m[q] = fl
	}
	fl := uint8(activeFlag)
	if sf.reworked {
		fl |= reworkedFlag
	}
	if sf.infra {
		fl |= infraFlag
	}
	m[overallQueue] = fl
	return m
}

func floorHour(t time.Time) time.Time { return t.UTC().Truncate(time.Hour) }

func ceilHour(t time.Time) time.Time {
	f := floorHour(t)
	if f.Equal(t) {
		return f
	}
	return f.Add(time.Hour)
}

func floorSlice(t time.Time) time.Time { return t.UTC().Truncate(metricSlice) }

func ceilSlice(t time.Time) time.Time {
	f := floorSlice(t)
	if f.Equal(t) {
		return f
	}
	return f.Add(metricSlice)
}

// rollupState is how far the rollups reach: every hour before hours is
// rolled up whole, and the slices of [hours, through) are rolled up
// (through - hours is at most an hour; equal when no slice is).
type rollupState struct {
	hours, through time.Time
}

// readRollupState reads the rollup state (false before the first pass).
func readRollupState(db *gorm.DB) (rollupState, bool, error) {
	var rows []struct{ RolledThrough, HoursThrough UTCTime }
	if err := db.Raw(`SELECT rolled_through, hours_through FROM metric_rollup_state WHERE id = 1`).Scan(&rows).Error; err != nil {
		return rollupState{}, false, fmt.Errorf("metric rollups: read state: %w", err)
	}
	if len(rows) == 0 {
		return rollupState{}, false, nil
	}
	return rollupState{hours: rows[0].HoursThrough.Time, through: rows[0].RolledThrough.Time}, true, nil
}

// MetricRollupPass is what one RollupMetrics call rolled up.
type MetricRollupPass struct {
	Hours  int // hours rolled up whole
	Slices int // 5-minute slices of the open hour
}

// RollupMetrics rolls up every closed hour not rolled up yet (from the
// first event on the first run: the backfill), then the settled slices of
// the hour still open, one hour or slice per transaction. Several processes
// may run it: the passes take turns (an advisory lock on PostgreSQL, the
// single writer on SQLite), and an hour or slice is written once.
func (s *Store) RollupMetrics(ctx context.Context) (MetricRollupPass, error) {
	var pass MetricRollupPass
	for {
		did, err := s.rollupNext(ctx)
		if err != nil || did == nothingDue {
			return pass, err
		}
		if did == rolledHour {
			pass.Hours++
		} else if did == rolledSlice {
			pass.Slices++
		}
	}
}

// What rollupNext did.
const (
	nothingDue = iota
	rolledHour
	rolledSlice
	rolledElsewhere // another process moved the state on; look again
)

// rollupNext rolls up the next hour due or, when no hour is, the next
// slice due of the hour after the last one rolled up whole.
func (s *Store) rollupNext(ctx context.Context) (int, error) {
	db := s.DB.WithContext(ctx)
	st, ok, err := readRollupState(db)
	if err != nil {
		return nothingDue, err
	}
	if !ok {
		var first []struct{ At *UTCTime }
		if err := db.Raw(`SELECT MIN(created_at) AS at FROM events`).Scan(&first).Error; err != nil {
			return nothingDue, fmt.Errorf("metric rollups: first event: %w", err)
		}
		if len(first) == 0 || first[0].At == nil || first[0].At.IsZero() {
			return nothingDue, nil
		}
		h := floorHour(first[0].At.Time)
		st = rollupState{hours: h, through: h}
	}
	now := s.now()
	if st.hours.Before(floorHour(now.Add(-metricRollupGrace))) {
		// The hour is settled: its own fold replaces its slices.
		end := st.hours.Add(time.Hour)
		return s.rollupSpan(ctx, st, ok, [2]time.Time{st.hours, end}, rollupState{hours: end, through: end}, rolledHour)
	}
	if st.through.Before(floorSlice(now.Add(-metricSliceGrace))) {
		end := st.through.Add(metricSlice)
		return s.rollupSpan(ctx, st, ok, [2]time.Time{st.through, end}, rollupState{hours: st.hours, through: end}, rolledSlice)
	}
	return nothingDue, nil
}

// rollupSpan folds span (an hour, or a slice) and writes its rows in place
// of those of every earlier roll-up inside it (an hour's slices), moving
// the state from st (none when !ok) to next, and returns did. When another
// process moved the state meanwhile, it writes nothing and returns
// rolledElsewhere: the caller looks again.
func (s *Store) rollupSpan(ctx context.Context, st rollupState, ok bool, span [2]time.Time, next rollupState, did int) (int, error) {
	db := s.DB.WithContext(ctx)
	from, to := NewUTCTime(span[0]), NewUTCTime(span[1])
	f := newMetricsFold(from.Time, to.Time)
	var sessions []metricSessionHour
	f.onActive = func(sf *sessionFold) {
		for q, fl := range sessionFlags(sf) {
			sessions = append(sessions, metricSessionHour{Bucket: from, Queue: q, SessionID: sf.id,
				Reworked: fl&reworkedFlag != 0, Infra: fl&infraFlag != 0})
		}
	}
	if err := s.foldEvents(ctx, f, from, to); err != nil {
		return nothingDue, err
	}
	var counters []metricRollupRow
	for q, a := range f.queues {
		a.counters(func(name string, v int64) {
			counters = append(counters, metricRollupRow{Bucket: from, Queue: q, Name: name, Value: v})
		})
	}
	f.overall.counters(func(name string, v int64) {
		counters = append(counters, metricRollupRow{Bucket: from, Queue: overallQueue, Name: name, Value: v})
	})
	// The previous buckets are those before the span: an hour's own
	// slices are not among them.
	firsts, err := sessionFirsts(db, from, sessions)
	if err != nil {
		return nothingDue, err
	}
	err = s.Transact(ctx, func(tx *gorm.DB) error {
		if s.Dialect == Postgres {
			if err := tx.Exec(metricRollupLockSQL).Error; err != nil {
				return err
			}
		}
		cur, curOK, err := readRollupState(tx)
		if err != nil {
			return err
		}
		if curOK != ok || (ok && (!cur.hours.Equal(st.hours) || !cur.through.Equal(st.through))) {
			return errRolledByOther
		}
		for _, m := range []any{&metricRollupRow{}, &metricSessionHour{}, &metricSessionFirst{}} {
			if err := tx.Where("bucket >= ? AND bucket < ?", from, to).Delete(m).Error; err != nil {
				return err
			}
		}
		if len(counters) > 0 {
			if err := tx.CreateInBatches(counters, 1000).Error; err != nil {
				return err
			}
		}
		if len(sessions) > 0 {
			if err := tx.CreateInBatches(sessions, 1000).Error; err != nil {
				return err
			}
		}
		if len(firsts) > 0 {
			if err := tx.CreateInBatches(firsts, 1000).Error; err != nil {
				return err
			}
		}
		hours, through := NewUTCTime(next.hours), NewUTCTime(next.through)
		if ok {
			return tx.Exec(`UPDATE metric_rollup_state SET rolled_through = ?, hours_through = ? WHERE id = 1`, through, hours).Error
		}
		return tx.Exec(`INSERT INTO metric_rollup_state (id, rolled_through, hours_through) VALUES (1, ?, ?)`, through, hours).Error
	})
	if errors.Is(err, errRolledByOther) {
		return rolledElsewhere, nil
	}
	if err != nil {
		return nothingDue, fmt.Errorf("metric rollups: %s to %s: %w", from, to, err)
	}
	return did, nil
}

// The request's reads of the rollups (TestMetricsRollupPlansAtScale
// EXPLAINs them): the whole hours' counters, their distinct sessions, and
// which of the sessions at the window's ends they counted.
const (
	rollupSumsSQL = `SELECT queue, name, CAST(SUM(value) AS bigint) AS total, MAX(value) AS top FROM metric_rollups
WHERE bucket >= ? AND bucket < ? GROUP BY queue, name`
	rollupSessionsSQL = `SELECT queue, kind, CAST(SUM(n) AS bigint) AS n FROM metric_session_firsts
WHERE bucket >= ? AND bucket < ? AND prev < ? GROUP BY queue, kind`
	rollupEdgeSessionsSQL = `SELECT session_id, queue, MAX(CASE WHEN reworked THEN 1 ELSE 0 END) = 1 AS reworked,
	MAX(CASE WHEN infra THEN 1 ELSE 0 END) = 1 AS infra
FROM metric_session_hours WHERE session_id IN ? AND bucket >= ? AND bucket < ? GROUP BY session_id, queue`
)

// errRolledByOther: another process rolled the span up meanwhile.
var errRolledByOther = errors.New("rolled up by another process")

// edgeFold is the fold of a span folded from the event log (a partial
// hour at a window's end, or a whole window without rolled-up hours): its
// counters, and the flags of the sessions it saw, per queue.
type edgeFold struct {
	fold     *metricsFold
	sessions map[string]map[string]uint8
}
