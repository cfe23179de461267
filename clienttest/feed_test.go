package clienttest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/taskpilots/handoff/client"
	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// runSequencer runs the feed's sequencer beside a test server, as Serve does.
func runSequencer(t *testing.T, s *models.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.RunSequencer(ctx, time.Hour); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestFollowFeed: Follow tells each event once, in order, including those
// that commit while it waits, and reports its cursor after each page.
func TestFollowFeed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ts := newTestServer(t, s, nil)
		runSequencer(t, s)
		first, d := ts.delegated(t, "refunds", nil)

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var (
			got     []client.FeedEvent
			cursors []string
		)
		errStop := errors.New("seen enough")
		second := make(chan string, 1)
		err := ts.controller.Follow(ctx, client.FeedOptions{
			Limit: 1, WaitSeconds: 10, OnCursor: func(c string) { cursors = append(cursors, c) },
		}, func(e client.FeedEvent) error {
			got = append(got, e)
			if len(got) == 2 {
				// Written while Follow is about to long-poll for more.
				go func() { s, _ := ts.delegated(t, "refunds", nil); second <- s.SessionID }()
			}
			if len(got) == 4 {
				return errStop
			}
			return nil
		})
		if !errors.Is(err, errStop) {
			t.Fatalf("follow = %v", err)
		}
		sid := <-second
		want := []struct {
			sid, typ string
			seq      int64
		}{{first.SessionID, "session.created", 1}, {first.SessionID, "delegation.created", 2}, {sid, "session.created", 1}, {sid, "delegation.created", 2}}
		for i, w := range want {
			if got[i].SessionID != w.sid || got[i].Type != w.typ || got[i].Seq != w.seq {
				t.Errorf("event %d = %+v, want %+v", i, got[i], w)
			}
		}
		var p struct {
			DelegationID string `json:"delegation_id"`
		}
		if err := got[1].DecodePayload(&p); err != nil || p.DelegationID != d.DelegationID {
			t.Errorf("payload = %+v, %v", p, err)
		}
		if len(cursors) < 2 {
			t.Fatalf("cursors = %v", cursors)
		}

		// Resuming from a stored cursor continues after what was handled.
		page, err := ts.controller.Feed(ctx, client.FeedOptions{After: cursors[0]})
		if err != nil || len(page.Events) != 3 || page.Events[0].EventID != got[1].EventID {
			t.Fatalf("resume from the first cursor = %+v, %v", page, err)
		}
		// Filters and the end of the feed.
		page, err = ts.controller.Feed(ctx, client.FeedOptions{Types: []string{"delegation.created"}, SessionID: sid})
		if err != nil || len(page.Events) != 1 || page.Events[0].SessionID != sid {
			t.Fatalf("filtered = %+v, %v", page, err)
		}
		if page, err := ts.controller.Feed(ctx, client.FeedOptions{After: client.FeedNow}); err != nil || len(page.Events) != 0 || page.NextCursor == "" {
			t.Fatalf("after now = %+v, %v", page, err)
		}
		// Bad input is a typed validation error naming the field.
		_, err = ts.controller.Feed(ctx, client.FeedOptions{After: "nope", Limit: 5000})
		var ve *client.ValidationError
		if !errors.As(err, &ve) || len(ve.Fields) != 2 {
			t.Fatalf("bad input = %v", err)
		}
		// A worker may not read the feed.
		if _, err := ts.worker.Feed(ctx, client.FeedOptions{}); !errors.Is(err, client.ErrForbidden) {
			t.Fatalf("worker = %v", err)
		}
	})
}

// TestFollowStopsWithContext: Follow returns nil when its context ends
// during a long poll.
func TestFollowStopsWithContext(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ts := newTestServer(t, s, nil)
		runSequencer(t, s)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		err := ts.controller.Follow(ctx, client.FeedOptions{After: client.FeedNow}, func(client.FeedEvent) error {
			return errors.New("no event expected")
		})
		if err != nil {
			t.Fatalf("follow = %v", err)
		}
	})
}
