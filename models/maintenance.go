package models

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"
)

// MaintenanceReport counts what one maintenance pass did.
type MaintenanceReport struct {
	Rescued int
	// Joined counts joins recorded (timed out, or caught up after a missed
	// child-done hook); Resumed, snoozes ended; SLABreaches, breaches recorded.
	Joined      int
	Resumed     int
	SLABreaches int
	// ReviewItems counts decided escalations added to the review queue
	// that the write path had not added (decisions of an older binary).
	ReviewItems int
	// ExpiredKeys and ExpiredRejections count idempotency keys and
	// rejection counters deleted past their lifetime (retention.go).
	ExpiredKeys       int
	ExpiredRejections int
}

// maintainBatch bounds the rows one kind handles per pass; a kind that fills
// its batch makes the next pass due at once.
const maintainBatch = 200

// timerProbe is one scalar subquery of the pass's probe statement: it yields
// a time (NULL when it has none), from which its kind derives when it is due.
type timerProbe struct {
	sql  string
	args []any
}

// timerKind is one kind of periodic work. Each kind answers "when is my
// earliest row due?" with index-only subqueries, so that a pass with nothing
// due is one statement whatever the number of sessions, and it handles its
// due rows only when that time has come. A new kind is one more entry in
// timerKinds.
type timerKind struct {
	name   string
	probes func(s *Store) []timerProbe
	// due turns the probes' values (in order) into the kind's earliest due
	// time; ok is false when the kind has nothing pending.
	due func(s *Store, vals []NullTime) (at time.Time, ok bool)
	// run handles what is due, at most limit rows, adds to r, and returns
	// how many rows it found (limit means more may be waiting).
	run func(ctx context.Context, s *Store, limit int, r *MaintenanceReport) (found int, err error)
}

// earliest is the due of kinds whose probes are "min(due column)" shifted by
// a fixed delay per probe.
func earliest(after ...time.Duration) func(*Store, []NullTime) (time.Time, bool) {
	return func(_ *Store, vals []NullTime) (time.Time, bool) {
		var at time.Time
		ok := false
		for i, v := range vals {
			if !v.Valid {
				continue
			}
			t := v.Time.Time.Add(after[i])
			if !ok || t.Before(at) {
				at, ok = t, true
			}
		}
		return at, ok
	}
}

