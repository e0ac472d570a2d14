package checkpoint_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/executor/checkpoint"
)

// tree is what a workspace holds, for comparisons: path -> description
// (kind, mode, content or link target).
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		if p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		require.NoError(t, err)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "link " + target
		case fi.IsDir():
			out[rel] = fmt.Sprintf("dir %o", fi.Mode().Perm())
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			out[rel] = fmt.Sprintf("file %o %x", fi.Mode()&0o7777, b)
		default:
			out[rel] = "special " + fi.Mode().Type().String()
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

func write(t *testing.T, dir, name, content string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), mode))
	require.NoError(t, os.Chmod(p, mode))
}

func open(t *testing.T, o checkpoint.Options) *checkpoint.Store {
	t.Helper()
	if o.UID == 0 && o.GID == 0 {
		o.UID, o.GID = -1, -1
	}
	s, err := checkpoint.Open(filepath.Join(t.TempDir(), "store"), o)
	require.NoError(t, err)
	return s
}

// TestRoundTrip: what an agent can leave in a workspace survives a
// checkpoint and a restore: files with their modes (setuid bits and all),
// empty directories, links (dangling and outside ones, kept as links),
// odd names (unicode, a newline, a 255-byte component), an empty file, a
// sparse file; a FIFO is not kept and is reported. Restoring an earlier
// checkpoint over a changed workspace puts back exactly its tree.
func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	ws := t.TempDir()
	write(t, ws, "a.txt", "v1\n", 0o644)
	write(t, ws, "bin/run.sh", "#!/bin/sh\necho hi\n", 0o755)
	write(t, ws, "odd/ünïcödé ✓.txt", "u", 0o600)
	write(t, ws, "odd/new\nline", "n", 0o640)
	write(t, ws, "odd/"+strings.Repeat("x", 255), "long", 0o644)
	write(t, ws, "empty", "", 0o644)
	write(t, ws, "setuid", "s", 0o4755)
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "emptydir/nested"), 0o750))
	require.NoError(t, os.Symlink("a.txt", filepath.Join(ws, "rel-link")))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(ws, "abs-link")))
	require.NoError(t, os.Symlink("nowhere", filepath.Join(ws, "dangling")))
	sparse, err := os.Create(filepath.Join(ws, "sparse.img"))
	require.NoError(t, err)
	_, err = sparse.WriteAt([]byte("head"), 0)
	require.NoError(t, err)
	_, err = sparse.WriteAt([]byte("tail"), 16<<20)
	require.NoError(t, err)
	require.NoError(t, sparse.Close())
	require.NoError(t, unix.Mkfifo(filepath.Join(ws, "fifo"), 0o644))
	original := tree(t, ws)

	s := open(t, checkpoint.Options{})
	c1, err := s.Take(ctx, ws, "turn 1")
	require.NoError(t, err)
	require.Len(t, c1.Skipped, 1)
	assert.Equal(t, checkpoint.Skipped{Path: "fifo", What: "fifo"}, c1.Skipped[0])
	assert.Less(t, c1.NewBytes, int64(1<<20), "the sparse file's hole is not stored")

	// The agent's turn 2: changes, additions, removals, a mode, a file
	// that becomes a link to the host, a directory that becomes a file.
	write(t, ws, "a.txt", "v2\n", 0o644)
	write(t, ws, "b.txt", "new\n", 0o644)
	require.NoError(t, os.Remove(filepath.Join(ws, "empty")))
	require.NoError(t, os.Chmod(filepath.Join(ws, "bin/run.sh"), 0o600))
	require.NoError(t, os.Remove(filepath.Join(ws, "setuid")))
	require.NoError(t, os.Symlink("/etc/shadow", filepath.Join(ws, "setuid")))
	require.NoError(t, os.RemoveAll(filepath.Join(ws, "emptydir")))
	write(t, ws, "emptydir", "now a file", 0o644)
	changed := tree(t, ws)
	c2, err := s.Take(ctx, ws, "turn 2")
	require.NoError(t, err)
	assert.Equal(t, c1.ID, c2.Parent)
	assert.Equal(t, 7, c2.Changed, "a.txt, b.txt, empty, bin/run.sh, setuid, emptydir, emptydir/nested")

	res, err := s.Restore(ctx, ws, c1.ID)
	require.NoError(t, err)
	delete(original, "fifo")
	got := tree(t, ws)
	delete(got, "fifo")
	assert.Equal(t, original, got, "the workspace is turn 1's again")
	assert.Positive(t, res.Written)
	assert.Positive(t, res.Removed)

	_, err = s.Restore(ctx, ws, c2.ID)
	require.NoError(t, err)
	got = tree(t, ws)
	delete(changed, "fifo")
	delete(got, "fifo")
	assert.Equal(t, changed, got, "and turn 2's")

	var st unix.Stat_t
	require.NoError(t, unix.Stat(filepath.Join(ws, "sparse.img"), &st))
	assert.Less(t, st.Blocks*512, int64(1<<20), "a restored sparse file stays sparse")
}

