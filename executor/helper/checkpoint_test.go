package helper

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

// checkpointRun runs one request through RunCheckpoint's JSON.
func checkpointRun(t *testing.T, req CheckpointRequest) CheckpointResponse {
	t.Helper()
	in, err := json.Marshal(req)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, RunCheckpoint(t.Context(), bytes.NewReader(in), &out))
	var resp CheckpointResponse
	require.NoError(t, json.Unmarshal(out.Bytes(), &resp))
	return resp
}

// TestRunCheckpoint: take, restore, list and fork through the helper's
// request, with the executor's sentinels on its errors.
func TestRunCheckpoint(t *testing.T) {
	dir := t.TempDir()
	ws, store := filepath.Join(dir, "ws"), filepath.Join(dir, "ck")
	toWS, toStore := filepath.Join(dir, "ws2"), filepath.Join(dir, "ck2")
	require.NoError(t, os.Mkdir(ws, 0o755))
	require.NoError(t, os.Mkdir(toWS, 0o755))
	uid, gid := os.Getuid(), os.Getgid()
	base := CheckpointRequest{Store: store, Workspace: ws, UID: uid, GID: gid}

	require.NoError(t, os.WriteFile(filepath.Join(ws, "a.txt"), []byte("v1"), 0o644))
	req := base
	req.Op, req.Label = "take", "turn 1"
	turn1 := checkpointRun(t, req)
	require.NoError(t, turn1.Err())
	assert.Equal(t, 1, turn1.Info.Files)
	assert.Equal(t, turn1.Info.ID, turn1.Head)

	require.NoError(t, os.WriteFile(filepath.Join(ws, "a.txt"), []byte("v2"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "b.txt"), []byte("b"), 0o644))
	req.Label = "turn 2"
	require.NoError(t, checkpointRun(t, req).Err())

	req = base
	req.Op, req.ID = "restore", turn1.Info.ID
	res := checkpointRun(t, req)
	require.NoError(t, res.Err())
	assert.Positive(t, res.Restore.Written+res.Restore.Removed)
	got, err := os.ReadFile(filepath.Join(ws, "a.txt"))
	require.NoError(t, err)
	assert.Equal(t, "v1", string(got))
	assert.NoFileExists(t, filepath.Join(ws, "b.txt"))
	assert.Len(t, res.List, 2)
	assert.Equal(t, turn1.Info.ID, res.Head)

	req = base
	req.Op = "list"
	list := checkpointRun(t, req)
	require.NoError(t, list.Err())
	assert.Len(t, list.List, 2)
	assert.Equal(t, turn1.Info.ID, list.Head)

	req = base
	req.Op, req.ID, req.ToStore, req.ToWorkspace = "fork", turn1.Info.ID, toStore, toWS
	fork := checkpointRun(t, req)
	require.NoError(t, fork.Err())
	assert.Len(t, fork.List, 1, "the new place's list")
	got, err = os.ReadFile(filepath.Join(toWS, "a.txt"))
	require.NoError(t, err)
	assert.Equal(t, "v1", string(got))
	assert.ErrorIs(t, checkpointRun(t, req).Err(), executor.ErrInvalid, "a second fork into the same place")

	for name, tc := range map[string]struct {
		req  CheckpointRequest
		want error
	}{
		"unknown checkpoint": {CheckpointRequest{Op: "restore", Store: store, Workspace: ws, ID: "ck_0000000000000deadbeef0"}, executor.ErrNotFound},
		"unknown op":         {CheckpointRequest{Op: "drop", Store: store}, executor.ErrInvalid},
		"no store":           {CheckpointRequest{Op: "list"}, executor.ErrInvalid},
	} {
		t.Run(name, func(t *testing.T) {
			assert.ErrorIs(t, checkpointRun(t, tc.req).Err(), tc.want)
		})
	}
	bad := CheckpointRequest{Op: "list", Store: filepath.Join(dir, "ck3"), Pending: []executor.CheckpointInfo{{ID: "../ck"}}}
	assert.ErrorIs(t, checkpointRun(t, bad).Err(), executor.ErrInvalid, "a pending checkpoint's id names a file of the store")
	var out bytes.Buffer
	require.NoError(t, RunCheckpoint(t.Context(), bytes.NewReader([]byte("{")), &out))
	assert.Contains(t, out.String(), `"kind":"invalid"`)
}

// TestPendingCheckpoint: a checkpoint named without a pod (a new chat's
// start) is recorded by the next operation on its Store, whatever that
// is, as an empty workspace's; the turn taken then is its child.
func TestPendingCheckpoint(t *testing.T) {
	dir := t.TempDir()
	ws, store := filepath.Join(dir, "ws"), filepath.Join(dir, "ck")
	require.NoError(t, os.Mkdir(ws, 0o755))
	start := executor.CheckpointInfo{ID: "ck_0000000000001deadbeef", Label: "start", Created: time.Now().Round(0)}
	req := CheckpointRequest{Op: "take", Label: "turn 1", Store: store, Workspace: ws, UID: os.Getuid(), GID: os.Getgid(),
		Pending: []executor.CheckpointInfo{start}}
	require.NoError(t, os.WriteFile(filepath.Join(ws, "a.txt"), []byte("v1"), 0o644))
	turn1 := checkpointRun(t, req)
	require.NoError(t, turn1.Err())
	require.Len(t, turn1.List, 2)
	assert.Equal(t, start.ID, turn1.List[0].ID)
	assert.Equal(t, start.ID, turn1.Info.Parent)
	assert.Equal(t, turn1.Info.ID, turn1.Head)

	// The next operation still carries it (its record on the claim was
	// not cleared): nothing changes.
	req.Op, req.ID = "restore", start.ID
	res := checkpointRun(t, req)
	require.NoError(t, res.Err())
	assert.Len(t, res.List, 2)
	assert.NoFileExists(t, filepath.Join(ws, "a.txt"), "the start is empty")
}
