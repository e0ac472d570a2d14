package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

// TestEscapesThroughPlantedSymlinks plants symlinks from a process inside
// the container (to /etc/passwd, to ../../.., to a canary file outside the
// workspace) and checks that every host-side file operation through them is
// refused and that nothing outside changed.
func TestEscapesThroughPlantedSymlinks(t *testing.T) {
	e := newTestExecutor(t)
	ctx := context.Background()
	canaryDir := filepath.Join(e.o.DataDir, "outside")
	require.NoError(t, os.Mkdir(canaryDir, 0o755))
	canary := filepath.Join(canaryDir, "canary.txt")
	require.NoError(t, os.WriteFile(canary, []byte("CANARY\n"), 0o644))
	passwd, err := os.ReadFile("/etc/passwd")
	require.NoError(t, err)

	sb := create(t, e, testSpec("escape"))
	// The workspace is {data}/workspaces/u1/chat-escape: three levels up is
	// the data dir, where the canary lives.
	mustRun(t, sb, fmt.Sprintf(`set -e
ln -s /etc/passwd pw
ln -s ../../.. up
ln -s %[1]s canary-abs
ln -s ../../../outside/canary.txt canary-rel
ln -s %[2]s outdir
mkdir d; ln -s /etc d/etc`, canary, canaryDir))

	edit := []executor.Edit{{Old: "CANARY", New: ptr("PWNED")}}
	for _, name := range []string{"pw", "up/outside/canary.txt", "canary-abs", "canary-rel", "outdir/canary.txt", "d/etc/passwd", "/workspace/pw", "../../../outside/canary.txt"} {
		t.Run("read "+name, func(t *testing.T) {
			data, err := sb.ReadFile(ctx, name)
			assert.ErrorIs(t, err, executor.ErrPathEscapes)
			assert.Empty(t, data)
		})
		t.Run("write "+name, func(t *testing.T) {
			assert.ErrorIs(t, sb.WriteFile(ctx, name, []byte("PWNED\n")), executor.ErrPathEscapes)
		})
		t.Run("edit "+name, func(t *testing.T) {
			_, err := sb.EditFile(ctx, name, edit)
			assert.ErrorIs(t, err, executor.ErrPathEscapes)
		})
		t.Run("stat "+name, func(t *testing.T) {
			_, err := sb.Stat(ctx, name)
			assert.ErrorIs(t, err, executor.ErrPathEscapes)
		})
	}
	for _, name := range []string{"up", "outdir", "d/etc", "up/outside"} {
		t.Run("list "+name, func(t *testing.T) {
			entries, err := sb.ListDir(ctx, name)
			assert.ErrorIs(t, err, executor.ErrPathEscapes)
			assert.Empty(t, entries)
		})
	}
	t.Run("new file below a symlinked dir", func(t *testing.T) {
		assert.ErrorIs(t, sb.WriteFile(ctx, "outdir/new.txt", []byte("x")), executor.ErrPathEscapes)
		assert.NoFileExists(t, filepath.Join(canaryDir, "new.txt"))
	})

	got, err := os.ReadFile(canary)
	require.NoError(t, err)
	assert.Equal(t, "CANARY\n", string(got))
	now, err := os.ReadFile("/etc/passwd")
	require.NoError(t, err)
	assert.Equal(t, passwd, now)
	entries, err := os.ReadDir(canaryDir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "nothing new outside the workspace")
}

