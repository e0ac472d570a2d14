package kubernetes

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/executor/helper"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/services/egress"
)

// clusterExecutor makes an Executor over a fresh namespace that the test's
// cleanup deletes.
func clusterExecutor(t testing.TB, o Options) *Executor {
	t.Helper()
	o.Kubeconfig = testenv.RequireCluster(t)
	if o.Image == "" {
		o.Image = testenv.Image()
	}
	if o.ImagePullPolicy == "" {
		o.ImagePullPolicy = "Never"
	}
	if o.RuntimeClassName == "" {
		o.RuntimeClassName = os.Getenv("AGENTBOX_K8S_RUNTIMECLASS")
	}
	ns := "abx-test-" + randomID()[:8]
	o.Namespace = ns
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	require.NoError(t, err)
	admin, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	_, err = admin.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	e, err := New(t.Context(), o)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, e.Close())
		ctx := context.Background()
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if assert.NoError(t, err) {
			assert.Empty(t, pods.Items, "pods left in the namespace after Close")
		}
		leases, err := admin.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
		if assert.NoError(t, err) {
			assert.Empty(t, leases.Items, "leases left in the namespace after Close")
		}
		assert.NoError(t, admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
	})
	return e
}

func run(t *testing.T, sb executor.Sandbox, args ...string) (string, executor.ExecResult) {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := sb.Exec(t.Context(), &executor.Cmd{Args: args, Stdout: &out, Stderr: &errb})
	require.NoError(t, err, "exec %q: stderr %s", args, errb.String())
	return out.String(), res
}

func TestClusterPodSecurity(t *testing.T) {
	e := clusterExecutor(t, Options{})
	start := time.Now()
	sb, err := e.Create(t.Context(), executor.Spec{UserID: "u1", ChatID: "sec", MemoryBytes: 256 << 20, CPUs: 0.5})
	require.NoError(t, err)
	t.Logf("create to running: %v", time.Since(start))
	defer func() { assert.NoError(t, sb.Close(context.Background())) }()

	// From the API: what the cluster actually stored and runs.
	pod, err := e.cs.CoreV1().Pods(e.o.Namespace).Get(t.Context(), sb.ID(), metav1.GetOptions{})
	require.NoError(t, err)
	s, c := pod.Spec, pod.Spec.Containers[0]
	assert.True(t, *s.SecurityContext.RunAsNonRoot)
	assert.Equal(t, int64(DefaultUID), *s.SecurityContext.RunAsUser)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, s.SecurityContext.SeccompProfile.Type)
	assert.False(t, *s.AutomountServiceAccountToken)
	assert.False(t, s.HostNetwork || s.HostPID || s.HostIPC)
	assert.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop)
	assert.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
	assert.True(t, *c.SecurityContext.ReadOnlyRootFilesystem)
	assert.Equal(t, "500m", c.Resources.Limits.Cpu().String())
	assert.Equal(t, "256Mi", c.Resources.Limits.Memory().String())
	if e.o.RuntimeClassName != "" {
		assert.Equal(t, e.o.RuntimeClassName, *s.RuntimeClassName)
	}
	for _, v := range s.Volumes {
		assert.Nil(t, v.HostPath, "volume %s is a hostPath", v.Name)
		assert.Nil(t, v.Projected, "volume %s is projected (a token?)", v.Name)
	}

	// From inside.
	id, _ := run(t, sb, "id", "-u")
	assert.Equal(t, fmt.Sprint(DefaultUID), strings.TrimSpace(id))
	status, _ := run(t, sb, "cat", "/proc/self/status")
	assert.Regexp(t, `(?m)^CapEff:\s+0+$`, status)
	assert.Regexp(t, `(?m)^CapBnd:\s+0+$`, status)
	assert.Regexp(t, `(?m)^NoNewPrivs:\s+1$`, status)
	assert.Regexp(t, `(?m)^Seccomp:\s+2$`, status)
	links, _ := run(t, sb, "ls", "/sys/class/net")
	assert.Equal(t, []string{"lo"}, strings.Fields(links), "interfaces in the pod")
	routes, _ := run(t, sb, "cat", "/proc/net/route")
	assert.Len(t, strings.Split(strings.TrimSpace(routes), "\n"), 1, "routes besides the header: %s", routes)
	_, res := run(t, sb, "sh", "-c", "echo x > /rootfile 2>/dev/null")
	assert.NotEqual(t, 0, res.ExitCode, "the root filesystem is writable")
	out, _ := run(t, sb, "sh", "-c", "echo hi > /workspace/f && cat /workspace/f && echo t > /tmp/t && echo h > $HOME/h && cat /tmp/t $HOME/h")
	assert.Equal(t, "hi\nt\nh\n", out)
	// PID 1 is the pod's pause process, which reaps what commands orphan.
	// It runs as the sandbox user (the pod's runAsUser), so the agent can
	// end it, which ends only its own pod; its root is the pause image.
	assert.True(t, *s.ShareProcessNamespace)
	pid1, _ := run(t, sb, "sh", "-c", "tr '\\0' ' ' < /proc/1/cmdline; ls /proc/1/root/")
	assert.Equal(t, "/pause dev\netc\npause\nproc\nsys\n", pid1)
	// Orphans are reaped: no zombie is left by a command's background child.
	run(t, sb, "sh", "-c", "sleep 0.1 & exit 0")
	require.Eventually(t, func() bool {
		ps, _ := run(t, sb, "sh", "-c", "grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l")
		return strings.TrimSpace(ps) == "0"
	}, 10*time.Second, 200*time.Millisecond, "zombies are not reaped")
}

