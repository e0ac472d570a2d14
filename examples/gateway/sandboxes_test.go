package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// sandboxCall sends one call of the sandbox API as user and decodes the
// JSON answer.
func sandboxCall(t *testing.T, method, url, user string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("X-Agentbox-User", user)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

// sandboxContainers lists the running containers of user's client sandbox
// id in data's executor.
func sandboxContainers(t *testing.T, data, user, id string) []string {
	t.Helper()
	var out []string
	for _, c := range managedContainers(t, data) {
		b, err := execOutput("docker", "inspect", "-f", `{{index .Config.Labels "`+docker.LabelUser+`"}}/{{index .Config.Labels "`+docker.LabelChat+`"}}`, c)
		if err != nil {
			continue // removed meanwhile
		}
		if strings.TrimSpace(b) == user+"/_sbx."+id {
			out = append(out, c)
		}
	}
	return out
}

// TestClientSandboxes drives the client sandbox API (seed 004) through
// real HTTP clients against the real CLI in real containers: create with a
// chosen id and pre-warm, list with tags, two chats in turn in the one
// sandbox (one workspace, one container, lifecycle events in the stream
// that the official SDK passes by), heartbeat, another user's 404s, TTL
// expiry without heartbeat (container gone, workspace kept, a request
// starts it again), delete.
func TestClientSandboxes(t *testing.T) {
	g, data := startGateway(t)
	ctx := context.Background()
	api := g.URL + "/v1/sandboxes"

	code, sb := sandboxCall(t, http.MethodPost, api, "alice", map[string]any{
		"id": "dev1", "model": demoAssistant, "ttl_seconds": 60, "tags": map[string]string{"thread": "t1", "created_by": "test"}, "prewarm": true})
	require.Equal(t, http.StatusCreated, code, "%v", sb)
	assert.Equal(t, "dev1", sb["id"])
	assert.Equal(t, "warm", sb["state"], "pre-warmed: its container is up before the first message")
	warm := sandboxContainers(t, data, "alice", "dev1")
	require.Len(t, warm, 1)

	code, dup := sandboxCall(t, http.MethodPost, api, "alice", map[string]any{"id": "dev1", "model": demoAssistant})
	assert.Equal(t, http.StatusConflict, code)
	assert.Equal(t, "sandbox_exists", dup["error"].(map[string]any)["code"])
	code, bad := sandboxCall(t, http.MethodPost, api, "alice", map[string]any{"id": "x", "model": "qa"})
	assert.Equal(t, http.StatusBadRequest, code, "qa has no sandbox: %v", bad)
	code, _ = sandboxCall(t, http.MethodPost, api, "alice", map[string]any{"id": "../x", "model": demoAssistant})
	assert.Equal(t, http.StatusBadRequest, code)
	code, _ = sandboxCall(t, http.MethodPost, api, "alice", map[string]any{"model": demoAssistant, "ttl_seconds": -1})
	assert.Equal(t, http.StatusBadRequest, code)

	code, list := sandboxCall(t, http.MethodGet, api+"?tag=thread=t1", "alice", nil)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, list["data"], 1)
	got := list["data"].([]any)[0].(map[string]any)
	assert.Equal(t, map[string]any{"thread": "t1", "created_by": "test"}, got["tags"])
	code, list = sandboxCall(t, http.MethodGet, api+"?tag=thread=other", "alice", nil)
	require.Equal(t, http.StatusOK, code)
	assert.Empty(t, list["data"])

	// Another user sees nothing of it.
	code, list = sandboxCall(t, http.MethodGet, api, "bob", nil)
	require.Equal(t, http.StatusOK, code)
	assert.Empty(t, list["data"])
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		code, e := sandboxCall(t, m, api+"/dev1", "bob", nil)
		assert.Equal(t, http.StatusNotFound, code, m)
		assert.Equal(t, "sandbox_not_found", e["error"].(map[string]any)["code"])
	}
	code, _ = sandboxCall(t, http.MethodPost, api+"/dev1/heartbeat", "bob", nil)
	assert.Equal(t, http.StatusNotFound, code)
	_, err := chatRequest(ctx, newClient(g.URL, "bob", "b1", option.WithHeader("X-Agentbox-Sandbox", "dev1")), "b1", demoPrompt, func(extension, string) {})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "404")

	// Two chats in turn in the sandbox, through the official SDK.
	var events []extension
	on := func(ext extension, _ string) {
		if ext.Kind == "sandbox" && ext.Sandbox != nil {
			events = append(events, ext)
		}
	}
	first, err := chatRequest(ctx, newClient(g.URL, "alice", "c1", option.WithHeader("X-Agentbox-Sandbox", "dev1")), "c1", demoPrompt, on)
	require.NoError(t, err, "the SDK passes the lifecycle events by")
	assert.NotEmpty(t, first.Content)
	require.NoError(t, g.orch.Settle(ctx))
	assert.Equal(t, warm, sandboxContainers(t, data, "alice", "dev1"), "the first request ran in the pre-warmed container, which is kept")
	kinds := map[string]extension{}
	for _, ev := range events {
		kinds[ev.Text] = ev
	}
	require.Contains(t, kinds, "connected")
	assert.Equal(t, "dev1", kinds["connected"].Sandbox.ID)
	require.Contains(t, kinds, "file_written")
	assert.True(t, strings.HasSuffix(kinds["file_written"].Sandbox.Path, scriptedapi.DemoFile), kinds["file_written"].Sandbox.Path)
	require.Contains(t, kinds, "exec")
	assert.Contains(t, kinds["exec"].Sandbox.Command, scriptedapi.DemoFile)
	require.NotNil(t, kinds["exec"].Sandbox.ExitCode)
	assert.Equal(t, 0, *kinds["exec"].Sandbox.ExitCode)

	_, err = chatRequest(ctx, newClient(g.URL, "alice", "c2", option.WithHeader("X-Agentbox-Sandbox", "dev1")), "c2", demoPrompt, func(extension, string) {})
	require.NoError(t, err)
	require.NoError(t, g.orch.Settle(ctx))
	assert.Equal(t, warm, sandboxContainers(t, data, "alice", "dev1"), "the second chat ran in the same container")
	ws, err := os.ReadDir(filepath.Join(data, executor.WorkspacesDir))
	require.NoError(t, err)
	assert.Len(t, ws, 1, "both chats used the sandbox's one workspace")

	// The body field works as the header does; a mismatch is refused.
	status, body := rawChat(t, g.URL, "alice", "c3", "hi", map[string]string{"X-Agentbox-Sandbox": "other"}, `"sandbox": "dev1"`)
	assert.Equal(t, http.StatusBadRequest, status, body)
	status, body = rawChat(t, g.URL, "alice", "_sbx.dev1", "hi", nil, "")
	assert.Equal(t, http.StatusBadRequest, status, "the sandbox's workspace key is no chat id: %s", body)

	// Heartbeat extends it.
	_, before := sandboxCall(t, http.MethodGet, api+"/dev1", "alice", nil)
	time.Sleep(1100 * time.Millisecond)
	code, after := sandboxCall(t, http.MethodPost, api+"/dev1/heartbeat", "alice", nil)
	require.Equal(t, http.StatusOK, code)
	assert.Greater(t, after["expires_at"].(float64), before["expires_at"].(float64))
	assert.Equal(t, "warm", after["state"])

	// Without a heartbeat, a short sandbox stops: its container goes, its
	// workspace stays, and a request starts it again.
	code, short := sandboxCall(t, http.MethodPost, api, "alice", map[string]any{"id": "short", "model": demoAssistant, "ttl_seconds": 2, "prewarm": true})
	require.Equal(t, http.StatusCreated, code, "%v", short)
	// Warm: its container was started and kept. (Counting containers
	// here would race the 2 s TTL on a loaded machine.)
	require.Equal(t, "warm", short["state"], "%v", short)
	require.Eventually(t, func() bool {
		_, s := sandboxCall(t, http.MethodGet, api+"/short", "alice", nil)
		return s["state"] == "stopped"
	}, time.Minute, 200*time.Millisecond, "the ttl passes without a heartbeat")
	// The stop is recorded first, then the container is removed under the
	// sandbox's lease (a request arriving meanwhile waits for it).
	require.Eventually(t, func() bool { return len(sandboxContainers(t, data, "alice", "short")) == 0 },
		time.Minute, 200*time.Millisecond, "a stopped sandbox has no container")
	ws, err = os.ReadDir(filepath.Join(data, executor.WorkspacesDir))
	require.NoError(t, err)
	assert.Len(t, ws, 2, "its workspace is kept")
	_, err = chatRequest(ctx, newClient(g.URL, "alice", "c4", option.WithHeader("X-Agentbox-Sandbox", "short")), "c4", demoPrompt, func(extension, string) {})
	require.NoError(t, err, "a request starts a stopped sandbox again")

	// Delete: gone for its owner, its container removed.
	code, del := sandboxCall(t, http.MethodDelete, api+"/dev1", "alice", nil)
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, true, del["deleted"])
	code, _ = sandboxCall(t, http.MethodGet, api+"/dev1", "alice", nil)
	assert.Equal(t, http.StatusNotFound, code)
	require.NoError(t, g.orch.Settle(ctx))
	assert.Empty(t, sandboxContainers(t, data, "alice", "dev1"))
	_, err = chatRequest(ctx, newClient(g.URL, "alice", "c1", option.WithHeader("X-Agentbox-Sandbox", "dev1")), "c1", demoPrompt, func(extension, string) {})
	require.Error(t, err, "a deleted sandbox cannot be named")
}

