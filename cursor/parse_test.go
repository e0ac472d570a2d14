package cursor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/jsonl"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json from the parser's output")

// golden is what a transcript parses to.
type golden struct {
	Events     []executor.Event    `json:"events"`
	Completion executor.Completion `json:"completion"`
	Error      string              `json:"error,omitempty"`
}

func parseFile(t *testing.T, path string) golden {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer func() { assert.NoError(t, f.Close()) }()
	var g golden
	g.Events = []executor.Event{}
	g.Completion, err = New().Parse(context.Background(), f, func(e executor.Event) error {
		g.Events = append(g.Events, e)
		return nil
	})
	if err != nil {
		g.Error = err.Error()
	}
	return g
}

// TestParseGolden parses every transcript in testdata and compares the
// events and completion with its golden file (go test -run TestParseGolden
// -update rewrites them; review the diff).
func TestParseGolden(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.jsonl")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".jsonl")
		t.Run(name, func(t *testing.T) {
			got := parseFile(t, path)
			goldenPath := strings.TrimSuffix(path, ".jsonl") + ".golden.json"
			out, err := json.MarshalIndent(got, "", "  ")
			require.NoError(t, err)
			out = append(out, '\n')
			if *update {
				require.NoError(t, os.WriteFile(goldenPath, out, 0o644))
			}
			want, err := os.ReadFile(goldenPath)
			require.NoError(t, err, "run go test ./cursor -run TestParseGolden -update to create it")
			assert.JSONEq(t, string(want), string(out))
		})
	}
}

// TestParseInvariants checks properties every transcript must have,
// independently of the golden files: Content is the concatenation of the
// text events, a successful result's text equals that text without the
// separators the parser adds between messages (Cursor documents result as
// the concatenation of all text), every tool result answers an earlier
// tool use, and a stream without a result fails.
func TestParseInvariants(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.jsonl")
	require.NoError(t, err)
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			require.NoError(t, err)
			g := parseFile(t, path)
			var text, own strings.Builder // own: without the separators
			used := map[string]bool{}
			for _, e := range g.Events {
				switch e.Kind {
				case executor.EventText:
					assert.NotEmpty(t, e.Text, "empty text event")
					text.WriteString(e.Text)
					if e.Text != textSeparator {
						own.WriteString(e.Text)
					}
				case executor.EventToolUse:
					assert.False(t, used[e.Tool.ID], "tool use %s emitted twice", e.Tool.ID)
					used[e.Tool.ID] = true
				case executor.EventToolResult:
					assert.True(t, used[e.ToolResult.ToolUseID], "result for unknown tool use %s", e.ToolResult.ToolUseID)
				}
			}
			assert.Equal(t, text.String(), g.Completion.Content)

			result := lastResult(raw)
			switch {
			case !result.Exists():
				assert.Contains(t, g.Error, ErrNoResult.Error())
				assert.True(t, g.Completion.IsError)
				assert.Equal(t, executor.FinishError, g.Completion.FinishReason)
			case result.Get("is_error").Bool():
				assert.Empty(t, g.Error)
				assert.True(t, g.Completion.IsError)
				assert.Equal(t, executor.FinishError, g.Completion.FinishReason)
				assert.Contains(t, g.Completion.Errors, result.Get("result").String())
			default:
				assert.Empty(t, g.Error)
				assert.False(t, g.Completion.IsError)
				assert.Equal(t, executor.FinishStop, g.Completion.FinishReason)
				assert.Equal(t, result.Get("result").String(), own.String(), "the CLI's text must equal the result's text")
				assert.Equal(t, result.Get("duration_ms").Int(), g.Completion.Duration.Milliseconds())
				assert.Equal(t, result.Get("session_id").String(), g.Completion.SessionID)
			}
		})
	}
}

// lastResult finds the result line of a transcript written by hand.
func lastResult(raw []byte) gjson.Result {
	var res gjson.Result
	for _, line := range bytes.Split(raw, []byte("\n")) {
		if v := gjson.ParseBytes(line); gjson.ValidBytes(line) && v.Get("type").String() == "result" {
			res = v
		}
	}
	return res
}

// TestParseToolNames pins the Claude-style names of Cursor's payloads and
// the error flags of their results, written out by hand from the
// transcripts.
func TestParseToolNames(t *testing.T) {
	tests := map[string]struct {
		names  []string
		errors []bool
	}{
		"c_write_and_shell": {names: []string{"Write", "Bash"}, errors: []bool{false, false}},
		"d_failing_tool":    {names: []string{"Bash"}, errors: []bool{true}},
		"h_tool_payloads": {
			names:  []string{"Grep", "Read", "Edit", "LS", "mcp__demo__echo", "semantic_search", "readLints"},
			errors: []bool{false, false, false, true, false, false, true},
		},
		"j_parallel_tools": {names: []string{"Read", "Read"}, errors: []bool{false, false}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := parseFile(t, filepath.Join("testdata", name+".jsonl"))
			var names []string
			var errs []bool
			for _, e := range g.Events {
				if e.Kind == executor.EventToolUse {
					names = append(names, e.Tool.Name)
				}
				if e.Kind == executor.EventToolResult {
					errs = append(errs, e.ToolResult.IsError)
				}
			}
			assert.Equal(t, tc.names, names)
			assert.ElementsMatch(t, tc.errors, errs)
		})
	}
}

