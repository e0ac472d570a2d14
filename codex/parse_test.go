package codex_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/codex"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/jsonl"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// golden is what a transcript parses to.
type golden struct {
	Events     []executor.Event    `json:"events"`
	Completion executor.Completion `json:"completion"`
	Error      string              `json:"error,omitempty"`
}

func parse(t testing.TB, r io.Reader) golden {
	t.Helper()
	var g golden
	comp, err := codex.New().Parse(context.Background(), r, func(e executor.Event) error {
		g.Events = append(g.Events, e)
		return nil
	})
	g.Completion = comp
	if err != nil {
		g.Error = err.Error()
	}
	return g
}

// transcripts are the recorded stdout of the real CLI at each pin.
func transcripts(t testing.TB) []string {
	t.Helper()
	var files []string
	for _, v := range pins {
		m, err := filepath.Glob(filepath.Join("testdata", "recorded-"+v, "*.jsonl"))
		require.NoError(t, err)
		files = append(files, m...)
	}
	require.NotEmpty(t, files)
	return files
}

// TestParseGolden parses every recorded transcript and compares events and
// completion with its golden file (go test -update rewrites them).
func TestParseGolden(t *testing.T) {
	for _, file := range transcripts(t) {
		name := filepath.Base(filepath.Dir(file)) + "__" + strings.TrimSuffix(filepath.Base(file), ".jsonl")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(file)
			require.NoError(t, err)
			g := parse(t, bytes.NewReader(raw))
			got, err := json.MarshalIndent(g, "", "  ")
			require.NoError(t, err)
			got = append(got, '\n')
			path := filepath.Join("testdata", "golden", name+".json")
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, got, 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "no golden file; run go test ./codex -run TestParseGolden -update")
			assert.JSONEq(t, string(want), string(got))

			var text strings.Builder
			for _, e := range g.Events {
				if e.Kind == executor.EventText {
					text.WriteString(e.Text)
				}
			}
			assert.Equal(t, text.String(), g.Completion.Content, "Content is the concatenation of the text events")
			if g.Error != "" {
				assert.True(t, g.Completion.IsError)
			}
			assert.Equal(t, g, parse(t, iotest.OneByteReader(bytes.NewReader(raw))), "one byte per read changes the outcome")
		})
	}
}

