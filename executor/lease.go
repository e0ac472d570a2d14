package executor

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Leases gives one holder at a time per key (a user's chat) inside this
// process: the one lease of a process, used by the middleware (to fail
// fast before any work) and by the backends (which add a cross-process
// lock of their own). A waiter gives up after its wait with an error
// wrapping ErrBusy. The zero value is not usable; call NewLeases.
type Leases struct {
	mu sync.Mutex
	m  map[string]*leaseEntry
}

type leaseEntry struct {
	token chan struct{} // capacity 1: full while held
	refs  int           // holders and waiters
}

// NewLeases returns an empty set of leases.
func NewLeases() *Leases { return &Leases{m: map[string]*leaseEntry{}} }

func (l *Leases) entry(key string) *leaseEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.m[key]
	if e == nil {
		e = &leaseEntry{token: make(chan struct{}, 1)}
		l.m[key] = e
	}
	e.refs++
	return e
}

func (l *Leases) unref(key string, e *leaseEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.refs--
	if e.refs == 0 {
		delete(l.m, key)
	}
}

// Acquire waits up to wait (0: do not wait) for key and returns its
// release function, which is safe to call more than once. When ctx ends
// first, the error wraps ctx's.
func (l *Leases) Acquire(ctx context.Context, key string, wait time.Duration) (func(), error) {
	e := l.entry(key)
	var once sync.Once
	release := func() {
		once.Do(func() {
			<-e.token
			l.unref(key, e)
		})
	}
	select {
	case e.token <- struct{}{}:
		return release, nil
	default:
	}
	if wait <= 0 {
		l.unref(key, e)
		return nil, fmt.Errorf("another request is using this chat; retry when it finishes: %w", ErrBusy)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case e.token <- struct{}{}:
		return release, nil
	case <-t.C:
		l.unref(key, e)
		return nil, fmt.Errorf("another request is using this chat and did not finish within %v; retry later or raise the lease wait: %w", wait, ErrBusy)
	case <-ctx.Done():
		l.unref(key, e)
		return nil, fmt.Errorf("waiting for this chat's lease: %w", ctx.Err())
	}
}
