package docker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
)

// loopTools are the programs loop images need (e2fsprogs, util-linux).
var loopTools = []string{"mkfs.ext4", "e2fsck", "resize2fs", "mount", "losetup"}

// loopMountOptions: nosuid/nodev as for any agent-writable mount; discard
// hands freed blocks back to the host (the image stays sparse);
// noinit_itable keeps the kernel from zeroing inode tables, which would
// make the image as large as its tables at once.
const loopMountOptions = "loop,nosuid,nodev,noatime,discard,noinit_itable"

// loopToolTimeout bounds each mkfs/e2fsck/mount call.
const loopToolTimeout = 2 * time.Minute

// detachWait bounds how long detachStale waits for the kernel to clear a
// detached loop device that something still held open.
const detachWait = 10 * time.Second

// loopQuota gives each workspace its own ext4 image, mounted at the
// workspace path by the chat's first Create and kept mounted for the chat
// (host-side readers between turns see the files), until the retention
// sweep removes the workspace or the executor closes. A mount left by a
// killed gateway is found in /proc/self/mountinfo and reused by the next
// Create; a loop device left attached without a mount is detached first,
// and an image still held by a filesystem outside the mount table is
// refused rather than mounted twice. The image size is the disk quota and its inode count
// (mkfs -N) the inode quota; a workspace keeps the largest quota any of
// its assistants asked for (ext4 grows offline, it does not shrink).
type loopQuota struct {
	dataDir string
	root    *os.Root
	layout  *executor.WorkspaceLayout
	logger  hclog.Logger
}

func (l *loopQuota) mode() QuotaMode { return QuotaLoop }

// limit adds nothing: the image's size bounds each file and the total, and
// its "No space left on device" says more than RLIMIT_FSIZE's SIGXFSZ.
func (l *loopQuota) limit(plan, *container.HostConfig) {}

// probe checks the prerequisites and mounts a small image once.
func (l *loopQuota) probe() error {
	if os.Geteuid() != 0 {
		return errNotRoot
	}
	for _, t := range loopTools {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("%s is not installed (install e2fsprogs and util-linux)", t)
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return fmt.Errorf("no loop devices (/dev/loop-control: %w)", err)
	}
	if err := sameMountNSAsDockerd(); err != nil {
		return err
	}
	if err := l.root.MkdirAll(quotaDir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", quotaDir, err)
	}
	dir := filepath.Join(l.dataDir, quotaDir)
	// Probes of a gateway killed while probing.
	if old, err := filepath.Glob(filepath.Join(dir, ".probe-*")); err == nil {
		for _, p := range old {
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
			_ = os.Remove(p)
		}
	}
	img := filepath.Join(dir, ".probe-"+randomID()+".img")
	mnt := strings.TrimSuffix(img, ".img")
	defer func() {
		_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
		_ = os.Remove(mnt)
		_ = os.Remove(img)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), loopToolTimeout)
	defer cancel()
	if err := makeImage(ctx, img, MinDiskBytes, MinInodes, 0, 0); err != nil {
		return err
	}
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return err
	}
	if err := runTool(ctx, "mount", "-t", "ext4", "-o", loopMountOptions, img, mnt); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(mnt, "probe"), []byte("ok"), 0o600); err != nil {
		return fmt.Errorf("write to a mounted image: %w", err)
	}
	return unmount(mnt)
}

// sameMountNSAsDockerd makes sure a mount made here is what the daemon
// bind-mounts: a dockerd in another mount namespace (or not visible at
// all, e.g. a gateway in a container with the socket mounted) would give
// the container the empty directory under the mount.
func sameMountNSAsDockerd() error {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return fmt.Errorf("cannot read the mount namespace: %w", err)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, ent := range ents {
		if _, err := strconv.Atoi(ent.Name()); err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "dockerd" {
			continue
		}
		ns, err := os.Readlink(filepath.Join("/proc", ent.Name(), "ns", "mnt"))
		if err != nil {
			return fmt.Errorf("cannot read dockerd's mount namespace: %w", err)
		}
		if ns != self {
			return fmt.Errorf("dockerd runs in another mount namespace (%s, the gateway in %s)", ns, self)
		}
		return nil
	}
	return errors.New("dockerd is not a process visible here, so a mount made here may not reach its containers")
}

