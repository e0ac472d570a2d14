package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

// TestWorkspaceRestoreFile plants, for a host-owned file, each thing an
// agent can leave in its way (in a parent directory or at the file itself)
// with a victim outside the workspace behind every link: WriteFile refuses
// them all, RestoreFile replaces them, the victim is untouched and a second
// restore is a plain write.
func TestWorkspaceRestoreFile(t *testing.T) {
	const name = ".agentbox/sub/system-prompt.md"
	tests := map[string]func(t *testing.T, dir, victim string){
		"final symlink to a file outside": func(t *testing.T, dir, victim string) {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, ".agentbox/sub"), 0o755))
			require.NoError(t, os.Symlink(filepath.Join(victim, "secret"), filepath.Join(dir, name)))
		},
		"final dangling symlink": func(t *testing.T, dir, victim string) {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, ".agentbox/sub"), 0o755))
			require.NoError(t, os.Symlink(filepath.Join(victim, "new-file"), filepath.Join(dir, name)))
		},
		"final FIFO": func(t *testing.T, dir, _ string) {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, ".agentbox/sub"), 0o755))
			require.NoError(t, syscall.Mkfifo(filepath.Join(dir, name), 0o644))
		},
		"final directory with a link inside": func(t *testing.T, dir, victim string) {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, name, "deep"), 0o755))
			require.NoError(t, os.Symlink(victim, filepath.Join(dir, name, "deep", "out")))
		},
		"final unreadable file": func(t *testing.T, dir, _ string) {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, ".agentbox/sub"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("planted"), 0o000))
		},
		"top directory symlinked outside": func(t *testing.T, dir, victim string) {
			require.NoError(t, os.MkdirAll(filepath.Join(victim, "sub"), 0o755))
			require.NoError(t, os.Symlink(victim, filepath.Join(dir, ".agentbox")))
		},
		"middle directory symlinked inside": func(t *testing.T, dir, _ string) {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, ".agentbox", "real"), 0o755))
			require.NoError(t, os.Symlink("real", filepath.Join(dir, ".agentbox", "sub")))
		},
		"top directory a FIFO": func(t *testing.T, dir, _ string) {
			require.NoError(t, syscall.Mkfifo(filepath.Join(dir, ".agentbox"), 0o644))
		},
		"middle directory a file": func(t *testing.T, dir, _ string) {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, ".agentbox"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, ".agentbox", "sub"), []byte("x"), 0o644))
		},
	}
	for cname, plant := range tests {
		t.Run(cname, func(t *testing.T) {
			ws, dir := newWorkspace(t, executor.WorkspaceOptions{})
			victim := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(victim, "secret"), []byte("victim"), 0o600))
			plant(t, dir, victim)
			ctx := context.Background()

			if cname != "final unreadable file" { // WriteFile takes it and keeps its mode 0
				require.Error(t, ws.WriteFile(ctx, name, []byte("nope")), "WriteFile keeps refusing what the agent planted")
			}
			require.NoError(t, ws.RestoreFile(ctx, name, []byte("prompt v1")))
			got, err := ws.ReadFile(ctx, name)
			require.NoError(t, err)
			assert.Equal(t, "prompt v1", string(got))
			fi, err := os.Lstat(filepath.Join(dir, name))
			require.NoError(t, err)
			assert.True(t, fi.Mode().IsRegular())
			assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
			for _, d := range []string{".agentbox", ".agentbox/sub"} {
				fi, err := os.Lstat(filepath.Join(dir, d))
				require.NoError(t, err)
				assert.True(t, fi.IsDir(), "%s is a real directory again", d)
			}

			entries, err := os.ReadDir(victim)
			require.NoError(t, err)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			assert.NotContains(t, names, "new-file", "nothing was created through a link")
			assert.NotContains(t, names, "system-prompt.md", "nothing was created through a link")
			secret, err := os.ReadFile(filepath.Join(victim, "secret"))
			require.NoError(t, err)
			assert.Equal(t, "victim", string(secret), "the link's target is untouched")

			require.NoError(t, ws.RestoreFile(ctx, name, []byte("prompt v2")))
			got, err = ws.ReadFile(ctx, name)
			require.NoError(t, err)
			assert.Equal(t, "prompt v2", string(got))
		})
	}
}

// TestWorkspaceRestoreFileRefuses checks the names RestoreFile refuses
// like WriteFile: outside the workspace, the root, a directory name.
func TestWorkspaceRestoreFileRefuses(t *testing.T) {
	ws, _ := newWorkspace(t, executor.WorkspaceOptions{MaxFileSize: 4})
	ctx := context.Background()
	assert.ErrorIs(t, ws.RestoreFile(ctx, "../x", []byte("a")), executor.ErrPathEscapes)
	assert.ErrorIs(t, ws.RestoreFile(ctx, "/etc/passwd", []byte("a")), executor.ErrPathEscapes)
	assert.ErrorIs(t, ws.RestoreFile(ctx, ".", []byte("a")), executor.ErrInvalid)
	assert.ErrorIs(t, ws.RestoreFile(ctx, "a/", []byte("a")), executor.ErrInvalid)
	assert.ErrorIs(t, ws.RestoreFile(ctx, "a", []byte("too long")), executor.ErrOutputTooLarge)
}
