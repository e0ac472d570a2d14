package executor_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// newWorkspace opens a Workspace on a fresh directory owned by the test.
func newWorkspace(t testing.TB, opts executor.WorkspaceOptions) (*executor.Workspace, string) {
	t.Helper()
	dir := t.TempDir()
	if opts.UID == 0 && opts.GID == 0 {
		opts.UID, opts.GID = -1, -1
	}
	ws, err := executor.OpenWorkspace(dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ws.Close() })
	return ws, dir
}

func TestValidateID(t *testing.T) {
	tests := map[string]struct {
		id      string
		wantErr string
	}{
		"simple":            {id: "alice"},
		"all allowed chars": {id: "A-z_0.9"},
		"max length":        {id: strings.Repeat("a", 128)},
		"empty":             {id: "", wantErr: "is empty"},
		"too long":          {id: strings.Repeat("a", 129), wantErr: "129 characters"},
		"dot":               {id: ".", wantErr: "starts with"},
		"dotdot":            {id: "..", wantErr: "starts with"},
		"leading dot":       {id: ".hidden", wantErr: "starts with"},
		"leading dash":      {id: "-rf", wantErr: "starts with"},
		"slash":             {id: "a/b", wantErr: "only [A-Za-z0-9_.-]"},
		"nul":               {id: "a\x00", wantErr: "only [A-Za-z0-9_.-]"},
		"space":             {id: "a b", wantErr: "only [A-Za-z0-9_.-]"},
		"unicode":           {id: "é", wantErr: "only [A-Za-z0-9_.-]"},
		// The message names the rune the client sent and its byte offset,
		// not the rune's first byte read as Latin-1 ('Ã' for 'ü').
		"unicode named":  {id: "jürgen", wantErr: `has 'ü' (U+00FC) at byte 1`},
		"invalid utf-8":  {id: "a\xffb", wantErr: `(U+FFFD) at byte 1`},
		"unicode at end": {id: "ab€", wantErr: `has '€' (U+20AC) at byte 2`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := executor.ValidateID("user id", tc.id)
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, executor.ErrInvalid)
			assert.Contains(t, err.Error(), "user id")
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

func TestPrepareWorkspace(t *testing.T) {
	data := t.TempDir()
	dir, err := executor.PrepareWorkspace(data, "alice", "c1", -1, -1)
	require.NoError(t, err)
	want, err := executor.WorkspaceDir(data, "alice", "c1")
	require.NoError(t, err)
	assert.Equal(t, want, dir)
	assert.Equal(t, filepath.Join(data, executor.WorkspacesDir), filepath.Dir(dir))
	assert.Regexp(t, `^[0-9a-f]{32}$`, filepath.Base(dir), "the name is a hash, no id")
	fi, err := os.Lstat(dir)
	require.NoError(t, err)
	assert.True(t, fi.IsDir())

	again, err := executor.PrepareWorkspace(data, "alice", "c1", -1, -1)
	require.NoError(t, err, "an existing workspace is reused")
	assert.Equal(t, dir, again)
}

func TestPrepareWorkspaceRefusesBadIDs(t *testing.T) {
	data := t.TempDir()
	_, err := executor.PrepareWorkspace(data, "../x", "c1", -1, -1)
	require.ErrorIs(t, err, executor.ErrInvalid)
	assert.Contains(t, err.Error(), "user id")
	_, err = executor.PrepareWorkspace(data, "alice", "a/b", -1, -1)
	require.ErrorIs(t, err, executor.ErrInvalid)
	assert.Contains(t, err.Error(), "chat id")
	entries, err := os.ReadDir(data)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing is created for a bad id")
}

func TestPrepareWorkspaceRefusesSymlinkedWorkspacesDir(t *testing.T) {
	data := t.TempDir()
	outside := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(data, executor.WorkspacesDir)))

	_, err := executor.PrepareWorkspace(data, "alice", "c1", -1, -1)
	require.ErrorIs(t, err, executor.ErrPathEscapes)
	entries, err := os.ReadDir(outside)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing is created through the link")
}

func TestPrepareWorkspaceChownsNewDirs(t *testing.T) {
	testenv.RequireRoot(t, "chown to another user")
	data := t.TempDir()
	dir, err := executor.PrepareWorkspace(data, "alice", "c1", 1000, 1001)
	require.NoError(t, err)
	uid, gid := owner(t, dir)
	assert.Equal(t, [2]int{1000, 1001}, [2]int{uid, gid}, dir)
	uid, _ = owner(t, filepath.Join(data, executor.WorkspacesDir))
	assert.Equal(t, 0, uid, "the shared workspaces directory stays the gateway's")
}