// imageName is the chat's image under DataDir. It bears the workspace's
// neutral name: any container can read every loop device's backing file
// path in /sys unless it is masked (see maskedPaths).
func (l *loopQuota) imageName(user, chat string) string {
	return filepath.Join(quotaDir, l.layout.Name(user, chat)+".img")
}

// legacyImageName is where versions before neutral names kept the chat's
// image.
func legacyImageName(user, chat string) string {
	return filepath.Join(quotaDir, user, "chat-"+chat+".img")
}

// beforePrepare unmounts the chat's image from its legacy workspace path
// (a mount a killed gateway of an earlier version left), so that Prepare
// can move the workspace, and moves the legacy image to its neutral name.
func (l *loopQuota) beforePrepare(user, chat string) error {
	legacyDir := filepath.Join(l.dataDir, executor.LegacyRel(user, chat))
	legacyImg := filepath.Join(l.dataDir, legacyImageName(user, chat))
	if mounted, err := mountedImage(legacyDir, legacyImg); err == nil && mounted {
		if err := syscall.Unmount(legacyDir, 0); err != nil {
			return fmt.Errorf("workspace quota: unmount the legacy workspace %s before moving it (is a container of an older gateway still on it?): %w", legacyDir, err)
		}
		// The loop device lets go of the image shortly after the unmount.
		_ = detachStale(context.Background(), legacyImg)
	}
	name := l.imageName(user, chat)
	if _, err := l.root.Lstat(name); !isNotExistErr(err) {
		return nil
	}
	fi, err := l.root.Lstat(legacyImageName(user, chat))
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	if err := l.root.Rename(legacyImageName(user, chat), name); err != nil && !isNotExistErr(err) {
		return fmt.Errorf("workspace quota: move the workspace image %s to its neutral name: %w", legacyImg, err)
	}
	_ = l.root.Remove(filepath.Join(quotaDir, user))
	return nil
}

func (l *loopQuota) attach(ctx context.Context, p plan, wsDir string, _ sandboxControl) (quotaHandle, error) {
	user, chat := p.spec.UserID, p.spec.ChatID
	log := l.logger.With("user", user, "chat", chat)
	if err := l.root.MkdirAll(quotaDir, 0o700); err != nil {
		return nil, fmt.Errorf("workspace quota: %w", err)
	}
	name := l.imageName(user, chat)
	img := filepath.Join(l.dataDir, name)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loopToolTimeout)
	defer cancel()

	mounted, err := mountedImage(wsDir, img)
	if err != nil {
		return nil, fmt.Errorf("workspace quota: %w", err)
	}
	if mounted {
		// Mounted by an earlier turn (or by a gateway killed since).
		return loopHandle{}, nil
	}
	if err := detachStale(ctx, img); err != nil {
		log.Warn("cannot detach a stale loop device of the workspace image", "image", img, "error", err)
	}
	// A device still bound is in use by a filesystem no longer in our
	// mount table (lazily unmounted, held by a container going away).
	// Mounting the image twice would corrupt it.
	if out, err := toolOutput(ctx, "losetup", "-n", "-O", "NAME", "-j", img); err != nil || strings.TrimSpace(out) != "" {
		return nil, fmt.Errorf("workspace quota: the workspace image is still in use (%s); retry once the previous sandbox is gone: %w", strings.TrimSpace(out), errors.Join(err, executor.ErrBusy))
	}
	fi, err := l.root.Lstat(name)
	switch {
	case isNotExistErr(err):
		if err := l.create(ctx, p, img, wsDir, log); err != nil {
			return nil, fmt.Errorf("workspace quota: %w", err)
		}
	case err != nil:
		return nil, fmt.Errorf("workspace quota: %w", err)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("workspace quota: %s is not a regular file; remove it: %w", img, executor.ErrInvalid)
	default:
		if err := checkImage(ctx, img); err != nil {
			return nil, fmt.Errorf("workspace quota: %w", err)
		}
		if fi.Size() < p.spec.DiskBytes {
			if err := growImage(ctx, img, p.spec.DiskBytes); err != nil {
				return nil, fmt.Errorf("workspace quota: %w", err)
			}
			log.Info("workspace image grown", "from", fi.Size(), "to", p.spec.DiskBytes)
		}
		if n, err := dirEntries(wsDir); err == nil && n > 0 {
			log.Warn("the workspace directory under the image is not empty; its files stay hidden under the mount", "dir", wsDir, "entries", n)
		}
	}
	if err := runTool(ctx, "mount", "-t", "ext4", "-o", loopMountOptions, img, wsDir); err != nil {
		return nil, fmt.Errorf("workspace quota: mount the workspace image: %w", err)
	}
	// mkfs made lost+found; the agent has no use for it (e2fsck makes it
	// again if it ever needs it). Non-empty, it stays.
	_ = syscall.Rmdir(filepath.Join(wsDir, "lost+found"))
	log.Debug("workspace image mounted", "image", img)
	return loopHandle{}, nil
}

