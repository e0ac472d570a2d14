package checkpoint_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/checkpoint"
)

// The agent's attacks on the store, one named test each (issue 34's
// hostile list). The agent can run any command in its workspace between
// two checkpoints, and, in these tests' worst case, race the walk.

// TestLargeSparseFile: an 8 GiB fallocate survives a checkpoint without
// filling the store (its zeros are kept as holes) and comes back with its
// size and few blocks.
func TestLargeSparseFile(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 8 GiB")
	}
	ctx := context.Background()
	ws := t.TempDir()
	f, err := os.Create(filepath.Join(ws, "huge.img"))
	require.NoError(t, err)
	if err := unix.Fallocate(int(f.Fd()), 0, 0, 8<<30); err != nil {
		// No room for the blocks, or a file system without fallocate:
		// the same file as a hole.
		t.Logf("fallocate: %v; truncate instead", err)
		require.NoError(t, f.Truncate(8<<30))
	}
	_, err = f.WriteAt([]byte("the end"), 8<<30-7)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	s := open(t, checkpoint.Options{MaxBytes: 64 << 20})
	t0 := time.Now()
	c, err := s.Take(ctx, ws, "1")
	require.NoError(t, err)
	t.Logf("8 GiB sparse file: checkpoint %v, %d new bytes", time.Since(t0), c.NewBytes)
	assert.Less(t, c.NewBytes, int64(1<<20), "zeros are stored as holes")
	assert.Less(t, storeBytes(t, s), int64(64<<20))

	empty := t.TempDir()
	_, err = s.Restore(ctx, empty, c.ID)
	require.NoError(t, err)
	var st unix.Stat_t
	require.NoError(t, unix.Stat(filepath.Join(empty, "huge.img"), &st))
	assert.Equal(t, int64(8<<30), st.Size)
	assert.Less(t, st.Blocks*512, int64(1<<20), "restored sparse")
	tail := make([]byte, 7)
	rf, err := os.Open(filepath.Join(empty, "huge.img"))
	require.NoError(t, err)
	_, err = rf.ReadAt(tail, 8<<30-7)
	require.NoError(t, err)
	require.NoError(t, rf.Close())
	assert.Equal(t, "the end", string(tail))
}

// TestBoundHoldsWhileCopying: a file of data larger than the byte bound
// is refused with ErrTooLarge and a message saying what to do, and the
// store never grows past the bound (plus one copy buffer) while it is
// copied: the bound is checked as the bytes are written, not after.
func TestBoundHoldsWhileCopying(t *testing.T) {
	ctx := context.Background()
	ws := t.TempDir()
	const bound = 8 << 20
	big := make([]byte, 48<<20)
	_, _ = rand.Read(big)
	write(t, ws, "big.bin", string(big), 0o644)
	s := open(t, checkpoint.Options{MaxBytes: bound})

	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, _ := blocksBelow(checkpoint.Dir(s), true)
			if n > peak.Load() {
				peak.Store(n)
			}
			time.Sleep(time.Millisecond)
		}
	})
	_, err := s.Take(ctx, ws, "too big")
	close(stop)
	wg.Wait()
	require.ErrorIs(t, err, checkpoint.ErrTooLarge)
	assert.Contains(t, err.Error(), "raise the bound", "the error says what to do")
	t.Logf("refused: %v; store peak %d bytes against a bound of %d", err, peak.Load(), bound)
	assert.LessOrEqual(t, peak.Load(), int64(bound+2<<20), "the store never passed the bound")
	assert.Less(t, storeBytes(t, s), int64(1<<20), "nothing of the refused checkpoint is kept")
}

