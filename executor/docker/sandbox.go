package docker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/helper"
)

// Sandbox is one running container over one chat's workspace. Its FS
// methods act on the workspace from the host (executor.Workspace); Exec
// runs commands in the container.
type Sandbox struct {
	e         *Executor
	id        string // container id
	sandboxID string // our id: container name suffix, host dir name
	hostDir   string
	ws        *executor.Workspace
	// HostFS is ws: the host-side file API (ReadFile, WriteFile, ...).
	executor.HostFS
	quota  quotaHandle // the workspace's disk and inode quota
	plan   plan
	logger hclog.Logger

	runner  commandRunner
	helper  *helper.Client // nil on the docker-exec path
	docker  *dockerExec
	oom     oomCounter
	oomHost bool                        // oom reads are cheap file reads
	init    atomic.Pointer[initProcess] // the container's init, for a quick stop (nil: through the daemon)
	lastOOM atomic.Int64                // last counter seen (exec-read path)

	closed    atomic.Bool
	stopped   atomic.Bool           // the container was stopped because an exec was stuck
	goneErr   atomic.Pointer[error] // the container went away under us (see gone)
	closeOnce sync.Once
	closeErr  error
	release   func() // lease, flock and last-use marker
	begun     func() // an adopted pooled container's registry mark, ended by Create

	relMu  sync.Mutex // guards release and parked
	parked bool       // the chat is released, the container idles (Park)
}

var (
	_ executor.Sandbox = (*Sandbox)(nil)
	_ executor.FS      = (*Sandbox)(nil)
)

// ID is the container id.
func (s *Sandbox) ID() string { return s.id }

// Workdir is executor.ContainerWorkdir.
func (s *Sandbox) Workdir() string { return executor.ContainerWorkdir }

// HostDir is the per-sandbox host directory ({data}/sandboxes/{id}),
// mounted at ContainerHostDir; the helper puts its sockets there.
func (s *Sandbox) HostDir() string { return s.hostDir }

// ModelBaseURL is where the agent CLI reaches the model from inside the
// container (the helper's relay to {HostDir}/model.sock), or "" when the
// sandbox has no helper or the relay is off.
func (s *Sandbox) ModelBaseURL() string {
	if s.helper == nil || s.e.o.ModelPort <= 0 {
		return ""
	}
	return fmt.Sprintf("http://127.0.0.1:%d", s.e.o.ModelPort)
}

