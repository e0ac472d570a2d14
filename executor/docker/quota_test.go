package docker

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// noQuota turns the quota off: the control runs that show each quota test
// would fail without it.
type noQuota struct{}

func (noQuota) mode() QuotaMode                    { return "off" }
func (noQuota) limit(plan, *container.HostConfig)  {}
func (noQuota) drop(string, string) error          { return nil }
func (noQuota) beforePrepare(string, string) error { return nil }
func (noQuota) attach(context.Context, plan, string, sandboxControl) (quotaHandle, error) {
	return noHandle{}, nil
}

type noHandle struct{}

func (noHandle) err() error     { return nil }
func (noHandle) release() error { return nil }

// newLoopExecutor is newTestExecutor with loop images required.
func newLoopExecutor(t *testing.T, mutate ...func(*Options)) *Executor {
	t.Helper()
	testenv.RequireRoot(t, "loop-mounted workspace images")
	return newTestExecutor(t, append([]func(*Options){func(o *Options) { o.Quota = QuotaLoop }}, mutate...)...)
}

// allocated is the bytes the host's disk holds for path (st_blocks).
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(path, &st))
	return st.Blocks * 512
}

// freeBytes is the free space of dir's filesystem.
func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	require.NoError(t, syscall.Statfs(dir, &st))
	return int64(st.Bavail) * st.Bsize
}

// writeScript writes mib MiB into the workspace and prints how many MiB
// it managed.
func writeScript(mib int) string {
	return `n=0; while [ $n -lt ` + strconv.Itoa(mib) + ` ]; do dd if=/dev/zero of=/workspace/big bs=1048576 count=1 seek=$n conv=notrunc 2>/tmp/err || break; n=$((n+1)); done; sync; echo $n; cat /tmp/err >&2`
}

// floodScript creates n empty files and prints how many it made (true,
// not the special built-in ":", whose failed redirection ends the shell).
func floodScript(n int) string {
	return `mkdir -p /workspace/flood && cd /workspace/flood && i=0; while [ $i -lt ` + strconv.Itoa(n) + ` ]; do true > f$i 2>/tmp/err || break; i=$((i+1)); done; echo $i; cat /tmp/err >&2`
}

// TestQuotaDiskFullInsideContainer: writing past max_disk fails with
// ENOSPC inside the container, and the host holds at most the quota for
// the workspace. The control run without the quota writes everything.
func TestQuotaDiskFullInsideContainer(t *testing.T) {
	const quota, want = 32 << 20, 96 // bytes; MiB the agent tries to write
	for _, withQuota := range []bool{true, false} {
		t.Run(map[bool]string{true: "quota", false: "control_without_quota"}[withQuota], func(t *testing.T) {
			e := newLoopExecutor(t)
			if !withQuota {
				e.quota = noQuota{}
			}
			spec := testSpec("disk")
			spec.DiskBytes = quota
			before := freeBytes(t, e.o.DataDir)
			sb := create(t, e, spec)
			out, stderr, _, err := run(t, sb, writeScript(want))
			require.NoError(t, err)
			wrote, err := strconv.Atoi(strings.TrimSpace(out))
			require.NoError(t, err, "stdout %q stderr %q", out, stderr)
			drop := before - freeBytes(t, e.o.DataDir)
			t.Logf("wrote %d MiB of %d; host free space dropped by %d MiB (other processes share the disk)", wrote, want, drop>>20)
			if !withQuota {
				assert.Equal(t, want, wrote, "without the quota the whole file is written: stderr %s", stderr)
				return
			}
			assert.Less(t, wrote, want)
			assert.Greater(t, wrote, quota>>20/2, "most of the quota is usable")
			assert.LessOrEqual(t, int64(wrote)<<20, int64(quota))
			assert.Contains(t, stderr, "No space left on device")
			img := filepath.Join(e.o.DataDir, e.quota.(*loopQuota).imageName("u1", "disk"))
			held := allocated(t, img)
			t.Logf("the image holds %d MiB on the host for a %d MiB quota", held>>20, quota>>20)
			assert.LessOrEqual(t, held, int64(quota), "the host keeps at most the quota for the workspace")
			// Deleting frees the host's blocks again (discard punches holes).
			mustRun(t, sb, "rm -f /workspace/big && sync")
			require.NoError(t, sb.Close(context.Background()))
			assert.Less(t, allocated(t, img), held, "blocks freed in the workspace go back to the host")
		})
	}
}

