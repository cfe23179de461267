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
	kick    chan struct{}
	done    chan struct{}
}

// announce wakes long polls on queue in this process at once and, on
// PostgreSQL, in other processes shortly after.
func (s *Store) announce(queue string) {
	s.Wake.Notify(queue)
	if s.Dialect != Postgres {
		return
	}
	a := &s.notices
	a.once.Do(func() {
		a.pending = make(map[string]struct{})
		a.kick = make(chan struct{}, 1)
		a.done = make(chan struct{})
		go s.sendNotices()
	})
	a.mu.Lock()
	a.pending[queue] = struct{}{}
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
		a.mu.Unlock()
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
