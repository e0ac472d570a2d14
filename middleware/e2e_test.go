package middleware_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/claude"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/hooks"
	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/modelroute"
	"github.com/agentbox/agentbox/middleware/openai"
)

// connectorKey is the "real" key only the host's model proxy holds.
const connectorKey = "sk-ant-connector-middleware-e2e-0123456789"

// e2e is the whole path with real parts: the OpenAI adapter, the
// Orchestrator, executor/docker with the helper, the claude runner and the
// real Claude Code CLI in the sandbox image, the ProxyRouter's model proxy;
// the model API is internal/scriptedapi (the only stand-in).
type e2e struct {
	api     *scriptedapi.Server
	dataDir string
	srv     *httptest.Server
	client  sdk.Client
}

func newE2E(t *testing.T, h hooks.Hooks, mods ...func(*middleware.Assistant)) *e2e {
	t.Helper()
	img := testenv.RequireImage(t)
	bin := testenv.HelperBinary(t)
	demo := scriptedapi.Demo(executor.ContainerWorkdir)
	env := &e2e{dataDir: t.TempDir()}
	env.api = scriptedapi.Start(scriptedapi.WithScript(func(r *scriptedapi.Request) scriptedapi.Turn {
		if strings.Contains(r.AllText(), "stall") {
			return scriptedapi.Turn{Stall: scriptedapi.StallAfterStart}
		}
		return demo(r)
	}))
	t.Cleanup(env.api.Close)
	coder := &middleware.Assistant{ID: "coder", Hooks: h, Sandbox: &middleware.Sandbox{
		Runner: "claude",
		Spec: executor.Spec{Image: img, Timeout: 3 * time.Minute, MemoryBytes: 1 << 30, CPUs: 1, PidsLimit: 256,
			Network: "none", LeaseWait: 30 * time.Second},
		HomeFiles:    map[string][]byte{".claude/skills/greet/SKILL.md": []byte("---\nname: greet\ndescription: Greets the user by name.\n---\n\nSay hello.\n")},
		Run:          executor.RunRequest{Model: "claude-sonnet-4-6", Arguments: map[string]any{"permission_mode": "acceptEdits", "max_turns": 10}},
		StallTimeout: time.Minute,
		Connector:    middleware.Connector{Upstream: env.api.URL, Key: connectorKey},
	}}
	for _, m := range mods {
		m(coder)
	}
	cat, err := middleware.NewCatalog(coder)
	require.NoError(t, err)
	o, err := middleware.New(context.Background(), middleware.Options{
		Catalog: cat,
		NewExecutor: func(ctx context.Context, log hclog.Logger) (executor.Executor, error) {
			return docker.New(ctx, docker.Options{DataDir: env.dataDir, Image: img, HelperBinary: bin, Logger: log,
				ReconcileInterval: -1, RetentionInterval: -1, StopGrace: 500 * time.Millisecond})
		},
		Runners: []executor.Runner{claude.New()},
		NewModelRouter: func(context.Context, hclog.Logger) (middleware.ModelRouter, error) {
			return modelroute.New(modelroute.Options{}), nil
		},
		TeardownTimeout: 30 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, o.Close()) })
	s, err := openai.New(openai.Options{Handler: middleware.Chain(middleware.UnknownAssistant, o.Wrap), Catalog: cat})
	require.NoError(t, err)
	env.srv = httptest.NewServer(s)
	t.Cleanup(env.srv.Close)
	env.client = sdk.NewClient(option.WithBaseURL(env.srv.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	return env
}

// containers lists the containers of a chat of this test's executor,
// running or not (other tests on the daemon use the same chat ids).
func (env *e2e) containers(t *testing.T, chat string) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+docker.LabelChat+"="+chat,
		"--filter", "label="+docker.LabelDataDir+"="+env.dataDir).Output()
	require.NoError(t, err)
	return strings.Fields(string(out))
}

func e2eParams(user, prompt string) sdk.ChatCompletionNewParams {
	return sdk.ChatCompletionNewParams{Model: "coder", User: sdk.String(user),
		Messages: []sdk.ChatCompletionMessageParamUnion{sdk.UserMessage(prompt)}}
}

