package middleware_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
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
	"github.com/agentbox/agentbox/executor/kubernetes"
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
	user   string // who asks: alice, unless the backend outlives the test
	data   string // the backend's data directory
	url    string
	client sdk.Client
	o      *middleware.Orchestrator
	logs   *testenv.SyncBuffer
}

func newCheckpointE2E(t testing.TB, idle time.Duration, tweak ...func(*middleware.Assistant)) *checkpointE2E {
	t.Helper()
	img := testenv.RequireImage(t)
	bin := testenv.HelperBinary(t)
	data := t.TempDir()
	return newCheckpointE2EOn(t, data, idle, func(ctx context.Context, log hclog.Logger) (executor.Executor, error) {
		return docker.New(ctx, docker.Options{DataDir: data, Image: img, HelperBinary: bin, Logger: log,
			ReconcileInterval: -1, RetentionInterval: -1, StopGrace: 500 * time.Millisecond})
	}, tweak...)
}

// newCheckpointE2EOn is newCheckpointE2E on the executor newExec makes,
// its data directory data.
func newCheckpointE2EOn(t testing.TB, data string, idle time.Duration, newExec func(context.Context, hclog.Logger) (executor.Executor, error), tweak ...func(*middleware.Assistant)) *checkpointE2E {
	t.Helper()
	img := testenv.RequireImage(t)
	api := scriptedapi.Start(scriptedapi.WithScript(cmdAgent))
	t.Cleanup(api.Close)
	coder := &middleware.Assistant{ID: "coder", Sandbox: &middleware.Sandbox{
		Runner: "claude",
		Spec: executor.Spec{Image: img, Timeout: 5 * time.Minute, MemoryBytes: 1 << 30, CPUs: 1, PidsLimit: 256,
			Network: "none", LeaseWait: 30 * time.Second, IdleTTL: idle},
		Run:       executor.RunRequest{Model: "claude-sonnet-4-6", Arguments: map[string]any{"permission_mode": "acceptEdits", "max_turns": 10}},
		Connector: middleware.Connector{Upstream: api.URL, Key: connectorKey},
	}}
	for _, f := range tweak {
		f(coder)
	}
	cat, err := middleware.NewCatalog(coder)
	require.NoError(t, err)
	env := &checkpointE2E{user: "alice", data: data, logs: &testenv.SyncBuffer{}}
	env.o, err = middleware.New(context.Background(), middleware.Options{
		Catalog:     cat,
		NewExecutor: newExec,
		Runners:     []executor.Runner{claude.New()},
		NewModelRouter: func(context.Context, hclog.Logger) (middleware.ModelRouter, error) {
			return modelroute.New(modelroute.Options{}), nil
		},
		SessionDir:      filepath.Join(data, "sessions"),
		TeardownTimeout: 30 * time.Second,
		Logger:          hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: env.logs}),
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, env.o.Close()) })
	s, err := openai.New(openai.Options{Handler: middleware.Chain(middleware.UnknownAssistant, env.o.Wrap), Catalog: cat, Sandboxes: env.o, Checkpoints: env.o})
	require.NoError(t, err)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	env.url = srv.URL
	env.client = sdk.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	return env
}

// ask sends the conversation (user first, alternating) for user:chat and
// returns the answer once the turn's checkpoint is taken.
func (env *checkpointE2E) ask(t testing.TB, chat string, msgs ...string) string {
	t.Helper()
	return env.askAs(t, env.user, chat, msgs...)
}

// askAs is ask for user.
func (env *checkpointE2E) askAs(t testing.TB, user, chat string, msgs ...string) string {
	t.Helper()
	p := sdk.ChatCompletionNewParams{Model: "coder", User: sdk.String(user + ":" + chat)}
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
			workspaceFollows(t, newCheckpointE2E(t, idle), idle)
		})
	}
}

