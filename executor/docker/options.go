package docker

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
)

// Defaults of Options and of the container baseline. A Spec's zero limits
// take executor's table (executor.Normalize, the one source the config
// package uses too); these are the backend's own, except the retention's,
// which are the table's. None of them is "unlimited".
const (
	DefaultReconcileInterval = time.Minute
	DefaultRetention         = executor.DefaultRetention
	DefaultRetentionInterval = executor.DefaultRetentionInterval
	DefaultStopGrace         = 2 * time.Second
	DefaultCallTimeout       = 30 * time.Second
	DefaultExecTimeout       = 10 * time.Minute
	DefaultNofile            = 4096
	DefaultTmpfsBytes        = 256 << 20
	DefaultHome              = "/home/agent"
	DefaultModelPort         = 7000
	// DefaultEgressPort is the loopback port of the egress relay.
	DefaultEgressPort = 7001
)

// Fixed paths inside the container.
const (
	// ContainerHostDir is where the per-sandbox host directory is mounted.
	ContainerHostDir = "/run/agentbox"
	// ContainerHelperPath is where Options.HelperBinary is mounted.
	ContainerHelperPath = "/opt/agentbox/bin/agentbox-helper"
	// ContainerToolsPath is Options.HelperBinary mounted again as abx, the
	// agent's tools CLI (the helper's argv[0] decides). Runners put
	// ContainerBinDir first on PATH.
	ContainerToolsPath = "/opt/agentbox/bin/abx"
	// ContainerBinDir holds the mounted helper binaries.
	ContainerBinDir = "/opt/agentbox/bin"
)

// Options configures an Executor. Only DataDir is required.
type Options struct {
	// DataDir holds ws/ (the workspaces), workspace.key (the secret that
	// names them: back it up with them), sandboxes/, locks/, instances/ and
	// with QuotaLoop quota/. It must be an absolute path the Docker daemon
	// can bind-mount. Containers see its path within its filesystem in
	// their mountinfo unless it is a filesystem of its own (see the
	// package doc).
	DataDir string
	// Logger receives lifecycle steps at debug and failures at warn/error;
	// nil means hclog.NewNullLogger().
	Logger hclog.Logger
	// InstanceID names this executor in container labels; "" picks a random
	// one. Two live executors must not share an id.
	InstanceID string
	// DockerHost overrides DOCKER_HOST ("unix:///var/run/docker.sock").
	DockerHost string
	// Image is used when Spec.Image is empty.
	Image string
	// ReconcileInterval is how often orphaned containers are looked for;
	// 0 means DefaultReconcileInterval, negative disables the timer (the
	// reconciler still runs once in New).
	ReconcileInterval time.Duration
	// Retention is how long an unused workspace is kept; 0 means
	// DefaultRetention. RetentionInterval is how often the sweep runs; 0
	// means DefaultRetentionInterval, negative disables the sweep.
	Retention         time.Duration
	RetentionInterval time.Duration
	// DefaultLeaseWait is used when Spec.LeaseWait is 0
	// (executor.DefaultLeaseWait when 0).
	DefaultLeaseWait time.Duration
	// StopGrace is how long a command gets between SIGTERM and SIGKILL when
	// it is stopped (timeout, cancel, output cap); 0 means DefaultStopGrace.
	StopGrace time.Duration
	// CallTimeout bounds each short Docker call (create, start, inspect,
	// remove, list); 0 means DefaultCallTimeout. Attach and exec streams are
	// bounded by the command's own timeout instead.
	CallTimeout time.Duration
	// ExecTimeout and MaxOutput are the defaults of Cmd.Timeout and
	// Cmd.MaxOutput.
	ExecTimeout time.Duration
	MaxOutput   int64
	// TmpfsBytes caps each of the tmpfs mounts (/tmp and HOME).
	TmpfsBytes int64
	// Home is the sandbox user's HOME inside the container (a tmpfs).
	Home string
	// HelperBinary is an optional host path of the static agentbox helper,
	// bind-mounted read-only at ContainerHelperPath.
	HelperBinary string
	// UseImageHelper runs the helper baked into the image at
	// ImageHelperPath. With it, or with HelperBinary, the helper is the
	// container's main process and runs every command (ExecResult.Path
	// "helper"); without either, commands go through docker exec.
	UseImageHelper bool
	// ModelPort is the loopback port inside the container where the helper
	// relays model traffic to {HostDir}/model.sock; 0 means DefaultModelPort,
	// negative turns the relay off. Only used with the helper.
	ModelPort int
	// EgressPort is the loopback port inside the container where the helper
	// relays a sandbox's egress (Spec.Egress) to {HostDir}/egress.sock; 0
	// means DefaultEgressPort, negative turns egress off (a Spec asking for
	// it is refused). Only used with the helper.
	EgressPort int
	// Workspace configures the host-side file API (UID/GID are taken from
	// the sandbox user).
	Workspace executor.WorkspaceOptions
	// Quota picks how each workspace's disk and inode quota (Spec.DiskBytes,
	// Spec.Inodes) is enforced: QuotaAuto (the default: QuotaWatchdog),
	// QuotaWatchdog or QuotaLoop (New fails when it cannot work here). New
	// logs the mode in force and its bound.
	Quota QuotaMode
	// QuotaInterval is the longest pause between two measurements of a
	// running sandbox's workspace by the watchdog (it measures more often
	// while the workspace is small or grows; see quota_watchdog.go); 0
	// means DefaultQuotaInterval.
	QuotaInterval time.Duration
	// MinFreeBytes is the floor of free space on DataDir's filesystem under
	// which Create refuses a sandbox (executor.ErrNoSpace); 0 means
	// DefaultMinFreeBytes, negative turns the check off.
	MinFreeBytes int64
	// Pool is how many started containers to keep ready, per container
	// configuration, for the first request of new chats; 0 turns the pool
	// off. It needs the helper and a gateway that can bind-mount in the
	// Docker daemon's mount namespace (root on the daemon's host); New
	// fails otherwise. See pool.go for how a chat's workspace reaches a
	// started container.
	Pool int
	// PoolIdle is how long a pooled container waits unused before it is
	// removed; 0 means DefaultPoolIdle.
	PoolIdle time.Duration
	// DryRun makes the reconciler and the retention sweep log what they
	// would remove without removing it.
	DryRun bool
}

