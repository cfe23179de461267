package models

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Listen forwards PostgreSQL NOTIFYs into this process's long polls: those
// on NotifyChannel (a queue has work) into s.Wake, so that a lease long poll
// wakes when another process queues work, those on FeedChannel (a
// sequencer numbered events) to the feed's long polls, and those on
// TimerChannel (another replica committed a timer due soon) to the
// maintenance loop. It reconnects after
// errors and returns when ctx is done. On SQLite it only waits for ctx: all
// writers share the process and notify directly.
func (s *Store) Listen(ctx context.Context) error {
	if s.Dialect != Postgres {
		<-ctx.Done()
		return nil
	}
	for {
		err := s.listenOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		s.Logger.Warn("queue listener stopped; reconnecting", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func (s *Store) listenOnce(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		return fmt.Errorf("listen: connect: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel+"; LISTEN "+FeedChannel+"; LISTEN "+TimerChannel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// Notices sent while this loop was not listening are lost: feed long
	// polls read again now. (Lease long polls re-check every
	// Store.LeaseRecheck anyway.)
	s.wakeFeed()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("listen: wait: %w", err)
		}
		switch n.Channel {
		case FeedChannel:
			s.wakeFeed()
			continue
		case TimerChannel:
			// Another replica committed a timer due soon; a malformed
			// notice is ignored (the loop's own probes find every timer).
			if at, err := time.Parse(time.RFC3339Nano, n.Payload); err == nil {
				s.timerLearned(at)
			}
			continue
		}
		s.Wake.Notify(n.Payload)
	}
}