// workspaceFollows is TestE2EWorkspaceFollowsTheConversation on env, whose
// assistant's idle TTL is idle.
func workspaceFollows(t *testing.T, env *checkpointE2E, idle time.Duration) {
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
}

// askIn sends one message to user's client sandbox sb.
func (env *checkpointE2E) askIn(t *testing.T, sb, msg string) string {
	t.Helper()
	comp, err := env.client.Chat.Completions.New(context.Background(), sdk.ChatCompletionNewParams{
		Model: "coder", Messages: []sdk.ChatCompletionMessageParamUnion{sdk.UserMessage(msg)}},
		option.WithHeader("X-Agentbox-User", env.user), option.WithHeader("X-Agentbox-Sandbox", sb),
		option.WithHeader("X-Agentbox-Chat", "work"))
	require.NoError(t, err)
	require.NoError(t, env.o.Settle(context.Background()))
	return comp.Choices[0].Message.Content
}

// call sends an API request as user and decodes its JSON answer.
func (env *checkpointE2E) call(t *testing.T, user, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, env.url+path, bytes.NewBufferString(body))
	require.NoError(t, err)
	req.Header.Set("X-Agentbox-User", user)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, json.Unmarshal(raw, &v), "%s %s: %s", method, path, raw)
	return resp.StatusCode, v
}

// checkpointOfTurn is the id of the checkpoint listed at path whose turn
// is turn.
func (env *checkpointE2E) checkpointOfTurn(t *testing.T, path string, turn int) string {
	t.Helper()
	code, list := env.call(t, env.user, http.MethodGet, path, "")
	require.Equal(t, http.StatusOK, code, "%v", list)
	for _, c := range list["data"].([]any) {
		c := c.(map[string]any)
		if c["answered"] == true && int(c["turn"].(float64)) == turn {
			return c["id"].(string)
		}
	}
	require.FailNow(t, "no checkpoint of the turn", "turn %d in %v", turn, list)
	return ""
}

// TestE2ECheckpointAPI is issue 34's explicit API through the HTTP
// adapter with the real CLI, on both policies: a client sandbox's
// checkpoints are listed, forked twice at once from turn 1's (each fork
// finds turn 1's files, the original keeps its own) and restored; a chat
// is forked into a new chat whose first request (with the history up to
// the fork) finds the fork's files; another user sees none of it.
func TestE2ECheckpointAPI(t *testing.T) {
	for name, idle := range map[string]time.Duration{"request policy": 0, "session policy": 10 * time.Minute} {
		t.Run(name, func(t *testing.T) {
			checkpointAPI(t, newCheckpointE2E(t, idle))
		})
	}
}

