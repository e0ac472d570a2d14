package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
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
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/openai"
)

// startGateway runs the example gateway over examples/ offline (the
// scripted model server answers), with the real image, Docker and the
// helper built from this checkout.
func startGateway(t testing.TB, opts ...func(*Options)) (*Gateway, string) {
	t.Helper()
	img := testenv.RequireImage(t)
	require.Equal(t, "agentbox/sandbox-claude:latest", img, "examples/assistants/coder names this image")
	data := t.TempDir()
	o := Options{
		Dir: "..", Addr: "127.0.0.1:0", DataDir: data, HelperBinary: testenv.HelperBinary(t), Offline: "always",
		Logger: hclog.New(&hclog.LoggerOptions{Name: "gateway", Level: hclog.Warn, Output: testWriter{t}}),
	}
	for _, f := range opts {
		f(&o)
	}
	g, err := Start(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, g.Close()) })
	require.NotNil(t, g.Model, "offline: the scripted model server answers")
	// The environment snapshots taken at start-up run a container each;
	// the tests count containers from a quiet start.
	require.NoError(t, g.orch.Settle(context.Background()))
	return g, data
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// managedContainers lists the containers of data dir's executor.
func managedContainers(t *testing.T, data string) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+docker.LabelDataDir+"="+data).Output()
	require.NoError(t, err)
	return strings.Fields(string(out))
}

// TestDemo runs the main job as `make demo` does: one streamed sandboxed
// request to each sandboxed assistant (coder on Claude Code, codex on the
// Codex CLI), whose agent writes a file, which is then on the host.
func TestDemo(t *testing.T) {
	testenv.RequireImage(t)
	testenv.RequireCodexImage(t)
	data := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"-demo", "-dir", "..", "-data", data, "-offline", "always", "-helper", testenv.HelperBinary(t)}, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	require.Equal(t, 0, code)
	assert.Contains(t, stderr.String(), "OFFLINE DEMO", "the log says loudly that the model is scripted")
	assert.Contains(t, stderr.String(), "workspace quota: watchdog", "the log says which quota mode is in force")
	assert.Contains(t, stderr.String(), "no file past max_disk", "and its bound")
	files, err := filepath.Glob(filepath.Join(data, executor.WorkspacesDir, "*", scriptedapi.DemoFile))
	require.NoError(t, err)
	require.Len(t, files, 2, "each agent's file is in its chat's workspace")
	for _, f := range files {
		got, err := os.ReadFile(f)
		require.NoError(t, err)
		assert.Equal(t, scriptedapi.DemoContent, string(got))
	}
	assert.Contains(t, stdout.String(), "model=coder")
	assert.Contains(t, stdout.String(), "model=codex", "the Codex assistant answered too")
	assert.Equal(t, 2, strings.Count(stdout.String(), "Done. `cat hello.txt` printed: hello from the sandbox"))
	assert.Contains(t, stdout.String(), "[tool] Write")
	assert.Contains(t, stdout.String(), "[tool] Bash")
	assert.Contains(t, stdout.String(), "[hook replace text]", "the Create hook's UI message reached the client")
	assert.Contains(t, stdout.String(), "finish_reason: stop")
	assert.Empty(t, managedContainers(t, data), "no container left")
}

