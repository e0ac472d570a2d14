package claude_test

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
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/claude"
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

// parseAll parses r to its end (every result, as recorded transcripts with
// several prompts hold).
func parseAll(t testing.TB, r io.Reader) golden {
	t.Helper()
	return parseWith(t, claude.New(claude.WithResults(0)), r)
}

func parseWith(t testing.TB, runner *claude.Runner, r io.Reader) golden {
	t.Helper()
	var g golden
	comp, err := runner.Parse(context.Background(), r, func(e executor.Event) error {
		g.Events = append(g.Events, e)
		return nil
	})
	g.Completion = comp
	if err != nil {
		g.Error = err.Error()
	}
	return g
}

// transcriptDirs hold real CLI stdout: the shared recordings and the ones
// recorded against internal/scriptedapi (see testdata/README.md).
var transcriptDirs = []string{"testdata/cli-2.1.197", "testdata/recorded", "testdata/recorded-2.1.330"}

func transcripts(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, dir := range transcriptDirs {
		for _, pat := range []string{"*.jsonl", "*.json"} {
			m, err := filepath.Glob(filepath.Join(dir, pat))
			require.NoError(t, err)
			files = append(files, m...)
		}
	}
	require.NotEmpty(t, files)
	return files
}

// TestParseGolden parses every recorded transcript and compares events and
// completion with its golden file (go test -update rewrites them).
func TestParseGolden(t *testing.T) {
	for _, file := range transcripts(t) {
		name := filepath.Base(filepath.Dir(file)) + "__" + strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(file)
			require.NoError(t, err)
			g := parseAll(t, bytes.NewReader(raw))
			got, err := json.MarshalIndent(g, "", "  ")
			require.NoError(t, err)
			got = append(got, '\n')
			path := filepath.Join("testdata", "golden", name+".json")
			if *update {
				require.NoError(t, os.WriteFile(path, got, 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "no golden file; run go test ./claude -run TestParseGolden -update")
			assert.JSONEq(t, string(want), string(got))

			// Invariants that hold for every transcript.
			var text strings.Builder
			for _, e := range g.Events {
				if e.Kind == executor.EventText {
					text.WriteString(e.Text)
				}
			}
			assert.Equal(t, text.String(), g.Completion.Content, "Content is the concatenation of the text events")
			if g.Error != "" {
				assert.True(t, g.Completion.IsError)
				assert.Equal(t, executor.FinishError, g.Completion.FinishReason)
			}
			// Chunking does not matter.
			one := parseAll(t, iotest.OneByteReader(bytes.NewReader(raw)))
			assert.Equal(t, g, one, "one byte per read changes the outcome")
			// One prompt, one result: the default parse, which returns at
			// the result, sees all there is.
			if bytes.Count(raw, []byte(`"type":"result"`)) == 1 {
				assert.Equal(t, g, parseWith(t, claude.New(), bytes.NewReader(raw)), "the default parse differs from reading to the end")
			}
		})
	}
}

