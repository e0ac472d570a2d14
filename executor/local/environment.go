package local

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// snapshotTimeout bounds the snapshot's sandbox.
const snapshotTimeout = 30 * time.Second

// Environment implements executor.EnvironmentProber. It captures the
// sandboxes' environment once, in a sandbox with the same root view, user
// and namespaces as every other (and no workspace); later calls return the
// first result. Local sandboxes see the host's /usr, so spec's image does
// not matter, and its limits are this executor's.
func (e *Executor) Environment(ctx context.Context, _ executor.Spec) (executor.Environment, error) {
	// Not the first caller's cancellation: every later caller gets this
	// result.
	e.envOnce.Do(func() { e.env, e.envErr = e.captureEnvironment(context.WithoutCancel(ctx)) })
	return e.env, e.envErr
}

func (e *Executor) captureEnvironment(ctx context.Context) (executor.Environment, error) {
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()
	args := append(baseArgs(DefaultUID, DefaultGID), rootArgs(e.o.ReadOnlyPaths)...)
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", e.o.Home, "--chdir", "/tmp",
		"--clearenv", "--setenv", "PATH", defaultPath, "--setenv", "HOME", e.o.Home,
		"--", "/bin/sh", "-c", executor.EnvironmentScript())
	cmd := exec.CommandContext(ctx, e.bwrap, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = sandboxCredential(DefaultUID, DefaultGID)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return executor.Environment{}, fmt.Errorf("local executor: environment snapshot: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	env := executor.ParseEnvironment(out)
	env.Mode = "local (bubblewrap)"
	env.Network = "none (loopback only; the model through the gateway)"
	env.Limits = e.Limits()
	return env, nil
}
