package middleware_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/claude"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/internal/testkit/scriptedapi"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/modelroute"
	"github.com/agentbox/agentbox/services/mcphost"
)

// toolsE2E is the whole path of a gateway tool: the real Claude Code CLI
// in a real container calls mcp__orders__lookup through the helper's MCP
// relay, then runs abx from Bash; both reach the Go handler on the host.
type toolsE2E struct {
	api   *scriptedapi.Server
	o     *middleware.Orchestrator
	logs  *testenv.SyncBuffer // the tool host's log
	mwLog *testenv.SyncBuffer // the middleware's log
	mu    sync.Mutex
	calls []mcphost.Call
}

func (e *toolsE2E) recorded() []mcphost.Call {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]mcphost.Call(nil), e.calls...)
}

// toolsScript: call the MCP tool, then the same tool through abx in Bash,
// then the tool the assistant is not granted through abx, then answer with
// what that returned.
func toolsScript(r *scriptedapi.Request) scriptedapi.Turn {
	results := r.NewToolResults()
	if len(results) == 0 {
		return scriptedapi.Call("mcp__orders__lookup", map[string]string{"order": "42"})
	}
	last := results[len(results)-1]
	switch {
	case last.Name == "mcp__orders__lookup":
		return scriptedapi.Call("Bash", map[string]string{"command": "abx call orders/lookup order=43", "description": "Look up order 43"})
	case strings.Contains(last.Result, "Called mcp__orders__lookup"):
		return scriptedapi.Call("Bash", map[string]string{"command": "abx call orders/cancel order=43", "description": "Cancel order 43"})
	}
	return scriptedapi.Say("Bash said: " + strings.TrimSpace(last.Result))
}

// newToolsE2E starts the stack; with idle > 0 the assistant has the
// session policy (kept container, pre-started CLI) and the middleware's
// debug log goes to env.mwLog.
func newToolsE2E(t *testing.T, idle time.Duration) *toolsE2E {
	t.Helper()
	img := testenv.RequireImage(t)
	bin := testenv.HelperBinary(t)
	env := &toolsE2E{}
	env.api = scriptedapi.Start(scriptedapi.WithScript(toolsScript))
	t.Cleanup(env.api.Close)
	env.logs = &testenv.SyncBuffer{}
	host := mcphost.New(mcphost.Options{CallTimeout: 10 * time.Second, Logger: hclog.New(&hclog.LoggerOptions{Output: env.logs, Level: hclog.Info})})
	host.MustRegister("orders", mcphost.Tool{Name: "lookup", Description: "Looks up an order of the requesting user.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"order":{"type":"string"}},"required":["order"]}`),
		Handler: func(_ context.Context, call *mcphost.Call) (*mcphost.Result, error) {
			env.mu.Lock()
			env.calls = append(env.calls, *call)
			env.mu.Unlock()
			var a struct{ Order string }
			_ = json.Unmarshal(call.Arguments, &a)
			return &mcphost.Result{Text: fmt.Sprintf("order %s of %s: shipped", a.Order, call.Identity.User)}, nil
		}})
	host.MustRegister("orders", mcphost.Tool{Name: "cancel", Description: "Not granted to coder.",
		Handler: func(_ context.Context, call *mcphost.Call) (*mcphost.Result, error) {
			env.mu.Lock()
			env.calls = append(env.calls, *call)
			env.mu.Unlock()
			return &mcphost.Result{Text: "cancelled"}, nil
		}})
	mcpConfig := []byte(`{"mcpServers":{"orders":{"command":"agentbox-helper","args":["mcp","--server","orders"]}}}`)
	coder := &middleware.Assistant{ID: "coder", Sandbox: &middleware.Sandbox{
		Runner: "claude",
		Spec: executor.Spec{Image: img, Timeout: 3 * time.Minute, MemoryBytes: 1 << 30, CPUs: 1, PidsLimit: 256,
			Network: "none", LeaseWait: 30 * time.Second},
		Run: executor.RunRequest{Model: "claude-sonnet-4-6", Arguments: map[string]any{"permission_mode": "acceptEdits", "max_turns": 10},
			MCPConfig: mcpConfig, AllowedTools: []string{"mcp__orders__lookup"}},
		StallTimeout: time.Minute,
		Connector:    middleware.Connector{Upstream: env.api.URL, Key: connectorKey},
	}}
	coder.Sandbox.Spec.IdleTTL = idle
	env.mwLog = &testenv.SyncBuffer{}
	cat, err := middleware.NewCatalog(coder)
	require.NoError(t, err)
	env.o, err = middleware.New(context.Background(), middleware.Options{
		Catalog: cat,
		NewExecutor: func(ctx context.Context, log hclog.Logger) (executor.Executor, error) {
			return docker.New(ctx, docker.Options{DataDir: t.TempDir(), Image: img, HelperBinary: bin, Logger: log,
				ReconcileInterval: -1, RetentionInterval: -1, StopGrace: 500 * time.Millisecond})
		},
		Runners: []executor.Runner{claude.New()},
		NewModelRouter: func(context.Context, hclog.Logger) (middleware.ModelRouter, error) {
			return modelroute.New(modelroute.Options{}), nil
		},
		Tools:      agentbox.MCPTools(host),
		SessionDir: filepath.Join(t.TempDir(), "sessions"),
		Logger:     hclog.New(&hclog.LoggerOptions{Output: env.mwLog, Level: hclog.Debug}),
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, env.o.Close()) })
	return env
}