// EgressProxyURL is the agent's HTTP_PROXY inside the container (the
// helper's relay to {HostDir}/egress.sock), or "" when the sandbox was not
// created with Spec.Egress.
func (s *Sandbox) EgressProxyURL() string {
	port := s.plan.egressPort(s.e.o)
	if s.helper == nil || port == 0 {
		return ""
	}
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

// ExecPath names how commands run: PathHelper or PathDockerExec.
func (s *Sandbox) ExecPath() string { return s.runner.path() }

// Deadline is when the container ends by itself.
func (s *Sandbox) Deadline() time.Time { return s.plan.deadline }

// Exec runs cmd in the container and waits for it. When it stops early
// (Cmd.Timeout, ctx cancelled, output over Cmd.MaxOutput) every process it
// started is stopped: SIGTERM, then SIGKILL after Options.StopGrace.
// OOMKilled reports that the OOM killer acted in the container while the
// command ran, whatever its exit code.
func (s *Sandbox) Exec(ctx context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
	if cmd == nil || len(cmd.Args) == 0 || cmd.Args[0] == "" {
		return executor.ExecResult{}, fmt.Errorf("exec: empty argv; set Cmd.Args[0] to the program: %w", executor.ErrInvalid)
	}
	if qerr := s.quotaErr(); qerr != nil {
		return executor.ExecResult{}, fmt.Errorf("exec %q: %w", cmd.Args[0], qerr)
	}
	if s.closed.Load() || s.stopped.Load() {
		return executor.ExecResult{}, fmt.Errorf("exec %q: sandbox %s: %w", cmd.Args[0], s.sandboxID, executor.ErrNotRunning)
	}
	if g := s.goneErr.Load(); g != nil {
		return executor.ExecResult{}, fmt.Errorf("exec %q: %w", cmd.Args[0], *g)
	}
	c, err := cmd.Prepare(s.Workdir(), s.e.o.ExecTimeout, s.e.o.MaxOutput, s.plan.deadline)
	if err != nil {
		return executor.ExecResult{}, err
	}

	before := s.lastOOM.Load()
	if s.oomHost {
		if n, err := s.oom.count(ctx); err == nil {
			before = n
		}
	}
	s.logger.Debug("exec", "args", c.Args, "dir", c.Dir, "timeout", c.Timeout, "path", s.runner.path())
	res, err := s.runner.run(ctx, &c)
	if qerr := s.quotaErr(); qerr != nil {
		return res, fmt.Errorf("exec %q: %w", c.Args[0], qerr)
	}
	if ctx.Err() == nil && !s.closed.Load() && !s.stopped.Load() && mayBeGone(res, err, s.helper == nil) {
		settle := settleWeak
		if err != nil {
			settle = min(settleStrong, s.e.o.CallTimeout)
		}
		if g := s.gone(ctx, settle); g != nil {
			// The transport's own error (a broken stream, "no such
			// container") says less than g; keep it in the debug log.
			s.logger.Debug("exec failed because the container went away", "args", c.Args, "exit", res.ExitCode, "signal", res.Signal, "error", err)
			return res, fmt.Errorf("exec %q: %w", c.Args[0], g)
		}
	}
	if s.helper == nil || s.oomHost {
		if n, oerr := s.readOOM(ctx); oerr == nil {
			res.OOMKilled = res.OOMKilled || n > before
		} else if !errors.Is(oerr, executor.ErrNotRunning) && !s.stopped.Load() && !s.closed.Load() {
			s.logger.Warn("cannot read the oom counter", "error", oerr)
		}
	}
	if s.stopped.Load() && err != nil {
		err = fmt.Errorf("%w (the sandbox was stopped because the command's processes could not be killed: %w)", err, executor.ErrNotRunning)
	}
	if err != nil {
		s.logger.Debug("exec failed", "args", c.Args, "exit", res.ExitCode, "oom", res.OOMKilled, "duration", res.Duration, "error", err)
	} else {
		s.logger.Debug("exec done", "args", c.Args, "exit", res.ExitCode, "oom", res.OOMKilled, "duration", res.Duration)
	}
	return res, err
}

// readOOM reads the OOM counter on a context the caller cannot cancel.
func (s *Sandbox) readOOM(ctx context.Context) (int64, error) {
	if s.oom == nil {
		return 0, errNoOOMCounter
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.e.o.CallTimeout)
	defer cancel()
	n, err := s.oom.count(ctx)
	if err != nil {
		return 0, err
	}
	s.lastOOM.Store(n)
	return n, nil
}

// stop kills the container when an exec's processes cannot be stopped
// (the kill script cannot start, e.g. under a fork bomb at the pids limit).
func (s *Sandbox) stop(ctx context.Context, reason string) {
	s.stopped.Store(true)
	if p := s.init.Load(); p != nil {
		_ = p.kill() // ContainerKill below reports what matters
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.e.o.CallTimeout)
	defer cancel()
	err := s.e.api.ContainerKill(ctx, s.id, "KILL")
	s.logger.Warn("sandbox stopped", "reason", reason, "error", err)
}

// Close removes the container (force; AutoRemove may already be at it),
// deletes the host directory, closes the workspace handle and releases the
// chat. It runs on a context the caller cannot cancel, bounded by the stop
// grace plus a margin, keeps the workspace, and is safe to call more than
// once (later calls return the first result). When the removal fails the
// chat is released all the same; the container is then this instance's
// with no lease, which the next reconcile removes.
func (s *Sandbox) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.e.o.StopGrace+s.e.o.CallTimeout)
		defer cancel()
		if s.helper != nil {
			_ = s.helper.Close()
		}
		rmErr := s.e.api.ContainerRemove(ctx, s.id, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if p := s.init.Swap(nil); p != nil {
			p.close()
		}
		errs := []error{removeErrors(rmErr)}
		if err := s.ws.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close workspace: %w", err))
		}
		if err := s.e.removeHostDir(s.sandboxID); err != nil {
			errs = append(errs, err)
		}
		if err := s.releaseQuota(); err != nil {
			errs = append(errs, fmt.Errorf("release the workspace quota: %w", err))
		}
		s.e.sandboxes.Forget(s.sandboxID)
		s.releaseChat()
		s.e.pool.refill(s.plan)
		s.closeErr = errors.Join(errs...)
		if s.closeErr != nil {
			s.closeErr = fmt.Errorf("close sandbox %s: %w", s.sandboxID, s.closeErr)
			s.logger.Error("sandbox close failed", "error", s.closeErr)
			return
		}
		s.logger.Debug("sandbox removed", "duration", time.Since(start))
	})
	return s.closeErr
}
