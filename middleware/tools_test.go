package middleware_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/executor/helper"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/internal/scripted"
	"github.com/agentbox/agentbox/services/mcphost"
)

// hostDirExecutor gives its fake sandboxes a host directory, as
// executor/docker's have with the helper (or none when dir is empty).
type hostDirExecutor struct {
	*executortest.FakeExecutor
	dir string
}

func (e *hostDirExecutor) Create(ctx context.Context, spec executor.Spec) (executor.Sandbox, error) {
	sb, err := e.FakeExecutor.Create(ctx, spec)
	if err != nil || e.dir == "" {
		return sb, err
	}
	return &hostDirSandbox{FakeSandbox: sb.(*executortest.FakeSandbox), hostDir: e.dir}, nil
}

// hostDirSandbox is a fake sandbox with a host directory.
type hostDirSandbox struct {
	*executortest.FakeSandbox
	hostDir string
}

func (s *hostDirSandbox) HostDir() string { return s.hostDir }

// toolsRun is one request of the "coder" assistant, granted
// mcp__orders__lookup, against an Orchestrator whose Tools serve
// orders/lookup; agent runs as the agent's process in the sandbox.
type toolsRun struct {
	hostDir string
	mu      sync.Mutex
	calls   []mcphost.Call
	events  []executor.Event
}

func (tr *toolsRun) handle(t *testing.T, allowed []string, noHostDir bool, agent func(ctx context.Context) string) (*middleware.Response, error) {
	t.Helper()
	tr.hostDir = t.TempDir()
	host := mcphost.New(mcphost.Options{})
	host.MustRegister("orders", mcphost.Tool{Name: "lookup", Description: "Looks up an order.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"order":{"type":"string"}},"required":["order"]}`),
		Handler: func(_ context.Context, call *mcphost.Call) (*mcphost.Result, error) {
			tr.mu.Lock()
			tr.calls = append(tr.calls, *call)
			tr.mu.Unlock()
			return &mcphost.Result{Text: "shipped"}, nil
		}})
	ex := &hostDirExecutor{FakeExecutor: executortest.NewExecutor(t), dir: tr.hostDir}
	if noHostDir {
		ex.dir = ""
	}
	ex.OnCreate = func(sb *executortest.FakeSandbox) {
		sb.ExecFunc = func(ctx context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
			return scripted.Text(executor.Usage{}, agent(ctx)).Exec(ctx, cmd)
		}
	}
	coder := &middleware.Assistant{ID: "coder", Sandbox: &middleware.Sandbox{
		Runner: "scripted",
		Spec:   executor.Spec{Image: "img", Timeout: time.Minute, User: fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())},
		Run:    executor.RunRequest{Model: "m", AllowedTools: allowed},
	}}
	cat, err := middleware.NewCatalog(coder)
	require.NoError(t, err)
	o, err := middleware.New(context.Background(), middleware.Options{
		Catalog:     cat,
		NewExecutor: func(context.Context, hclog.Logger) (executor.Executor, error) { return ex, nil },
		Runners:     []executor.Runner{&scripted.Runner{}},
		Tools:       agentbox.MCPTools(host),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Close() })
	resp, err := o.Wrap(middleware.UnknownAssistant).Handle(context.Background(), &middleware.Request{
		AssistantID: "coder", UserID: "alice", ChatID: "c1", Messages: []executor.Message{{Role: "user", Content: "where is order 7?"}},
	}, func(ev executor.Event) error {
		tr.mu.Lock()
		tr.events = append(tr.events, ev)
		tr.mu.Unlock()
		return nil
	})
	// The sandbox and its tools session close after the response.
	require.NoError(t, o.Settle(context.Background()))
	return resp, err
}

// abx runs the agent-facing CLI as the agent would, on the sandbox's
// host directory (the container's /run/agentbox).
func (tr *toolsRun) abx(ctx context.Context, args ...string) (string, int) {
	var out bytes.Buffer
	code := helper.RunTools(ctx, args, &out, &out, helper.ToolsOptions{Dir: tr.hostDir})
	return out.String(), code
}

func TestToolsSessionLivesForTheRequest(t *testing.T) {
	tr := &toolsRun{}
	var during string
	var code int
	resp, err := tr.handle(t, []string{"Bash", "mcp__orders__lookup"}, false, func(ctx context.Context) string {
		during, code = tr.abx(ctx, "call", "orders/lookup", "order=7")
		return "done"
	})
	require.NoError(t, err)
	assert.Equal(t, "done", resp.Content)
	assert.Equal(t, 0, code, during)
	assert.Contains(t, during, "| shipped")
	require.Len(t, tr.calls, 1)
	assert.Equal(t, mcphost.Identity{User: "alice", Chat: "c1", Assistant: "coder"}, tr.calls[0].Identity, "the identity is the request's")

	var kinds []executor.EventKind
	for _, ev := range tr.events {
		kinds = append(kinds, ev.Kind)
		if ev.Kind == executor.EventToolUse {
			assert.Equal(t, "mcp__orders__lookup", ev.Tool.Name)
			assert.JSONEq(t, `{"order":"7"}`, string(ev.Tool.Input))
		}
		if ev.Kind == executor.EventToolResult {
			assert.Equal(t, "shipped", ev.ToolResult.Content)
		}
	}
	assert.Equal(t, []executor.EventKind{executor.EventSandbox, executor.EventToolUse, executor.EventToolResult, executor.EventText}, kinds,
		"abx's call streams between the sandbox's start and the agent's text")

	// The request ended: its token died and the socket is gone.
	assert.NoFileExists(t, filepath.Join(tr.hostDir, helper.TokenFile))
	assert.NoFileExists(t, filepath.Join(tr.hostDir, helper.MCPSocket))
	after, code := tr.abx(context.Background(), "list")
	assert.Equal(t, 1, code)
	assert.Contains(t, after, "Error: ")
}

func TestToolsNotOpenedWithoutMCPTools(t *testing.T) {
	tr := &toolsRun{}
	var sock bool
	_, err := tr.handle(t, []string{"Bash"}, false, func(context.Context) string {
		_, err := os.Stat(filepath.Join(tr.hostDir, helper.MCPSocket))
		sock = err == nil
		return "done"
	})
	require.NoError(t, err)
	assert.False(t, sock, "no session for an assistant granted no mcp__ tools")
}

func TestToolsNeedTheSandboxsHostDir(t *testing.T) {
	tr := &toolsRun{}
	ran := false
	_, err := tr.handle(t, []string{"mcp__orders__lookup"}, true, func(context.Context) string {
		ran = true
		return "done"
	})
	require.Error(t, err)
	e := middleware.AsError(err)
	assert.Equal(t, middleware.KindSandboxStart, e.Kind)
	assert.Contains(t, e.Message, "tools could not open")
	assert.ErrorContains(t, err, "run the executor with the helper")
	assert.False(t, ran, "the agent never started")
}
