package main

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestFeedMultiProcess runs the real binary as two servers on one
// PostgreSQL schema, each with its own feed sequencer. A long poll on
// server A must be woken by a write through server B (the sequencer of B
// notifies, A's LISTEN loop wakes its long polls); then 16 writers write
// through both servers while one reader follows the feed through A, and the
// reader must see every committed event exactly once, each session's in seq
// order.
func TestFeedMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test: skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	bin := filepath.Join(t.TempDir(), "taskpilots")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dbURL := storetest.NewURL(t, models.Postgres)
	if out, err := exec.CommandContext(ctx, bin, "migrate", "up", "--database-url", dbURL).CombinedOutput(); err != nil {
		t.Fatalf("migrate up: %v\n%s", err, out)
	}
	s, err := models.Open(ctx, dbURL, models.OpenOpts{Logger: slog.New(slog.DiscardHandler), MaxOpenConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tok, _, err := s.CreateToken(ctx, "feed-controller", models.RoleController)
	if err != nil {
		t.Fatal(err)
	}
	a := client.New(startServer(t, ctx, bin, dbURL, 0), tok)
	b := client.New(startServer(t, ctx, bin, dbURL, 1), tok)

	// The wake: a long poll on A, a write through B. Nothing in A writes,
	// so only the notice of B's sequencer wakes it before its 20 s
	// deadline. (A's own sequencer polls every second and could number the
	// event first, once in a while: three rounds make a pass without
	// notices all but impossible.)
	for round := range 3 {
		end, err := a.Feed(ctx, client.FeedOptions{After: client.FeedNow})
		if err != nil {
			t.Fatal(err)
		}
		woken := make(chan client.FeedPage, 1)
		go func() {
			p, err := a.Feed(ctx, client.FeedOptions{After: end.NextCursor, WaitSeconds: 20})
			if err != nil {
				t.Errorf("long poll on A: %v", err)
			}
			woken <- p
		}()
		time.Sleep(300 * time.Millisecond) // let the poll reach its wait
		sent := time.Now()
		created, err := b.CreateSession(ctx, client.CreateSessionInput{Goal: "wake A"})
		if err != nil {
			t.Fatal(err)
		}
		p := <-woken
		if len(p.Events) != 1 || p.Events[0].SessionID != created.SessionID {
			t.Fatalf("round %d: the long poll on A answered %+v after %s; want the session created through B",
				round, p, time.Since(sent).Round(time.Millisecond))
		}
		t.Logf("round %d: long poll on A woken %s after the write through B", round, time.Since(sent).Round(time.Millisecond))
	}

	// Exactly once across processes.
	const (
		writers  = 16
		sessions = 10 // per writer, each created and delegated: 2 events
	)
	var (
		wg      sync.WaitGroup
		written = make(chan struct{})
	)
	for w := range writers {
		wg.Go(func() {
			for i := range sessions {
				c1, c2 := a, b
				if (w+i)%2 == 1 {
					c1, c2 = b, a
				}
				out, err := c1.CreateSession(ctx, client.CreateSessionInput{Goal: fmt.Sprintf("writer %d session %d", w, i)})
				if err != nil {
					t.Errorf("create: %v", err)
					return
				}
				if _, err := c2.Delegate(ctx, out.SessionID, client.DelegateInput{
					Queue: "feed-mp", Step: "check", ExpectedVersion: out.StateVersion}); err != nil {
					t.Errorf("delegate: %v", err)
					return
				}
			}
		})
	}
	go func() { wg.Wait(); close(written) }()

	total := 3 + writers*sessions*2
	seen := map[string]int{}
	lastSeq := map[string]int64{}
	count := 0
	rctx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	err = a.Follow(rctx, client.FeedOptions{Limit: 25, WaitSeconds: 5}, func(e client.FeedEvent) error {
		seen[e.EventID]++
		if e.Seq != lastSeq[e.SessionID]+1 {
			t.Errorf("session %s: seq %d after %d", e.SessionID, e.Seq, lastSeq[e.SessionID])
		}
		lastSeq[e.SessionID] = e.Seq
		if count++; count >= total {
			select {
			case <-written:
				stopReading()
			default:
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the reader saw %d of %d events before the deadline", count, total)
	}
	var ids []string
	if err := s.DB.WithContext(ctx).Raw(`SELECT id FROM events`).Scan(&ids).Error; err != nil {
		t.Fatal(err)
	}
	if len(ids) != total || count != total {
		t.Fatalf("%d events committed, %d read; want %d", len(ids), count, total)
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("event %s told %d times", id, seen[id])
		}
	}
}
