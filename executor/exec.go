package executor

import (
	"io"
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