// TestClusterExec runs the same commands through the pod's helper (Exec,
// over the port forward) and through the API server's exec subresource,
// and logs each path's round trip.
func TestClusterExec(t *testing.T) {
	e := clusterExecutor(t, Options{StopGrace: time.Second})
	sb, err := e.Create(t.Context(), executor.Spec{UserID: "u1", ChatID: "exec"})
	require.NoError(t, err)
	defer func() { assert.NoError(t, sb.Close(context.Background())) }()
	ks := sb.(*Sandbox)
	for _, path := range []struct {
		name string
		exec func(context.Context, *executor.Cmd) (executor.ExecResult, error)
	}{{PathHelper, ks.Exec}, {PathKubeExec, ks.execAPI}} {
		t.Run(path.name, func(t *testing.T) { testExecPath(t, ks, path.name, path.exec) })
	}
}

func testExecPath(t *testing.T, sb *Sandbox, name string, exec func(context.Context, *executor.Cmd) (executor.ExecResult, error)) {
	ctx := t.Context()
	run := func(t *testing.T, args ...string) (string, executor.ExecResult) {
		t.Helper()
		var out, errb bytes.Buffer
		res, err := exec(ctx, &executor.Cmd{Args: args, Stdout: &out, Stderr: &errb})
		require.NoError(t, err, "exec %q: stderr %s", args, errb.String())
		return out.String(), res
	}
	t.Run("exit code, env, dir, stdin, stderr", func(t *testing.T) {
		var out, errb bytes.Buffer
		res, err := exec(ctx, &executor.Cmd{
			Args:   []string{"sh", "-c", `pwd; echo "$A|$B"; cat; echo oops >&2; exit 3`},
			Env:    []string{"A=1 2", "B=$(id)"},
			Dir:    "/tmp",
			Stdin:  strings.NewReader("from stdin\n"),
			Stdout: &out, Stderr: &errb,
		})
		require.NoError(t, err)
		assert.Equal(t, 3, res.ExitCode)
		assert.Equal(t, name, res.Path)
		assert.Equal(t, "/tmp\n1 2|$(id)\nfrom stdin\n", out.String())
		assert.Equal(t, "oops\n", errb.String())
	})
	t.Run("argv is not shell-parsed", func(t *testing.T) {
		out, _ := run(t, "echo", "a b", "$HOME", "`id`", ";", "x=y")
		assert.Equal(t, "a b $HOME `id` ; x=y\n", out)
	})
	t.Run("missing program", func(t *testing.T) {
		res, err := exec(ctx, &executor.Cmd{Args: []string{"no-such-program"}})
		if err == nil {
			assert.Equal(t, 127, res.ExitCode)
		} else {
			assert.ErrorIs(t, err, executor.ErrNotFound)
		}
	})
	t.Run("bad env refused", func(t *testing.T) {
		_, err := exec(ctx, &executor.Cmd{Args: []string{"true"}, Env: []string{"A;rm=1"}})
		assert.ErrorIs(t, err, executor.ErrInvalid)
	})
	t.Run("timeout kills the command and what it started", func(t *testing.T) {
		res, err := exec(ctx, &executor.Cmd{Args: []string{"sh", "-c", "sleep 300 & sleep 301; echo never"}, Timeout: time.Second})
		assert.ErrorIs(t, err, executor.ErrTimeout)
		assert.NotEqual(t, 0, res.ExitCode)
		ps, _ := run(t, "ps", "-o", "args")
		assert.NotContains(t, ps, "sleep 30", "processes of the timed-out command survived")
	})
	t.Run("output cap", func(t *testing.T) {
		var out bytes.Buffer
		_, err := exec(ctx, &executor.Cmd{Args: []string{"sh", "-c", "yes | head -c 1000000; sleep 300"}, MaxOutput: 4096, Stdout: &out})
		assert.ErrorIs(t, err, executor.ErrOutputTooLarge)
		assert.LessOrEqual(t, out.Len(), 4096)
		ps, _ := run(t, "ps", "-o", "args")
		assert.NotContains(t, ps, "sleep 300")
	})
	t.Run("cancel", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(500*time.Millisecond, cancel)
		_, err := exec(cctx, &executor.Cmd{Args: []string{"sleep", "302"}})
		assert.ErrorIs(t, err, context.Canceled)
		// The helper kills with a grace; give it that long.
		require.Eventually(t, func() bool {
			ps, _ := run(t, "ps", "-o", "args")
			return !strings.Contains(ps, "sleep 302")
		}, 10*time.Second, 100*time.Millisecond)
	})
	t.Run("round trip", func(t *testing.T) {
		var d []time.Duration
		for range 10 {
			start := time.Now()
			run(t, "true")
			d = append(d, time.Since(start))
		}
		slices.Sort(d)
		t.Logf("exec round trip through %s: min %v median %v max %v", name, d[0], d[len(d)/2], d[len(d)-1])
	})
}

