package executor_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

const canary = "CANARY: outside the workspace"

// plantOutside makes a directory next to the workspace holding a canary
// file, as the host files a link planted in the sandbox would aim at.
func plantOutside(t *testing.T) (dir, file string) {
	t.Helper()
	dir = t.TempDir()
	file = filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, []byte(canary), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "outside-only"), []byte(canary), 0o644))
	return dir, file
}

// assertOutsideUntouched checks that the outside directory holds exactly
// the two canary files with their content.
func assertOutsideUntouched(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		got, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		assert.Equal(t, canary, string(got), e.Name())
	}
	assert.Equal(t, []string{"file", "outside-only"}, names)
}

func fileSum(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return sha256.Sum256(b)
}

// TestEscapeSymlinkToEtcPasswd plants a link to /etc/passwd as a process
// in the container could, and reads it through every entry point. Writes
// and edits go through a link to a canary file, so a failure cannot damage
// the machine.
func TestEscapeSymlinkToEtcPasswd(t *testing.T) {
	ctx := context.Background()
	ws, dir := newWorkspace(t, executor.WorkspaceOptions{})
	outside, file := plantOutside(t)
	passwd := fileSum(t, "/etc/passwd")
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dir, "passwd")))
	require.NoError(t, os.Symlink("/etc", filepath.Join(dir, "etc")))
	require.NoError(t, os.Symlink(file, filepath.Join(dir, "canary")))

	for _, name := range []string{"passwd", "/workspace/passwd", "etc/passwd", "./etc/../passwd"} {
		_, err := ws.ReadFile(ctx, name)
		assert.ErrorIs(t, err, executor.ErrPathEscapes, "read %s", name)
		_, err = ws.Stat(ctx, name)
		assert.ErrorIs(t, err, executor.ErrPathEscapes, "stat %s", name)
	}
	_, err := ws.ReadFile(ctx, "passwd")
	assert.Contains(t, err.Error(), "symbolic link")
	_, err = ws.ListDir(ctx, "etc")
	assert.ErrorIs(t, err, executor.ErrPathEscapes)

	assert.ErrorIs(t, ws.WriteFile(ctx, "canary", []byte("pwned")), executor.ErrPathEscapes)
	_, err = ws.EditFile(ctx, "canary", []executor.Edit{{Old: "CANARY", New: ptr("pwned")}})
	assert.ErrorIs(t, err, executor.ErrPathEscapes)
	assert.ErrorIs(t, ws.WriteFile(ctx, "etc/agentbox-pwned", []byte("x")), executor.ErrPathEscapes)
	_, err = os.Lstat("/etc/agentbox-pwned")
	assert.ErrorIs(t, err, os.ErrNotExist)

	// The links themselves are listed, not followed.
	list, err := ws.ListDir(ctx, "")
	require.NoError(t, err)
	require.Len(t, list, 3)
	for _, fi := range list {
		assert.False(t, fi.IsDir, fi.Name)
		assert.NotEqual(t, int64(len(canary)), fi.Size, "size of the link, not the target")
	}
	assert.Equal(t, passwd, fileSum(t, "/etc/passwd"))
	assertOutsideUntouched(t, outside)
}

