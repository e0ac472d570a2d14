package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentbox/agentbox/executor/docker"
	k8sexec "github.com/agentbox/agentbox/executor/kubernetes"
	"github.com/agentbox/agentbox/internal/testkit/cpuprobe"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// BenchmarkRequestBackends measures, in one run, a cold sandboxed request
// to the example gateway (a new chat: sandbox start, hooks, the real CLI
// against the scripted model, teardown) on Docker and on the Kubernetes
// cluster of AGENTBOX_KUBECONFIG (internal/testkit/k8s/test.sh runs it),
// one request of each per iteration so both see the same machine load.
// Run it with -benchtime=5x. It reports the medians in milliseconds of the
// request, its sandbox start and its agent phase per backend, the ratio of
// the request times, and the machine CPU each request cost (cpuprobe: this
// process, the Docker daemon and the Docker sandbox's processes).
//
// On pods it also reports the API server's cost per sandboxed request:
// the CPU of the kube-apiserver process (its /proc stat delta, when it
// runs on this host) and the requests it served (the delta of its
// apiserver_request_total), each less what the same length of idle time
// costs it (the kubelet's, scheduler's and controller-manager's own
// traffic), measured just before each request. Reading /metrics needs a
// kubeconfig allowed to (AGENTBOX_K8S_METRICS_KUBECONFIG, the admin's in
// test.sh; AGENTBOX_KUBECONFIG when unset).
//
// Then each iteration sends the chat's second turn to each backend, once
// the first turn's pod is gone (as it is when a user answers: deleting
// it takes the kubelet about 2 s): a follow-up's workspace claim is bound
// already, so the ratio of the follow-up turns (kubernetes/docker-
// followup) leaves out the binding of a new chat's claim, which the
// scheduler waits for in steps of a second.
//
// Last, each iteration sends a new chat's first request to a Docker
// gateway and a Kubernetes gateway with -pool 1 (docker-pooled-ms,
// kubernetes-pooled-ms, their ratio and the pooled pods' ratio to the cold
// Docker request), each pool full and quiet before it, and reports the API
// server's cost of the pooled request. The Kubernetes one keeps successor
// pods too (-successors): at the end of each iteration its chat's second
// turn takes the successor started when its first turn's pod went
// (kubernetes-successor-ms, and its ratio to Docker's follow-up turn).
func BenchmarkRequestBackends(b *testing.B) {
	kc := testenv.RequireCluster(b)
	g, data := startGateway(b)
	k8sOptions := func(o *Options) {
		o.Executor, o.HelperBinary = "kubernetes", ""
		o.Kubernetes = k8sexec.Options{Kubeconfig: kc, StorageClass: "agentbox-local", ImagePullPolicy: "Never"}
	}
	k, _ := startGateway(b, k8sOptions)
	var poolData string
	gp, _ := startGateway(b, func(o *Options) { o.Pool, poolData = 1, o.DataDir })
	kp, _ := startGateway(b, k8sOptions, func(o *Options) { o.Pool, o.Kubernetes.Successors = 1, 64 })
	api := newAPIServerGauge(b, kc)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	type sample struct{ total, start, agent, cpu []time.Duration }
	var dk, pods, dk2, pods2, dkPooled, podsPooled, podsNext sample
	var apiCPU, apiReqs, apiPooledCPU, apiPooledReqs []float64
	ctx := context.Background()
	request := func(s *sample, url, chat string) {
		t0 := time.Now()
		status, body := rawChat(b, url, demoUser, chat, demoPrompt, nil, "")
		s.total = append(s.total, time.Since(t0))
		require.Equal(b, http.StatusOK, status, "%s: %s", url, body)
		tm := timings(b, body)
		s.start = append(s.start, ms(tm["container_start_ms"]))
		s.agent = append(s.agent, ms(tm["agent_ms"]))
	}
	// Each pool fills after the first request of its configuration.
	for _, gw := range []*Gateway{gp, kp} {
		status, body := rawChat(b, gw.URL, demoUser, "pool-fill-"+run, demoPrompt, nil, "")
		require.Equal(b, http.StatusOK, status, body)
		require.NoError(b, gw.orch.Settle(ctx))
	}
	pooledReady := func() {
		testenv.WaitPooled(b, poolData)
		api.podWaiting(b, k8sexec.DefaultNamespace, func(p corev1.Pod) bool { return p.Labels[k8sexec.LabelChat] == "" })
	}
	for i := 0; b.Loop(); i++ {
		chat := fmt.Sprintf("backends-%s-%d", run, i)
		pooledReady()
		request(&dkPooled, gp.URL, "pooled-"+chat)
		require.NoError(b, gp.orch.Settle(ctx))
		idle := api.window(b, func() { time.Sleep(dkPooled.total[len(dkPooled.total)-1]) })
		busy := api.window(b, func() {
			request(&podsPooled, kp.URL, "pooled-"+chat)
			require.NoError(b, kp.orch.Settle(ctx))
		})
		scale := busy.wall.Seconds() / idle.wall.Seconds()
		apiPooledCPU = append(apiPooledCPU, (busy.cpu-time.Duration(float64(idle.cpu)*scale)).Seconds()*1000)
		apiPooledReqs = append(apiPooledReqs, busy.requests-idle.requests*scale)
		// The pools refill, and the chat's successor starts, before the
		// cold requests, which should not share the machine or the API
		// server with that.
		pooledReady()
		api.podWaiting(b, k8sexec.DefaultNamespace, func(p corev1.Pod) bool { return p.Annotations[k8sexec.AnnotationChat] == "pooled-"+chat })

		p, err := cpuprobe.Start(cpuprobe.Options{Owns: func(l map[string]string) bool { return l[docker.LabelDataDir] == data }})
		require.NoError(b, err)
		request(&dk, g.URL, chat)
		require.NoError(b, g.orch.Settle(ctx))
		dk.cpu = append(dk.cpu, p.Stop().Total())

		// The API server's idle cost over as long as the request takes,
		// then the request's (until its pod is deleted: Settle).
		idle = api.window(b, func() { time.Sleep(dk.total[len(dk.total)-1]) })
		p, err = cpuprobe.Start(cpuprobe.Options{Owns: func(map[string]string) bool { return false }})
		require.NoError(b, err)
		busy = api.window(b, func() {
			request(&pods, k.URL, chat)
			require.NoError(b, k.orch.Settle(ctx))
		})
		pods.cpu = append(pods.cpu, p.Stop().Total())
		scale = busy.wall.Seconds() / idle.wall.Seconds()
		apiCPU = append(apiCPU, (busy.cpu-time.Duration(float64(idle.cpu)*scale)).Seconds()*1000)
		apiReqs = append(apiReqs, busy.requests-idle.requests*scale)
		b.Logf("pods request %d: API server %v CPU, %.0f requests (idle over %v: %v CPU, %.0f requests)",
			i, busy.cpu, busy.requests, idle.wall.Round(time.Millisecond), idle.cpu, idle.requests)

		api.podsGone(b, k8sexec.DefaultNamespace)
		request(&dk2, g.URL, chat)
		require.NoError(b, g.orch.Settle(ctx))
		request(&pods2, k.URL, chat)
		require.NoError(b, k.orch.Settle(ctx))
		request(&podsNext, kp.URL, "pooled-"+chat)
		require.NoError(b, kp.orch.Settle(ctx))
	}
	med := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2]) / float64(time.Millisecond)
	}
	medf := func(f []float64) float64 {
		s := slices.Clone(f)
		slices.Sort(s)
		return s[len(s)/2]
	}
	for _, be := range []struct {
		name string
		s    sample
	}{{"docker", dk}, {"kubernetes", pods}} {
		b.ReportMetric(med(be.s.total), be.name+"-request-ms")
		b.ReportMetric(med(be.s.start), be.name+"-start-ms")
		b.ReportMetric(med(be.s.agent), be.name+"-agent-ms")
		b.ReportMetric(med(be.s.cpu), be.name+"-cpu-ms")
		b.Logf("%s: requests %v, sandbox start %v, agent %v, CPU %v", be.name, be.s.total, be.s.start, be.s.agent, be.s.cpu)
	}
	b.ReportMetric(med(pods.total)/med(dk.total), "kubernetes/docker")
	// The follow-up turns, then the pooled new chats.
	for _, run := range []struct {
		what, metric, ratio string
		docker, k8s         sample
	}{
		{"follow-up turns", "followup", "kubernetes/docker-followup", dk2, pods2},
		{"follow-up turns, pods with a successor", "successor", "kubernetes-successor/docker-followup", dk2, podsNext},
		{"pooled, new chats", "pooled", "kubernetes-pooled/docker-pooled", dkPooled, podsPooled},
	} {
		for _, be := range []struct {
			name string
			s    sample
		}{{"docker", run.docker}, {"kubernetes", run.k8s}} {
			if run.metric == "successor" && be.name == "docker" {
				continue // Docker's follow-up turns, reported above
			}
			b.ReportMetric(med(be.s.total), be.name+"-"+run.metric+"-ms")
			b.ReportMetric(med(be.s.start), be.name+"-"+run.metric+"-start-ms")
			b.Logf("%s %s: requests %v, sandbox start %v, agent %v", be.name, run.what, be.s.total, be.s.start, be.s.agent)
		}
		b.ReportMetric(med(run.k8s.total)/med(run.docker.total), run.ratio)
	}
	b.ReportMetric(med(podsPooled.total)/med(dk.total), "kubernetes-pooled/docker")
	b.ReportMetric(medf(apiPooledReqs), "apiserver-requests/pooled-req")
	if api.pid != 0 {
		b.ReportMetric(medf(apiPooledCPU), "apiserver-cpu-ms/pooled-req")
	}
	b.Logf("API server per pooled request, net of idle: CPU ms %v, requests %v", apiPooledCPU, apiPooledReqs)
	if api.pid != 0 {
		b.ReportMetric(medf(apiCPU), "apiserver-cpu-ms/req")
	}
	b.ReportMetric(medf(apiReqs), "apiserver-requests/req")
	b.Logf("API server per sandboxed request, net of idle: CPU ms %v, requests %v", apiCPU, apiReqs)
}