// TestStreamedEqualsNonStreamed: the official Go SDK gets the same
// content streamed and not, and the usage in the stream's final chunk.
func TestStreamedEqualsNonStreamed(t *testing.T) {
	g, data := startGateway(t)
	ctx := context.Background()
	var chunks []sdk.ChatCompletionChunk
	streamed, err := demoRequest(ctx, g.URL, "streamed", demoPrompt, func(extension, string) {})
	require.NoError(t, err)
	sc := newClient(g.URL, demoUser, "streamed-again")
	s := sc.Chat.Completions.NewStreaming(ctx, sdk.ChatCompletionNewParams{
		Model: demoAssistant, Messages: []sdk.ChatCompletionMessageParamUnion{sdk.UserMessage(demoPrompt)},
		StreamOptions: sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)},
	})
	for s.Next() {
		chunks = append(chunks, s.Current())
	}
	require.NoError(t, s.Err())
	require.NoError(t, s.Close())
	require.NotEmpty(t, chunks)
	last := chunks[len(chunks)-1]
	assert.True(t, last.JSON.Usage.Valid(), "usage arrives in the final chunk")
	assert.Positive(t, last.Usage.TotalTokens)
	for _, c := range chunks[:len(chunks)-1] {
		assert.False(t, c.JSON.Usage.Valid() && c.Usage.TotalTokens > 0, "usage only in the final chunk")
	}

	pc := newClient(g.URL, demoUser, "plain")
	plain, err := pc.Chat.Completions.New(ctx, sdk.ChatCompletionNewParams{
		Model: demoAssistant, Messages: []sdk.ChatCompletionMessageParamUnion{sdk.UserMessage(demoPrompt)},
	})
	require.NoError(t, err)
	require.Len(t, plain.Choices, 1)
	assert.NotEmpty(t, streamed.Content)
	assert.Equal(t, plain.Choices[0].Message.Content, streamed.Content, "streamed text == non-streamed content")
	assert.Equal(t, "stop", plain.Choices[0].FinishReason)
	assert.Equal(t, plain.Usage.PromptTokens, streamed.Usage.PromptTokens)
	assert.Equal(t, plain.Usage.CompletionTokens, streamed.Usage.CompletionTokens)
	assert.Equal(t, last.Usage.TotalTokens, streamed.Usage.TotalTokens)
	require.NoError(t, g.orch.Settle(ctx), "the teardowns after the responses end")
	assert.Empty(t, managedContainers(t, data))
}

// TestPlainAssistantPassesThrough: qa has no sandbox block; its request
// goes through the gateway's own reverse proxy (upstream) to the
// connector's OpenAI-compatible endpoint as the client sent it, after the
// assistant's prompts, with the connector's model and key and none of the
// client's headers; the connector's answer and usage come back unchanged.
func TestPlainAssistantPassesThrough(t *testing.T) {
	g, data := startGateway(t)
	require.NotNil(t, g.PlainModel)
	before := len(g.PlainModel.Requests())
	msgs := []sdk.ChatCompletionMessageParamUnion{
		sdk.SystemMessage("Be terse."),
		sdk.UserMessage("What is 2+2?"),
		sdk.AssistantMessage("4."),
		sdk.UserMessage("And 3+3?"),
	}
	qc := newClient(g.URL, "alice", "qa-chat")
	resp, err := qc.Chat.Completions.New(context.Background(), sdk.ChatCompletionNewParams{
		Model: "qa", Messages: msgs, MaxTokens: sdk.Int(100), Temperature: sdk.Float(0.5),
	})
	require.NoError(t, err)
	reqs := g.PlainModel.Requests()
	require.Len(t, reqs, before+1, "one upstream call")
	up := reqs[len(reqs)-1]
	assert.Equal(t, "/v1/chat/completions", up.Path, "Anthropic's OpenAI-compatible endpoint")
	assert.Equal(t, "offline-demo-key", up.APIKey, "the connector's key, not the client's")
	assert.Empty(t, up.Header.Get("X-Agentbox-User"), "the client's headers stay at the gateway")
	assert.Equal(t, "claude-sonnet-4-5", up.Body.Model, "the connector's model")
	assert.Equal(t, int64(100), up.Body.MaxTokens)
	require.NotNil(t, up.Body.Temperature)
	assert.InDelta(t, 0.5, *up.Body.Temperature, 1e-9)
	var roles, texts []string
	for _, m := range up.Body.Messages {
		roles = append(roles, m.Role)
		texts = append(texts, m.Text())
	}
	assert.Equal(t, []string{"system", "system", "user", "assistant", "user"}, roles)
	assert.Equal(t, []string{"Answer briefly and precisely.", "Be terse.", "What is 2+2?", "4.", "And 3+3?"}, texts,
		"the assistant's prompt, then the client's conversation")
	assert.Empty(t, up.Body.Tools)

	require.Len(t, resp.Choices, 1)
	assert.Equal(t, `(scripted model) You said: "And 3+3?"`, resp.Choices[0].Message.Content)
	assert.Equal(t, "stop", resp.Choices[0].FinishReason)
	assert.Equal(t, int64(len(up.Raw)/4+1), resp.Usage.PromptTokens, "the connector's usage")
	assert.Equal(t, int64(12), resp.Usage.CompletionTokens)
	assert.Empty(t, managedContainers(t, data), "no sandbox for a plain assistant")
	ws, err := os.ReadDir(filepath.Join(data, executor.WorkspacesDir))
	if !errors.Is(err, os.ErrNotExist) {
		require.NoError(t, err)
	}
	assert.Empty(t, ws, "no workspace either")

	// Streamed, through the same proxy: the chunks and the usage the
	// connector sent.
	s := qc.Chat.Completions.NewStreaming(context.Background(), sdk.ChatCompletionNewParams{
		Model: "qa", Messages: msgs, StreamOptions: sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)},
	})
	var text strings.Builder
	var usage sdk.CompletionUsage
	for s.Next() {
		for _, c := range s.Current().Choices {
			text.WriteString(c.Delta.Content)
		}
		if s.Current().JSON.Usage.Valid() {
			usage = s.Current().Usage
		}
	}
	require.NoError(t, s.Err())
	assert.Equal(t, `(scripted model) You said: "And 3+3?"`, text.String())
	assert.Equal(t, int64(12), usage.CompletionTokens)
}

