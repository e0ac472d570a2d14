package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// A container reads the root of each of its bind mounts in
// /proc/self/mountinfo: the source's path within its filesystem. The
// workspace and host dir names carry no ids (executor.WorkspaceLayout,
// random sandbox ids), but their paths start with the data directory's
// path within its filesystem. Where the gateway can mount (QuotaLoop: root,
// dockerd in the same mount namespace), nothing of it is left: a
// workspace is its own ext4 image (root "/") and the host dirs live on a
// tmpfs mounted at {data}/sandboxes (root "/{id}").

// sandboxesTmpfsOptions: the host dirs hold only the helper's sockets.
const sandboxesTmpfsOptions = "mode=0700,size=16m,nr_inodes=65536"

// maskedPaths are Docker's default masked paths plus the block devices'
// sysfs directory, where any container reads every loop device's backing
// file (a workspace image's host path, data directory included). Setting
// HostConfig.MaskedPaths replaces the daemon's defaults, hence the copy
// (moby oci/defaults.go).
var maskedPaths = []string{
	"/proc/asound",
	"/proc/acpi",
	"/proc/interrupts",
	"/proc/kcore",
	"/proc/keys",
	"/proc/latency_stats",
	"/proc/timer_list",
	"/proc/timer_stats",
	"/proc/sched_debug",
	"/proc/scsi",
	"/sys/firmware",
	"/sys/devices/virtual/powercap",
	"/sys/devices/virtual/block",
}

// mountSandboxesTmpfs mounts a tmpfs at {data}/sandboxes unless one is
// there already (another gateway on this data directory made it), and
// reports whether it mounted it.
func (e *Executor) mountSandboxesTmpfs() (bool, error) {
	dir := filepath.Join(e.o.DataDir, sandboxesDir)
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false, err
	}
	if mounted, err := isMountPoint(real); err != nil || mounted {
		return false, err
	}
	// Host dirs already there belong to live sandboxes of a gateway that
	// does not mount one (an older version): hiding them would cut it off.
	if n, err := dirEntries(real); err != nil || n > 0 {
		return false, errors.Join(err, fmt.Errorf("%s holds %d host dirs of running sandboxes; the tmpfs is mounted once it is empty (restart when they are gone)", real, n))
	}
	if err := syscall.Mount("tmpfs", real, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, sandboxesTmpfsOptions); err != nil {
		return false, fmt.Errorf("mount a tmpfs for the host dirs at %s: %w", real, err)
	}
	e.logger.Debug("host dirs on a tmpfs, so that containers see no data directory path", "dir", real)
	return true, nil
}

// unmountSandboxesTmpfs undoes mountSandboxesTmpfs at Close when no host
// dir is left on it and no other gateway instance uses the data directory.
func (e *Executor) unmountSandboxesTmpfs() {
	if !e.sandboxesTmpfs {
		return
	}
	dir := filepath.Join(e.o.DataDir, sandboxesDir)
	if n, err := dirEntries(dir); err != nil || n > 0 {
		return
	}
	if insts, err := dirNames(filepath.Join(e.o.DataDir, "instances")); err != nil || len(insts) > 1 ||
		len(insts) == 1 && insts[0] != filepath.Base(instanceLockName(e.o.InstanceID)) {
		return
	}
	if err := syscall.Unmount(dir, 0); err != nil {
		e.logger.Warn("cannot unmount the host dirs' tmpfs", "dir", dir, "error", err)
	}
}

// isMountPoint reports whether dir (a real path) is a mount point.
func isMountPoint(dir string) (bool, error) {
	mounts, err := readMountInfo()
	if err != nil {
		return false, err
	}
	for _, m := range mounts {
		if m.point == dir {
			return true, nil
		}
	}
	return false, nil
}

func dirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	names, err := f.Readdirnames(-1)
	var out []string
	for _, n := range names {
		if !strings.HasPrefix(n, ".") {
			out = append(out, n)
		}
	}
	return out, err
}
