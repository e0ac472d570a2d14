package executor_test

import (
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// owner returns the uid and gid owning p (not following a link).
func owner(t testing.TB, p string) (uid, gid int) {
	t.Helper()
	fi, err := os.Lstat(p)
	require.NoError(t, err)
	st, ok := fi.Sys().(*syscall.Stat_t)
	require.True(t, ok)
	return int(st.Uid), int(st.Gid)
}
