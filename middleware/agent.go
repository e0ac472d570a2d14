package middleware

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/jsonl"
)

// errParserDone closes the agent's stdout pipe once the parser has what it
// needs, so that a CLI still writing gets an error instead of blocking.
var errParserDone = errors.New("middleware: the parser stopped reading")

// maxStderr is how much of the end of the agent's stderr is kept for logs.
const maxStderr = 8 << 10

// agent runs the agent CLI in the sandbox and parses its stdout into events
// as it arrives. It returns the completion (also when the CLI reported an
// error, with an *Error beside it) or an *Error.
func (r *run) agent(ctx context.Context, runner executor.Runner, messages []executor.Message) (*executor.Completion, error) {
	t0 := time.Now()
	defer func() { r.t.Agent = time.Since(t0) }()

	rr := r.runRequest()
	rr.Messages = messages
	r.messages = messages
	if r.route != nil {
		rr.ModelBaseURL, rr.APIKey = r.route.BaseURL(), r.route.Token()
	}
	r.session = r.openSession(ctx, runner, &rr)
	inv, err := runner.Invocation(rr)
	if err != nil {
		return nil, Errorf(KindConfig, err, "the assistant %q cannot build its %s invocation: %v", r.a.ID, runner.Name(), err)
	}
	proc := r.usePre(inv)
	if proc == nil {
		if err := r.writeFiles(ctx, inv.Files, "the runner's file"); err != nil {
			return nil, err
		}
		cmdTimeout := time.Duration(0)
		if dl, ok := ctx.Deadline(); ok {
			// The command's own bound, so that a backend default shorter
			// than the sandbox timeout does not cut the run.
			cmdTimeout = time.Until(dl)
		}
		var stdin io.Reader
		if len(inv.Stdin) > 0 {
			stdin = bytes.NewReader(inv.Stdin)
		}
		proc = r.startProc(ctx, inv, stdin, cmdTimeout)
	}

	comp, exit, stderr, perr := r.parseProc(ctx, runner, proc)
	if perr != nil {
		fail := r.failure(ctx, perr, r.agentError(perr, exit))
		if fail.Kind != KindCanceled {
			// The outcome line has the error; this one adds what only
			// the agent phase knows. A cancel needs neither: the
			// CLI's cut-off output is its consequence, not a fault.
			r.log.Warn("the agent failed", "error", perr, "exit_code", exit.res.ExitCode, "exec_error", exit.err, "stderr", stderr)
		}
		return nil, fail
	}
	if comp.IsError && comp.FinishReason != executor.FinishMaxTurns {
		msg := "the agent reported an error"
		if len(comp.Errors) > 0 {
			msg += ": " + strings.Join(comp.Errors, "; ")
		}
		if comp.APIErrorStatus != 0 {
			msg += fmt.Sprintf(" (the model API answered %d)", comp.APIErrorStatus)
		}
		return &comp, Errorf(KindAgent, nil, "%s", msg)
	}
	return &comp, nil
}

// execOutcome is how the agent's process ended.
type execOutcome struct {
	res executor.ExecResult
	err error
}

// runRequest is the runner's request of this run without its messages
// and session: the assistant's template with the environment summary, the
// sandbox's paths and the direct model's endpoint.
func (r *run) runRequest() executor.RunRequest {
	rr := r.a.Sandbox.Run
	rr.SystemPrompt = withEnvironment(rr.SystemPrompt, r.environment)
	rr.Messages = nil
	rr.Workdir = r.sb.Workdir()
	rr.Home = r.home()
	rr.CPUs = r.a.Sandbox.Spec.CPUs
	if r.a.Sandbox.DirectModel {
		rr.ModelBaseURL, rr.APIKey = r.a.Sandbox.Connector.Upstream, r.a.Sandbox.Connector.Key
	}
	return rr
}

// agentProc is the agent CLI's process in the sandbox, its stdout piped.
type agentProc struct {
	stdout *io.PipeReader
	// stdin is the pipe to a pre-started CLI's stdin (nil otherwise).
	stdin  *io.PipeWriter
	stderr *tailBuffer
	done   chan execOutcome
	cancel context.CancelFunc
}

// startProc starts inv in the sandbox on a context of its own, with ctx's
// values but not its end: a pre-started CLI outlives the request that
// started it, and a CLI that wrote its result exits after the response
// (awaitExit). While its output is parsed, parseProc cancels it when the
// request's context ends; timeout bounds it on the executor's side.
func (r *run) startProc(ctx context.Context, inv executor.Invocation, stdin io.Reader, timeout time.Duration) *agentProc {
	pr, pw := io.Pipe()
	execCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &agentProc{stdout: pr, stderr: &tailBuffer{max: maxStderr}, done: make(chan execOutcome, 1), cancel: cancel}
	cmd := &executor.Cmd{Args: inv.Args, Env: inv.Env, Stdin: stdin, Stdout: pw, Stderr: p.stderr, MaxOutput: r.a.Sandbox.MaxOutput, Timeout: max(timeout, 0)}
	sb := r.sb
	go func() {
		res, err := sb.Exec(execCtx, cmd)
		switch {
		case err != nil:
			pw.CloseWithError(err)
		case res.ExitCode != 0:
			pw.CloseWithError(fmt.Errorf("the agent exited with code %d", res.ExitCode))
		default:
			_ = pw.Close()
		}
		p.done <- execOutcome{res, err}
	}()
	return p
}