// withDefaults validates o and fills in defaults.
func (o Options) withDefaults() (Options, error) {
	if o.DataDir == "" {
		return o, fmt.Errorf("docker executor: Options.DataDir is empty; set it to an absolute directory for workspaces: %w", executor.ErrInvalid)
	}
	if !filepath.IsAbs(o.DataDir) {
		return o, fmt.Errorf("docker executor: Options.DataDir %q is relative; the daemon bind-mounts from it, so give an absolute path: %w", o.DataDir, executor.ErrInvalid)
	}
	o.DataDir = filepath.Clean(o.DataDir)
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.InstanceID == "" {
		o.InstanceID = randomID()
	} else if err := executor.ValidateID("instance id", o.InstanceID); err != nil {
		return o, fmt.Errorf("docker executor: %w", err)
	}
	if o.HelperBinary != "" {
		if !filepath.IsAbs(o.HelperBinary) {
			return o, fmt.Errorf("docker executor: Options.HelperBinary %q is relative; give an absolute host path: %w", o.HelperBinary, executor.ErrInvalid)
		}
		fi, err := os.Stat(o.HelperBinary)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return o, fmt.Errorf("docker executor: Options.HelperBinary %s is not an executable file (build it with `make helper`): %w", o.HelperBinary, executor.ErrInvalid)
		}
	}
	setDuration(&o.ReconcileInterval, DefaultReconcileInterval)
	setDuration(&o.Retention, DefaultRetention)
	setDuration(&o.RetentionInterval, DefaultRetentionInterval)
	setDuration(&o.DefaultLeaseWait, executor.DefaultLeaseWait)
	setDuration(&o.StopGrace, DefaultStopGrace)
	setDuration(&o.CallTimeout, DefaultCallTimeout)
	setDuration(&o.ExecTimeout, DefaultExecTimeout)
	switch o.Quota {
	case QuotaAuto, QuotaWatchdog, QuotaLoop:
	default:
		return o, fmt.Errorf("docker executor: Options.Quota %q is not a quota mode; use \"\" (the default, %s), %q or %q: %w", o.Quota, QuotaWatchdog, QuotaWatchdog, QuotaLoop, executor.ErrInvalid)
	}
	setDuration(&o.QuotaInterval, DefaultQuotaInterval)
	if o.QuotaInterval < 0 {
		return o, fmt.Errorf("docker executor: Options.QuotaInterval %v is negative: %w", o.QuotaInterval, executor.ErrInvalid)
	}
	idle, err := executor.PoolIdle(o.Pool, o.PoolIdle)
	if err != nil {
		return o, fmt.Errorf("docker executor: %w", err)
	}
	o.PoolIdle = idle
	if o.MinFreeBytes == 0 {
		o.MinFreeBytes = DefaultMinFreeBytes
	}
	if o.ModelPort == 0 {
		o.ModelPort = DefaultModelPort
	}
	if o.ModelPort > 65535 {
		return o, fmt.Errorf("docker executor: Options.ModelPort %d is not a port: %w", o.ModelPort, executor.ErrInvalid)
	}
	if o.EgressPort == 0 {
		o.EgressPort = DefaultEgressPort
	}
	if o.EgressPort > 65535 || (o.EgressPort > 0 && o.EgressPort == o.ModelPort) {
		return o, fmt.Errorf("docker executor: Options.EgressPort %d is not a port apart from ModelPort: %w", o.EgressPort, executor.ErrInvalid)
	}
	if o.MaxOutput <= 0 {
		o.MaxOutput = executor.DefaultMaxOutput
	}
	if o.TmpfsBytes <= 0 {
		o.TmpfsBytes = DefaultTmpfsBytes
	}
	if o.Home == "" {
		o.Home = DefaultHome
	}
	if !filepath.IsAbs(o.Home) || filepath.Clean(o.Home) == "/" {
		return o, fmt.Errorf("docker executor: Options.Home %q must be an absolute directory other than /: %w", o.Home, executor.ErrInvalid)
	}
	return o, nil
}

func setDuration(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}
