package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/helper"
)

// fakeCluster is a clientset whose pods start in the state start gives
// them (Running by default), with no kubelet behind it.
type fakeCluster struct {
	cs      *fake.Clientset
	created atomic.Int32
	start   func(*corev1.Pod)
}

// bind binds the claims pod mounts, as the scheduler does when it places
// the pod.
func (f *fakeCluster) bind(pod *corev1.Pod) {
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		c, err := f.cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"), pod.Namespace, v.PersistentVolumeClaim.ClaimName)
		if err != nil {
			continue
		}
		pvc := c.(*corev1.PersistentVolumeClaim).DeepCopy()
		if pvc.Spec.VolumeName == "" {
			pvc.Spec.VolumeName, pvc.Status.Phase = "pv-"+pvc.Name, corev1.ClaimBound
			_ = f.cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"), pvc, pod.Namespace)
		}
	}
}

func newFake(t *testing.T, o Options) (*Executor, *fakeCluster) {
	t.Helper()
	o.Image = "img:1"
	o.Namespace = "ns"
	o, err := o.withDefaults()
	require.NoError(t, err)
	f := &fakeCluster{cs: fake.NewClientset()}
	f.start = func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	}
	f.cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.created.Add(1)
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		f.start(pod)
		f.bind(pod)
		return false, nil, nil
	})
	// A new claim waits for its first pod, as on a WaitForFirstConsumer
	// class.
	f.cs.PrependReactor("create", "persistentvolumeclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*corev1.PersistentVolumeClaim).Status.Phase = corev1.ClaimPending
		return false, nil, nil
	})
	e := newExecutor(o, &rest.Config{Host: "https://fake"}, f.cs)
	dial := localHelper(t)
	// As through a real port forward, the helper answers only once its
	// container runs.
	e.helperDial = func(ctx context.Context, pod string) (net.Conn, error) {
		p, err := f.cs.CoreV1().Pods(o.Namespace).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if started, err := podStarted(p); !started || err != nil {
			return nil, fmt.Errorf("pod %s: failed to connect to localhost:%d: connection refused", pod, HelperPort)
		}
		return dial(ctx, pod)
	}
	return e, f
}

// localHelper runs a real helper server in the test process with its exec
// port on loopback, standing in for the pods' helpers (one workspace for
// all of them), and returns a dial for Executor.helperDial.
func localHelper(t *testing.T) func(context.Context, string) (net.Conn, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// The directories before the goroutine: a test that ends before it
	// runs would otherwise remove them under the server.
	srv := helper.NewServer(helper.ServerOptions{Dir: t.TempDir(), Workdir: t.TempDir(), ExecPort: port})
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	return func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
}

func TestFakeCreateClose(t *testing.T) {
	e, f := newFake(t, Options{StorageClass: "local"})
	sb, err := e.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "c", DiskBytes: 5 << 30})
	require.NoError(t, err)
	pods, err := f.cs.CoreV1().Pods("ns").List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, pods.Items, 1)
	assert.Equal(t, sb.ID(), pods.Items[0].Name)
	pvc, err := f.cs.CoreV1().PersistentVolumeClaims("ns").Get(t.Context(), claimName("u", "c"), metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(5<<30), pvc.Spec.Resources.Requests.Storage().Value())

	require.NoError(t, sb.Close(context.Background()))
	require.NoError(t, sb.Close(context.Background()), "second Close")
	_, err = f.cs.CoreV1().Pods("ns").Get(t.Context(), sb.ID(), metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err))
	_, err = f.cs.CoreV1().PersistentVolumeClaims("ns").Get(t.Context(), claimName("u", "c"), metav1.GetOptions{})
	assert.NoError(t, err, "the workspace claim outlives the sandbox")
	_, err = sb.Exec(t.Context(), &executor.Cmd{Args: []string{"true"}})
	assert.ErrorIs(t, err, executor.ErrNotRunning)

	// The claim exists now: a second Create reuses it.
	_, err = e.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "c"})
	require.NoError(t, err)
	require.NoError(t, e.Close())
	pods, err = f.cs.CoreV1().Pods("ns").List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, pods.Items, "Executor.Close leaves pods")
	_, err = e.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "c"})
	assert.ErrorIs(t, err, executor.ErrNotRunning)
}