// apiServerGauge reads the API server's CPU and request count.
type apiServerGauge struct {
	cs  kubernetes.Interface
	pid int // the kube-apiserver process on this host, 0 when not here
}

// apiWindow is what the API server spent over one window.
type apiWindow struct {
	wall, cpu time.Duration
	requests  float64
}

// newAPIServerGauge connects to the cluster's /metrics and finds the
// kube-apiserver process.
func newAPIServerGauge(b *testing.B, kc string) *apiServerGauge {
	b.Helper()
	if m := os.Getenv("AGENTBOX_K8S_METRICS_KUBECONFIG"); m != "" {
		kc = m
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	require.NoError(b, err, "kubeconfig %s", kc)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(b, err)
	g := &apiServerGauge{cs: cs}
	_, err = g.requests(b.Context())
	require.NoError(b, err, "read the API server's /metrics (set AGENTBOX_K8S_METRICS_KUBECONFIG to a kubeconfig allowed to)")
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
		if strings.TrimSpace(string(comm)) == "kube-apiserver" {
			g.pid, _ = strconv.Atoi(e.Name())
		}
	}
	if g.pid == 0 {
		b.Log("no kube-apiserver process on this host: its CPU is not reported")
	}
	return g
}

// window measures the API server over f.
func (g *apiServerGauge) window(b *testing.B, f func()) apiWindow {
	b.Helper()
	r0, err := g.requests(b.Context())
	require.NoError(b, err)
	c0 := g.cpu(b)
	t0 := time.Now()
	f()
	w := apiWindow{wall: time.Since(t0), cpu: g.cpu(b) - c0}
	r1, err := g.requests(b.Context())
	require.NoError(b, err)
	// Less the scrape that opened the window, which the second counts.
	w.requests = r1 - r0 - 1
	return w
}

