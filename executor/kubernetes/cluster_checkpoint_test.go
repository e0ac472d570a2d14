package kubernetes

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentbox/agentbox/executor"
)

// clusterStorageClass is AGENTBOX_K8S_STORAGECLASS, or agentbox-local, the
// test cluster's pool of hostPath volumes.
func clusterStorageClass() string {
	if sc := os.Getenv("AGENTBOX_K8S_STORAGECLASS"); sc != "" {
		return sc
	}
	return "agentbox-local"
}

// hostPathOf is the host directory of a bound claim's hostPath volume
// (the test cluster's pool), for checks the agent cannot fake.
func hostPathOf(t *testing.T, e *Executor, claim string) string {
	t.Helper()
	c, err := e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace).Get(t.Context(), claim, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, c.Spec.VolumeName, "claim %s is bound", claim)
	pv, err := e.cs.CoreV1().PersistentVolumes().Get(t.Context(), c.Spec.VolumeName, metav1.GetOptions{})
	require.NoError(t, err)
	if pv.Spec.HostPath == nil {
		t.Skipf("volume %s is no hostPath volume; the host-side checks need the test cluster's pool", pv.Name)
	}
	return pv.Spec.HostPath.Path
}

// TestClusterCheckpointHostile: the agent's pod has no way to the chat's
// checkpoints (no mount of their claim, nothing of a store in its file
// system), and what it plants in the workspace (a symlink to where the
// checkpoint pod mounts the store, a FIFO) makes neither a checkpoint nor a
// restore read or write outside the workspace.
func TestClusterCheckpointHostile(t *testing.T) {
	e := clusterExecutor(t, Options{StorageClass: clusterStorageClass()})
	ctx := t.Context()
	spec := executor.Spec{UserID: "u1", ChatID: "hostile"}
	b := executor.CheckpointBounds{}
	open := func() executor.Sandbox {
		sb, err := e.Create(ctx, spec)
		require.NoError(t, err)
		return sb
	}

	sb := open()
	run(t, sb, "sh", "-c", "mkdir d && echo keep > d/x && echo v1 > a.txt")
	require.NoError(t, sb.Close(ctx))
	start := time.Now()
	turn1, err := e.TakeCheckpoint(ctx, spec.UserID, spec.ChatID, "turn 1", b)
	require.NoError(t, err)
	t.Logf("take (pod, helper, removal): %v", time.Since(start))
	assert.Equal(t, 2, turn1.Files)
	store := hostPathOf(t, e, checkpointClaimName(spec.UserID, spec.ChatID))
	require.FileExists(t, filepath.Join(store, "index.json"), "the store is on the checkpoint claim")

	// The agent looks for the store.
	sb = open()
	pod, err := e.cs.CoreV1().Pods(e.o.Namespace).Get(ctx, sb.ID(), metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{claimName(spec.UserID, spec.ChatID)}, claimsOf(pod), "the agent's pod mounts no checkpoint claim")
	mounts, _ := run(t, sb, "cat", "/proc/self/mountinfo")
	assert.NotContains(t, mounts, store, "the store's volume is not mounted in the agent's pod")
	found, _ := run(t, sb, "sh", "-c", `find / \( -path /proc -o -path /sys \) -prune -o \( -name "*$1*" -o -type d -name manifests -exec test -d {}/../objects \; \) -print 2>/dev/null; true`, "sh", turn1.ID)
	assert.Empty(t, strings.TrimSpace(found), "nothing of a store is in the agent's file system")

	// It plants a link to where the checkpoint pod mounts the store, in
	// place of a directory a restore fills, and a FIFO.
	run(t, sb, "sh", "-c", "rm -rf d && ln -s "+ckMount+"/ck/0 d && mkfifo f && echo v2 > a.txt")
	require.NoError(t, sb.Close(ctx))
	turn2, err := e.TakeCheckpoint(ctx, spec.UserID, spec.ChatID, "turn 2", b)
	require.NoError(t, err)
	assert.Equal(t, 1, turn2.Files, "the link is kept as a link, the store behind it not read")
	assert.Equal(t, 1, turn2.Skipped, "the FIFO")

	start = time.Now()
	res, err := e.RestoreCheckpoint(ctx, spec.UserID, spec.ChatID, turn1.ID)
	require.NoError(t, err)
	t.Logf("restore (pod, helper, removal): %v, %+v", time.Since(start), res)
	assert.NoFileExists(t, filepath.Join(store, "x"), "the restore wrote nothing through the link")
	ws := hostPathOf(t, e, claimName(spec.UserID, spec.ChatID))
	fi, err := os.Lstat(filepath.Join(ws, "d"))
	require.NoError(t, err)
	assert.True(t, fi.IsDir(), "the link was replaced by the checkpoint's directory")
	got, err := os.ReadFile(filepath.Join(ws, "d", "x"))
	require.NoError(t, err)
	assert.Equal(t, "keep\n", string(got))

	list, head, err := e.Checkpoints(ctx, spec.UserID, spec.ChatID)
	require.NoError(t, err)
	assert.Len(t, list, 2)
	assert.Equal(t, turn1.ID, head)
	sb = open()
	got2, _ := run(t, sb, "cat", "a.txt")
	assert.Equal(t, "v1\n", got2)
	require.NoError(t, sb.Close(ctx))
}

