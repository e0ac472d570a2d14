package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// Sandbox is an assistant's effective sandbox options: what package.yao
// says, with every default applied (see REFERENCE.md).
type Sandbox struct {
	// Command is the agent CLI: "claude" or "cursor".
	Command string `json:"command"`
	// Image is the Docker image with the CLI.
	Image string `json:"image"`
	// MemoryBytes is the memory limit (max_memory).
	MemoryBytes int64 `json:"memory_bytes"`
	// DiskBytes and Inodes are the workspace's disk and inode quota
	// (max_disk, max_inodes).
	DiskBytes int64 `json:"disk_bytes"`
	Inodes    int64 `json:"inodes"`
	// CPUs is the CPU quota in cores (max_cpu).
	CPUs float64 `json:"cpus"`
	// PidsLimit caps processes (pids).
	PidsLimit int64 `json:"pids"`
	// Timeout is the sandbox's whole life per request.
	Timeout time.Duration `json:"timeout"`
	// Network is the Docker network mode ("none" by default).
	Network string `json:"network"`
	// Runtime is the OCI runtime ("" for the daemon's default).
	Runtime string `json:"runtime"`
	// User is the numeric "uid:gid" the agent runs as.
	User string `json:"user"`
	// Policy is PolicyRequest or PolicySession; IdleTTL applies to the latter.
	Policy  string        `json:"policy"`
	IdleTTL time.Duration `json:"idle_ttl"`
	// HookTimeout is the budget of each JS hook call.
	HookTimeout time.Duration `json:"hook_timeout"`
	// StallTimeout stops a run whose CLI prints nothing for that long.
	StallTimeout time.Duration `json:"stall_timeout"`
	// LeaseWait bounds the wait for another request of the same chat.
	LeaseWait time.Duration `json:"lease_wait"`
	// Arguments are the command-specific arguments, typed by the command's
	// schema: int, string, bool or []string.
	Arguments map[string]any `json:"arguments"`
	// Budget overrides the per-request model budget (sandbox.budget).
	Budget Budget `json:"budget,omitzero"`
	// OmitEnvironmentPrompt leaves the environment summary out of the
	// agent's system prompt (sandbox.environment_prompt: false).
	OmitEnvironmentPrompt bool `json:"omit_environment_prompt,omitempty"`
	// Egress lists the hosts the sandbox's egress proxy lets the agent
	// reach (sandbox.egress); empty means no proxy and no way out.
	Egress []EgressRule `json:"egress,omitempty"`
	// Checkpoints configure the workspace's checkpoints
	// (sandbox.checkpoints): off, or their bounds.
	Checkpoints Checkpoints `json:"checkpoints,omitzero"`

	leaseWaitSet bool
}

// Checkpoints configure the checkpoints of an assistant's workspaces: a
// checkpoint per turn, put back when a chat's history returns to an
// earlier turn. The zero value is on, with the gateway's bounds.
type Checkpoints struct {
	// Off turns them off (sandbox.checkpoints: false).
	Off bool `json:"off,omitempty"`
	// Max and MaxBytes bound one workspace's checkpoints (count, disk);
	// 0 keeps the gateway's.
	Max      int   `json:"max,omitempty"`
	MaxBytes int64 `json:"max_bytes,omitempty"`
}

// Budget is an assistant's per-request model budget, enforced by the
// gateway's model proxy. A zero field is not unlimited: it takes the
// default the gateway derives from the assistant (see REFERENCE.md).
type Budget struct {
	// Calls caps the model calls of one request.
	Calls int `json:"calls,omitempty"`
	// Tokens caps the metered tokens (input, output and cache) of one
	// request.
	Tokens int64 `json:"tokens,omitempty"`
	// Wall caps the wall time of one request's model traffic.
	Wall time.Duration `json:"wall,omitempty"`
}

// MarshalJSON renders Wall as a Go duration string.
func (b Budget) MarshalJSON() ([]byte, error) {
	type plain Budget
	return json.Marshal(struct {
		plain
		Wall string `json:"wall,omitempty"`
	}{plain: plain(b), Wall: durationOrEmpty(b.Wall)})
}

// Spec returns the container settings for the executor; the request's
// identity and Env are the caller's to fill.
func (s *Sandbox) Spec() executor.Spec {
	return executor.Spec{
		Image:       s.Image,
		MemoryBytes: s.MemoryBytes,
		CPUs:        s.CPUs,
		PidsLimit:   s.PidsLimit,
		Timeout:     s.Timeout,
		Network:     s.Network,
		Runtime:     s.Runtime,
		User:        s.User,
		ConfigHash:  s.ConfigHash(),
		LeaseWait:   s.LeaseWait,
		DiskBytes:   s.DiskBytes,
		Inodes:      s.Inodes,
		Egress:      len(s.Egress) > 0,
	}
}

// ConfigHash is a stable hash (hex SHA-256) of the effective options,
// arguments included: equal options give equal hashes across processes
// and versions of the file (comments, key order and spelled-out defaults
// do not matter), so a container made for other options is never reused.
func (s *Sandbox) ConfigHash() string {
	// Marshal cannot fail: the fields are plain values and Arguments holds
	// only int, string, bool and []string.
	b, _ := json.Marshal(s)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// MarshalJSON renders durations as Go duration strings ("10m0s") so that
// the loaded value reads like the file.
func (s *Sandbox) MarshalJSON() ([]byte, error) {
	type plain Sandbox
	return json.Marshal(struct {
		*plain
		Timeout      string `json:"timeout"`
		IdleTTL      string `json:"idle_ttl,omitempty"`
		HookTimeout  string `json:"hook_timeout"`
		StallTimeout string `json:"stall_timeout"`
		LeaseWait    string `json:"lease_wait"`
	}{
		plain:        (*plain)(s),
		Timeout:      s.Timeout.String(),
		IdleTTL:      durationOrEmpty(s.IdleTTL),
		HookTimeout:  s.HookTimeout.String(),
		StallTimeout: s.StallTimeout.String(),
		LeaseWait:    s.LeaseWait.String(),
	})
}

func durationOrEmpty(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}
