package middleware

import (
	"context"
	"sync"
	"time"
)

// leases holds one lease per chat: one run per (user, chat) at a time in
// this process. The executor keeps its own lease too (across processes);
// this one fails fast before any work and is measured as its own phase.
type leases struct {
	mu   sync.Mutex
	held map[chatID]chan struct{} // closed when the lease is released
}

type chatID struct{ user, chat string }

func newLeases() *leases { return &leases{held: make(map[chatID]chan struct{})} }

// acquire takes the chat's lease, waiting up to wait for a holder to
// release it. It returns false when the wait passed (busy) and ctx's error
// when ctx ended first.
func (l *leases) acquire(ctx context.Context, id chatID, wait time.Duration) (release func(), ok bool, err error) {
	var timeout <-chan time.Time
	for {
		l.mu.Lock()
		held, busy := l.held[id]
		if !busy {
			done := make(chan struct{})
			l.held[id] = done
			l.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					l.mu.Lock()
					delete(l.held, id)
					l.mu.Unlock()
					close(done)
				})
			}, true, nil
		}
		l.mu.Unlock()
		if wait <= 0 {
			return nil, false, nil
		}
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-held:
		case <-timeout:
			return nil, false, nil
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}