func timerKinds() []timerKind {
	return append([]timerKind{
		{
			// Leases that ran out: delegations_expiry_idx.
			name: "lease_expiry",
			probes: func(*Store) []timerProbe {
				return []timerProbe{{sql: `SELECT min(lease_expires_at) FROM delegations WHERE status = 'leased'`}}
			},
			due: earliest(0),
			run: func(ctx context.Context, s *Store, limit int, r *MaintenanceReport) (int, error) {
				n, found, err := s.rescueExpired(ctx, limit)
				r.Rescued += n
				return found, err
			},
		},
		{
			// Snoozes that end: sessions_resume_at_idx.
			name: "snooze",
			probes: func(*Store) []timerProbe {
				return []timerProbe{{sql: `SELECT min(resume_at) FROM sessions WHERE resume_at IS NOT NULL`}}
			},
			due: earliest(0),
			run: func(ctx context.Context, s *Store, limit int, r *MaintenanceReport) (int, error) {
				n, found, err := s.resumeSnoozed(ctx, limit)
				r.Resumed += n
				return found, err
			},
		},
		{
			// Joins that time out: sessions_join_due_at_idx.
			name: "join_timeout",
			probes: func(*Store) []timerProbe {
				return []timerProbe{{sql: `SELECT min(join_due_at) FROM sessions WHERE join_due_at IS NOT NULL`}}
			},
			due: earliest(0),
			run: func(ctx context.Context, s *Store, limit int, r *MaintenanceReport) (int, error) {
				n, found, err := s.joinTimeouts(ctx, limit)
				r.Joined += n
				return found, err
			},
		},
		{
			// Escalations past their SLA whose breach is not recorded yet:
			// one seek per SLA bucket in sessions_sla_pending_idx, which
			// leaves out the escalations already judged breached.
			name: "sla_breach",
			probes: func(s *Store) []timerProbe {
				var ps []timerProbe
				for _, b := range s.slaBuckets() {
					ps = append(ps, timerProbe{
						sql:  `SELECT min(escalated_at) FROM ` + s.slaPendingFrom() + ` WHERE ` + slaPendingSQL + ` AND ` + b.where,
						args: b.args,
					})
				}
				return ps
			},
			due: func(s *Store, vals []NullTime) (time.Time, bool) {
				bs := s.slaBuckets()
				after := make([]time.Duration, len(bs))
				for i, b := range bs {
					after[i] = b.budget
				}
				return earliest(after...)(s, vals)
			},
			run: func(ctx context.Context, s *Store, limit int, r *MaintenanceReport) (int, error) {
				n, found, err := s.recordSLABreaches(ctx, limit)
				r.SLABreaches += n
				return found, err
			},
		},
		{
			// The join catch-up for a child-done hook lost between a
			// child's commit and its parent's evaluation (a crash): due
			// when a child session was written since the last look, found
			// through sessions_child_updated_idx.
			name: "join_catch_up",
			probes: func(*Store) []timerProbe {
				return []timerProbe{{sql: `SELECT max(updated_at) FROM sessions WHERE parent_id IS NOT NULL`}}
			},
			due: func(s *Store, vals []NullTime) (time.Time, bool) {
				if !vals[0].Valid {
					return time.Time{}, false
				}
				s.maint.mu.Lock()
				defer s.maint.mu.Unlock()
				s.maint.childSeen = vals[0].Time.Time
				if s.maint.childDone.IsZero() || vals[0].Time.Time.After(s.maint.childDone) {
					return time.Time{}, true // due now
				}
				return time.Time{}, false
			},
			run: func(ctx context.Context, s *Store, limit int, r *MaintenanceReport) (int, error) {
				n, found, err := s.joinCatchUp(ctx, limit)
				r.Joined += n
				return found, err
			},
		},
		{
			// The write path queues every decision for review; this
			// catches up decisions an older binary wrote without (during
			// a rolling upgrade): at start, then every reviewSyncEvery. It
			// needs no probe: its schedule is this process's.
			name:   "review_sync",
			probes: func(*Store) []timerProbe { return nil },
			due: func(s *Store, _ []NullTime) (time.Time, bool) {
				s.maint.mu.Lock()
				defer s.maint.mu.Unlock()
				return s.maint.reviewSyncAt, true // zero: now
			},
			run: func(ctx context.Context, s *Store, _ int, r *MaintenanceReport) (int, error) {
				n, err := s.SyncReviewItems(ctx, s.Reviews)
				r.ReviewItems += n
				if err == nil {
					s.maint.mu.Lock()
					s.maint.reviewSyncAt = s.now().Add(reviewSyncEvery)
					s.maint.mu.Unlock()
				}
				return 0, err
			},
		},
	}, retentionKinds()...)
}

// reviewSyncEvery is how often the review queue's catch-up runs; it reads
// only what is new since its watermark.
const reviewSyncEvery = 5 * time.Minute

// maintState is the maintenance loop's memory in this process.
type maintState struct {
	mu sync.Mutex
	// planned is when the loop means to run its next pass; a write that
	// creates an earlier timer moves it and signals wake.
	planned time.Time
	wake    chan struct{}
	// learned is the earliest timer reported since the running pass began
	// its probe (zero when none): a timer committed while the pass runs is
	// not in what the probe read, nor before the pass's old plan, so the
	// loop looks here before it sleeps.
	learned time.Time
	// maxSleep is the loop's longest sleep (DefaultMaintainMaxSleep until
	// a loop runs); told is the earliest timer this process announced to
	// the other replicas that is not yet due (see broadcastTimer).
	maxSleep time.Duration
	told     time.Time
	// childSeen is the newest child write the last probe saw; childDone,
	// the newest the join catch-up has looked at.
	childSeen, childDone time.Time
	// stuck holds kinds resting after a run that handled none of the rows
	// it found.
	stuck map[string]time.Time
	// reviewSyncAt is when the review queue's catch-up is next due.
	reviewSyncAt time.Time
}

