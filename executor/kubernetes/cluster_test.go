package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testenv"
)

// requireCluster skips without a cluster (AGENTBOX_KUBECONFIG unset, see
// internal/k8s/up.sh) and fails instead under CI=true with AGENTBOX_K8S=1.
func requireCluster(t *testing.T) string {
	t.Helper()
	kc := os.Getenv("AGENTBOX_KUBECONFIG")
	if kc != "" {
		return kc
	}
	if testenv.InCI() && os.Getenv("AGENTBOX_K8S") == "1" {
		t.Fatal("CI=true, AGENTBOX_K8S=1 and AGENTBOX_KUBECONFIG is unset; bring the cluster up with make k8s-up")
	}
	t.Skip("no cluster: AGENTBOX_KUBECONFIG is unset (make k8s-up, then export AGENTBOX_KUBECONFIG=/var/lib/agentbox-k8s/admin.kubeconfig)")
	return ""
}

// clusterExecutor makes an Executor over a fresh namespace that the test's
// cleanup deletes.
func clusterExecutor(t *testing.T, o Options) *Executor {
	t.Helper()
	o.Kubeconfig = requireCluster(t)
	if o.Image == "" {
		o.Image = testenv.DefaultImage
	}
	if o.ImagePullPolicy == "" {
		o.ImagePullPolicy = "Never"
	}
	if o.RuntimeClassName == "" {
		o.RuntimeClassName = os.Getenv("AGENTBOX_K8S_RUNTIMECLASS")
	}
	ns := "abx-test-" + randomID()[:8]
	o.Namespace = ns
	boot, err := New(t.Context(), Options{Kubeconfig: o.Kubeconfig, Namespace: "default"})
	require.NoError(t, err)
	_, err = boot.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	e, err := New(t.Context(), o)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, e.Close())
		ctx := context.Background()
		pods, err := boot.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if assert.NoError(t, err) {
			assert.Empty(t, pods.Items, "pods left in the namespace after Close")
		}
		assert.NoError(t, boot.cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
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
}

func TestClusterExec(t *testing.T) {
	e := clusterExecutor(t, Options{StopGrace: time.Second})
	sb, err := e.Create(t.Context(), executor.Spec{UserID: "u1", ChatID: "exec"})
	require.NoError(t, err)
	defer func() { assert.NoError(t, sb.Close(context.Background())) }()
	ctx := t.Context()

	t.Run("exit code, env, dir, stdin, stderr", func(t *testing.T) {
		var out, errb bytes.Buffer
		res, err := sb.Exec(ctx, &executor.Cmd{
			Args:   []string{"sh", "-c", `pwd; echo "$A|$B"; cat; echo oops >&2; exit 3`},
			Env:    []string{"A=1 2", "B=$(id)"},
			Dir:    "/tmp",
			Stdin:  strings.NewReader("from stdin\n"),
			Stdout: &out, Stderr: &errb,
		})
		require.NoError(t, err)
		assert.Equal(t, 3, res.ExitCode)
		assert.Equal(t, PathKubeExec, res.Path)
		assert.Equal(t, "/tmp\n1 2|$(id)\nfrom stdin\n", out.String())
		assert.Equal(t, "oops\n", errb.String())
	})
	t.Run("argv is not shell-parsed", func(t *testing.T) {
		out, _ := run(t, sb, "echo", "a b", "$HOME", "`id`", ";", "x=y")
		assert.Equal(t, "a b $HOME `id` ; x=y\n", out)
	})
	t.Run("missing program", func(t *testing.T) {
		res, err := sb.Exec(ctx, &executor.Cmd{Args: []string{"no-such-program"}})
		require.NoError(t, err)
		assert.Equal(t, 127, res.ExitCode)
	})
	t.Run("bad env refused", func(t *testing.T) {
		_, err := sb.Exec(ctx, &executor.Cmd{Args: []string{"true"}, Env: []string{"A;rm=1"}})
		assert.ErrorIs(t, err, executor.ErrInvalid)
	})
	t.Run("timeout kills the command and what it started", func(t *testing.T) {
		res, err := sb.Exec(ctx, &executor.Cmd{Args: []string{"sh", "-c", "sleep 300 & sleep 301; echo never"}, Timeout: time.Second})
		assert.ErrorIs(t, err, executor.ErrTimeout)
		assert.Equal(t, -1, res.ExitCode)
		ps, _ := run(t, sb, "ps", "-o", "args")
		assert.NotContains(t, ps, "sleep 30", "processes of the timed-out command survived")
	})
	t.Run("output cap", func(t *testing.T) {
		var out bytes.Buffer
		_, err := sb.Exec(ctx, &executor.Cmd{Args: []string{"sh", "-c", "yes | head -c 1000000; sleep 300"}, MaxOutput: 4096, Stdout: &out})
		assert.ErrorIs(t, err, executor.ErrOutputTooLarge)
		assert.LessOrEqual(t, out.Len(), 4096)
		ps, _ := run(t, sb, "ps", "-o", "args")
		assert.NotContains(t, ps, "sleep 300")
	})
	t.Run("cancel", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(500*time.Millisecond, cancel)
		_, err := sb.Exec(cctx, &executor.Cmd{Args: []string{"sleep", "302"}})
		assert.ErrorIs(t, err, context.Canceled)
		ps, _ := run(t, sb, "ps", "-o", "args")
		assert.NotContains(t, ps, "sleep 302")
	})
	t.Run("round trip", func(t *testing.T) {
		var d []time.Duration
		for range 10 {
			start := time.Now()
			run(t, sb, "true")
			d = append(d, time.Since(start))
		}
		slices.Sort(d)
		t.Logf("exec round trip through the API server: min %v median %v max %v", d[0], d[len(d)/2], d[len(d)-1])
	})
}

func TestClusterCloseAndTakeover(t *testing.T) {
	e := clusterExecutor(t, Options{})
	spec := executor.Spec{UserID: "u1", ChatID: "take"}
	sb, err := e.Create(t.Context(), spec)
	require.NoError(t, err)

	// A second executor (another gateway, or this one restarted after a
	// crash) on the same chat removes the first pod before starting its own.
	o2 := e.o
	o2.InstanceID = ""
	e2, err := New(t.Context(), o2)
	require.NoError(t, err)
	sb2, err := e2.Create(t.Context(), spec)
	require.NoError(t, err)
	_, err = e.cs.CoreV1().Pods(e.o.Namespace).Get(t.Context(), sb.ID(), metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the first pod still exists: %v", err)
	_, err = sb.Exec(t.Context(), &executor.Cmd{Args: []string{"true"}})
	assert.ErrorIs(t, err, executor.ErrSandboxGone)
	assert.NoError(t, sb.Close(context.Background()))

	start := time.Now()
	require.NoError(t, sb2.Close(context.Background()))
	t.Logf("close (delete and wait until gone): %v", time.Since(start))
	_, err = e.cs.CoreV1().Pods(e.o.Namespace).Get(t.Context(), sb2.ID(), metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err))
	_, err = sb2.Exec(t.Context(), &executor.Cmd{Args: []string{"true"}})
	assert.ErrorIs(t, err, executor.ErrNotRunning)
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
	// An echo server on the pod's loopback (the pod has no other interface).
	run(t, sb, "sh", "-c", "nc -ll -p 7001 -e cat </dev/null >/dev/null 2>&1 &")

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
