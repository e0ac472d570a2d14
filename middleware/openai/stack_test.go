package openai_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/hooks"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/internal/scripted"
	"github.com/agentbox/agentbox/middleware/openai"
)

// stack is the whole request path a gateway builds: the adapter over the
// Orchestrator over executortest's fake sandboxes, with the scripted agent
// standing in for the CLI (it plays the script of the chat).
type stack struct {
	srv      *httptest.Server
	o        *middleware.Orchestrator
	ex       *executortest.FakeExecutor
	requests atomic.Int64

	mu      sync.Mutex
	scripts map[string]scripted.Script       // by chat id
	execs   map[string]executortest.ExecFunc // by chat id, before scripts
}

// agentRun is the conversation most tests use: tool activity, thinking and
// text long enough to be split across chunks.
func agentRun() (scripted.Script, string) {
	long := strings.Repeat("All work and no play makes Jack a dull boy. ", 2000) // ~88 KiB
	texts := []string{"I wrote ", "`hello.txt`", ".\n\n", long, "Done ✓"}
	s := scripted.Text(executor.Usage{InputTokens: 120, OutputTokens: 40, CacheCreationInputTokens: 1000, CacheReadInputTokens: 5000}, texts...)
	pre := []scripted.Line{
		{Event: &executor.Event{Kind: executor.EventInit, Init: &executor.InitInfo{Model: "claude-test", Tools: []string{"Write", "Bash"}}}},
		{Event: &executor.Event{Kind: executor.EventThinking, Text: "Write the file, then check it."}},
		{Event: &executor.Event{Kind: executor.EventToolUse, Tool: &executor.ToolUse{ID: "toolu_1", Name: "Write", Input: []byte(`{"file_path":"hello.txt","content":"hi"}`)}}},
		{Event: &executor.Event{Kind: executor.EventToolResult, ToolResult: &executor.ToolResult{ToolUseID: "toolu_1", Content: "File created"}}},
	}
	s.Lines = append(pre, s.Lines...)
	return s, strings.Join(texts, "")
}

type stackOption func(*middleware.Assistant, *middleware.Options)

func newStack(t testing.TB, opts ...stackOption) *stack {
	t.Helper()
	st := &stack{scripts: map[string]scripted.Script{}, execs: map[string]executortest.ExecFunc{}}
	st.ex = executortest.NewExecutor(t)
	st.ex.OnCreate = func(sb *executortest.FakeSandbox) {
		sb.ExecFunc = st.exec(sb.Spec().ChatID)
	}
	coder := &middleware.Assistant{ID: "coder", Name: "Coder", Sandbox: &middleware.Sandbox{
		Runner: "scripted",
		Spec:   executor.Spec{Image: "agentbox/sandbox-claude:latest", Timeout: time.Minute},
	}}
	mo := middleware.Options{
		NewExecutor: func(context.Context, hclog.Logger) (executor.Executor, error) { return st.ex, nil },
		Runners:     []executor.Runner{&scripted.Runner{}},
	}
	for _, opt := range opts {
		opt(coder, &mo)
	}
	cat, err := middleware.NewCatalog(coder, &middleware.Assistant{ID: "qa"})
	require.NoError(t, err)
	mo.Catalog = cat
	st.o, err = middleware.New(context.Background(), mo)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.o.Close() })
	s, err := openai.New(openai.Options{Handler: middleware.Chain(middleware.UnknownAssistant, st.o.Wrap), Catalog: cat, Logger: mo.Logger})
	require.NoError(t, err)
	st.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st.requests.Add(1)
		s.ServeHTTP(w, r)
	}))
	t.Cleanup(st.srv.Close)
	return st
}

func withStackHooks(h hooks.Hooks) stackOption {
	return func(a *middleware.Assistant, _ *middleware.Options) { a.Hooks = h }
}

func (st *stack) setScript(chat string, s scripted.Script) {
	st.mu.Lock()
	st.scripts[chat] = s
	st.mu.Unlock()
}

func (st *stack) setExec(chat string, f executortest.ExecFunc) {
	st.mu.Lock()
	st.execs[chat] = f
	st.mu.Unlock()
}

func (st *stack) exec(chat string) executortest.ExecFunc {
	st.mu.Lock()
	defer st.mu.Unlock()
	if f := st.execs[chat]; f != nil {
		return f
	}
	return st.scripts[chat].Exec
}

// withRunner makes the sandboxed assistant use r, with a model route (the
// real runners need one).
func withRunner(r executor.Runner) stackOption {
	return func(a *middleware.Assistant, o *middleware.Options) {
		a.Sandbox.Runner = r.Name()
		o.Runners = append(o.Runners, r)
		o.NewModelRouter = func(context.Context, hclog.Logger) (middleware.ModelRouter, error) { return metered, nil }
	}
}

// metered is the usage every route of withRunner reports.
var metered = route{usage: executor.Usage{InputTokens: 7, OutputTokens: 3}}

// route is a ModelRouter whose routes point at a fixed address and meter
// a fixed usage.
type route struct {
	scripted.NoPreStart
	usage executor.Usage
}

func (r route) Open(context.Context, executor.Sandbox, *middleware.Assistant) (middleware.ModelRoute, error) {
	return r, nil
}
func (route) BaseURL() string         { return "http://127.0.0.1:7000" }
func (route) Token() string           { return "per-request-token" }
func (r route) Usage() executor.Usage { return r.usage }
func (route) Close() error            { return nil }

// TestOneLinePerCanceledRequest: a request whose client goes away mid-run
// makes one INFO line (the middleware's "sandboxed request canceled"); the
// adapter's own record of it is at DEBUG. A request the adapter refuses
// itself, which the middleware never sees, still gets its INFO line.
func TestOneLinePerCanceledRequest(t *testing.T) {
	var logs testenv.SyncBuffer
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &logs})
	st := newStack(t, func(_ *middleware.Assistant, o *middleware.Options) { o.Logger = log })
	startup := len(logs.String()) // the stack's own start-up lines are not the request's
	started := make(chan struct{})
	st.setExec("c1", func(ctx context.Context, _ *executor.Cmd) (executor.ExecResult, error) {
		close(started)
		<-ctx.Done()
		return executor.ExecResult{}, ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, st.srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"coder","messages":[{"role":"user","content":"hi"}],"user":"alice:c1"}`))
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
		}
	}()
	<-started
	cancel()
	<-done
	require.NoError(t, st.o.Settle(context.Background()))
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "sandboxed request canceled") }, 30*time.Second, 10*time.Millisecond)
	assert.Equal(t, 1, strings.Count(logs.String()[startup:], "[INFO]"), "one INFO line for the request:\n%s", logs.String())
	assert.NotContains(t, logs.String(), "chat completion failed")

	resp, err := http.Post(st.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"coder"} x`))
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Equal(t, 1, strings.Count(logs.String(), "chat completion failed"), "a refusal the middleware never saw is logged by the adapter")
}