// TestEscapeSymlinkDotDot plants a relative link that climbs out of the
// workspace (../../..) and uses it as a directory.
func TestEscapeSymlinkDotDot(t *testing.T) {
	ctx := context.Background()
	ws, dir := newWorkspace(t, executor.WorkspaceOptions{})
	outside, _ := plantOutside(t)
	rel, err := filepath.Rel(dir, outside)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(rel, ".."))
	require.NoError(t, os.Symlink("../../..", filepath.Join(dir, "up")))
	require.NoError(t, os.Symlink(rel, filepath.Join(dir, "out")))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub", "real"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "real", "file"), []byte("inside"), 0o644))
	// Even a link that stays inside is refused.
	require.NoError(t, os.Symlink("real", filepath.Join(dir, "sub", "inner")))

	for _, name := range []string{"out/file", "up", "up/etc/passwd", "sub/inner/file", "/workspace/out/file"} {
		_, err := ws.ReadFile(ctx, name)
		assert.ErrorIs(t, err, executor.ErrPathEscapes, "read %s", name)
		_, err = ws.ListDir(ctx, name)
		assert.ErrorIs(t, err, executor.ErrPathEscapes, "list %s", name)
		_, err = ws.Stat(ctx, name)
		assert.ErrorIs(t, err, executor.ErrPathEscapes, "stat %s", name)
		_, err = ws.EditFile(ctx, name, []executor.Edit{{Insert: "end", Content: ptr("pwned")}})
		assert.ErrorIs(t, err, executor.ErrPathEscapes, "edit %s", name)
	}
	for _, name := range []string{"out/file", "out/new", "up/new", "sub/inner/new", "out/deeper/new"} {
		assert.ErrorIs(t, ws.WriteFile(ctx, name, []byte("pwned")), executor.ErrPathEscapes, "write %s", name)
	}
	_, err = os.Lstat(filepath.Join(dir, "sub", "real", "new"))
	assert.ErrorIs(t, err, os.ErrNotExist, "nothing written through the inner link")
	assertOutsideUntouched(t, outside)
}

// TestEscapeSwapRace swaps a directory for a link to the outside (and a
// file for a link to the canary) in tight loops, as a process in the
// container could, while the host reads, writes, lists and edits through
// them. Nothing outside may ever be read or written.
func TestEscapeSwapRace(t *testing.T) {
	ops := 100_000
	if testing.Short() {
		ops = 5_000
	}
	ctx := context.Background()
	ws, dir := newWorkspace(t, executor.WorkspaceOptions{})
	outside, file := plantOutside(t)
	rel, err := filepath.Rel(dir, outside)
	require.NoError(t, err)

	p := func(n string) string { return filepath.Join(dir, n) }
	require.NoError(t, os.Mkdir(p("d"), 0o755))
	require.NoError(t, os.WriteFile(p("d/file"), []byte("inside"), 0o644))
	require.NoError(t, os.WriteFile(p("f"), []byte("inside"), 0o644))
	// Alternate absolute and relative (../..) link targets.
	require.NoError(t, os.Symlink(outside, p("dlink-abs")))
	require.NoError(t, os.Symlink(rel, p("dlink-rel")))
	require.NoError(t, os.Symlink(file, p("flink")))

	var stop atomic.Bool
	var swaps atomic.Int64
	var wg sync.WaitGroup
	swap := func(name, parked, link string) {
		// name alternates between the real entry and the link; each rename
		// is atomic, as a process in the container would do it.
		_ = os.Rename(p(name), p(parked))
		_ = os.Rename(p(link), p(name))
		_ = os.Rename(p(name), p(link))
		_ = os.Rename(p(parked), p(name))
		swaps.Add(1)
	}
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			link := "dlink-abs"
			if i%2 == 1 {
				link = "dlink-rel"
			}
			swap("d", "d-parked", link)
			swap("f", "f-parked", "flink")
		}
	})

	var escapes, okOps, refused atomic.Int64
	check := func(data []byte) {
		if strings.Contains(string(data), "CANARY") {
			escapes.Add(1)
		}
	}
	worker := func(n int, seed int) {
		for i := range n {
			var err error
			switch (i + seed) % 6 {
			case 0:
				var b []byte
				b, err = ws.ReadFile(ctx, "d/file")
				check(b)
			case 1:
				var b []byte
				b, err = ws.ReadFile(ctx, "f")
				check(b)
			case 2:
				err = ws.WriteFile(ctx, "d/new", []byte("written"))
			case 3:
				var list []executor.FileInfo
				list, err = ws.ListDir(ctx, "d")
				for _, fi := range list {
					if fi.Name == "outside-only" {
						escapes.Add(1)
					}
				}
			case 4:
				var res executor.EditResult
				res, err = ws.EditFile(ctx, "d/file", []executor.Edit{{Insert: "end", Content: ptr("x")}})
				check([]byte(res.Content))
			case 5:
				var fi executor.FileInfo
				fi, err = ws.Stat(ctx, "f")
				if err == nil && fi.Size == int64(len(canary)) {
					escapes.Add(1)
				}
			}
			if err == nil {
				okOps.Add(1)
			} else {
				refused.Add(1)
			}
		}
	}
	var workers sync.WaitGroup
	workers.Go(func() { worker(ops/2, 0) })
	workers.Go(func() { worker(ops-ops/2, 3) })
	workers.Wait()
	stop.Store(true)
	wg.Wait()

	t.Logf("%d operations (%d succeeded, %d refused) against %d swaps", okOps.Load()+refused.Load(), okOps.Load(), refused.Load(), swaps.Load())
	assert.Zero(t, escapes.Load(), "escapes")
	assert.Positive(t, okOps.Load(), "some operations hit the real entries")
	assert.Positive(t, swaps.Load())
	assertOutsideUntouched(t, outside)
}

