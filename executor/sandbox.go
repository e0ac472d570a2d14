package executor

import (
	"context"
	"net"
	"time"
)

// ContainerWorkdir is where the chat's workspace is mounted in every sandbox.
const ContainerWorkdir = "/workspace"

// Spec describes the sandbox one request needs. Zero values take the
// defaults of Normalize's table, the same on every backend; limits are
// never "unlimited". The option that sets each field is named in the
// table (KeyMemory, ...).
type Spec struct {
	// UserID, ChatID and AssistantID identify the request; user and chat
	// select the workspace {data}/workspaces/{user}/chat-{chat}.
	UserID, ChatID, AssistantID string
	Image                       string
	// MemoryBytes is the memory limit (swap is set equal: no swap).
	MemoryBytes int64
	// CPUs is the CPU quota in cores (1.5 = one and a half cores).
	CPUs float64
	// PidsLimit caps processes in the container.
	PidsLimit int64
	// Timeout is the sandbox's whole life; past it the container is removed
	// even if the gateway is gone.
	Timeout time.Duration
	// Network is the Docker network mode; "none" unless the assistant
	// declares otherwise.
	Network string
	// Egress gives the agent a proxy to the host's egress allowlist: the
	// backend relays a loopback port to {HostDir}/egress.sock and sets
	// HTTP_PROXY, HTTPS_PROXY and NO_PROXY for it, while the container
	// keeps Network. The caller serves the proxy (package executor/egress).
	Egress bool
	// Runtime is the OCI runtime ("" for the daemon default, or "runsc").
	Runtime string
	// User is "uid:gid" inside the container; never root by default.
	User string
	// Env is the base environment of every command (KEY=VALUE).
	Env []string
	// ConfigHash identifies the effective sandbox options, for labels and to
	// never reuse a container made for other options.
	ConfigHash string
	// LeaseWait bounds how long Create waits for another request on the same
	// chat before failing with ErrBusy.
	LeaseWait time.Duration
	// DiskBytes and Inodes are the workspace's disk and inode quota (0: the
	// backend's default; never unlimited).
	DiskBytes int64
	Inodes    int64
	// IdleTTL, when positive, marks a session sandbox (assistant policy
	// "session"): its owner may keep the container between requests, with
	// the chat released, for up to IdleTTL of idleness. Backends label it
	// so; the container's life is still Timeout.
	IdleTTL time.Duration
}

// Sandbox is one running container over one chat's workspace, held by one
// request. The FS methods act on the workspace from the host.
type Sandbox interface {
	FS
	// ID is the backend's identifier (the container id for Docker).
	ID() string
	// Workdir is the workspace path inside the container.
	Workdir() string
	// Deadline is when the sandbox ends by itself (Spec.Timeout after its
	// start, or later for a sandbox taken from a pool).
	Deadline() time.Time
	// HostDir is the per-sandbox host directory mounted into the container
	// for the helper's sockets ("" when the backend has none).
	HostDir() string
	// Exec runs one command and waits for it.
	Exec(ctx context.Context, cmd *Cmd) (ExecResult, error)
	// Close removes the container and releases the chat's lease. It runs on
	// a context the caller cannot cancel, is safe to call more than once and
	// keeps the workspace.
	Close(ctx context.Context) error
}

// Executor creates sandboxes.
type Executor interface {
	// Create leases the chat, prepares its workspace, starts the container
	// and returns once it is ready to run commands.
	Create(ctx context.Context, spec Spec) (Sandbox, error)
	// Capabilities says what the backend can honour; it does not change
	// after the executor is made.
	Capabilities() Capabilities
	// Close stops background work (reconciler, retention) and releases the
	// backend; sandboxes still open are closed.
	Close() error
}

// HostListener is implemented by sandboxes that share no directory with
// the host (Capabilities.HostListener: HostDir is ""), whose helper still
// reaches host services (the model proxy, the egress proxy, the MCP
// endpoint) through the backend (the Kubernetes backend's reverse relay
// over its port forward).
// ListenHost returns the host end for the host socket name ("model.sock",
// "egress.sock", "mcp.sock"); closing it stops the relay.
type HostListener interface {
	ListenHost(ctx context.Context, name string) (net.Listener, error)
}
