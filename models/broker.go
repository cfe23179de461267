package models

import "sync"

// Broker wakes long polls waiting for work on a queue. It is in-process; on
// PostgreSQL a LISTEN loop forwards other processes' notifications into it.
type Broker struct {
	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
}

// NewBroker returns an empty broker.
func NewBroker() *Broker {
	return &Broker{waiters: make(map[string]map[chan struct{}]struct{})}
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