// TestPlainPathBadRequests: the plain path says what to fix, in OpenAI's
// error JSON, and sends nothing upstream.
func TestPlainPathBadRequests(t *testing.T) {
	g, _ := startGateway(t)
	before := len(g.PlainModel.Requests())
	for name, tc := range map[string]struct {
		body   string
		status int
		want   string
	}{
		"unknown model":       {`{"model":"nope","messages":[]}`, http.StatusNotFound, `the model \"nope\" does not exist`},
		"model not a string":  {`{"model":5,"messages":[]}`, http.StatusBadRequest, `\"model\" must be a string`},
		"messages not a list": {`{"model":"qa","messages":{}}`, http.StatusBadRequest, `\"messages\" must be a list`},
		"not JSON":            {`{"model":`, http.StatusBadRequest, "not a JSON object"},
	} {
		t.Run(name, func(t *testing.T) {
			// The plain path's own answer, and the gateway's: agentbox's
			// reading of the body refuses the bodies that are not strict
			// JSON before the plain path sees them, with the same status.
			plain := httptest.NewServer(newUpstream(g.Config.Assistants, hclog.NewNullLogger()))
			defer plain.Close()
			for _, url := range []string{plain.URL, g.URL} {
				resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(tc.body))
				require.NoError(t, err)
				b, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				assert.Equal(t, tc.status, resp.StatusCode, string(b))
				if url == plain.URL {
					assert.Contains(t, string(b), tc.want)
				}
				assert.Contains(t, string(b), `"error"`)
			}
		})
	}
	assert.Len(t, g.PlainModel.Requests(), before, "nothing went upstream")
}

// TestPlainPathNotFound: what neither agentbox nor the plain path serves
// is a 404 that says where assistants answer; another user's stored
// response reads as one that does not exist.
func TestPlainPathNotFound(t *testing.T) {
	g, _ := startGateway(t)
	message := func(body map[string]any) string {
		e, _ := body["error"].(map[string]any)
		m, _ := e["message"].(string)
		return m
	}
	status, body := sandboxCall(t, http.MethodGet, g.URL+"/v1/responses/resp_someone_elses", "mallory", nil)
	assert.Equal(t, http.StatusNotFound, status)
	assert.Contains(t, message(body), `there is no stored response "resp_someone_elses" for this user`)
	status, body = sandboxCall(t, http.MethodGet, g.URL+"/v1/embeddings", "mallory", nil)
	assert.Equal(t, http.StatusNotFound, status)
	assert.Contains(t, message(body), "no route for GET /v1/embeddings; plain assistants answer on POST /v1/chat/completions")
}

// interval is when a request's sandbox was up, as the client saw it.
type interval struct{ ready, closed time.Time }