func TestFakeLeftoverPodRemoved(t *testing.T) {
	e, f := newFake(t, Options{})
	p, err := e.plan(executor.Spec{UserID: "u", ChatID: "c"}, time.Now())
	require.NoError(t, err)
	_, err = f.cs.CoreV1().Pods("ns").Create(t.Context(), e.pod(p, "abx-left"), metav1.CreateOptions{})
	require.NoError(t, err)
	other, err := e.plan(executor.Spec{UserID: "u", ChatID: "other"}, time.Now())
	require.NoError(t, err)
	_, err = f.cs.CoreV1().Pods("ns").Create(t.Context(), e.pod(other, "abx-other"), metav1.CreateOptions{})
	require.NoError(t, err)

	sb, err := e.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "c"})
	require.NoError(t, err)
	defer func() { _ = sb.Close(context.Background()) }()
	_, err = f.cs.CoreV1().Pods("ns").Get(t.Context(), "abx-left", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the pod left on the chat was not removed")
	_, err = f.cs.CoreV1().Pods("ns").Get(t.Context(), "abx-other", metav1.GetOptions{})
	assert.NoError(t, err, "another chat's pod was removed")
}

func TestFakeLeaseBusy(t *testing.T) {
	e, _ := newFake(t, Options{})
	spec := executor.Spec{UserID: "u", ChatID: "c", LeaseWait: 50 * time.Millisecond}
	sb, err := e.Create(t.Context(), spec)
	require.NoError(t, err)
	_, err = e.Create(t.Context(), spec)
	assert.ErrorIs(t, err, executor.ErrBusy)
	other, err := e.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "d"})
	require.NoError(t, err, "another chat is not blocked")
	require.NoError(t, other.Close(context.Background()))
	done := make(chan error, 1)
	go func() {
		sb2, err := e.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "c", LeaseWait: time.Minute})
		if err == nil {
			err = sb2.Close(context.Background())
		}
		done <- err
	}()
	require.NoError(t, sb.Close(context.Background()))
	require.NoError(t, <-done, "a waiter gets the chat once it is released")
}

func TestFakeStartFailures(t *testing.T) {
	for name, c := range map[string]struct {
		start func(*corev1.Pod)
		want  error
		text  string
	}{
		"image missing": {func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: "no image"}}}}
		}, executor.ErrNotRunning, "ErrImageNeverPull"},
		"helper exits": {func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "StartError", ExitCode: 128}}}}
		}, executor.ErrNotRunning, "is the helper in the image"},
		"pod failed": {func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed; p.Status.Reason = "DeadlineExceeded" }, executor.ErrNotRunning, "DeadlineExceeded"},
		"never scheduled": {func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
				Message: "0/1 nodes are available: 1 node(s) didn't find available persistent volumes to bind"}}
		}, executor.ErrTimeout, "not scheduled: Unschedulable: 0/1 nodes are available: 1 node(s) didn't find available persistent volumes"},
	} {
		t.Run(name, func(t *testing.T) {
			e, f := newFake(t, Options{ReadyTimeout: 300 * time.Millisecond})
			f.start = c.start
			_, err := e.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "c"})
			require.ErrorIs(t, err, c.want)
			assert.Contains(t, err.Error(), c.text)
			pods, err := f.cs.CoreV1().Pods("ns").List(t.Context(), metav1.ListOptions{})
			require.NoError(t, err)
			assert.Empty(t, pods.Items, "a pod that failed to start is left behind")
			// The lease was released: the chat can be tried again.
			f.start = func(p *corev1.Pod) {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
			}
			sb, err := e.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "c", LeaseWait: 10 * time.Millisecond})
			require.NoError(t, err)
			require.NoError(t, sb.Close(context.Background()))
		})
	}
}

func TestFakeForbiddenSaysWhatToGrant(t *testing.T) {
	e, f := newFake(t, Options{})
	f.cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("pods"), "", nil)
	})
	_, err := e.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "c"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pods/exec")
	assert.EqualValues(t, 0, f.created.Load(), "a pod was created although the chat's old pods could not be listed")
}