func TestWorkspaceRoundTrip(t *testing.T) {
	ctx := context.Background()
	ws, dir := newWorkspace(t, executor.WorkspaceOptions{})

	require.NoError(t, ws.WriteFile(ctx, "/workspace/src/deep/a.txt", []byte("hello")))
	got, err := os.ReadFile(filepath.Join(dir, "src", "deep", "a.txt"))
	require.NoError(t, err)
	assert.Equal(t, "hello", string(got))

	for _, name := range []string{"src/deep/a.txt", "/workspace/src/deep/a.txt", "./src//deep/../deep/a.txt"} {
		got, err := ws.ReadFile(ctx, name)
		require.NoError(t, err, name)
		assert.Equal(t, "hello", string(got), name)
	}

	require.NoError(t, ws.WriteFile(ctx, "src/deep/a.txt", []byte("bye")))
	got, err = ws.ReadFile(ctx, "src/deep/a.txt")
	require.NoError(t, err)
	assert.Equal(t, "bye", string(got))

	fi, err := ws.Stat(ctx, "src/deep/a.txt")
	require.NoError(t, err)
	assert.Equal(t, "a.txt", fi.Name)
	assert.Equal(t, int64(3), fi.Size)
	assert.False(t, fi.IsDir)

	root, err := ws.Stat(ctx, "/workspace")
	require.NoError(t, err)
	assert.True(t, root.IsDir)

	list, err := ws.ListDir(ctx, "/workspace/src")
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "deep", list[0].Name)
	assert.True(t, list[0].IsDir)

	top, err := ws.ListDir(ctx, "")
	require.NoError(t, err)
	require.Len(t, top, 1, "no temporary files are left behind")
	assert.Equal(t, "src", top[0].Name)
	assert.Equal(t, dir, ws.Dir())
}

func TestWorkspaceWriteKeepsMode(t *testing.T) {
	ctx := context.Background()
	ws, dir := newWorkspace(t, executor.WorkspaceOptions{})
	p := filepath.Join(dir, "run.sh")
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755))
	require.NoError(t, os.Chmod(p, 0o751))
	require.NoError(t, ws.WriteFile(ctx, "run.sh", []byte("#!/bin/sh\necho\n")))
	fi, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o751), fi.Mode().Perm())
}

func TestWorkspaceWriteOwnsNewFiles(t *testing.T) {
	testenv.RequireRoot(t, "chown to another user")
	ctx := context.Background()
	ws, dir := newWorkspace(t, executor.WorkspaceOptions{UID: 1000, GID: 1000})
	require.NoError(t, ws.WriteFile(ctx, "new/dir/f.txt", []byte("x")))
	for _, p := range []string{"new", "new/dir", "new/dir/f.txt"} {
		uid, gid := owner(t, filepath.Join(dir, p))
		assert.Equal(t, [2]int{1000, 1000}, [2]int{uid, gid}, p)
	}
	// An existing file keeps its owner.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mine.txt"), []byte("x"), 0o644))
	require.NoError(t, os.Chown(filepath.Join(dir, "mine.txt"), 1234, 1234))
	require.NoError(t, ws.WriteFile(ctx, "mine.txt", []byte("y")))
	uid, gid := owner(t, filepath.Join(dir, "mine.txt"))
	assert.Equal(t, [2]int{1234, 1234}, [2]int{uid, gid})
}

