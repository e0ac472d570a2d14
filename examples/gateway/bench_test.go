package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/kubernetes"
	"github.com/agentbox/agentbox/internal/scriptedapi"
	"github.com/agentbox/agentbox/internal/testenv"
	"github.com/agentbox/agentbox/middleware"
)

// BenchmarkConcurrentChats sends 50 streamed requests at once, ten users
// with five chats each, through the example gateway's HTTP adapter (real
// Docker, the real CLI, the scripted model), with admission control at its
// defaults and off, in the same run. Each iteration is one burst of 50;
// run it with -benchtime=1x. It reports errors, the p50 and p95 request
// latency in seconds and requests per minute.
func BenchmarkConcurrentChats(b *testing.B) {
	const chats, users = 50, 10
	for _, mode := range []struct {
		name string
		adm  middleware.Admission
	}{
		// The derived bounds, with a wait long enough for a slow machine:
		// the benchmark measures latency, not the queue's time limit.
		{"admission=on", middleware.Admission{MaxWait: 30 * time.Minute}},
		{"admission=off", middleware.Admission{Off: true}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			g, _ := startGateway(b, func(o *Options) { o.Admission = mode.adm })
			var lat []time.Duration
			errs, iter := 0, 0
			start := time.Now()
			for b.Loop() {
				var mu sync.Mutex
				var wg sync.WaitGroup
				for i := range chats {
					wg.Go(func() {
						user, chat := fmt.Sprint("bench-u", i%users), fmt.Sprintf("bench-%d-%d", iter, i)
						t0 := time.Now()
						res, err := chatRequest(context.Background(), newClient(g.URL, user, chat), chat, demoPrompt, func(extension, string) {})
						if err == nil && res.Content == "" {
							err = fmt.Errorf("chat %s: empty answer", chat)
						}
						d := time.Since(t0)
						mu.Lock()
						defer mu.Unlock()
						lat = append(lat, d)
						if err != nil {
							errs++
							b.Logf("chat %s: %v", chat, err)
						}
					})
				}
				wg.Wait()
				iter++
			}
			elapsed := time.Since(start)
			slices.Sort(lat)
			b.ReportMetric(float64(errs), "errors")
			b.ReportMetric(lat[len(lat)/2].Seconds(), "p50_s")
			b.ReportMetric(lat[len(lat)*95/100].Seconds(), "p95_s")
			b.ReportMetric(float64(len(lat))/elapsed.Minutes(), "req/min")
			b.ReportMetric(float64(len(g.Model.MessageRequests()))/float64(len(lat)), "model_calls/req")
		})
	}
}

// BenchmarkColdPath compares, in one run, a cold request to the example
// gateway (a new chat: container, hooks, the agent through the helper's
// relay and the model route, teardown after the response) with the same
// CLI and flags run bare against the same scripted model: by `docker run
// --rm` of the same image with the same CPU and memory limits, and on the
// host. Each iteration runs all three once; run it with -benchtime=5x. The
// docker run baseline uses --network host, the only way a bare container
// reaches the scripted model on loopback (the gateway's sandboxes keep
// network none). It reports the medians in milliseconds, the gateway's
// agent phase, and the ratios the issue targets (gateway / docker run,
// agent phase / host CLI).
func BenchmarkColdPath(b *testing.B) {
	g, _ := startGateway(b)
	ctx := context.Background()
	claudeBin, err := exec.LookPath("claude")
	require.NoError(b, err, "the host CLI (installed by .ci/setup)")
	hostDir := b.TempDir()
	hostModel := scriptedapi.Start(scriptedapi.WithScript(scriptedapi.Demo(hostDir)))
	defer hostModel.Close()
	dockerModel := scriptedapi.Start(scriptedapi.WithScript(scriptedapi.Demo(executor.ContainerWorkdir)))
	defer dockerModel.Close()
	model := g.Config.Assistants[demoAssistant].Connector.Model
	cliArgs := []string{"-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "acceptEdits", "--max-turns", "10",
		"--model", model, demoPrompt}
	env := func(url string) []string {
		return []string{"ANTHROPIC_BASE_URL=" + url, "ANTHROPIC_API_KEY=bench", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}
	}
	var gw, agent, dockerRun, host []time.Duration
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		status, body := rawChat(b, g.URL, demoUser, fmt.Sprintf("cold-%d", i), demoPrompt, nil, "")
		gw = append(gw, time.Since(t0))
		require.Equal(b, http.StatusOK, status, body)
		var comp struct {
			Agentbox struct {
				Timings map[string]float64 `json:"timings"`
			} `json:"agentbox"`
		}
		require.NoError(b, json.Unmarshal([]byte(body), &comp))
		agent = append(agent, time.Duration(comp.Agentbox.Timings["agent_ms"]*float64(time.Millisecond)))
		require.NoError(b, g.orch.Settle(ctx))

		ws := b.TempDir()
		require.NoError(b, os.Chmod(ws, 0o777))
		args := []string{"run", "--rm", "--network", "host", "--cpus", "1", "--memory", "1g", "-u", "1000:1000",
			"-v", ws + ":" + executor.ContainerWorkdir, "-w", executor.ContainerWorkdir, "-e", "HOME=/tmp", "--entrypoint", "claude"}
		for _, kv := range env(dockerModel.URL) {
			args = append(args, "-e", kv)
		}
		args = append(append(args, "agentbox/sandbox-claude:latest"), cliArgs...)
		t0 = time.Now()
		out, err := exec.Command("docker", args...).CombinedOutput()
		dockerRun = append(dockerRun, time.Since(t0))
		require.NoError(b, err, "%s", out)
		require.Contains(b, string(out), `"subtype":"success"`)

		home := b.TempDir()
		cmd := exec.Command(claudeBin, cliArgs...)
		cmd.Dir, cmd.Env = hostDir, append(env(hostModel.URL), "HOME="+home, "PATH=/usr/bin:/bin")
		t0 = time.Now()
		out, err = cmd.CombinedOutput()
		host = append(host, time.Since(t0))
		require.NoError(b, err, "%s", out)
		require.Contains(b, string(out), `"subtype":"success"`)
		require.NoError(b, os.Remove(filepath.Join(hostDir, scriptedapi.DemoFile)))
	}
	med := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2]) / float64(time.Millisecond)
	}
	b.ReportMetric(med(gw), "gateway-ms")
	b.ReportMetric(med(agent), "agent-phase-ms")
	b.ReportMetric(med(dockerRun), "docker-run-ms")
	b.ReportMetric(med(host), "host-cli-ms")
	b.ReportMetric(med(gw)/med(dockerRun), "gateway/docker-run")
	b.ReportMetric(med(agent)/med(host), "agent/host-cli")
	b.Logf("gateway %v, agent phase %v, docker run %v, host CLI %v", gw, agent, dockerRun, host)
}

