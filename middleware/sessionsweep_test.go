package middleware

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/executor"
)

// TestSweepSessions: the middleware removes the sessions of chats without
// a turn for SessionRetention, on every backend (it owns SessionDir). A
// chat with a recent file, a leased chat and a chat whose container is
// kept stay; links are never followed, neither as a user, nor as a chat,
// nor inside a chat's directory.
func TestSweepSessions(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	old := now.Add(-8 * 24 * time.Hour)
	mk := func(user, chat string, at time.Time) string {
		d := filepath.Join(dir, user, "chat-"+chat, "coder")
		require.NoError(t, os.MkdirAll(d, 0o700))
		for _, name := range []string{sessionRecordName, transcriptName} {
			f := filepath.Join(d, name)
			require.NoError(t, os.WriteFile(f, []byte("{}\n"), 0o600))
			require.NoError(t, os.Chtimes(f, at, at))
		}
		for _, p := range []string{d, filepath.Dir(d)} {
			require.NoError(t, os.Chtimes(p, at, at))
		}
		return filepath.Dir(d)
	}
	expired := mk("alice", "old", old)
	fresh := mk("alice", "new", now)
	busy := mk("alice", "busy", old)
	kept := mk("bob", "kept", old)
	touched := mk("bob", "touched", old)
	recent := filepath.Join(touched, "coder", sessionRecordName)
	require.NoError(t, os.Chtimes(recent, now, now)) // the last turn rewrote the record

	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "keep"), []byte("keep"), 0o600))
	escape := filepath.Join(expired, "escape")
	require.NoError(t, os.Symlink(outside, escape))
	ts := []unix.Timespec{unix.NsecToTimespec(old.UnixNano()), unix.NsecToTimespec(old.UnixNano())}
	require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, escape, ts, unix.AT_SYMLINK_NOFOLLOW))
	require.NoError(t, os.Chtimes(expired, old, old))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "linked-user")))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "alice", "chat-linked")))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "alice", "chat-..", "x"), 0o700))

	o := &Orchestrator{opts: Options{SessionDir: dir, SessionRetention: 7 * 24 * time.Hour}, leases: executor.NewLeases()}
	o.pool = newWarmPool(o)
	o.pool.entries[chatID{"bob", "kept"}] = &warmEntry{chat: chatID{"bob", "kept"}}
	release, err := o.leases.Acquire(context.Background(), chatID{"alice", "busy"}.key(), 0)
	require.NoError(t, err)
	defer release()

	n, err := o.sweepSessions(now)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.NoDirExists(t, expired)
	for _, d := range []string{fresh, busy, kept, touched} {
		assert.DirExists(t, d)
	}
	assert.FileExists(t, filepath.Join(outside, "keep"), "a link inside the chat's directory goes, its target stays")
	assert.FileExists(t, filepath.Join(dir, "linked-user", "keep"))
	assert.FileExists(t, filepath.Join(dir, "alice", "chat-linked", "keep"))

	o.opts.SessionRetention = time.Hour
	release()
	n, err = o.sweepSessions(now.Add(2 * time.Hour))
	require.NoError(t, err)
	assert.Equal(t, 3, n, "fresh, busy and touched once their time came; kept stays while its container is kept")
	assert.DirExists(t, kept)
}