// replica is another executor (gateway replica) over f's cluster, with its
// instance lease taken and short leases.
func (f *fakeCluster) replica(t *testing.T, e *Executor, id string, opts ...func(*Options)) *Executor {
	t.Helper()
	o := e.o
	o.InstanceID = id
	o.LeaseDuration, o.ClockSkew, o.ReconcileInterval = time.Second, time.Millisecond, -1
	for _, f := range opts {
		f(&o)
	}
	o, err := o.withDefaults()
	require.NoError(t, err)
	r := newExecutor(o, e.cfg, f.cs)
	r.helperDial = e.helperDial
	require.NoError(t, r.start(t.Context()))
	return r
}

func leaseNames(t *testing.T, cs *fake.Clientset) []string {
	t.Helper()
	list, err := cs.CoordinationV1().Leases("ns").List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	var names []string
	for _, l := range list.Items {
		names = append(names, l.Name)
	}
	return names
}

// TestFakeReplicasShareChats: a chat held by one replica is busy for
// another until released; then the other gets it.
func TestFakeReplicasShareChats(t *testing.T) {
	base, f := newFake(t, Options{})
	a, b := f.replica(t, base, "replica-a"), f.replica(t, base, "replica-b")
	spec := executor.Spec{UserID: "u", ChatID: "c", LeaseWait: 300 * time.Millisecond}
	sa, err := a.Create(t.Context(), spec)
	require.NoError(t, err)
	_, err = b.Create(t.Context(), spec)
	require.ErrorIs(t, err, executor.ErrBusy)
	assert.Contains(t, err.Error(), "replica-a")
	require.NoError(t, sa.Close(context.Background()))
	assert.NotContains(t, leaseNames(t, f.cs), chatLeasePrefix+chatKey("u", "c"), "Close deletes the chat lease")
	sb, err := b.Create(t.Context(), spec)
	require.NoError(t, err)
	require.NoError(t, sb.Close(context.Background()))

	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	assert.Empty(t, leaseNames(t, f.cs), "leases left after both replicas closed")
}

// TestFakeTakeoverAfterLeaseExpiry: a replica that dies (no renewal, no
// cleanup) holds its chat only until its lease expires; the next replica
// takes the chat over and removes the dead one's pod first, and the
// reconciler removes the rest of what it left.
func TestFakeTakeoverAfterLeaseExpiry(t *testing.T) {
	base, f := newFake(t, Options{})
	a, b := f.replica(t, base, "replica-a"), f.replica(t, base, "replica-b")
	sa, err := a.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "c"})
	require.NoError(t, err)
	_, err = a.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "other"})
	require.NoError(t, err)
	a.abandon() // kill -9

	start := time.Now()
	sb, err := b.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "c", LeaseWait: 10 * time.Second})
	require.NoError(t, err)
	took := time.Since(start)
	t.Logf("chat taken over %v after its holder died", took)
	assert.Greater(t, took, 500*time.Millisecond, "taken over before the lease expired")
	_, err = f.cs.CoreV1().Pods("ns").Get(t.Context(), sa.ID(), metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the dead replica's pod on the chat is gone")

	// The other chat's lease was taken after c's and may expire a little
	// later (more so on a loaded machine): reconcile until it has.
	removed := 0
	require.Eventually(t, func() bool {
		n, err := b.Reconcile(t.Context())
		require.NoError(t, err)
		removed += n
		return removed >= 3
	}, 30*time.Second, 50*time.Millisecond, "the pod of the other chat, its chat lease and the instance lease")
	assert.Equal(t, 3, removed)
	pods, err := f.cs.CoreV1().Pods("ns").List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, pods.Items, 1)
	assert.Equal(t, sb.ID(), pods.Items[0].Name, "only the live replica's pod is left")
	require.NoError(t, b.Close())
	assert.Empty(t, leaseNames(t, f.cs))
}

