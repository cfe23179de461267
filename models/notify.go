package models

import (
	"context"
	"sync"
	"time"
)

// announcer sends cross-process "work available" notices on PostgreSQL after
// commit, coalescing bursts: one NOTIFY per queue per flush rather than one
// per write. It runs outside the writing transactions so that they neither
// pay a round trip nor hold PostgreSQL's global notify lock while committing.
// Notices are hints: ClaimWait re-checks every Store.LeaseRecheck anyway.
type announcer struct {
	once    sync.Once
	mu      sync.Mutex
	pending map[string]struct{}
	// timer is the earliest timer to announce on TimerChannel (zero: none).
	timer time.Time
	kick  chan struct{}
	done  chan struct{}
}

// announce wakes long polls on queue in this process at once and, on
// PostgreSQL, in other processes shortly after.
func (s *Store) announce(queue string) {
	s.Wake.Notify(queue)
	if s.Dialect != Postgres {
		return
	}
	s.queueNotice(func(a *announcer) { a.pending[queue] = struct{}{} })
}

// announceTimer sends a timer notice (TimerChannel) shortly after, like
// announce's queue notices; of several queued meanwhile, the earliest.
func (s *Store) announceTimer(at time.Time) {
	s.queueNotice(func(a *announcer) {
		if a.timer.IsZero() || at.Before(a.timer) {
			a.timer = at
		}
	})
}

func (s *Store) queueNotice(add func(a *announcer)) {
	a := &s.notices
	a.once.Do(func() {
		a.pending = make(map[string]struct{})
		a.kick = make(chan struct{}, 1)
		a.done = make(chan struct{})
		go s.sendNotices()
	})
	a.mu.Lock()
	add(a)
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (s *Store) sendNotices() {
	a := &s.notices
	for {
		select {
		case <-a.done:
			return
		case <-a.kick:
		}
		// A short pause lets a burst of writes share one notice per queue.
		time.Sleep(2 * time.Millisecond)
		a.mu.Lock()
		queues := make([]string, 0, len(a.pending))
		for q := range a.pending {
			queues = append(queues, q)
		}
		clear(a.pending)
		timer := a.timer
		a.timer = time.Time{}
		a.mu.Unlock()
		if !timer.IsZero() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", TimerChannel, timer.UTC().Format(time.RFC3339Nano))
			cancel()
			if err != nil {
				s.Logger.Warn("timer notice not sent; other replicas find the timer at their next planned pass", "err", err)
			}
		}
		for _, q := range queues {
			// Straight on the pgx pool: a hint needs none of GORM's machinery.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", NotifyChannel, q)
			cancel()
			select {
			case <-a.done:
				return // the store closed while the notice was on its way
			default:
			}
			if err != nil {
				s.Logger.Warn("queue notice not sent; long polls elsewhere fall back to re-checking", "queue", q, "err", err)
			}
		}
	}
}

// stopNotices ends the announcer goroutine, if it was started.
func (s *Store) stopNotices() {
	a := &s.notices
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done != nil {
		select {
		case <-a.done:
		default:
			close(a.done)
		}
	}
}
