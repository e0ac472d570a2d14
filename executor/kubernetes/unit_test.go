package kubernetes

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
)

func unitExecutor(t *testing.T, o Options) *Executor {
	t.Helper()
	o, err := o.withDefaults()
	require.NoError(t, err)
	return &Executor{o: o}
}

func TestPodSpecBaseline(t *testing.T) {
	e := unitExecutor(t, Options{Image: "img:1", RuntimeClassName: "nonet", StorageClass: "local"})
	p, err := e.plan(executor.Spec{UserID: "u1", ChatID: "c1", MemoryBytes: 256 << 20, CPUs: 0.5, Env: []string{"A=b=c"}, Timeout: time.Minute}, time.Unix(0, 0))
	require.NoError(t, err)
	p.claim = "abx-pool-ws-1" // an adopted pooled pod's, found by label
	pod := e.pod(p, "abx-x")
	s := pod.Spec
	require.Len(t, s.Containers, 1)
	c := s.Containers[0]
	assert.Equal(t, "nonet", *s.RuntimeClassName)
	assert.False(t, *s.AutomountServiceAccountToken)
	assert.False(t, *s.EnableServiceLinks)
	assert.False(t, s.HostNetwork || s.HostPID || s.HostIPC)
	assert.Equal(t, int64(60), *s.ActiveDeadlineSeconds)
	assert.Equal(t, int64(DefaultUID), *s.SecurityContext.RunAsUser)
	assert.True(t, *s.SecurityContext.RunAsNonRoot)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, s.SecurityContext.SeccompProfile.Type)
	assert.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop)
	assert.Empty(t, c.SecurityContext.Capabilities.Add)
	assert.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
	assert.True(t, *c.SecurityContext.ReadOnlyRootFilesystem)
	assert.Equal(t, "500m", c.Resources.Limits.Cpu().String())
	assert.Equal(t, int64(256<<20), c.Resources.Limits.Memory().Value())
	assert.Equal(t, ImageHelperPath, c.Command[0])
	assert.Contains(t, c.Command, "--deadline")
	assert.Contains(t, c.Env, corev1.EnvVar{Name: "A", Value: "b=c"})
	assert.Equal(t, "abx-pool-ws-1", s.Volumes[0].PersistentVolumeClaim.ClaimName, "the plan's claim, whatever its name")
	assert.Equal(t, p.chat, pod.Labels[LabelChat])
}

// TestPodEgress: a Spec with Egress gets the helper's egress relay and the
// proxy environment pointing at it; without, neither; with the relay
// turned off, the Spec is refused.
func TestPodEgress(t *testing.T) {
	e := unitExecutor(t, Options{Image: "img:1"})
	spec := executor.Spec{UserID: "u", ChatID: "c", Egress: true}
	p, err := e.plan(spec, time.Now())
	require.NoError(t, err)
	c := e.pod(p, "abx-x").Spec.Containers[0]
	proxy := fmt.Sprintf("http://127.0.0.1:%d", DefaultEgressPort)
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		assert.Contains(t, c.Env, corev1.EnvVar{Name: k, Value: proxy})
	}
	assert.Contains(t, c.Env, corev1.EnvVar{Name: "NO_PROXY", Value: "localhost,127.0.0.1,::1"}, "the model relay on loopback is not proxied")
	assert.Contains(t, strings.Join(c.Command, " "), fmt.Sprintf("--egress-port %d", DefaultEgressPort))
	assert.Equal(t, proxy, newSandbox(e, "abx-x", p).EgressProxyURL())

	spec.Egress = false
	p, err = e.plan(spec, time.Now())
	require.NoError(t, err)
	c = e.pod(p, "abx-x").Spec.Containers[0]
	for _, v := range c.Env {
		assert.NotContains(t, v.Name, "PROXY")
	}
	assert.NotContains(t, strings.Join(c.Command, " "), "--egress-port")
	assert.Empty(t, newSandbox(e, "abx-x", p).EgressProxyURL())

	off := unitExecutor(t, Options{Image: "img:1", EgressPort: -1})
	spec.Egress = true
	_, err = off.plan(spec, time.Now())
	assert.ErrorIs(t, err, executor.ErrInvalid)
	assert.ErrorContains(t, err, "EgressPort")
}

