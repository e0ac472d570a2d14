package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/claude"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/internal/testkit/cpuprobe"
	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/middleware"
)

// BenchmarkConcurrentChats sends 50 streamed requests at once, ten users
// with five chats each, through the example gateway's HTTP adapter (real
// Docker, the real CLI, the scripted model), with admission control at its
// defaults and off, in the same run. Each iteration is one burst of 50;
// run it with -benchtime=1x. It reports errors, the p50 and p95 request
// latency in seconds and requests per minute, and the CPU per request
// (cpuprobe over the burst until every sandbox is torn down, divided by
// the requests). Three bare `docker run`s of the same CLI right before
// each burst, under the same load, give the baseline: bare-cpu-ms per request and the requests a
// minute that CPU allows on this machine's cores (cpu-bound-req/min);
// cpu-bound-share is the burst's rate over it. That bound is one no burst
// reaches, bare or not: fifty CLIs on a few cores each cost more CPU than
// one alone (their Node.js runtimes' start-up and JIT contend for the
// caches and the cores). So a burst of the same 50 bare `docker run`s,
// as many at once as the gateway runs (admission's MaxRuns; all 50 with
// admission off), gives the baseline the burst can be held to:
// bare-burst-req/min and bare-burst-cpu-ms/req, and bare-burst-share, the
// burst's rate over the bare burst's.
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
			g, data := startGateway(b, func(o *Options) { o.Admission = mode.adm })
			// The baseline right before the burst, under the same load.
			bare := newBareRun(b, g)
			defer bare.model.Close()
			var bareCPU []cpuprobe.Report
			for range 3 {
				bareCPU = append(bareCPU, measureCPU(b, bare.owns, func() { bare.run(b) }))
			}
			bareMs := cpuMedian(bareCPU)
			allowed := float64(runtime.NumCPU()) * float64(time.Minute/time.Millisecond) / bareMs
			b.Logf("bare docker run: CPU ms per request, median of 3: %.0f (%s): %.1f requests a minute on %d cores",
				bareMs, cpuTable(bareCPU), allowed, runtime.NumCPU())
			at := chats
			if !mode.adm.Off {
				at = mode.adm.WithDefaults().MaxRuns
			}
			burstStart := time.Now()
			burstCPU := measureCPU(b, bare.owns, func() { bare.burst(b, chats, at) })
			bareRate := float64(chats) / time.Since(burstStart).Minutes()
			burstMs := float64(burstCPU.Total().Milliseconds()) / chats
			b.Logf("bare burst: %d docker runs, %d at once: %.1f requests a minute, CPU ms per request %.0f; per command: %s",
				chats, at, bareRate, burstMs, cpuCommands([]cpuprobe.Report{burstCPU}))
			var lat []time.Duration
			errs, iter := 0, 0
			var cpu cpuprobe.Report
			var elapsed time.Duration
			for b.Loop() {
				start := time.Now()
				// Fifty containers' processes: a slower poll keeps the probe's
				// own cost small; what it does not see counts as reaped.
				probe, err := cpuprobe.Start(cpuprobe.Options{Owns: ownsData(data), Interval: 100 * time.Millisecond})
				require.NoError(b, err)
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
				elapsed += time.Since(start)
				// The CPU counts the teardowns too; the rate does not wait for them.
				require.NoError(b, g.orch.Settle(context.Background()))
				cpu = cpu.Add(probe.Stop())
				iter++
			}
			perReq := float64(cpu.Total().Milliseconds()) / float64(len(lat))
			rate := float64(len(lat)) / elapsed.Minutes()
			b.ReportMetric(perReq, "cpu-ms/req")
			b.ReportMetric(bareMs, "bare-cpu-ms")
			b.ReportMetric(perReq/bareMs, "cpu/bare-cpu")
			b.ReportMetric(allowed, "cpu-bound-req/min")
			b.ReportMetric(rate/allowed, "cpu-bound-share")
			b.ReportMetric(bareRate, "bare-burst-req/min")
			b.ReportMetric(burstMs, "bare-burst-cpu-ms/req")
			b.ReportMetric(rate/bareRate, "bare-burst-share")
			b.Logf("burst CPU: %s; per command: %s", cpu, cpuCommands([]cpuprobe.Report{cpu}))
			slices.Sort(lat)
			b.ReportMetric(float64(errs), "errors")
			b.ReportMetric(lat[len(lat)/2].Seconds(), "p50_s")
			b.ReportMetric(lat[len(lat)*95/100].Seconds(), "p95_s")
			b.ReportMetric(rate, "req/min")
			b.ReportMetric(float64(len(g.Model.MessageRequests()))/float64(len(lat)), "model_calls/req")
		})
	}
}

