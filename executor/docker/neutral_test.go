package docker

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

// TestCreateMigratesLegacyWorkspace: a chat of the legacy layout keeps its
// files on its first Create after the upgrade, and the legacy names are
// gone. In loop mode the legacy image is still mounted at the legacy path,
// as a gateway of the old version that was killed leaves it.
func TestCreateMigratesLegacyWorkspace(t *testing.T) {
	for name, loop := range map[string]bool{"watchdog": false, "loop": true} {
		t.Run(name, func(t *testing.T) {
			var e *Executor
			if loop {
				e = newLoopExecutor(t)
			} else {
				e = newTestExecutor(t)
			}
			const chat = "legacy"
			sb := create(t, e, testSpec(chat))
			mustRun(t, sb, "echo kept > /workspace/note")
			require.NoError(t, sb.Close(context.Background()))
			e.unmountImages()

			// Back to the layout of the previous version.
			legacyDir := filepath.Join(e.o.DataDir, executor.LegacyRel("u1", chat))
			require.NoError(t, os.MkdirAll(filepath.Dir(legacyDir), 0o700))
			require.NoError(t, os.Rename(e.layout.Dir("u1", chat), legacyDir))
			legacyImg := filepath.Join(e.o.DataDir, legacyImageName("u1", chat))
			if loop {
				q := e.quota.(*loopQuota)
				require.NoError(t, os.MkdirAll(filepath.Dir(legacyImg), 0o700))
				require.NoError(t, os.Rename(filepath.Join(e.o.DataDir, q.imageName("u1", chat)), legacyImg))
				out, err := exec.Command("mount", "-t", "ext4", "-o", loopMountOptions, legacyImg, legacyDir).CombinedOutput()
				require.NoError(t, err, "%s", out)
				t.Cleanup(func() { _ = unmount(legacyDir) })
			}

			sb = create(t, e, testSpec(chat))
			assert.Equal(t, "kept", mustRun(t, sb, "cat /workspace/note"), "the files moved with the workspace")
			assert.NoDirExists(t, legacyDir)
			assert.NoDirExists(t, filepath.Join(e.o.DataDir, executor.LegacyWorkspacesDir, "u1"))
			assert.NoFileExists(t, legacyImg)
			if loop {
				assert.True(t, mountedAt(t, e.layout.Dir("u1", chat)), "the image is mounted at the neutral name")
			}
		})
	}
}

// TestSandboxesTmpfs: in loop mode the host dirs live on a tmpfs the
// executor mounts at {data}/sandboxes (so containers see "/{id}" as its
// root) and unmounts at Close; a sandboxes dir that already holds host
// dirs (a gateway that does not mount one) is left alone.
func TestSandboxesTmpfs(t *testing.T) {
	e := newLoopExecutor(t)
	dir := filepath.Join(e.o.DataDir, sandboxesDir)
	require.True(t, mountedAt(t, dir), "a tmpfs on %s", dir)
	sb := create(t, e, testSpec("tmpfs"))
	assert.Equal(t, "/"+sb.sandboxID, mustRun(t, sb, `awk '$5 == "/run/agentbox" {print $4}' /proc/self/mountinfo`),
		"the container sees the host dir's path within the tmpfs only")
	require.NoError(t, sb.Close(context.Background()))
	require.NoError(t, e.Close())
	assert.False(t, mountedAt(t, dir), "Close unmounts it")

	busy := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(busy, sandboxesDir, "0123456789abcdef"), 0o700))
	e2 := newLoopExecutor(t, func(o *Options) { o.DataDir = busy })
	assert.False(t, mountedAt(t, filepath.Join(busy, sandboxesDir)), "host dirs of another gateway are not hidden")
	_ = e2
}