// handle answers req and returns the response and the tool-use events of
// its stream.
func (e *toolsE2E) handle(t *testing.T, req *middleware.Request) (*middleware.Response, []executor.Event) {
	t.Helper()
	var mu sync.Mutex
	var events []executor.Event
	resp, err := e.o.Wrap(middleware.UnknownAssistant).Handle(context.Background(), req, func(ev executor.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if ev.Kind == executor.EventToolUse {
			events = append(events, ev)
		}
		return nil
	})
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	return resp, events
}

// TestE2EToolCallsReachTheHost: the model calls the gateway's tool as an
// MCP tool and through abx from Bash; the Go handler runs with the
// request's identity both times, the results reach the model in its next
// requests, and the calls are events of the middleware's stream. The tool
// outside the assistant's allowlist is neither offered nor callable
// through abx.
func TestE2EToolCallsReachTheHost(t *testing.T) {
	env := newToolsE2E(t, 0)
	var mu sync.Mutex
	var events []executor.Event
	resp, err := env.o.Wrap(middleware.UnknownAssistant).Handle(context.Background(), &middleware.Request{
		AssistantID: "coder", UserID: "alice", ChatID: "tools", Messages: []executor.Message{{Role: "user", Content: "Where is my order?"}},
	}, func(ev executor.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if ev.Kind == executor.EventToolUse || ev.Kind == executor.EventToolResult {
			events = append(events, ev)
		}
		return nil
	})
	require.NoError(t, err)
	for _, r := range env.api.MessageRequests() {
		for _, tr := range r.NewToolResults() {
			t.Logf("tool result of %s: %s", tr.Name, tr.Result)
		}
	}
	calls := env.recorded()
	require.Len(t, calls, 2, "the MCP call and the abx call reached the handler")
	for _, c := range calls {
		assert.Equal(t, mcphost.Identity{User: "alice", Chat: "tools", Assistant: "coder"}, c.Identity)
		assert.Equal(t, "lookup", c.Tool)
	}
	assert.JSONEq(t, `{"order":"42"}`, string(calls[0].Arguments))
	assert.JSONEq(t, `{"order":"43"}`, string(calls[1].Arguments))

	reqs := env.api.MessageRequests()
	require.Len(t, reqs, 4)
	assert.Contains(t, reqs[0].ToolNames(), "mcp__orders__lookup", "the CLI offered the granted tool to the model")
	assert.NotContains(t, reqs[0].ToolNames(), "mcp__orders__cancel", "and not the other one")
	second := reqs[1].NewToolResults()
	require.Len(t, second, 1)
	// CLI 2.1.330 appends <system-reminder> blocks (tokens left) to the
	// result the model gets; the client's event has them stripped.
	assert.Equal(t, "order 42 of alice: shipped", strings.TrimSpace(claude.StripSystemReminders(second[0].Result)), "the MCP result reached the model")
	third := reqs[2].NewToolResults()
	require.Len(t, third, 1)
	assert.Contains(t, third[0].Result, "Called mcp__orders__lookup")
	assert.Contains(t, third[0].Result, "| order 43 of alice: shipped", "abx's output reached the model")
	fourth := reqs[3].NewToolResults()
	require.Len(t, fourth, 1)
	assert.Contains(t, fourth[0].Result, `tool "mcp__orders__cancel" is not available to this assistant`, "the gateway refused the ungranted tool")
	assert.Contains(t, fourth[0].Result, "Hint: the 1 tool(s) this request may call: mcp__orders__lookup", "and abx said what there is")
	assert.Contains(t, env.logs.String(), "refused a tool call outside the allowlist", "the refusal is logged")
	assert.Contains(t, env.logs.String(), "tool=mcp__orders__cancel")
	assert.Contains(t, env.logs.String(), "user=alice")

	// Tool events: the CLI reports its MCP call and the Bash command; the
	// host reports the call abx made from that command (the CLI cannot
	// see it), each use before its result.
	uses := map[string]string{} // id -> tool name
	results := map[string]string{}
	var order []string
	mu.Lock()
	for _, ev := range events {
		if ev.Kind == executor.EventToolUse {
			uses[ev.Tool.ID] = ev.Tool.Name
			order = append(order, "use "+ev.Tool.Name)
			continue
		}
		_, seen := uses[ev.ToolResult.ToolUseID]
		assert.True(t, seen, "the result of %s follows its use", ev.ToolResult.ToolUseID)
		results[ev.ToolResult.ToolUseID] = ev.ToolResult.Content
		order = append(order, "result "+uses[ev.ToolResult.ToolUseID])
	}
	mu.Unlock()
	t.Logf("tool events: %q", order)
	require.Len(t, uses, 4, "the MCP call, two Bash commands and the call abx made in the first")
	var abxID string
	for id, name := range uses {
		if strings.HasPrefix(id, mcphost.ViaCLI+"-") {
			abxID = id
			assert.Equal(t, "mcp__orders__lookup", name)
		}
	}
	require.NotEmpty(t, abxID, "the host streamed abx's call")
	assert.Equal(t, "order 43 of alice: shipped", results[abxID])
	assert.ElementsMatch(t, []string{"mcp__orders__lookup", "Bash", "mcp__orders__lookup", "Bash"}, slices.Collect(maps.Values(uses)))
	assert.Len(t, results, 4)
	for id, name := range uses {
		if name == "mcp__orders__lookup" && id != abxID {
			assert.Equal(t, "order 42 of alice: shipped", strings.TrimSpace(results[id]), "the CLI's MCP result is an event, without the CLI's reminders")
		}
	}
	assert.Contains(t, resp.Content, `Bash said: `)
	assert.Contains(t, resp.Content, `tool "mcp__orders__cancel" is not available to this assistant`)
	t.Logf("answer: %s", resp.Content)
}

