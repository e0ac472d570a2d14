package docker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

// newFakeExecutor is an Executor over fakeDocker on a fresh data dir.
func newFakeExecutor(t *testing.T, mutate ...func(*Options)) *Executor {
	t.Helper()
	o := Options{DataDir: t.TempDir(), Logger: hclog.NewNullLogger(), ReconcileInterval: -1, RetentionInterval: -1}
	for _, m := range mutate {
		m(&o)
	}
	o, err := o.withDefaults()
	require.NoError(t, err)
	e, err := newExecutor(context.Background(), o, &fakeDocker{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	return e
}

// TestLockNamespaceSeparateFromChats: a chat named "k.lock" and a chat
// named "k" are two chats; locking one never trips over the other's
// workspace (finding 8: chat k.lock then chat k gave a 500).
func TestLockNamespaceSeparateFromChats(t *testing.T) {
	e := newFakeExecutor(t)
	for _, chat := range []string{"k.lock", "k", "k.lock.lock"} {
		_, err := executor.PrepareWorkspace(e.o.DataDir, "u", chat, -1, -1)
		require.NoError(t, err, chat)
		l, err := e.lockChat(context.Background(), "u", chat, 0)
		require.NoError(t, err, "lock chat %q", chat)
		e.touchChat("u", chat)
		require.NoError(t, l.Close())
	}
	// No lock file lives among the workspaces.
	entries, err := os.ReadDir(filepath.Join(e.o.DataDir, executor.WorkspacesDir))
	require.NoError(t, err)
	for _, de := range entries {
		assert.True(t, de.IsDir(), "%s in the workspaces dir is not a workspace", de.Name())
	}
}

// TestRetentionSweepsLocks: the sweep removes the chat's lock file with
// its workspace, and lock files left by older versions next to the
// workspaces, but not a workspace named like one.
func TestRetentionSweepsLocks(t *testing.T) {
	e := newFakeExecutor(t)
	old := time.Now().Add(-30 * 24 * time.Hour)
	for _, chat := range []string{"gone", "x.lock"} {
		dir, err := executor.PrepareWorkspace(e.o.DataDir, "u", chat, -1, -1)
		require.NoError(t, err)
		l, err := e.lockChat(context.Background(), "u", chat, 0)
		require.NoError(t, err)
		require.NoError(t, l.Close())
		require.NoError(t, os.Chtimes(filepath.Join(e.o.DataDir, chatLockName("u", chat)), old, old))
		require.NoError(t, os.Chtimes(dir, old, old))
	}
	fresh, err := executor.PrepareWorkspace(e.o.DataDir, "u", "fresh", -1, -1)
	require.NoError(t, err)
	// An old version's lock file sits next to the workspaces.
	legacy := filepath.Join(e.o.DataDir, "workspaces", "u", "chat-legacy.lock")
	require.NoError(t, os.MkdirAll(filepath.Dir(legacy), 0o700))
	require.NoError(t, os.WriteFile(legacy, nil, 0o600))
	require.NoError(t, os.Chtimes(legacy, old, old))

	removed, err := e.ret.sweep(context.Background())
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{e.layout.Rel("u", "gone"), e.layout.Rel("u", "x.lock")}, removed)
	for _, chat := range []string{"gone", "x.lock"} {
		assert.NoFileExists(t, filepath.Join(e.o.DataDir, chatLockName("u", chat)), "lock of %s swept with it", chat)
	}
	assert.NoFileExists(t, legacy, "a legacy lock file next to the workspaces is swept")
	assert.DirExists(t, fresh)
	_, err = os.Stat(filepath.Join(e.o.DataDir, "workspaces", "u"))
	assert.ErrorIs(t, err, os.ErrNotExist, "the emptied legacy user directory goes too")
}

// TestDataDirPrivate: a data dir open to other host users is made 0700
// at start when the gateway owns it, and refused with what to do when
// another user owns it (finding 8).
func TestDataDirPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))
	newFakeExecutor(t, func(o *Options) { o.DataDir = dir })
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "made private at start")

	if os.Geteuid() != 0 {
		t.Skip("giving the data dir to another user needs root")
	}
	other := filepath.Join(t.TempDir(), "other")
	require.NoError(t, os.Mkdir(other, 0o755))
	require.NoError(t, os.Chmod(other, 0o755))
	require.NoError(t, os.Chown(other, 4242, 4242))
	o, err := Options{DataDir: other, ReconcileInterval: -1, RetentionInterval: -1}.withDefaults()
	require.NoError(t, err)
	_, err = newExecutor(context.Background(), o, &fakeDocker{})
	require.ErrorIs(t, err, executor.ErrInvalid)
	assert.Contains(t, err.Error(), "chmod 0700")
	fi, err = os.Stat(other)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm(), "another user's dir is not changed")
}

// TestSandboxUIDNotHostAccount: the default sandbox uid is no account of
// this host, and a uid that is one is named in a warning at start.
func TestSandboxUIDNotHostAccount(t *testing.T) {
	require.Equal(t, fmt.Sprintf("%d:%d", executor.DefaultUID, executor.DefaultGID), executor.DefaultUser)
	uid := strings.Split(executor.DefaultUser, ":")[0]
	assert.Empty(t, hostAccount("/etc/passwd", uid), "the default sandbox uid %s is a host account here", uid)

	passwd := filepath.Join(t.TempDir(), "passwd")
	require.NoError(t, os.WriteFile(passwd, []byte("root:x:0:0::/root:/bin/sh\nalice:x:"+uid+":"+uid+"::/home/alice:/bin/sh\n"), 0o600))
	old := passwdFile
	passwdFile = passwd
	defer func() { passwdFile = old }()
	var buf bytes.Buffer
	newFakeExecutor(t, func(o *Options) {
		o.Logger = hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Warn})
	})
	assert.Contains(t, buf.String(), "account=alice")
	assert.Contains(t, buf.String(), "the sandbox uid is a host account")
}

// TestNoHostPathsInContainerSockets: the unix sockets a process in the
// container can list name container paths only, never the data dir, the
// user or the chat (finding 8). The mount roots in /proc/self/mountinfo
// still show the workspace's host path; see the package doc.
func TestNoHostPathsInContainerSockets(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) { o.UseImageHelper = true })
	spec := testSpec("chat-id-zq7")
	spec.UserID = "user-id-zq7"
	sb := create(t, e, spec)
	out := mustRun(t, sb, "cat /proc/net/unix")
	require.Contains(t, out, ContainerHostDir, "the helper's socket is listed (the probe sees sockets)")
	for _, leak := range []string{e.o.DataDir, spec.UserID, spec.ChatID} {
		assert.NotContains(t, out, leak)
	}
}
