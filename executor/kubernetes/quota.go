package kubernetes

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/executor"
)

// The workspace quota. A claim's requested size is a request: hostPath and
// local-path volumes never enforce it, and the kubelet enforces an
// emptyDir's only between eviction sweeps. So, as executor/docker's
// watchdog does on the host, the pod's helper measures the workspace
// (helper.Client.CheckQuota, which walks it without following links)
// every Options.QuotaInterval; over Spec.DiskBytes or Spec.Inodes the pod
// is stopped and the sandbox's commands fail with executor.ErrNoSpace.

// logQuota tells the operator, once, how workspace quotas are enforced.
func (e *Executor) logQuota() {
	if e.o.QuotaInterval < 0 {
		e.logger.Info("workspace quota: off in the pods (Options.QuotaInterval is negative)",
			"bound", "the storage class's own: the claim's size where its provisioner enforces it, none otherwise")
		return
	}
	e.logger.Info("workspace quota: watchdog in the pod's helper",
		"bound", fmt.Sprintf("the workspace measured every %v and a pod over max_disk or max_inodes stopped, so it may pass them by what it writes in one interval", e.o.QuotaInterval))
}

// startQuota measures the workspace once (a chat already over its quota
// does not start) and starts the watchdog, unless Options.QuotaInterval
// turns it off.
func (s *Sandbox) startQuota(ctx context.Context) error {
	if s.e.o.QuotaInterval < 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, s.e.o.CallTimeout)
	err := s.hc.CheckQuota(cctx, s.plan.spec.DiskBytes, s.plan.spec.Inodes)
	cancel()
	if err != nil {
		return fmt.Errorf("kubernetes executor: chat %s/%s: %w", s.plan.spec.UserID, s.plan.spec.ChatID, err)
	}
	wctx, stop := context.WithCancel(s.e.bg)
	s.quotaStop, s.quotaDone = stop, make(chan struct{})
	go s.watchQuota(wctx)
	return nil
}

// watchQuota measures the workspace every QuotaInterval until ctx ends or
// the workspace is over its quota, which stops the pod.
func (s *Sandbox) watchQuota(ctx context.Context) {
	defer close(s.quotaDone)
	every(ctx, s.e.o.QuotaInterval, func() bool {
		cctx, cancel := context.WithTimeout(ctx, s.e.o.CallTimeout)
		err := s.hc.CheckQuota(cctx, s.plan.spec.DiskBytes, s.plan.spec.Inodes)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, executor.ErrNoSpace):
			s.mu.Lock()
			s.quotaErr = err
			s.mu.Unlock()
			s.e.logger.Warn("workspace over quota; stopping the sandbox", "pod", s.name, "user", s.plan.spec.UserID, "chat", s.plan.spec.ChatID, "error", err)
			if derr := s.e.beginDelete(context.WithoutCancel(ctx), s.name); derr != nil {
				s.e.logger.Warn("could not stop the sandbox over quota", "pod", s.name, "error", derr)
			}
			return false
		case ctx.Err() != nil:
			return false
		default:
			// The pod may be going away; Exec reports that.
			s.e.logger.Debug("cannot measure the workspace; retrying", "pod", s.name, "error", err)
		}
		return true
	})
}

// overQuota is the quota error that stopped the sandbox, or nil.
func (s *Sandbox) overQuota() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.quotaErr
}

// stopQuota stops the watchdog and waits for it.
func (s *Sandbox) stopQuota() {
	if s.quotaStop != nil {
		s.quotaStop()
		<-s.quotaDone
	}
}
