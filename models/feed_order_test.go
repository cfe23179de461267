package models_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
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
		if v, err := s.MigrateDown(ctx); err != nil || v != 10 {
			t.Fatalf("migrate down = %d, %v", v, err)
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