// BenchmarkColdPath compares, in one run, a cold request to the example
// gateway (a new chat: container, hooks, the agent through the helper's
// relay and the model route, teardown after the response) with the same
// CLI and flags run bare against the same scripted model: by `docker run
// --rm` of the same image with the same CPU and memory limits, and on the
// host. Each iteration runs all of them once, interleaved, so they see the
// same machine load; run it with -benchtime=5x. The docker run baseline
// uses --network host, the only way a bare container reaches the scripted
// model on loopback (the gateway's sandboxes keep network none). It
// reports the medians in milliseconds, the gateway's agent phase, and the
// ratios the issue targets (gateway / docker run, agent phase / host CLI).
// A second gateway with -pool 1 answers the same new-chat request with a
// started container from its pool (pooled-ms, and pooled-start-ms its
// container phase).
//
// Beside wall time it reports CPU: the machine CPU each request cost the
// processes around it (this process, which holds the gateway and the
// scripted model; the docker CLI; dockerd, containerd, the shims and runc
// calls of the request's containers; the processes inside them), from the
// request until its teardown is done (cpuprobe; teardown-cpu-ms is the
// part after the response), and logs the median per process group.
// (middleware's BenchmarkSessionTurn reports a warm turn's.) A second
// baseline runs the runner's own invocation bare (runner-run-*: the
// flags, environment and stdin the gateway gives the CLI, without the
// gateway's tools), so gateway/runner-run-cpu compares the same CLI work;
// *-around-cpu-ms is each one's CPU beyond the CLI's own process, which
// the CLI's run-to-run spread (±50 ms) does not blur.
func BenchmarkColdPath(b *testing.B) {
	g, data := startGateway(b)
	var poolData string
	gp, _ := startGateway(b, func(o *Options) { o.Pool, poolData = 1, o.DataDir })
	ctx := context.Background()
	claudeBin, err := exec.LookPath("claude")
	require.NoError(b, err, "the host CLI (installed by .ci/setup)")
	hostDir := b.TempDir()
	hostModel := scriptedapi.Start(scriptedapi.WithScript(scriptedapi.Demo(hostDir)))
	defer hostModel.Close()
	bare := newBareRun(b, g)
	defer bare.model.Close()
	same := newRunnerBareRun(b, g)
	defer same.model.Close()
	cliArgs, env := bare.cliArgs, bareEnv
	var gw, agent, dockerRun, sameRun, host, pooled, pooledStart []time.Duration
	var gwCPU, gwReqCPU, gwDownCPU, bareCPU, sameCPU, hostCPU, pooledCPU []cpuprobe.Report
	for i := 0; b.Loop(); i++ {
		if i == 0 {
			// The pool fills after the first request of its configuration.
			status, body := rawChat(b, gp.URL, demoUser, "pool-fill", demoPrompt, nil, "")
			require.Equal(b, http.StatusOK, status, body)
		}
		testenv.WaitPooled(b, poolData)
		var status int
		var body string
		pooledCPU = append(pooledCPU, measureCPU(b, ownsData(poolData), func() {
			t0 := time.Now()
			status, body = rawChat(b, gp.URL, demoUser, fmt.Sprintf("pooled-%d", i), demoPrompt, nil, "")
			pooled = append(pooled, time.Since(t0))
			require.Equal(b, http.StatusOK, status, body)
			require.NoError(b, gp.orch.Settle(ctx))
		}))
		pooledStart = append(pooledStart, time.Duration(timings(b, body)["container_start_ms"]*float64(time.Millisecond)))

		// Two windows: the request until its response, then its teardown.
		req := measureCPU(b, ownsData(data), func() {
			t0 := time.Now()
			status, body = rawChat(b, g.URL, demoUser, fmt.Sprintf("cold-%d", i), demoPrompt, nil, "")
			gw = append(gw, time.Since(t0))
			require.Equal(b, http.StatusOK, status, body)
		})
		down := measureCPU(b, ownsData(data), func() { require.NoError(b, g.orch.Settle(ctx)) })
		gwReqCPU, gwDownCPU = append(gwReqCPU, req), append(gwDownCPU, down)
		gwCPU = append(gwCPU, req.Add(down))
		agent = append(agent, time.Duration(timings(b, body)["agent_ms"]*float64(time.Millisecond)))

		var d time.Duration
		bareCPU = append(bareCPU, measureCPU(b, bare.owns, func() { d = bare.run(b) }))
		dockerRun = append(dockerRun, d)
		sameCPU = append(sameCPU, measureCPU(b, same.owns, func() { d = same.run(b) }))
		sameRun = append(sameRun, d)

		home := b.TempDir()
		cmd := exec.Command(claudeBin, cliArgs...)
		cmd.Dir, cmd.Env = hostDir, append(env(hostModel.URL), "HOME="+home, "PATH=/usr/bin:/bin")
		hostCPU = append(hostCPU, measureCPU(b, bare.owns, func() {
			t0 := time.Now()
			out, err := cmd.CombinedOutput()
			host = append(host, time.Since(t0))
			require.NoError(b, err, "%s", out)
			require.Contains(b, string(out), `"subtype":"success"`)
		}))
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
	b.ReportMetric(med(sameRun), "runner-run-ms")
	b.ReportMetric(med(host), "host-cli-ms")
	b.ReportMetric(med(pooled), "pooled-ms")
	b.ReportMetric(med(pooledStart), "pooled-start-ms")
	b.ReportMetric(med(pooled)/med(gw), "pooled/cold")
	b.ReportMetric(med(gw)/med(dockerRun), "gateway/docker-run")
	b.ReportMetric(med(agent)/med(host), "agent/host-cli")
	b.Logf("gateway %v, agent phase %v, docker run %v, docker run with the runner's flags %v, host CLI %v, pooled %v (start %v)",
		gw, agent, dockerRun, sameRun, host, pooled, pooledStart)
	gwMs, bareMs, sameMs := cpuMedian(gwCPU), cpuMedian(bareCPU), cpuMedian(sameCPU)
	b.ReportMetric(gwMs, "gateway-cpu-ms")
	b.ReportMetric(bareMs, "docker-run-cpu-ms")
	b.ReportMetric(sameMs, "runner-run-cpu-ms")
	b.ReportMetric(gwMs/sameMs, "gateway/runner-run-cpu")
	b.ReportMetric(cpuMedianOf(gwCPU, aroundAgent), "gateway-around-cpu-ms")
	b.ReportMetric(cpuMedianOf(bareCPU, aroundAgent), "docker-run-around-cpu-ms")
	b.ReportMetric(cpuMedianOf(sameCPU, aroundAgent), "runner-run-around-cpu-ms")
	b.ReportMetric(cpuMedian(pooledCPU), "pooled-cpu-ms")
	b.ReportMetric(cpuMedian(gwDownCPU), "teardown-cpu-ms")
	b.ReportMetric(cpuMedian(hostCPU), "host-cli-cpu-ms")
	b.ReportMetric(gwMs/bareMs, "gateway/docker-run-cpu")
	for _, r := range []struct {
		name string
		rs   []cpuprobe.Report
	}{{"gateway cold", gwCPU}, {"gateway cold, until the response", gwReqCPU}, {"gateway cold, teardown", gwDownCPU}, {"docker run", bareCPU}, {"docker run, the runner's flags", sameCPU}, {"pooled", pooledCPU}, {"host CLI", hostCPU}} {
		b.Logf("CPU ms, median per group, %s: %s", r.name, cpuTable(r.rs))
		b.Logf("CPU ms, mean per command, %s: %s", r.name, cpuCommands(r.rs))
	}
}

// bareEnv is the CLI's environment for a bare run against the model at url.
func bareEnv(url string) []string {
	return []string{"ANTHROPIC_BASE_URL=" + url, "ANTHROPIC_API_KEY=bench", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}
}

// bareRun is the baseline: the demo's CLI by `docker run --rm` of the
// gateway's image with the same CPU and memory limits, against a scripted
// model of its own, in containers labelled for cpuprobe.
type bareRun struct {
	model *scriptedapi.Server
	// entry and cliArgs are the command, env its environment and stdin
	// its input.
	entry   string
	cliArgs []string
	env     []string
	stdin   []byte
	// home, when set, is HOME on a tmpfs, as the gateway's sandboxes have
	// it; else HOME is /tmp.
	home  string
	label string
	owns  func(map[string]string) bool
}

// newBareRun prepares the baseline for gateway g's demo assistant: the
// flags a user would give the CLI by hand for the demo's prompt.
func newBareRun(b *testing.B, g *Gateway) *bareRun {
	model := scriptedapi.Start(scriptedapi.WithScript(scriptedapi.Demo(executor.ContainerWorkdir)))
	return labelBareRun(&bareRun{
		model: model,
		entry: "claude",
		cliArgs: []string{"-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "acceptEdits", "--max-turns", "10",
			"--model", g.Config.Assistants[demoAssistant].Connector.Model, demoPrompt},
		env: append(bareEnv(model.URL), "HOME=/tmp"),
	})
}

// newRunnerBareRun prepares the baseline with the runner's own
// invocation for the demo assistant's new chat (the flags, environment
// and stdin the gateway gives the CLI: streamed input, partial messages,
// a kept session, the assistant's system prompt), without the gateway's
// tools, whose MCP server needs the gateway. What the gateway costs
// beyond it is the sandbox's and the tools', not the CLI doing more.
func newRunnerBareRun(b *testing.B, g *Gateway) *bareRun {
	a := g.Config.Assistants[demoAssistant]
	require.NotNil(b, a, "the example's claude assistant")
	model := scriptedapi.Start(scriptedapi.WithScript(scriptedapi.Demo(executor.ContainerWorkdir)))
	inv, err := claude.New().Invocation(executor.RunRequest{
		Workdir: executor.ContainerWorkdir, Home: docker.DefaultHome, ModelBaseURL: model.URL, APIKey: "bench",
		Model: a.Connector.Model, Arguments: a.Sandbox.Arguments, SystemPrompt: a.SystemPrompt(), CPUs: executor.DefaultCPUs,
		SessionID: uuid.NewString(), Messages: []executor.Message{{Role: "user", Content: demoPrompt}},
	})
	require.NoError(b, err)
	require.Empty(b, inv.Files, "the demo's system prompt fits an argument")
	return labelBareRun(&bareRun{model: model, entry: inv.Args[0], cliArgs: inv.Args[1:], env: inv.Env, stdin: inv.Stdin, home: docker.DefaultHome})
}

// labelBareRun gives r a label of its own for cpuprobe.
func labelBareRun(r *bareRun) *bareRun {
	r.label = "agentbox-bench-bare=" + strconv.FormatInt(time.Now().UnixNano(), 36)
	k, v, _ := strings.Cut(r.label, "=")
	r.owns = func(l map[string]string) bool { return l[k] == v }
	return r
}

// run runs the CLI once, in a new workspace, and returns its wall time.
func (r *bareRun) run(b *testing.B) time.Duration {
	ws := b.TempDir()
	require.NoError(b, os.Chmod(ws, 0o777))
	args := []string{"run", "--rm", "--label", r.label, "--network", "host", "--cpus", "1", "--memory", "1g", "-u", "1000:1000",
		"-v", ws + ":" + executor.ContainerWorkdir, "-w", executor.ContainerWorkdir, "--entrypoint", r.entry}
	if r.stdin != nil {
		args = append(args, "-i")
	}
	if r.home != "" {
		args = append(args, "--tmpfs", r.home+":uid=1000,gid=1000,mode=0700")
	}
	for _, kv := range r.env {
		args = append(args, "-e", kv)
	}
	args = append(append(args, "agentbox/sandbox-claude:latest"), r.cliArgs...)
	cmd := exec.Command("docker", args...)
	if r.stdin != nil {
		cmd.Stdin = bytes.NewReader(r.stdin)
	}
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(t0)
	require.NoError(b, err, "%s", out)
	require.Contains(b, string(out), `"subtype":"success"`)
	return d
}

// burst runs the CLI n times, at most at of them at once, each in a new
// workspace.
func (r *bareRun) burst(b *testing.B, n, at int) {
	sem := make(chan struct{}, at)
	var wg sync.WaitGroup
	for range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			r.run(b)
		})
	}
	wg.Wait()
}