// create makes the chat's image and moves a workspace made before quotas
// into it. The image is built under a temporary name and renamed once
// complete, so a crash leaves either no image or a whole one.
func (l *loopQuota) create(ctx context.Context, p plan, img, wsDir string, log hclog.Logger) error {
	tmp := img + ".new"
	_ = os.Remove(tmp)
	if err := makeImage(ctx, tmp, p.spec.DiskBytes, p.spec.Inodes, p.uid, p.gid); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	n, err := dirEntries(wsDir)
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if n > 0 {
		if err := migrate(ctx, tmp, wsDir); err != nil {
			_ = os.Remove(tmp)
			return err
		}
		log.Info("moved the workspace into its new quota image", "entries", n)
	}
	if err := os.Rename(tmp, img); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if n > 0 {
		if err := emptyDir(wsDir); err != nil {
			log.Warn("cannot remove the workspace's files now copied into its image", "error", err)
		}
	}
	log.Info("workspace image created", "image", img, "max_disk", p.spec.DiskBytes, "max_inodes", p.spec.Inodes)
	return nil
}

// migrate copies wsDir's contents into the image at img.
func migrate(ctx context.Context, img, wsDir string) error {
	stage := strings.TrimSuffix(img, ".img.new") + ".mnt"
	if err := os.Mkdir(stage, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	defer func() { _ = os.Remove(stage) }()
	if err := runTool(ctx, "mount", "-t", "ext4", "-o", loopMountOptions, img, stage); err != nil {
		return err
	}
	_ = syscall.Rmdir(filepath.Join(stage, "lost+found"))
	cpErr := runTool(ctx, "cp", "-a", "--one-file-system", "--", wsDir+"/.", stage+"/")
	umErr := unmount(stage)
	if cpErr != nil {
		return fmt.Errorf("the existing workspace does not fit its quota (raise sandbox.max_disk or max_inodes, or free space in it): %w", cpErr)
	}
	return umErr
}

// emptyDir removes dir's entries (not dir), without following symlinks.
func emptyDir(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	f, err := root.Open(".")
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	_ = f.Close()
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		errs = append(errs, root.RemoveAll(n))
	}
	return errors.Join(errs...)
}

// dirEntries counts dir's entries.
func dirEntries(dir string) (int, error) {
	f, err := os.Open(dir)
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	names, err := f.Readdirnames(-1)
	return len(names), err
}

func (l *loopQuota) drop(user, chat string) error {
	for _, c := range []struct{ dir, img string }{
		{l.layout.Rel(user, chat), l.imageName(user, chat)},
		{executor.LegacyRel(user, chat), legacyImageName(user, chat)},
	} {
		wsDir, img := filepath.Join(l.dataDir, c.dir), filepath.Join(l.dataDir, c.img)
		if mounted, err := mountedImage(wsDir, img); err == nil && mounted {
			if err := syscall.Unmount(wsDir, 0); err != nil {
				return fmt.Errorf("unmount %s: %w", wsDir, err)
			}
		}
		if err := l.root.Remove(c.img); err != nil && !isNotExistErr(err) {
			return err
		}
	}
	_ = l.root.Remove(filepath.Join(quotaDir, user))
	return nil
}

