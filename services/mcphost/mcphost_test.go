package mcphost_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor/helper"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/services/mcphost"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// clock is the fixed time of the golden tests.
var clock = time.Date(2026, 11, 22, 18, 30, 0, 0, time.UTC)

// calls records the identities handlers saw.
type calls struct {
	mu  sync.Mutex
	got []mcphost.Call
}

func (c *calls) add(call *mcphost.Call) {
	c.mu.Lock()
	c.got = append(c.got, *call)
	c.mu.Unlock()
}

func (c *calls) all() []mcphost.Call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]mcphost.Call(nil), c.got...)
}

// newHost registers the test tools: gw/echo (text, upper), gw/sleep
// (blocks until cancelled), gw/boom (panics), gw/secret (never granted in
// the tests) and notes/add.
func newHost(t *testing.T, o mcphost.Options) (*mcphost.Host, *calls, *testenv.SyncBuffer) {
	t.Helper()
	logs := &testenv.SyncBuffer{}
	o.Logger = hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})
	h := mcphost.New(o)
	rec := &calls{}
	h.MustRegister("gw", mcphost.Tool{Name: "echo", Description: "Echoes the text back.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","description":"what to echo"},"upper":{"type":"boolean"}},"required":["text"]}`),
		Handler: func(_ context.Context, call *mcphost.Call) (*mcphost.Result, error) {
			rec.add(call)
			var a struct {
				Text  string
				Upper bool
			}
			_ = json.Unmarshal(call.Arguments, &a)
			if a.Upper {
				a.Text = strings.ToUpper(a.Text)
			}
			return &mcphost.Result{Text: fmt.Sprintf("echo: %s\nuser: %s", a.Text, call.Identity.User)}, nil
		}})
	h.MustRegister("gw", mcphost.Tool{Name: "sleep", Description: "Blocks until cancelled.",
		Handler: func(ctx context.Context, call *mcphost.Call) (*mcphost.Result, error) {
			rec.add(call)
			<-ctx.Done()
			return nil, ctx.Err()
		}})
	h.MustRegister("gw", mcphost.Tool{Name: "hang", Description: "Ignores its context.",
		Handler: func(context.Context, *mcphost.Call) (*mcphost.Result, error) {
			select {}
		}})
	h.MustRegister("gw", mcphost.Tool{Name: "boom", Description: "Panics.",
		Handler: func(context.Context, *mcphost.Call) (*mcphost.Result, error) { panic("kaboom") }})
	h.MustRegister("gw", mcphost.Tool{Name: "secret", Description: "Never granted.",
		Handler: func(_ context.Context, call *mcphost.Call) (*mcphost.Result, error) {
			rec.add(call)
			return &mcphost.Result{Text: "leaked"}, nil
		}})
	h.MustRegister("notes", mcphost.Tool{Name: "add", Description: "Adds a note.",
		Handler: func(_ context.Context, call *mcphost.Call) (*mcphost.Result, error) {
			rec.add(call)
			return &mcphost.Result{Text: "stored"}, nil
		}})
	return h, rec, logs
}

var identity = mcphost.Identity{User: "alice", Chat: "c1", Assistant: "coder"}

// open starts a Session over a fresh host directory, closed at cleanup.
func open(t *testing.T, h *mcphost.Host, allow map[string][]string) (*mcphost.Session, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := h.Open(mcphost.OpenOptions{HostDir: dir, UID: -1, GID: -1, Sandbox: "sb-" + filepath.Base(dir),
		Grant: mcphost.Grant{Identity: identity, Allow: allow}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	return s, dir
}

// connect is the relay's view: an MCP client session on server through
// dir/mcp.sock with token.
func connect(t testing.TB, dir, server, token string) (*mcp.ClientSession, error) {
	t.Helper()
	ctx := context.Background()
	conn, lr, err := helper.DialMCP(ctx, helper.MCPRelayOptions{Dir: dir, Server: server, Token: token})
	if err != nil {
		return nil, err
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(ctx, helper.NewLineTransport(lr, conn), nil)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, nil
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	var out []string
	for _, tool := range res.Tools {
		out = append(out, tool.Name)
	}
	return out
}

func resultText(r *mcp.CallToolResult) string {
	var parts []string
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func TestCallCarriesTheGrantsIdentity(t *testing.T) {
	h, rec, _ := newHost(t, mcphost.Options{})
	s, dir := open(t, h, map[string][]string{"gw": {"echo"}})
	cs, err := connect(t, dir, "gw", s.Token())
	require.NoError(t, err)
	assert.Equal(t, []string{"echo"}, toolNames(t, cs), "only the granted tool is listed")
	// The caller claims another identity in its arguments: it is ignored.
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi", "user": "mallory"}})
	require.NoError(t, err)
	assert.False(t, res.IsError, resultText(res))
	assert.Equal(t, "echo: hi\nuser: alice", resultText(res))
	got := rec.all()
	require.Len(t, got, 1)
	assert.Equal(t, identity, got[0].Identity)
	assert.Equal(t, "gw", got[0].Server)
	assert.Equal(t, "echo", got[0].Tool)
}

// TestBindAnUnboundSession: a session opened before its request (no chat:
// a pre-warmed sandbox's CLI connects at its start) lists its tools but
// refuses every call until Bind gives it the chat of the request that
// adopts the CLI; then calls carry that chat. It serves one chat only,
// and only the grant's user and assistant.
func TestBindAnUnboundSession(t *testing.T) {
	h, rec, _ := newHost(t, mcphost.Options{})
	dir := t.TempDir()
	unbound := identity
	unbound.Chat = ""
	s, err := h.Open(mcphost.OpenOptions{HostDir: dir, UID: -1, GID: -1, Sandbox: "sb-unbound",
		Grant: mcphost.Grant{Identity: unbound, Allow: map[string][]string{"gw": {"echo"}}}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	cs, err := connect(t, dir, "gw", s.Token())
	require.NoError(t, err)
	assert.Equal(t, []string{"echo"}, toolNames(t, cs))
	call := func() *mcp.CallToolResult {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
		require.NoError(t, err)
		return res
	}
	res := call()
	assert.True(t, res.IsError)
	assert.Contains(t, resultText(res), "before the request starts")
	assert.Empty(t, rec.all(), "no handler ran without the request's identity")

	other := identity
	other.User = "mallory"
	assert.ErrorIs(t, s.Bind(other), mcphost.ErrRefused, "another user")
	empty := identity
	empty.Chat = ""
	assert.ErrorIs(t, s.Bind(empty), mcphost.ErrRefused, "no chat")
	require.NoError(t, s.Bind(identity))
	require.NoError(t, s.Bind(identity), "binding to the same chat again is a no-op")
	again := identity
	again.Chat = "another"
	assert.ErrorIs(t, s.Bind(again), mcphost.ErrRefused, "a bound session serves its chat only")
	assert.Equal(t, identity, s.Identity())

	res = call()
	assert.False(t, res.IsError, resultText(res))
	got := rec.all()
	require.Len(t, got, 1)
	assert.Equal(t, identity, got[0].Identity)
}

func TestArgumentsAreCheckedAgainstTheSchema(t *testing.T) {
	h, rec, _ := newHost(t, mcphost.Options{})
	s, dir := open(t, h, map[string][]string{"gw": nil})
	cs, err := connect(t, dir, "gw", s.Token())
	require.NoError(t, err)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": 42}})
	require.NoError(t, err, "a schema mismatch is a tool error the model sees, not a protocol error")
	assert.True(t, res.IsError)
	assert.Contains(t, resultText(res), "do not match its input schema")
	assert.Contains(t, resultText(res), "abx describe gw/echo", "the error says where to look")
	assert.Empty(t, rec.all(), "the handler never ran")
}

func TestRefuseToolOutsideAllowlist(t *testing.T) {
	h, rec, logs := newHost(t, mcphost.Options{})
	s, dir := open(t, h, map[string][]string{"gw": {"echo"}})
	cs, err := connect(t, dir, "gw", s.Token())
	require.NoError(t, err)
	assert.NotContains(t, toolNames(t, cs), "secret")
	_, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "secret", Arguments: map[string]any{}})
	require.Error(t, err, "refused as invalid params")
	assert.Contains(t, err.Error(), `tool "secret" is not available to this assistant`)
	assert.Empty(t, rec.all(), "the handler never ran")
	assert.Contains(t, logs.String(), "refused a tool call outside the allowlist")
	assert.Contains(t, logs.String(), "tool=secret")

	// The agent CLI's connection neither lists nor calls it either.
	abx, err := connect(t, dir, mcphost.AgentServer, s.Token())
	require.NoError(t, err)
	assert.Equal(t, []string{"mcp__gw__echo"}, toolNames(t, abx))
	_, err = abx.CallTool(context.Background(), &mcp.CallToolParams{Name: "mcp__gw__secret", Arguments: map[string]any{}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not available to this assistant")
	assert.Empty(t, rec.all(), "the handler never ran")

	// A server the assistant did not enable is refused at the hello.
	_, err = connect(t, dir, "notes", s.Token())
	require.ErrorIs(t, err, helper.ErrMCPRefused)
	assert.Contains(t, err.Error(), `the server "notes" is not enabled for this assistant`)
}

func TestRefuseWrongToken(t *testing.T) {
	h, _, logs := newHost(t, mcphost.Options{})
	_, dir := open(t, h, map[string][]string{"gw": nil})
	_, err := connect(t, dir, "gw", "abx-mcp-wrong")
	require.ErrorIs(t, err, helper.ErrMCPRefused)
	assert.Contains(t, err.Error(), "wrong token for this sandbox")
	assert.Contains(t, logs.String(), "refused an MCP connection")
}

func TestRefuseExpiredToken(t *testing.T) {
	h, _, _ := newHost(t, mcphost.Options{})
	s, dir := open(t, h, map[string][]string{"gw": nil})
	cs, err := connect(t, dir, "gw", s.Token())
	require.NoError(t, err)
	s.Revoke() // the request ended
	_, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "late"}})
	assert.Error(t, err, "the open connection is closed")
	_, err = connect(t, dir, "gw", s.Token())
	require.ErrorIs(t, err, helper.ErrMCPRefused)
	assert.Contains(t, err.Error(), "the token expired")
	assert.NoFileExists(t, filepath.Join(dir, helper.TokenFile), "the token file is gone")
}

func TestRefuseConnectionFromAnotherSandbox(t *testing.T) {
	h, rec, _ := newHost(t, mcphost.Options{})
	a, _ := open(t, h, map[string][]string{"gw": nil})
	_, dirB := open(t, h, map[string][]string{"gw": nil})
	// Sandbox A's token presented on sandbox B's socket.
	_, err := connect(t, dirB, "gw", a.Token())
	require.ErrorIs(t, err, helper.ErrMCPRefused)
	assert.Contains(t, err.Error(), "wrong token for this sandbox")
	assert.Empty(t, rec.all())
}

func TestRefuseHugeFrame(t *testing.T) {
	h, _, logs := newHost(t, mcphost.Options{MaxLine: 1 << 20})
	s, dir := open(t, h, map[string][]string{"gw": nil})
	conn, _, err := helper.DialMCP(context.Background(), helper.MCPRelayOptions{Dir: dir, Server: "gw", Token: s.Token()})
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	// 300 MB with no newline: the host closes the connection at its cap.
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	sent := 0
	var werr error
	for sent < 300<<20 {
		_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		var n int
		n, werr = conn.Write(chunk)
		sent += n
		if werr != nil {
			break
		}
	}
	require.Error(t, werr, "the host stopped reading")
	assert.Less(t, sent, 300<<20, "refused before the whole frame")
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("sent %d MiB before the host closed; heap %d -> %d MiB", sent>>20, before.HeapInuse>>20, after.HeapInuse>>20)
	assert.Less(t, after.HeapInuse, before.HeapInuse+64<<20, "the host did not buffer the frame")
	assert.Eventually(t, func() bool { return strings.Contains(logs.String(), "over the size cap") }, 5*time.Second, 20*time.Millisecond)
	// The session still serves others.
	cs, err := connect(t, dir, "gw", s.Token())
	require.NoError(t, err)
	assert.NotEmpty(t, toolNames(t, cs))
}

func TestHandlerThatBlocksIsCutAtItsDeadline(t *testing.T) {
	h, _, _ := newHost(t, mcphost.Options{CallTimeout: 300 * time.Millisecond})
	s, dir := open(t, h, map[string][]string{"gw": nil})
	cs, err := connect(t, dir, "gw", s.Token())
	require.NoError(t, err)
	for _, tool := range []string{"sleep", "hang"} {
		start := time.Now()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}})
		took := time.Since(start)
		require.NoError(t, err)
		assert.True(t, res.IsError)
		assert.Contains(t, resultText(res), "did not finish within 300ms", tool)
		assert.Less(t, took, 2*time.Second, tool)
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "still here"}})
	require.NoError(t, err)
	assert.Equal(t, "echo: still here\nuser: alice", resultText(res))
}

func TestHandlerCancelledWhenTheRequestEnds(t *testing.T) {
	h, rec, _ := newHost(t, mcphost.Options{})
	s, dir := open(t, h, map[string][]string{"gw": nil})
	cs, err := connect(t, dir, "gw", s.Token())
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{}})
		done <- err
	}()
	require.Eventually(t, func() bool { return len(rec.all()) == 1 }, 5*time.Second, 10*time.Millisecond)
	start := time.Now()
	require.NoError(t, s.Close())
	select {
	case err := <-done:
		t.Logf("the call ended with the request: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the call did not end with the request")
	}
	assert.Less(t, time.Since(start), 2*time.Second)
}

func TestHandlerPanicIsAnErrorAndTheServerKeepsServing(t *testing.T) {
	h, _, _ := newHost(t, mcphost.Options{})
	s, dir := open(t, h, map[string][]string{"gw": nil})
	cs, err := connect(t, dir, "gw", s.Token())
	require.NoError(t, err)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "boom", Arguments: map[string]any{}})
	require.NoError(t, err)
	assert.True(t, res.IsError)
	assert.Contains(t, resultText(res), "panicked")
	assert.Contains(t, resultText(res), "kaboom")
	res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "after"}})
	require.NoError(t, err)
	assert.False(t, res.IsError)
}

func TestConcurrentConnections(t *testing.T) {
	h, rec, _ := newHost(t, mcphost.Options{})
	s, dir := open(t, h, map[string][]string{"gw": {"echo"}})
	var wg sync.WaitGroup
	var ok atomic.Int32
	for i := range 16 {
		wg.Go(func() {
			cs, err := connect(t, dir, "gw", s.Token())
			if !assert.NoError(t, err) {
				return
			}
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": fmt.Sprint(i)}})
			if assert.NoError(t, err) && assert.Equal(t, fmt.Sprintf("echo: %d\nuser: alice", i), resultText(res)) {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int32(16), ok.Load())
	assert.Len(t, rec.all(), 16)
}

// events records a Session's OnCall events.
type events struct {
	mu  sync.Mutex
	got []mcphost.CallEvent
}

func (e *events) add(ev mcphost.CallEvent) {
	e.mu.Lock()
	e.got = append(e.got, ev)
	e.mu.Unlock()
}

func (e *events) all() []mcphost.CallEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]mcphost.CallEvent(nil), e.got...)
}

func TestOnCallReportsEveryCallWithHowItCame(t *testing.T) {
	h, _, _ := newHost(t, mcphost.Options{})
	evs := &events{}
	dir := t.TempDir()
	s, err := h.Open(mcphost.OpenOptions{HostDir: dir, UID: -1, GID: -1, Sandbox: "sb1",
		Grant: mcphost.Grant{Identity: identity, Allow: map[string][]string{"gw": nil}}, OnCall: evs.add})
	require.NoError(t, err)
	ctx := context.Background()

	relay, err := connect(t, dir, "gw", s.Token())
	require.NoError(t, err)
	_, err = relay.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
	require.NoError(t, err)
	abx, err := connect(t, dir, mcphost.AgentServer, s.Token())
	require.NoError(t, err)
	_, err = abx.CallTool(ctx, &mcp.CallToolParams{Name: "mcp__gw__boom", Arguments: map[string]any{}})
	require.NoError(t, err)

	got := evs.all()
	require.Len(t, got, 4, "a start and an end per call")
	assert.Equal(t, mcphost.CallEvent{ID: "call-1", Via: mcphost.ViaMCP, Server: "gw", Tool: "echo", Arguments: json.RawMessage(`{"text":"hi"}`)}, got[0])
	assert.True(t, got[1].Done)
	assert.Equal(t, "call-1", got[1].ID)
	assert.Equal(t, &mcphost.Result{Text: "echo: hi\nuser: alice"}, got[1].Result)
	assert.Positive(t, got[1].Took)
	assert.Equal(t, mcphost.CallEvent{ID: "call-2", Via: mcphost.ViaCLI, Server: "gw", Tool: "boom", Arguments: json.RawMessage(`{}`)}, got[2])
	assert.True(t, got[3].Done)
	assert.True(t, got[3].Result.IsError, "a panic ends as an error result")
	assert.Contains(t, got[3].Result.Text, "panicked")

	// A call in flight when the request ends: its end is reported before
	// Close returns or not at all.
	go func() { _, _ = relay.CallTool(ctx, &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{}}) }()
	require.Eventually(t, func() bool { return len(evs.all()) == 5 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, s.Close())
	n := len(evs.all())
	time.Sleep(200 * time.Millisecond)
	assert.Len(t, evs.all(), n, "no event after Close")
}

func TestRegisterRefusesBadTools(t *testing.T) {
	h := mcphost.New(mcphost.Options{})
	ok := func(context.Context, *mcphost.Call) (*mcphost.Result, error) { return nil, nil }
	for name, tc := range map[string]struct {
		server string
		tool   mcphost.Tool
		want   string
	}{
		"server with __":    {"a__b", mcphost.Tool{Name: "t", Handler: ok}, `server id "a__b"`},
		"tool name":         {"gw", mcphost.Tool{Name: "bad name", Handler: ok}, `tool name "bad name"`},
		"no handler":        {"gw", mcphost.Tool{Name: "t"}, "has no Handler"},
		"schema not object": {"gw", mcphost.Tool{Name: "t", Handler: ok, InputSchema: json.RawMessage(`{"type":"string"}`)}, `"type": "object"`},
	} {
		t.Run(name, func(t *testing.T) {
			err := h.Register(tc.server, tc.tool)
			require.ErrorIs(t, err, mcphost.ErrInvalidTool)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	require.NoError(t, h.Register("gw", mcphost.Tool{Name: "t", Handler: ok}))
	assert.ErrorContains(t, h.Register("gw", mcphost.Tool{Name: "t", Handler: ok}), "registered twice")
}

func TestAllowFromTools(t *testing.T) {
	got := mcphost.AllowFromTools([]string{"Bash", "mcp__gw__echo", "mcp__gw__sleep", "mcp__notes", "mcp__notes__add"})
	assert.Equal(t, map[string][]string{"gw": {"echo", "sleep"}, "notes": nil}, got)
}

// TestCLIGolden runs the agent-facing CLI (abx) against a Session and
// compares its output with testdata/cli/<case>.golden (-update rewrites).
func TestCLIGolden(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	h, _, _ := newHost(t, mcphost.Options{Now: func() time.Time { return clock }})
	s, dir := open(t, h, map[string][]string{"gw": {"echo", "boom"}, "notes": nil})
	empty, emptyDir := open(t, mcphost.New(mcphost.Options{Now: func() time.Time { return clock }}), map[string][]string{})
	for _, tc := range []struct {
		name  string
		args  []string
		empty bool
		code  int
	}{
		{"list", []string{"list"}, false, 0},
		{"list_empty", []string{"list"}, true, 0},
		{"describe", []string{"describe", "gw/echo"}, false, 0},
		{"call_json", []string{"call", "mcp__gw__echo", `{"text":"hello","upper":true}`}, false, 0},
		{"call_key_value", []string{"call", "echo", "text=hi there"}, false, 0},
		{"call_number_for_string", []string{"call", "gw/echo", "text=43", "upper=true"}, false, 0},
		{"call_tool_error", []string{"call", "gw/boom"}, false, 1},
		{"call_schema_error", []string{"call", "gw/echo"}, false, 1},
		{"call_unknown_tool", []string{"call", "gw/ecko", "text=x"}, false, 1},
		{"call_unknown_bare_tool", []string{"call", "ecko", "text=x"}, false, 1},
		{"call_not_granted", []string{"call", "gw/secret"}, false, 1},
		{"call_bad_json", []string{"call", "gw/echo", `{"text":`}, false, 2},
		{"call_unknown_argument", []string{"call", "gw/echo", "text=hi", "uper=true"}, false, 0},
		{"unknown_command", []string{"lst"}, false, 2},
		{"context", []string{"context"}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, tok := dir, s.Token()
			if tc.empty {
				d, tok = emptyDir, empty.Token()
			}
			var out, errOut bytes.Buffer
			code := helper.RunTools(context.Background(), tc.args, &out, &errOut,
				helper.ToolsOptions{Dir: d, Token: tok, Now: func() time.Time { return clock }, Location: ny})
			got := fmt.Sprintf("$ abx %s\nexit: %d\n--- stdout\n%s--- stderr\n%s", strings.Join(tc.args, " "), code, out.String(), errOut.String())
			got = strings.ReplaceAll(got, filepath.Base(d), "<sandbox>")
			golden := filepath.Join("testdata", "cli", tc.name+".golden")
			if *update {
				require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "run with -update to create it")
			assert.Equal(t, string(want), got)
			assert.Equal(t, tc.code, code)
		})
	}
	var out, errOut bytes.Buffer
	code := helper.RunTools(context.Background(), []string{"list"}, &out, &errOut, helper.ToolsOptions{Dir: dir, Token: "abx-mcp-wrong"})
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut.String(), "Error: the gateway refused the connection: mcphost: refused: wrong token for this sandbox")
}
