package models_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// readAll follows the feed from after until a page comes back empty.
func readAll(t *testing.T, s *models.Store, q models.FeedQuery) ([]models.FeedEvent, string) {
	t.Helper()
	var all []models.FeedEvent
	for {
		page, err := s.ReadFeed(context.Background(), q)
		if err != nil {
			t.Fatalf("read feed %+v: %v", q, err)
		}
		all = append(all, page.Events...)
		if len(page.Events) == 0 {
			return all, page.NextCursor
		}
		q.After = page.NextCursor
	}
}

// TestFeedSequencesCommittedEvents: events are invisible to the feed until
// sequenced, then told once, in each session's order, and filters and
// paging keep the cursor moving.
func TestFeedSequencesCommittedEvents(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		a, _ := storetest.Delegated(ctx, t, s, "refunds")
		b := storetest.Session(ctx, t, s, nil)
		if evs, _ := readAll(t, s, models.FeedQuery{}); len(evs) != 0 {
			t.Fatalf("before sequencing the feed tells %d events", len(evs))
		}
		n, err := s.SequenceFeed(ctx)
		if err != nil || n != 3 {
			t.Fatalf("sequence = %d, %v; want 3", n, err)
		}
		if n, err := s.SequenceFeed(ctx); err != nil || n != 0 {
			t.Fatalf("second sequence = %d, %v; want 0", n, err)
		}
		all, end := readAll(t, s, models.FeedQuery{Limit: 1})
		if len(all) != 3 {
			t.Fatalf("feed = %+v", all)
		}
		for i, e := range all {
			if e.Pos != int64(i+1) {
				t.Errorf("event %d at position %d", i, e.Pos)
			}
		}
		if all[0].SessionID != a || all[0].Seq != 1 || all[1].SessionID != a || all[1].Seq != 2 || all[2].SessionID != b {
			t.Errorf("feed order = %+v", all)
		}
		if all[1].Type != models.EventDelegationCreated || all[1].VersionAfter != 2 || len(all[1].Payload) == 0 {
			t.Errorf("delegated event = %+v", all[1])
		}

		// Filters.
		got, _ := readAll(t, s, models.FeedQuery{Types: []models.EventType{models.EventDelegationCreated}})
		if len(got) != 1 || got[0].SessionID != a {
			t.Errorf("types filter = %+v", got)
		}
		got, _ = readAll(t, s, models.FeedQuery{SessionID: b})
		if len(got) != 1 || got[0].SessionID != b {
			t.Errorf("session filter = %+v", got)
		}
		got, _ = readAll(t, s, models.FeedQuery{Queue: "refunds"})
		if len(got) != 2 || got[0].SessionID != a {
			t.Errorf("queue filter = %+v", got)
		}
		// A filtered page that is not full moves the cursor to the end, so
		// the next read does not scan the same rows again.
		page, err := s.ReadFeed(ctx, models.FeedQuery{SessionID: "ses_none"})
		if err != nil || len(page.Events) != 0 || page.NextCursor != end {
			t.Errorf("empty filtered page = %+v, %v; want cursor %q", page, err, end)
		}

		// after=now starts at the end; the next event follows.
		page, err = s.ReadFeed(ctx, models.FeedQuery{After: models.FeedCursorNow})
		if err != nil || len(page.Events) != 0 || page.NextCursor != end {
			t.Fatalf("after=now = %+v, %v", page, err)
		}
		c := storetest.Session(ctx, t, s, nil)
		if _, err := s.SequenceFeed(ctx); err != nil {
			t.Fatal(err)
		}
		got, _ = readAll(t, s, models.FeedQuery{After: page.NextCursor})
		if len(got) != 1 || got[0].SessionID != c || got[0].Pos != 4 {
			t.Errorf("after the end = %+v", got)
		}
	})
}

func TestFeedQueryValidation(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		_, err := s.ReadFeed(context.Background(), models.FeedQuery{
			After: "garbage", Limit: 1001, Types: []models.EventType{"session.created", "nope"}})
		var ve *models.ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("err = %v", err)
		}
		fields := map[string]bool{}
		for _, f := range ve.Fields {
			fields[f.Field] = true
		}
		if !fields["after"] || !fields["limit"] || !fields["types"] || len(ve.Fields) != 3 {
			t.Errorf("fields = %+v", ve.Fields)
		}
		if pos, err := models.DecodeFeedCursor(models.EncodeFeedCursor(42)); err != nil || pos != 42 {
			t.Errorf("cursor round trip = %d, %v", pos, err)
		}
	})
}

// TestWaitFeed: a long poll answers when the sequencer numbers a matching
// event, and empty at its deadline.
func TestWaitFeed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go s.RunSequencer(ctx, time.Hour) // only kicks from writes wake it

		page, err := s.WaitFeed(ctx, models.FeedQuery{After: models.FeedCursorNow}, 50*time.Millisecond)
		if err != nil || len(page.Events) != 0 {
			t.Fatalf("idle wait = %+v, %v", page, err)
		}
		got := make(chan models.FeedPage, 1)
		go func() {
			p, err := s.WaitFeed(ctx, models.FeedQuery{After: page.NextCursor, Types: []models.EventType{models.EventDelegationCreated}}, time.Minute)
			if err != nil {
				t.Errorf("wait: %v", err)
			}
			got <- p
		}()
		// A non-matching event wakes the poll, which waits again.
		time.Sleep(20 * time.Millisecond)
		sid, _ := storetest.Delegated(ctx, t, s, "refunds")
		select {
		case p := <-got:
			if len(p.Events) != 1 || p.Events[0].SessionID != sid || p.Events[0].Type != models.EventDelegationCreated {
				t.Fatalf("woken with %+v", p)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("long poll not woken by a sequenced event")
		}
	})
}
