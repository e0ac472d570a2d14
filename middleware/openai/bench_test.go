package openai_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/internal/scripted"
)

// smallRun is a short agent run: init, a tool call and its result, two
// text deltas and the result, so that the per-request overhead dominates.
func smallRun() scripted.Script {
	s := scripted.Text(executor.Usage{InputTokens: 100, OutputTokens: 20}, "Hello", ", world.")
	s.Lines = append([]scripted.Line{
		{Event: &executor.Event{Kind: executor.EventInit, Init: &executor.InitInfo{Model: "claude-test"}}},
		{Event: &executor.Event{Kind: executor.EventToolUse, Tool: &executor.ToolUse{ID: "t1", Name: "Write", Input: []byte(`{"file_path":"a"}`)}}},
		{Event: &executor.Event{Kind: executor.EventToolResult, ToolResult: &executor.ToolResult{ToolUseID: "t1", Content: "ok"}}},
	}, s.Lines...)
	return s
}

// BenchmarkOverhead measures what the middleware and the adapter add to one
// agent run (the scripted agent over executortest's fake sandbox), against
// the same run driven directly in one fake sandbox: the runner's
// invocation, its files written to the workspace, the agent's output
// through a pipe into the runner's parser. The difference is what the
// lifecycle costs: lease, sandbox creation (the fake prepares and opens the
// workspace), events, hooks' context, teardown; and for the adapter, HTTP
// and JSON on loopback.
func BenchmarkOverhead(b *testing.B) {
	script := smallRun()
	ctx := context.Background()

	b.Run("direct-runner", func(b *testing.B) {
		runner := &scripted.Runner{}
		sb := executortest.NewSandbox(b)
		sb.ExecFunc = script.Exec
		msgs := []executor.Message{{Role: "user", Content: "write hello.txt"}}
		b.ReportAllocs()
		for b.Loop() {
			inv, err := runner.Invocation(executor.RunRequest{Messages: msgs, Workdir: executor.ContainerWorkdir})
			require.NoError(b, err)
			for name, data := range inv.Files {
				require.NoError(b, sb.WriteFile(ctx, name, data))
			}
			pr, pw := io.Pipe()
			go func() {
				_, err := sb.Exec(ctx, &executor.Cmd{Args: inv.Args, Stdin: bytes.NewReader(inv.Stdin), Stdout: pw})
				pw.CloseWithError(err)
			}()
			comp, err := runner.Parse(ctx, pr, func(executor.Event) error { return nil })
			require.NoError(b, err)
			require.Equal(b, "Hello, world.", comp.Content)
		}
	})

	st := newStack(b)
	st.setScript("1", script)
	h := middleware.Chain(middleware.UnknownAssistant, st.o.Wrap)
	b.Run("middleware", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			resp, err := h.Handle(ctx, &middleware.Request{AssistantID: "coder", UserID: "alice", ChatID: "1",
				Messages: []executor.Message{{Role: "user", Content: "write hello.txt"}}}, func(executor.Event) error { return nil })
			require.NoError(b, err)
			require.Equal(b, "Hello, world.", resp.Content)
		}
	})

	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "openai-http", true: "openai-http-stream"}[stream]
		b.Run(name, func(b *testing.B) {
			body := `{"model":"coder","messages":[{"role":"user","content":"write hello.txt"}],"user":"alice:1"`
			if stream {
				body += `,"stream":true`
			}
			body += "}"
			client := st.srv.Client()
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.Post(st.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
				require.NoError(b, err)
				out, err := io.ReadAll(resp.Body)
				require.NoError(b, err)
				require.NoError(b, resp.Body.Close())
				require.Equal(b, http.StatusOK, resp.StatusCode, "%s", out)
			}
		})
	}
}