// rawChat posts a non-streamed chat completion of prompt with extra
// headers and body fields and returns the status and body.
func rawChat(t testing.TB, url, user, chat, prompt string, headers map[string]string, extra string) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"model": %q, "messages": [{"role": "user", "content": %q}]`, demoAssistant, prompt)
	if extra != "" {
		body += ", " + extra
	}
	body += "}"
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-Agentbox-User", user)
	req.Header.Set("X-Agentbox-Chat", chat)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// execOutput runs a command and returns its stdout.
func execOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	return string(out), err
}

// TestClientSandboxesSurviveARestart: a gateway restarted on the same
// data directory lists the client's sandbox and runs its next request in
// it (the kept container does not survive; the workspace does).
func TestClientSandboxesSurviveARestart(t *testing.T) {
	data := t.TempDir()
	onData := func(o *Options) { o.DataDir = data }
	g1, _ := startGateway(t, onData)
	code, sb := sandboxCall(t, http.MethodPost, g1.URL+"/v1/sandboxes", "alice", map[string]any{"id": "keep", "model": demoAssistant, "tags": map[string]string{"thread": "t9"}})
	require.Equal(t, http.StatusCreated, code, "%v", sb)
	_, err := chatRequest(context.Background(), newClient(g1.URL, "alice", "r1", option.WithHeader("X-Agentbox-Sandbox", "keep")), "r1", demoPrompt, func(extension, string) {})
	require.NoError(t, err)
	require.NoError(t, g1.Close())

	g2, _ := startGateway(t, onData)
	code, list := sandboxCall(t, http.MethodGet, g2.URL+"/v1/sandboxes?tag=thread=t9", "alice", nil)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, list["data"], 1, "the restarted gateway knows the sandbox")
	got := list["data"].([]any)[0].(map[string]any)
	assert.Equal(t, "keep", got["id"])
	assert.Equal(t, "idle", got["state"], "its kept container went with the old gateway")
	_, err = chatRequest(context.Background(), newClient(g2.URL, "alice", "r2", option.WithHeader("X-Agentbox-Sandbox", "keep")), "r2", demoPrompt, func(extension, string) {})
	require.NoError(t, err, "and runs the next request in it")
	ws, err := os.ReadDir(filepath.Join(data, executor.WorkspacesDir))
	require.NoError(t, err)
	assert.Len(t, ws, 1, "in the same workspace")
	code, _ = sandboxCall(t, http.MethodGet, g2.URL+"/v1/sandboxes/keep", "bob", nil)
	assert.Equal(t, http.StatusNotFound, code)
}

// TestPrewarmedCoderHasItsCLIWaiting is the README's claim about prewarm
// for the example's own coder, which has a gateway tool (whoami): a client
// sandbox created with "prewarm" has its container up and the CLI for a new
// session waiting in it, its tool session open without a chat; the first
// request of a chat adopts that CLI (and binds the tool session to the
// chat) and only writes its message. The times to the first model request
// of that request and of a warm session turn (the same chat's next turn,
// in the kept container) are logged side by side.
func TestPrewarmedCoderHasItsCLIWaiting(t *testing.T) {
	logs := &testenv.SyncBuffer{}
	g, data := startGateway(t, func(o *Options) {
		o.Logger = hclog.New(&hclog.LoggerOptions{Name: "gateway", Level: hclog.Debug, Output: logs})
	})
	ctx := context.Background()
	code, sb := sandboxCall(t, http.MethodPost, g.URL+"/v1/sandboxes", "alice", map[string]any{"id": "pw", "model": demoAssistant, "prewarm": true})
	require.Equal(t, http.StatusCreated, code, "%v", sb)
	ids := sandboxContainers(t, data, "alice", "pw")
	require.Len(t, ids, 1, "the container is up before the first message")
	require.Contains(t, logs.String(), "pre_started=true", "the pre-warmed coder has its CLI started, gateway tool and all")
	var top []byte
	require.Eventually(t, func() bool {
		var err error
		top, err = exec.Command("docker", "top", ids[0], "-eo", "pid,args").CombinedOutput()
		return err == nil && strings.Contains(string(top), "--session-id")
	}, time.Minute, 100*time.Millisecond, "the CLI waits in the container: %s", top)

	// A user types before sending: the CLI boots and warms up meanwhile.
	warmedUp := func(n int) {
		require.Eventually(t, func() bool { return strings.Count(logs.String(), "the pre-started CLI is warmed up") >= n }, time.Minute,
			50*time.Millisecond, "pre-started CLI %d warms up", n)
	}
	warmedUp(1)
	client := newClient(g.URL, "alice", "p1", option.WithHeader("X-Agentbox-Sandbox", "pw"))
	// ask sends the conversation and returns the answer and the time from
	// the request to its first model request.
	ask := func(msgs ...string) (string, time.Duration) {
		before := len(g.Model.Requests())
		p := sdk.ChatCompletionNewParams{Model: demoAssistant}
		for i, m := range msgs {
			if i%2 == 0 {
				p.Messages = append(p.Messages, sdk.UserMessage(m))
			} else {
				p.Messages = append(p.Messages, sdk.AssistantMessage(m))
			}
		}
		t0 := time.Now()
		comp, err := client.Chat.Completions.New(ctx, p)
		require.NoError(t, err)
		reqs := g.Model.Requests()[before:]
		require.NotEmpty(t, reqs, "the turn reached the model")
		return comp.Choices[0].Message.Content, reqs[0].At.Sub(t0)
	}
	answer, adopted := ask(demoPrompt)
	assert.Contains(t, logs.String(), "the pre-started CLI takes the turn's message", "the first request adopted the waiting CLI")
	require.NoError(t, g.orch.Settle(ctx))
	require.Eventually(t, func() bool { return strings.Count(logs.String(), "pre_started=true") >= 2 }, time.Minute, 100*time.Millisecond,
		"the next turn's CLI is started after the first")
	warmedUp(2)
	_, warm := ask(demoPrompt, answer, "Show it once more.")
	assert.Equal(t, 2, strings.Count(logs.String(), "the pre-started CLI takes the turn's message"), "the warm turn used its pre-started CLI too")
	assert.Equal(t, ids, sandboxContainers(t, data, "alice", "pw"), "both turns ran in the pre-warmed container")
	t.Logf("first model request: pre-warmed sandbox's first request %v, warm session turn %v", adopted.Round(time.Millisecond), warm.Round(time.Millisecond))
}
