package docker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// Labels of session sandboxes (Spec.IdleTTL > 0).
const (
	// LabelPolicy is PolicyRequest or PolicySession.
	LabelPolicy = labelPrefix + "policy"
	// LabelIdleTTL is a session container's idle time to live (a Go
	// duration), for operators: its owner removes it after that long
	// idle; the reconciler removes it when the owner is gone or at
	// LabelDeadline.
	LabelIdleTTL = labelPrefix + "idle-ttl"
	// PolicyRequest: one container per request.
	PolicyRequest = "request"
	// PolicySession: the container may stay between the chat's requests.
	PolicySession = "session"
)

// Park releases the chat (the in-process lease, the flock, and records
// its last use) and keeps the container running, idle, for the chat's next
// request: the session policy between turns. The sandbox stays this
// instance's (the reconciler and Close see it as open), so crash takeover
// still applies: another instance that takes the chat removes it, and a
// killed gateway's reconciler or takeover removes it after restart. Park is
// safe to call on a parked sandbox.
func (s *Sandbox) Park() error {
	if s.closed.Load() {
		return fmt.Errorf("park sandbox %s: %w", s.sandboxID, executor.ErrNotRunning)
	}
	s.relMu.Lock()
	defer s.relMu.Unlock()
	if s.parked {
		return nil
	}
	s.release()
	s.parked = true
	s.e.pool.refill(s.plan)
	return nil
}

// Unpark takes the chat again for a request, waiting up to wait, and
// checks that the container still runs with time left (another instance's
// takeover, the daemon or its deadline may have ended it meanwhile). On
// error the sandbox stays parked; close it and create a new one. The error
// wraps executor.ErrBusy when the chat is held elsewhere and
// executor.ErrSandboxGone when the container is gone.
func (s *Sandbox) Unpark(ctx context.Context, wait time.Duration) error {
	if s.closed.Load() || s.stopped.Load() {
		return fmt.Errorf("unpark sandbox %s: %w", s.sandboxID, executor.ErrNotRunning)
	}
	s.relMu.Lock()
	defer s.relMu.Unlock()
	if !s.parked {
		return nil
	}
	start := time.Now()
	user, chat := s.plan.spec.UserID, s.plan.spec.ChatID
	unlease, err := s.e.leases.Acquire(ctx, user+"/"+chat, wait)
	if err != nil {
		return fmt.Errorf("unpark sandbox %s: %w", s.sandboxID, err)
	}
	lock, err := s.e.lockChat(ctx, user, chat, wait-time.Since(start))
	if err != nil {
		unlease()
		return fmt.Errorf("unpark sandbox %s: %w", s.sandboxID, err)
	}
	release := func() {
		s.e.touchChat(user, chat)
		_ = lock.Close()
		unlease()
	}
	if err := s.running(ctx); err != nil {
		release()
		return fmt.Errorf("unpark sandbox %s: %w", s.sandboxID, err)
	}
	s.release, s.parked = release, false
	return nil
}

// running checks with the daemon that the container runs and has not
// gone away under an exec.
func (s *Sandbox) running(ctx context.Context) error {
	if g := s.goneErr.Load(); g != nil {
		return *g
	}
	if !time.Now().Before(s.plan.deadline) {
		return fmt.Errorf("the container passed its deadline: %w", executor.ErrSandboxGone)
	}
	ctx, cancel := context.WithTimeout(ctx, s.e.o.CallTimeout)
	defer cancel()
	ins, err := s.e.api.ContainerInspect(ctx, s.id)
	switch {
	case err != nil && errors.Is(notRunning(err), executor.ErrNotRunning):
		return fmt.Errorf("the container is gone: %w (%w)", executor.ErrSandboxGone, err)
	case err != nil:
		return s.e.unavailable(ctx, "inspect container", err)
	case ins.State == nil || !ins.State.Running:
		return fmt.Errorf("the container is no longer running: %w", executor.ErrSandboxGone)
	}
	return nil
}

// releaseChat releases the chat unless the sandbox is parked (then it is
// released already).
func (s *Sandbox) releaseChat() {
	s.relMu.Lock()
	defer s.relMu.Unlock()
	if !s.parked {
		s.release()
	}
}

// parkedOn reports whether a parked sandbox of this executor is on the
// chat: its workspace is mounted although nobody holds the chat.
func (e *Executor) parkedOn(user, chat string) bool {
	for _, s := range e.sandboxes.Open() {
		if s.plan.spec.UserID != user || s.plan.spec.ChatID != chat {
			continue
		}
		s.relMu.Lock()
		parked := s.parked
		s.relMu.Unlock()
		if parked {
			return true
		}
	}
	return false
}

// closeParked closes sandbox id when it is open and parked, and reports
// whether it did: a new sandbox on the chat replaces an idle session
// container of this instance.
func (e *Executor) closeParked(ctx context.Context, id string) bool {
	s, ok := e.sandboxes.Get(id)
	if !ok {
		return false
	}
	s.relMu.Lock()
	parked := s.parked
	s.relMu.Unlock()
	if !parked {
		return false
	}
	if err := s.Close(ctx); err != nil {
		s.logger.Warn("removing a parked session container before a new one", "error", err)
	}
	return true
}
