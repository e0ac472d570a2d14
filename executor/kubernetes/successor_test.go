package kubernetes

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentbox/agentbox/executor"
)

// waitSuccessors waits until e holds n ready successor pods.
func waitSuccessors(t *testing.T, e *Executor, n int) {
	t.Helper()
	waitReady(t, e.succ.Size, n, "successor")
}

// TestFakeSuccessor: a closed sandbox's chat gets a successor pod over its
// claim, which the chat's next request of the same configuration takes
// (no pod made on the request); a request of another configuration
// removes it and starts its own; at most Successors wait; Close removes
// them and keeps the chats' claims.
func TestFakeSuccessor(t *testing.T) {
	e, f := newFake(t, Options{StorageClass: "local", Successors: 2})
	ctx := t.Context()
	pods := f.cs.CoreV1().Pods("ns")
	spec := func(chat string) executor.Spec { return executor.Spec{UserID: "u", ChatID: chat, Timeout: time.Minute} }

	sb, err := e.Create(ctx, spec("a"))
	require.NoError(t, err)
	first := sb.ID()
	claim := sb.(*Sandbox).plan.claim
	require.NoError(t, sb.Close(ctx))
	waitSuccessors(t, e, 1)
	_, err = pods.Get(ctx, first, metav1.GetOptions{})
	require.Error(t, err, "the closed pod is gone before its successor starts")
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: LabelChat + "=" + chatKey("u", "a")})
	require.NoError(t, err)
	require.Len(t, list.Items, 1)
	succ := list.Items[0]
	assert.NotEmpty(t, succ.Labels[LabelPool], "pooled, for the reconciler")
	assert.Equal(t, e.instanceHash(), succ.Labels[LabelInstance])
	assert.Equal(t, claim, succ.Spec.Volumes[0].PersistentVolumeClaim.ClaimName, "over the chat's claim")
	require.NotNil(t, succ.Spec.ActiveDeadlineSeconds)
	assert.Equal(t, int64((time.Minute+DefaultPoolIdle)/time.Second), *succ.Spec.ActiveDeadlineSeconds, "its wait and then the request's timeout")

	made := f.created.Load()
	sb, err = e.Create(ctx, spec("a"))
	require.NoError(t, err)
	assert.Equal(t, succ.Name, sb.ID(), "the follow-up takes the successor")
	assert.Equal(t, made, f.created.Load(), "no pod made on the request")
	got, err := pods.Get(ctx, succ.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotContains(t, got.Labels, LabelPool, "no longer pooled")
	res, err := sb.Exec(ctx, &executor.Cmd{Args: []string{"true"}})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	require.NoError(t, sb.Close(ctx))
	waitSuccessors(t, e, 1)

	// Another configuration: the successor goes, a pod of its own comes.
	other := spec("a")
	other.MemoryBytes = 256 << 20
	made = f.created.Load()
	sb, err = e.Create(ctx, other)
	require.NoError(t, err)
	assert.Equal(t, made+1, f.created.Load())
	list, err = pods.List(ctx, metav1.ListOptions{LabelSelector: LabelChat + "=" + chatKey("u", "a")})
	require.NoError(t, err)
	require.Len(t, list.Items, 1, "the successor was removed")
	assert.Equal(t, sb.ID(), list.Items[0].Name)
	assert.Equal(t, 0, e.succ.Size())
	require.NoError(t, sb.Close(ctx))
	waitSuccessors(t, e, 1)

	// At most Successors wait, all chats together.
	for _, chat := range []string{"b", "c"} {
		sb, err := e.Create(ctx, spec(chat))
		require.NoError(t, err)
		require.NoError(t, sb.Close(ctx))
	}
	e.succ.Wait()
	assert.Equal(t, 2, e.succ.Size())

	require.NoError(t, e.Close())
	all, err := pods.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, all.Items, "Close removes the successors")
	for _, chat := range []string{"a", "b"} {
		ws, err := e.workspaceClaim(ctx, chatKey("u", chat))
		require.NoError(t, err)
		assert.NotNil(t, ws, "chat %s keeps its claim", chat)
	}
}