// TestManySmallFiles: 200,000 small files checkpoint and come back.
func TestManySmallFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("makes 200,000 files")
	}
	ctx := context.Background()
	ws := t.TempDir()
	const n = 200_000
	for i := range n {
		p := filepath.Join(ws, fmt.Sprintf("d%03d/%d", i%1000, i))
		if i < 1000 {
			require.NoError(t, os.Mkdir(filepath.Dir(p), 0o755))
		}
		require.NoError(t, os.WriteFile(p, []byte(fmt.Sprint(i)), 0o644))
	}
	s := open(t, checkpoint.Options{})
	t0 := time.Now()
	c, err := s.Take(ctx, ws, "1")
	require.NoError(t, err)
	took := time.Since(t0)
	assert.Equal(t, n, c.Files)
	t0 = time.Now()
	again, err := s.Take(ctx, ws, "2")
	require.NoError(t, err)
	retook := time.Since(t0)
	assert.Zero(t, again.NewBytes)
	empty := t.TempDir()
	t0 = time.Now()
	res, err := s.Restore(ctx, empty, c.ID)
	require.NoError(t, err)
	t.Logf("%d files: checkpoint %v, unchanged again %v, restore into an empty workspace %v", n, took, retook, time.Since(t0))
	assert.Equal(t, n+1000, res.Written)
	for _, i := range []int{0, 999, 123_456, n - 1} {
		assert.Equal(t, fmt.Sprint(i), readFile(t, filepath.Join(empty, fmt.Sprintf("d%03d/%d", i%1000, i))))
	}
}

// TestSpecialFilesAreSkipped: FIFOs, devices and sockets are not kept,
// are reported (the manifest's Skipped, the summary's count), are not
// made by a restore, and one the agent leaves where the checkpoint has a
// file or a directory is removed, not followed or written through.
func TestSpecialFilesAreSkipped(t *testing.T) {
	ctx := context.Background()
	ws := t.TempDir()
	write(t, ws, "a.txt", "a", 0o644)
	write(t, ws, "dir/f", "f", 0o644)
	require.NoError(t, unix.Mkfifo(filepath.Join(ws, "fifo"), 0o644))
	want := []checkpoint.Skipped{{Path: "fifo", What: "fifo"}}
	if os.Geteuid() == 0 {
		require.NoError(t, unix.Mknod(filepath.Join(ws, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
		want = append(want, checkpoint.Skipped{Path: "null", What: "character device"})
	}
	sock := filepath.Join(ws, "sock")
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer func() { _ = l.Close() }()
	want = append(want, checkpoint.Skipped{Path: "sock", What: "socket"})

	s := open(t, checkpoint.Options{})
	c, err := s.Take(ctx, ws, "1")
	require.NoError(t, err)
	assert.Equal(t, want, c.Skipped)
	list, err := s.List()
	require.NoError(t, err)
	assert.Equal(t, len(want), list[0].Skipped, "the summary reports them")

	empty := t.TempDir()
	_, err = s.Restore(ctx, empty, c.ID)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a.txt": "file 644 61", "dir": "dir 755", "dir/f": "file 644 66"}, tree(t, empty))

	// The agent puts FIFOs where the checkpoint has a file and a
	// directory: a restore that opened them would block or fail.
	require.NoError(t, os.Remove(filepath.Join(ws, "a.txt")))
	require.NoError(t, unix.Mkfifo(filepath.Join(ws, "a.txt"), 0o644))
	require.NoError(t, os.RemoveAll(filepath.Join(ws, "dir")))
	require.NoError(t, unix.Mkfifo(filepath.Join(ws, "dir"), 0o644))
	require.NoError(t, unix.Mkfifo(filepath.Join(ws, "new-fifo"), 0o644))
	done := make(chan error, 1)
	go func() { _, err := s.Restore(ctx, ws, c.ID); done <- err }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("the restore blocked on a FIFO")
	}
	got := tree(t, ws)
	assert.Equal(t, "file 644 61", got["a.txt"])
	assert.Equal(t, "file 644 66", got["dir/f"])
	assert.NotContains(t, got, "new-fifo", "what no checkpoint has goes")
}

// TestModesTheAgentChanged: files and directories the agent made
// unreadable (mode 000) are checkpointed by the gateway (root, as it runs)
// and come back with their modes; run as another user, the checkpoint
// is refused with an error naming the path.
func TestModesTheAgentChanged(t *testing.T) {
	ctx := context.Background()
	ws := t.TempDir()
	write(t, ws, "locked/secret", "s", 0o644)
	write(t, ws, "nothing", "n", 0o644)
	require.NoError(t, os.Chmod(filepath.Join(ws, "nothing"), 0))
	require.NoError(t, os.Chmod(filepath.Join(ws, "locked/secret"), 0))
	require.NoError(t, os.Chmod(filepath.Join(ws, "locked"), 0))
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(ws, "locked"), 0o755) })
	s := open(t, checkpoint.Options{})
	c, err := s.Take(ctx, ws, "1")
	if os.Geteuid() != 0 {
		require.Error(t, err)
		assert.Contains(t, err.Error(), "locked", "the error names the path")
		return
	}
	require.NoError(t, err)
	empty := t.TempDir()
	_, err = s.Restore(ctx, empty, c.ID)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"nothing": "file 0 6e", "locked": "dir 0", "locked/secret": "file 0 73"}, tree(t, empty))
}