// TestQuotaInodeFlood: creating files past max_inodes fails inside the
// container; the control without the quota creates them all.
func TestQuotaInodeFlood(t *testing.T) {
	const inodes, want = 2000, 5000
	for _, withQuota := range []bool{true, false} {
		t.Run(map[bool]string{true: "quota", false: "control_without_quota"}[withQuota], func(t *testing.T) {
			e := newLoopExecutor(t)
			if !withQuota {
				e.quota = noQuota{}
			}
			spec := testSpec("flood")
			spec.DiskBytes, spec.Inodes = 64<<20, inodes
			sb := create(t, e, spec)
			out, stderr, _, err := run(t, sb, floodScript(want), func(c *executor.Cmd) { c.Timeout = 5 * time.Minute })
			require.NoError(t, err)
			made, err := strconv.Atoi(strings.TrimSpace(out))
			require.NoError(t, err, "stdout %q stderr %q", out, stderr)
			t.Logf("created %d files of %d", made, want)
			if !withQuota {
				assert.Equal(t, want, made)
				return
			}
			assert.LessOrEqual(t, made, inodes)
			assert.Greater(t, made, inodes/2, "the quota leaves room for the files it promises")
			assert.Contains(t, stderr, "No space left on device")
		})
	}
}

// TestQuotaWatchdogStopsRun: with the watchdog, a run that writes past the
// quota is stopped and fails with executor.ErrNoSpace and a message naming
// the setting; the next Create on the over-quota workspace is refused.
func TestQuotaWatchdogStopsRun(t *testing.T) {
	const quota = 32 << 20
	for _, withQuota := range []bool{true, false} {
		t.Run(map[bool]string{true: "quota", false: "control_without_quota"}[withQuota], func(t *testing.T) {
			e := newTestExecutor(t, func(o *Options) { o.Quota, o.QuotaInterval = QuotaWatchdog, 100*time.Millisecond })
			require.Equal(t, QuotaWatchdog, e.quota.mode())
			if !withQuota {
				e.quota = noQuota{}
			}
			spec := testSpec("watch")
			spec.DiskBytes = quota
			sb := create(t, e, spec)
			// The writer keeps going until stopped; the control stops itself.
			// One file stops at the quota (RLIMIT_FSIZE): a second one
			// passes it.
			_, _, _, err := run(t, sb, writeScript(64)+"; dd if=/dev/zero of=/workspace/more bs=1M count=8; sleep 5")
			if !withQuota {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, executor.ErrNoSpace)
			assert.Contains(t, err.Error(), "passed its disk quota of 32.0 MiB")
			assert.Contains(t, err.Error(), "sandbox.max_disk")
			_, _, _, err = run(t, sb, "true")
			require.ErrorIs(t, err, executor.ErrNoSpace, "later commands say why")
			require.NoError(t, sb.Close(context.Background()))
			_, err = e.Create(context.Background(), spec)
			require.ErrorIs(t, err, executor.ErrNoSpace, "an over-quota workspace does not start")
		})
	}
}

// TestQuotaWatchdogInodes: the watchdog counts entries too.
func TestQuotaWatchdogInodes(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) { o.Quota, o.QuotaInterval = QuotaWatchdog, 100*time.Millisecond })
	spec := testSpec("watchinodes")
	spec.DiskBytes, spec.Inodes = 64<<20, 1000
	sb := create(t, e, spec)
	_, _, _, err := run(t, sb, floodScript(3000)+"; sleep 10")
	require.ErrorIs(t, err, executor.ErrNoSpace)
	assert.Contains(t, err.Error(), "sandbox.max_inodes")
}

// TestQuotaFreeSpaceFloor: Create refuses a sandbox when the data dir has
// less free space than MinFreeBytes.
func TestQuotaFreeSpaceFloor(t *testing.T) {
	e := newTestExecutor(t)
	e.o.MinFreeBytes = freeBytes(t, e.o.DataDir) + 1<<40
	_, err := e.Create(context.Background(), testSpec("floor"))
	require.ErrorIs(t, err, executor.ErrNoSpace)
	assert.Contains(t, err.Error(), "free disk space there or lower Options.MinFreeBytes")
	e.o.MinFreeBytes = -1 // control: without the floor it starts
	sb := create(t, e, testSpec("floor"))
	require.NoError(t, sb.Close(context.Background()))
}

