package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/executor"
)

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