// TestUnchangedFilesAreNotStoredAgain: a checkpoint after a turn that
// changed nothing adds nothing to the store; after one that changed ten
// files, it adds about their size.
func TestUnchangedFilesAreNotStoredAgain(t *testing.T) {
	ctx := context.Background()
	ws := t.TempDir()
	for i := range 200 {
		write(t, ws, fmt.Sprintf("d%d/f%d", i%10, i), strings.Repeat("x", 1000+i), 0o644)
	}
	s := open(t, checkpoint.Options{})
	first, err := s.Take(ctx, ws, "1")
	require.NoError(t, err)
	assert.Equal(t, 200, first.Files)
	again, err := s.Take(ctx, ws, "2")
	require.NoError(t, err)
	assert.Zero(t, again.NewBytes)
	assert.Zero(t, again.Changed)
	for i := range 10 {
		write(t, ws, fmt.Sprintf("d%d/f%d", i%10, i), strings.Repeat("y", 4096), 0o644)
	}
	third, err := s.Take(ctx, ws, "3")
	require.NoError(t, err)
	assert.Equal(t, 10, third.Changed)
	assert.LessOrEqual(t, third.NewBytes, int64(10*8192), "about the ten files")
	list, err := s.List()
	require.NoError(t, err)
	assert.Len(t, list, 3)
}

// TestLinksAreNeverFollowed: a checkpoint stores links as links and
// reads nothing outside the workspace; a restore over a workspace whose
// directories the agent replaced with links to the host writes and removes
// nothing outside it.
func TestLinksAreNeverFollowed(t *testing.T) {
	ctx := context.Background()
	outside := t.TempDir()
	secret := "host secret " + strings.Repeat("s", 100)
	write(t, outside, "secret", secret, 0o600)
	write(t, outside, "keep/file", "keep", 0o644)

	ws := t.TempDir()
	write(t, ws, "src/main.go", "package main", 0o644)
	write(t, ws, "gone/x", "x", 0o644)
	s := open(t, checkpoint.Options{})
	c1, err := s.Take(ctx, ws, "1")
	require.NoError(t, err)

	// The agent plants links: a directory of the checkpoint becomes a
	// link to the host, a new link points at the secret, another at a
	// host directory that a removal could follow.
	require.NoError(t, os.RemoveAll(filepath.Join(ws, "src")))
	require.NoError(t, os.Symlink(outside, filepath.Join(ws, "src")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(ws, "steal")))
	require.NoError(t, os.RemoveAll(filepath.Join(ws, "gone")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "keep"), filepath.Join(ws, "gone")))
	c2, err := s.Take(ctx, ws, "2")
	require.NoError(t, err)
	for _, e := range c2.Entries {
		assert.NotEqual(t, checkpoint.KindFile, e.Kind, "%s: only links, no file read through them", e.Path)
	}
	assertStoreLacks(t, s, secret)

	_, err = s.Restore(ctx, ws, c1.ID)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"secret": "file 600 " + fmt.Sprintf("%x", secret), "keep": "dir 755", "keep/file": "file 644 6b656570"}, tree(t, outside),
		"nothing outside the workspace was written or removed")
	assert.Equal(t, "package main", readFile(t, filepath.Join(ws, "src/main.go")))
	fi, err := os.Lstat(filepath.Join(ws, "src"))
	require.NoError(t, err)
	assert.True(t, fi.IsDir(), "the link became the directory again")
	assert.NoFileExists(t, filepath.Join(ws, "steal"))
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(b)
}