// TestParseFacts names what each recorded behaviour must parse to, on
// every pin.
func TestParseFacts(t *testing.T) {
	tests := map[string]struct {
		file  string
		check func(t *testing.T, g golden)
	}{
		"the session id comes from thread.started": {file: "conformance-plain", check: func(t *testing.T, g golden) {
			require.NotEmpty(t, g.Events)
			assert.Equal(t, executor.EventInit, g.Events[0].Kind)
			assert.Equal(t, g.Events[0].Init.SessionID, g.Completion.SessionID)
			assert.Equal(t, "1+1 = 2.", g.Completion.Content)
			assert.Equal(t, executor.FinishStop, g.Completion.FinishReason)
			assert.Positive(t, g.Completion.Usage.InputTokens)
			assert.Equal(t, 1, g.Completion.NumTurns)
		}},
		"messages around tool calls are joined with a separator": {file: "conformance-write_and_run", check: func(t *testing.T, g golden) {
			assert.Equal(t, "I'll write the file.\n\nDone. `cat hello.txt` printed: hello world", g.Completion.Content)
			uses := ofKind(g, executor.EventToolUse)
			require.Len(t, uses, 2)
			assert.Equal(t, "Write", uses[0].Tool.Name)
			assert.JSONEq(t, `{"file_path":"/workspace/hello.txt"}`, string(uses[0].Tool.Input))
			assert.Equal(t, "Bash", uses[1].Tool.Name)
			assert.JSONEq(t, `{"command":"cat hello.txt"}`, string(uses[1].Tool.Input), "the CLI's shell wrapper is taken off")
			results := ofKind(g, executor.EventToolResult)
			require.Len(t, results, 2)
			assert.Equal(t, "hello world\n", results[1].ToolResult.Content)
		}},
		"a failed command is an error result with its exit code": {file: "conformance-failing_tool", check: func(t *testing.T, g golden) {
			results := ofKind(g, executor.EventToolResult)
			require.Len(t, results, 1)
			assert.True(t, results[0].ToolResult.IsError)
			assert.True(t, strings.HasPrefix(results[0].ToolResult.Content, "Exit code 1\n"), results[0].ToolResult.Content)
			assert.False(t, g.Completion.IsError)
		}},
		"an upstream failure is a failed turn with its status, after retries": {file: "conformance-error_result", check: func(t *testing.T, g golden) {
			assert.Empty(t, g.Error, "the CLI reported the failure; parsing succeeded")
			assert.True(t, g.Completion.IsError)
			assert.Equal(t, 401, g.Completion.APIErrorStatus)
			assert.Len(t, ofKind(g, executor.EventRetry), 2, "max_retries 2: two reconnects")
			require.Len(t, g.Completion.Errors, 1)
			assert.Contains(t, g.Completion.Errors[0], "401")
		}},
		"rate limited": {file: "err429", check: func(t *testing.T, g golden) {
			assert.Equal(t, 429, g.Completion.APIErrorStatus)
		}},
		"a context overflow is not retried": {file: "err400", check: func(t *testing.T, g golden) {
			assert.True(t, g.Completion.IsError)
			assert.Empty(t, ofKind(g, executor.EventRetry))
			assert.Contains(t, g.Completion.Errors[0], "context window")
		}},
		"a broken stream is retried and then fails the turn": {file: "cut", check: func(t *testing.T, g golden) {
			assert.True(t, g.Completion.IsError)
			assert.Len(t, ofKind(g, executor.EventRetry), 2)
			assert.Empty(t, g.Completion.Content, "the partial answer of a broken stream is never text")
		}},
		"response.failed is retried and then fails the turn": {file: "failed", check: func(t *testing.T, g golden) {
			assert.True(t, g.Completion.IsError)
			assert.Contains(t, g.Completion.Errors[0], "The model failed mid-answer.")
		}},
		"reasoning is thinking": {file: "reasoning", check: func(t *testing.T, g golden) {
			th := ofKind(g, executor.EventThinking)
			require.Len(t, th, 1)
			assert.Equal(t, "The user asks a sum; it is 2.", th[0].Text)
			assert.Equal(t, "1+1 = 2.", g.Completion.Content)
		}},
		"parallel calls pair each result with its use": {file: "parallel", check: func(t *testing.T, g golden) {
			uses, results := ofKind(g, executor.EventToolUse), ofKind(g, executor.EventToolResult)
			require.Len(t, uses, 2)
			require.Len(t, results, 2)
			for i := range uses {
				assert.Equal(t, uses[i].Tool.ID, results[i].ToolResult.ToolUseID)
			}
		}},
		"a long output line": {file: "big", check: func(t *testing.T, g golden) {
			results := ofKind(g, executor.EventToolResult)
			require.Len(t, results, 1)
			assert.GreaterOrEqual(t, len(results[0].ToolResult.Content), 40000)
		}},
	}
	for _, v := range pins {
		for name, tc := range tests {
			t.Run(v+"/"+name, func(t *testing.T) {
				raw, err := os.ReadFile(filepath.Join("testdata", "recorded-"+v, tc.file+".jsonl"))
				require.NoError(t, err)
				tc.check(t, parse(t, bytes.NewReader(raw)))
			})
		}
	}
}