// checkpointAPI is TestE2ECheckpointAPI on env.
func checkpointAPI(t *testing.T, env *checkpointE2E) {
	code, sb := env.call(t, env.user, http.MethodPost, "/v1/sandboxes", `{"model": "coder", "id": "sb"}`)
	require.Equal(t, http.StatusCreated, code, "%v", sb)
	env.askIn(t, "sb", turn1)
	env.askIn(t, "sb", turn2)
	turn1ID := env.checkpointOfTurn(t, "/v1/sandboxes/sb/checkpoints", 1)

	code, forks := env.call(t, env.user, http.MethodPost, "/v1/sandboxes/sb/fork",
		`{"checkpoint": "`+turn1ID+`", "count": 2, "id": "fk", "tags": {"from": "sb"}}`)
	require.Equal(t, http.StatusCreated, code, "%v", forks)
	require.Len(t, forks["data"], 2)
	for _, id := range []string{"fk", "fk-2"} {
		got := env.askIn(t, id, turn3)
		assert.Contains(t, got, "v1", "fork %s starts from turn 1's a.txt", id)
		assert.Contains(t, got, "No such file", "and without turn 2's b.txt")
	}
	orig := env.askIn(t, "sb", turn3)
	assert.Contains(t, orig, "v2", "the forked sandbox keeps its own files")
	assert.NotContains(t, orig, "No such file")

	code, res := env.call(t, env.user, http.MethodPost, "/v1/sandboxes/sb/checkpoints/"+turn1ID+"/restore", "")
	require.Equal(t, http.StatusOK, code, "%v", res)
	back := env.askIn(t, "sb", turn3)
	assert.Contains(t, back, "v1", "restored to turn 1's a.txt")
	assert.Contains(t, back, "No such file", "and turn 2's b.txt is gone")

	// A chat forked at its turn 1 into a new chat.
	a1 := env.ask(t, "c", turn1)
	a2 := env.ask(t, "c", turn1, a1, turn2)
	chatTurn1 := env.checkpointOfTurn(t, "/v1/chats/c/checkpoints", 1)
	code, ck := env.call(t, env.user, http.MethodPost, "/v1/chats/c/fork", `{"chat": "c2", "checkpoint": "`+chatTurn1+`"}`)
	require.Equal(t, http.StatusCreated, code, "%v", ck)
	got := env.ask(t, "c2", turn1, a1, turn3)
	assert.Contains(t, got, "v1", "the forked chat finds turn 1's a.txt")
	assert.Contains(t, got, "No such file", "and no b.txt")
	assert.NotContains(t, env.logs.String(), "checkpoint is gone", "a fork's first request is not a missing checkpoint")
	again := env.ask(t, "c", turn1, a1, turn2, a2, turn3)
	assert.Contains(t, again, "v2", "the forked chat keeps its own files")

	// Another user sees none of alice's.
	code, list := env.call(t, "bob", http.MethodGet, "/v1/chats/c/checkpoints", "")
	require.Equal(t, http.StatusOK, code, "%v", list)
	assert.Empty(t, list["data"], "bob's chat c is not alice's")
	code, e := env.call(t, "bob", http.MethodGet, "/v1/sandboxes/sb/checkpoints", "")
	assert.Equal(t, http.StatusNotFound, code, "%v", e)
	code, e = env.call(t, "bob", http.MethodPost, "/v1/sandboxes/sb/fork", `{}`)
	assert.Equal(t, http.StatusNotFound, code, "%v", e)
	code, e = env.call(t, "bob", http.MethodPost, "/v1/chats/c/checkpoints/"+chatTurn1+"/restore", "")
	assert.Equal(t, http.StatusNotFound, code, "bob cannot restore alice's checkpoint into his chat: %v", e)
}

// TestE2ECheckpointsKubernetes is issue 34's main case and its explicit
// API on pods (CI's cluster): the workspace follows the conversation on
// the request policy and on the session policy (the chat's pod kept), and
// a client sandbox's and a chat's checkpoints are listed, forked and
// restored, each take, restore and fork a checkpoint pod over the chat's
// claims, a new chat's start none.
func TestE2ECheckpointsKubernetes(t *testing.T) {
	kc := testenv.RequireCluster(t)
	img := testenv.RequireImage(t)
	onPods := func(t *testing.T, idle time.Duration) *checkpointE2E {
		// The cluster's claims outlive the test: a user of its own.
		user := "alice-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		env := newCheckpointE2EOn(t, t.TempDir(), idle, func(ctx context.Context, log hclog.Logger) (executor.Executor, error) {
			return kubernetes.New(ctx, kubernetes.Options{Kubeconfig: kc, Image: img, ImagePullPolicy: "Never", StorageClass: "agentbox-local",
				Logger: log, ReconcileInterval: -1, RetentionInterval: -1})
		})
		env.user = user
		return env
	}
	t.Run("workspace follows/request policy", func(t *testing.T) { workspaceFollows(t, onPods(t, 0), 0) })
	t.Run("workspace follows/session policy", func(t *testing.T) { workspaceFollows(t, onPods(t, 10*time.Minute), 10*time.Minute) })
	t.Run("api/request policy", func(t *testing.T) { checkpointAPI(t, onPods(t, 0)) })
}