// assertStoreLacks fails when any file of the store holds text.
func assertStoreLacks(t *testing.T, s *checkpoint.Store, text string) {
	t.Helper()
	dir := checkpoint.Dir(s)
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		if d.Type().IsRegular() {
			assert.NotContains(t, readFile(t, p), text, "%s holds what only a followed link could have read", p)
		}
		return nil
	}))
}

// TestBounds: the store keeps MaxCheckpoints, oldest out at once, and
// collects the objects only they used within CollectEvery evictions; a
// checkpoint whose new content alone passes MaxBytes is refused and
// leaves nothing behind, the earlier ones intact.
func TestBounds(t *testing.T) {
	ctx := context.Background()
	ws := t.TempDir()
	s := open(t, checkpoint.Options{MaxCheckpoints: 3, MaxBytes: 4 << 20})
	var ids []string
	take := func(i int) {
		b := make([]byte, 256<<10)
		_, _ = rand.Read(b)
		write(t, ws, "blob", string(b), 0o644)
		m, err := s.Take(ctx, ws, fmt.Sprint(i))
		require.NoError(t, err)
		ids = append(ids, m.ID)
	}
	for i := range 5 {
		take(i)
	}
	list, err := s.List()
	require.NoError(t, err)
	require.Len(t, list, 3)
	assert.Equal(t, ids[2:], []string{list[0].ID, list[1].ID, list[2].ID})
	_, err = s.Manifest(ids[0])
	assert.ErrorIs(t, err, checkpoint.ErrNotFound, "an evicted checkpoint is gone at once")
	used, err := s.Used()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, used+16<<10, storeBytes(t, s), "Used counts what is not collected yet (but the index and head files)")
	assert.Greater(t, storeBytes(t, s), int64(4*(256<<10)), "the evicted checkpoints' objects wait for the collection")
	for i := 5; i < 3+checkpoint.CollectEvery; i++ {
		take(i)
	}
	assert.Less(t, storeBytes(t, s), int64(4*(256<<10)), "the evicted checkpoints' objects are collected")
	used, err = s.Used()
	require.NoError(t, err)
	assert.InDelta(t, storeBytes(t, s), used, 16<<10, "and Used is exact again (but for the index and head files)")

	big := make([]byte, 5<<20)
	_, _ = rand.Read(big)
	write(t, ws, "big", string(big), 0o644)
	before := storeBytes(t, s)
	_, err = s.Take(ctx, ws, "too big")
	require.ErrorIs(t, err, checkpoint.ErrTooLarge)
	assert.LessOrEqual(t, storeBytes(t, s), before, "nothing of the refused checkpoint is kept")
	list, err = s.List()
	require.NoError(t, err)
	assert.Len(t, list, 3)
	_, err = s.Restore(ctx, ws, list[2].ID)
	require.NoError(t, err, "the earlier checkpoints still restore")
	assert.NoFileExists(t, filepath.Join(ws, "big"))
}

func storeBytes(t *testing.T, s *checkpoint.Store) int64 {
	t.Helper()
	n, err := blocksBelow(checkpoint.Dir(s), false)
	require.NoError(t, err)
	return n
}

// blocksBelow is the disk space the files below dir take; with racing,
// files that vanish meanwhile are no error.
func blocksBelow(dir string, racing bool) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			var fi os.FileInfo
			if fi, err = d.Info(); err == nil {
				n += fi.Sys().(*syscall.Stat_t).Blocks * 512
			}
		}
		if racing {
			return nil
		}
		return err
	})
	return n, err
}

// TestRestoreUnknownCheckpoint: an id that is not a checkpoint (never
// taken, evicted, or a path) is ErrNotFound, and the workspace is left as
// it is.
func TestRestoreUnknownCheckpoint(t *testing.T) {
	ws := t.TempDir()
	write(t, ws, "a", "a", 0o644)
	s := open(t, checkpoint.Options{})
	for _, id := range []string{"", "ck_0000000000000deadbeef0", "../../etc/passwd", "ck_" + strings.Repeat("0", 21)} {
		_, err := s.Restore(context.Background(), ws, id)
		assert.ErrorIs(t, err, checkpoint.ErrNotFound, id)
	}
	assert.Equal(t, "a", readFile(t, filepath.Join(ws, "a")))
}