// cpu is the API server process's utime+stime (0 when it is not here).
func (g *apiServerGauge) cpu(b *testing.B) time.Duration {
	if g.pid == 0 {
		return 0
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", g.pid))
	require.NoError(b, err, "the kube-apiserver process went away")
	f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond // USER_HZ is 100
}

// requests is the sum of the API server's apiserver_request_total.
func (g *apiServerGauge) requests(ctx context.Context) (float64, error) {
	raw, err := g.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("get /metrics: %w", err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return 0, fmt.Errorf("parse /metrics: %w", err)
	}
	fam, ok := fams["apiserver_request_total"]
	if !ok {
		return 0, fmt.Errorf("/metrics has no apiserver_request_total")
	}
	var n float64
	for _, m := range fam.GetMetric() {
		n += m.GetCounter().GetValue()
	}
	return n, nil
}

// podsGone waits, off the clock, until ns holds no pod of this module's
// but pooled ones: the previous turn's sandbox pod (and any checkpoint
// pod) is deleted. Should the list be refused, it waits as long as a
// deletion takes.
func (g *apiServerGauge) podsGone(b *testing.B, ns string) {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	sel := metav1.ListOptions{LabelSelector: k8sexec.LabelManagedBy + "=agentbox"}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		l, err := g.cs.CoreV1().Pods(ns).List(b.Context(), sel)
		if err != nil {
			b.Logf("cannot list the pods (%v): waiting 3 s for the deletion instead", err)
			time.Sleep(3 * time.Second)
			return
		}
		if !slices.ContainsFunc(l.Items, func(p corev1.Pod) bool { return p.Labels[k8sexec.LabelPool] == "" }) {
			return
		}
	}
	b.Logf("pods of %s still there a minute after the request: the follow-up waits for them", ns)
}

// podWaiting waits, off the clock, until ns holds a running pooled pod
// that want picks (a pool's: no chat; a successor: its chat's) and no pod
// still starting or going, then a second more (the pool records a pod
// once its helper answers, which is about when the kubelet reports it
// running).
func (g *apiServerGauge) podWaiting(b *testing.B, ns string, want func(corev1.Pod) bool) {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	sel := metav1.ListOptions{LabelSelector: k8sexec.LabelManagedBy + "=agentbox"}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		l, err := g.cs.CoreV1().Pods(ns).List(b.Context(), sel)
		require.NoError(b, err, "list the pods")
		pooled, busy := false, false
		for _, p := range l.Items {
			running := p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil
			pooled = pooled || (running && p.Labels[k8sexec.LabelPool] != "" && want(p))
			busy = busy || !running
		}
		if pooled && !busy {
			time.Sleep(time.Second)
			return
		}
	}
	b.Fatalf("no pooled pod in namespace %s within 2 minutes", ns)
}
