package docker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/agentbox/agentbox/executor"
)

// Bounds of an environment snapshot.
const (
	// snapshotTimeout bounds one snapshot: its container's create, start,
	// script and removal.
	snapshotTimeout = time.Minute
	// snapshotRetry is how long a failed snapshot is remembered before
	// the next call tries again, so that a broken image does not start a
	// container on every request.
	snapshotRetry = 30 * time.Second
)

// envSnapshots holds the environment snapshots by image content and
// configuration (snapshotKey).
type envSnapshots struct {
	mu    sync.Mutex
	byKey map[string]*envSnapshot
}

// envSnapshot is one snapshot, taken once: ready is closed when env and
// err are set.
type envSnapshot struct {
	ready chan struct{}
	env   executor.Environment
	err   error
	at    time.Time
}

var _ executor.EnvironmentProber = (*Executor)(nil)

// Environment implements executor.EnvironmentProber: it runs
// executor.EnvironmentScript in a container of spec's image with spec's
// limits, user, runtime and network, the baseline's hardening and no
// workspace, once per image id (a rebuilt image under the same name gets
// a new snapshot) and configuration; later calls cost one image inspect.
// A failed snapshot is retried after 30 s.
func (e *Executor) Environment(ctx context.Context, spec executor.Spec) (executor.Environment, error) {
	// The plan fills in the same defaults a Create would; the ids only
	// pass its checks and are not used.
	spec.UserID, spec.ChatID, spec.AssistantID = "environment", "snapshot", ""
	p, err := newPlan(spec, e.o, time.Now())
	if err != nil {
		return executor.Environment{}, fmt.Errorf("environment snapshot: %w", err)
	}
	callCtx, cancel := context.WithTimeout(ctx, e.o.CallTimeout)
	img, err := e.api.ImageInspect(callCtx, p.image)
	cancel()
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return executor.Environment{}, fmt.Errorf("environment snapshot: image %s is not on the daemon; build or pull it first: %w", p.image, err)
		}
		return executor.Environment{}, fmt.Errorf("environment snapshot: %w", e.unavailable(ctx, "inspect image "+p.image, err))
	}
	key := snapshotKey(p, img.ID)
	e.env.mu.Lock()
	if e.env.byKey == nil {
		e.env.byKey = map[string]*envSnapshot{}
	}
	s := e.env.byKey[key]
	if s != nil {
		select {
		case <-s.ready:
			if s.err != nil && time.Since(s.at) > snapshotRetry {
				s = nil
			}
		default:
		}
	}
	if s == nil {
		s = &envSnapshot{ready: make(chan struct{})}
		e.env.byKey[key] = s
		go func() {
			// Not the first caller's cancellation: every later caller
			// waits for this result.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), snapshotTimeout)
			defer cancel()
			s.env, s.err = e.captureEnvironment(ctx, p, img.ID)
			s.at = time.Now()
			close(s.ready)
			if s.err != nil {
				e.logger.Warn("environment snapshot failed", "image", p.image, "error", s.err)
			}
		}()
	}
	e.env.mu.Unlock()
	select {
	case <-s.ready:
		return s.env, s.err
	case <-ctx.Done():
		return executor.Environment{}, fmt.Errorf("environment snapshot of %s: %w", p.image, context.Cause(ctx))
	}
}

// snapshotKey identifies what a snapshot depends on: the image's content
// and the options that show in it.
func snapshotKey(p plan, imageID string) string {
	return fmt.Sprintf("%s|%d|%g|%d|%s|%s|%t|%s|%d|%d", imageID, p.spec.MemoryBytes, p.spec.CPUs, p.spec.PidsLimit,
		p.spec.Runtime, p.spec.Network, p.spec.Egress, p.spec.User, p.spec.DiskBytes, p.spec.Inodes)
}

// captureEnvironment starts a container of p without the workspace or the
// host dir, runs the snapshot script in it as the sandbox user and
// removes it. The container carries this executor's labels and is held
// while it runs, so the reconciler removes it only once this gateway is
// gone; its main process ends by itself at the snapshot's deadline.
func (e *Executor) captureEnvironment(ctx context.Context, p plan, imageID string) (executor.Environment, error) {
	sbID := "env-" + randomID()
	done, err := e.sandboxes.Begin(sbID)
	if err != nil {
		return executor.Environment{}, err
	}
	defer done()
	p.spec.UserID, p.spec.ChatID = "", ""
	p.deadline = time.Now().Add(snapshotTimeout)
	cfg, hc := e.containerConfig(p, sbID, "", "")
	hc.Mounts = nil
	cfg.WorkingDir = "/"
	created, err := e.api.ContainerCreate(ctx, cfg, hc, nil, nil, "agentbox-"+sbID)
	if err != nil {
		return executor.Environment{}, e.unavailable(ctx, "create the snapshot container", err)
	}
	defer func() {
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.o.CallTimeout)
		defer cancel()
		if err := removeErrors(e.api.ContainerRemove(rmCtx, created.ID, container.RemoveOptions{Force: true})); err != nil {
			e.logger.Warn("cannot remove the environment snapshot's container", "container", shortID(created.ID), "error", err)
		}
	}()
	if err := e.api.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		return executor.Environment{}, e.unavailable(ctx, "start the snapshot container", err)
	}
	d := &dockerExec{api: e.api, containerID: created.ID, user: p.spec.User, stopGrace: e.o.StopGrace, callTimeout: e.o.CallTimeout, logger: e.logger}
	code, out, err := d.simple(ctx, []string{"/bin/sh", "-c", executor.EnvironmentScript()}, nil)
	if err == nil && code != 0 {
		err = fmt.Errorf("the snapshot script exited %d: %s", code, strings.TrimSpace(string(out)))
	}
	if err != nil {
		return executor.Environment{}, fmt.Errorf("environment snapshot of %s: %w", p.image, err)
	}
	runtime := p.spec.Runtime
	if ins, err := e.api.ContainerInspect(ctx, created.ID); err == nil && ins.HostConfig != nil && ins.HostConfig.Runtime != "" {
		runtime = ins.HostConfig.Runtime
	}
	env := executor.ParseEnvironment(out)
	env.Image, env.ImageID = p.image, imageID
	env.Mode = "Docker container (" + runtimeName(runtime) + ")"
	env.Limits = fmt.Sprintf("memory %s (no swap), %g CPUs, %d processes, workspace %s and %d files",
		executor.FormatBytes(p.spec.MemoryBytes), p.spec.CPUs, p.spec.PidsLimit, executor.FormatBytes(p.spec.DiskBytes), p.spec.Inodes)
	env.Network = networkName(p.spec)
	return env, nil
}

// runtimeName says what an OCI runtime name means for the agent.
func runtimeName(runtime string) string {
	switch runtime {
	case "":
		return "the daemon's default runtime"
	case "runsc":
		return "gVisor, runsc"
	}
	return runtime
}

// networkName says what the sandbox can reach.
func networkName(spec executor.Spec) string {
	switch {
	case spec.Egress:
		return "only the hosts on the assistant's egress allowlist, through the proxy in HTTP_PROXY and HTTPS_PROXY; the model through the gateway"
	case spec.Network == "none":
		return "none (the model through the gateway)"
	}
	return "the Docker network " + spec.Network
}
