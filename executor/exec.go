package executor

import (
	"fmt"
	"io"
	"path"
	"strings"
	"time"
)

// Cmd describes one command run inside a sandbox. It is shaped after
// os/exec.Cmd so Go callers find what they expect: Args[0] is the program,
// searched on the container's PATH.
type Cmd struct {
	// Args is argv; it must not be empty.
	Args []string
	// Env holds KEY=VALUE pairs added to the sandbox's base environment.
	Env []string
	// Dir is the working directory inside the container; "" means the
	// workspace (Sandbox.Workdir).
	Dir string
	// Stdin, Stdout and Stderr behave as in os/exec; nil Stdout/Stderr
	// discard the output (it still counts against MaxOutput).
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Timeout bounds the command; 0 means the backend default. When it
	// passes, the command and every process it started are killed and Exec
	// returns an error wrapping ErrTimeout.
	Timeout time.Duration
	// MaxOutput caps the bytes accepted from stdout and from stderr, each;
	// 0 means the backend default. Past it the command is killed and Exec
	// returns an error wrapping ErrOutputTooLarge.
	MaxOutput int64
}

// ExecResult is what a finished command left behind.
type ExecResult struct {
	// ExitCode is the process's exit status; -1 when it was killed by a
	// signal (Signal then names it).
	ExitCode int
	Signal   string
	// OOMKilled reports that the kernel's OOM killer acted in the sandbox
	// while the command ran, whatever the exit code says.
	OOMKilled bool
	Duration  time.Duration
	// Path names the mechanism used ("helper" or "docker-exec"), for logs.
	Path string
}

// Prepare checks c and returns a copy with a backend's defaults filled in:
// Env entries must be KEY=VALUE; Dir defaults to workdir and must be
// absolute; a negative Timeout or MaxOutput is refused and zero takes
// timeout and maxOutput; Timeout is then cut to what is left before the
// sandbox's deadline (zero: no deadline), and a deadline already passed
// is an error. Errors wrap ErrInvalid or ErrTimeout and say what to
// change. c.Args must not be empty.
func (c Cmd) Prepare(workdir string, timeout time.Duration, maxOutput int64, deadline time.Time) (Cmd, error) {
	for _, kv := range c.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return c, fmt.Errorf("exec %q: env entry %q is not KEY=VALUE: %w", c.Args[0], kv, ErrInvalid)
		}
	}
	if c.Dir == "" {
		c.Dir = workdir
	}
	if !path.IsAbs(c.Dir) {
		return c, fmt.Errorf("exec %q: Dir %q is relative; give an absolute path inside the sandbox such as %s: %w", c.Args[0], c.Dir, workdir, ErrInvalid)
	}
	if c.Timeout < 0 || c.MaxOutput < 0 {
		return c, fmt.Errorf("exec %q: negative Timeout or MaxOutput; use 0 for the default: %w", c.Args[0], ErrInvalid)
	}
	if c.Timeout == 0 {
		c.Timeout = timeout
	}
	if c.MaxOutput == 0 {
		c.MaxOutput = maxOutput
	}
	if !deadline.IsZero() {
		left := time.Until(deadline)
		if left <= 0 {
			return c, fmt.Errorf("exec %q: the sandbox passed its deadline; raise the sandbox timeout: %w", c.Args[0], ErrTimeout)
		}
		c.Timeout = min(c.Timeout, left)
	}
	return c, nil
}
