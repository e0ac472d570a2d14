//go:build linux

package executor

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWorkspaceNotWorldReadable: the directories and files the host makes
// in a workspace are the sandbox user's alone (finding 8: 0644 files in
// 0755 directories).
func TestWorkspaceNotWorldReadable(t *testing.T) {
	data := t.TempDir()
	dir, err := PrepareWorkspace(data, "u", "c", -1, -1)
	require.NoError(t, err)
	ws, err := OpenWorkspace(dir, WorkspaceOptions{UID: -1, GID: -1})
	require.NoError(t, err)
	defer func() { _ = ws.Close() }()
	require.NoError(t, ws.WriteFile(context.Background(), "sub/dir/f.txt", []byte("secret")))
	for _, p := range []string{
		filepath.Join(data, WorkspacesDir),
		filepath.Join(data, WorkspaceKeyFile),
		dir,
		filepath.Join(dir, "sub"),
		filepath.Join(dir, "sub", "dir"),
		filepath.Join(dir, "sub", "dir", "f.txt"),
	} {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		assert.Zero(t, fi.Mode().Perm()&0o077, "%s is mode %04o", p, fi.Mode().Perm())
	}
}
