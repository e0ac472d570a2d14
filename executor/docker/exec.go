package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
)

// PathDockerExec is ExecResult.Path for commands run through the Docker exec
// API.
const PathDockerExec = "docker-exec"

// commandRunner is the transport of Sandbox.Exec: it runs one validated
// command (Timeout and MaxOutput already set, Dir absolute) and kills every
// process it started when it stops early. Sandbox.Exec adds validation,
// defaults and OOM detection around it. dockerExec is the docker-exec path;
// the in-container helper plugs in as a second implementation.
type commandRunner interface {
	run(ctx context.Context, cmd *executor.Cmd) (executor.ExecResult, error)
	// path names the mechanism for ExecResult.Path and logs.
	path() string
}

// execTokenVar marks every process of one exec (it is inherited by
// children), so that the kill script can find them all.
const execTokenVar = "AGENTBOX_EXEC"

// killScript runs as a second exec to stop the processes of a first one,
// because Docker has no API to kill an exec. $1 is the exec's token, $2 the
// grace in tenths of a second between SIGTERM and SIGKILL. It finds the
// token in /proc/*/environ and also kills every process in the sessions
// those processes lead or belong to (a child that cleared its environment
// stays in its session; docker exec starts each command as a session
// leader). The scan uses shell builtins only, so it keeps working when a
// fork bomb has used up the pids limit once it runs. It exits 0 when
// nothing is left, 1 when something survived.
const killScript = `t="` + execTokenVar + `=$1"; grace=$2; me=$$
sweep() {
  n=0; sids=" "
  for d in /proc/[0-9]*; do
    p=${d#/proc/}; [ "$p" = "$me" ] && continue
    m=0
    { while IFS= read -r -d '' kv; do [ "$kv" = "$t" ] && { m=1; break; }; done; } 2>/dev/null < "$d/environ"
    [ $m = 1 ] || continue
    { read -r st; } 2>/dev/null < "$d/stat" || continue
    st=${st##*) }; set -- $st
    [ "$1" = Z ] && continue
    n=$((n+1)); sids="$sids$4 "
    [ "$sig" != 0 ] && kill -$sig "$p" 2>/dev/null
  done
  [ "$n" = 0 ] && return
  for d in /proc/[0-9]*; do
    p=${d#/proc/}; [ "$p" = "$me" ] && continue
    { read -r st; } 2>/dev/null < "$d/stat" || continue
    st=${st##*) }; set -- $st
    [ "$1" = Z ] && continue
    case "$sids" in *" $4 "*) n=$((n+1)); [ "$sig" != 0 ] && kill -$sig "$p" 2>/dev/null;; esac
  done
}
sig=TERM; sweep; [ "$n" = 0 ] && exit 0
i=0; while [ $i -lt $grace ]; do sleep 0.1 2>/dev/null || i=$grace; sig=0; sweep; [ "$n" = 0 ] && exit 0; i=$((i+1)); done
i=0; while [ $i -lt 100 ]; do sig=KILL; sweep; [ "$n" = 0 ] && exit 0; i=$((i+1)); done
exit 1`

// dockerExec runs commands through the Docker exec API.
type dockerExec struct {
	api         execAPI
	containerID string
	user        string
	stopGrace   time.Duration
	callTimeout time.Duration
	logger      hclog.Logger
	// host, when set, stops processes from the host instead of by exec.
	host *hostKiller
	// stuck is called when the kill script cannot run (e.g. the pids limit
	// is exhausted); it stops the whole container.
	stuck func(ctx context.Context, reason string)
}

var _ commandRunner = (*dockerExec)(nil)

func (d *dockerExec) path() string { return PathDockerExec }

// stopReason is why a command was stopped before it ended by itself.
type stopReason int

const (
	stopNone stopReason = iota
	stopTimeout
	stopCancel
	stopOutput
	stopWriter
	stopStream
)