func TestParseFacts(t *testing.T) {
	tests := map[string]struct {
		file  string
		check func(t *testing.T, g golden)
	}{
		"plain answer": {file: "a_plain_text.jsonl", check: func(t *testing.T, g golden) {
			assert.Equal(t, "Hello from fake model. 1+1=2.", g.Completion.Content)
			assert.Equal(t, executor.FinishStop, g.Completion.FinishReason)
			assert.Equal(t, executor.Usage{InputTokens: 100, OutputTokens: 14}, g.Completion.Usage)
			assert.Equal(t, 231*time.Millisecond, g.Completion.Duration)
			assert.InDelta(t, 0.00085, g.Completion.CostUSD, 1e-9)
			require.Equal(t, executor.EventInit, g.Events[0].Kind)
			assert.Equal(t, "2.1.197", g.Events[0].Init.Version)
			assert.Contains(t, g.Events[0].Init.Tools, "Bash")
		}},
		"partial messages are not doubled": {file: "e1_partial_messages_text.jsonl", check: func(t *testing.T, g golden) {
			assert.Equal(t, "One two three four five six seven eight nine ten.", g.Completion.Content)
			assert.Len(t, kinds(g, executor.EventText), 4, "four deltas, no repeat from the assistant message")
		}},
		"turns are joined with a separator event": {file: "e2_partial_messages_tools.jsonl", check: func(t *testing.T, g golden) {
			assert.Equal(t, "I'll write the file.\n\nDone. Bash said: \"hello world\"", g.Completion.Content)
			assert.Contains(t, kinds(g, executor.EventText), "\n\n")
			assert.Equal(t, executor.Usage{InputTokens: 300, OutputTokens: 74}, g.Completion.Usage)
		}},
		"api error: is_error decides, not subtype": {file: "d1_http401_maxretries1.jsonl", check: func(t *testing.T, g golden) {
			assert.Equal(t, "success", g.Completion.Subtype)
			assert.True(t, g.Completion.IsError)
			assert.Equal(t, executor.FinishError, g.Completion.FinishReason)
			assert.Equal(t, 401, g.Completion.APIErrorStatus)
			assert.Equal(t, []string{"Invalid API key · Fix external API key"}, g.Completion.Errors)
			assert.Empty(t, g.Completion.Content, "the synthetic error text is not the answer")
			assert.Len(t, kinds(g, executor.EventRetry), 1)
		}},
		"max turns": {file: "c_max_turns.jsonl", check: func(t *testing.T, g golden) {
			assert.Equal(t, executor.FinishMaxTurns, g.Completion.FinishReason)
			assert.True(t, g.Completion.IsError)
			assert.Equal(t, []string{"Reached maximum number of turns (2)"}, g.Completion.Errors)
			assert.Equal(t, 3, g.Completion.NumTurns)
		}},
		"permission denial": {file: "b3_bash_denied_default_mode.jsonl", check: func(t *testing.T, g golden) {
			require.Len(t, g.Completion.PermissionDenials, 1)
			assert.Equal(t, "Bash", g.Completion.PermissionDenials[0].ToolName)
			assert.False(t, g.Completion.IsError)
		}},
		"mcp servers and tool result blocks": {file: "f_mcp_tool_call.jsonl", check: func(t *testing.T, g golden) {
			assert.Equal(t, map[string]string{"demo": "connected"}, g.Events[0].Init.MCPServers)
			res := kindsOf(g, executor.EventToolResult)
			require.Len(t, res, 1)
			assert.Equal(t, "echo: ping from model", res[0].ToolResult.Content)
		}},
		"skill listed, skill body not an event": {file: "g_skill_invocation.jsonl", check: func(t *testing.T, g golden) {
			assert.Contains(t, g.Events[0].Init.Skills, "greeter")
			for _, e := range g.Events {
				assert.NotContains(t, e.Text, "GREETINGS FROM SKILL")
			}
		}},
		"interrupted run": {file: "n_interrupt_control_request.jsonl", check: func(t *testing.T, g golden) {
			assert.Empty(t, g.Error, "both prompts have results")
			assert.False(t, g.Completion.IsError, "the last prompt succeeded")
		}},
		"not CLI output": {file: "f_mcp_server_side_log.jsonl", check: func(t *testing.T, g golden) {
			assert.Contains(t, g.Error, claude.ErrNoResult.Error())
		}},
	}
	tests["dropped stream is not a success"] = struct {
		file  string
		check func(t *testing.T, g golden)
	}{file: "../recorded/dropped.jsonl", check: func(t *testing.T, g golden) {
		assert.Equal(t, "success", g.Completion.Subtype)
		assert.True(t, g.Completion.IsError)
		assert.Equal(t, executor.FinishError, g.Completion.FinishReason)
		assert.Equal(t, "partial answer", g.Completion.Content)
	}}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata/cli-2.1.197", tc.file))
			require.NoError(t, err)
			tc.check(t, parseAll(t, bytes.NewReader(raw)))
		})
	}
}

func kinds(g golden, k executor.EventKind) []string {
	var out []string
	for _, e := range kindsOf(g, k) {
		out = append(out, e.Text)
	}
	return out
}

