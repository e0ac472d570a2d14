package executor

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMeasureBounded: the watchdog's walk stops right after the limit and
// never follows a symlink out of the workspace.
func TestMeasureBounded(t *testing.T) {
	dir := t.TempDir()
	for i := range 50 {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(i)), []byte("x"), 0o644))
	}
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "huge"), make([]byte, 1<<20), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "out")))
	_, n, err := MeasureDir(dir, 1<<30, 10)
	require.NoError(t, err)
	assert.Equal(t, int64(11), n, "stops at limit+1")
	b, n, err := MeasureDir(dir, 1<<30, 1000)
	require.NoError(t, err)
	assert.Equal(t, int64(51), n)
	assert.Less(t, b, int64(1<<20), "the symlinked directory is not walked")
}

func TestFormatBytes(t *testing.T) {
	assert.Equal(t, "512 B", FormatBytes(512))
	assert.Equal(t, "32.0 MiB", FormatBytes(32<<20))
	assert.Equal(t, "2.0 GiB", FormatBytes(2<<30))
}