func (m *maintState) wakeChan() chan struct{} {
	if m.wake == nil {
		m.wake = make(chan struct{}, 1)
	}
	return m.wake
}

// TimerWake is signalled when a write in this process creates a timer due
// before the maintenance loop's planned pass (see PlanMaintenance).
func (s *Store) TimerWake() <-chan struct{} {
	s.maint.mu.Lock()
	defer s.maint.mu.Unlock()
	return s.maint.wakeChan()
}

// PlanMaintenance records when the loop will run its next pass, so that a
// write creating an earlier timer wakes it.
func (s *Store) PlanMaintenance(at time.Time) {
	s.maint.mu.Lock()
	s.maint.planned = at
	s.maint.mu.Unlock()
}

// timerSet is called after a commit that created a timer due at at: it
// wakes this process's loop when that is before its planned pass, and
// tells the other replicas (broadcastTimer), whose loops may sleep longer.
func (s *Store) timerSet(at time.Time) {
	s.timerLearned(at)
	s.broadcastTimer(at)
}

// timerLearned wakes the loop when a timer due at at (committed here or
// announced by another replica) is before its planned pass.
func (s *Store) timerLearned(at time.Time) {
	s.maint.mu.Lock()
	defer s.maint.mu.Unlock()
	if s.maint.learned.IsZero() || at.Before(s.maint.learned) {
		s.maint.learned = at
	}
	if s.maint.planned.IsZero() || !at.Before(s.maint.planned) {
		return
	}
	s.maint.planned = at
	select {
	case s.maint.wakeChan() <- struct{}{}:
	default:
	}
}

// timersOf reports the timers a committed state carries to the loop.
func (s *Store) timersOf(next State, now time.Time) {
	switch {
	case next.Status == StatusPaused && next.PausedUntil != "":
		if t, err := parseTime(next.PausedUntil); err == nil {
			s.timerSet(t)
		}
	case next.Status == StatusWaitingChildren && next.Join != nil && next.Join.DueAt != "":
		if t, err := parseTime(next.Join.DueAt); err == nil {
			s.timerSet(t)
		}
	case inHumanHands(next.Status):
		// A new escalation's clock starts now; a continuing one is already
		// known to the loop, whose planned pass is no later than its due.
		s.timerSet(now.Add(s.slaPolicy().For(next.Priority)))
	}
}

// Maintain runs one pass of the periodic background work (see
// MaintainNext).
func (s *Store) Maintain(ctx context.Context) (MaintenanceReport, error) {
	r, _, err := s.MaintainNext(ctx)
	return r, err
}

// MaintainNext runs one maintenance pass: one probe statement asks every
// timer kind for its earliest due time, and only the kinds whose time has
// come run. It returns what the pass did and when the next pass is due
// (zero when nothing is pending; now when a kind filled its batch). On
// PostgreSQL each due kind runs under an advisory lock, so that replicas
// whose passes coincide do not do the same work twice: the one that does
// not get the lock skips the kind. Every kind is also safe without the
// lock: each row is re-checked under its session lock.
func (s *Store) MaintainNext(ctx context.Context) (MaintenanceReport, time.Time, error) {
	var r MaintenanceReport
	kinds := timerKinds()
	dues, err := s.probeTimers(ctx, kinds)
	if err != nil {
		return r, time.Time{}, fmt.Errorf("maintain: %w", err)
	}
	now := s.now()
	var next time.Time
	plan := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	var errs []error
	for i, k := range kinds {
		d := dues[i]
		if !d.ok {
			continue
		}
		if d.at.After(now) {
			plan(d.at)
			continue
		}
		if until, ok := s.stuckUntil(k.name); ok && until.After(now) {
			plan(until)
			continue
		}
		before := r
		found, err := s.runKind(ctx, k, &r)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", k.name, err))
			plan(now.Add(time.Second)) // retry soon, not at once
			continue
		}
		if found > 0 && r == before {
			// Every row found was skipped (each is re-checked under its
			// session lock; a row whose state disagrees stays skipped):
			// do not spin on them. Rows written later are not held back
			// longer than this.
			s.setStuck(k.name, now.Add(stuckBackoff))
			plan(now.Add(stuckBackoff))
			continue
		}
		s.setStuck(k.name, time.Time{})
		if found >= maintainBatch {
			plan(now)
		} else if k.name != "join_catch_up" && k.name != "review_sync" {
			// What remains of this kind is due later; the next probe says
			// when. Until then, re-probe after the shortest pause.
			plan(now.Add(minMaintainGap))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return r, next, fmt.Errorf("maintain: %w", err)
	}
	return r, next, nil
}