// TestFakeTakeoverKicksReconciler: taking a chat over from a holder that
// stopped renewing runs the reconciler at once, so the dead replica's
// other pods go without waiting for the (here hour-long) interval; the
// Inventory shows each step.
func TestFakeTakeoverKicksReconciler(t *testing.T) {
	base, f := newFake(t, Options{StorageClass: "local"})
	a := f.replica(t, base, "replica-a")
	b := f.replica(t, base, "replica-b", func(o *Options) { o.ReconcileInterval = time.Hour })
	defer func() { assert.NoError(t, b.Close()) }()
	_, err := a.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "c"})
	require.NoError(t, err)
	_, err = a.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "other"})
	require.NoError(t, err)
	inv, err := b.Inventory(t.Context())
	require.NoError(t, err)
	require.Len(t, inv.Pods, 2)
	for _, p := range inv.Pods {
		assert.Equal(t, "replica-a", p.Instance, p.Name)
	}
	assert.ElementsMatch(t, []string{"c", "other"}, []string{inv.Claims[0].Chat, inv.Claims[1].Chat})
	a.abandon() // kill -9

	sb, err := b.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "c", LeaseWait: 10 * time.Second})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		inv, err := b.Inventory(t.Context())
		require.NoError(t, err)
		return len(inv.Pods) == 1 && inv.Pods[0].Instance == "replica-b"
	}, 10*time.Second, 50*time.Millisecond, "the dead replica's other pod is still there")
	require.NoError(t, sb.Close(t.Context()))
	// The reconciler's pass removes the dead instance's lease after its
	// pods: on a loaded machine, after the pod check above returned.
	var held []string
	assert.Eventually(t, func() bool {
		inv, err = b.Inventory(t.Context())
		require.NoError(t, err)
		held = held[:0]
		for _, l := range inv.Leases {
			held = append(held, l.Instance)
		}
		return slices.Equal([]string{"replica-b"}, held)
	}, 10*time.Second, 50*time.Millisecond, "only b's instance lease is left: %v", held)
	assert.Empty(t, inv.Pods)
	assert.Equal(t, "replica-b", b.Instance())
	assert.Len(t, inv.Claims, 2, "the workspaces stay")
}

// TestFakeQuotaWatchdog: a workspace past its disk quota gets its pod
// stopped by the watchdog (the helper measures it), and the sandbox's
// commands then fail with executor.ErrNoSpace, saying what to raise; a
// Create over quota does not start; negative Spec quotas are refused.
func TestFakeQuotaWatchdog(t *testing.T) {
	e, f := newFake(t, Options{QuotaInterval: 20 * time.Millisecond})
	defer func() { assert.NoError(t, e.Close()) }()
	_, err := e.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "c", DiskBytes: -1})
	require.ErrorIs(t, err, executor.ErrInvalid)

	sb, err := e.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "c", DiskBytes: executor.MinDiskBytes})
	require.NoError(t, err)
	// The watchdog may stop the sandbox under the command already.
	res, err := sb.Exec(t.Context(), &executor.Cmd{Args: []string{"sh", "-c", "head -c 20000000 /dev/zero > big"}})
	if err == nil {
		require.Equal(t, 0, res.ExitCode)
	} else {
		require.ErrorIs(t, err, executor.ErrNoSpace)
	}
	require.Eventually(t, func() bool {
		_, err := sb.Exec(t.Context(), &executor.Cmd{Args: []string{"true"}})
		return errors.Is(err, executor.ErrNoSpace)
	}, 10*time.Second, 20*time.Millisecond, "the watchdog did not stop the sandbox")
	_, err = sb.Exec(t.Context(), &executor.Cmd{Args: []string{"true"}})
	assert.ErrorContains(t, err, "sandbox.max_disk")
	pods, err := f.cs.CoreV1().Pods("ns").List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, pods.Items, "the pod over quota was deleted")
	require.NoError(t, sb.Close(context.Background()))

	// The workspace (the fake's helper keeps it) is still over quota.
	_, err = e.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "c", DiskBytes: executor.MinDiskBytes})
	require.ErrorIs(t, err, executor.ErrNoSpace)
	sb, err = e.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "c", DiskBytes: 4 * executor.MinDiskBytes})
	require.NoError(t, err, "a larger quota lets the chat start again")
	require.NoError(t, sb.Close(context.Background()))
}