func (d *dockerExec) run(ctx context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
	start := time.Now()
	res := executor.ExecResult{Path: PathDockerExec, ExitCode: -1}
	token := randomID()
	env := append(append([]string(nil), cmd.Env...), execTokenVar+"="+token)

	callCtx, cancel := context.WithTimeout(ctx, d.callTimeout)
	created, err := d.api.ContainerExecCreate(callCtx, d.containerID, container.ExecOptions{
		User:         d.user,
		AttachStdin:  cmd.Stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
		Env:          env,
		WorkingDir:   cmd.Dir,
		Cmd:          cmd.Args,
	})
	cancel()
	if err != nil {
		return res, fmt.Errorf("exec %q: create: %w", cmd.Args[0], notRunning(err))
	}
	callCtx, cancel = context.WithTimeout(ctx, d.callTimeout)
	hj, err := d.api.ContainerExecAttach(callCtx, created.ID, container.ExecAttachOptions{})
	cancel()
	if err != nil {
		return res, fmt.Errorf("exec %q: attach: %w", cmd.Args[0], notRunning(err))
	}
	var closeOnce sync.Once
	closeConn := func() { closeOnce.Do(hj.Close) }
	defer closeConn()

	if cmd.Stdin != nil {
		go func() {
			_, _ = io.Copy(hj.Conn, cmd.Stdin)
			_ = hj.CloseWrite()
		}()
	}

	capHit := make(chan struct{})
	var capOnce sync.Once
	onCap := func() { capOnce.Do(func() { close(capHit) }) }
	stdout := &cappedWriter{w: cmd.Stdout, limit: cmd.MaxOutput, onCap: onCap}
	stderr := &cappedWriter{w: cmd.Stderr, limit: cmd.MaxOutput, onCap: onCap}
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(stdout, stderr, hj.Reader)
		copied <- err
	}()

	timer := time.NewTimer(cmd.Timeout)
	defer timer.Stop()
	reason := stopNone
	var copyErr error
	select {
	case copyErr = <-copied:
		switch {
		case errors.Is(copyErr, errOutputCap):
			reason = stopOutput
		case copyErr != nil && (stdout.werr != nil || stderr.werr != nil):
			reason = stopWriter
		case copyErr != nil:
			reason = stopStream
		}
	case <-capHit:
		reason = stopOutput
	case <-timer.C:
		reason = stopTimeout
	case <-ctx.Done():
		reason = stopCancel
	}
	if reason != stopNone {
		closeConn()
		d.kill(ctx, token)
		if copyErr == nil {
			copyErr = <-copied
		}
	}

	// The stream ends when the process exits; its exit code may lag a little.
	inspectCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.callTimeout)
	defer cancel()
	for i := 0; ; i++ {
		ins, err := d.api.ContainerExecInspect(inspectCtx, created.ID)
		if err != nil && reason != stopNone {
			// Stopping it may have taken the container with it (the
			// fallback kills a container whose exec cannot be stopped,
			// and AutoRemove deletes it): the status is lost, the reason
			// for the stop is what the caller needs.
			d.logger.Debug("exec status lost after stopping it", "container", shortID(d.containerID), "error", err)
			break
		}
		if err != nil {
			res.Duration = time.Since(start)
			return res, fmt.Errorf("exec %q: inspect: %w", cmd.Args[0], notRunning(err))
		}
		if !ins.Running {
			res.ExitCode, res.Signal = exitStatus(ins.ExitCode)
			break
		}
		if i >= 200 || reason != stopNone && i >= 20 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	res.Duration = time.Since(start)
	switch reason {
	case stopTimeout:
		return res, fmt.Errorf("exec %q: stopped after %v; raise Cmd.Timeout if it needs longer: %w", cmd.Args[0], cmd.Timeout, executor.ErrTimeout)
	case stopCancel:
		return res, fmt.Errorf("exec %q: %w", cmd.Args[0], ctx.Err())
	case stopOutput:
		return res, fmt.Errorf("exec %q: wrote more than %d bytes to stdout or stderr and was stopped; write large output to a file in the workspace or raise Cmd.MaxOutput: %w", cmd.Args[0], cmd.MaxOutput, executor.ErrOutputTooLarge)
	case stopWriter:
		return res, fmt.Errorf("exec %q: writing its output: %w", cmd.Args[0], errors.Join(stdout.werr, stderr.werr))
	case stopStream:
		return res, fmt.Errorf("exec %q: the output stream broke and the command was stopped: %w", cmd.Args[0], copyErr)
	}
	return res, nil
}

