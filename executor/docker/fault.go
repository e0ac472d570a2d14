package docker

import (
	"context"
	"errors"
	"fmt"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"

	"github.com/agentbox/agentbox/executor"
)

// Settle windows of Sandbox.gone: how long a container the daemon still
// reports running is watched before the command's failure is taken as its
// own. A lost helper connection almost surely means the container is going
// (the helper is its main process); a SIGKILLed docker exec may just be
// the command's own end (the OOM killer, a kill -9 by the agent).
const (
	settleStrong   = 5 * time.Second
	settleWeak     = 500 * time.Millisecond
	goneSettlePoll = 50 * time.Millisecond
)

// daemonDown reports whether err means the Docker daemon did not answer: a
// failed connection, or a call that ran out of its own time bound while
// ctx (the caller's context) was still live.
func daemonDown(ctx context.Context, err error) bool {
	if err == nil {
		return false
	}
	return client.IsErrConnectionFailed(err) || errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
}

// unavailable wraps err, from the daemon call named by step, with step and,
// when the daemon did not answer, with executor.ErrUnavailable and what to
// do about it.
func (e *Executor) unavailable(ctx context.Context, step string, err error) error {
	if !daemonDown(ctx, err) {
		return fmt.Errorf("%s: %w", step, err)
	}
	return fmt.Errorf("%s: the Docker daemon at %s does not answer; start dockerd (or wait until its restart finishes) and retry: %w (%w)", step, e.daemonHost, executor.ErrUnavailable, err)
}

// gone looks at the container after a command failed in a way that may
// mean it went away (the stream broke, the helper's connection was lost,
// the command was SIGKILLed). It returns an error wrapping
// executor.ErrSandboxGone that names what happened, or nil when the
// container still runs after settle (the daemon may report a container it
// is killing as running for a moment) or its state cannot be told. Once
// the container is known gone, the answer is kept and later commands fail
// at once.
func (s *Sandbox) gone(ctx context.Context, settle time.Duration) error {
	if g := s.goneErr.Load(); g != nil {
		return *g
	}
	ctx = context.WithoutCancel(ctx)
	until := time.Now().Add(settle)
	var why string
	for why == "" {
		callCtx, cancel := context.WithTimeout(ctx, s.e.o.CallTimeout)
		ins, err := s.e.api.ContainerInspect(callCtx, s.id)
		cancel()
		switch {
		case err == nil && ins.State != nil && ins.State.Running:
			if !time.Now().Before(until) {
				return nil
			}
			time.Sleep(goneSettlePoll)
		case err == nil && ins.State != nil && ins.State.OOMKilled:
			why = "stopped: the OOM killer ended its main process; raise the sandbox's memory limit"
		case err == nil && ins.State != nil && (ins.State.Status == "removing" || ins.State.Status == "dead"),
			cerrdefs.IsNotFound(err):
			why = "was removed while in use (docker rm -f by an operator, or the daemon restarted)"
		case err == nil && ins.State != nil:
			why = fmt.Sprintf("stopped (%s, exit code %d): it was killed, or the daemon restarted", ins.State.Status, ins.State.ExitCode)
		case daemonDown(ctx, err):
			why = fmt.Sprintf("cannot be reached: the Docker daemon at %s stopped answering (restarted or stopped)", s.e.daemonHost)
		default:
			s.logger.Debug("cannot tell whether the container is still there", "error", err)
			return nil
		}
	}
	var g error
	if !time.Now().Before(s.plan.deadline.Add(-time.Second)) {
		// The container ends at its deadline by design.
		g = fmt.Errorf("sandbox %s reached its deadline (%s) and its container ended; raise the sandbox timeout: %w", s.sandboxID, s.plan.deadline.Format(time.RFC3339), executor.ErrTimeout)
	} else {
		g = fmt.Errorf("sandbox %s: its container %s %s; send the request again to get a new sandbox: %w", s.sandboxID, shortID(s.id), why, executor.ErrSandboxGone)
		s.logger.Warn("the sandbox's container went away", "container", shortID(s.id), "reason", why)
	}
	s.goneErr.CompareAndSwap(nil, &g)
	return *s.goneErr.Load()
}

// mayBeGone reports whether a command's outcome may come from its
// container going away rather than from the command itself (the caller
// rules out its own cancel first). Timeouts, output caps and invalid
// requests are the command's own; on the
// docker-exec path a container killed under a command shows as that
// command dying of a signal (or with no status) and no error.
func mayBeGone(res executor.ExecResult, err error, dockerExecPath bool) bool {
	switch {
	case err == nil:
		return dockerExecPath && (res.ExitCode < 0 || res.Signal != "")
	case errors.Is(err, executor.ErrTimeout), errors.Is(err, executor.ErrOutputTooLarge),
		errors.Is(err, executor.ErrInvalid), errors.Is(err, executor.ErrNotFound):
		return false
	}
	return true
}
