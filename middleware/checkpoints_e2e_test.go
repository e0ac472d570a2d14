package middleware_test

import (
	"context"
	"net/http/httptest"
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
	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/modelroute"
	"github.com/agentbox/agentbox/middleware/openai"
)

// cmdAgent is a scripted model that runs, through the real CLI's Bash
// tool, the shell command after "CMD:" in the user's message, and answers
// with what it printed.
func cmdAgent(r *scriptedapi.Request) scriptedapi.Turn {
	if res := r.NewToolResults(); len(res) > 0 {
		return scriptedapi.Say("ran: " + strings.TrimSpace(claude.StripSystemReminders(res[len(res)-1].Result)))
	}
	last := r.LastUserText()
	if i := strings.LastIndex(last, "CMD:"); i >= 0 {
		return scriptedapi.Call("Bash", map[string]string{"command": strings.TrimSpace(last[i+4:]), "description": "Run the user's command"})
	}
	return scriptedapi.Say("no command")
}

// checkpointE2E is the whole stack (HTTP adapter, Orchestrator, Docker,
// the real CLI) with cmdAgent, the assistant's policy given by idle.
type checkpointE2E struct {
	client sdk.Client
	o      *middleware.Orchestrator
	logs   *testenv.SyncBuffer
}

func newCheckpointE2E(t *testing.T, idle time.Duration) *checkpointE2E {
	t.Helper()
	img := testenv.RequireImage(t)
	bin := testenv.HelperBinary(t)
	api := scriptedapi.Start(scriptedapi.WithScript(cmdAgent))
	t.Cleanup(api.Close)
	data := t.TempDir()
	coder := &middleware.Assistant{ID: "coder", Sandbox: &middleware.Sandbox{
		Runner: "claude",
		Spec: executor.Spec{Image: img, Timeout: 5 * time.Minute, MemoryBytes: 1 << 30, CPUs: 1, PidsLimit: 256,
			Network: "none", LeaseWait: 30 * time.Second, IdleTTL: idle},
		Run:       executor.RunRequest{Model: "claude-sonnet-4-6", Arguments: map[string]any{"permission_mode": "acceptEdits", "max_turns": 10}},
		Connector: middleware.Connector{Upstream: api.URL, Key: connectorKey},
	}}
	cat, err := middleware.NewCatalog(coder)
	require.NoError(t, err)
	env := &checkpointE2E{logs: &testenv.SyncBuffer{}}
	env.o, err = middleware.New(context.Background(), middleware.Options{
		Catalog: cat,
		NewExecutor: func(ctx context.Context, log hclog.Logger) (executor.Executor, error) {
			return docker.New(ctx, docker.Options{DataDir: data, Image: img, HelperBinary: bin, Logger: log,
				ReconcileInterval: -1, RetentionInterval: -1, StopGrace: 500 * time.Millisecond})
		},
		Runners: []executor.Runner{claude.New()},
		NewModelRouter: func(context.Context, hclog.Logger) (middleware.ModelRouter, error) {
			return modelroute.New(modelroute.Options{}), nil
		},
		SessionDir:      filepath.Join(data, "sessions"),
		TeardownTimeout: 30 * time.Second,
		Logger:          hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: env.logs}),
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, env.o.Close()) })
	s, err := openai.New(openai.Options{Handler: middleware.Chain(middleware.UnknownAssistant, env.o.Wrap), Catalog: cat, Sandboxes: env.o})
	require.NoError(t, err)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	env.client = sdk.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	return env
}

// ask sends the conversation (user first, alternating) for user:chat and
// returns the answer once the turn's checkpoint is taken.
func (env *checkpointE2E) ask(t *testing.T, chat string, msgs ...string) string {
	t.Helper()
	p := sdk.ChatCompletionNewParams{Model: "coder", User: sdk.String("alice:" + chat)}
	for i, m := range msgs {
		if i%2 == 0 {
			p.Messages = append(p.Messages, sdk.UserMessage(m))
		} else {
			p.Messages = append(p.Messages, sdk.AssistantMessage(m))
		}
	}
	comp, err := env.client.Chat.Completions.New(context.Background(), p)
	require.NoError(t, err)
	require.NoError(t, env.o.Settle(context.Background()))
	return comp.Choices[0].Message.Content
}

// The turns of the tests: each shows the workspace as the agent finds it,
// then changes it.
const (
	turn1 = "Turn 1. CMD: ls -A; echo v1 > a.txt"
	turn2 = "Turn 2. CMD: cat a.txt; ls b.txt 2>&1; echo v2 > a.txt; echo b > b.txt"
	turn3 = "Turn 3. CMD: cat a.txt; ls b.txt 2>&1"
	edit1 = "Turn 1, edited. CMD: ls -A; echo edited"
)

// TestE2EWorkspaceFollowsTheConversation is issue 34's main case through
// the HTTP adapter with the real CLI, on the request policy (a container
// per request) and on the session policy (the chat's container kept, its
// next CLI started ahead): turn 1 writes a.txt = v1, turn 2 rewrites it
// to v2 and creates b.txt; a regenerate of turn 2 finds a.txt = v1 and no
// b.txt; a normal next turn after it sees the regenerated state; an edit
// of turn 1 finds the chat's start (an empty workspace).
func TestE2EWorkspaceFollowsTheConversation(t *testing.T) {
	for name, idle := range map[string]time.Duration{"request policy": 0, "session policy": 10 * time.Minute} {
		t.Run(name, func(t *testing.T) {
			env := newCheckpointE2E(t, idle)
			a1 := env.ask(t, "c", turn1)
			assert.NotContains(t, a1, "a.txt", "turn 1 finds an empty workspace")
			a2 := env.ask(t, "c", turn1, a1, turn2)
			assert.Contains(t, a2, "v1", "turn 2 finds turn 1's a.txt")
			assert.Contains(t, a2, "No such file", "and no b.txt yet")

			// The client regenerates turn 2's answer: the agent finds the
			// files as turn 1 left them, not as the discarded answer did.
			regen := env.ask(t, "c", turn1, a1, turn2)
			assert.Contains(t, regen, "v1", "a.txt is turn 1's again")
			assert.NotContains(t, regen, "v2")
			assert.Contains(t, regen, "No such file", "b.txt is gone")
			assert.Contains(t, env.logs.String(), "the workspace follows the history back")

			// A normal next turn after the regenerated answer sees what
			// that answer did.
			a3 := env.ask(t, "c", turn1, a1, turn2, regen, turn3)
			assert.Contains(t, a3, "v2", "the regenerated turn's a.txt")
			assert.NotContains(t, a3, "No such file", "and its b.txt")

			// The client edits turn 1: the chat's start, before any turn.
			e1 := env.ask(t, "c", edit1)
			assert.NotContains(t, e1, "a.txt", "an edit of turn 1 finds the workspace the chat started with")
			assert.Contains(t, e1, "edited")
			assert.Equal(t, 2, strings.Count(env.logs.String(), "the workspace follows the history back"))
			if idle > 0 {
				assert.Contains(t, env.logs.String(), "pre_started=true", "the session policy's container was kept")
			}

			// A client that sends no history (one message a request)
			// keeps its workspace from request to request, as before
			// checkpoints: its second message is not an edit of its
			// first.
			env.ask(t, "nohistory", turn1)
			carried := env.ask(t, "nohistory", turn3)
			assert.Contains(t, carried, "v1", "the workspace is carried over")
			assert.Equal(t, 2, strings.Count(env.logs.String(), "the workspace follows the history back"), "and not rewound")
		})
	}
}