func TestParseShellResultContent(t *testing.T) {
	g := parseFile(t, "testdata/d_failing_tool.jsonl")
	var res *executor.ToolResult
	for _, e := range g.Events {
		if e.Kind == executor.EventToolResult {
			res = e.ToolResult
		}
	}
	require.NotNil(t, res)
	assert.Equal(t, "Exit code 2\nls: cannot access 'missing-dir': No such file or directory", res.Content)
	assert.True(t, res.IsError)
}

// TestParseChunking parses every transcript one byte per read: the result
// must not depend on how the pipe delivers the output.
func TestParseChunking(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.jsonl")
	require.NoError(t, err)
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		whole := parseFile(t, path)
		var events []executor.Event
		comp, err := New().Parse(context.Background(), iotest.OneByteReader(bytes.NewReader(raw)), func(e executor.Event) error {
			events = append(events, e)
			return nil
		})
		if whole.Error == "" {
			require.NoError(t, err, path)
		}
		assert.Equal(t, whole.Completion, comp, path)
		assert.Equal(t, len(whole.Events), len(events), path)
	}
}

func TestParseEmitErrorStops(t *testing.T) {
	raw, err := os.ReadFile("testdata/c_write_and_shell.jsonl")
	require.NoError(t, err)
	stop := errors.New("client went away")
	n := 0
	_, err = New().Parse(context.Background(), bytes.NewReader(raw), func(executor.Event) error {
		n++
		if n == 3 {
			return stop
		}
		return nil
	})
	assert.ErrorIs(t, err, stop)
	assert.Equal(t, 3, n, "no event after the failing emit")
}

func TestParseContextCanceled(t *testing.T) {
	raw, err := os.ReadFile("testdata/a_plain_text.jsonl")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	comp, err := New().Parse(ctx, bytes.NewReader(raw), func(executor.Event) error { return nil })
	assert.ErrorIs(t, err, context.Canceled)
	assert.True(t, comp.IsError)
}

func TestParseReadErrorAndStall(t *testing.T) {
	stall := &jsonl.StallError{Timeout: 1, Idle: 2}
	src := iotest.ErrReader(stall)
	comp, err := New().Parse(context.Background(), src, func(executor.Event) error { return nil })
	assert.ErrorIs(t, err, jsonl.ErrStalled)
	assert.True(t, comp.IsError)
}

func TestParseLongLineSkipped(t *testing.T) {
	long := `{"type":"assistant","message":{"content":[{"type":"text","text":"` + strings.Repeat("x", 200) + `"}]}}`
	in := `{"type":"system","subtype":"init","session_id":"s"}` + "\n" + long + "\n" +
		`{"type":"result","subtype":"success","is_error":false,"result":"","session_id":"s"}` + "\n"
	comp, err := New(WithMaxLine(100)).Parse(context.Background(), strings.NewReader(in), func(executor.Event) error { return nil })
	require.NoError(t, err)
	assert.Equal(t, executor.FinishStop, comp.FinishReason)
	assert.Empty(t, comp.Content)
}

func FuzzParse(f *testing.F) {
	paths, _ := filepath.Glob("testdata/*.jsonl")
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err == nil {
			f.Add(raw)
		}
	}
	f.Add([]byte(`{"type":"tool_call","subtype":"completed","tool_call":{"xToolCall":{"result":{"success":{"exitCode":"x"}}}}}`))
	f.Add([]byte(`{"type":"assistant","timestamp_ms":1,"message":{"content":[{"type":"text","text":1}]}}` + "\n{}\n[]\nnull"))
	f.Fuzz(func(t *testing.T, input []byte) {
		var text strings.Builder
		comp, err := New(WithMaxLine(4096)).Parse(context.Background(), bytes.NewReader(input), func(e executor.Event) error {
			if e.Kind == executor.EventText {
				text.WriteString(e.Text)
			}
			return nil
		})
		if comp.Content != text.String() {
			t.Fatalf("content %q differs from the text events %q", comp.Content, text.String())
		}
		if err == nil && comp.FinishReason == "" {
			t.Fatal("a completed parse has no finish reason")
		}
		if err != nil && !comp.IsError {
			t.Fatal("a failed parse is not marked as an error")
		}
	})
}