// stuckBackoff is how long a kind whose due rows were all skipped rests.
const stuckBackoff = 30 * time.Second

func (s *Store) stuckUntil(kind string) (time.Time, bool) {
	s.maint.mu.Lock()
	defer s.maint.mu.Unlock()
	t, ok := s.maint.stuck[kind]
	return t, ok
}

func (s *Store) setStuck(kind string, until time.Time) {
	s.maint.mu.Lock()
	defer s.maint.mu.Unlock()
	if until.IsZero() {
		delete(s.maint.stuck, kind)
		return
	}
	if s.maint.stuck == nil {
		s.maint.stuck = make(map[string]time.Time)
	}
	s.maint.stuck[kind] = until
}

// minMaintainGap is the pause after a pass that did work before the probe
// that finds the next due time.
const minMaintainGap = 100 * time.Millisecond

type kindDue struct {
	at time.Time
	ok bool
}

// probeTimers asks every kind for its earliest due time in one statement of
// scalar subqueries, each an index seek.
func (s *Store) probeTimers(ctx context.Context, kinds []timerKind) ([]kindDue, error) {
	var (
		cols  []string
		args  []any
		sizes []int
	)
	for _, k := range kinds {
		ps := k.probes(s)
		sizes = append(sizes, len(ps))
		for _, p := range ps {
			cols = append(cols, "("+p.sql+")")
			args = append(args, p.args...)
		}
	}
	vals := make([]NullTime, len(cols))
	dest := make([]any, len(cols))
	for i := range vals {
		dest[i] = &vals[i]
	}
	if err := s.DB.WithContext(ctx).Raw("SELECT "+strings.Join(cols, ", "), args...).Row().Scan(dest...); err != nil {
		return nil, fmt.Errorf("probe timers: %w", err)
	}
	out := make([]kindDue, len(kinds))
	off := 0
	for i, k := range kinds {
		at, ok := k.due(s, vals[off:off+sizes[i]])
		if ok && at.IsZero() {
			at = s.now()
		}
		out[i] = kindDue{at: at, ok: ok}
		off += sizes[i]
	}
	return out, nil
}

// runKind runs a due kind; on PostgreSQL only the replica holding the
// kind's advisory lock does.
func (s *Store) runKind(ctx context.Context, k timerKind, r *MaintenanceReport) (int, error) {
	if s.pool == nil {
		return k.run(ctx, s, maintainBatch, r)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("lock: %w", err)
	}
	defer conn.Release()
	key := lockKey("taskpilots maintenance " + k.name)
	var got bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&got); err != nil {
		return 0, fmt.Errorf("lock: %w", err)
	}
	if !got {
		return 0, nil // another replica runs this kind right now
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", key); err != nil {
			// The lock goes with the connection, so it must not return to
			// the pool still held.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	return k.run(ctx, s, maintainBatch, r)
}

func lockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