func TestPlanRefuses(t *testing.T) {
	e := unitExecutor(t, Options{Image: "img:1"})
	for name, spec := range map[string]executor.Spec{
		"no user":      {ChatID: "c"},
		"bad chat":     {UserID: "u", ChatID: "../x"},
		"network":      {UserID: "u", ChatID: "c", Network: "bridge"},
		"runtime":      {UserID: "u", ChatID: "c", Runtime: "runsc"},
		"root user":    {UserID: "u", ChatID: "c", User: "0:0"},
		"env no equal": {UserID: "u", ChatID: "c", Env: []string{"X"}},
		"pids set":     {UserID: "u", ChatID: "c", PidsLimit: 512},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := e.plan(spec, time.Now())
			assert.ErrorIs(t, err, executor.ErrInvalid)
		})
	}
}

func TestOptionsRefuse(t *testing.T) {
	for name, o := range map[string]Options{
		"pull policy":               {ImagePullPolicy: "Sometimes"},
		"negative id":               {UID: -1},
		"home":                      {Home: "rel"},
		"instance":                  {InstanceID: "a/b"},
		"egress port":               {EgressPort: HelperPort},
		"egress=model":              {ModelPort: 7100, EgressPort: 7100},
		"retention without claims":  {Retention: time.Hour},
		"negative pool":             {Pool: -1},
		"pool too large":            {Pool: executor.MaxPool + 1},
		"pool idle too short":       {Pool: 1, PoolIdle: time.Millisecond},
		"pool idle without a pool":  {PoolIdle: time.Minute},
		"negative successors":       {StorageClass: "local", Successors: -1},
		"successors too many":       {StorageClass: "local", Successors: MaxSuccessors + 1},
		"successors without claims": {Successors: 1},
		"successor idle too short":  {StorageClass: "local", Successors: 1, PoolIdle: time.Millisecond},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := o.withDefaults()
			assert.ErrorIs(t, err, executor.ErrInvalid)
		})
	}
}

func TestValidEnv(t *testing.T) {
	for kv, want := range map[string]bool{
		"A=1": true, "_x=": true, "a1=b c": true,
		"=1": false, "1A=x": false, "A": false, "A-B=1": false, "A;B=1": false, "": false,
	} {
		assert.Equal(t, want, validEnv(kv), kv)
	}
}

func TestCapWriter(t *testing.T) {
	var buf bytes.Buffer
	overs := 0
	w := &capWriter{w: &buf, left: 5, over: func() { overs++ }}
	_, _ = w.Write([]byte("abc"))
	_, _ = w.Write([]byte("def"))
	_, _ = w.Write([]byte("g"))
	assert.Equal(t, "abc", buf.String())
	assert.Equal(t, 1, overs)
}

func TestChatKeyDistinct(t *testing.T) {
	// "a\x00b"-style joins must not collide across the user/chat boundary.
	assert.NotEqual(t, chatKey("ab", "c"), chatKey("a", "bc"))
	assert.Len(t, chatKey("u", "c"), 24)
	assert.True(t, strings.HasPrefix(claimName("u", "c"), "abx-ws-"))
}

// TestPlanTakesTheTable: plan's defaults and bounds are executor's table,
// refused with the table's messages.
func TestPlanTakesTheTable(t *testing.T) {
	e := unitExecutor(t, Options{Image: "img:1"})
	executortest.RunSpecTable(t, func(s executor.Spec) (executor.Spec, error) {
		p, err := e.plan(s, time.Now())
		return p.spec, err
	})
}

// TestCapabilities: what pods honour, declared without a cluster; the
// Options say it before New (middleware's TestStartupRefusals uses that).
func TestCapabilities(t *testing.T) {
	caps := unitExecutor(t, Options{Image: "img:1"}).Capabilities()
	assert.Equal(t, Options{}.Capabilities(), caps)
	assert.Equal(t, "kubernetes", caps.Backend)
	assert.False(t, caps.Pids, "pods take the node's podPidsLimit")
	assert.True(t, caps.Keep && caps.HostListener && caps.ModelRelay && caps.Egress && caps.Restore)
	assert.Empty(t, caps.Runtimes, "the RuntimeClass is the Options'")
	assert.Equal(t, executor.QuotaWatchdog, caps.Quota)
	off := unitExecutor(t, Options{Image: "img:1", QuotaInterval: -1, EgressPort: -1, ModelPort: -1}).Capabilities()
	assert.Equal(t, executor.QuotaVolume, off.Quota)
	assert.False(t, off.Egress || off.ModelRelay)
}
