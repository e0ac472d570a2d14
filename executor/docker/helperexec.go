package docker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/helper"
)

// PathHelper is ExecResult.Path for commands run through the in-container
// helper.
const PathHelper = "helper"

// ImageHelperPath is where sandbox images built by examples/images bake the
// helper (Options.UseImageHelper).
const ImageHelperPath = "/usr/local/bin/agentbox-helper"

// helperRunner runs commands through the helper's exec socket in the
// sandbox's host directory (~1 ms per command against tens of ms for
// docker exec). The helper kills a stopped command's process group itself
// and reports OOM kills. A process that left the group (setsid) survives
// that, so the command also carries an exec token and, when it was stopped
// early, the docker-exec kill script sweeps whatever still has the token.
type helperRunner struct {
	c     *helper.Client
	sweep *dockerExec
}

var _ commandRunner = helperRunner{}

func (h helperRunner) path() string { return PathHelper }

func (h helperRunner) run(ctx context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
	token := randomID()
	c := *cmd
	c.Env = append(append([]string(nil), cmd.Env...), execTokenVar+"="+token)
	res, err := h.c.Exec(ctx, &c)
	res.Path = PathHelper
	if err != nil && h.sweep != nil && (ctx.Err() != nil || errors.Is(err, executor.ErrTimeout) || errors.Is(err, executor.ErrOutputTooLarge)) {
		h.sweep.kill(ctx, token)
	}
	return res, err
}

// helperPath is the helper binary inside the container, or "" when the
// sandbox runs without it (docker exec fallback).
func (o Options) helperPath() string {
	switch {
	case o.HelperBinary != "":
		return ContainerHelperPath
	case o.UseImageHelper:
		return ImageHelperPath
	}
	return ""
}

// helperCommand is the container's main command with the helper: it
// serves exec and the model relay and exits at the deadline.
func (p plan) helperCommand(o Options, bin string) []string {
	return helper.ServeArgs(bin, helper.ServeOptions{
		Dir:        ContainerHostDir,
		Workdir:    executor.ContainerWorkdir,
		Deadline:   p.deadline,
		ModelPort:  max(o.ModelPort, 0),
		EgressPort: p.egressPort(o),
		KillGrace:  o.StopGrace,
	})
}

// egressPort is the helper's egress relay port for p, 0 without egress.
func (p plan) egressPort(o Options) int {
	if !p.spec.Egress || o.helperPath() == "" {
		return 0
	}
	return max(o.EgressPort, 0)
}

// checkEgress refuses a Spec asking for egress the executor cannot relay.
func checkEgress(spec executor.Spec, o Options) error {
	if !spec.Egress {
		return nil
	}
	if o.helperPath() == "" {
		return fmt.Errorf("spec: Egress needs the helper to relay the proxy; set Options.HelperBinary or UseImageHelper: %w", executor.ErrInvalid)
	}
	if o.EgressPort <= 0 {
		return fmt.Errorf("spec: Egress is asked for but Options.EgressPort turns the relay off; leave it 0 for the default: %w", executor.ErrInvalid)
	}
	return nil
}

// egressEnv is the proxy environment of a sandbox with egress
// (helper.ProxyEnv), nil without.
func (p plan) egressEnv(o Options) []string { return helper.ProxyEnv(p.egressPort(o)) }

// waitHelper waits for the helper's hello on the host dir's exec socket,
// giving up early when the container stops (e.g. the image has no helper).
func (e *Executor) waitHelper(ctx context.Context, sb *Sandbox) (*helper.Client, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, e.o.CallTimeout, fmt.Errorf("the helper did not answer within %v", e.o.CallTimeout))
	defer cancel()
	watchCtx, stopWatch := context.WithCancelCause(ctx)
	defer stopWatch(nil)
	go func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-watchCtx.Done():
				return
			case <-t.C:
			}
			ins, err := e.api.ContainerInspect(watchCtx, sb.id)
			if watchCtx.Err() != nil {
				return
			}
			if err != nil || ins.State == nil || !ins.State.Running {
				stopWatch(fmt.Errorf("the container stopped before its helper answered (is %s in image %s and executable?): %w", e.o.helperPath(), sb.plan.image, executor.ErrNotRunning))
				return
			}
		}
	}()
	c, err := helper.WaitReady(watchCtx, sb.hostDir)
	if err != nil {
		if cause := context.Cause(watchCtx); cause != nil && !errors.Is(cause, context.Canceled) {
			return nil, fmt.Errorf("%w (%w)", cause, err)
		}
		return nil, err
	}
	return c, nil
}
