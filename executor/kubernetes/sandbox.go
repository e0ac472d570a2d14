package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/agentbox/agentbox/executor"
)

// Sandbox is one pod holding one chat's lease.
type Sandbox struct {
	e       *Executor
	name    string
	plan    plan
	release func()
	pf      portForward

	closeOnce sync.Once
	closeErr  error
	mu        sync.Mutex
	closed    bool
}

var _ executor.Sandbox = (*Sandbox)(nil)

// ID is the pod's name.
func (s *Sandbox) ID() string { return s.name }

// Workdir is the workspace inside the pod.
func (s *Sandbox) Workdir() string { return executor.ContainerWorkdir }

// HostDir is "": a pod shares no directory with the gateway.
func (s *Sandbox) HostDir() string { return "" }

// Close deletes the pod, waits until it is gone and releases the chat's
// lease. The workspace claim stays.
func (s *Sandbox) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.closePF()
		s.closeErr = s.e.deletePod(context.WithoutCancel(ctx), s.name)
		s.e.sandboxes.Forget(s.name)
		if s.release != nil {
			s.release()
		}
	})
	return s.closeErr
}

func (s *Sandbox) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// errNoFS is returned by the workspace file API until the pod-side helper
// file API lands.
var errNoFS = fmt.Errorf("kubernetes executor: the workspace file API needs the pod-side helper file API, not built yet: %w", errors.ErrUnsupported)

// ReadFile is not supported yet (errors.ErrUnsupported).
func (s *Sandbox) ReadFile(context.Context, string) ([]byte, error) { return nil, errNoFS }

// WriteFile is not supported yet (errors.ErrUnsupported).
func (s *Sandbox) WriteFile(context.Context, string, []byte) error { return errNoFS }

// ListDir is not supported yet (errors.ErrUnsupported).
func (s *Sandbox) ListDir(context.Context, string) ([]executor.FileInfo, error) { return nil, errNoFS }

// Stat is not supported yet (errors.ErrUnsupported).
func (s *Sandbox) Stat(context.Context, string) (executor.FileInfo, error) {
	return executor.FileInfo{}, errNoFS
}

// EditFile is not supported yet (errors.ErrUnsupported).
func (s *Sandbox) EditFile(context.Context, string, []executor.Edit) (executor.EditResult, error) {
	return executor.EditResult{}, errNoFS
}
