package kubernetes

import (
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

// TestClusterPool: on a real cluster, a new chat's first sandbox is a
// pooled pod, started before the request over a claim of its own that the
// scheduler bound then; the unbound claim the chat's start checkpoint made
// gives way to it. The adopted claim stays the chat's workspace: a
// follow-up sandbox (a pod of its own) sees the first one's files, and the
// checkpoint pods mount it; another new chat's pooled pod is a fresh one
// (nothing of the first agent's). Close leaves no pooled pod or claim.
func TestClusterPool(t *testing.T) {
	e := clusterExecutor(t, Options{StorageClass: clusterStorageClass(), Pool: 1})
	ctx := t.Context()
	b := executor.CheckpointBounds{}
	sb, err := e.Create(ctx, executor.Spec{UserID: "u1", ChatID: "warm"})
	require.NoError(t, err)
	require.NoError(t, sb.Close(ctx))
	waitPool(t, e, 1)
	pooled, err := e.cs.CoreV1().Pods(e.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelPool})
	require.NoError(t, err)
	require.Len(t, pooled.Items, 1)

	spec := executor.Spec{UserID: "u1", ChatID: "new-" + strings.ToLower(randomID()[:8])}
	start, err := e.TakeCheckpoint(ctx, spec.UserID, spec.ChatID, "start", b)
	require.NoError(t, err)
	t0 := time.Now()
	sb, err = e.Create(ctx, spec)
	require.NoError(t, err)
	t.Logf("a new chat's sandbox from the pool: %v", time.Since(t0))
	assert.Equal(t, pooled.Items[0].Name, sb.ID(), "the pooled pod")
	run(t, sb, "sh", "-c", "echo v1 > a.txt")
	ws, err := e.workspaceClaim(ctx, chatKey(spec.UserID, spec.ChatID))
	require.NoError(t, err)
	require.NotNil(t, ws)
	assert.True(t, strings.HasPrefix(ws.Name, poolPrefix), "the pooled claim %s is the chat's", ws.Name)
	dir := hostPathOf(t, e, ws.Name)
	got, err := os.ReadFile(filepath.Join(dir, "a.txt"))
	require.NoError(t, err)
	assert.Equal(t, "v1\n", string(got))
	require.NoError(t, sb.Close(ctx))

	turn1, err := e.TakeCheckpoint(ctx, spec.UserID, spec.ChatID, "turn 1", b)
	require.NoError(t, err)
	assert.Equal(t, start.ID, turn1.Parent, "the start checkpoint survived the claim's swap")
	assert.Equal(t, 1, turn1.Changed)

	sb, err = e.Create(ctx, spec)
	require.NoError(t, err)
	assert.False(t, strings.HasPrefix(sb.ID(), poolPrefix), "a follow-up is a pod of its own")
	out, _ := run(t, sb, "cat", "a.txt")
	assert.Equal(t, "v1\n", out, "over the chat's claim")
	require.NoError(t, sb.Close(ctx))

	// Another new chat gets another pooled pod, a fresh one: nothing the
	// first chat's agent wrote reaches it.
	waitPool(t, e, 1)
	other, err := e.Create(ctx, executor.Spec{UserID: "u2", ChatID: "new-" + strings.ToLower(randomID()[:8])})
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(other.ID(), poolPrefix), "a pooled pod")
	assert.NotEqual(t, pooled.Items[0].Name, other.ID())
	out, _ = run(t, other, "sh", "-c", "ls -A /workspace; ls /tmp")
	assert.Empty(t, strings.TrimSpace(out), "an empty workspace and /tmp")
	require.NoError(t, other.Close(ctx))

	_, err = e.RestoreCheckpoint(ctx, spec.UserID, spec.ChatID, start.ID)
	require.NoError(t, err)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "the start is an empty workspace")

	require.NoError(t, e.Close())
	assert.Eventually(t, func() bool {
		left, err := e.cs.CoreV1().PersistentVolumeClaims(e.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelPool})
		return err == nil && len(left.Items) == 0
	}, time.Minute, 100*time.Millisecond, "Close removes the pooled claims")
	ws, err = e.workspaceClaim(ctx, chatKey(spec.UserID, spec.ChatID))
	require.NoError(t, err)
	assert.NotNil(t, ws, "and keeps the chat's")
}
