package models_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// lateCommit is an Effect that sends the command's statements (so that the
// event row is inserted and has its insert-time keys: id, created_at) and
// then holds the transaction open for a random while before it may commit.
// About one command in four is held long enough for many others, started
// after it, to commit first: transactions commit in another order than they
// inserted.
func lateCommit(tx *models.Tx, _ models.State, _ models.Event) (any, error) {
	if _, err := tx.Exec(`SELECT 1`); err != nil {
		return nil, err
	}
	if rand.IntN(4) == 0 {
		time.Sleep(time.Duration(5+rand.IntN(40)) * time.Millisecond)
	} else {
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
	}
	return nil, nil
}

// naiveReader follows the events table by an insert-time key, (created_at,
// id) > the last one seen: the design that an identity or sequence column
// gives too. It is here to show that the load below does make it miss
// events, so that the feed passing under the same load means something.
type naiveReader struct {
	s      *models.Store
	lastT  models.UTCTime
	lastID string
	seen   map[string]bool
}

func (r *naiveReader) poll(ctx context.Context) error {
	for {
		var rows []struct {
			ID        string
			CreatedAt models.UTCTime
		}
		if err := r.s.DB.WithContext(ctx).Raw(`SELECT id, created_at FROM events
			WHERE created_at > ? OR (created_at = ? AND id > ?) ORDER BY created_at, id LIMIT 100`,
			r.lastT, r.lastT, r.lastID).Scan(&rows).Error; err != nil {
			return err
		}
		for _, row := range rows {
			r.seen[row.ID] = true
			r.lastT, r.lastID = row.CreatedAt, row.ID
		}
		if len(rows) < 100 {
			return nil
		}
	}
}

// TestFeedExactlyOnceUnderLateCommits is the feed's promise (README
// "Following the event feed") under the load that breaks the naive design: 16 writers
// whose transactions commit late and out of order, the sequencer running as
// in the server, and one reader following next_cursor all along. At the end
// the reader has seen every committed event exactly once, each session's in
// seq order; a naive reader by insert-time key, run side by side, has
// missed some.
func TestFeedExactlyOnceUnderLateCommits(t *testing.T) {
	s := storetest.New(t, models.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const (
		writers  = 16
		commands = 40 // per writer, on its own session, after creating it
	)
	// Two sequencers, as two server processes run them: they take turns.
	other, err := models.Open(ctx, s.URL(), models.OpenOpts{Logger: slog.New(slog.DiscardHandler), MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	seqCtx, stopSeq := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Go(func() { s.RunSequencer(seqCtx, 50*time.Millisecond) })
	// The other one sequences in a tight loop, so the two often collide:
	// without the lock they would compute the same positions, and one
	// would fail on the unique index (or renumber the other's rows).
	bg.Go(func() {
		for seqCtx.Err() == nil {
			if _, err := other.SequenceFeed(seqCtx); err != nil && seqCtx.Err() == nil {
				t.Errorf("second sequencer: %v", err)
				return
			}
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		}
	})

	var (
		writing atomic.Bool
		wg      sync.WaitGroup
	)
	writing.Store(true)
	for w := range writers {
		wg.Go(func() {
			out, err := s.Execute(ctx, models.Command{
				Type: models.EventSessionCreated, Actor: "test:controller", Effect: lateCommit,
				Payload: models.SessionCreatedPayload{Goal: fmt.Sprintf("writer %d", w), Priority: 3},
			})
			if err != nil {
				t.Errorf("writer %d: create: %v", w, err)
				return
			}
			for i := range commands {
				typ, payload := models.EventSessionPaused, any(models.PausePayload{Reason: "hold"})
				if i%2 == 1 {
					typ, payload = models.EventSessionResumed, any(models.ReasonPayload{Reason: "go"})
				}
				if _, err := s.Execute(ctx, models.Command{
					SessionID: out.SessionID, Type: typ, Actor: "test:controller", Payload: payload, Effect: lateCommit,
				}); err != nil {
					t.Errorf("writer %d: command %d: %v", w, i, err)
					return
				}
			}
		})
	}
	go func() { wg.Wait(); writing.Store(false) }()

	// The feed reader and the naive reader, polling while the writers run.
	var (
		got    []models.FeedEvent
		cursor string
	)
	naive := &naiveReader{s: s, seen: map[string]bool{}}
	follow := func() {
		for {
			page, err := s.ReadFeed(ctx, models.FeedQuery{After: cursor, Limit: 37})
			if err != nil {
				t.Fatalf("read feed: %v", err)
			}
			got = append(got, page.Events...)
			cursor = page.NextCursor
			if len(page.Events) == 0 {
				return
			}
		}
	}
	polls := 0
	for writing.Load() {
		follow()
		if err := naive.poll(ctx); err != nil {
			t.Fatalf("naive reader: %v", err)
		}
		polls++
		time.Sleep(time.Millisecond)
	}
	if t.Failed() {
		t.FailNow()
	}
	// Every writer has committed: sequence what the kicks have not yet, and
	// read to the end.
	stopSeq()
	bg.Wait()
	if _, err := s.SequenceFeed(ctx); err != nil {
		t.Fatal(err)
	}
	follow()
	if err := naive.poll(ctx); err != nil {
		t.Fatal(err)
	}

	var committed []struct {
		ID        string
		SessionID string
		Seq       int64
	}
	if err := s.DB.WithContext(ctx).Raw(`SELECT id, session_id, seq FROM events`).Scan(&committed).Error; err != nil {
		t.Fatal(err)
	}
	if want := writers * (commands + 1); len(committed) != want {
		t.Fatalf("%d events committed; want %d", len(committed), want)
	}
	var pos struct{ N, Lo, Hi int64 }
	if err := s.DB.WithContext(ctx).Raw(`SELECT count(*) AS n, min(pos) AS lo, max(pos) AS hi FROM feed`).Scan(&pos).Error; err != nil {
		t.Fatal(err)
	}
	if pos.N != int64(len(committed)) || pos.Lo != 1 || pos.Hi != pos.N {
		t.Errorf("feed positions: %d numbered from %d to %d; want 1..%d", pos.N, pos.Lo, pos.Hi, len(committed))
	}
	seen := map[string]int{}
	lastSeq := map[string]int64{}
	for i, e := range got {
		seen[e.EventID]++
		if e.Seq != lastSeq[e.SessionID]+1 {
			t.Errorf("feed event %d: session %s seq %d after seq %d", i, e.SessionID, e.Seq, lastSeq[e.SessionID])
		}
		lastSeq[e.SessionID] = e.Seq
		if i > 0 && e.Pos <= got[i-1].Pos {
			t.Errorf("feed event %d: position %d after %d", i, e.Pos, got[i-1].Pos)
		}
	}
	missed, naiveMissed := 0, 0
	for _, e := range committed {
		switch n := seen[e.ID]; {
		case n == 0:
			missed++
		case n > 1:
			t.Errorf("event %s (session %s seq %d) told %d times", e.ID, e.SessionID, e.Seq, n)
		}
		if !naive.seen[e.ID] {
			naiveMissed++
		}
	}
	if missed > 0 || len(got) != len(committed) {
		t.Errorf("the feed told %d events and missed %d of %d committed", len(got), missed, len(committed))
	}
	t.Logf("%d events, %d polls while writing; the feed missed %d, the naive reader by insert time missed %d",
		len(committed), polls, missed, naiveMissed)
	if naiveMissed == 0 {
		t.Errorf("the naive reader missed nothing: the load does not reorder commits, so this test proves nothing")
	}
}
