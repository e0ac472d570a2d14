package local_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/local"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// fakeBwrap writes a bwrap stand-in that fails as bwrap does when the
// kernel refuses user namespaces.
func fakeBwrap(t *testing.T) string {
	// Not below t.TempDir (0700): the probe runs it as the sandbox user.
	dir, err := os.MkdirTemp("", "fakebwrap")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	p := filepath.Join(dir, "bwrap")
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\necho 'bwrap: No permissions to create new namespace, likely because the kernel does not allow non-privileged user namespaces. On e.g. debian this can be enabled with sysctl kernel.unprivileged_userns_clone=1.' >&2\nexit 1\n"), 0o755))
	return p
}

func TestHealthCheckNamesWhatIsMissing(t *testing.T) {
	helperBin := testenv.HelperBinary(t)
	for _, tc := range []struct {
		name string
		o    local.Options
		want []string
	}{
		{"bubblewrap missing", local.Options{Bwrap: "/nonexistent/bwrap", HelperBinary: helperBin, Commands: []string{}},
			[]string{"bubblewrap is not installed", "apt-get install bubblewrap"}},
		{"user namespaces refused", local.Options{Bwrap: fakeBwrap(t), HelperBinary: helperBin, Commands: []string{}},
			[]string{"user namespaces are not allowed", "kernel.unprivileged_userns_clone=1"}},
		{"helper missing", local.Options{Bwrap: fakeBwrap(t), Commands: []string{}},
			[]string{"no helper binary is configured", "make helper"}},
		{"helper dynamic", local.Options{Bwrap: fakeBwrap(t), HelperBinary: "/bin/ls", Commands: []string{}},
			[]string{"dynamically linked"}},
		{"cli missing", local.Options{Bwrap: fakeBwrap(t), HelperBinary: helperBin, Commands: []string{"claude-not-installed-x"}},
			[]string{`the agent CLI "claude-not-installed-x" is not on the host's PATH`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.DataDir = t.TempDir()
			err := local.Check(context.Background(), tc.o)
			require.Error(t, err)
			assert.ErrorIs(t, err, executor.ErrUnavailable)
			var he *local.HealthError
			require.ErrorAs(t, err, &he)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			_, err = local.New(context.Background(), tc.o)
			assert.ErrorIs(t, err, executor.ErrUnavailable, "New fails fast with the same check")
		})
	}

	t.Run("every problem at once", func(t *testing.T) {
		err := local.Check(context.Background(), local.Options{DataDir: t.TempDir(), Bwrap: "/nonexistent/bwrap", Commands: []string{"claude-not-installed-x"}})
		var he *local.HealthError
		require.ErrorAs(t, err, &he)
		assert.Len(t, he.Problems, 3, "%v", err)
	})
}

func TestHealthCheckPassesHere(t *testing.T) {
	requireBwrap(t)
	testenv.RequireRoot(t, "the probe as uid 100000")
	err := local.Check(context.Background(), local.Options{DataDir: t.TempDir(), HelperBinary: testenv.HelperBinary(t), Commands: []string{"sh"}})
	require.NoError(t, err)
}
