package runnerkit

import (
	"errors"
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/executor"
)

// IncompleteError is a runner's error for a CLI's output that ended
// before its result: the CLI crashed, was killed, or its output was cut.
// It matches its runner's sentinel (Sentinel) and unwraps to the read
// error that ended the output, if any. WithExit adds how the process
// ended.
type IncompleteError struct {
	// Sentinel is the runner's error this one matches (claude.ErrNoResult).
	Sentinel error
	// Lines is the number of output lines read.
	Lines int
	// LastType is the type of the last JSON line.
	LastType string
	// Cause is the read error that ended the output (nil at a clean EOF).
	Cause error
	// Exit is the process's exit status when the caller knows it.
	Exit *executor.ExecResult
	// Stderr is the end of the CLI's stderr when the caller has it.
	Stderr string
}

// Error implements error.
func (e *IncompleteError) Error() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%v (after %d lines", e.Sentinel, e.Lines)
	if e.LastType != "" {
		fmt.Fprintf(&sb, ", the last a %q", e.LastType)
	}
	sb.WriteString(")")
	if e.Exit != nil {
		if e.Exit.Signal != "" {
			fmt.Fprintf(&sb, "; it was killed by %s", e.Exit.Signal)
		} else {
			fmt.Fprintf(&sb, "; it exited with code %d", e.Exit.ExitCode)
		}
		if e.Exit.OOMKilled {
			sb.WriteString(" after running out of memory (raise the sandbox's memory limit)")
		}
	}
	if e.Cause != nil {
		fmt.Fprintf(&sb, ": %v", e.Cause)
	}
	if s := strings.TrimSpace(e.Stderr); s != "" {
		fmt.Fprintf(&sb, "; stderr: %s", s)
	} else {
		sb.WriteString("; see the CLI's stderr")
	}
	return sb.String()
}

// Is makes errors.Is(err, e.Sentinel) true.
func (e *IncompleteError) Is(target error) bool { return target != nil && target == e.Sentinel }

// Unwrap returns the read error that ended the output.
func (e *IncompleteError) Unwrap() error { return e.Cause }

// maxStderr is how much of the end of stderr WithExit keeps.
const maxStderr = 2 << 10

// WithExit adds the CLI's exit status and the end of its stderr to an
// error that reports a missing result (an *IncompleteError); other errors
// are returned unchanged.
func WithExit(err error, res executor.ExecResult, stderr string) error {
	var ie *IncompleteError
	if !errors.As(err, &ie) {
		return err
	}
	cp := *ie
	cp.Exit = &res
	if len(stderr) > maxStderr {
		stderr = "…" + stderr[len(stderr)-maxStderr:]
	}
	cp.Stderr = stderr
	return &cp
}
