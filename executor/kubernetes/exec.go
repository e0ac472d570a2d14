package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/agentbox/agentbox/executor"
)

// ExecTokenVar carries a per-command token in the command's environment, so
// that what the command started can be found and killed when it is stopped.
const ExecTokenVar = "AGENTBOX_EXEC_TOKEN"

// wrapper sets the command's environment and working directory in the pod
// and then becomes the command: sh -c wrapper sh DIR N KEY=VALUE... ARGV...
// Keys are checked before (export would take a key like "A;B" as an error,
// never as code, but a clear error is better).
const wrapper = `d=$1; n=$2; shift 2
while [ "$n" -gt 0 ]; do export "$1" || exit 126; shift; n=$((n-1)); done
cd "$d" || exit 126
exec "$@"`

// killScript kills, SIGTERM then SIGKILL after $2 seconds, every process
// whose environment holds the exec token $1.
const killScript = `t="` + ExecTokenVar + `=$1"
find() { for p in /proc/[0-9]*; do [ "${p#/proc/}" = $$ ] && continue
  tr '\0' '\n' < "$p/environ" 2>/dev/null | grep -qxF "$t" && echo "${p#/proc/}"; done; }
pids=$(find); [ -z "$pids" ] && exit 0
kill -TERM $pids 2>/dev/null; sleep "$2"
pids=$(find); [ -n "$pids" ] && kill -KILL $pids 2>/dev/null; exit 0`

// Exec runs cmd through the pod's helper (over the sandbox's port forward)
// and waits for it: the helper enforces the timeout and output cap and
// kills the command's process group, as in the Docker backend.
func (s *Sandbox) Exec(ctx context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
	res := executor.ExecResult{ExitCode: -1, Path: PathHelper}
	if cmd != nil && len(cmd.Args) > 0 {
		if err := checkEnv(cmd.Args[0], cmd.Env); err != nil {
			return res, err
		}
	}
	if qerr := s.overQuota(); qerr != nil {
		return res, fmt.Errorf("kubernetes executor: exec: %w", qerr)
	}
	if s.isClosed() {
		return res, fmt.Errorf("kubernetes executor: exec: sandbox closed: %w", executor.ErrNotRunning)
	}
	res, err := s.hc.Exec(ctx, cmd)
	res.Path = PathHelper
	if qerr := s.overQuota(); qerr != nil {
		// The watchdog stopped the pod under the command.
		return res, fmt.Errorf("kubernetes executor: exec: %w", qerr)
	}
	if err != nil && errors.Is(err, executor.ErrNotRunning) && !errors.Is(err, executor.ErrSandboxGone) && ctx.Err() == nil {
		// The helper's connection broke: say whether the pod is gone.
		prog := ""
		if cmd != nil && len(cmd.Args) > 0 {
			prog = cmd.Args[0]
		}
		return res, s.streamError(ctx, prog, err)
	}
	return res, err
}

// execAPI runs cmd in the pod through the API server's exec subresource and
// waits for it: a path that needs no helper in the pod, kept to reach a
// pod whose helper does not answer and to measure against the helper.
func (s *Sandbox) execAPI(ctx context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
	res := executor.ExecResult{ExitCode: -1, Path: PathKubeExec}
	if cmd == nil || len(cmd.Args) == 0 || cmd.Args[0] == "" {
		return res, fmt.Errorf("kubernetes executor: exec needs a command: %w", executor.ErrInvalid)
	}
	prog := cmd.Args[0]
	if cmd.Timeout < 0 || cmd.MaxOutput < 0 {
		return res, fmt.Errorf("kubernetes executor: exec %q: negative Timeout or MaxOutput: %w", prog, executor.ErrInvalid)
	}
	if err := checkEnv(prog, cmd.Env); err != nil {
		return res, err
	}
	if s.isClosed() {
		return res, fmt.Errorf("kubernetes executor: exec %q: sandbox closed: %w", prog, executor.ErrNotRunning)
	}
	timeout := cmd.Timeout
	if timeout == 0 {
		timeout = s.e.o.ExecTimeout
	}
	maxOut := cmd.MaxOutput
	if maxOut == 0 {
		maxOut = s.e.o.MaxOutput
	}
	dir := cmd.Dir
	if dir == "" {
		dir = executor.ContainerWorkdir
	}
	token := randomID()
	env := append(append([]string(nil), cmd.Env...), ExecTokenVar+"="+token)
	argv := append([]string{"/bin/sh", "-c", wrapper, "sh", dir, strconv.Itoa(len(env))}, env...)
	argv = append(argv, cmd.Args...)

	start := time.Now()
	defer func() { res.Duration = time.Since(start) }()
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	runCtx, cancelT := context.WithTimeoutCause(runCtx, timeout,
		fmt.Errorf("kubernetes executor: exec %q: killed after %s: %w; raise Cmd.Timeout if it needs longer", prog, timeout, executor.ErrTimeout))
	defer cancelT()
	tooLarge := fmt.Errorf("kubernetes executor: exec %q: more than %d bytes on one stream: %w; raise Cmd.MaxOutput or write to a file", prog, maxOut, executor.ErrOutputTooLarge)
	stdout := &capWriter{w: orDiscard(cmd.Stdout), left: maxOut, over: func() { cancel(tooLarge) }}
	stderr := &capWriter{w: orDiscard(cmd.Stderr), left: maxOut, over: func() { cancel(tooLarge) }}

	err := s.stream(runCtx, argv, cmd.Stdin, stdout, stderr)
	if cause := context.Cause(runCtx); errors.Is(cause, executor.ErrOutputTooLarge) {
		// The cap may trip on the last write of a command that then ended.
		s.sweep(context.WithoutCancel(ctx), token)
		return res, cause
	}
	if err == nil {
		res.ExitCode = 0
		return res, nil
	}
	var ee utilexec.ExitError
	if errors.As(err, &ee) && runCtx.Err() == nil {
		res.ExitCode = ee.ExitStatus()
		return res, nil
	}
	if runCtx.Err() != nil {
		// The closed stream makes the runtime kill the process itself; what
		// it started may still run.
		s.sweep(context.WithoutCancel(ctx), token)
		if cause := context.Cause(runCtx); cause != nil && ctx.Err() == nil {
			return res, cause
		}
		return res, fmt.Errorf("kubernetes executor: exec %q: %w", prog, context.Cause(ctx))
	}
	return res, s.streamError(ctx, prog, err)
}