// TestEscapeFIFO checks that a FIFO planted in the workspace is refused and
// never blocks the host (nobody opens its other end).
func TestEscapeFIFO(t *testing.T) {
	ctx := context.Background()
	ws, dir := newWorkspace(t, executor.WorkspaceOptions{})
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))

	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := ws.ReadFile(ctx, "fifo")
		assert.ErrorIs(t, err, executor.ErrInvalid)
		assert.Contains(t, err.Error(), "named pipe")
		assert.ErrorIs(t, ws.WriteFile(ctx, "fifo", []byte("x")), executor.ErrInvalid)
		_, err = ws.EditFile(ctx, "fifo", []executor.Edit{{Insert: "end", Content: ptr("x")}})
		assert.ErrorIs(t, err, executor.ErrInvalid)
		_, err = ws.Stat(ctx, "fifo")
		assert.ErrorIs(t, err, executor.ErrInvalid)
		_, err = ws.ListDir(ctx, "fifo")
		assert.ErrorIs(t, err, executor.ErrInvalid)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("an operation on a FIFO blocked")
	}
	fi, err := os.Lstat(filepath.Join(dir, "fifo"))
	require.NoError(t, err)
	assert.Equal(t, os.ModeNamedPipe, fi.Mode().Type(), "the FIFO was not replaced")
}

func TestEscapeSocketAndDevice(t *testing.T) {
	ctx := context.Background()
	ws, dir := newWorkspace(t, executor.WorkspaceOptions{})
	l, err := net.Listen("unix", filepath.Join(dir, "sock"))
	require.NoError(t, err)
	defer func() { _ = l.Close() }()
	_, err = ws.ReadFile(ctx, "sock")
	require.ErrorIs(t, err, executor.ErrInvalid)
	assert.Contains(t, err.Error(), "socket")

	testenv.RequireRoot(t, "mknod")
	// A character device with /dev/zero's numbers: reading it would never end.
	require.NoError(t, syscall.Mknod(filepath.Join(dir, "zero"), syscall.S_IFCHR|0o666, 1<<8|5))
	_, err = ws.ReadFile(ctx, "zero")
	require.ErrorIs(t, err, executor.ErrInvalid)
	assert.Contains(t, err.Error(), "device")
	assert.ErrorIs(t, ws.WriteFile(ctx, "zero", nil), executor.ErrInvalid)
}

