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
)