// TestFakeRetentionSweep: the sweep deletes the claim of a chat unused for
// the retention period, keeps a recently used one, and never touches a
// chat that another replica is serving, however old its last use.
func TestFakeRetentionSweep(t *testing.T) {
	base, f := newFake(t, Options{StorageClass: "local", Retention: time.Hour, RetentionInterval: -1})
	a, b := f.replica(t, base, "replica-a"), f.replica(t, base, "replica-b")
	defer func() { assert.NoError(t, b.Close()) }()
	defer func() { assert.NoError(t, a.Close()) }()
	for _, chat := range []string{"old", "fresh"} {
		sb, err := a.Create(t.Context(), executor.Spec{UserID: "u", ChatID: chat})
		require.NoError(t, err)
		require.NoError(t, sb.Close(context.Background()))
	}
	busy, err := b.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "busy"})
	require.NoError(t, err)
	claims := f.cs.CoreV1().PersistentVolumeClaims("ns")
	age := func(chat string, d time.Duration) {
		c, err := claims.Get(t.Context(), claimName("u", chat), metav1.GetOptions{})
		require.NoError(t, err)
		c.Annotations[AnnotationLastUsed] = time.Now().Add(-d).UTC().Format(time.RFC3339)
		_, err = claims.Update(t.Context(), c, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	fresh, err := claims.Get(t.Context(), claimName("u", "fresh"), metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotEmpty(t, fresh.Annotations[AnnotationLastUsed], "Close records the last use")
	age("old", 2*time.Hour)
	age("busy", 2*time.Hour)

	n, err := a.SweepClaims(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	inv, err := a.Inventory(t.Context())
	require.NoError(t, err)
	var kept []string
	for _, c := range inv.Claims {
		kept = append(kept, c.Chat)
	}
	assert.ElementsMatch(t, []string{"fresh", "busy"}, kept)
	require.NoError(t, busy.Close(context.Background()))
	assert.NotContains(t, leaseNames(t, f.cs), chatLeasePrefix+chatKey("u", "old"), "the sweep released the chat's lease")
}

// TestFakeParkUnpark: a parked sandbox keeps its pod and frees the chat;
// Unpark takes the chat again and reuses the pod; when another replica
// served the chat meanwhile (removing the parked pod), Unpark says the
// pod is gone.
func TestFakeParkUnpark(t *testing.T) {
	base, f := newFake(t, Options{StorageClass: "local"})
	a, b := f.replica(t, base, "replica-a"), f.replica(t, base, "replica-b")
	defer func() { assert.NoError(t, b.Close()) }()
	defer func() { assert.NoError(t, a.Close()) }()

	sb, err := a.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "kept"})
	require.NoError(t, err)
	ks := sb.(*Sandbox)
	require.NoError(t, ks.Park())
	require.NoError(t, ks.Park(), "parking twice")
	assert.NotContains(t, leaseNames(t, f.cs), chatLeasePrefix+chatKey("u", "kept"), "a parked sandbox holds no lease")
	require.NoError(t, ks.Unpark(t.Context(), time.Second))
	assert.Contains(t, leaseNames(t, f.cs), chatLeasePrefix+chatKey("u", "kept"))
	res, err := sb.Exec(t.Context(), &executor.Cmd{Args: []string{"true"}})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	assert.Greater(t, time.Until(ks.Deadline()), time.Minute)

	// Another replica serves the chat while it is parked.
	require.NoError(t, ks.Park())
	other, err := b.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "kept", LeaseWait: time.Second})
	require.NoError(t, err)
	_, err = f.cs.CoreV1().Pods("ns").Get(t.Context(), sb.ID(), metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the other replica removed the parked pod")
	require.NoError(t, other.Close(context.Background()))
	err = ks.Unpark(t.Context(), time.Second)
	require.ErrorIs(t, err, executor.ErrSandboxGone)
	assert.NotContains(t, leaseNames(t, f.cs), chatLeasePrefix+chatKey("u", "kept"), "a failed Unpark releases the lease")
	require.NoError(t, sb.Close(context.Background()))
}