// TestClusterCheckpointRetention: the retention sweep removes a chat's
// checkpoint claim with its workspace claim.
func TestClusterCheckpointRetention(t *testing.T) {
	e := clusterExecutor(t, Options{StorageClass: clusterStorageClass(), Retention: time.Second, RetentionInterval: -1})
	ctx := t.Context()
	_, err := e.TakeCheckpoint(ctx, "u1", "old", "start", executor.CheckpointBounds{})
	require.NoError(t, err)
	claims := e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace)
	_, err = claims.Get(ctx, checkpointClaimName("u1", "old"), metav1.GetOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		n, err := e.SweepClaims(ctx)
		require.NoError(t, err)
		return n > 0
	}, time.Minute, 500*time.Millisecond, "the unused workspace was not swept")
	for _, name := range []string{claimName("u1", "old"), checkpointClaimName("u1", "old")} {
		c, err := claims.Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			assert.NotNil(t, c.DeletionTimestamp, "claim %s is being deleted", name)
		}
	}
}

// TestClusterCheckpointNewChat: a new chat's start checkpoint is taken
// without a pod; the first turn's checkpoint pod records it in the Store
// (the turn's parent, its pending mark cleared), and restoring it empties
// the workspace, so that an edit of the chat's first message finds the
// files of its start.
func TestClusterCheckpointNewChat(t *testing.T) {
	e := clusterExecutor(t, Options{StorageClass: clusterStorageClass()})
	ctx := t.Context()
	spec := executor.Spec{UserID: "u1", ChatID: "new-" + strings.ToLower(randomID()[:8])}
	b := executor.CheckpointBounds{}
	pods := e.cs.CoreV1().Pods(e.o.Namespace)
	before, err := pods.List(ctx, metav1.ListOptions{LabelSelector: LabelRole + "=" + RoleCheckpoint})
	require.NoError(t, err)
	t0 := time.Now()
	start, err := e.TakeCheckpoint(ctx, spec.UserID, spec.ChatID, "start", b)
	require.NoError(t, err)
	t.Logf("a new chat's start checkpoint: %v", time.Since(t0))
	after, err := pods.List(ctx, metav1.ListOptions{LabelSelector: LabelRole + "=" + RoleCheckpoint})
	require.NoError(t, err)
	assert.Equal(t, len(before.Items), len(after.Items), "no checkpoint pod")

	sb, err := e.Create(ctx, spec)
	require.NoError(t, err)
	run(t, sb, "sh", "-c", "echo v1 > a.txt && mkdir d && echo x > d/x")
	require.NoError(t, sb.Close(ctx))
	turn1, err := e.TakeCheckpoint(ctx, spec.UserID, spec.ChatID, "turn 1", b)
	require.NoError(t, err)
	assert.Equal(t, start.ID, turn1.Parent, "the start is recorded before the turn")
	assert.Equal(t, 3, turn1.Changed)
	c, err := e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace).Get(ctx, checkpointClaimName(spec.UserID, spec.ChatID), metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotContains(t, c.Annotations, AnnotationPending, "recorded, no longer pending")

	res, err := e.RestoreCheckpoint(ctx, spec.UserID, spec.ChatID, start.ID)
	require.NoError(t, err)
	assert.Positive(t, res.Removed)
	entries, err := os.ReadDir(hostPathOf(t, e, claimName(spec.UserID, spec.ChatID)))
	require.NoError(t, err)
	assert.Empty(t, entries, "the start is an empty workspace")
	list, head, err := e.Checkpoints(ctx, spec.UserID, spec.ChatID)
	require.NoError(t, err)
	assert.Len(t, list, 2)
	assert.Equal(t, start.ID, head)
}