// ownsData picks the containers of the gateway on data directory dir.
func ownsData(dir string) func(map[string]string) bool {
	return func(l map[string]string) bool { return l[docker.LabelDataDir] == dir }
}

// measureCPU runs f inside a cpuprobe window counting the containers owns
// picks.
func measureCPU(b *testing.B, owns func(map[string]string) bool, f func()) cpuprobe.Report {
	b.Helper()
	p, err := cpuprobe.Start(cpuprobe.Options{Owns: owns})
	require.NoError(b, err)
	f()
	return p.Stop()
}

// cpuMedian is the median total CPU of the reports, in milliseconds.
func cpuMedian(rs []cpuprobe.Report) float64 {
	return cpuMedianOf(rs, cpuprobe.Report.Total)
}

// agentCommand is the agent CLI's process in a report: everything else
// is what runs around it.
const agentCommand = cpuprobe.GroupContainer + "/claude"

// aroundAgent is a report's CPU beyond the agent CLI's own process (its
// reaped children stay in): what the sandbox, the gateway or the docker
// CLI cost around the same agent. In a `docker run` the CLI is the
// container's first process, so runc's set-up before it execs the CLI
// (about 22 ms) counts as the CLI's; in the gateway's container it counts
// as docker-init's, so the gateway's figure carries it and the bare one
// does not.
func aroundAgent(r cpuprobe.Report) time.Duration {
	return r.Total() - r.Commands[agentCommand]
}