// RunMaintenance runs maintenance passes until ctx is done: a pass at each
// due time the previous pass's probe reported, or when a write in this
// process creates an earlier timer, and otherwise after maxSleep at the
// latest (which is how timers created by other processes are found when
// theirs does not handle them). A pass with nothing due is one statement,
// and between passes the loop issues none. onPass, if set, hears about
// every pass; a failed pass is retried after a second (or maxSleep, if
// shorter).
func (s *Store) RunMaintenance(ctx context.Context, maxSleep time.Duration, onPass func(MaintenanceReport, error)) {
	if maxSleep <= 0 {
		maxSleep = DefaultMaintainMaxSleep
	}
	wake := s.TimerWake()
	s.maint.mu.Lock()
	s.maint.maxSleep = maxSleep
	s.maint.mu.Unlock()
	t := time.NewTimer(0)
	defer t.Stop()
	rollups := make(chan struct{})
	go func() {
		defer close(rollups)
		s.runMetricRollups(ctx)
	}()
	defer func() { <-rollups }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.maint.mu.Lock()
		s.maint.learned = time.Time{}
		s.maint.mu.Unlock()
		passCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		rep, next, err := s.MaintainNext(passCtx)
		cancel()
		if onPass != nil && ctx.Err() == nil {
			onPass(rep, err)
		}
		wait := maxSleep
		if err != nil {
			wait = min(wait, time.Second)
		}
		if !next.IsZero() {
			wait = min(wait, max(next.Sub(s.now()), 0))
		}
		s.maint.mu.Lock()
		if l := s.maint.learned; !l.IsZero() {
			wait = min(wait, max(l.Sub(s.now()), 0))
		}
		s.maint.planned = s.now().Add(wait)
		s.maint.mu.Unlock()
		t.Reset(wait)
		// A write that creates an earlier timer moves the plan forward.
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				waiting = false
				t.Reset(0) // consumed here; the pass runs at the top of the loop
			case <-wake:
				s.maint.mu.Lock()
				at := s.maint.planned
				s.maint.mu.Unlock()
				// Reset discards a pending tick (Go 1.23 timers).
				t.Reset(max(at.Sub(s.now()), 0))
			}
		}
	}
}

// metricRollupEvery is how often RunMaintenance looks for closed hours and
// slices to roll up.
const metricRollupEvery = time.Minute

// runMetricRollups rolls up the metrics at start (all hours since the first
// event on the first run: the backfill) and then every metricRollupEvery,
// until ctx is done. Not a timer kind: nothing in the database says an hour
// or a slice has closed. Beside the maintenance loop, not in it: a pass
// folds an hour or a slice of events, seconds to a minute at a million
// events an hour (and the backfill after an upgrade, minutes), and in the
// loop it held up lease expiries, snoozes and SLA breaches behind it.
func (s *Store) runMetricRollups(ctx context.Context) {
	t := time.NewTicker(metricRollupEvery)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		pass, err := s.RollupMetrics(rctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.Logger.Error("metric rollups", "err", err)
		}
		if s.rollupHook != nil && ctx.Err() == nil {
			s.rollupHook(pass, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// DefaultMaintainMaxSleep is the longest the maintenance loop sleeps when
// nothing is due in this process.
const DefaultMaintainMaxSleep = 30 * time.Second

// TimerChannel is the PostgreSQL channel on which a replica announces a
// timer it committed that is due within the loop's longest sleep, as an
// RFC 3339 time: every replica's Listen hands it to its own loop, which
// wakes when that is before its planned pass.
const TimerChannel = "taskpilots_timer"

// broadcastTimer announces a timer due at at to the other replicas, on
// PostgreSQL, after commit and off the write path (the announcer's
// goroutine, notify.go). Only timers due within the longest sleep need it:
// a later one is found by every replica's probe before it is due. And only
// when no earlier announced timer is still pending: every replica runs a
// pass at that one, and its probe finds this one. So a busy replica sends
// about one notice per longest sleep, not one per lease.
func (s *Store) broadcastTimer(at time.Time) {
	if s.Dialect != Postgres {
		return
	}
	now := s.now()
	s.maint.mu.Lock()
	maxSleep := s.maint.maxSleep
	if maxSleep <= 0 {
		maxSleep = DefaultMaintainMaxSleep
	}
	if !at.Before(now.Add(maxSleep)) || (s.maint.told.After(now) && !at.Before(s.maint.told)) {
		s.maint.mu.Unlock()
		return
	}
	s.maint.told = at
	s.maint.mu.Unlock()
	s.announceTimer(at)
}
