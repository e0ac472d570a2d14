package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
)

// QuotaMode names how the disk and inode quota of a workspace is enforced.
type QuotaMode string

// Quota modes (Options.Quota).
//
// Why the watchdog is the default. A kernel bound on a workspace whose
// files stay plain files of the host is a project quota (ext4 or xfs
// mounted prjquota, a project id per workspace); this host's kernel (the
// CI's too) is built without CONFIG_QFMT_V2 and CONFIG_XFS_QUOTA (mounting
// an ext4 image made with -O quota,project with prjquota fails: "The
// kernel was not built with CONFIG_QUOTA and CONFIG_QFMT_V2"), so no test
// here could run it, and it is not built. btrfs qgroups bound bytes, not
// files, and need btrfs-progs, which is not installed. A loop image per workspace (QuotaLoop) is exact but holds the
// files inside the image: once no gateway has it mounted (after Close,
// after a reboot) the workspace path on the host is an empty directory to
// anyone reading workspaces there (backups, the gateway's own tools, the
// demo). So the default is the watchdog, with the kernel bounding each
// file (kernelLimits) and the watchdog the total, its overshoot measured
// by TestQuotaBounds.
const (
	// QuotaAuto is the default: QuotaWatchdog.
	QuotaAuto QuotaMode = ""
	// QuotaLoop gives each workspace its own ext4 filesystem image (sparse,
	// outside the workspace, under {data}/quota), loop-mounted at the
	// workspace path while a sandbox runs: the kernel answers ENOSPC inside
	// the container at the quota. It needs root, mkfs.ext4/e2fsck/resize2fs
	// and mount/losetup, loop devices, and the Docker daemon in the
	// gateway's mount namespace.
	QuotaLoop QuotaMode = "loop"
	// QuotaWatchdog caps every file of the sandbox at the disk quota
	// (RLIMIT_FSIZE, and fallocate past a file's size refused), measures
	// the workspace while a sandbox runs (quota_watchdog.go says how often)
	// and stops the sandbox when it is over quota; commands then fail with
	// executor.ErrNoSpace. What many files put past the quota is what a
	// writer puts there between two measurements.
	QuotaWatchdog QuotaMode = "watchdog"
)

// Quota minimums and defaults. A Spec's DiskBytes and Inodes take their
// defaults and bounds from executor's table (MinDiskBytes and MinInodes
// are the table's); negative values are refused, never "unlimited".
const (
	MinDiskBytes         = executor.MinDiskBytes
	MinInodes            = executor.MinInodes
	DefaultMinFreeBytes  = 1 << 30
	DefaultQuotaInterval = 2 * time.Second
)

// quotaDir is the host-only directory of workspace images under DataDir:
// quota/{name}.img, name being the workspace's (executor.WorkspaceLayout).
// No container mounts it.
const quotaDir = "quota"

// quotaEnforcer applies a workspace's quota for the life of one sandbox.
type quotaEnforcer interface {
	mode() QuotaMode
	// limit adds the kernel's part of the quota to a container's
	// configuration (kernelLimits).
	limit(p plan, hc *container.HostConfig)
	// attach enforces p's quota on the workspace at wsDir (the caller holds
	// the chat's lease and flock); ctl acts on the sandbox.
	attach(ctx context.Context, p plan, wsDir string, ctl sandboxControl) (quotaHandle, error)
	// drop removes what the chat's quota left on the host (retention).
	drop(user, chat string) error
	// beforePrepare readies the chat for executor.WorkspaceLayout.Prepare,
	// which may move a legacy workspace (the caller holds the chat).
	beforePrepare(user, chat string) error
}

// sandboxControl is what a quota watchdog may do to the sandbox it
// watches, from its own goroutine. Both do nothing before the container
// runs.
type sandboxControl struct {
	// over stops the sandbox, its workspace over quota (called once).
	over func(error)
	// freeze pauses every process of the sandbox while the workspace is
	// measured; thaw resumes them. ok is false when it could not.
	freeze func() (thaw func(), ok bool)
}

// quotaHandle is one attached quota.
type quotaHandle interface {
	// err is the quota error that stopped the sandbox, or nil.
	err() error
	// release undoes attach; safe to call more than once.
	release() error
}

// newQuota picks the enforcer for o.Quota and logs, once, the mode in
// force and its bound.
func newQuota(o Options, root *os.Root, layout *executor.WorkspaceLayout, logger hclog.Logger) (quotaEnforcer, error) {
	switch o.Quota {
	case QuotaWatchdog, QuotaAuto:
		logger.Info("workspace quota: watchdog",
			"bound", fmt.Sprintf("no file past max_disk (RLIMIT_FSIZE, fallocate past a file's size refused); the workspace's filesystem read every %v, the workspace walked as it nears a quota (at least every %v) and a sandbox over max_disk or max_inodes stopped, frozen during long walks: it may pass them by what it writes in %v and a short walk", minQuotaPause, o.QuotaInterval, minQuotaPause),
			"kernel_enforced_total", `Options.Quota "loop" (root, e2fsprogs, loop devices; files visible on the host only while mounted)`)
		return &watchdogQuota{interval: o.QuotaInterval, logger: logger}, nil
	case QuotaLoop:
	default:
		return nil, fmt.Errorf("docker executor: Options.Quota %q is not a quota mode: %w", o.Quota, executor.ErrInvalid) // withDefaults refused it already
	}
	l := &loopQuota{dataDir: o.DataDir, root: root, layout: layout, logger: logger}
	if err := l.probe(); err != nil {
		return nil, fmt.Errorf("docker executor: Options.Quota is %q but loop-mounted workspace images do not work here; %w; or leave Options.Quota empty for the watchdog: %w", QuotaLoop, err, executor.ErrInvalid)
	}
	logger.Info("workspace quota: loop-mounted ext4 image per workspace",
		"bound", "the kernel's: writes past max_disk and files past max_inodes fail with \"No space left on device\"",
		"images", filepath.Join(o.DataDir, quotaDir))
	return l, nil
}

// checkFreeSpace refuses a sandbox when the data directory's filesystem
// has less than floor bytes free (floor < 0: no check).
func checkFreeSpace(dataDir string, floor int64) error {
	if floor < 0 {
		return nil
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dataDir, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dataDir, err)
	}
	free := int64(st.Bavail) * st.Bsize //nolint:gosec // block counts fit int64
	if free < floor {
		return fmt.Errorf("the data directory %s has %s free, under the floor of %s; free disk space there or lower Options.MinFreeBytes: %w",
			dataDir, executor.FormatBytes(free), executor.FormatBytes(floor), executor.ErrNoSpace)
	}
	return nil
}

// errNotRoot is why loop images need root.
var errNotRoot = errors.New("the gateway does not run as root (mount and losetup need it)")

// quotaErr is the quota error that stopped s, or nil.
func (s *Sandbox) quotaErr() error {
	if s.quota == nil {
		return nil
	}
	return s.quota.err()
}

// releaseQuota undoes the quota's attach (unmounts the image), after the
// container is gone.
func (s *Sandbox) releaseQuota() error {
	if s.quota == nil {
		return nil
	}
	return s.quota.release()
}