// cpuMedianOf is the median of f over the reports, in milliseconds.
func cpuMedianOf(rs []cpuprobe.Report, f func(cpuprobe.Report) time.Duration) float64 {
	t := make([]time.Duration, len(rs))
	for i, r := range rs {
		t[i] = f(r)
	}
	slices.Sort(t)
	return float64(t[len(t)/2]) / float64(time.Millisecond)
}

// cpuCommands prints the mean CPU per group and command over the reports,
// largest first, leaving out those under 5 ms.
func cpuCommands(rs []cpuprobe.Report) string {
	var sum cpuprobe.Report
	for _, r := range rs {
		sum = sum.Add(r)
	}
	keys := slices.Collect(maps.Keys(sum.Commands))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(sum.Commands[b], sum.Commands[a]) })
	var parts []string
	for _, k := range keys {
		if ms := sum.Commands[k].Milliseconds() / int64(len(rs)); ms >= 5 {
			parts = append(parts, fmt.Sprintf("%s %d", k, ms))
		}
	}
	return strings.Join(parts, ", ")
}

// cpuTable prints the median CPU of each group over the reports, the
// median total and the median machine CPU (everything on the machine).
func cpuTable(rs []cpuprobe.Report) string {
	med := func(f func(cpuprobe.Report) time.Duration) int64 { return int64(cpuMedianOf(rs, f)) }
	var sb strings.Builder
	for _, g := range cpuprobe.Groups {
		fmt.Fprintf(&sb, "%s %d, ", g, med(func(r cpuprobe.Report) time.Duration { return r.Groups[g] }))
	}
	fmt.Fprintf(&sb, "total %d, machine %d, wall %d", med(cpuprobe.Report.Total),
		med(func(r cpuprobe.Report) time.Duration { return r.Machine }), med(func(r cpuprobe.Report) time.Duration { return r.Wall }))
	return sb.String()
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