// hostSecret makes a directory outside the workspace holding a secret
// file, secret and dir/secret, for an agent's links to point at.
func hostSecret(t *testing.T) (dir, secret string) {
	t.Helper()
	dir = t.TempDir()
	secret = "host secret " + strings.Repeat("t", 64)
	write(t, dir, "secret", secret, 0o600)
	write(t, dir, "dir/secret", secret, 0o600)
	return dir, secret
}

// TestSwapDuringTake: an entry the agent swaps for a link to the host
// between the walk's stat and its read (a file, a directory) is not read
// through the link: nothing outside the workspace reaches the store.
func TestSwapDuringTake(t *testing.T) {
	ctx := context.Background()
	outside, secret := hostSecret(t)
	ws := t.TempDir()
	write(t, ws, "victim", "mine", 0o644)
	write(t, ws, "sub/x", "x", 0o644)
	checkpoint.SetAfterStat(func(rel string) {
		switch rel {
		case "victim":
			_ = os.Remove(filepath.Join(ws, "victim"))
			_ = os.Symlink(filepath.Join(outside, "secret"), filepath.Join(ws, "victim"))
		case "sub":
			_ = os.RemoveAll(filepath.Join(ws, "sub"))
			_ = os.Symlink(filepath.Join(outside, "dir"), filepath.Join(ws, "sub"))
		}
	})
	defer checkpoint.SetAfterStat(nil)
	s := open(t, checkpoint.Options{})
	c, err := s.Take(ctx, ws, "1")
	require.NoError(t, err)
	for _, e := range c.Entries {
		assert.NotContains(t, []string{"victim", "sub/secret"}, e.Path, "read through the swapped link")
	}
	assertStoreLacks(t, s, secret)
}

// TestRestoreDoesNotFollowPlantedLinks: the agent replaces a file of the
// checkpoint with a link to a host file, and a file's directory with a
// link to another workspace; the restore replaces the links and writes
// nothing through them.
func TestRestoreDoesNotFollowPlantedLinks(t *testing.T) {
	ctx := context.Background()
	outside := t.TempDir()
	write(t, outside, "passwd", "root:x:0:0", 0o644)
	other := t.TempDir() // another chat's workspace
	write(t, other, "notes.md", "theirs", 0o644)
	ws := t.TempDir()
	write(t, ws, "a.txt", "v1", 0o644)
	write(t, ws, "src/notes.md", "mine", 0o644)
	s := open(t, checkpoint.Options{})
	c, err := s.Take(ctx, ws, "1")
	require.NoError(t, err)

	require.NoError(t, os.Remove(filepath.Join(ws, "a.txt")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "passwd"), filepath.Join(ws, "a.txt")))
	require.NoError(t, os.RemoveAll(filepath.Join(ws, "src")))
	require.NoError(t, os.Symlink(other, filepath.Join(ws, "src")))
	_, err = s.Restore(ctx, ws, c.ID)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"passwd": "file 644 726f6f743a783a303a30"}, tree(t, outside))
	assert.Equal(t, map[string]string{"notes.md": "file 644 " + fmt.Sprintf("%x", "theirs")}, tree(t, other))
	assert.Equal(t, map[string]string{"a.txt": "file 644 7631", "src": "dir 755", "src/notes.md": "file 644 " + fmt.Sprintf("%x", "mine")}, tree(t, ws))
}

