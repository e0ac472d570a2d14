package local

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRemoveStaleSparesLiveGateways: a gateway starting on the host
// removes the empty cgroups of dead gateways only; the empty cgroup a
// live one just made for a sandbox it is starting stays (two test
// binaries, or two gateways, share the cgroup base).
func TestRemoveStaleSparesLiveGateways(t *testing.T) {
	dir := t.TempDir()
	mine := cgroupName("live")
	for _, d := range []string{mine, "sb-2147483646-dead", "sb-0123456789abcdef", "not-a-sandbox"} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, d), 0o755))
	}
	removeStale(dir)
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{mine, "not-a-sandbox"}, names,
		"a live process's cgroup and foreign directories stay; a dead gateway's and the unnamed older form go")
}