// kill stops every process of the exec marked with token: SIGTERM, then
// SIGKILL after the stop grace; from the host when it can (hostKiller),
// else with the kill script in a second exec, on a context the caller
// cannot cancel, bounded by the grace plus a margin. When the kill script
// cannot run at all, the whole container is stopped (stuck).
func (d *dockerExec) kill(ctx context.Context, token string) {
	if d.host != nil {
		err := d.host.kill(token)
		if err == nil {
			d.logger.Debug("exec stopped from the host", "container", shortID(d.containerID), "token", token)
			return
		}
		d.logger.Warn("cannot stop an exec from the host; trying by exec", "container", shortID(d.containerID), "error", err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.stopGrace+5*time.Second)
	defer cancel()
	tenths := strconv.FormatInt(int64(d.stopGrace/(100*time.Millisecond)), 10)
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		code, out, err := d.simple(ctx, []string{"/bin/sh", "-c", killScript, "agentbox-kill", token, tenths}, nil)
		if err == nil && code == 0 {
			d.logger.Debug("exec stopped", "container", shortID(d.containerID), "token", token)
			return
		}
		if errors.Is(err, executor.ErrNotRunning) {
			d.logger.Debug("exec not stopped: the container is gone", "container", shortID(d.containerID))
			return
		}
		if daemonDown(ctx, err) {
			// Neither the script nor a container kill can reach it; the
			// caller finds out what happened to the container.
			d.logger.Warn("exec not stopped: the Docker daemon does not answer", "container", shortID(d.containerID), "error", err)
			return
		}
		lastErr = err
		if err == nil {
			lastErr = fmt.Errorf("kill script exit %d: %s", code, bytes.TrimSpace(out))
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.logger.Warn("cannot stop an exec's processes; stopping the sandbox", "container", shortID(d.containerID), "error", lastErr)
	if d.stuck != nil {
		d.stuck(ctx, "an exec's processes could not be stopped")
	}
}

// simple runs a short command and returns its exit code and combined
// output (capped at 64 KiB).
func (d *dockerExec) simple(ctx context.Context, argv, env []string) (int, []byte, error) {
	created, err := d.api.ContainerExecCreate(ctx, d.containerID, container.ExecOptions{
		User: d.user, AttachStdout: true, AttachStderr: true, Env: env, Cmd: argv, WorkingDir: "/",
	})
	if err != nil {
		return -1, nil, notRunning(err)
	}
	hj, err := d.api.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return -1, nil, notRunning(err)
	}
	out := &cappedWriter{w: nil, limit: 64 << 10, keep: true}
	done := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(out, out, hj.Reader)
		done <- err
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	hj.Close()
	if err != nil {
		return -1, out.buf.Bytes(), err
	}
	for i := 0; i < 200; i++ {
		ins, err := d.api.ContainerExecInspect(ctx, created.ID)
		if err != nil {
			return -1, out.buf.Bytes(), err
		}
		if !ins.Running {
			return ins.ExitCode, out.buf.Bytes(), nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return -1, out.buf.Bytes(), errors.New("exec did not report its exit code")
}

// errOutputCap stops stdcopy when a stream passes its cap.
var errOutputCap = errors.New("output cap reached")

// cappedWriter forwards to w (nil: discard) until limit bytes, then fails
// with errOutputCap and calls onCap, so the gateway never buffers more than
// the cap. keep collects what it accepted in buf.
type cappedWriter struct {
	w     io.Writer
	limit int64
	n     int64
	onCap func()
	keep  bool
	buf   bytes.Buffer
	werr  error
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	over := false
	if rest := c.limit - c.n; int64(len(p)) > rest {
		p = p[:max(rest, 0)]
		over = true
	}
	c.n += int64(len(p))
	if c.keep {
		c.buf.Write(p)
	}
	if c.w != nil && len(p) > 0 {
		if _, err := c.w.Write(p); err != nil {
			c.werr = err
			return 0, err
		}
	}
	if over {
		if c.onCap != nil {
			c.onCap()
		}
		return len(p), errOutputCap
	}
	return len(p), nil
}

// signalNames names the signals a status of 128+n usually reports.
var signalNames = map[int]string{
	1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
	7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2",
	13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM",
}

// exitStatus maps Docker's exit code to ExecResult's: Docker reports a
// process killed by signal n as 128+n, as a shell does, so such codes
// become ExitCode -1 with the signal's name.
func exitStatus(code int) (int, string) {
	if name, ok := signalNames[code-128]; ok && code > 128 {
		return -1, name
	}
	return code, ""
}
