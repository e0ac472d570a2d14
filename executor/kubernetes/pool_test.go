package kubernetes

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/agentbox/agentbox/executor"
)

// waitPool waits until e's pool holds n ready pods.
func waitPool(t *testing.T, e *Executor, n int) {
	t.Helper()
	waitReady(t, e.pool.size, n, "pooled")
}

// waitReady waits until size reports n ready what pods.
func waitReady(t *testing.T, size func() int, n int, what string) {
	t.Helper()
	require.Eventually(t, func() bool { return size() == n }, time.Minute, 10*time.Millisecond, "%d %s pods ready", n, what)
}

// TestFakePool: a closed sandbox refills its configuration's pool; a new
// chat adopts a pooled pod and its claim (no pod made on its request), a
// chat with a bound claim never does, a new chat's unbound claim (its
// start checkpoint's) gives way to the pooled one; Close removes the
// pooled pods and claims and keeps the chats'.
func TestFakePool(t *testing.T) {
	e, f := newFake(t, Options{StorageClass: "local", Pool: 1})
	ctx := t.Context()
	claims := f.cs.CoreV1().PersistentVolumeClaims("ns")
	pods := f.cs.CoreV1().Pods("ns")
	spec := func(chat string) executor.Spec { return executor.Spec{UserID: "u", ChatID: chat, Timeout: time.Minute} }

	sb, err := e.Create(ctx, spec("a"))
	require.NoError(t, err)
	assert.Equal(t, 0, e.pool.size(), "the pool fills once a sandbox of its configuration closes")
	require.NoError(t, sb.Close(ctx))
	waitPool(t, e, 1)
	pooled, err := pods.List(ctx, metav1.ListOptions{LabelSelector: LabelPool})
	require.NoError(t, err)
	require.Len(t, pooled.Items, 1)
	pp := pooled.Items[0]
	assert.Empty(t, pp.Labels[LabelChat], "a pooled pod is no chat's")
	assert.Equal(t, e.instanceHash(), pp.Labels[LabelInstance])
	require.NotNil(t, pp.Spec.ActiveDeadlineSeconds)
	assert.Equal(t, int64((time.Minute+DefaultPoolIdle)/time.Second), *pp.Spec.ActiveDeadlineSeconds, "its wait and then the request's timeout")
	poolClaim := pp.Spec.Volumes[0].PersistentVolumeClaim.ClaimName
	c, err := claims.Get(ctx, poolClaim, metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotEmpty(t, c.Labels[LabelPool])
	assert.Empty(t, c.Labels[LabelChat])

	// A new chat takes the pooled pod and its claim: no pod is made.
	made := f.created.Load()
	sb, err = e.Create(ctx, spec("b"))
	require.NoError(t, err)
	assert.Equal(t, pp.Name, sb.ID(), "the pooled pod")
	assert.Equal(t, made, f.created.Load(), "no pod made on the request")
	got, err := pods.Get(ctx, pp.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, chatKey("u", "b"), got.Labels[LabelChat])
	assert.NotContains(t, got.Labels, LabelPool)
	assert.Equal(t, "b", got.Annotations[AnnotationChat])
	ws, err := e.workspaceClaim(ctx, chatKey("u", "b"))
	require.NoError(t, err)
	require.NotNil(t, ws)
	assert.Equal(t, poolClaim, ws.Name, "the pooled claim is the chat's now")
	assert.NotContains(t, ws.Labels, LabelPool)
	assert.NotContains(t, ws.Labels, LabelInstance, "a chat's claim is no instance's")
	assert.Equal(t, "u", ws.Annotations[AnnotationUser])
	_, err = claims.Get(ctx, claimName("u", "b"), metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no claim of its own made")
	res, err := sb.Exec(ctx, &executor.Cmd{Args: []string{"true"}})
	require.NoError(t, err, "the adopted pod runs commands")
	assert.Equal(t, 0, res.ExitCode)
	require.NoError(t, sb.Close(ctx))
	waitPool(t, e, 1)

	// Chat b's claim is bound: its next sandbox is a pod of its own on it.
	made = f.created.Load()
	sb, err = e.Create(ctx, spec("b"))
	require.NoError(t, err)
	assert.NotEqual(t, pp.Name, sb.ID())
	assert.Equal(t, made+1, f.created.Load(), "a follow-up starts a pod")
	assert.Equal(t, 1, e.pool.size(), "and leaves the pool alone")
	got, err = pods.Get(ctx, sb.ID(), metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, poolClaim, got.Spec.Volumes[0].PersistentVolumeClaim.ClaimName, "over the chat's claim, found by its label")
	require.NoError(t, sb.Close(ctx))

	// Chat c's start checkpoint made an unbound claim: the pooled one
	// takes its place, and the checkpoint claim stays.
	_, ok, err := e.takeEmpty(ctx, "u", "c", "start", executor.CheckpointBounds{})
	require.NoError(t, err)
	require.True(t, ok)
	_, err = claims.Get(ctx, claimName("u", "c"), metav1.GetOptions{})
	require.NoError(t, err)
	sb, err = e.Create(ctx, spec("c"))
	require.NoError(t, err)
	ws, err = e.workspaceClaim(ctx, chatKey("u", "c"))
	require.NoError(t, err)
	require.NotNil(t, ws)
	assert.Contains(t, ws.Name, poolPrefix, "the pooled claim")
	_, err = claims.Get(ctx, claimName("u", "c"), metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the unbound claim is gone")
	_, err = claims.Get(ctx, checkpointClaimName("u", "c"), metav1.GetOptions{})
	require.NoError(t, err, "the checkpoint claim stays")
	require.NoError(t, sb.Close(ctx))
	waitPool(t, e, 1)

	require.NoError(t, e.Close())
	all, err := pods.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, all.Items, "Close removes the pooled pod")
	left, err := claims.List(ctx, metav1.ListOptions{LabelSelector: LabelPool})
	require.NoError(t, err)
	assert.Empty(t, left.Items, "and its claim")
	for _, chat := range []string{"a", "b", "c"} {
		ws, err := e.workspaceClaim(ctx, chatKey("u", chat))
		require.NoError(t, err)
		assert.NotNil(t, ws, "chat %s keeps its claim", chat)
	}
}

// TestFakePoolOtherConfig: a request takes only a pooled pod of its own
// configuration (here, another memory limit).
func TestFakePoolOtherConfig(t *testing.T) {
	e, f := newFake(t, Options{Pool: 1})
	ctx := t.Context()
	sb, err := e.Create(ctx, executor.Spec{UserID: "u", ChatID: "a", MemoryBytes: 256 << 20})
	require.NoError(t, err)
	require.NoError(t, sb.Close(ctx))
	waitPool(t, e, 1)
	made := f.created.Load()
	sb, err = e.Create(ctx, executor.Spec{UserID: "u", ChatID: "b", MemoryBytes: 512 << 20})
	require.NoError(t, err)
	assert.Equal(t, made+1, f.created.Load(), "a pod of its own")
	assert.Equal(t, 1, e.pool.size())
	require.NoError(t, sb.Close(ctx))
	require.NoError(t, e.Close())
}

// TestFakePoolOfDeadInstance: the pooled pods and claims of an instance
// killed (no Close) are removed by another replica's reconciler, and by
// the same instance when it starts again; a chat's claims stay.
func TestFakePoolOfDeadInstance(t *testing.T) {
	e, f := newFake(t, Options{StorageClass: "local", Pool: 2, InstanceID: "dead"})
	ctx := t.Context()
	sb, err := e.Create(ctx, executor.Spec{UserID: "u", ChatID: "a"})
	require.NoError(t, err)
	require.NoError(t, sb.Close(ctx))
	waitPool(t, e, 2)
	e.abandon()

	count := func() (pods, claims int) {
		p, err := f.cs.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{LabelSelector: LabelPool})
		require.NoError(t, err)
		c, err := f.cs.CoreV1().PersistentVolumeClaims("ns").List(ctx, metav1.ListOptions{LabelSelector: LabelPool})
		require.NoError(t, err)
		return len(p.Items), len(c.Items)
	}
	np, nc := count()
	require.Equal(t, 2, np)
	require.Equal(t, 2, nc)

	again := newExecutor(e.o, e.cfg, f.cs)
	n, err := again.sweepPool(ctx, func(h string) bool { return h != again.instanceHash() })
	require.NoError(t, err)
	assert.Equal(t, 4, n, "the same instance, started again, removes what it pooled before")
	np, nc = count()
	assert.Equal(t, 0, np)
	assert.Equal(t, 0, nc)
	ws, err := again.workspaceClaim(ctx, chatKey("u", "a"))
	require.NoError(t, err)
	assert.NotNil(t, ws, "the chat's claim stays")

	// Another replica's reconciler, for an instance without a lease.
	o2 := e.o
	o2.InstanceID, o2.Pool = "dead2", 1
	e2 := newExecutor(o2, e.cfg, f.cs)
	e2.helperDial = e.helperDial
	sb, err = e2.Create(ctx, executor.Spec{UserID: "u", ChatID: "z"})
	require.NoError(t, err)
	require.NoError(t, sb.Close(ctx))
	waitPool(t, e2, 1)
	e2.abandon()
	o3 := e.o
	o3.InstanceID, o3.Pool, o3.PoolIdle = "alive", 0, 0
	other := newExecutor(o3, e.cfg, f.cs)
	_, err = other.Reconcile(context.Background())
	require.NoError(t, err)
	np, nc = count()
	assert.Equal(t, 0, np, "the dead instance's pooled pod")
	assert.Equal(t, 0, nc, "and its claim")
	list, err := f.cs.CoreV1().PersistentVolumeClaims("ns").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Len(t, list.Items, 2, "chats a and z keep their claims")
}

// TestPoolKey: chat, assistant and quota are not part of a pooled pod's
// configuration; what its spec fixes at start is, the claim's size too.
func TestPoolKey(t *testing.T) {
	e := unitExecutor(t, Options{Image: "img:1", StorageClass: "local"})
	plan := func(s executor.Spec) plan {
		p, err := e.plan(s, time.Now())
		require.NoError(t, err)
		return p
	}
	k := poolKey(plan(executor.Spec{UserID: "u", ChatID: "a"}))
	assert.Equal(t, k, poolKey(plan(executor.Spec{UserID: "v", ChatID: "b", AssistantID: "x", ConfigHash: "h", Inodes: 5000})))
	for name, s := range map[string]executor.Spec{
		"memory": {MemoryBytes: 1 << 30},
		"env":    {Env: []string{"A=1"}},
		"egress": {Egress: true},
		"claim":  {DiskBytes: 1 << 30},
		"image":  {Image: "img:2"},
	} {
		s.UserID, s.ChatID = "u", "a"
		assert.NotEqual(t, k, poolKey(plan(s)), name)
	}
}

// TestFakePoolAdoptionRefused: an account that may not patch pods (a role
// without the verb) gets no pooled pod, but its request is served by a
// pod of its own over the chat's one claim (the pooled claim, already
// the chat's when the pod's patch failed), and the pooled pod is removed.
func TestFakePoolAdoptionRefused(t *testing.T) {
	e, f := newFake(t, Options{StorageClass: "local", Pool: 1})
	ctx := t.Context()
	// Before any pod starts: the fake's reactors are no one's to change
	// while a pool fill calls the API.
	f.cs.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("pods"), "x", errors.New("no patch verb"))
	})
	sb, err := e.Create(ctx, executor.Spec{UserID: "u", ChatID: "a"})
	require.NoError(t, err)
	require.NoError(t, sb.Close(ctx))
	waitPool(t, e, 1)
	_, ok, err := e.takeEmpty(ctx, "u", "b", "start", executor.CheckpointBounds{})
	require.NoError(t, err)
	require.True(t, ok, "the chat's unbound claim, which the adoption deletes")
	sb, err = e.Create(ctx, executor.Spec{UserID: "u", ChatID: "b"})
	require.NoError(t, err, "served without the pool")
	assert.False(t, strings.HasPrefix(sb.ID(), poolPrefix))
	list, err := f.cs.CoreV1().PersistentVolumeClaims("ns").List(ctx, metav1.ListOptions{LabelSelector: LabelChat + "=" + chatKey("u", "b") + "," + LabelRole + "!=" + RoleCheckpoint})
	require.NoError(t, err)
	require.Len(t, list.Items, 1, "one workspace claim")
	pod, err := f.cs.CoreV1().Pods("ns").Get(ctx, sb.ID(), metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, list.Items[0].Name, pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName, "its pod mounts it")
	pooled, err := f.cs.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{LabelSelector: LabelPool})
	require.NoError(t, err)
	assert.Empty(t, pooled.Items, "the pooled pod is removed")
	require.NoError(t, sb.Close(ctx))
}
