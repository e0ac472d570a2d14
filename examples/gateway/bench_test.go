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
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
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
// agent phase / host CLI). A second gateway with -pool 1 answers the same
// new-chat request with a started container from its pool (pooled-ms, and
// pooled-start-ms its container phase).
func BenchmarkColdPath(b *testing.B) {
	g, _ := startGateway(b)
	var poolData string
	gp, _ := startGateway(b, func(o *Options) { o.Pool, poolData = 1, o.DataDir })
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
	var gw, agent, dockerRun, host, pooled, pooledStart []time.Duration
	for i := 0; b.Loop(); i++ {
		if i == 0 {
			// The pool fills after the first request of its configuration.
			status, body := rawChat(b, gp.URL, demoUser, "pool-fill", demoPrompt, nil, "")
			require.Equal(b, http.StatusOK, status, body)
		}
		testenv.WaitPooled(b, poolData)
		t0 := time.Now()
		status, body := rawChat(b, gp.URL, demoUser, fmt.Sprintf("pooled-%d", i), demoPrompt, nil, "")
		pooled = append(pooled, time.Since(t0))
		require.Equal(b, http.StatusOK, status, body)
		pooledStart = append(pooledStart, time.Duration(timings(b, body)["container_start_ms"]*float64(time.Millisecond)))
		require.NoError(b, gp.orch.Settle(ctx))

		t0 = time.Now()
		status, body = rawChat(b, g.URL, demoUser, fmt.Sprintf("cold-%d", i), demoPrompt, nil, "")
		gw = append(gw, time.Since(t0))
		require.Equal(b, http.StatusOK, status, body)
		agent = append(agent, time.Duration(timings(b, body)["agent_ms"]*float64(time.Millisecond)))
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
	b.ReportMetric(med(pooled), "pooled-ms")
	b.ReportMetric(med(pooledStart), "pooled-start-ms")
	b.ReportMetric(med(pooled)/med(gw), "pooled/cold")
	b.ReportMetric(med(gw)/med(dockerRun), "gateway/docker-run")
	b.ReportMetric(med(agent)/med(host), "agent/host-cli")
	b.Logf("gateway %v, agent phase %v, docker run %v, host CLI %v, pooled %v (start %v)", gw, agent, dockerRun, host, pooled, pooledStart)
}

// timings are the agentbox.timings of a non-streamed completion.
func timings(b *testing.B, body string) map[string]float64 {
	var comp struct {
		Agentbox struct {
			Timings map[string]float64 `json:"timings"`
		} `json:"agentbox"`
	}
	require.NoError(b, json.Unmarshal([]byte(body), &comp))
	return comp.Agentbox.Timings
}