// TestEscapeRaceDirectorySwappedForSymlink swaps a directory for a symlink
// to a canary directory outside the workspace in a tight loop from inside
// the container while the host reads, writes and lists through it: at least
// 100k operations and not one of them may reach the canaries.
func TestEscapeRaceDirectorySwappedForSymlink(t *testing.T) {
	e := newTestExecutor(t)
	ctx := context.Background()
	canaryDir := filepath.Join(e.o.DataDir, "outside")
	require.NoError(t, os.Mkdir(canaryDir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(canaryDir, "f"), []byte("CANARY"), 0o644))

	require.NoError(t, os.WriteFile(filepath.Join(canaryDir, "canary-only"), []byte("CANARY"), 0o644))

	sb := create(t, e, testSpec("race"))
	mustRun(t, sb, `set -e; mkdir d; echo inside > d/f`)

	swapCtx, stopSwap := context.WithCancel(ctx)
	swapDone := make(chan error, 1)
	go func() {
		// Each round puts a symlink to the canary directory where the
		// directory was, then puts the directory back; it heals itself when
		// a host write recreated d while it was missing.
		_, err := sb.Exec(swapCtx, &executor.Cmd{Args: []string{"sh", "-c", fmt.Sprintf(`
while :; do
  mv d x 2>/dev/null
  ln -s %s d 2>/dev/null
  rm d 2>/dev/null
  [ -e d ] && rm -rf d
  [ -d x ] || mkdir x
  mv x d
  [ -f d/f ] || echo inside > d/f
done`, canaryDir)}})
		swapDone <- err
	}()
	// Let the swapper start before counting.
	require.Eventually(t, func() bool {
		_, err := os.Lstat(filepath.Join(e.layout.Dir("u1", "race"), "x"))
		return err == nil
	}, 10*time.Second, time.Millisecond)

	// At least total operations, and on until both outcomes were seen (a
	// loaded machine schedules the swapper rarely), up to 50 times total.
	const total = 100_000
	var ops, escapes, okReads, refused atomic.Int64
	more := func() bool {
		n := ops.Load()
		return n < total || (okReads.Load() == 0 || refused.Load() == 0) && n < 50*total
	}
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; more(); i++ {
				switch {
				case i%10 == 0:
					_ = sb.WriteFile(ctx, fmt.Sprintf("d/w%d", w), []byte("host"))
				case i%3 == 0:
					list, err := sb.ListDir(ctx, "d")
					for _, fi := range list {
						if err == nil && fi.Name == "canary-only" {
							escapes.Add(1)
						}
					}
				case i%3 == 1:
					if _, err := sb.Stat(ctx, "d/canary-only"); err == nil {
						escapes.Add(1)
					}
				default:
					data, err := sb.ReadFile(ctx, "d/f")
					switch {
					case err == nil && strings.Contains(string(data), "CANARY"):
						escapes.Add(1)
					case err == nil:
						okReads.Add(1)
					case errors.Is(err, executor.ErrPathEscapes):
						refused.Add(1)
					}
				}
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	stopSwap()
	assert.ErrorIs(t, <-swapDone, context.Canceled, "the swapper ran until stopped")

	entries, err := os.ReadDir(canaryDir)
	require.NoError(t, err)
	var names []string
	for _, fi := range entries {
		names = append(names, fi.Name())
	}
	assert.Equal(t, []string{"canary-only", "f"}, names, "no file written outside the workspace")
	data, err := os.ReadFile(filepath.Join(canaryDir, "f"))
	require.NoError(t, err)
	assert.Equal(t, "CANARY", string(data))
	assert.Zero(t, escapes.Load(), "reads that returned the canary")
	assert.GreaterOrEqual(t, ops.Load(), int64(total))
	// Both outcomes must have happened, or the race was not exercised.
	assert.Positive(t, okReads.Load(), "reads that saw the real directory")
	assert.Positive(t, refused.Load(), "reads refused because d was a symlink")
	t.Logf("%d operations, %d reads ok, %d refused, 0 escapes", ops.Load(), okReads.Load(), refused.Load())
}

// TestSpecialAndHugeFiles: a FIFO made in the container, a huge (sparse)
// file and a huge directory are refused or capped without hanging.
func TestSpecialAndHugeFiles(t *testing.T) {
	// A lower entry cap than the default keeps the test fast on slow
	// disks and shows that Options.Workspace reaches the workspace.
	const maxEntries = 1000
	e := newTestExecutor(t, func(o *Options) { o.Workspace.MaxEntries = maxEntries })
	ctx := context.Background()
	spec := testSpec("special")
	spec.DiskBytes = 16 << 30 // RLIMIT_FSIZE: no file past the disk quota
	sb := create(t, e, spec)
	// Shell builtins only: a thousand files without a thousand forks.
	mustRun(t, sb, fmt.Sprintf(`set -e; mkfifo fifo; truncate -s 8G huge; mkdir many; cd many
i=0; while [ $i -le %d ]; do : > $i; i=$((i+1)); done`, maxEntries))

	within := func(t *testing.T, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { f(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the operation blocked")
		}
	}
	t.Run("fifo", func(t *testing.T) {
		within(t, func() {
			_, err := sb.ReadFile(ctx, "fifo")
			assert.ErrorIs(t, err, executor.ErrInvalid)
			_, err = sb.EditFile(ctx, "fifo", []executor.Edit{{Insert: "start", Content: ptr("x")}})
			assert.ErrorIs(t, err, executor.ErrInvalid)
			_, err = sb.Stat(ctx, "fifo")
			assert.ErrorIs(t, err, executor.ErrInvalid)
		})
	})
	t.Run("huge file", func(t *testing.T) {
		within(t, func() {
			fi, err := sb.Stat(ctx, "huge")
			require.NoError(t, err)
			assert.Equal(t, int64(8<<30), fi.Size)
			_, err = sb.ReadFile(ctx, "huge")
			assert.ErrorIs(t, err, executor.ErrOutputTooLarge)
			_, err = sb.EditFile(ctx, "huge", []executor.Edit{{Insert: "start", Content: ptr("x")}})
			assert.ErrorIs(t, err, executor.ErrOutputTooLarge)
		})
	})
	t.Run("huge directory", func(t *testing.T) {
		within(t, func() {
			_, err := sb.ListDir(ctx, "many")
			assert.ErrorIs(t, err, executor.ErrOutputTooLarge)
			mustRun(t, sb, "rm many/0")
			list, err := sb.ListDir(ctx, "many")
			require.NoError(t, err, "exactly at the cap")
			assert.Len(t, list, maxEntries)
		})
	})
}

func ptr[T any](v T) *T { return &v }