// TestOwnership: what a restore makes belongs to the sandbox user.
func TestOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	ctx := context.Background()
	ws := t.TempDir()
	write(t, ws, "d/f", "x", 0o644)
	s := open(t, checkpoint.Options{UID: 100000, GID: 100000})
	c, err := s.Take(ctx, ws, "1")
	require.NoError(t, err)
	require.NoError(t, os.RemoveAll(filepath.Join(ws, "d")))
	_, err = s.Restore(ctx, ws, c.ID)
	require.NoError(t, err)
	for _, p := range []string{"d", "d/f"} {
		fi, err := os.Lstat(filepath.Join(ws, p))
		require.NoError(t, err)
		st := fi.Sys().(*syscall.Stat_t)
		assert.Equal(t, [2]uint32{100000, 100000}, [2]uint32{st.Uid, st.Gid}, p)
	}
}

// TestHardLinksAndManyFiles: files sharing an inode come back as separate
// files with the same content; a workspace of many small files round
// trips.
func TestHardLinksAndManyFiles(t *testing.T) {
	ctx := context.Background()
	ws := t.TempDir()
	write(t, ws, "orig", "shared", 0o644)
	require.NoError(t, os.Link(filepath.Join(ws, "orig"), filepath.Join(ws, "hard")))
	n := 20_000
	if testing.Short() {
		n = 2_000
	}
	for i := range n {
		write(t, ws, fmt.Sprintf("many/%03d/%d", i%100, i), fmt.Sprint(i), 0o644)
	}
	want := tree(t, ws)
	s := open(t, checkpoint.Options{})
	t0 := time.Now()
	c, err := s.Take(ctx, ws, "1")
	require.NoError(t, err)
	took := time.Since(t0)
	assert.Equal(t, n+2, c.Files)
	empty := t.TempDir()
	t0 = time.Now()
	_, err = s.Restore(ctx, empty, c.ID)
	require.NoError(t, err)
	t.Logf("%d files: checkpoint %v, restore into an empty workspace %v", n+2, took, time.Since(t0))
	assert.Equal(t, want, tree(t, empty))
	var a, b unix.Stat_t
	require.NoError(t, unix.Stat(filepath.Join(empty, "orig"), &a))
	require.NoError(t, unix.Stat(filepath.Join(empty, "hard"), &b))
	assert.NotEqual(t, a.Ino, b.Ino, "hard links come back as separate files")
}

// TestRecord: a checkpoint recorded without a walk is an empty
// workspace's, as a Take of one: the next Take is its child and sees
// every file as a change, and restoring it empties the workspace. A
// Store that has checkpoints is not changed by a Record, and an id Take
// could not have made is refused.
func TestRecord(t *testing.T) {
	ctx := context.Background()
	ws := t.TempDir()
	s := open(t, checkpoint.Options{})
	created := time.Now().Add(-time.Minute).Round(0)
	start := checkpoint.NewID(created)
	require.NoError(t, s.Record(start, "start", created))
	list, err := s.List()
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, checkpoint.Summary{ID: start, Label: "start", Created: list[0].Created}, list[0])
	assert.True(t, created.Equal(list[0].Created))
	assert.Equal(t, start, s.Head())

	write(t, ws, "a.txt", "v1\n", 0o644)
	write(t, ws, "d/b.txt", "b\n", 0o600)
	c1, err := s.Take(ctx, ws, "turn 1")
	require.NoError(t, err)
	assert.Equal(t, start, c1.Parent)
	assert.Equal(t, 3, c1.Changed, "a.txt, d and d/b.txt")

	require.NoError(t, s.Record(checkpoint.NewID(time.Now()), "again", time.Now()), "a Store that has checkpoints is left alone")
	list, err = s.List()
	require.NoError(t, err)
	assert.Len(t, list, 2)

	res, err := s.Restore(ctx, ws, start)
	require.NoError(t, err)
	assert.Positive(t, res.Removed)
	assert.Empty(t, tree(t, ws), "the start is an empty workspace")

	for _, id := range []string{"", "ck_1", "../../etc", start + "0", "ck_000000000000zzzzzzzzz"} {
		err := open(t, checkpoint.Options{}).Record(id, "x", time.Now())
		require.Error(t, err, "%q", id)
		assert.Contains(t, err.Error(), "not a checkpoint id")
	}
}