func TestE2ERealSandbox(t *testing.T) {
	var nextSaw string
	h := hooks.Funcs{
		CreateFunc: func(ctx context.Context, hc *hooks.Context, msgs []executor.Message) (*hooks.CreateResult, error) {
			if err := hc.Sandbox.WriteFile(ctx, "notes/from-hook.txt", []byte("written by the Create hook\n")); err != nil {
				return nil, err
			}
			res, err := hc.Sandbox.Exec(ctx, &executor.Cmd{Args: []string{"cat", "notes/from-hook.txt"}})
			if err != nil || res.ExitCode != 0 {
				return nil, err
			}
			return nil, hc.Emit(executor.Event{Kind: executor.EventUI, UI: &executor.UIMessage{ID: "1", Action: "send", Type: "loading"}})
		},
		NextFunc: func(ctx context.Context, hc *hooks.Context, p hooks.NextPayload) (*hooks.NextResult, error) {
			b, err := hc.Sandbox.ReadFile(ctx, scriptedapi.DemoFile)
			nextSaw = string(b)
			return nil, err
		},
	}
	env := newE2E(t, h)

	p := e2eParams("alice:1", "Write hello.txt and cat it.")
	p.StreamOptions = sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)}
	stream := env.client.Chat.Completions.NewStreaming(context.Background(), p)
	var text strings.Builder
	kinds := map[string]int{}
	var skills []string
	var last sdk.ChatCompletionChunk
	for stream.Next() {
		c := stream.Current()
		last = c
		if len(c.Choices) > 0 {
			text.WriteString(c.Choices[0].Delta.Content)
		}
		if f, ok := c.JSON.ExtraFields["agentbox"]; ok {
			var ext struct {
				Kind    string
				Init    *executor.InitInfo
				Timings map[string]float64
			}
			require.NoError(t, json.Unmarshal([]byte(f.Raw()), &ext))
			kinds[ext.Kind]++
			if ext.Kind == "done" {
				t.Logf("phase timings (ms): %v", ext.Timings)
				assert.Positive(t, ext.Timings["container_start_ms"])
				assert.Positive(t, ext.Timings["agent_ms"])
				assert.Zero(t, ext.Timings["teardown_ms"], "the response does not wait for the teardown")
			}
			if ext.Init != nil {
				skills = ext.Init.Skills
			}
		}
	}
	require.NoError(t, stream.Err())
	assert.Contains(t, text.String(), "printed: "+strings.TrimSpace(scriptedapi.DemoContent))
	assert.Positive(t, last.Usage.PromptTokens, "metered usage in the final chunk")
	assert.Equal(t, 1, kinds["ui"], "the Create hook's UI message")
	assert.Equal(t, 2, kinds["tool_use"], "Write and Bash")
	assert.Equal(t, 1, kinds["sandbox"], "ready; closed comes after the response, to nobody")
	assert.Contains(t, skills, "greet", "the assistant's skill was placed in .claude/skills/")
	assert.Equal(t, scriptedapi.DemoContent, nextSaw, "Next ran before teardown and saw the agent's file")

	ws, err := executor.WorkspaceDir(env.dataDir, "alice", "1")
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(ws, scriptedapi.DemoFile))
	require.NoError(t, err)
	assert.Equal(t, scriptedapi.DemoContent, string(got), "the agent's file outlives the container")
	require.Eventually(t, func() bool { return len(env.containers(t, "1")) == 0 }, 30*time.Second, 50*time.Millisecond,
		"the container is removed after the response")

	reqs := env.api.MessageRequests()
	require.NotEmpty(t, reqs)
	for _, r := range reqs {
		assert.Equal(t, connectorKey, r.APIKey, "the host's proxy swapped the per-request token for the connector's key")
	}

	// The same run on a fresh chat without streaming answers with the same
	// text (on chat 1 the file exists now, and the CLI refuses to overwrite
	// a file it has not read).
	comp, err := env.client.Chat.Completions.New(context.Background(), e2eParams("alice:3", "Write hello.txt and cat it."))
	require.NoError(t, err)
	assert.Equal(t, text.String(), comp.Choices[0].Message.Content)
}

func TestE2EClientDisconnectRemovesTheContainer(t *testing.T) {
	env := newE2E(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	stream := env.client.Chat.Completions.NewStreaming(ctx, e2eParams("bob:2", "stall, please"))
	for stream.Next() {
		c := stream.Current()
		if f, ok := c.JSON.ExtraFields["agentbox"]; ok && strings.Contains(f.Raw(), `"kind":"init"`) {
			require.Len(t, env.containers(t, "2"), 1, "the agent runs in its container")
			break // the CLI started and waits on the stalled model
		}
	}
	t0 := time.Now()
	cancel()
	_ = stream.Close()
	require.Eventually(t, func() bool { return len(env.containers(t, "2")) == 0 }, 30*time.Second, 100*time.Millisecond,
		"the container is removed after the client went away")
	took := time.Since(t0)
	t.Logf("container removed %v after the client went away", took.Round(10*time.Millisecond))
	// The bound: the stop grace (500 ms here) plus 2 s.
	assert.Less(t, took, 500*time.Millisecond+2*time.Second, "gone within the stop grace plus 2 s")

	// The chat's lease was released: the next request runs at once.
	comp, err := env.client.Chat.Completions.New(context.Background(), e2eParams("bob:2", "Write hello.txt and cat it."))
	require.NoError(t, err)
	assert.Contains(t, comp.Choices[0].Message.Content, "printed:")
}
