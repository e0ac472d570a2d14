package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/codex"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/internal/testkit/scriptedresponses"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// codexChat posts demoPrompt to the codex assistant in a new chat and
// returns the status and body.
func codexChat(b *testing.B, url, chat string) (int, string) {
	b.Helper()
	body := fmt.Sprintf(`{"model": %q, "messages": [{"role": "user", "content": %q}]}`, demoCodex, demoPrompt)
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(b, err)
	req.Header.Set("X-Agentbox-User", demoUser)
	req.Header.Set("X-Agentbox-Chat", chat)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(b, err)
	defer func() { _ = resp.Body.Close() }()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// BenchmarkCodexColdPath compares, in one run, a cold request to the
// codex assistant of the example gateway (a new chat: container, hooks,
// the Codex CLI through the helper's relay and the model proxy, teardown
// after the response) with the same CLI and flags (the runner's
// invocation for the assistant) run by `docker run --rm` of the same image
// with the same CPU and memory limits, against the same scripted model
// (the demo's: apply_patch, then cat). The docker run baseline uses
// --network host, the only way a bare container reaches the scripted
// model on loopback. Each iteration runs both once; run it with
// -benchtime=5x. The system prompt is the assistant's (the gateway adds
// a summary of the environment to it). It reports the medians in milliseconds, the gateway's
// agent phase and the ratio the issue targets (gateway / docker run).
func BenchmarkCodexColdPath(b *testing.B) {
	img := testenv.RequireCodexImage(b)
	g, _ := startGateway(b)
	ctx := context.Background()
	a := g.Config.Assistants[demoCodex]
	require.NotNil(b, a, "the example's codex assistant")
	model := scriptedresponses.Start(scriptedresponses.WithScript(scriptedresponses.Demo()))
	defer model.Close()
	var gw, agent, dockerRun []time.Duration
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		status, body := codexChat(b, g.URL, fmt.Sprintf("codex-cold-%d", i))
		gw = append(gw, time.Since(t0))
		require.Equal(b, http.StatusOK, status, body)
		require.Contains(b, body, "hello from the sandbox")
		agent = append(agent, time.Duration(timings(b, body)["agent_ms"]*float64(time.Millisecond)))
		require.NoError(b, g.orch.Settle(ctx))

		ws := b.TempDir()
		require.NoError(b, os.Chmod(ws, 0o777))
		inv, err := codex.New().Invocation(executor.RunRequest{
			Workdir: executor.ContainerWorkdir, Home: docker.DefaultHome, ModelBaseURL: strings.TrimSuffix(model.URL, "/v1"), APIKey: "bench",
			Model: a.Connector.Model, Arguments: a.Sandbox.Arguments, SystemPrompt: a.SystemPrompt(),
			Messages: []executor.Message{{Role: "user", Content: demoPrompt}},
		})
		require.NoError(b, err)
		// HOME on a tmpfs, as the gateway's sandboxes have it.
		args := []string{"run", "--rm", "-i", "--network", "host", "--cpus", "1", "--memory", "1g", "-u", "1000:1000",
			"--tmpfs", docker.DefaultHome + ":uid=1000,gid=1000,mode=0700", "-v", ws + ":" + executor.ContainerWorkdir, "-w", executor.ContainerWorkdir, "--entrypoint", inv.Args[0]}
		for _, kv := range inv.Env {
			args = append(args, "-e", kv)
		}
		args = append(append(args, img), inv.Args[1:]...)
		cmd := exec.Command("docker", args...)
		cmd.Stdin = bytes.NewReader(inv.Stdin)
		t0 = time.Now()
		out, err := cmd.CombinedOutput()
		dockerRun = append(dockerRun, time.Since(t0))
		require.NoError(b, err, "%s", out)
		require.Contains(b, string(out), `"type":"turn.completed"`)
		require.Contains(b, string(out), "hello from the sandbox")
	}
	med := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2]) / float64(time.Millisecond)
	}
	b.ReportMetric(med(gw), "gateway-ms")
	b.ReportMetric(med(agent), "agent-phase-ms")
	b.ReportMetric(med(dockerRun), "docker-run-ms")
	b.ReportMetric(med(gw)/med(dockerRun), "gateway/docker-run")
	b.Logf("gateway %v, agent phase %v, docker run %v", gw, agent, dockerRun)
}