// parseProc parses the process's stdout with the runner's parser. When
// the parser stops early (bad stream, client gone) or ctx ends, the process
// is canceled and waited for; after a good final result it returns at
// once, and r.exited waits for the process, which gets ExitGrace to exit
// by itself.
func (r *run) parseProc(ctx context.Context, runner executor.Runner, p *agentProc) (executor.Completion, execOutcome, string, error) {
	var stdout io.Reader = p.stdout
	if d := r.a.Sandbox.StallTimeout; d > 0 {
		var wd *jsonl.Watchdog
		ctx, wd = jsonl.WithWatchdog(ctx, d)
		defer wd.Stop()
		stdout = wd.Reader(p.stdout)
	}
	stop := context.AfterFunc(ctx, p.cancel)
	defer stop()
	comp, perr := runner.Parse(ctx, stdout, r.send)
	if perr != nil && errors.Is(context.Cause(ctx), jsonl.ErrStalled) {
		perr = fmt.Errorf("%w (%w)", perr, context.Cause(ctx))
	}
	if perr == nil {
		r.exited = r.awaitExit(p)
		return comp, execOutcome{}, "", nil
	}
	p.cancel()
	_ = p.stdout.CloseWithError(errParserDone)
	return comp, r.waitExec(p.done), p.stderr.String(), perr
}

// awaitExit returns a function that waits for the CLI to exit by itself
// after its final result, killing it once ExitGrace has passed since the
// result; what it writes meanwhile is read and dropped.
func (r *run) awaitExit(p *agentProc) func() {
	deadline := time.Now().Add(r.o.opts.ExitGrace)
	go func() { _, _ = io.Copy(io.Discard, p.stdout) }()
	return sync.OnceFunc(func() {
		defer p.cancel()
		grace := time.NewTimer(time.Until(deadline))
		defer grace.Stop()
		var out execOutcome
		select {
		case out = <-p.done:
		case <-grace.C:
			r.log.Warn("the agent did not exit after its result; killing it", "grace", r.o.opts.ExitGrace)
			p.cancel()
			out = r.waitExec(p.done)
		}
		if out.err != nil || out.res.ExitCode != 0 {
			r.log.Debug("the agent exited after its result", "exit_code", out.res.ExitCode, "exec_error", out.err)
		}
	})
}

// waitExec waits for a canceled command, bounded by TeardownTimeout: a
// backend that does not honour the cancellation must not hold the request;
// the sandbox's Close ends the command.
func (r *run) waitExec(done <-chan execOutcome) execOutcome {
	t := time.NewTimer(r.o.opts.TeardownTimeout)
	defer t.Stop()
	select {
	case out := <-done:
		return out
	case <-t.C:
		r.log.Error("the agent's command did not stop after its cancellation; leaving it to the sandbox's teardown", "waited", r.o.opts.TeardownTimeout)
		return execOutcome{res: executor.ExecResult{ExitCode: -1}, err: fmt.Errorf("the command did not stop within %v of its cancellation", r.o.opts.TeardownTimeout)}
	}
}

// agentError classifies a failed parse by how the process ended.
func (r *run) agentError(perr error, out execOutcome) *Error {
	switch {
	case errors.Is(out.err, executor.ErrTimeout), errors.Is(perr, executor.ErrTimeout):
		return Errorf(KindTimeout, perr, "the agent passed its time limit")
	case errors.Is(perr, jsonl.ErrStalled), errors.Is(out.err, jsonl.ErrStalled):
		return Errorf(KindTimeout, perr, "the agent stopped producing output and was stopped")
	case errors.Is(out.err, executor.ErrNoSpace), errors.Is(perr, executor.ErrNoSpace):
		return Errorf(KindAgent, perr, "the agent filled the workspace past its disk or inode quota and was stopped; delete files in the workspace or raise sandbox.max_disk / max_inodes")
	case errors.Is(out.err, executor.ErrSandboxGone), errors.Is(perr, executor.ErrSandboxGone):
		return Errorf(KindSandboxGone, perr, "the sandbox's container went away during the run (removed, killed, or the container runtime restarted); the workspace is kept: send the request again")
	case errors.Is(out.err, executor.ErrOutputTooLarge):
		return Errorf(KindAgent, perr, "the agent wrote more output than the sandbox allows")
	case out.err != nil:
		return Errorf(KindAgent, perr, "the agent could not run in the sandbox")
	case out.res.OOMKilled:
		return Errorf(KindAgent, perr, "the agent ran out of memory (exit code %d); raise sandbox.max_memory", out.res.ExitCode)
	case out.res.ExitCode != 0:
		return Errorf(KindAgent, perr, "the agent failed with exit code %d before its final result", out.res.ExitCode)
	}
	return Errorf(KindAgent, perr, "the agent's output ended without a final result")
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

// Write implements io.Writer; it never fails.
func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