// BenchmarkRequestBackends measures, in one run, a cold sandboxed request
// to the example gateway (a new chat: sandbox start, hooks, the real CLI
// against the scripted model, teardown) on Docker and on the Kubernetes
// cluster of AGENTBOX_KUBECONFIG (internal/k8s/test.sh runs it), one
// request of each per iteration so both see the same machine load. Run it
// with -benchtime=5x. It reports the medians in milliseconds of the
// request, its sandbox start and its agent phase per backend, and the
// ratio of the request times.
func BenchmarkRequestBackends(b *testing.B) {
	kc := testenv.RequireCluster(b)
	backends := []struct {
		name string
		url  string
	}{{name: "docker"}, {name: "kubernetes"}}
	g, _ := startGateway(b)
	backends[0].url = g.URL
	k, _ := startGateway(b, func(o *Options) {
		o.Executor, o.HelperBinary = "kubernetes", ""
		o.Kubernetes = kubernetes.Options{Kubeconfig: kc, StorageClass: "agentbox-local", ImagePullPolicy: "Never"}
	})
	backends[1].url = k.URL
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	type sample struct{ total, start, agent []time.Duration }
	samples := make([]sample, len(backends))
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	for i := 0; b.Loop(); i++ {
		for j, be := range backends {
			t0 := time.Now()
			status, body := rawChat(b, be.url, demoUser, fmt.Sprintf("backends-%s-%d", run, i), demoPrompt, nil, "")
			d := time.Since(t0)
			require.Equal(b, http.StatusOK, status, "%s: %s", be.name, body)
			var comp struct {
				Agentbox struct {
					Timings map[string]float64 `json:"timings"`
				} `json:"agentbox"`
			}
			require.NoError(b, json.Unmarshal([]byte(body), &comp))
			s := &samples[j]
			s.total = append(s.total, d)
			s.start = append(s.start, ms(comp.Agentbox.Timings["container_start_ms"]))
			s.agent = append(s.agent, ms(comp.Agentbox.Timings["agent_ms"]))
		}
	}
	med := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2]) / float64(time.Millisecond)
	}
	for j, be := range backends {
		s := samples[j]
		b.ReportMetric(med(s.total), be.name+"-request-ms")
		b.ReportMetric(med(s.start), be.name+"-start-ms")
		b.ReportMetric(med(s.agent), be.name+"-agent-ms")
		b.Logf("%s: requests %v, sandbox start %v, agent %v", be.name, s.total, s.start, s.agent)
	}
	b.ReportMetric(med(samples[1].total)/med(samples[0].total), "kubernetes/docker")
}