// sandboxRun sends one streamed request and records when its sandbox
// became ready and when the response ended (the sandbox is removed after
// the response, and the chat's next run waits for that).
func sandboxRun(ctx context.Context, url, chat string) (interval, error) {
	var iv interval
	_, err := demoRequest(ctx, url, chat, demoPrompt, func(ext extension, _ string) {
		if ext.Kind == "sandbox" && ext.Text == "ready" {
			iv.ready = time.Now()
		}
	})
	iv.closed = time.Now()
	if err == nil && iv.ready.IsZero() {
		err = fmt.Errorf("chat %s: no ready sandbox event", chat)
	}
	return iv, err
}

// TestParallelRequests: 10 chats at once all complete; 5 requests on one
// chat all complete, one after another; goroutines and containers return
// to their baseline.
func TestParallelRequests(t *testing.T) {
	g, data := startGateway(t)
	ctx := context.Background()
	parallel := func(n int, chat func(i int) string) []interval {
		var wg sync.WaitGroup
		ivs := make([]interval, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				// A request that waited out the chat's lease gets 409 with
				// x-should-retry: true; a client sends it again, as this
				// one does (how many runs fit in the lease wait depends on
				// the machine's speed, which the test does not assume).
				for attempt := 0; ; attempt++ {
					ivs[i], errs[i] = sandboxRun(ctx, g.URL, chat(i))
					if errs[i] == nil || !strings.Contains(errs[i].Error(), "chat_busy") || attempt == 10 {
						return
					}
				}
			})
		}
		wg.Wait()
		for i, err := range errs {
			assert.NoError(t, err, "request %d", i)
		}
		return ivs
	}
	// Warm up with the same load, so that connection pools (Docker's,
	// the model proxy's) reach their steady size before the baseline.
	// Idle keep-alive connections of the test's own HTTP client are not
	// the gateway's; they are closed before each count.
	parallel(10, func(i int) string { return fmt.Sprintf("warmup-%d", i) })
	idle := http.DefaultTransport.(*http.Transport).CloseIdleConnections
	idle()
	time.Sleep(200 * time.Millisecond)
	baseGoroutines, baseConns := goroutines()

	start := time.Now()
	parallel(10, func(i int) string { return fmt.Sprintf("many-%d", i) })
	t.Logf("10 chats in parallel: %v", time.Since(start))

	start = time.Now()
	ivs := parallel(5, func(int) string { return "one" })
	t.Logf("5 requests on one chat: %v", time.Since(start))
	for i := range ivs {
		for j := range ivs {
			if i != j && ivs[i].ready.Before(ivs[j].ready) {
				assert.True(t, ivs[i].closed.Before(ivs[j].ready), "runs %d and %d on one chat overlap", i, j)
			}
		}
	}
	chats, err := filepath.Glob(filepath.Join(data, executor.WorkspacesDir, "*", scriptedapi.DemoFile))
	require.NoError(t, err)
	assert.Len(t, chats, 21, "10 warmup + 10 + 1 chat workspaces, each with the agent's file")

	require.NoError(t, g.orch.Settle(ctx), "the teardowns after the responses end")
	assert.Empty(t, managedContainers(t, data), "containers back to baseline")
	// A plain loop: assert.Eventually runs its condition on goroutines of
	// its own, which would count.
	after, conns := goroutines()
	for deadline := time.Now().Add(10 * time.Second); (after > baseGoroutines || conns > baseConns+keptConnGoroutines) && time.Now().Before(deadline); after, conns = goroutines() {
		idle()
		time.Sleep(50 * time.Millisecond)
	}
	assert.LessOrEqual(t, after, baseGoroutines, "goroutines back to baseline")
	assert.LessOrEqual(t, conns, baseConns+keptConnGoroutines, "no HTTP connection left busy")
	t.Logf("goroutines: baseline %d (+%d of HTTP connections), after %d (+%d)", baseGoroutines, baseConns, after, conns)
	if t.Failed() {
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Log(b.String())
	}
}