// makeImage creates a sparse ext4 image of size bytes with about inodes
// inodes, its root directory owned by uid:gid, no reserved blocks.
func makeImage(ctx context.Context, img string, size, inodes int64, uid, gid int) error {
	f, err := os.OpenFile(img, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return runTool(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-N", strconv.FormatInt(inodes, 10),
		"-E", fmt.Sprintf("root_owner=%d:%d,lazy_itable_init=1,lazy_journal_init=1,nodiscard", uid, gid), img)
}

// checkImage replays the journal and repairs what is safe to repair
// (e2fsck -p); a damaged image is refused, not mounted.
func checkImage(ctx context.Context, img string) error {
	err := runTool(ctx, "e2fsck", "-p", img)
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() < 4 {
		return nil // 1: errors corrected, 2: corrected, reboot suggested
	}
	if err != nil {
		return fmt.Errorf("the workspace image %s is damaged; repair it with `e2fsck -f %s` or remove it (the chat's files are in it): %w", img, img, err)
	}
	return nil
}

// growImage enlarges an unmounted image to size bytes.
func growImage(ctx context.Context, img string, size int64) error {
	if err := runTool(ctx, "e2fsck", "-f", "-p", img); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() >= 4 {
			return err
		}
	}
	if err := os.Truncate(img, size); err != nil {
		return err
	}
	return runTool(ctx, "resize2fs", img)
}

