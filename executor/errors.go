package executor

import "errors"

// Sentinel errors that callers branch on with errors.Is. Backends wrap them
// with context ("exec [sleep 9]: executor: timed out after 2s").
var (
	// ErrNotRunning: the sandbox was closed or its container is gone.
	ErrNotRunning = errors.New("executor: sandbox is not running")
	// ErrTimeout: a command or the sandbox itself passed its deadline.
	ErrTimeout = errors.New("executor: timed out")
	// ErrOutputTooLarge: a command wrote more than its output cap, or a file
	// is larger than the read cap.
	ErrOutputTooLarge = errors.New("executor: output too large")
	// ErrPathEscapes: a path names something outside the workspace (absolute
	// path other than /workspace/..., "..", a symlink, a NUL byte).
	ErrPathEscapes = errors.New("executor: path escapes the workspace")
	// ErrBusy: another request holds the chat's workspace and did not release
	// it within the lease wait.
	ErrBusy = errors.New("executor: chat is busy with another request")
	// ErrInvalid: the request itself is malformed (bad id, empty argv, ...).
	ErrInvalid = errors.New("executor: invalid argument")
	// ErrNotFound: the named file or directory does not exist.
	ErrNotFound = errors.New("executor: not found")
	// ErrSandboxGone: the sandbox's container went away while in use
	// (removed by an operator, killed, or the container runtime restarted or
	// stopped answering). It also matches ErrNotRunning. The sandbox cannot
	// be used again; a retried request gets a new one.
	ErrSandboxGone error = sandboxGone{}
	// ErrUnavailable: the container runtime (the Docker daemon) does not
	// answer, so no sandbox can start; retry once it is back.
	ErrUnavailable = errors.New("executor: the container runtime does not answer")
	// ErrNoSpace: the workspace passed its disk or inode quota (the sandbox
	// was stopped), or the host's disk is under the free-space floor so no
	// sandbox starts. Free space or raise sandbox.max_disk / max_inodes.
	ErrNoSpace = errors.New("executor: no space left for the workspace")
)

// sandboxGone is ErrSandboxGone: a refinement of ErrNotRunning.
type sandboxGone struct{}

func (sandboxGone) Error() string {
	return "executor: the sandbox's container went away (removed or the daemon restarted)"
}

func (sandboxGone) Is(target error) bool { return target == ErrNotRunning }