// mountedAt reports whether something is mounted at dir.
func mountedAt(t *testing.T, dir string) bool {
	t.Helper()
	ms, err := readMountInfo()
	require.NoError(t, err)
	real, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	for _, m := range ms {
		if m.point == real {
			return true
		}
	}
	return false
}

// TestQuotaSurvivesCrash: the image stays mounted for the chat between
// turns (host readers see the files); a gateway starting on the data dir
// reuses what a dead one left mounted; a loop device left bound without a
// mount is detached; Executor.Close unmounts what nobody holds.
func TestQuotaSurvivesCrash(t *testing.T) {
	e := newLoopExecutor(t)
	spec := testSpec("crash")
	ws := e.layout.Dir("u1", "crash")
	img := filepath.Join(e.o.DataDir, e.quota.(*loopQuota).imageName("u1", "crash"))
	sb := create(t, e, spec)
	mustRun(t, sb, "echo kept > /workspace/a")
	assert.Equal(t, "", mustRun(t, sb, "ls -A /workspace | grep -v '^a$' || true"), "no lost+found or other clutter")
	require.NoError(t, sb.Close(context.Background()))
	require.True(t, mountedAt(t, ws), "kept mounted for the chat")
	require.FileExists(t, filepath.Join(ws, "a"), "host readers see the workspace between turns")

	// A gateway killed with the image mounted (the state it is in now, as
	// far as another executor can tell): a new one reuses the mount.
	o := e.o
	o.InstanceID = ""
	e2, err := New(context.Background(), o)
	require.NoError(t, err)
	sb2, err := e2.Create(context.Background(), spec)
	require.NoError(t, err)
	assert.Equal(t, "kept", mustRun(t, sb2, "cat /workspace/a"))
	require.NoError(t, sb2.Close(context.Background()))
	require.NoError(t, e2.Close())
	require.False(t, mountedAt(t, ws), "Executor.Close unmounts the chats nobody holds")

	// A loop device still bound to the image, no mount.
	out, err := exec.Command("losetup", "-f", "--show", img).CombinedOutput()
	require.NoError(t, err, "%s", out)
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
	sb = create(t, e, spec)
	assert.Equal(t, "kept", mustRun(t, sb, "cat /workspace/a"))
	require.NoError(t, sb.Close(context.Background()))
	e.unmountImages()
	require.False(t, mountedAt(t, ws))
	// The kernel detaches a busy loop device when its last user closes it
	// (autoclear), which can trail the unmount on a loaded machine: wait
	// for it, bounded.
	var bound string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, err = exec.Command("losetup", "-n", "-O", "NAME", "-j", img).CombinedOutput()
		require.NoError(t, err)
		if bound = strings.TrimSpace(string(out)); bound == "" || time.Now().After(deadline) {
			break
		}
	}
	assert.Empty(t, bound, "no loop device left bound to the image")
}

// TestQuotaMigratesExistingWorkspace: a workspace made before quotas moves
// into its image on the first Create, and nothing stays underneath.
func TestQuotaMigratesExistingWorkspace(t *testing.T) {
	e := newLoopExecutor(t)
	ws, err := executor.PrepareWorkspace(e.o.DataDir, "u1", "old", executor.DefaultUID, executor.DefaultGID)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "src"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "src", "main.go"), []byte("package main\n"), 0o644))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(ws, "link")))
	sb := create(t, e, testSpec("old"))
	assert.Equal(t, "package main", mustRun(t, sb, "cat /workspace/src/main.go"))
	assert.Equal(t, "/etc/passwd", mustRun(t, sb, "readlink /workspace/link"), "symlinks are copied, not followed")
	require.NoError(t, sb.Close(context.Background()))
	e.unmountImages()
	require.False(t, mountedAt(t, ws))
	n, err := dirEntries(ws)
	require.NoError(t, err)
	assert.Zero(t, n, "the old files are not left under the mount")
}

// TestQuotaRetentionDropsImage: the retention sweep removes the image with
// the workspace.
func TestQuotaRetentionDropsImage(t *testing.T) {
	e := newLoopExecutor(t, func(o *Options) { o.Retention = time.Hour })
	sb := create(t, e, testSpec("old"))
	require.NoError(t, sb.Close(context.Background()))
	img := filepath.Join(e.o.DataDir, e.quota.(*loopQuota).imageName("u1", "old"))
	require.FileExists(t, img)
	past := time.Now().Add(-2 * time.Hour)
	require.NoError(t, e.root.Chtimes(chatLockName("u1", "old"), past, past))
	removed, err := e.ret.sweep(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{e.layout.Rel("u1", "old")}, removed)
	assert.NoFileExists(t, img)
}

