package local

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
)

// Defaults of Options. A Spec's zero limits take executor's table
// (executor.Normalize), as on every backend; DefaultLeaseWait,
// DefaultMaxOutput and the sandbox user's ids are the table's.
const (
	DefaultLeaseWait    = executor.DefaultLeaseWait
	DefaultStopGrace    = 2 * time.Second
	DefaultExecTimeout  = 10 * time.Minute
	DefaultMaxOutput    = executor.DefaultMaxOutput
	DefaultNofile       = 4096
	DefaultTmpfsBytes   = 256 << 20
	DefaultStartTimeout = 30 * time.Second
	DefaultModelPort    = 7000
	// DefaultUser, DefaultUID and DefaultGID are the sandbox's ids on the
	// host as well as inside: the user namespace maps the one id to itself,
	// so files the agent writes in the workspace belong to uid 100000, as
	// with executor/docker, and never to the gateway's user.
	DefaultUser = executor.DefaultUser
	DefaultUID  = executor.DefaultUID
	DefaultGID  = executor.DefaultGID
	DefaultHome = "/home/agent"
)

// Fixed paths inside the sandbox, the same as executor/docker's.
const (
	ContainerHostDir    = "/run/agentbox"
	ContainerHelperPath = "/opt/agentbox/bin/agentbox-helper"
	ContainerToolsPath  = "/opt/agentbox/bin/abx"
	ContainerBinDir     = "/opt/agentbox/bin"
)

// CgroupMode picks how memory, CPU and process limits are enforced.
type CgroupMode int

const (
	// CgroupAuto uses a cgroup per sandbox when the cgroup filesystem is
	// writable (v1 memory, cpu and pids controllers, or v2), and otherwise
	// runs with rlimits only; New logs which limits apply.
	CgroupAuto CgroupMode = iota
	// CgroupRequire makes New fail when no writable cgroup is found.
	CgroupRequire
	// CgroupOff never uses cgroups (rlimits only).
	CgroupOff
)

// Options configures an Executor. DataDir and HelperBinary are required.
type Options struct {
	// DataDir holds workspaces/, sandboxes/ and locks/, laid out as
	// executor/docker lays them out, so that the two modes can take turns on
	// one data directory.
	DataDir string
	// HelperBinary is the host path of the static agentbox helper (`make
	// helper`). It is the sandbox's first process, mounted read-only at
	// ContainerHelperPath and ContainerToolsPath.
	HelperBinary string
	// Bwrap is the bubblewrap binary; "" searches PATH for bwrap.
	Bwrap string
	// Commands are the programs that must be on the host's PATH for the
	// assistants to run (the agent CLIs); nil means {"claude"}, an empty
	// non-nil slice checks none.
	Commands []string
	// ReadOnlyPaths are host paths shown read-only at the same path in every
	// sandbox, besides /usr, /etc and the /bin, /lib style links (e.g. /opt/tool).
	ReadOnlyPaths []string
	// Logger receives lifecycle steps at debug and failures at warn/error;
	// nil means hclog.NewNullLogger().
	Logger hclog.Logger
	// DefaultLeaseWait is used when Spec.LeaseWait is 0.
	DefaultLeaseWait time.Duration
	// StopGrace is the SIGTERM→SIGKILL delay of a stopped command.
	StopGrace time.Duration
	// StartTimeout bounds the wait for the helper's first answer.
	StartTimeout time.Duration
	// ExecTimeout and MaxOutput are the defaults of Cmd.Timeout and
	// Cmd.MaxOutput.
	ExecTimeout time.Duration
	MaxOutput   int64
	// TmpfsBytes caps each of the tmpfs mounts (/tmp and HOME).
	TmpfsBytes int64
	// Home is the sandbox user's HOME (a tmpfs).
	Home string
	// ModelPort is the loopback port inside the sandbox where the helper
	// relays model traffic to {HostDir}/model.sock; 0 means
	// DefaultModelPort, negative turns the relay off.
	ModelPort int
	// Cgroups picks how memory, CPU and pids limits are enforced.
	Cgroups CgroupMode
	// CgroupRoot is the cgroup filesystem's mount point; "" means
	// /sys/fs/cgroup.
	CgroupRoot string
	// Workspace configures the host-side file API (UID/GID are the
	// sandbox user's).
	Workspace executor.WorkspaceOptions
}

// withDefaults validates o and fills in defaults.
func (o Options) withDefaults() (Options, error) {
	if o.DataDir == "" {
		return o, fmt.Errorf("local executor: Options.DataDir is empty; set it to an absolute directory for workspaces: %w", executor.ErrInvalid)
	}
	if !filepath.IsAbs(o.DataDir) {
		return o, fmt.Errorf("local executor: Options.DataDir %q is relative; give an absolute path: %w", o.DataDir, executor.ErrInvalid)
	}
	o.DataDir = filepath.Clean(o.DataDir)
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Commands == nil {
		o.Commands = []string{"claude"}
	}
	for _, p := range o.ReadOnlyPaths {
		if !filepath.IsAbs(p) || filepath.Clean(p) == "/" {
			return o, fmt.Errorf("local executor: Options.ReadOnlyPaths entry %q must be an absolute path other than /: %w", p, executor.ErrInvalid)
		}
	}
	set := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	set(&o.DefaultLeaseWait, DefaultLeaseWait)
	set(&o.StopGrace, DefaultStopGrace)
	set(&o.StartTimeout, DefaultStartTimeout)
	set(&o.ExecTimeout, DefaultExecTimeout)
	if o.MaxOutput <= 0 {
		o.MaxOutput = DefaultMaxOutput
	}
	if o.TmpfsBytes <= 0 {
		o.TmpfsBytes = DefaultTmpfsBytes
	}
	if o.Home == "" {
		o.Home = DefaultHome
	}
	if !filepath.IsAbs(o.Home) || filepath.Clean(o.Home) == "/" {
		return o, fmt.Errorf("local executor: Options.Home %q must be an absolute directory other than /: %w", o.Home, executor.ErrInvalid)
	}
	if o.ModelPort == 0 {
		o.ModelPort = DefaultModelPort
	}
	if o.ModelPort > 65535 {
		return o, fmt.Errorf("local executor: Options.ModelPort %d is not a port: %w", o.ModelPort, executor.ErrInvalid)
	}
	if o.CgroupRoot == "" {
		o.CgroupRoot = "/sys/fs/cgroup"
	}
	if _, err := os.Stat(o.DataDir); err != nil {
		if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
			return o, fmt.Errorf("local executor: create data directory %s: %w", o.DataDir, err)
		}
	}
	return o, nil
}