// TestNodeSDK: the openai npm package streams a sandboxed completion from
// the example gateway; the streamed text equals the non-streamed content
// and the usage arrives in the final chunk.
func TestNodeSDK(t *testing.T) {
	dir := testenv.NodePackage(t, "openai", filepath.Join("..", "..", "middleware", "openai", "testdata", "node"),
		filepath.Join("testdata", "gateway.mjs"))
	g, _ := startGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "gateway.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "BASE_URL="+g.URL+"/v1", "PROMPT="+demoPrompt)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node gateway.mjs: %s", stderr.String())
	var got struct {
		Content, Streamed, Finish, StreamFinish string
		UsageInLastChunk                        bool
		Usage, StreamUsage                      map[string]any
		Tools                                   []string
	}
	require.NoError(t, json.Unmarshal(out, &got), "%s", out)
	assert.NotEmpty(t, got.Content)
	assert.Equal(t, got.Content, got.Streamed, "streamed text == non-streamed content")
	assert.Equal(t, "stop", got.Finish)
	assert.Equal(t, "stop", got.StreamFinish)
	assert.True(t, got.UsageInLastChunk, "usage arrives in the final chunk")
	assert.Equal(t, got.Usage["prompt_tokens"], got.StreamUsage["prompt_tokens"])
	assert.Equal(t, got.Usage["completion_tokens"], got.StreamUsage["completion_tokens"])
	assert.Equal(t, []string{"Write", "Bash"}, got.Tools, "tool activity in the agentbox extension")
}

// TestPlainAssistantOpenAIUpstream: a plain assistant whose connector is
// OpenAI-compatible gets its answer from that API (here agentbox's own
// OpenAI adapter over a recording handler, a real chat completions
// server), streamed, with the upstream's usage.
func TestPlainAssistantOpenAIUpstream(t *testing.T) {
	testenv.RequireDocker(t)
	var mu sync.Mutex
	var got []*middleware.Request
	up, err := openai.New(openai.Options{Handler: middleware.HandlerFunc(func(_ context.Context, r *middleware.Request, emit middleware.Emit) (*middleware.Response, error) {
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
		for _, part := range []string{"Hello ", "from ", "upstream"} {
			if err := emit(executor.Event{Kind: executor.EventText, Text: part}); err != nil {
				return nil, err
			}
		}
		return &middleware.Response{Content: "Hello from upstream", FinishReason: executor.FinishStop,
			Usage: executor.Usage{InputTokens: 21, OutputTokens: 3}}, nil
	}), Authenticate: func(r *http.Request) (string, error) {
		if r.Header.Get("Authorization") != "Bearer sk-up" {
			return "", errors.New("wrong key")
		}
		return "connector-account", nil
	}})
	require.NoError(t, err)
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	write := func(rel, content string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, rel), []byte(content), 0o644))
	}
	write("connectors/up.conn.yao", `{"type": "openai", "options": {"host": "`+srv.URL+`/v1", "model": "up-model", "key": "$ENV.UP_KEY"}}`)
	write("assistants/chat/package.yao", `{"name": "Chat", "connector": "up"}`)
	write("assistants/chat/prompts.yml", "- role: system\n  content: Be kind.\n")
	g, err := Start(context.Background(), Options{Dir: dir, Addr: "127.0.0.1:0", DataDir: t.TempDir(), Offline: "never",
		LookupEnv: func(k string) (string, bool) { return map[string]string{"UP_KEY": "sk-up"}[k], k == "UP_KEY" },
		Logger:    hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, g.Close()) })
	assert.Nil(t, g.Model, "no scripted model: the key is set")

	c := newClient(g.URL, "bob", "c1")
	s := c.Chat.Completions.NewStreaming(context.Background(), sdk.ChatCompletionNewParams{
		Model: "chat", Messages: []sdk.ChatCompletionMessageParamUnion{sdk.UserMessage("hi")},
		StreamOptions: sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)},
	})
	var text strings.Builder
	var usage sdk.CompletionUsage
	for s.Next() {
		ch := s.Current()
		for _, c := range ch.Choices {
			text.WriteString(c.Delta.Content)
		}
		if ch.JSON.Usage.Valid() {
			usage = ch.Usage
		}
	}
	require.NoError(t, s.Err())
	assert.Equal(t, "Hello from upstream", text.String())
	assert.Equal(t, int64(21), usage.PromptTokens)
	assert.Equal(t, int64(3), usage.CompletionTokens)
	require.Len(t, got, 1)
	assert.Equal(t, "up-model", got[0].Model, "the connector's model")
	assert.Equal(t, "connector-account", got[0].UserID, "the connector's key authenticated the call")
	assert.Equal(t, []executor.Message{{Role: "system", Content: "Be kind."}, {Role: "user", Content: "hi"}}, got[0].Messages)

	// The connector gone: the client gets a 502 that names it.
	srv.Close()
	_, err = c.Chat.Completions.New(context.Background(), sdk.ChatCompletionNewParams{
		Model: "chat", Messages: []sdk.ChatCompletionMessageParamUnion{sdk.UserMessage("hi")},
	}, option.WithMaxRetries(0))
	var apiErr *sdk.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusBadGateway, apiErr.StatusCode)
	assert.Contains(t, apiErr.Message, "did not answer")
	assert.Contains(t, apiErr.Message, srv.URL)
}