// TestFakeSuccessorSession: a session-policy sandbox gets no successor
// (its pod is kept; the next turn unparks it).
func TestFakeSuccessorSession(t *testing.T) {
	e, _ := newFake(t, Options{StorageClass: "local", Successors: 1})
	ctx := t.Context()
	sb, err := e.Create(ctx, executor.Spec{UserID: "u", ChatID: "s", Timeout: time.Minute, IdleTTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, sb.Close(ctx))
	e.succ.Wait()
	assert.Equal(t, 0, e.succ.Size())
}

// TestFakeSuccessorOtherReplica: another replica's request for the chat
// removes this replica's successor and starts its own pod, so the
// workspace never has two; this replica's next request of the chat then
// finds its successor gone and starts a pod of its own. A dead instance's
// successor goes with its other pods, and the chat's claim stays.
func TestFakeSuccessorOtherReplica(t *testing.T) {
	e, f := newFake(t, Options{StorageClass: "local", Successors: 1})
	ctx := t.Context()
	pods := f.cs.CoreV1().Pods("ns")
	spec := executor.Spec{UserID: "u", ChatID: "a", Timeout: time.Minute}
	chatPods := func() []string {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: LabelChat + "=" + chatKey("u", "a")})
		require.NoError(t, err)
		var names []string
		for _, p := range list.Items {
			names = append(names, p.Name)
		}
		return names
	}
	sb, err := e.Create(ctx, spec)
	require.NoError(t, err)
	require.NoError(t, sb.Close(ctx))
	waitSuccessors(t, e, 1)
	succ := chatPods()
	require.Len(t, succ, 1)

	r := f.replica(t, e, "other", func(o *Options) { o.Successors, o.PoolIdle = 0, 0 })
	sb, err = r.Create(ctx, spec)
	require.NoError(t, err)
	assert.Equal(t, []string{sb.ID()}, chatPods(), "the other replica's pod alone")
	require.NoError(t, sb.Close(ctx))
	require.NoError(t, r.Close())

	made := f.created.Load()
	sb, err = e.Create(ctx, spec)
	require.NoError(t, err)
	assert.NotEqual(t, succ[0], sb.ID())
	assert.Equal(t, made+1, f.created.Load(), "a pod of its own")
	require.NoError(t, sb.Close(ctx))
	waitSuccessors(t, e, 1)

	// The instance dies with its successor waiting: the reconciler of a
	// live one removes the pod and keeps the chat's claim.
	e.abandon()
	o := e.o
	o.InstanceID, o.Successors, o.PoolIdle = "alive", 0, 0
	alive := newExecutor(o, e.cfg, f.cs)
	_, err = alive.Reconcile(ctx)
	require.NoError(t, err)
	assert.Eventually(t, func() bool { return len(chatPods()) == 0 }, time.Minute, 10*time.Millisecond, "the dead instance's successor is removed")
	ws, err := alive.workspaceClaim(ctx, chatKey("u", "a"))
	require.NoError(t, err)
	assert.NotNil(t, ws, "the chat keeps its claim")
}

// TestFakeSuccessorCloseWhileWaiting: a successor's fill waiting for its
// chat's leases (held here as an open sandbox would) does not hold the
// executor's Close up for the lease wait.
func TestFakeSuccessorCloseWhileWaiting(t *testing.T) {
	e, _ := newFake(t, Options{StorageClass: "local", Successors: 1})
	ctx := t.Context()
	p, err := e.plan(executor.Spec{UserID: "u", ChatID: "a", LeaseWait: time.Hour}, time.Now())
	require.NoError(t, err)
	p.claim = claimName("u", "a")
	release, err := e.lockChat(ctx, p)
	require.NoError(t, err)
	defer release()
	e.succ.Refill(p.chat, successorPlan{plan: p, after: "gone"})
	done := make(chan error, 1)
	go func() { done <- e.Close() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("Close waited for the fill's lease wait (an hour)")
	}
	assert.Equal(t, 0, e.succ.Size())
}

// TestFakeSuccessorExpires: a successor unused for PoolIdle is removed,
// and its place in Successors is free again.
func TestFakeSuccessorExpires(t *testing.T) {
	e, f := newFake(t, Options{StorageClass: "local", Successors: 1, PoolIdle: time.Second})
	require.NoError(t, e.start(t.Context()))
	ctx := t.Context()
	sb, err := e.Create(ctx, executor.Spec{UserID: "u", ChatID: "a", Timeout: time.Minute})
	require.NoError(t, err)
	require.NoError(t, sb.Close(ctx))
	waitSuccessors(t, e, 1)
	waitSuccessors(t, e, 0)
	assert.Eventually(t, func() bool {
		list, err := f.cs.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0
	}, time.Minute, 10*time.Millisecond, "its pod is removed")
	sb, err = e.Create(ctx, executor.Spec{UserID: "u", ChatID: "b", Timeout: time.Minute})
	require.NoError(t, err)
	require.NoError(t, sb.Close(ctx))
	waitSuccessors(t, e, 1)
	require.NoError(t, e.Close())
}