// detachStale detaches the loop devices bound to img that back no mount,
// and waits, bounded by ctx and detachWait, until the kernel has let go of
// them: `losetup -d` on a device something still holds open (udev's probe,
// a container's mount namespace going away) only marks it for autoclear,
// and the device stays listed until its last user closes it.
func detachStale(ctx context.Context, img string) error {
	out, err := toolOutput(ctx, "losetup", "-n", "-O", "NAME", "-j", img)
	if err != nil {
		return err
	}
	mounts, err := readMountInfo()
	if err != nil {
		return err
	}
	var errs []error
	detached := map[string]bool{}
	for dev := range strings.FieldsSeq(out) {
		busy := false
		for _, m := range mounts {
			busy = busy || m.source == dev
		}
		if !busy {
			errs = append(errs, runTool(ctx, "losetup", "-d", dev))
			detached[dev] = true
		}
	}
	if len(detached) == 0 {
		return errors.Join(errs...)
	}
	ctx, cancel := context.WithTimeout(ctx, detachWait)
	defer cancel()
	for {
		out, err := toolOutput(ctx, "losetup", "-n", "-O", "NAME", "-j", img)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		left := false
		for dev := range strings.FieldsSeq(out) {
			left = left || detached[dev]
		}
		if !left {
			return errors.Join(errs...)
		}
		select {
		case <-ctx.Done():
			return errors.Join(append(errs, fmt.Errorf("loop device of %s still bound after detach: %w", img, ctx.Err()))...)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// mountedImage reports whether img is what is mounted on top of dir. Any
// other filesystem there is an error: the workspace is not ours to use.
func mountedImage(dir, img string) (bool, error) {
	mounts, err := readMountInfo()
	if err != nil {
		return false, err
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false, err
	}
	var top *mountInfo
	for i := range mounts {
		if mounts[i].point == realDir {
			top = &mounts[i]
		}
	}
	if top == nil {
		return false, nil
	}
	if strings.HasPrefix(top.source, "/dev/loop") {
		b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(top.source), "loop", "backing_file"))
		realImg, ierr := filepath.EvalSymlinks(img)
		if err == nil && ierr == nil && strings.TrimSpace(string(b)) == realImg {
			return true, nil
		}
	}
	return false, fmt.Errorf("%s has another filesystem mounted on it (%s from %s); unmount it", dir, top.fstype, top.source)
}

type mountInfo struct{ point, fstype, source string }

// readMountInfo parses /proc/self/mountinfo.
func readMountInfo() ([]mountInfo, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var ms []mountInfo
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if len(f) < 5 || sep < 0 || sep+2 >= len(f) {
			continue
		}
		ms = append(ms, mountInfo{point: unescapeMount(f[4]), fstype: f[sep+1], source: unescapeMount(f[sep+2])})
	}
	return ms, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmount unmounts dir, retrying while it is busy (the container's
// processes may take a moment to go), then detaching it lazily.
func unmount(dir string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := syscall.Unmount(dir, 0)
		switch {
		case err == nil, errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENOENT):
			return nil // EINVAL: not mounted (any more)
		case errors.Is(err, syscall.EBUSY) && time.Now().Before(deadline):
			time.Sleep(50 * time.Millisecond)
		case errors.Is(err, syscall.EBUSY):
			if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
				return fmt.Errorf("unmount %s: %w", dir, err)
			}
			return nil
		default:
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
}

// loopHandle: the kernel enforces the quota and the mount stays for the
// chat, so there is nothing to release per sandbox.
type loopHandle struct{}

func (loopHandle) err() error     { return nil }
func (loopHandle) release() error { return nil }

// runTool runs a tool and returns its output in the error when it fails.
func runTool(ctx context.Context, name string, args ...string) error {
	_, err := toolOutput(ctx, name, args...)
	return err
}

func toolOutput(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func isNotExistErr(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// unmountImages unmounts the workspace images mounted under DataDir
// (including those a killed gateway left) for chats nobody holds, in this
// process or, by the chat's flock, in another gateway sharing DataDir.
// Executor.Close runs it after its sandboxes are gone; a chat held
// meanwhile keeps its mount, which its next Create reuses anyway.
func (e *Executor) unmountImages() {
	if e.quota == nil || e.quota.mode() != QuotaLoop {
		return
	}
	realData, err := filepath.EvalSymlinks(e.o.DataDir)
	if err != nil {
		return
	}
	mounts, err := readMountInfo()
	if err != nil {
		e.logger.Warn("cannot list mounts to find stale workspace images", "error", err)
		return
	}
	byName := map[string]chatRef{}
	if chats, err := listChats(e.root); err == nil {
		for _, c := range chats {
			byName[e.layout.Name(c.user, c.chat)] = c
		}
	}
	q, _ := e.quota.(*loopQuota)
	wsPrefix := filepath.Join(realData, executor.WorkspacesDir) + string(filepath.Separator)
	legacyPrefix := filepath.Join(realData, executor.LegacyWorkspacesDir) + string(filepath.Separator)
	for _, m := range mounts {
		var user, chat, img string
		if name, ok := strings.CutPrefix(m.point, wsPrefix); ok {
			c, known := byName[name]
			if !known || q == nil {
				continue
			}
			user, chat, img = c.user, c.chat, filepath.Join(e.o.DataDir, q.imageName(c.user, c.chat))
		} else if rel, ok := strings.CutPrefix(m.point, legacyPrefix); ok {
			u, chatDir, ok := strings.Cut(rel, string(filepath.Separator))
			c, isChat := strings.CutPrefix(chatDir, "chat-")
			if !ok || !isChat || executor.ValidateID("user id", u) != nil || executor.ValidateID("chat id", c) != nil {
				continue
			}
			user, chat, img = u, c, filepath.Join(e.o.DataDir, legacyImageName(u, c))
		} else {
			continue
		}
		if mine, err := mountedImage(m.point, img); err != nil || !mine {
			continue
		}
		unlease, err := e.leases.Acquire(context.Background(), user+"/"+chat, 0)
		if err != nil {
			continue
		}
		if lock, err := e.lockChat(context.Background(), user, chat, 0); err == nil {
			// Never lazily: a container that still uses it would keep the
			// filesystem alive out of sight.
			if err := syscall.Unmount(m.point, 0); err != nil {
				e.logger.Warn("cannot unmount a stale workspace image", "user", user, "chat", chat, "error", err)
			} else {
				e.logger.Info("unmounted a workspace image left mounted by a stopped gateway", "user", user, "chat", chat)
			}
			_ = lock.Close()
		}
		unlease()
	}
}
