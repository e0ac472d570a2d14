package helper

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
	"github.com/agentbox/agentbox/services/modelproxy"
)

// TestDockerClaudeThroughForwarder runs the real Claude Code CLI in a
// network-none sandbox; its only route to the (scripted) model is the
// helper's loopback forwarder and the host model proxy, which swaps the
// per-request token for the connector key and meters every call.
func TestDockerClaudeThroughForwarder(t *testing.T) {
	api := scriptedapi.Start(scriptedapi.WithScript(scriptedapi.Demo(executor.ContainerWorkdir)))
	defer api.Close()
	sb := startSandbox(t, sandboxOpts{
		serve: ServeOptions{ModelPort: modelPort},
		extra: []string{"--tmpfs", "/home/agent:rw,uid=1000,gid=1000,mode=0700"},
	})
	p, err := modelproxy.New(modelproxy.Options{Upstream: api.URL, APIKey: connectorKey, Token: sandboxToken,
		Budget: modelproxy.Budget{MaxRequests: 20, MaxDuration: 2 * time.Minute}})
	require.NoError(t, err)
	ln, err := ListenHostSocket(sb.hostDir, ModelSocket, 1000, 1000)
	require.NoError(t, err)
	go func() { _ = p.Serve(ln) }()
	defer func() { _ = p.Close() }()

	var out, errb bytes.Buffer
	res, err := sb.client.Exec(context.Background(), &executor.Cmd{
		Args: []string{"claude", "-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "acceptEdits",
			"--allowedTools", "Bash,Write"},
		Env: []string{"ANTHROPIC_BASE_URL=http://127.0.0.1:4000", "ANTHROPIC_API_KEY=" + sandboxToken,
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "CLAUDE_CODE_MAX_RETRIES=0"},
		Stdin:  strings.NewReader("write hello.txt and show it"),
		Stdout: &out, Stderr: &errb, Timeout: 2 * time.Minute,
	})
	require.NoError(t, err, errb.String())
	require.Equal(t, 0, res.ExitCode, "stderr: %s\nstdout: %s", errb.String(), out.String())
	assert.Contains(t, out.String(), `"type":"result"`)
	assert.Contains(t, out.String(), strings.TrimSpace(scriptedapi.DemoContent))

	got, err := os.ReadFile(filepath.Join(sb.work, scriptedapi.DemoFile))
	require.NoError(t, err)
	assert.Equal(t, scriptedapi.DemoContent, string(got))

	reqs := api.Requests()
	require.NotEmpty(t, reqs)
	for _, r := range reqs {
		assert.Equal(t, connectorKey, r.APIKey, "upstream %s %s got the connector key", r.Method, r.Path)
	}
	calls := p.Calls()
	assert.Len(t, calls, len(reqs), "one metered call per upstream request")
	var streamed int
	for _, c := range calls {
		assert.Equal(t, 200, c.Status)
		if c.Stream {
			streamed++
			assert.Positive(t, c.Usage.OutputTokens, "streamed call metered")
		}
	}
	assert.GreaterOrEqual(t, streamed, 3, "Write, Bash and the answer each take one streamed call")
	assert.Positive(t, p.Usage().InputTokens)
	t.Logf("%d model calls through the forwarder, metered usage %+v", len(calls), p.Usage())
}
