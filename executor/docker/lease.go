package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// leases gives one holder at a time per key (a user's chat) inside this
// process. A waiter gives up after its wait with an error wrapping
// executor.ErrBusy.
type leases struct {
	mu sync.Mutex
	m  map[string]*leaseEntry
}

type leaseEntry struct {
	token chan struct{} // capacity 1: full while held
	refs  int           // holders and waiters
}

func newLeases() *leases { return &leases{m: map[string]*leaseEntry{}} }

func (l *leases) entry(key string) *leaseEntry {
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

func (l *leases) unref(key string, e *leaseEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.refs--
	if e.refs == 0 {
		delete(l.m, key)
	}
}

// acquire waits up to wait (0: do not wait) for key and returns its release
// function, which is safe to call more than once.
func (l *leases) acquire(ctx context.Context, key string, wait time.Duration) (func(), error) {
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
		return nil, fmt.Errorf("another request is using this chat; retry when it finishes: %w", executor.ErrBusy)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case e.token <- struct{}{}:
		return release, nil
	case <-t.C:
		l.unref(key, e)
		return nil, fmt.Errorf("another request is using this chat and did not finish within %v; retry later or raise the lease wait: %w", wait, executor.ErrBusy)
	case <-ctx.Done():
		l.unref(key, e)
		return nil, fmt.Errorf("waiting for this chat's lease: %w", ctx.Err())
	}
}

// flockPoll is how often a blocked file lock is retried.
const flockPoll = 20 * time.Millisecond

// fileLock is an exclusive flock on an open file; it ends with Close or
// with the process, so a lock left by a killed gateway frees itself.
type fileLock struct {
	f *os.File
}

// lockFile takes an exclusive flock on f, retrying until wait passes (0:
// one try). The error wraps executor.ErrBusy when another holder keeps it.
func lockFile(ctx context.Context, f *os.File, wait time.Duration) (*fileLock, error) {
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return &fileLock{f: f}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		if !time.Now().Before(deadline) {
			return nil, fmt.Errorf("%s is locked by another process (another gateway is using it); retry later: %w", f.Name(), executor.ErrBusy)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("lock %s: %w", f.Name(), ctx.Err())
		case <-time.After(flockPoll):
		}
	}
}

// Close releases the lock and closes the file. It is safe on nil.
func (l *fileLock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	return f.Close()
}