// stream runs argv in the sandbox container over WebSocket (SPDY when the
// API server does not upgrade to it).
func (s *Sandbox) stream(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	return s.e.stream(ctx, s.name, argv, stdin, stdout, stderr)
}

// stream runs argv in pod's sandbox container over WebSocket (SPDY when
// the API server does not upgrade to it).
func (e *Executor) stream(ctx context.Context, pod string, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	req := e.cs.CoreV1().RESTClient().Post().Namespace(e.o.Namespace).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: ContainerName, Command: argv, Stdin: stdin != nil, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(e.cfg, http.MethodGet, req.URL().String())
	if err != nil {
		return fmt.Errorf("websocket executor: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(e.cfg, http.MethodPost, req.URL())
	if err != nil {
		return fmt.Errorf("spdy executor: %w", err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// streamError names why a stream failed: the pod went away, the API server
// does not answer, or something else.
func (s *Sandbox) streamError(ctx context.Context, prog string, err error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.e.o.CallTimeout)
	defer cancel()
	pod, gerr := s.e.cs.CoreV1().Pods(s.e.o.Namespace).Get(cctx, s.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(gerr):
		return fmt.Errorf("kubernetes executor: exec %q: pod %s is gone: %w (%w)", prog, s.name, executor.ErrSandboxGone, err)
	case gerr == nil && (pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded):
		return fmt.Errorf("kubernetes executor: exec %q: pod %s is ending (%s %s): %w (%w)", prog, s.name, pod.Status.Phase, pod.Status.Reason, executor.ErrSandboxGone, err)
	case gerr != nil:
		return s.e.apiError("exec "+strconv.Quote(prog), errors.Join(err, gerr))
	}
	return fmt.Errorf("kubernetes executor: exec %q: %w", prog, err)
}

// sweep kills whatever still carries the command's exec token, in a second
// exec. Best effort: a pod at its pids limit may not start it.
func (s *Sandbox) sweep(ctx context.Context, token string) {
	ctx, cancel := context.WithTimeout(ctx, s.e.o.CallTimeout)
	defer cancel()
	grace := strconv.Itoa(int(max(s.e.o.StopGrace/time.Second, 1)))
	if err := s.stream(ctx, []string{"/bin/sh", "-c", killScript, "sh", token, grace}, nil, io.Discard, io.Discard); err != nil {
		s.e.logger.Warn("could not sweep a stopped command's processes", "pod", s.name, "error", err)
	}
}

// checkEnv refuses an env entry that is not NAME=VALUE with a shell-safe
// NAME, on both exec paths.
func checkEnv(prog string, env []string) error {
	for _, kv := range env {
		if !validEnv(kv) {
			return fmt.Errorf("kubernetes executor: exec %q: env entry %q is not NAME=VALUE with NAME of [A-Za-z_][A-Za-z0-9_]*: %w", prog, kv, executor.ErrInvalid)
		}
	}
	return nil
}

func validEnv(kv string) bool {
	for i := 0; i < len(kv); i++ {
		c := kv[i]
		switch {
		case c == '=' && i > 0:
			return true
		case c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return false
}

// capWriter passes at most left bytes to w and calls over once past them.
type capWriter struct {
	mu   sync.Mutex
	w    io.Writer
	left int64
	over func()
	done bool
	err  error
}

func (c *capWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.err != nil {
		return len(p), nil
	}
	if int64(len(p)) > c.left {
		c.done = true
		c.over()
		return len(p), nil
	}
	c.left -= int64(len(p))
	if _, err := c.w.Write(p); err != nil {
		c.err = err
	}
	return len(p), nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
