package kubernetes

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentbox/agentbox/executor"
)

// TestClusterSuccessor: on a real cluster, a chat's follow-up sandbox is
// the successor pod started when its first sandbox closed, over the
// chat's bound claim: it sees the workspace the first turn wrote, and
// nothing else of it (no /tmp file, no process the agent left running in
// the background). Close leaves no pod of the chat and keeps its claim.
func TestClusterSuccessor(t *testing.T) {
	e := clusterExecutor(t, Options{StorageClass: clusterStorageClass(), Successors: 1})
	ctx := t.Context()
	spec := executor.Spec{UserID: "u1", ChatID: "next-" + strings.ToLower(randomID()[:8])}
	sb, err := e.Create(ctx, spec)
	require.NoError(t, err)
	run(t, sb, "sh", "-c", "echo v1 > a.txt; echo t > /tmp/left; setsid sleep 1000 > /dev/null 2>&1 < /dev/null &")
	require.NoError(t, sb.Close(ctx))
	t0 := time.Now()
	waitSuccessors(t, e, 1)
	t.Logf("the successor was ready %v after the close", time.Since(t0))
	list, err := e.cs.CoreV1().Pods(e.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelChat + "=" + chatKey(spec.UserID, spec.ChatID)})
	require.NoError(t, err)
	require.Len(t, list.Items, 1, "the successor alone: the closed pod is gone")
	succ := list.Items[0].Name

	t0 = time.Now()
	sb, err = e.Create(ctx, spec)
	require.NoError(t, err)
	t.Logf("the follow-up's sandbox: %v", time.Since(t0))
	assert.Equal(t, succ, sb.ID(), "the successor pod")
	out, _ := run(t, sb, "cat", "a.txt")
	assert.Equal(t, "v1\n", out, "over the chat's claim")
	out, _ = run(t, sb, "sh", "-c", "ls -A /tmp; ps -o args")
	assert.NotContains(t, out, "left", "the earlier turn's /tmp is gone")
	assert.NotContains(t, out, "sleep 1000", "and its processes")
	require.NoError(t, sb.Close(ctx))
	waitSuccessors(t, e, 1)

	require.NoError(t, e.Close())
	list, err = e.cs.CoreV1().Pods(e.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelChat + "=" + chatKey(spec.UserID, spec.ChatID)})
	require.NoError(t, err)
	assert.Empty(t, list.Items, "Close removes the successor")
	ws, err := e.workspaceClaim(ctx, chatKey(spec.UserID, spec.ChatID))
	require.NoError(t, err)
	assert.NotNil(t, ws, "and keeps the chat's claim")
}
