package models_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// countStatements counts every statement s sends through GORM (the
// maintenance pass's reads) and the write path (WireStats).
func countStatements(t testing.TB, s *models.Store) func() int64 {
	t.Helper()
	var n atomic.Int64
	inc := func(*gorm.DB) { n.Add(1) }
	cb := s.DB.Callback()
	for name, err := range map[string]error{
		"query":  cb.Query().After("gorm:query").Register("test:count", inc),
		"row":    cb.Row().After("gorm:row").Register("test:count", inc),
		"raw":    cb.Raw().After("gorm:raw").Register("test:count", inc),
		"create": cb.Create().After("gorm:create").Register("test:count", inc),
		"update": cb.Update().After("gorm:update").Register("test:count", inc),
		"delete": cb.Delete().After("gorm:delete").Register("test:count", inc),
	} {
		if err != nil {
			t.Fatalf("register %s callback: %v", name, err)
		}
	}
	st0, _ := s.WireStats()
	return func() int64 {
		st, _ := s.WireStats()
		return n.Load() + st - st0
	}
}

// idleTimers gives s one pending timer of every kind, none due yet, and an
// escalation whose SLA breach is already recorded.
func idleTimers(ctx context.Context, t testing.TB, s *models.Store, clk *fanClock) {
	t.Helper()
	breached := slaEscalate(ctx, t, s, 1)
	clk.Add(16 * time.Minute)
	if r, err := s.Maintain(ctx); err != nil || r.SLABreaches != 1 {
		t.Fatalf("breach: %+v %v", r, err)
	}
	if rows := eventsOf(ctx, t, s, breached, models.EventEscalationSLABreached); len(rows) != 1 {
		t.Fatalf("breach events %+v", rows)
	}
	slaEscalate(ctx, t, s, 5) // due in 72 h
	// A lease, running.
	storetest.Delegated(ctx, t, s, "idle-q")
	leaseOn(ctx, t, s, "idle-q")
	// A snooze.
	id, _ := storetest.Delegated(ctx, t, s, "idle-snooze")
	v := int64(2)
	if _, err := s.Transition(ctx, id, models.EventSessionPaused, fanActor, "", models.TransitionInput{
		ExpectedVersion: &v, Reason: "later", Until: clk.In(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// A join with a timeout, one child finished.
	pid := fanParent(ctx, t, s)
	spawn(ctx, t, s, pid, 1, models.JoinInput{Policy: "all", TimeoutSeconds: storetest.Ptr(3600)}, "idle-a", "idle-b")
	finish(ctx, t, s, "idle-a", models.ResultCompleted, `{"ok": true}`)
}

// TestIdlePassIsOneStatement pins what a maintenance pass with nothing due
// costs: one probe statement, whatever timers are pending, and no second
// look at an escalation whose breach is recorded.
func TestIdlePassIsOneStatement(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clk := setFanClock(s)
		idleTimers(ctx, t, s, clk)
		// The first pass of a process also looks for joins whose child-done
		// hook was lost; the second has nothing to do.
		if _, err := s.Maintain(ctx); err != nil {
			t.Fatal(err)
		}
		count := countStatements(t, s)
		for range 3 {
			before := count()
			r, next, err := s.MaintainNext(ctx)
			if err != nil || r != (models.MaintenanceReport{}) {
				t.Fatalf("idle pass: %+v %v", r, err)
			}
			if n := count() - before; n > 1 {
				t.Fatalf("idle pass sent %d statements, want at most 1", n)
			}
			// The earliest timer is the 5-minute lease.
			if next.IsZero() || next.After(clk.Now().Add(10*time.Minute)) {
				t.Fatalf("next pass at %v (now %v)", next, clk.Now())
			}
			clk.Add(time.Second)
		}
		// Each kind still fires when its time comes.
		clk.Add(73 * time.Hour)
		r, err := s.Maintain(ctx)
		if err != nil || r.Rescued != 1 || r.Resumed != 1 || r.Joined != 1 || r.SLABreaches != 1 {
			t.Fatalf("due pass: %+v %v", r, err)
		}
	})
}

// TestMaintenanceLoopIdlesWithoutStatements runs the loop on SQLite, where
// a statement holds the only connection: with nothing due it sends nothing
// between passes, and a snooze created meanwhile still ends on time because
// the write wakes the loop.
func TestMaintenanceLoopIdlesWithoutStatements(t *testing.T) {
	s := storetest.New(t, models.SQLite)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	id, _ := storetest.Delegated(ctx, t, s, "loop-q")
	passes := make(chan models.MaintenanceReport, 16)
	rolled := make(chan struct{}, 1)
	s.SetRollupHook(func(_ models.MetricRollupPass, err error) {
		if err != nil {
			t.Errorf("metric rollups: %v", err)
		}
		select {
		case rolled <- struct{}{}:
		default:
		}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.RunMaintenance(ctx, time.Hour, func(r models.MaintenanceReport, err error) {
			if err != nil {
				t.Errorf("pass: %v", err)
			}
			passes <- r
		})
	}()
	<-passes // the first pass, at start
	<-rolled // and the first metric rollups, beside it (then a minute's rest)
	count := countStatements(t, s)
	time.Sleep(300 * time.Millisecond)
	if n := count(); n != 0 {
		t.Fatalf("idle loop sent %d statements between passes", n)
	}
	v := int64(2)
	if _, err := s.Transition(ctx, id, models.EventSessionPaused, fanActor, "", models.TransitionInput{
		ExpectedVersion: &v, Reason: "brief", Until: time.Now().Add(200 * time.Millisecond).UTC().Format(time.RFC3339Nano)}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for resumed := false; !resumed; {
		select {
		case r := <-passes:
			resumed = r.Resumed == 1
		case <-deadline:
			t.Fatal("the snooze did not end: the write did not wake the loop")
		}
	}
	cancel()
	<-done
}

// TestMaintainRestsOnSkippedRows pins that a kind whose due rows are all
// skipped (here a session row that says escalated while its state does
// not) rests instead of making every following pass retry them at once.
func TestMaintainRestsOnSkippedRows(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		clk := setFanClock(s)
		id := storetest.Session(ctx, t, s, &storetest.SessionOpts{Priority: 1})
		if err := s.DB.Exec(`UPDATE sessions SET status = 'escalated', escalated_at = ? WHERE id = ?`,
			models.NewUTCTime(clk.Now().Add(-time.Hour)), id).Error; err != nil {
			t.Fatal(err)
		}
		if r, err := s.Maintain(ctx); err != nil || r.SLABreaches != 0 {
			t.Fatalf("first pass: %+v %v", r, err)
		}
		count := countStatements(t, s)
		r, next, err := s.MaintainNext(ctx)
		if err != nil || r != (models.MaintenanceReport{}) {
			t.Fatalf("second pass: %+v %v", r, err)
		}
		if n := count(); n > 1 {
			t.Fatalf("second pass sent %d statements: it retried the skipped row", n)
		}
		if !next.After(clk.Now().Add(time.Second)) {
			t.Fatalf("next pass at %v, now %v: it would spin", next, clk.Now())
		}
	})
}

// TestMetricRollupsDoNotHoldUpMaintenance: the metric rollups run beside
// the maintenance loop, not in it. A rollup pass folds an hour or a slice
// of events (up to a minute at a million events an hour, minutes for the
// backfill after an upgrade); here one waits on the rollup lock that
// another process holds, and a lease that expires meanwhile is still
// rescued at once. In the loop, the rescue waited for the rollup.
func TestMetricRollupsDoNotHoldUpMaintenance(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu    sync.Mutex
		clock = time.Now().Add(-2 * time.Hour)
	)
	s.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	setClock := func(t time.Time) { mu.Lock(); defer mu.Unlock(); clock = t }
	// An hour two hours ago with events: due for a rollup.
	storetest.Delegated(ctx, t, s, "rollup-q")
	setClock(time.Now())

	// Another process holds the rollup lock of this schema.
	sqlDB, err := s.DB.DB()
	if err != nil {
		t.Fatal(err)
	}
	holder, err := sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	release := func() {
		_, _ = holder.ExecContext(context.Background(), "ROLLBACK")
		_ = holder.Close()
	}
	defer release()
	if _, err := holder.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.ExecContext(ctx, models.MetricRollupLockSQL); err != nil {
		t.Fatal(err)
	}

	passes := make(chan models.MaintenanceReport, 64)
	rolled := make(chan models.MetricRollupPass, 4)
	s.SetRollupHook(func(p models.MetricRollupPass, err error) {
		if err != nil {
			t.Errorf("metric rollups: %v", err)
		}
		rolled <- p
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.RunMaintenance(ctx, 50*time.Millisecond, func(r models.MaintenanceReport, err error) {
			if err != nil {
				t.Errorf("pass: %v", err)
			}
			select {
			case passes <- r:
			default:
			}
		})
	}()
	// Wait until the rollup pass waits for the lock.
	deadline := time.Now().Add(15 * time.Second)
	for {
		var waiting int
		if err := s.DB.Raw(`WITH k AS (SELECT hashtextextended('taskpilots metric_rollups ' || current_schema(), 0) AS key)
SELECT count(*) FROM pg_locks, k WHERE locktype = 'advisory' AND NOT granted
	AND classid::bigint = (k.key >> 32) & 4294967295 AND objid::bigint = k.key & 4294967295`).Scan(&waiting).Error; err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the metric rollup pass never waited for the lock")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A lease taken now and expired a minute later is rescued while the
	// rollup still waits.
	id := storetest.Session(ctx, t, s, nil)
	v, lease := int64(1), 30
	if _, err := s.Delegate(ctx, id, "test:controller", "", models.DelegateInput{Queue: "rescue-q", Step: "check", ExpectedVersion: &v, LeaseSeconds: &lease}); err != nil {
		t.Fatal(err)
	}
	if l, err := s.Claim(ctx, "rescue-q", "w-1", "test:worker", ""); err != nil || l == nil {
		t.Fatalf("claim: %v %v", l, err)
	}
	setClock(time.Now().Add(time.Minute))
	for rescued := false; !rescued; {
		select {
		case r := <-passes:
			rescued = r.Rescued > 0
		case p := <-rolled:
			t.Fatalf("the rollup pass ended (%+v) while the lock was held", p)
		case <-time.After(10 * time.Second):
			t.Fatal("the expired lease was not rescued while a metric rollup pass waited")
		}
	}
	release()
	select {
	case p := <-rolled:
		if p.Hours == 0 {
			t.Errorf("rollup pass after the lock = %+v; want the hour of the first session", p)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the rollup pass did not finish once the lock was free")
	}
	cancel()
	<-done
}
