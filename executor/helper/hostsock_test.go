package helper

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestListenHostSocketBySocketNotPath: the agent can write the host dir,
// so it may swap the socket for a symlink to a host file right after the
// bind. Neither the mode nor the owner of that file may change, and the
// socket is 0600 from the moment it exists (finding 8).
func TestListenHostSocketBySocketNotPath(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	require.NoError(t, os.WriteFile(victim, []byte("host secret"), 0o644))
	require.NoError(t, os.Chmod(victim, 0o644))
	before, err := os.Stat(victim)
	require.NoError(t, err)

	var modeAtBind os.FileMode
	testHookListened = func(path string) {
		fi, err := os.Lstat(path)
		if err == nil {
			modeAtBind = fi.Mode()
		}
		// The agent's move: the socket becomes a link to a host file.
		_ = os.Remove(path)
		_ = os.Symlink(victim, path)
	}
	defer func() { testHookListened = nil }()

	uid, gid := os.Getuid()+1, os.Getgid()+1
	if os.Geteuid() != 0 {
		uid, gid = os.Getuid(), os.Getgid()
	}
	ln, err := ListenHostSocket(dir, ModelSocket, uid, gid)
	if err == nil {
		_ = ln.Close()
	}
	assert.Equal(t, os.ModeSocket|0o600, modeAtBind, "the socket is 0600 when it appears, before any chmod")
	after, err := os.Stat(victim)
	require.NoError(t, err)
	assert.Equal(t, before.Mode(), after.Mode(), "the victim's mode did not change")
	assert.Equal(t, before.Sys().(*syscall.Stat_t).Uid, after.Sys().(*syscall.Stat_t).Uid, "the victim's owner did not change")
	assert.Equal(t, before.Sys().(*syscall.Stat_t).Gid, after.Sys().(*syscall.Stat_t).Gid, "the victim's group did not change")
}

// TestListenHostSocketOwner: without interference the socket is the
// sandbox user's, mode 0600.
func TestListenHostSocketOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	dir := t.TempDir()
	ln, err := ListenHostSocket(dir, ModelSocket, 4242, 4343)
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	fi, err := os.Lstat(filepath.Join(dir, ModelSocket))
	require.NoError(t, err)
	assert.Equal(t, os.ModeSocket|0o600, fi.Mode())
	st := fi.Sys().(*syscall.Stat_t)
	assert.Equal(t, []uint32{4242, 4343}, []uint32{st.Uid, st.Gid})
}
