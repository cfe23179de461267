package models_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"gorm.io/gorm"
)

// skewedWrites writes, with clocks that disagree as two server processes'
// may: session A's first event at 12:00:02, its second at 12:00:01 (its
// writer's clock is behind), session B's event at 12:00:01.5. It returns A
// and B.
func skewedWrites(t *testing.T, s *models.Store) (a, b string) {
	t.Helper()
	ctx := context.Background()
	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s.Now = func() time.Time { return base.Add(2 * time.Second) }
	a = storetest.Session(ctx, t, s, nil)
	s.Now = func() time.Time { return base.Add(1500 * time.Millisecond) }
	b = storetest.Session(ctx, t, s, nil)
	s.Now = func() time.Time { return base.Add(time.Second) }
	v := int64(1)
	if _, err := s.Transition(ctx, a, models.EventSessionPaused, "test:controller", "", models.TransitionInput{ExpectedVersion: &v}); err != nil {
		t.Fatal(err)
	}
	s.Now = time.Now
	return a, b
}

// wantSkewedOrder checks the feed tells B's event, then A's two in seq
// order: A's second event was stamped earlier than both, but it cannot
// come before A's first.
func wantSkewedOrder(t *testing.T, s *models.Store, a, b string) {
	t.Helper()
	evs, _ := readAll(t, s, models.FeedQuery{})
	if len(evs) != 3 {
		t.Fatalf("feed = %+v", evs)
	}
	got := []struct {
		sid string
		seq int64
	}{{evs[0].SessionID, evs[0].Seq}, {evs[1].SessionID, evs[1].Seq}, {evs[2].SessionID, evs[2].Seq}}
	want := []struct {
		sid string
		seq int64
	}{{b, 1}, {a, 1}, {a, 2}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("feed order %v, want %v (A=%s, B=%s)", got, want, a, b)
		}
	}
	for i, e := range evs {
		if e.Pos != int64(i+1) {
			t.Errorf("event %d at position %d", i, e.Pos)
		}
	}
}

// TestFeedOrderUnderClockSkew: the sequencer keeps each session's seq order
// when the clocks of the writers disagree.
func TestFeedOrderUnderClockSkew(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		a, b := skewedWrites(t, s)
		if _, err := s.SequenceFeed(context.Background()); err != nil {
			t.Fatal(err)
		}
		wantSkewedOrder(t, s, a, b)
	})
}

// TestFeedMigrationBackfill: migration 10 numbers the events written before
// it as the sequencer would, and the sequencer goes on after them.
func TestFeedMigrationBackfill(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		// Events written before the migration (the write path of this
		// version needs its columns, so they are written first and the
		// migration is then rolled back and applied again).
		a, b := skewedWrites(t, s)
		// Roll back the migrations after 10 too (11, webhooks), then 10.
		for {
			v, err := s.MigrateDown(ctx)
			if err != nil || v < 10 {
				t.Fatalf("migrate down = %d, %v", v, err)
			}
			if v == 10 {
				break
			}
		}
		if _, err := s.MigrateUp(ctx); err != nil {
			t.Fatal(err)
		}
		wantSkewedOrder(t, s, a, b)
		if n, err := s.SequenceFeed(ctx); err != nil || n != 0 {
			t.Fatalf("after the backfill the sequencer numbered %d, %v", n, err)
		}
		c := storetest.Session(ctx, t, s, nil)
		if _, err := s.SequenceFeed(ctx); err != nil {
			t.Fatal(err)
		}
		evs, _ := readAll(t, s, models.FeedQuery{SessionID: c})
		if len(evs) != 1 || evs[0].Pos != 4 {
			t.Fatalf("next event = %+v", evs)
		}
	})
}

