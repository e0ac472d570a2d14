package kubernetes

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentbox/agentbox/executor"
)

// The session policy (middleware: an assistant's sandbox.policy
// "session") keeps a chat's pod between its requests. Park releases the
// chat's leases, here and across replicas, and keeps the pod, idle; the
// next request of the chat on this replica Unparks it. Meanwhile the chat
// is free: a request on another replica (or a Create here) removes the
// parked pod as it removes any pod left on the chat, and Unpark then
// reports it gone. A parked pod carries this instance's label, so the
// reconciler removes it if this replica dies.

// Park releases the chat and keeps the pod, idle, for the chat's next
// request (Unpark). It is a no-op on a parked sandbox.
func (s *Sandbox) Park() error {
	if s.isClosed() {
		return fmt.Errorf("kubernetes executor: park pod %s: %w", s.name, executor.ErrNotRunning)
	}
	s.relMu.Lock()
	defer s.relMu.Unlock()
	if s.parked {
		return nil
	}
	if s.release != nil {
		s.release(context.Background())
		s.release = nil
	}
	s.e.touchClaim(context.Background(), s.plan)
	s.parked = true
	s.e.pool.refill(s.plan)
	return nil
}

// Unpark takes the chat again, waiting up to wait, and checks that the
// pod still runs, is not being deleted, has time left before its deadline
// and that its helper answers. On error the sandbox stays parked (close
// it and create another); the error wraps executor.ErrBusy when the chat
// is held elsewhere and executor.ErrSandboxGone when the pod is gone.
func (s *Sandbox) Unpark(ctx context.Context, wait time.Duration) error {
	if s.isClosed() {
		return fmt.Errorf("kubernetes executor: unpark pod %s: %w", s.name, executor.ErrNotRunning)
	}
	if qerr := s.overQuota(); qerr != nil {
		return fmt.Errorf("kubernetes executor: unpark pod %s: %w", s.name, qerr)
	}
	s.relMu.Lock()
	defer s.relMu.Unlock()
	if !s.parked {
		return nil
	}
	start := time.Now()
	spec := s.plan.spec
	local, err := s.e.leases.Acquire(ctx, s.plan.chat, wait)
	if err != nil {
		return fmt.Errorf("kubernetes executor: unpark chat %s/%s: %w", spec.UserID, spec.ChatID, err)
	}
	cl, err := s.e.acquireLease(ctx, chatLeasePrefix+s.plan.chat, max(wait-time.Since(start), 0), map[string]string{AnnotationUser: spec.UserID, AnnotationChat: spec.ChatID})
	if err != nil {
		local()
		return fmt.Errorf("kubernetes executor: unpark chat %s/%s: %w", spec.UserID, spec.ChatID, err)
	}
	release := func(ctx context.Context) {
		cl.release(ctx)
		local()
	}
	if err := s.stillRunning(ctx); err != nil {
		release(ctx)
		return fmt.Errorf("kubernetes executor: unpark pod %s: %w", s.name, err)
	}
	s.release, s.parked = release, false
	return nil
}

// stillRunning checks that the pod runs, is not being deleted, has time
// left before its deadline, and that its helper answers.
func (s *Sandbox) stillRunning(ctx context.Context) error {
	if !time.Now().Before(s.plan.deadline) {
		return fmt.Errorf("the pod passed its deadline: %w", executor.ErrSandboxGone)
	}
	cctx, cancel := context.WithTimeout(ctx, s.e.o.CallTimeout)
	defer cancel()
	pod, err := s.e.cs.CoreV1().Pods(s.e.o.Namespace).Get(cctx, s.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("the pod was removed (another request of the chat, on this replica or another): %w", executor.ErrSandboxGone)
	}
	if err != nil {
		return s.e.apiError("get pod "+s.name, err)
	}
	if pod.DeletionTimestamp != nil {
		return fmt.Errorf("the pod is being removed: %w", executor.ErrSandboxGone)
	}
	if started, err := podStarted(pod); !started || err != nil {
		return fmt.Errorf("the pod's container no longer runs: %w", executor.ErrSandboxGone)
	}
	if err := s.hc.Ping(cctx); err != nil {
		return fmt.Errorf("the pod's helper does not answer: %w (%w)", executor.ErrSandboxGone, err)
	}
	return nil
}

// Deadline is when the pod ends by itself (its activeDeadlineSeconds).
func (s *Sandbox) Deadline() time.Time { return s.plan.deadline }