// TestParseEdges covers what no recording shows: unknown events, lines
// that are not JSON, a missing end of turn, a line over the cap, an MCP
// call, a multi-file patch.
func TestParseEdges(t *testing.T) {
	tests := map[string]struct {
		in    string
		check func(t *testing.T, g golden)
	}{
		"unknown events and noise are skipped": {in: `{"type":"thread.started","thread_id":"t1"}
not json
{"type":"turn.started"}
{"type":"future.event","x":1}
{"type":"item.updated","item":{"id":"item_9","type":"todo_list","items":[]}}
{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"hi"}}
{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":4,"output_tokens":2}}
`, check: func(t *testing.T, g golden) {
			assert.Empty(t, g.Error)
			assert.Equal(t, "hi", g.Completion.Content)
			assert.Equal(t, executor.Usage{InputTokens: 6, CacheReadInputTokens: 4, OutputTokens: 2}, g.Completion.Usage)
		}},
		"no end of turn": {in: `{"type":"thread.started","thread_id":"t1"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"partial"}}
`, check: func(t *testing.T, g golden) {
			assert.Contains(t, g.Error, "without the end of its turn")
			assert.True(t, g.Completion.IsError)
			assert.Equal(t, "partial", g.Completion.Content)
		}},
		"an MCP call and its error": {in: `{"type":"thread.started","thread_id":"t1"}
{"type":"item.started","item":{"id":"item_0","type":"mcp_tool_call","server":"gateway","tool":"whoami","arguments":{"x":1},"result":null,"error":null,"status":"in_progress"}}
{"type":"item.completed","item":{"id":"item_0","type":"mcp_tool_call","server":"gateway","tool":"whoami","arguments":{"x":1},"result":{"content":[{"type":"text","text":"alice"},{"type":"image","data":"x"}]},"error":null,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_1","type":"mcp_tool_call","server":"gateway","tool":"secret","arguments":null,"result":null,"error":{"message":"tool not allowed"},"status":"failed"}}
{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}
`, check: func(t *testing.T, g golden) {
			uses, results := ofKind(g, executor.EventToolUse), ofKind(g, executor.EventToolResult)
			require.Len(t, uses, 2)
			assert.Equal(t, "mcp__gateway__whoami", uses[0].Tool.Name)
			assert.JSONEq(t, `{"x":1}`, string(uses[0].Tool.Input))
			assert.Equal(t, "alice\n[image]", results[0].ToolResult.Content)
			assert.Equal(t, "item_1", uses[1].Tool.ID, "an item reported only at its end gets its use first")
			assert.True(t, results[1].ToolResult.IsError)
			assert.Equal(t, "tool not allowed", results[1].ToolResult.Content)
		}},
		"a patch of several files is one use per file": {in: `{"type":"thread.started","thread_id":"t1"}
{"type":"item.completed","item":{"id":"item_3","type":"file_change","changes":[{"path":"/workspace/a","kind":"add"},{"path":"/workspace/b","kind":"update"},{"path":"/workspace/c","kind":"delete"}],"status":"failed"}}
{"type":"turn.completed","usage":{}}
`, check: func(t *testing.T, g golden) {
			uses, results := ofKind(g, executor.EventToolUse), ofKind(g, executor.EventToolResult)
			require.Len(t, uses, 3)
			assert.Equal(t, []string{"Write", "Edit", "Delete"}, []string{uses[0].Tool.Name, uses[1].Tool.Name, uses[2].Tool.Name})
			assert.Equal(t, "item_3/1", uses[1].Tool.ID)
			assert.Equal(t, "item_3/1", results[1].ToolResult.ToolUseID)
			assert.True(t, results[2].ToolResult.IsError)
		}},
		"a failed turn without a message takes the last error event's": {in: `{"type":"thread.started","thread_id":"t1"}
{"type":"error","message":"Reconnecting... 1/1 (boom)"}
{"type":"error","message":"boom for good"}
{"type":"turn.failed","error":{}}
`, check: func(t *testing.T, g golden) {
			assert.Equal(t, []string{"boom for good"}, g.Completion.Errors)
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) { tc.check(t, parse(t, strings.NewReader(tc.in))) })
	}
	t.Run("a line over the cap is an error", func(t *testing.T) {
		long := `{"type":"item.completed","item":{"type":"agent_message","text":"` + strings.Repeat("x", 2000) + "\"}}\n"
		_, err := codex.New(codex.WithMaxLine(1000)).Parse(context.Background(), strings.NewReader(long), func(executor.Event) error { return nil })
		assert.ErrorIs(t, err, jsonl.ErrLineTooLong)
	})
	t.Run("WithExit names how the CLI ended", func(t *testing.T) {
		_, err := codex.New().Parse(context.Background(), strings.NewReader(""), func(executor.Event) error { return nil })
		require.ErrorIs(t, err, codex.ErrNoResult)
		err = codex.WithExit(err, executor.ExecResult{ExitCode: 1}, "Error: thread/resume failed")
		assert.ErrorIs(t, err, codex.ErrNoResult)
		assert.Contains(t, err.Error(), "exited with code 1")
		assert.Contains(t, err.Error(), "thread/resume failed")
		other := errors.New("x")
		assert.Equal(t, other, codex.WithExit(other, executor.ExecResult{}, ""))
	})
}

func ofKind(g golden, k executor.EventKind) []executor.Event {
	var out []executor.Event
	for _, e := range g.Events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

func FuzzParse(f *testing.F) {
	for _, file := range transcripts(f) {
		if raw, err := os.ReadFile(file); err == nil {
			f.Add(raw)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var text strings.Builder
		uses := map[string]bool{}
		comp, err := codex.New(codex.WithMaxLine(1<<16)).Parse(context.Background(), bytes.NewReader(data), func(e executor.Event) error {
			switch e.Kind {
			case executor.EventText:
				text.WriteString(e.Text)
			case executor.EventToolUse:
				uses[e.Tool.ID] = true
			case executor.EventToolResult:
				if !uses[e.ToolResult.ToolUseID] {
					t.Fatalf("result for %q without its use", e.ToolResult.ToolUseID)
				}
			}
			return nil
		})
		if text.String() != comp.Content {
			t.Fatalf("content %q is not the concatenation of text events %q", comp.Content, text.String())
		}
		if err != nil && !comp.IsError {
			t.Fatalf("failed parse without IsError: %v", err)
		}
	})
}
