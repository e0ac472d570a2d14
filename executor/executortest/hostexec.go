package executortest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// Defaults of HostExec when the Cmd leaves them zero.
const (
	HostExecTimeout   = 30 * time.Second
	HostExecMaxOutput = 16 << 20
)

// HostExec is an ExecFunc that runs cmd on the host with os/exec, as a
// stand-in for a container in tests that need a real shell: the working
// directory is the workspace (Cmd.Dir "/workspace/..." maps into it), the
// environment is PATH plus the spec's and the command's Env, the command
// runs in its own process group, which is killed on timeout (ErrTimeout),
// on cancellation and when stdout or stderr passes MaxOutput
// (ErrOutputTooLarge). It gives no isolation: use it only with trusted
// test commands. Use it as sb.ExecFunc = sb.HostExec.
func (s *FakeSandbox) HostExec(ctx context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
	if len(cmd.Args) == 0 {
		return executor.ExecResult{}, fmt.Errorf("exec: empty argv: %w", executor.ErrInvalid)
	}
	dir, err := s.hostDir(cmd.Dir)
	if err != nil {
		return executor.ExecResult{}, err
	}
	timeout := cmd.Timeout
	if timeout <= 0 {
		timeout = HostExecTimeout
	}
	limit := cmd.MaxOutput
	if limit <= 0 {
		limit = HostExecMaxOutput
	}
	runCtx, cancel := context.WithTimeoutCause(ctx, timeout, executor.ErrTimeout)
	defer cancel()
	killCtx, kill := context.WithCancelCause(runCtx)
	defer kill(nil)

	c := exec.CommandContext(killCtx, cmd.Args[0], cmd.Args[1:]...)
	c.Dir = dir
	c.Env = append(append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + s.ws.Dir()}, s.spec.Env...), cmd.Env...)
	c.Stdin = cmd.Stdin
	c.Stdout = &capWriter{w: cmd.Stdout, left: limit, over: func() { kill(executor.ErrOutputTooLarge) }}
	c.Stderr = &capWriter{w: cmd.Stderr, left: limit, over: func() { kill(executor.ErrOutputTooLarge) }}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	c.WaitDelay = time.Second

	start := time.Now()
	err = c.Run()
	res := executor.ExecResult{Duration: time.Since(start), Path: "host"}
	if c.ProcessState != nil {
		res.ExitCode = c.ProcessState.ExitCode()
		if ws, ok := c.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.ExitCode, res.Signal = -1, ws.Signal().String()
		}
	}
	if cause := context.Cause(killCtx); cause != nil {
		switch {
		case errors.Is(cause, executor.ErrOutputTooLarge):
			return res, fmt.Errorf("exec %v: more than %d bytes of output: %w", cmd.Args, limit, executor.ErrOutputTooLarge)
		case errors.Is(cause, executor.ErrTimeout):
			return res, fmt.Errorf("exec %v: killed after %v: %w", cmd.Args, timeout, executor.ErrTimeout)
		default:
			return res, fmt.Errorf("exec %v: %w", cmd.Args, cause)
		}
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return res, fmt.Errorf("exec %v: %w", cmd.Args, err)
	}
	return res, nil
}

// hostDir maps a container directory to the host.
func (s *FakeSandbox) hostDir(dir string) (string, error) {
	rel := dir
	if filepath.IsAbs(dir) {
		rest, ok := strings.CutPrefix(dir, executor.ContainerWorkdir)
		if !ok || rest != "" && rest[0] != '/' {
			return "", fmt.Errorf("exec: dir %q is outside %s; the fake only runs inside the workspace: %w", dir, executor.ContainerWorkdir, executor.ErrInvalid)
		}
		rel = strings.TrimLeft(rest, "/")
	}
	if rel == "" {
		return s.ws.Dir(), nil
	}
	if !filepath.IsLocal(rel) {
		return "", fmt.Errorf("exec: dir %q leaves the workspace: %w", dir, executor.ErrPathEscapes)
	}
	return filepath.Join(s.ws.Dir(), rel), nil
}

// capWriter passes at most left bytes to w (nil discards) and calls over
// once when more arrive.
type capWriter struct {
	mu   sync.Mutex
	w    io.Writer
	left int64
	over func()
	done bool
}

func (c *capWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return 0, executor.ErrOutputTooLarge
	}
	n := len(p)
	if int64(n) > c.left {
		p = p[:c.left]
		c.done = true
	}
	c.left -= int64(len(p))
	if c.w != nil && len(p) > 0 {
		if _, err := c.w.Write(p); err != nil {
			return 0, err
		}
	}
	if c.done {
		c.over()
		return len(p), executor.ErrOutputTooLarge
	}
	return n, nil
}