func TestWorkspaceErrors(t *testing.T) {
	ctx := context.Background()
	ws, dir := newWorkspace(t, executor.WorkspaceOptions{MaxFileSize: 10, MaxEntries: 3})
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("1234"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "big"), []byte("12345678901"), 0o644))

	tests := map[string]struct {
		op      func() error
		want    error
		message string
	}{
		"absolute outside": {op: func() error { _, err := ws.ReadFile(ctx, "/etc/passwd"); return err },
			want: executor.ErrPathEscapes, message: "outside /workspace"},
		"workspace prefix lookalike": {op: func() error { _, err := ws.ReadFile(ctx, "/workspacex/f"); return err },
			want: executor.ErrPathEscapes, message: "outside /workspace"},
		"dotdot": {op: func() error { _, err := ws.ReadFile(ctx, "../f"); return err },
			want: executor.ErrPathEscapes, message: `".."`},
		"dotdot after dir": {op: func() error { _, err := ws.ReadFile(ctx, "/workspace/d/../../f"); return err },
			want: executor.ErrPathEscapes, message: `".."`},
		"nul byte": {op: func() error { _, err := ws.ReadFile(ctx, "f\x00"); return err },
			want: executor.ErrPathEscapes, message: "NUL"},
		"write dotdot": {op: func() error { return ws.WriteFile(ctx, "../x", []byte("x")) },
			want: executor.ErrPathEscapes, message: `".."`},
		"missing file": {op: func() error { _, err := ws.ReadFile(ctx, "nope"); return err },
			want: executor.ErrNotFound, message: "nope"},
		"missing parent": {op: func() error { _, err := ws.ReadFile(ctx, "nope/f"); return err },
			want: executor.ErrNotFound, message: "nope"},
		"stat missing": {op: func() error { _, err := ws.Stat(ctx, "nope"); return err },
			want: executor.ErrNotFound},
		"list missing": {op: func() error { _, err := ws.ListDir(ctx, "nope"); return err },
			want: executor.ErrNotFound},
		"read dir": {op: func() error { _, err := ws.ReadFile(ctx, "d"); return err },
			want: executor.ErrInvalid, message: "is a directory"},
		"read root": {op: func() error { _, err := ws.ReadFile(ctx, "/workspace"); return err },
			want: executor.ErrInvalid, message: "names a directory"},
		"write dir name": {op: func() error { return ws.WriteFile(ctx, "newdir/", []byte("x")) },
			want: executor.ErrInvalid, message: "names a directory"},
		"read dir name": {op: func() error { _, err := ws.ReadFile(ctx, "f/"); return err },
			want: executor.ErrInvalid, message: "names a directory"},
		"list file": {op: func() error { _, err := ws.ListDir(ctx, "f"); return err },
			want: executor.ErrInvalid, message: "not a directory"},
		"file as parent": {op: func() error { return ws.WriteFile(ctx, "f/x", []byte("x")) },
			want: executor.ErrInvalid, message: "not a directory"},
		"write over dir": {op: func() error { return ws.WriteFile(ctx, "d", []byte("x")) },
			want: executor.ErrInvalid, message: "is a directory"},
		"read over cap": {op: func() error { _, err := ws.ReadFile(ctx, "big"); return err },
			want: executor.ErrOutputTooLarge, message: "11 bytes"},
		"write over cap": {op: func() error { return ws.WriteFile(ctx, "w", []byte("12345678901")) },
			want: executor.ErrOutputTooLarge, message: "11 bytes"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.op()
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), tc.message)
		})
	}
}

func TestWorkspaceHonoursContext(t *testing.T) {
	ws, _ := newWorkspace(t, executor.WorkspaceOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := ws.ReadFile(ctx, "f")
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, ws.WriteFile(ctx, "f", nil), context.Canceled)
	_, err = ws.ListDir(ctx, "")
	assert.ErrorIs(t, err, context.Canceled)
	_, err = ws.Stat(ctx, "")
	assert.ErrorIs(t, err, context.Canceled)
	_, err = ws.EditFile(ctx, "f", nil)
	assert.ErrorIs(t, err, context.Canceled)
	_, err = os.Lstat(filepath.Join(ws.Dir(), "f"))
	assert.ErrorIs(t, err, os.ErrNotExist, "nothing was written")
}

func TestWorkspaceCloseIdempotent(t *testing.T) {
	ws, _ := newWorkspace(t, executor.WorkspaceOptions{})
	require.NoError(t, ws.Close())
	assert.NoError(t, ws.Close())
	_, err := ws.ReadFile(context.Background(), "f")
	assert.Error(t, err)
}

func TestOpenWorkspaceMissing(t *testing.T) {
	_, err := executor.OpenWorkspace(filepath.Join(t.TempDir(), "nope"), executor.WorkspaceOptions{UID: -1, GID: -1})
	require.ErrorIs(t, err, executor.ErrNotFound)
	assert.Contains(t, err.Error(), "PrepareWorkspace")
}

// TestWorkspaceWriteIsAtomic checks that readers see the old or the new
// content of a file being rewritten, never a mix or a truncated file.
func TestWorkspaceWriteIsAtomic(t *testing.T) {
	ctx := context.Background()
	ws, _ := newWorkspace(t, executor.WorkspaceOptions{})
	a, b := bytes.Repeat([]byte("a"), 256<<10), bytes.Repeat([]byte("b"), 256<<10)
	require.NoError(t, ws.WriteFile(ctx, "f", a))

	var wg sync.WaitGroup
	stop := make(chan struct{})
	defer func() { close(stop); wg.Wait() }()
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			data := a
			if i%2 == 1 {
				data = b
			}
			assert.NoError(t, ws.WriteFile(ctx, "f", data))
		}
	})
	for range 300 {
		got, err := ws.ReadFile(ctx, "f")
		require.NoError(t, err)
		if !bytes.Equal(got, a) && !bytes.Equal(got, b) {
			t.Fatalf("read a torn file of %d bytes", len(got))
		}
	}
	close(stop)
	wg.Wait()
	stop = make(chan struct{})
	list, err := ws.ListDir(ctx, "")
	require.NoError(t, err)
	assert.Len(t, list, 1, "no temporary files are left behind")
}