// TestChatsAreIsolated: through Host, one chat's take, restore and fork
// never read or change another chat's files or store, even with links
// from one workspace into the other's.
func TestChatsAreIsolated(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	layout, err := executor.OpenWorkspaceLayout(data)
	require.NoError(t, err)
	h, err := checkpoint.NewHost(data, layout, -1, -1)
	require.NoError(t, err)
	prep := func(chat string) string {
		ws, err := layout.Prepare("u", chat, os.Getuid(), os.Getgid())
		require.NoError(t, err)
		return ws
	}
	a, b := prep("chat-a"), prep("chat-b")
	write(t, a, "src/a.go", "a", 0o644)
	write(t, b, "src/b.go", "b", 0o644)
	b0 := tree(t, b)
	ca, err := h.TakeCheckpoint(ctx, "u", "chat-a", "1", executor.CheckpointBounds{})
	require.NoError(t, err)
	_, err = h.TakeCheckpoint(ctx, "u", "chat-b", "1", executor.CheckpointBounds{})
	require.NoError(t, err)
	storesBefore := tree(t, filepath.Join(data, checkpoint.StoresDir, layout.Name("u", "chat-b")))

	// Chat a's agent links into chat b's workspace, where its own src
	// was, and adds a file beside.
	require.NoError(t, os.RemoveAll(filepath.Join(a, "src")))
	require.NoError(t, os.Symlink(filepath.Join(b, "src"), filepath.Join(a, "src")))
	require.NoError(t, os.Symlink(b, filepath.Join(a, "b")))
	_, err = h.TakeCheckpoint(ctx, "u", "chat-a", "2", executor.CheckpointBounds{})
	require.NoError(t, err)
	_, err = h.RestoreCheckpoint(ctx, "u", "chat-a", ca.ID)
	require.NoError(t, err)
	_, err = h.ForkCheckpoint(ctx, "u", "chat-a", ca.ID, "u", "chat-c", executor.CheckpointBounds{})
	require.NoError(t, err)
	assert.Equal(t, b0, tree(t, b), "chat b's files are untouched")
	assert.Equal(t, storesBefore, tree(t, filepath.Join(data, checkpoint.StoresDir, layout.Name("u", "chat-b"))), "and its store")
	assert.Equal(t, map[string]string{"src": "dir 755", "src/a.go": "file 644 61"}, tree(t, a))

	// A checkpoint id of chat b's is not chat a's.
	list, _, err := h.Checkpoints(ctx, "u", "chat-b")
	require.NoError(t, err)
	_, err = h.RestoreCheckpoint(ctx, "u", "chat-a", list[0].ID)
	require.ErrorIs(t, err, executor.ErrNotFound)
	for _, bad := range []string{"../chat-b", "chat-b/..", ""} {
		_, err = h.RestoreCheckpoint(ctx, "u", bad, ca.ID)
		assert.Error(t, err, "chat id %q", bad)
	}

	// Listing, restoring and forking from chats that were never taken
	// (a user inventing ids) find nothing and leave nothing on the host.
	stores := filepath.Join(data, checkpoint.StoresDir)
	before, err := os.ReadDir(stores)
	require.NoError(t, err)
	for i := range 3 {
		chat := fmt.Sprint("invented-", i)
		list, head, err := h.Checkpoints(ctx, "u", chat)
		require.NoError(t, err)
		assert.Empty(t, list)
		assert.Empty(t, head)
		_, err = h.RestoreCheckpoint(ctx, "u", chat, ca.ID)
		require.ErrorIs(t, err, executor.ErrNotFound)
		_, err = h.ForkCheckpoint(ctx, "u", chat, ca.ID, "u", chat+"-fork", executor.CheckpointBounds{})
		require.ErrorIs(t, err, executor.ErrNotFound)
	}
	after, err := os.ReadDir(stores)
	require.NoError(t, err)
	assert.Len(t, after, len(before), "no store was made for an invented chat")
}