// TestEscapeHugeFile reads a sparse file far over the cap: refused at once,
// without reading it.
func TestEscapeHugeFile(t *testing.T) {
	ctx := context.Background()
	ws, dir := newWorkspace(t, executor.WorkspaceOptions{})
	f, err := os.Create(filepath.Join(dir, "huge"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(100<<30))
	require.NoError(t, f.Close())

	start := time.Now()
	_, err = ws.ReadFile(ctx, "huge")
	require.ErrorIs(t, err, executor.ErrOutputTooLarge)
	assert.Contains(t, err.Error(), "MaxFileSize")
	_, err = ws.EditFile(ctx, "huge", []executor.Edit{{Insert: "end", Content: ptr("x")}})
	require.ErrorIs(t, err, executor.ErrOutputTooLarge)
	assert.Less(t, time.Since(start), 5*time.Second)

	// Just over the default cap is refused, just at it is read.
	require.NoError(t, os.Truncate(filepath.Join(dir, "huge"), executor.DefaultMaxFileSize+1))
	_, err = ws.ReadFile(ctx, "huge")
	require.ErrorIs(t, err, executor.ErrOutputTooLarge)
	require.NoError(t, os.Truncate(filepath.Join(dir, "huge"), executor.DefaultMaxFileSize))
	b, err := ws.ReadFile(ctx, "huge")
	require.NoError(t, err)
	assert.Len(t, b, executor.DefaultMaxFileSize)
}

// TestEscapeHugeDirectory lists a directory over the default entry cap.
func TestEscapeHugeDirectory(t *testing.T) {
	ctx := context.Background()
	ws, dir := newWorkspace(t, executor.WorkspaceOptions{})
	big := filepath.Join(dir, "big")
	require.NoError(t, os.Mkdir(big, 0o755))
	for i := range executor.DefaultMaxEntries {
		f, err := os.Create(filepath.Join(big, fmt.Sprintf("f%06d", i)))
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	list, err := ws.ListDir(ctx, "big")
	require.NoError(t, err, "exactly at the cap is fine")
	assert.Len(t, list, executor.DefaultMaxEntries)
	assert.Equal(t, "f000000", list[0].Name, "sorted by name")

	require.NoError(t, os.WriteFile(filepath.Join(big, "one-more"), nil, 0o644))
	_, err = ws.ListDir(ctx, "big")
	require.ErrorIs(t, err, executor.ErrOutputTooLarge)
	assert.Contains(t, err.Error(), "more than 10000 entries")
}

// TestEscapeErrorsAreTyped keeps errors.Is working through the wrappers.
func TestEscapeErrorsAreTyped(t *testing.T) {
	ws, _ := newWorkspace(t, executor.WorkspaceOptions{})
	_, err := ws.ReadFile(context.Background(), "/etc/passwd")
	var pathErr *os.PathError
	assert.False(t, errors.As(err, &pathErr), "refused before any system call")
	assert.ErrorIs(t, err, executor.ErrPathEscapes)
}

// TestEscapeFIFOSwapNeverBlocks swaps a directory for a FIFO in a tight
// loop while the host walks through it: opening a FIFO for reading blocks
// until a writer comes, so every open on the way must be non-blocking or
// directory-only.
func TestEscapeFIFOSwapNeverBlocks(t *testing.T) {
	ops := 20_000
	if testing.Short() {
		ops = 2_000
	}
	ctx := context.Background()
	ws, dir := newWorkspace(t, executor.WorkspaceOptions{})
	p := func(n string) string { return filepath.Join(dir, n) }
	require.NoError(t, os.Mkdir(p("d"), 0o755))
	require.NoError(t, os.WriteFile(p("d/file"), []byte("inside"), 0o644))
	require.NoError(t, os.WriteFile(p("f"), []byte("inside"), 0o644))
	require.NoError(t, syscall.Mkfifo(p("dfifo"), 0o644))
	require.NoError(t, syscall.Mkfifo(p("ffifo"), 0o644))

	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			for _, n := range []string{"d", "f"} {
				_ = os.Rename(p(n), p(n+"-parked"))
				_ = os.Rename(p(n+"fifo"), p(n))
				_ = os.Rename(p(n), p(n+"fifo"))
				_ = os.Rename(p(n+"-parked"), p(n))
			}
		}
	})
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()

	var done atomic.Int64
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for i := range ops {
			switch i % 4 {
			case 0:
				_, _ = ws.ReadFile(ctx, "d/file")
			case 1:
				_, _ = ws.ListDir(ctx, "d")
			case 2:
				_, _ = ws.ReadFile(ctx, "f")
			case 3:
				_ = ws.WriteFile(ctx, "d/new", []byte("x"))
			}
			done.Add(1)
		}
	}()
	select {
	case <-finished:
	case <-time.After(2 * time.Minute):
		// Unblock a reader stuck on a FIFO before failing.
		for _, n := range []string{"d", "dfifo", "f", "ffifo"} {
			if f, err := os.OpenFile(p(n), os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				_ = f.Close()
			}
		}
		t.Fatalf("blocked after %d of %d operations", done.Load(), ops)
	}
}