// TestClusterConformance is the executor conformance suite on pods, with
// workspace claims of AGENTBOX_K8S_STORAGECLASS (agentbox-local, the
// test cluster's pool of volumes, when unset).
func TestClusterConformance(t *testing.T) {
	sc := os.Getenv("AGENTBOX_K8S_STORAGECLASS")
	if sc == "" {
		sc = "agentbox-local"
	}
	executortest.RunConformance(t, func(t *testing.T) executor.Executor {
		return clusterExecutor(t, Options{StorageClass: sc})
	}, executor.Spec{})
}

func TestClusterCloseAndTakeover(t *testing.T) {
	e := clusterExecutor(t, Options{LeaseDuration: 2 * time.Second, ClockSkew: time.Millisecond, ReconcileInterval: -1})
	spec := executor.Spec{UserID: "u1", ChatID: "take", LeaseWait: time.Minute}
	sb, err := e.Create(t.Context(), spec)
	require.NoError(t, err)

	// The gateway crashes (no cleanup); another one (or this one,
	// restarted) takes the chat once its lease expired, removing the first
	// pod before starting its own.
	e.abandon()
	o2 := e.o
	o2.InstanceID = ""
	e2, err := New(t.Context(), o2)
	require.NoError(t, err)
	start := time.Now()
	sb2, err := e2.Create(t.Context(), spec)
	require.NoError(t, err)
	t.Logf("chat taken over after %v (lease %v)", time.Since(start), e.o.LeaseDuration)
	_, err = e.cs.CoreV1().Pods(e.o.Namespace).Get(t.Context(), sb.ID(), metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the first pod still exists: %v", err)
	_, err = sb.Exec(t.Context(), &executor.Cmd{Args: []string{"true"}})
	assert.ErrorIs(t, err, executor.ErrSandboxGone)
	assert.NoError(t, sb.Close(context.Background()), "closing the crashed gateway's sandbox touches nothing of the new holder")

	start = time.Now()
	require.NoError(t, sb2.Close(context.Background()))
	t.Logf("close (deletion begun): %v", time.Since(start))
	if pod, err := e.cs.CoreV1().Pods(e.o.Namespace).Get(t.Context(), sb2.ID(), metav1.GetOptions{}); err == nil {
		assert.NotNil(t, pod.DeletionTimestamp, "Close began the pod's deletion")
	} else {
		assert.True(t, apierrors.IsNotFound(err), "%v", err)
	}
	_, err = sb2.Exec(t.Context(), &executor.Cmd{Args: []string{"true"}})
	assert.ErrorIs(t, err, executor.ErrNotRunning)
	// The chat's next pod starts only once the previous one is gone.
	start = time.Now()
	sb3, err := e2.Create(t.Context(), spec)
	require.NoError(t, err)
	t.Logf("next create on the chat, waiting for the previous pod: %v", time.Since(start))
	_, err = e.cs.CoreV1().Pods(e.o.Namespace).Get(t.Context(), sb2.ID(), metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the previous pod still exists: %v", err)
	require.NoError(t, sb3.Close(context.Background()))
	// The crashed instance's lease is what is left; the reconciler removes it.
	n, err := e2.Reconcile(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	require.NoError(t, e2.Close())
}

func TestClusterLease(t *testing.T) {
	e := clusterExecutor(t, Options{})
	spec := executor.Spec{UserID: "u1", ChatID: "lease", LeaseWait: 300 * time.Millisecond}
	sb, err := e.Create(t.Context(), spec)
	require.NoError(t, err)
	_, err = e.Create(t.Context(), spec)
	assert.ErrorIs(t, err, executor.ErrBusy)
	require.NoError(t, sb.Close(context.Background()))
	sb, err = e.Create(t.Context(), spec)
	require.NoError(t, err)
	// A renewal the API server applied while the executor's call gave up
	// (a timeout under load, or Close stopping it mid-call) leaves the
	// executor with a stale resourceVersion; its Close must still delete
	// the leases it holds (clusterExecutor's cleanup asserts none is left).
	leases := e.cs.CoordinationV1().Leases(e.o.Namespace)
	list, err := leases.List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, list.Items, 2, "the instance lease and the chat's")
	for _, l := range list.Items {
		now := metav1.NewMicroTime(time.Now())
		l.Spec.RenewTime = &now
		_, err := leases.Update(t.Context(), &l, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	require.NoError(t, sb.Close(context.Background()))
}

func TestClusterBadImageFailsFast(t *testing.T) {
	e := clusterExecutor(t, Options{})
	start := time.Now()
	_, err := e.Create(t.Context(), executor.Spec{UserID: "u1", ChatID: "img", Image: "agentbox/no-such-image:none"})
	assert.ErrorIs(t, err, executor.ErrNotRunning)
	assert.Contains(t, err.Error(), "ErrImageNeverPull")
	t.Logf("failed after %v", time.Since(start))
}

func TestClusterPortForward(t *testing.T) {
	e := clusterExecutor(t, Options{})
	sb, err := e.Create(t.Context(), executor.Spec{UserID: "u1", ChatID: "pf"})
	require.NoError(t, err)
	defer func() { assert.NoError(t, sb.Close(context.Background())) }()
	ks := sb.(*Sandbox)
	// An echo server on the pod's loopback (the pod has no other interface),
	// in a session of its own: the helper ends what a command leaves in its
	// process group.
	// The command waits until it listens, so the helper's end-of-command
	// kill cannot catch nc before its setsid.
	run(t, sb, "sh", "-c", `setsid nc -ll -p 7001 -e cat </dev/null >/dev/null 2>&1 &
for i in $(seq 100); do netstat -ltn | grep -q ':7001 ' && break; sleep 0.1; done`)

	var conn net.Conn
	var first time.Duration
	// The server may take a moment to listen.
	for i := 0; ; i++ {
		start := time.Now()
		conn, err = ks.DialPort(t.Context(), 7001)
		require.NoError(t, err)
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Write([]byte("hello\n"))
		buf := make([]byte, 6)
		if err == nil {
			_, err = io.ReadFull(conn, buf)
		}
		if err == nil {
			first = time.Since(start)
			assert.Equal(t, "hello\n", string(buf))
			break
		}
		_ = conn.Close()
		require.Less(t, i, 50, "echo server never answered: %v", err)
		time.Sleep(100 * time.Millisecond)
	}
	var d []time.Duration
	buf := make([]byte, 5)
	for range 50 {
		start := time.Now()
		_, err := conn.Write([]byte("ping\n"))
		require.NoError(t, err)
		_, err = io.ReadFull(conn, buf)
		require.NoError(t, err)
		d = append(d, time.Since(start))
	}
	slices.Sort(d)
	t.Logf("port-forward: new connection + first echo %v; echo RTT on an open stream: median %v p90 %v", first, d[len(d)/2], d[len(d)*9/10])
	require.NoError(t, conn.Close())

	// Nothing listens: the connection ends and the kubelet says why.
	c2, err := ks.DialPort(t.Context(), 7999)
	require.NoError(t, err)
	_ = c2.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = c2.Read(make([]byte, 1))
	assert.Error(t, err)
	_ = c2.Close()
}

// TestClusterFileEscapes attacks the pod-side file API from inside the
// pod: links planted to files outside the workspace (in the pod, and the
// helper's own directory) are refused for every operation, and a directory
// swapped for a link in a tight loop while the gateway reads, writes and
// lists through it never lets one operation reach the canary.
func TestClusterFileEscapes(t *testing.T) {
	e := clusterExecutor(t, Options{})
	sb, err := e.Create(t.Context(), executor.Spec{UserID: "u1", ChatID: "escape"})
	require.NoError(t, err)
	defer func() { assert.NoError(t, sb.Close(context.Background())) }()
	ctx := t.Context()
	out, res := run(t, sb, "sh", "-c", `set -e
mkdir -p /tmp/outside && printf CANARY > /tmp/outside/f
ln -s /etc/passwd pw; ln -s ../../.. up; ln -s /tmp/outside out; ln -s /run/agentbox run
mkfifo fifo; mkdir d; echo inside > d/f; echo ok`)
	require.Equal(t, 0, res.ExitCode, out)

	for _, name := range []string{"pw", "up/etc/passwd", "out/f", "run/token", "/workspace/out/f", "../tmp/outside/f"} {
		_, err := sb.ReadFile(ctx, name)
		assert.ErrorIs(t, err, executor.ErrPathEscapes, "read %s", name)
		assert.ErrorIs(t, sb.WriteFile(ctx, name, []byte("PWNED")), executor.ErrPathEscapes, "write %s", name)
		_, err = sb.EditFile(ctx, name, []executor.Edit{{Old: "CANARY", New: ptr("PWNED")}})
		assert.ErrorIs(t, err, executor.ErrPathEscapes, "edit %s", name)
	}
	for _, name := range []string{"up", "out", "run"} {
		_, err := sb.ListDir(ctx, name)
		assert.ErrorIs(t, err, executor.ErrPathEscapes, "list %s", name)
	}
	_, err = sb.ReadFile(ctx, "fifo")
	assert.ErrorIs(t, err, executor.ErrInvalid, "a FIFO is refused, never opened")

	swapCtx, stopSwap := context.WithCancel(ctx)
	swapDone := make(chan error, 1)
	go func() {
		_, err := sb.Exec(swapCtx, &executor.Cmd{Args: []string{"sh", "-c", `
while :; do
  mv d x 2>/dev/null; ln -s /tmp/outside d 2>/dev/null; rm d 2>/dev/null
  [ -e d ] && rm -rf d; [ -d x ] || mkdir x; mv x d
  [ -f d/f ] || echo inside > d/f
done`}})
		swapDone <- err
	}()
	var ops, reached int
	start := time.Now()
	for ops < 1500 && time.Since(start) < 2*time.Minute {
		if b, err := sb.ReadFile(ctx, "d/f"); err == nil && strings.Contains(string(b), "CANARY") {
			reached++
		}
		_ = sb.WriteFile(ctx, "d/f", []byte("inside\n"))
		if list, err := sb.ListDir(ctx, "d"); err == nil {
			for _, fi := range list {
				if fi.Name == "f" && fi.Size == int64(len("CANARY")) {
					reached++
				}
			}
		}
		ops += 3
	}
	stopSwap()
	assert.ErrorIs(t, <-swapDone, context.Canceled, "the swapper ran until stopped")
	t.Logf("%d file operations through the helper during the swap race in %v", ops, time.Since(start))
	assert.Zero(t, reached, "operations that reached the canary")
	canary, _ := run(t, sb, "cat", "/tmp/outside/f")
	assert.Equal(t, "CANARY", canary, "the canary outside the workspace changed")
	ls, _ := run(t, sb, "ls", "/tmp/outside")
	assert.Equal(t, "f\n", ls, "something was created outside the workspace")
}

func ptr(s string) *string { return &s }

// TestClusterReplicas runs two executors (gateway replicas) against one
// namespace: 20 chats, two turns each, spread over both at random and run
// concurrently, never overlap on a chat; then one replica dies (kill -9:
// no renewal, no cleanup) mid-turn, the other takes its chat over once the
// lease expired and its reconciler removes the dead one's pods and leases.
func TestClusterReplicas(t *testing.T) {
	o := Options{LeaseDuration: 3 * time.Second, ClockSkew: time.Millisecond, ReconcileInterval: time.Second}
	a := clusterExecutor(t, o)
	ob := a.o
	ob.InstanceID = ""
	b, err := New(t.Context(), ob)
	require.NoError(t, err)
	replicas := []*Executor{a, b}

	type turn struct {
		chat       int
		start, end time.Time
		replica    int
	}
	var mu sync.Mutex
	var turns []turn
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	sem := make(chan struct{}, 4)
	for i := range 40 {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			chat, r := i%20, (i*7+i/20)%2
			sb, err := replicas[r].Create(t.Context(), executor.Spec{UserID: "u", ChatID: fmt.Sprintf("spread-%d", chat), LeaseWait: 2 * time.Minute})
			if err != nil {
				errs <- err
				return
			}
			tu := turn{chat: chat, start: time.Now(), replica: r}
			_, err = sb.Exec(t.Context(), &executor.Cmd{Args: []string{"sleep", "0.2"}})
			tu.end = time.Now()
			errs <- errors.Join(err, sb.Close(context.Background()))
			mu.Lock()
			turns = append(turns, tu)
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	perReplica := [2]int{}
	for i, x := range turns {
		perReplica[x.replica]++
		for _, y := range turns[i+1:] {
			if x.chat == y.chat {
				assert.True(t, x.end.Before(y.start) || y.end.Before(x.start), "chat %d: turns overlap: %v-%v and %v-%v", x.chat, x.start, x.end, y.start, y.end)
			}
		}
	}
	t.Logf("turns per replica: %v", perReplica)
	assert.Positive(t, perReplica[0])
	assert.Positive(t, perReplica[1])

	// Replica a dies holding two chats.
	sa, err := a.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "dies"})
	require.NoError(t, err)
	other, err := a.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "dies-too"})
	require.NoError(t, err)
	a.abandon()
	died := time.Now()
	sb, err := b.Create(t.Context(), executor.Spec{UserID: "u", ChatID: "dies", LeaseWait: time.Minute})
	require.NoError(t, err)
	t.Logf("chat served by the other replica %v after the first died (lease %v)", time.Since(died), o.LeaseDuration)
	_, err = a.cs.CoreV1().Pods(a.o.Namespace).Get(t.Context(), sa.ID(), metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the dead replica's pod on the chat is gone")
	require.Eventually(t, func() bool {
		_, err := a.cs.CoreV1().Pods(a.o.Namespace).Get(t.Context(), other.ID(), metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, time.Minute, 100*time.Millisecond, "the reconciler did not remove the dead replica's other pod")
	t.Logf("dead replica's other pod gone %v after it died", time.Since(died))
	require.NoError(t, sb.Close(context.Background()))
	require.NoError(t, b.Close())
	leases, err := a.cs.CoordinationV1().Leases(a.o.Namespace).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	var names []string
	for _, l := range leases.Items {
		names = append(names, l.Name)
	}
	assert.Empty(t, names, "leases left in the namespace")
}

// TestClusterModelRelay: the agent's model port in the pod reaches an HTTP
// server of the gateway through connections the gateway parked in the
// helper over the port forward; the pod itself has no network. busybox
// wget asks for Connection: close, so the server closes right after
// writing each response: every byte written before the close must reach
// the pod (a stream reset as the connection closed lost whole responses,
// one run in six under load).
func TestClusterModelRelay(t *testing.T) {
	e := clusterExecutor(t, Options{})
	sb, err := e.Create(t.Context(), executor.Spec{UserID: "u1", ChatID: "relay"})
	require.NoError(t, err)
	defer func() { assert.NoError(t, sb.Close(context.Background())) }()
	ks := sb.(*Sandbox)
	ln, err := ks.ListenHost(t.Context(), helper.ModelSocket)
	require.NoError(t, err)
	big := strings.Repeat("0123456789abcdef", 4096)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			_, _ = io.WriteString(w, big)
			return
		}
		body, _ := io.ReadAll(r.Body)
		_, _ = fmt.Fprintf(w, "gateway saw %s %s %s", r.Method, r.URL.Path, body)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()

	url := ks.ModelBaseURL() + "/v1/messages"
	out, res := run(t, sb, "wget", "-qO-", "--post-data", "hi", url)
	require.Equal(t, 0, res.ExitCode)
	assert.Equal(t, "gateway saw POST /v1/messages hi", out)
	var d []time.Duration
	for i := range 10 {
		start := time.Now()
		var o, e bytes.Buffer
		res, err := sb.Exec(t.Context(), &executor.Cmd{Args: []string{"wget", "-qO-", url}, Stdout: &o, Stderr: &e})
		require.NoError(t, err)
		d = append(d, time.Since(start))
		require.Equal(t, "gateway saw GET /v1/messages ", o.String(), "request %d: exit %d, stderr %q", i, res.ExitCode, e.String())
	}
	slices.Sort(d)
	t.Logf("wget through the model relay, exec included: median %v max %v", d[len(d)/2], d[len(d)-1])
	for i := range 20 {
		var o, e bytes.Buffer
		res, err := sb.Exec(t.Context(), &executor.Cmd{Args: []string{"wget", "-qO-", ks.ModelBaseURL() + "/big"}, Stdout: &o, Stderr: &e})
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode, "64 KiB response %d: stderr %q", i, e.String())
		require.Equal(t, len(big), o.Len(), "64 KiB response %d", i)
		require.Equal(t, big, o.String(), "64 KiB response %d", i)
	}
}

// TestClusterEgressRelay: a pod created with Spec.Egress sends its HTTP
// traffic (busybox wget reads http_proxy) to the helper's egress relay,
// which hands it over the port forward to the gateway's egress proxy
// (executor/egress with the assistant's allowlist): an allowed name
// reaches a server on the gateway's loopback with the credential added
// over TLS the proxy verifies, plain HTTP to it and another name are
// refused with 403, and without the proxy the pod reaches nothing.
func TestClusterEgressRelay(t *testing.T) {
	e := clusterExecutor(t, Options{})
	const token = "egress-credential-4d1c"
	var auth []string
	var mu sync.Mutex
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = fmt.Fprintf(w, "package %s from the gateway's side", r.URL.Path)
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	pol, err := egress.NewPolicy(egress.Rule{Host: "pkgs.test", Port: port, Private: true, Credential: &egress.Credential{Env: "PKG_TOKEN", Prefix: "Bearer "}})
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	proxy, err := egress.New(egress.Options{Policy: pol, Resolver: testenv.Hosts{"pkgs.test": "127.0.0.1", "other.test": "127.0.0.1"},
		Secret:      func(name string) (string, bool) { return token, name == "PKG_TOKEN" },
		UpstreamTLS: &tls.Config{RootCAs: roots, ServerName: "example.com"}}) // httptest's certificate names example.com
	require.NoError(t, err)
	defer func() { assert.NoError(t, proxy.Close()) }()

	sb, err := e.Create(t.Context(), executor.Spec{UserID: "u1", ChatID: "egress", Egress: true})
	require.NoError(t, err)
	defer func() { assert.NoError(t, sb.Close(context.Background())) }()
	ks := sb.(*Sandbox)
	require.Equal(t, fmt.Sprintf("http://127.0.0.1:%d", DefaultEgressPort), ks.EgressProxyURL())
	ln, err := ks.ListenHost(t.Context(), helper.EgressSocket)
	require.NoError(t, err)
	go func() { _ = proxy.Serve(ln) }()

	out, res := run(t, sb, "wget", "-qO-", fmt.Sprintf("https://pkgs.test:%d/p.tgz", port))
	require.Equal(t, 0, res.ExitCode, "an allowed name through the relay")
	assert.Equal(t, "package /p.tgz from the gateway's side", out)
	mu.Lock()
	assert.Equal(t, []string{"Bearer " + token}, auth, "the proxy added the credential")
	mu.Unlock()
	env, _ := run(t, sb, "sh", "-c", "env; cat /proc/1/environ 2>/dev/null")
	assert.NotContains(t, env, token, "the credential is in the pod")
	assert.Contains(t, env, "HTTPS_PROXY=http://127.0.0.1:")
	var errb bytes.Buffer
	for what, u := range map[string]string{"a name outside the allowlist": "http://other.test:%d/", "plain HTTP to the credential's host": "http://pkgs.test:%d/p.tgz"} {
		res, err = sb.Exec(t.Context(), &executor.Cmd{Args: []string{"wget", "-qO-", fmt.Sprintf(u, port)}, Stderr: &errb})
		require.NoError(t, err)
		assert.NotEqual(t, 0, res.ExitCode, what)
		assert.Contains(t, errb.String(), "403", what)
		errb.Reset()
	}
	res, err = sb.Exec(t.Context(), &executor.Cmd{Args: []string{"sh", "-c", fmt.Sprintf("http_proxy= wget -T 5 -qO- http://127.0.0.1:%d/", port)}, Stderr: &errb})
	require.NoError(t, err)
	assert.NotEqual(t, 0, res.ExitCode, "without the proxy the pod reached the gateway's loopback: %s", errb.String())
}

// TestClusterWorkspaceQuota: the test cluster's hostPath volumes enforce
// no size, so the watchdog does: a command that writes past the chat's
// disk quota, or floods it with files past its inode quota, gets the pod
// stopped within a few intervals and later commands fail with
// executor.ErrNoSpace.
func TestClusterWorkspaceQuota(t *testing.T) {
	sc := os.Getenv("AGENTBOX_K8S_STORAGECLASS")
	if sc == "" {
		sc = "agentbox-local"
	}
	e := clusterExecutor(t, Options{StorageClass: sc, QuotaInterval: 500 * time.Millisecond})
	for name, c := range map[string]struct {
		spec executor.Spec
		fill string
		says string
	}{
		"disk":   {executor.Spec{DiskBytes: 16 << 20}, "dd if=/dev/zero of=big bs=1M count=64 2>/dev/null; sleep 30", "sandbox.max_disk"},
		"inodes": {executor.Spec{DiskBytes: 1 << 30, Inodes: 1000}, "mkdir d && cd d && i=0; while [ $i -lt 5000 ]; do : > f$i; i=$((i+1)); done; sleep 30", "sandbox.max_inodes"},
	} {
		t.Run(name, func(t *testing.T) {
			spec := c.spec
			spec.UserID, spec.ChatID = "u1", "quota-"+name
			sb, err := e.Create(t.Context(), spec)
			require.NoError(t, err)
			defer func() { assert.NoError(t, sb.Close(context.Background())) }()
			start := time.Now()
			_, err = sb.Exec(t.Context(), &executor.Cmd{Args: []string{"sh", "-c", c.fill}})
			require.ErrorIs(t, err, executor.ErrNoSpace, "the command that filled the workspace")
			t.Logf("%s: stopped %v after the fill began", name, time.Since(start).Round(time.Millisecond))
			assert.ErrorContains(t, err, c.says)
			_, err = sb.Exec(t.Context(), &executor.Cmd{Args: []string{"true"}})
			assert.ErrorIs(t, err, executor.ErrNoSpace, "a later command")
		})
	}
}

// TestClusterRetention: a claim unused for the retention period is
// deleted by the sweep; the claim of a chat with a live sandbox is not.
func TestClusterRetention(t *testing.T) {
	sc := os.Getenv("AGENTBOX_K8S_STORAGECLASS")
	if sc == "" {
		sc = "agentbox-local"
	}
	e := clusterExecutor(t, Options{StorageClass: sc, Retention: time.Second, RetentionInterval: -1})
	sb, err := e.Create(t.Context(), executor.Spec{UserID: "u1", ChatID: "unused"})
	require.NoError(t, err)
	require.NoError(t, sb.Close(context.Background()))
	open, err := e.Create(t.Context(), executor.Spec{UserID: "u1", ChatID: "open"})
	require.NoError(t, err)
	defer func() { assert.NoError(t, open.Close(context.Background())) }()
	// The closed chat's pod may still be going away: the sweep skips a
	// chat with a pod, and gets it at a later pass.
	swept := 0
	require.Eventually(t, func() bool {
		n, err := e.SweepClaims(t.Context())
		require.NoError(t, err)
		swept += n
		return swept > 0
	}, time.Minute, 500*time.Millisecond, "the unused claim was not swept")
	assert.Equal(t, 1, swept)
	inv, err := e.Inventory(t.Context())
	require.NoError(t, err)
	var kept []string
	for _, c := range inv.Claims {
		if !c.Deleting {
			kept = append(kept, c.Chat)
		}
	}
	assert.Equal(t, []string{"open"}, kept)
}
