package kubernetes

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// leases gives one holder at a time per chat inside this process; a waiter
// gives up after its wait with an error wrapping executor.ErrBusy.
type leases struct {
	mu sync.Mutex
	m  map[string]chan struct{} // capacity 1: full while held
}

func newLeases() *leases { return &leases{m: map[string]chan struct{}{}} }

func (l *leases) token(key string) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.m[key]
	if t == nil {
		t = make(chan struct{}, 1)
		l.m[key] = t
	}
	return t
}

// acquire waits up to wait for key and returns its release function, safe
// to call more than once. Tokens are kept per chat for the executor's life
// (a few bytes each).
func (l *leases) acquire(ctx context.Context, key string, wait time.Duration) (func(), error) {
	t := l.token(key)
	var once sync.Once
	release := func() { once.Do(func() { <-t }) }
	timer := time.NewTimer(max(wait, 0))
	defer timer.Stop()
	select {
	case t <- struct{}{}:
		return release, nil
	default:
	}
	select {
	case t <- struct{}{}:
		return release, nil
	case <-timer.C:
		return nil, fmt.Errorf("another request is using this chat and did not finish within %v; retry later or raise the lease wait: %w", wait, executor.ErrBusy)
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the chat's lease: %w", context.Cause(ctx))
	}
}