// TestMemoryBounded: the gateway's heap while it checkpoints and restores
// a 2 GiB workspace (a 2 GiB file with data spread through it, and 20,000
// small files) grows no more than with a 64 MiB file in its place,
// measured in the same run: content streams through fixed buffers,
// whatever a file's size; only the manifest grows, with the file count.
func TestMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 2 GiB")
	}
	ws := t.TempDir()
	for i := range 20_000 {
		write(t, ws, fmt.Sprintf("d%d/%d", i%100, i), fmt.Sprint(i), 0o644)
	}
	small := heapGrowth(t, ws, 64<<20)
	large := heapGrowth(t, ws, 2<<30)
	t.Logf("20,001 files: heap in use grew by at most %d MiB with a 64 MiB file, %d MiB with a 2 GiB one", small>>20, large>>20)
	assert.Less(t, large, small+16<<20, "the heap does not grow with a file's size")
}

// heapGrowth makes ws's big.bin size bytes (1 MiB of data every 64 MiB,
// holes between), checkpoints ws into a new Store and restores it after
// removing big.bin, and returns how far the heap in use grew meanwhile.
func heapGrowth(t *testing.T, ws string, size int64) int64 {
	t.Helper()
	ctx := context.Background()
	f, err := os.Create(filepath.Join(ws, "big.bin"))
	require.NoError(t, err)
	chunk := make([]byte, 1<<20)
	for off := int64(0); off < size; off += 64 << 20 {
		_, _ = rand.Read(chunk)
		_, err = f.WriteAt(chunk, off)
		require.NoError(t, err)
	}
	require.NoError(t, f.Truncate(size))
	require.NoError(t, f.Close())
	s := open(t, checkpoint.Options{MaxBytes: 4 << 30})

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	c, err := s.Take(ctx, ws, "1")
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(ws, "big.bin")))
	_, err = s.Restore(ctx, ws, c.ID)
	require.NoError(t, err)
	close(stop)
	wg.Wait()
	fi, err := os.Stat(filepath.Join(ws, "big.bin"))
	require.NoError(t, err)
	assert.Equal(t, size, fi.Size())
	require.NoError(t, s.Remove())
	return int64(peak.Load()) - int64(base)
}

// TestLostFoundIsTheFileSystems: the lost+found that mkfs makes at the
// root of a block volume's file system (a workspace claim), root's, is
// neither kept by a take nor removed by a restore; one the agent makes
// (not root's, or below the root) is the agent's like any directory.
func TestLostFoundIsTheFileSystems(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to make a directory of another owner")
	}
	ctx := context.Background()
	ws := t.TempDir()
	s := open(t, checkpoint.Options{})
	empty, err := s.Take(ctx, ws, "start")
	require.NoError(t, err)

	write(t, ws, "lost+found/#1234", "fsck's", 0o600)
	require.NoError(t, os.Chmod(filepath.Join(ws, "lost+found"), 0o700))
	write(t, ws, "sub/lost+found/x", "the agent's", 0o644)
	write(t, ws, "a.txt", "a", 0o644)
	c, err := s.Take(ctx, ws, "turn 1")
	require.NoError(t, err)
	var paths []string
	for _, e := range c.Entries {
		paths = append(paths, e.Path)
	}
	assert.Equal(t, []string{"a.txt", "sub", "sub/lost+found", "sub/lost+found/x"}, paths)

	_, err = s.Restore(ctx, ws, empty.ID)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"lost+found": "dir 700", "lost+found/#1234": "file 600 " + fmt.Sprintf("%x", "fsck's")}, tree(t, ws),
		"the file system's lost+found stays")

	// The agent's own, at the root (a workspace that is a directory):
	// kept and restored like any other.
	require.NoError(t, os.RemoveAll(filepath.Join(ws, "lost+found")))
	write(t, ws, "lost+found/mine", "m", 0o644)
	require.NoError(t, os.Chown(filepath.Join(ws, "lost+found"), 1000, 1000))
	c2, err := s.Take(ctx, ws, "turn 2")
	require.NoError(t, err)
	assert.Len(t, c2.Entries, 2, "lost+found and lost+found/mine")
	_, err = s.Restore(ctx, ws, empty.ID)
	require.NoError(t, err)
	assert.Empty(t, tree(t, ws))
}
