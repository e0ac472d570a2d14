package executor_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

// TestWorkspaceNamesCarryNoIDs: names are keyed hashes, distinct per chat
// and per data directory (each has its own key), stable across opens.
func TestWorkspaceNamesCarryNoIDs(t *testing.T) {
	data, other := t.TempDir(), t.TempDir()
	l, err := executor.OpenWorkspaceLayout(data)
	require.NoError(t, err)
	l2, err := executor.OpenWorkspaceLayout(data)
	require.NoError(t, err)
	lo, err := executor.OpenWorkspaceLayout(other)
	require.NoError(t, err)

	const user, chat = "u-mallory-7f3", "c-secret-42"
	name := l.Name(user, chat)
	assert.Len(t, name, 32)
	assert.NotContains(t, name, "mallory")
	assert.NotContains(t, name, "secret")
	assert.Equal(t, name, l2.Name(user, chat), "the key is read back, not made again")
	assert.NotEqual(t, name, lo.Name(user, chat), "another data directory has another key")
	assert.NotEqual(t, name, l.Name(user, "c-secret-43"))
	assert.NotEqual(t, l.Name("ab", "c"), l.Name("a", "bc"), "ids are length-prefixed")

	fi, err := os.Stat(filepath.Join(data, executor.WorkspaceKeyFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	assert.Equal(t, int64(32), fi.Size())
}

// TestWorkspaceKeyRace: gateways opening a fresh data directory at once
// agree on one key.
func TestWorkspaceKeyRace(t *testing.T) {
	data := t.TempDir()
	const n = 16
	names := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			l, err := executor.OpenWorkspaceLayout(data)
			if assert.NoError(t, err) {
				names[i] = l.Name("u", "c")
			}
		})
	}
	wg.Wait()
	for i := range names {
		assert.Equal(t, names[0], names[i])
	}
	entries, err := os.ReadDir(data)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary key file is left behind")
	assert.Equal(t, executor.WorkspaceKeyFile, entries[0].Name())
}

// TestWorkspaceKeyDamaged: a key file of the wrong size is refused with
// what to do, never replaced (that would orphan every workspace).
func TestWorkspaceKeyDamaged(t *testing.T) {
	data := t.TempDir()
	key := filepath.Join(data, executor.WorkspaceKeyFile)
	require.NoError(t, os.WriteFile(key, []byte("short"), 0o600))
	_, err := executor.PrepareWorkspace(data, "u", "c", -1, -1)
	require.ErrorIs(t, err, executor.ErrInvalid)
	assert.Contains(t, err.Error(), "backup")
	b, err := os.ReadFile(key)
	require.NoError(t, err)
	assert.Equal(t, "short", string(b))

	require.NoError(t, os.Remove(key))
	require.NoError(t, os.Symlink(filepath.Join(t.TempDir(), "elsewhere"), key))
	_, err = executor.PrepareWorkspace(data, "u", "c", -1, -1)
	require.Error(t, err, "a symlinked key is not followed")
}

// TestPrepareWorkspaceMigratesLegacyLayout: a workspace of the old layout
// ({data}/workspaces/{user}/chat-{chat}) moves, by rename (same inode,
// nothing copied), to its neutral name on first use; the emptied user
// directory goes, another chat of the user stays where it is until its
// own first use.
func TestPrepareWorkspaceMigratesLegacyLayout(t *testing.T) {
	data := t.TempDir()
	const user = "u-mallory-7f3"
	legacy := filepath.Join(data, executor.LegacyWorkspacesDir, user)
	for _, chat := range []string{"c1", "c2"} {
		dir := filepath.Join(legacy, "chat-"+chat)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "src"), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "src", "main.go"), []byte("package "+chat), 0o600))
	}
	var before syscall.Stat_t
	require.NoError(t, syscall.Stat(filepath.Join(legacy, "chat-c1"), &before))

	dir, err := executor.PrepareWorkspace(data, user, "c1", -1, -1)
	require.NoError(t, err)
	assert.NotContains(t, dir, user)
	b, err := os.ReadFile(filepath.Join(dir, "src", "main.go"))
	require.NoError(t, err, "the files moved with the workspace")
	assert.Equal(t, "package c1", string(b))
	var after syscall.Stat_t
	require.NoError(t, syscall.Stat(dir, &after))
	assert.Equal(t, before.Ino, after.Ino, "renamed, not copied")
	assert.NoDirExists(t, filepath.Join(legacy, "chat-c1"))
	assert.DirExists(t, filepath.Join(legacy, "chat-c2"), "other chats move on their own first use")

	again, err := executor.PrepareWorkspace(data, user, "c1", -1, -1)
	require.NoError(t, err)
	assert.Equal(t, dir, again)

	dir2, err := executor.PrepareWorkspace(data, user, "c2", -1, -1)
	require.NoError(t, err)
	b, err = os.ReadFile(filepath.Join(dir2, "src", "main.go"))
	require.NoError(t, err)
	assert.Equal(t, "package c2", string(b))
	assert.NoDirExists(t, legacy, "the emptied user directory is removed")
}

// TestPrepareWorkspaceLegacyNotADirectory: a legacy entry that is a
// symlink (or a file) is neither followed nor moved; the chat gets a new
// workspace.
func TestPrepareWorkspaceLegacyNotADirectory(t *testing.T) {
	data := t.TempDir()
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("x"), 0o600))
	legacy := filepath.Join(data, executor.LegacyWorkspacesDir, "u")
	require.NoError(t, os.MkdirAll(legacy, 0o700))
	require.NoError(t, os.Symlink(outside, filepath.Join(legacy, "chat-c")))

	dir, err := executor.PrepareWorkspace(data, "u", "c", -1, -1)
	require.NoError(t, err)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "a fresh workspace, not the link's target")
	fi, err := os.Lstat(filepath.Join(legacy, "chat-c"))
	require.NoError(t, err)
	assert.Equal(t, os.ModeSymlink, fi.Mode().Type(), "the link stays where it was")
	assert.FileExists(t, filepath.Join(outside, "secret"))
	assert.False(t, strings.HasPrefix(dir, outside))
}