// TestE2EToolsWithAPreStartedCLI: with the session policy, the next turn's
// CLI starts when the previous turn ends, its MCP server connected to a
// tool session opened then with the chat's identity. The next request
// takes that CLI and that session: the MCP call and the abx call reach the
// handler as alice's, and abx's call is an event of the second request's
// stream (the relay hands it to the run that took the session).
func TestE2EToolsWithAPreStartedCLI(t *testing.T) {
	env := newToolsE2E(t, 10*time.Minute)
	ctx := context.Background()
	handle := func(msgs []executor.Message, chatAndSandbox ...string) (*middleware.Response, []executor.Event) {
		req := &middleware.Request{AssistantID: "coder", UserID: "alice", ChatID: "warm-tools", Messages: msgs}
		if len(chatAndSandbox) == 2 {
			req.ChatID, req.SandboxID = chatAndSandbox[0], chatAndSandbox[1]
		}
		return env.handle(t, req)
	}
	first, _ := handle([]executor.Message{{Role: "user", Content: "Where is my order?"}})
	require.NoError(t, env.o.Settle(ctx))
	require.Contains(t, env.mwLog.String(), "pre_started=true", "the next turn's CLI was started with the tools session")
	n := len(env.recorded())

	second, events := handle([]executor.Message{{Role: "user", Content: "Where is my order?"},
		{Role: "assistant", Content: first.Content}, {Role: "user", Content: "And again?"}})
	assert.Contains(t, env.mwLog.String(), "the pre-started CLI takes the turn's message")
	calls := env.recorded()[n:]
	require.Len(t, calls, 2, "the MCP call and the abx call of the second turn reached the handler")
	for _, c := range calls {
		assert.Equal(t, mcphost.Identity{User: "alice", Chat: "warm-tools", Assistant: "coder"}, c.Identity)
	}
	var abx int
	for _, ev := range events {
		if strings.HasPrefix(ev.Tool.ID, mcphost.ViaCLI+"-") {
			abx++
		}
	}
	assert.Equal(t, 1, abx, "abx's call is an event of the second request")
	assert.Contains(t, second.Content, "Bash said: ")

	// In a client sandbox the next request may be another chat: the CLI
	// and tool session pre-started for the previous chat are not used,
	// and the tools see the new chat.
	_, err := env.o.CreateSandbox(ctx, "alice", middleware.SandboxCreate{ID: "box", Assistant: "coder"})
	require.NoError(t, err)
	handle([]executor.Message{{Role: "user", Content: "Where is my order?"}}, "box-chat-1", "box")
	require.NoError(t, env.o.Settle(ctx))
	n = len(env.recorded())
	handle([]executor.Message{{Role: "user", Content: "Where is my order?"}}, "box-chat-2", "box")
	assert.Contains(t, env.mwLog.String(), "the pre-started CLI was made for another chat")
	calls = env.recorded()[n:]
	require.Len(t, calls, 2)
	for _, c := range calls {
		assert.Equal(t, "box-chat-2", c.Identity.Chat, "a tool call of chat 2 is chat 2's")
	}
}

