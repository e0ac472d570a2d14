package mcphost_test

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/docker"
	"github.com/agentbox/agentbox/executor/helper"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/services/mcphost"
)

// callEcho calls gw/echo through cs in the benchmark's loop.
func callEcho(b *testing.B, cs *mcp.ClientSession) {
	for b.Loop() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
		if err != nil || res.IsError {
			b.Fatal(err, res)
		}
	}
}

// BenchmarkToolCall compares one call of a gateway tool:
//   - direct: the Go handler called in-process (the floor);
//   - mcp-host: an MCP client on the host over mcp.sock (SDK, socket,
//     schema check, deadline);
//   - container/relay: the path of the agent CLI's MCP calls: an MCP
//     client on the host talks through the helper's exec stream to
//     `agentbox-helper mcp --server gw` in a real sandbox, which relays to
//     mcp.sock on the host: host -> container -> host tool -> container ->
//     host, one session for all calls;
//   - container/abx: `abx call` run in a real sandbox through the helper's
//     exec, the same round trip plus abx's process start and MCP
//     handshake on every call.
func BenchmarkToolCall(b *testing.B) {
	ctx := context.Background()
	echo := mcphost.Tool{Name: "echo", Description: "Echoes.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
		Handler: func(_ context.Context, call *mcphost.Call) (*mcphost.Result, error) {
			var a struct{ Text string }
			_ = json.Unmarshal(call.Arguments, &a)
			return &mcphost.Result{Text: "echo: " + a.Text}, nil
		}}
	b.Run("direct", func(b *testing.B) {
		call := &mcphost.Call{Identity: identity, Server: "gw", Tool: "echo", Arguments: json.RawMessage(`{"text":"hi"}`)}
		for b.Loop() {
			if res, err := echo.Handler(ctx, call); err != nil || res.Text != "echo: hi" {
				b.Fatal(err)
			}
		}
	})
	h := mcphost.New(mcphost.Options{})
	h.MustRegister("gw", echo)
	b.Run("mcp-host", func(b *testing.B) {
		dir := b.TempDir()
		s, err := h.Open(mcphost.OpenOptions{HostDir: dir, UID: -1, GID: -1, Grant: mcphost.Grant{Identity: identity, Allow: map[string][]string{"gw": nil}}})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = s.Close() }()
		cs, err := connect(b, dir, "gw", s.Token())
		if err != nil {
			b.Fatal(err)
		}
		callEcho(b, cs)
	})
	b.Run("container", func(b *testing.B) {
		img := testenv.RequireImage(b)
		e, err := docker.New(ctx, docker.Options{DataDir: b.TempDir(), Image: img, HelperBinary: testenv.HelperBinary(b),
			ReconcileInterval: -1, RetentionInterval: -1})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = e.Close() }()
		sb, err := e.Create(ctx, executor.Spec{UserID: "u", ChatID: "bench", AssistantID: "a", MemoryBytes: 256 << 20, CPUs: 1,
			PidsLimit: 128, Timeout: 10 * time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = sb.Close(context.Background()) }()
		s, err := h.Open(mcphost.OpenOptions{HostDir: sb.HostDir(), UID: executor.DefaultUID, GID: executor.DefaultGID, Sandbox: sb.ID(),
			Grant: mcphost.Grant{Identity: identity, Allow: map[string][]string{"gw": nil}}})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = s.Close() }()
		b.Run("relay", func(b *testing.B) {
			stdinR, stdinW := io.Pipe()
			stdoutR, stdoutW := io.Pipe()
			done := make(chan error, 1)
			go func() {
				_, err := sb.Exec(ctx, &executor.Cmd{Args: []string{docker.ContainerHelperPath, "mcp", "--server", "gw"},
					Stdin: stdinR, Stdout: stdoutW, Timeout: 10 * time.Minute})
				_ = stdoutW.CloseWithError(io.EOF)
				done <- err
			}()
			c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
			cs, err := c.Connect(ctx, helper.NewLineTransport(helper.NewLineReader(stdoutR, helper.MaxMCPLine), stdinW), nil)
			if err != nil {
				b.Fatal(err)
			}
			callEcho(b, cs)
			_ = cs.Close()
			if err := <-done; err != nil {
				b.Fatal("the relay failed: ", err)
			}
		})
		b.Run("abx", func(b *testing.B) {
			for b.Loop() {
				var out strings.Builder
				res, err := sb.Exec(ctx, &executor.Cmd{Args: []string{docker.ContainerToolsPath, "call", "gw/echo", "text=hi"}, Stdout: &out})
				if err != nil || res.ExitCode != 0 || !strings.Contains(out.String(), "| echo: hi") {
					b.Fatal(err, res, out.String())
				}
			}
		})
	})
}
