package models

import "sync"

// Broker wakes long polls waiting for work on a queue. It is in-process; on
// PostgreSQL a LISTEN loop forwards other processes' notifications into it.
type Broker struct {
	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
	// parked counts, per queue, the long polls that looked, found nothing
	// and now wait for a wake-up (or their re-check); wakes counts the waits
	// that a wake-up ended.
	parked, wakes map[string]int
}

// NewBroker returns an empty broker.
func NewBroker() *Broker {
	return &Broker{waiters: make(map[string]map[chan struct{}]struct{}), parked: make(map[string]int), wakes: make(map[string]int)}
}

// Subscribe returns a channel that receives a signal when work may be
// available on queue, and a function to stop listening.
func (b *Broker) Subscribe(queue string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	if b.waiters[queue] == nil {
		b.waiters[queue] = make(map[chan struct{}]struct{})
	}
	b.waiters[queue][ch] = struct{}{}
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.waiters[queue], ch)
		if len(b.waiters[queue]) == 0 {
			delete(b.waiters, queue)
		}
		b.mu.Unlock()
	}
}

// Notify wakes every waiter on queue. It never blocks.
func (b *Broker) Notify(queue string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.waiters[queue] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// park counts a subscribed long poll on queue as waiting, until the
// returned function is called, with whether a wake-up ended the wait.
func (b *Broker) park(queue string) (unpark func(woken bool)) {
	b.mu.Lock()
	b.parked[queue]++
	b.mu.Unlock()
	return func(woken bool) {
		b.mu.Lock()
		if b.parked[queue]--; b.parked[queue] == 0 {
			delete(b.parked, queue)
		}
		if woken {
			b.wakes[queue]++
		}
		b.mu.Unlock()
	}
}

// Parked returns how many long polls on queue have looked for work, found
// none, and wait now. Work queued while a poll is parked can reach it only
// through a wake-up (or its next re-check or its last look at the
// deadline), which is what the wake-up tests need to know before they
// queue it.
func (b *Broker) Parked(queue string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.parked[queue]
}

// Wakes returns how many waits of long polls on queue a wake-up ended (not
// a re-check, deadline or cancellation) since the broker was made.
func (b *Broker) Wakes(queue string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.wakes[queue]
}