func kindsOf(g golden, k executor.EventKind) []executor.Event {
	var out []executor.Event
	for _, e := range g.Events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

func TestParseMissingResult(t *testing.T) {
	raw, err := os.ReadFile("testdata/cli-2.1.197/b1_write_bash_acceptEdits.jsonl")
	require.NoError(t, err)
	lines := bytes.Split(bytes.TrimSpace(raw), []byte("\n"))
	cut := bytes.Join(lines[:len(lines)-1], []byte("\n"))

	g := parseAll(t, bytes.NewReader(cut))
	require.NotEmpty(t, g.Error)
	assert.True(t, g.Completion.IsError)
	assert.NotEmpty(t, g.Completion.Content, "the text so far is kept")

	_, err = claude.New().Parse(context.Background(), bytes.NewReader(cut), func(executor.Event) error { return nil })
	require.ErrorIs(t, err, claude.ErrNoResult)
	err = claude.WithExit(err, executor.ExecResult{ExitCode: -1, Signal: "SIGTERM"}, "boom\n")
	assert.ErrorIs(t, err, claude.ErrNoResult)
	assert.Contains(t, err.Error(), "killed by SIGTERM")
	assert.Contains(t, err.Error(), "stderr: boom")
	assert.Contains(t, err.Error(), `the last a "assistant"`)

	other := errors.New("other")
	assert.Equal(t, other, claude.WithExit(other, executor.ExecResult{}, ""))
}

func TestParseReadErrors(t *testing.T) {
	raw, err := os.ReadFile("testdata/cli-2.1.197/c_max_turns.jsonl")
	require.NoError(t, err)
	exit1 := errors.New("the agent exited with code 1")

	t.Run("error after the result is the CLI's exit", func(t *testing.T) {
		g := parseAll(t, io.MultiReader(bytes.NewReader(raw), iotest.ErrReader(exit1)))
		assert.Empty(t, g.Error)
		assert.Equal(t, executor.FinishMaxTurns, g.Completion.FinishReason)
	})
	t.Run("error before the result fails", func(t *testing.T) {
		_, err := claude.New().Parse(context.Background(), io.MultiReader(bytes.NewReader(raw[:200]), iotest.ErrReader(exit1)),
			func(executor.Event) error { return nil })
		assert.ErrorIs(t, err, claude.ErrNoResult)
		assert.ErrorIs(t, err, exit1)
	})
	t.Run("stall watchdog", func(t *testing.T) {
		ctx, wd := jsonl.WithWatchdog(context.Background(), 50*time.Millisecond)
		defer wd.Stop()
		pr, pw := io.Pipe()
		go func() {
			_, _ = pw.Write(raw[:bytes.IndexByte(raw, '\n')+1])
			<-ctx.Done() // the process hangs until the watchdog kills it
			_ = pw.Close()
		}()
		_, err := claude.New().Parse(ctx, wd.Reader(pr), func(executor.Event) error { return nil })
		assert.ErrorIs(t, err, jsonl.ErrStalled)
	})
	t.Run("line over the cap fails", func(t *testing.T) {
		long := append([]byte(`{"type":"assistant","x":"`+strings.Repeat("x", 2000)+`"}`), '\n')
		_, err := claude.New(claude.WithMaxLine(1000)).Parse(context.Background(), io.MultiReader(bytes.NewReader(long), bytes.NewReader(raw)),
			func(executor.Event) error { return nil })
		assert.ErrorIs(t, err, jsonl.ErrLineTooLong)
	})
}

func FuzzParse(f *testing.F) {
	for _, dir := range transcriptDirs {
		m, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
		for _, file := range m {
			raw, err := os.ReadFile(file)
			if err == nil {
				f.Add(raw)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var text strings.Builder
		comp, err := claude.New(claude.WithMaxLine(1<<16)).Parse(context.Background(), bytes.NewReader(data), func(e executor.Event) error {
			if e.Kind == executor.EventText {
				text.WriteString(e.Text)
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

// BenchmarkParse compares Parse over a recorded tool-using transcript with
// the floor of any parser: reading the same lines and decoding each into a
// map.
func BenchmarkParse(b *testing.B) {
	raw, err := os.ReadFile("testdata/recorded/files.jsonl")
	require.NoError(b, err)
	b.Run("claude.Parse", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if _, err := claude.New().Parse(context.Background(), bytes.NewReader(raw), func(executor.Event) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline_unmarshal_lines", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			r := jsonl.NewReader(bytes.NewReader(raw), 0)
			for {
				line, err := r.ReadLine()
				if err != nil {
					break
				}
				var m map[string]any
				if err := json.Unmarshal(line, &m); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// readRecorded330 returns a transcript of the new pin.
func readRecorded330(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata/recorded-2.1.330", name))
	require.NoError(t, err)
	return raw
}

// TestParseCLI2_1_330 checks what the parser makes of behaviours new in
// CLI 2.1.330, on its real output.
func TestParseCLI2_1_330(t *testing.T) {
	t.Run("resumed answer is a retry and continues the text", func(t *testing.T) {
		for _, f := range []string{"midstream.jsonl", "dropped.jsonl"} {
			g := parseAll(t, bytes.NewReader(readRecorded330(t, f)))
			require.Empty(t, g.Error, f)
			assert.False(t, g.Completion.IsError, f)
			assert.Equal(t, "partial answer, resumed.", g.Completion.Content, f)
			retries := kindsOf(g, executor.EventRetry)
			require.Len(t, retries, 1, f)
			var before strings.Builder
			for _, e := range g.Events {
				if e.Kind == executor.EventRetry {
					break
				}
				if e.Kind == executor.EventText {
					before.WriteString(e.Text)
				}
			}
			assert.Equal(t, "partial answer", before.String(), "%s: the retry event comes where the stream broke", f)
		}
	})
	t.Run("resume in whole-message output is recognised by its wording", func(t *testing.T) {
		var kept []string
		for _, l := range strings.Split(string(readRecorded330(t, "midstream.jsonl")), "\n") {
			if !strings.Contains(l, `"type":"stream_event"`) {
				kept = append(kept, l)
			}
		}
		g := parseAll(t, strings.NewReader(strings.Join(kept, "\n")))
		assert.Len(t, kindsOf(g, executor.EventRetry), 1)
		assert.Equal(t, "partial answer, resumed.", g.Completion.Content)
	})
	t.Run("skill bodies stay silent", func(t *testing.T) {
		raw, err := os.ReadFile("testdata/cli-2.1.197/g_skill_invocation.jsonl")
		require.NoError(t, err)
		g := parseAll(t, bytes.NewReader(raw))
		assert.Empty(t, kindsOf(g, executor.EventRetry), "a synthetic skill body after a complete message is not a resume")
	})
	t.Run("subagent events name their parent", func(t *testing.T) {
		g := parseAll(t, bytes.NewReader(readRecorded330(t, "subagent.jsonl")))
		require.Empty(t, g.Error)
		uses := kindsOf(g, executor.EventToolUse)
		require.Len(t, uses, 2)
		assert.Equal(t, "Task", uses[0].Tool.Name)
		assert.Empty(t, uses[0].Tool.ParentToolUseID)
		assert.Equal(t, uses[0].Tool.ID, uses[1].Tool.ParentToolUseID)
		for _, r := range kindsOf(g, executor.EventToolResult) {
			if r.ToolResult.ToolUseID == uses[1].Tool.ID {
				assert.Equal(t, uses[0].Tool.ID, r.ToolResult.ParentToolUseID)
			} else {
				assert.Empty(t, r.ToolResult.ParentToolUseID)
			}
		}
		assert.Equal(t, "main done", g.Completion.Content, "the subagent's text is not the answer")
	})
	t.Run("reminders are stripped from tool results", func(t *testing.T) {
		const reminder = "\n\n<system-reminder>\n<total_tokens>14999897 tokens left</total_tokens>\n</system-reminder>"
		raw := strings.Replace(string(readRecorded330(t, "files.jsonl")), `"content":"hello from the sandbox"`,
			`"content":[{"type":"text","text":"hello from the sandbox`+strings.ReplaceAll(reminder, "\n", `\n`)+`"}]`, 1)
		require.Contains(t, raw, "system-reminder", "the fixture was edited")
		g := parseAll(t, strings.NewReader(raw))
		var contents []string
		for _, r := range kindsOf(g, executor.EventToolResult) {
			contents = append(contents, r.ToolResult.Content)
		}
		assert.Contains(t, contents, "hello from the sandbox")
		for _, c := range contents {
			assert.NotContains(t, c, "system-reminder")
		}
	})
}

func FuzzStripSystemReminders(f *testing.F) {
	for _, s := range []string{"a<system-reminder>x</system-reminder>b", "<system-reminder>", "x</system-reminder><system-reminder>y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := claude.StripSystemReminders(s)
		if i := strings.Index(out, "<system-reminder>"); i >= 0 {
			assert.NotContains(t, out[i:], "</system-reminder>", "a whole block survived in %q", out)
		}
		if !strings.Contains(s, "<system-reminder>") {
			assert.Equal(t, s, out, "text without reminders is unchanged")
		}
	})
}

func TestParseResumeJoin(t *testing.T) {
	const (
		head = `{"type":"system","subtype":"init","session_id":"s"}
{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"partial"}]}}
{"type":"user","isSynthetic":true,"message":{"role":"user","content":[{"type":"text","text":"Your response above was cut off mid-stream. Resume directly from where it stops."}]}}
`
		tool = `{"type":"assistant","message":{"id":"m2","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{}}]}}
{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}}
`
		tail = `{"type":"assistant","message":{"id":"m3","content":[{"type":"text","text":" done"}]}}
{"type":"result","subtype":"success","is_error":false,"stop_reason":"end_turn","result":"done"}
`
	)
	tests := map[string]struct{ in, want string }{
		"continuation joins the partial text": {head + tail, "partial done"},
		"text after a tool call is separated": {head + tool + tail, "partial\n\n done"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := parseAll(t, strings.NewReader(tc.in))
			require.Empty(t, g.Error)
			assert.Equal(t, tc.want, g.Completion.Content)
			assert.Len(t, kindsOf(g, executor.EventRetry), 1)
		})
	}
}

// TestParseReturnsAtTheResult: by default Parse returns at the result line
// without waiting for the end of the output (the CLI's exit, 30-80 ms
// later); with several prompts it returns at the first prompt's result
// unless told how many to read.
func TestParseReturnsAtTheResult(t *testing.T) {
	raw, err := os.ReadFile("testdata/recorded-2.1.330/plain.jsonl")
	require.NoError(t, err)
	pr, pw := io.Pipe()
	defer func() { _ = pw.Close() }()
	go func() { _, _ = pw.Write(raw) }() // and the pipe stays open
	done := make(chan golden, 1)
	go func() { done <- parseWith(t, claude.New(), pr) }()
	select {
	case g := <-done:
		assert.Equal(t, parseAll(t, bytes.NewReader(raw)), g)
	case <-time.After(time.Minute):
		t.Fatal("Parse waited for the end of the output after the result")
	}

	raw, err = os.ReadFile("testdata/cli-2.1.197/n_interrupt_control_request.jsonl")
	require.NoError(t, err)
	first := parseWith(t, claude.New(), bytes.NewReader(raw))
	assert.True(t, first.Completion.IsError, "the first prompt's result: interrupted")
	assert.Equal(t, "error_during_execution", first.Completion.Subtype)
	both := parseWith(t, claude.New(claude.WithResults(2)), bytes.NewReader(raw))
	assert.False(t, both.Completion.IsError, "the second prompt's result: a success")
	assert.Equal(t, parseAll(t, bytes.NewReader(raw)), both)
}

// TestParseReadsBackgroundWorkToTheEnd: when the agent left work in the
// background, the answer is every main turn up to the end of the output
// (the completions' turns included), not the first result.
func TestParseReadsBackgroundWorkToTheEnd(t *testing.T) {
	for _, name := range []string{"background-bash", "background-subagent"} {
		raw, err := os.ReadFile("testdata/recorded-2.1.330/" + name + ".jsonl")
		require.NoError(t, err)
		g := parseWith(t, claude.New(), bytes.NewReader(raw))
		assert.Equal(t, parseAll(t, bytes.NewReader(raw)), g, name)
		assert.Contains(t, g.Completion.Content, "REPORT-TURN", "%s: the completion's turn is in the answer", name)
	}
}