// TestFeedPlans checks on PostgreSQL, with 100,000 events, that the feed's
// reads use the position index for every filter, and that the sequencer's
// scan of pending rows is an index range on feed_xid (not a walk over every
// event).
func TestFeedPlans(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	ctx := context.Background()
	bulkEvents(t, s, 100_000, 20, 50)
	if n, err := s.SequenceFeed(ctx); err != nil || n != 100_000 {
		t.Fatalf("sequenced %d, %v", n, err)
	}
	if err := s.DB.Exec(`ANALYZE events; ANALYZE feed`).Error; err != nil {
		t.Fatal(err)
	}
	var xid int64
	if err := s.DB.Raw(`SELECT max(feed_xid) FROM events`).Scan(&xid).Error; err != nil {
		t.Fatal(err)
	}
	explain := func(sql string, args ...any) string {
		t.Helper()
		var lines []string
		if err := s.DB.Raw("EXPLAIN "+sql, args...).Scan(&lines).Error; err != nil {
			t.Fatalf("explain %s: %v", sql, err)
		}
		return strings.Join(lines, "\n")
	}
	const cols = `SELECT e.id, f.pos FROM feed f JOIN events e ON e.id = f.event_id`
	for name, q := range map[string]string{
		"all":     cols + ` WHERE f.pos > 50000 AND f.pos <= 100000 ORDER BY f.pos LIMIT 100`,
		"types":   cols + ` WHERE f.pos > 50000 AND f.pos <= 100000 AND e.type IN ('result.completed') ORDER BY f.pos LIMIT 100`,
		"session": cols + ` WHERE f.pos > 0 AND f.pos <= 100000 AND e.session_id = 'ses_00000042' ORDER BY f.pos LIMIT 100`,
		"queue":   cols + ` JOIN sessions s ON s.id = e.session_id AND s.queue = 'q' WHERE f.pos > 50000 AND f.pos <= 100000 ORDER BY f.pos LIMIT 100`,
		"high":    `SELECT max(pos) FROM feed`,
		// bulkEvents wrote them all in one transaction: the steady state
		// scans above it.
		"pending": models.FeedPendingPostgres(strconv.FormatInt(xid+1, 10)),
	} {
		plan := explain(q)
		if strings.Contains(plan, "Seq Scan on events") || strings.Contains(plan, "Seq Scan on feed") {
			t.Errorf("%s: sequential scan:\n%s", name, plan)
		}
		if name == "pending" && !strings.Contains(plan, "events_feed_xid_idx") {
			t.Errorf("pending rows not found through their index:\n%s", plan)
		}
	}
	// The sequencer runs its statement on the generic plan (the bound a
	// parameter, TestSequencerKeepsItsPlan): that plan must be the same
	// index range, whatever bound it is executed with.
	err := s.DB.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`SET LOCAL plan_cache_mode = force_generic_plan`).Error; err != nil {
			return err
		}
		if err := tx.Exec(`PREPARE pending_generic(bigint) AS ` + models.FeedPendingPostgres("$1")).Error; err != nil {
			return err
		}
		var lines []string
		if err := tx.Raw(`EXPLAIN EXECUTE pending_generic(` + strconv.FormatInt(xid+1, 10) + `)`).Scan(&lines).Error; err != nil {
			return err
		}
		plan := strings.Join(lines, "\n")
		if strings.Contains(plan, "Seq Scan") || strings.Contains(plan, "Hash") || !strings.Contains(plan, "events_feed_xid_idx") || !strings.Contains(plan, "$1") {
			t.Errorf("pending rows on the generic plan: not a range of events_feed_xid_idx:\n%s", plan)
		}
		return tx.Exec(`DEALLOCATE pending_generic`).Error
	})
	if err != nil {
		t.Fatal(err)
	}
	// Without statistics on feed_xid (autovacuum has not analyzed events
	// yet, or is off) the scan must stay a few index probes too: no hash
	// anti-join over all of feed, no cost estimate that buys a JIT.
	// The statistics are removed (that takes a superuser, as the test
	// cluster's role is), and some events are written above the bound, by
	// transactions of their own, as between two passes.
	if err := s.DB.Exec(`DELETE FROM pg_statistic WHERE starelid IN ('events'::regclass, 'feed'::regclass)`).Error; err != nil {
		t.Skipf("cannot remove the statistics of events: %v", err)
	}
	for range 20 {
		storetest.Session(ctx, t, s, nil)
	}
	plan := explain(models.FeedPendingPostgres(strconv.FormatInt(xid+10, 10)))
	if strings.Contains(plan, "Seq Scan") || strings.Contains(plan, "Hash") || !strings.Contains(plan, "feed_event_id_key") {
		t.Errorf("pending rows without statistics: not index probes:\n%s", plan)
	}
	var jitAbove float64
	if err := s.DB.Raw(`SELECT current_setting('jit_above_cost')::float8`).Scan(&jitAbove).Error; err != nil {
		t.Fatal(err)
	}
	var cost float64
	if _, err := fmt.Sscanf(plan[strings.Index(plan, "..")+2:], "%f", &cost); err != nil || cost >= jitAbove {
		t.Errorf("pending rows without statistics: estimated cost %v (jit above %v):\n%s", cost, jitAbove, plan)
	}
	t.Logf("pending without statistics:\n%s", plan)
}
