package middleware_test

import (
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/checkpoint"
	"github.com/agentbox/agentbox/middleware"
)

// The agent is an attacker of the checkpoints too: the real CLI runs the
// hostile model's shell commands (cmdAgent), and everything it leaves in
// the workspace is what the next checkpoint takes and the next restore
// meets.

// bobSecret is what the victim chat keeps in its workspace.
const bobSecret = "bob-secret-7f3a9c"

// TestE2EAttackCheckpointThroughLinks: alice's agent replaces a directory
// and a file that turn 1 left with symlinks to the host path of bob's
// workspace (the strongest form: the agent is told the host path), then
// alice regenerates the turn. The checkpoint of the hostile turn keeps the
// links as links (nothing of bob's is read into alice's store), the
// restore puts a real directory and file back in their place (nothing is
// written through them), and bob's workspace is as he left it.
func TestE2EAttackCheckpointThroughLinks(t *testing.T) {
	env := newCheckpointE2E(t, 0)
	env.askAs(t, "bob", "v", "CMD: echo "+bobSecret+" > s.txt")
	layout, err := executor.OpenWorkspaceLayout(env.data)
	require.NoError(t, err)
	bob := layout.Dir("bob", "v")
	require.FileExists(t, filepath.Join(bob, "s.txt"))

	turn1 := "Turn 1. CMD: mkdir d && echo mine > d/f && echo top > t.txt"
	hostile := "Turn 2. CMD: cat d/f t.txt; rm -rf d t.txt; ln -s " + bob + " d; ln -s " + bob + "/s.txt t.txt; ls -l"
	a1 := env.ask(t, "c", turn1)
	a2 := env.ask(t, "c", turn1, a1, hostile)
	assert.Contains(t, a2, "mine")
	assert.Contains(t, a2, "-> "+bob, "the links are planted")

	// The regenerate restores turn 1's files over the links, then runs
	// the hostile command again: it finds the real files first.
	regen := env.ask(t, "c", turn1, a1, hostile)
	assert.Contains(t, regen, "mine", "d/f is a file in a real directory again")
	assert.Contains(t, regen, "top", "t.txt is a real file again")
	assert.Contains(t, env.logs.String(), "the workspace follows the history back")

	got, err := os.ReadFile(filepath.Join(bob, "s.txt"))
	require.NoError(t, err)
	assert.Equal(t, bobSecret+"\n", string(got), "bob's file is untouched")
	assert.NoFileExists(t, filepath.Join(bob, "f"), "nothing was written through the planted directory link")
	entries, err := os.ReadDir(bob)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "bob's workspace holds only his file")

	store := filepath.Join(env.data, checkpoint.StoresDir, layout.Name("alice", "c"))
	require.DirExists(t, store)
	require.NoError(t, filepath.WalkDir(store, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), bobSecret) {
			t.Errorf("alice's checkpoint store holds bob's file (%s)", p)
		}
		return err
	}))
}

// TestE2EAttackCheckpointBound: a turn whose new files alone pass the
// workspace's checkpoint bound (16 MiB here) is not checkpointed (logged,
// nothing of it kept, the store stays under its bound), the chat goes on,
// and a later return to that turn runs on the current files and says so.
// A FIFO the agent leaves does not stall the checkpoint and is reported as
// skipped.
func TestE2EAttackCheckpointBound(t *testing.T) {
	const bound = 16 << 20
	env := newCheckpointE2E(t, 0, func(a *middleware.Assistant) {
		a.Sandbox.Checkpoints.Bounds = executor.CheckpointBounds{Count: 10, Bytes: bound}
	})
	big := "Big. CMD: head -c 40000000 /dev/urandom > big.bin && mkfifo pipe && echo written"
	a1 := env.ask(t, "c", big)
	assert.Contains(t, a1, "written")
	assert.Contains(t, env.logs.String(), "the turn's workspace could not be checkpointed")

	layout, err := executor.OpenWorkspaceLayout(env.data)
	require.NoError(t, err)
	var stored int64
	require.NoError(t, filepath.WalkDir(filepath.Join(env.data, checkpoint.StoresDir, layout.Name("alice", "c")),
		func(_ string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			info, err := d.Info()
			if err == nil {
				stored += info.Size()
			}
			return err
		}))
	assert.Less(t, stored, int64(bound), "the store stays under its bound")

	// The agent shrinks the workspace; that turn is checkpointed, the
	// FIFO skipped.
	small := "Small. CMD: rm big.bin && echo small > s.txt && ls"
	a2 := env.ask(t, "c", big, a1, small)
	assert.Contains(t, a2, "pipe")
	code, list := env.call(t, "alice", http.MethodGet, "/v1/chats/c/checkpoints", "")
	require.Equal(t, http.StatusOK, code, "%v", list)
	data := list["data"].([]any)
	last := data[len(data)-1].(map[string]any)
	assert.Equal(t, float64(2), last["turn"], "%v", list)
	assert.Equal(t, float64(1), last["skipped"], "the FIFO is not kept, and says so: %v", list)

	// Back to the end of the big turn: its checkpoint was never taken.
	env.ask(t, "c", big, a1, "Again. CMD: ls")
	assert.Contains(t, env.logs.String(), "whose workspace checkpoint is gone")
}