// TestGatewayTool: the coder assistant's agent calls the gateway's own
// whoami tool (mcp.servers in package.yao, registered in tools.go); the
// handler answers for the requesting user and chat.
func TestGatewayTool(t *testing.T) {
	g, _ := startGateway(t)
	c := newClient(g.URL, "carol", "tool-chat")
	resp, err := c.Chat.Completions.New(context.Background(), sdk.ChatCompletionNewParams{
		Model: demoAssistant, Messages: []sdk.ChatCompletionMessageParamUnion{sdk.UserMessage("Who am I?")},
	})
	require.NoError(t, err)
	got := resp.Choices[0].Message.Content
	t.Logf("answer: %s", got)
	assert.Contains(t, got, "user: carol")
	assert.Contains(t, got, "chat: tool-chat")
	assert.Contains(t, got, "assistant: coder")
	reqs := g.Model.MessageRequests()
	require.NotEmpty(t, reqs)
	assert.Contains(t, reqs[0].ToolNames(), "mcp__gateway__whoami", "the CLI offered the gateway's tool")
}

// TestDemoKubernetes runs the demo with the sandboxes as pods of the
// offline test cluster (internal/k8s/test.sh sets AGENTBOX_KUBECONFIG):
// the real CLI in a pod, its model traffic and the gateway's MCP tool
// (whoami) relayed back through the port forward, the file read back
// through a new pod on the chat's claim. Nothing runs in Docker.
func TestDemoKubernetes(t *testing.T) {
	kc := testenv.RequireCluster(t)
	data := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"-demo", "-dir", "..", "-data", data, "-offline", "always",
		"-executor", "kubernetes", "-kubeconfig", kc, "-storage-class", "agentbox-local", "-image-pull-policy", "Never"}, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	require.Equal(t, 0, code)
	assert.Contains(t, stdout.String(), "[tool] Write")
	assert.Contains(t, stdout.String(), "[tool] Bash")
	assert.Contains(t, stdout.String(), "[hook replace text]", "the Create hook's UI message reached the client")
	assert.Contains(t, stdout.String(), "finish_reason: stop")
	assert.Contains(t, stdout.String(), scriptedapi.DemoFile+" (read through a new pod")
	assert.Contains(t, stdout.String(), scriptedapi.DemoContent)
	assert.Empty(t, managedContainers(t, data), "no Docker container")
	// The turns' checkpoints were taken in checkpoint pods of the
	// assistants' images (the gateway sets no executor-wide image).
	assert.NotContains(t, stderr.String(), "could not be checkpointed")
	assert.NotContains(t, stderr.String(), "checkpoints cannot be read")
}

// keptConnGoroutines is how many goroutines the idle connections an HTTP
// transport keeps may add between two counts: the Docker client's
// transport keeps up to two per host (http.DefaultMaxIdleConnsPerHost),
// each with a read and a write loop, and how many it holds after a burst
// of parallel requests depends on how they interleaved.
const keptConnGoroutines = 2 * http.DefaultMaxIdleConnsPerHost

// goroutines counts this process's goroutines: those of HTTP client
// connections (net/http's persistConn loops) apart, since a transport
// keeps some open by design, and the rest.
func goroutines() (other, conns int) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "net/http.(*persistConn)") {
			conns++
		} else {
			other++
		}
	}
	return other, conns
}