// TestE2EToolsWithAPrewarmedSandbox: a pre-warmed client sandbox of an
// assistant with gateway tools starts its CLI before the first message,
// with a tool session that has no chat yet (its MCP server connects at the
// CLI's start). The first request adopts the CLI and binds the session to
// its chat: the MCP call and the abx call reach the handler as that
// chat's, and abx's call is an event of that request.
func TestE2EToolsWithAPrewarmedSandbox(t *testing.T) {
	env := newToolsE2E(t, 10*time.Minute)
	ctx := context.Background()
	_, err := env.o.CreateSandbox(ctx, "alice", middleware.SandboxCreate{ID: "pw", Assistant: "coder", Prewarm: true})
	require.NoError(t, err)
	require.Contains(t, env.mwLog.String(), "pre_started=true", "the pre-warmed sandbox has its CLI waiting, tools and all")
	resp, events := env.handle(t, &middleware.Request{AssistantID: "coder", UserID: "alice", ChatID: "pw-chat", SandboxID: "pw",
		Messages: []executor.Message{{Role: "user", Content: "Where is my order?"}}})
	assert.Contains(t, env.mwLog.String(), "the pre-started CLI takes the turn's message", "the first request adopted the pre-started CLI")
	calls := env.recorded()
	require.Len(t, calls, 2, "the MCP call and the abx call reached the handler")
	for _, c := range calls {
		assert.Equal(t, mcphost.Identity{User: "alice", Chat: "pw-chat", Assistant: "coder"}, c.Identity, "bound to the adopting chat")
	}
	abx := 0
	for _, ev := range events {
		if strings.HasPrefix(ev.Tool.ID, mcphost.ViaCLI+"-") {
			abx++
		}
	}
	assert.Equal(t, 1, abx, "abx's call is an event of the adopting request")
	assert.Contains(t, resp.Content, "Bash said: ")
}
