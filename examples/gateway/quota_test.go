package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// TestQuotaFlag: -quota picks the workspace quota mode, the start-up log
// says which is in force and its bound, and a mode that is not one is
// refused before anything starts.
func TestQuotaFlag(t *testing.T) {
	t.Run("not a mode", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"-quota", "prjquota"}, &stdout, &stderr)
		assert.Equal(t, 2, code)
		assert.Contains(t, stderr.String(), `-quota "prjquota" is not a quota mode; use watchdog or loop`)
	})
	t.Run("loop not for local", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"-executor", "local", "-helper", "/nonexistent", "-quota", "loop", "-data", t.TempDir(), "-dir", ".."}, &stdout, &stderr)
		assert.Equal(t, 1, code)
		assert.Contains(t, stderr.String(), `-quota "loop": the local executor caps each file at max_disk and has no quota mode`, "the flag is named, now that the backend is a typed choice")
	})
	t.Run("loop", func(t *testing.T) {
		testenv.RequireImage(t)
		testenv.RequireRoot(t, "loop-mounted workspace images")
		data := t.TempDir()
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"-demo", "-demo-assistant", "coder", "-dir", "..", "-data", data, "-offline", "always", "-helper", testenv.HelperBinary(t), "-quota", "loop"}, &stdout, &stderr)
		t.Logf("stderr:\n%s", stderr.String())
		require.Equal(t, 0, code)
		assert.Contains(t, stderr.String(), "workspace quota: loop-mounted ext4 image per workspace")
		assert.Contains(t, stderr.String(), `writes past max_disk and files past max_inodes fail with \"No space left on device\"`)
		assert.Contains(t, stdout.String(), "finish_reason: stop")
		imgs, err := filepath.Glob(filepath.Join(data, "quota", "*.img"))
		require.NoError(t, err)
		assert.Len(t, imgs, 1, "the chat's workspace is its image")
	})
}