func TestQuotaLimits(t *testing.T) {
	for name, tc := range map[string]struct {
		disk, inodes   int64
		wantD, wantI   int64
		wantErrContain string
	}{
		"defaults":        {wantD: executor.DefaultDiskBytes, wantI: executor.DefaultInodes},
		"set":             {disk: 64 << 20, inodes: 5000, wantD: 64 << 20, wantI: 5000},
		"small disk":      {disk: 32 << 20, wantD: 32 << 20, wantI: 4096},
		"tiny disk, min":  {disk: 16 << 20, wantD: 16 << 20, wantI: 2048},
		"negative disk":   {disk: -1, wantErrContain: "DiskBytes -1 is below the minimum"},
		"tiny disk":       {disk: 1 << 20, wantErrContain: "below the minimum of 16.0 MiB"},
		"negative inodes": {inodes: -1, wantErrContain: "Inodes -1 is below the minimum"},
		"too many inodes": {disk: 16 << 20, inodes: 20000, wantErrContain: "more than one per KiB"},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := executor.Normalize(executor.Spec{UserID: "u", ChatID: "c", DiskBytes: tc.disk, Inodes: tc.inodes})
			d, i := s.DiskBytes, s.Inodes
			if tc.wantErrContain != "" {
				require.ErrorIs(t, err, executor.ErrInvalid)
				assert.Contains(t, err.Error(), tc.wantErrContain)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wantD, d)
			assert.Equal(t, tc.wantI, i)
		})
	}
}

func TestUnescapeMount(t *testing.T) {
	assert.Equal(t, "/data dir/x", unescapeMount(`/data\040dir/x`))
	assert.Equal(t, `/a\b`, unescapeMount(`/a\134b`))
	assert.Equal(t, `/trailing\04`, unescapeMount(`/trailing\04`))
	assert.Equal(t, "/plain", unescapeMount("/plain"))
}

// TestQuotaAttacks: other ways to fill a workspace stay inside the quota:
// preallocation, a huge sparse file, a directory flood (each an inode),
// hard links (directory blocks), long names. Each leaves the
// image at most the quota on the host; the ones that must hit the limit
// say "No space left on device".
func TestQuotaAttacks(t *testing.T) {
	const disk, inodes = 32 << 20, 2000
	e := newLoopExecutor(t)
	for name, tc := range map[string]struct {
		script  string
		enospc  bool
		okAfter string // a command that must still work afterwards
	}{
		"fallocate":   {script: "fallocate -l 128M /workspace/pre", enospc: true},
		"sparse 100g": {script: "truncate -s 100G /workspace/sparse && ls -l /workspace/sparse >/dev/null && dd if=/dev/zero of=/workspace/sparse bs=1048576 count=64 seek=1000 conv=notrunc", enospc: true},
		"mkdir flood": {script: "cd /workspace && mkdir $(seq 5000 | sed 's/^/d/')", enospc: true},
		"hardlinks":   {script: "cd /workspace && : > f && for i in $(seq 300); do ln f h$i || exit 1; done", okAfter: "ls /workspace | wc -l"},
		"long names":  {script: "cd /workspace && i=0; while [ $i -lt 1500 ]; do : > $(printf '%0200d' $i) || exit 1; i=$((i+1)); done", okAfter: "true"},
	} {
		t.Run(name, func(t *testing.T) {
			chat := strings.ReplaceAll(name, " ", "-")
			spec := testSpec(chat)
			spec.DiskBytes, spec.Inodes = disk, inodes
			sb := create(t, e, spec)
			_, stderr, res, err := run(t, sb, tc.script, func(c *executor.Cmd) { c.Timeout = 5 * time.Minute })
			require.NoError(t, err)
			if tc.enospc {
				assert.NotZero(t, res.ExitCode)
				assert.Contains(t, stderr, "No space left on device")
			}
			if tc.okAfter != "" {
				mustRun(t, sb, tc.okAfter)
			}
			held := allocated(t, filepath.Join(e.o.DataDir, e.quota.(*loopQuota).imageName("u1", chat)))
			t.Logf("exit %d, image holds %d KiB for a %d KiB quota; stderr %.120q", res.ExitCode, held>>10, disk>>10, stderr)
			assert.LessOrEqual(t, held, int64(disk))
		})
	}
}
