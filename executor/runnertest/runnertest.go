package runnertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
)

// Behaviour names one scripted behaviour every runner's transcripts cover.
type Behaviour string

// The behaviours of the suite. Each transcript records the CLI answering
// the scenario described on its constant.
const (
	// Plain: "What is 1+1?" answered with text, no tools.
	Plain Behaviour = "plain"
	// WriteAndRun: create hello.txt containing "hello world" with the
	// write tool, then run `cat hello.txt` with the shell tool, then answer.
	WriteAndRun Behaviour = "write_and_run"
	// FailingTool: a shell command fails (non-zero exit or refused); the
	// agent answers about it and the run succeeds.
	FailingTool Behaviour = "failing_tool"
	// ErrorResult: the run fails and the CLI says so in its result.
	ErrorResult Behaviour = "error_result"
	// CutStream: the output ends before its result (the CLI was killed).
	// When a runner supplies no transcript for it, Run derives one from
	// WriteAndRun by cutting it before its last line.
	CutStream Behaviour = "cut_stream"
)

// Behaviours lists every behaviour in the order Run checks them.
var Behaviours = []Behaviour{Plain, WriteAndRun, FailingTool, ErrorResult, CutStream}

// Transcripts maps each behaviour to a runner's raw stdout for it.
type Transcripts map[Behaviour][]byte

// Outcome is what a runner made of one transcript.
type Outcome struct {
	Events     []executor.Event
	Completion executor.Completion
	Err        error
}

// End states of a Shape.
const (
	EndStop   = "stop"   // Parse succeeded, the run finished
	EndError  = "error"  // Parse succeeded, the CLI reported a failed run
	EndFailed = "failed" // Parse returned an error (no result, cut stream)
)

// Shape is the runner-independent outline of an outcome: what two runners
// must agree on for the same behaviour.
type Shape struct {
	// Tools lists tool uses and results in order: "use:Write",
	// "result:ok" or "result:error".
	Tools []string
	// Text says whether any text event was emitted.
	Text bool
	// End is EndStop, EndError or EndFailed.
	End string
}

// Shape returns the outline of o.
func (o Outcome) Shape() Shape {
	var s Shape
	for _, e := range o.Events {
		switch e.Kind {
		case executor.EventText:
			s.Text = true
		case executor.EventToolUse:
			s.Tools = append(s.Tools, "use:"+e.Tool.Name)
		case executor.EventToolResult:
			if e.ToolResult.IsError {
				s.Tools = append(s.Tools, "result:error")
			} else {
				s.Tools = append(s.Tools, "result:ok")
			}
		}
	}
	switch {
	case o.Err != nil:
		s.End = EndFailed
	case o.Completion.IsError:
		s.End = EndError
	default:
		s.End = EndStop
	}
	return s
}

// Parse runs r.Parse over stdout and collects the outcome.
func Parse(r executor.Runner, stdout []byte) Outcome {
	var o Outcome
	o.Completion, o.Err = r.Parse(context.Background(), bytes.NewReader(stdout), func(e executor.Event) error {
		o.Events = append(o.Events, e)
		return nil
	})
	return o
}

// Option adapts the suite's contract to what a runner's CLI reports.
type Option func(*options)

// options are the adaptations in force.
type options struct {
	// writeWithoutContent: a write's input names the file only.
	writeWithoutContent bool
}

// WriteWithoutContent is for a CLI that reports a file write by its path
// only (the Codex CLI's file_change items carry no content): WriteAndRun
// then checks that the write names the file, and finds the content in the
// command's output.
func WriteWithoutContent() Option { return func(o *options) { o.writeWithoutContent = true } }

// Run checks r against the transcripts and returns the outcome of each
// behaviour. Every behaviour except CutStream must have a transcript.
func Run(t *testing.T, r executor.Runner, tr Transcripts, opts ...Option) map[Behaviour]Outcome {
	t.Helper()
	tr = withCut(t, tr)
	out := make(map[Behaviour]Outcome, len(Behaviours))
	for _, b := range Behaviours {
		stdout, ok := tr[b]
		require.True(t, ok, "no transcript for behaviour %q", b)
		t.Run(string(b), func(t *testing.T) {
			o := Parse(r, stdout)
			out[b] = o
			Check(t, b, o, opts...)
			checkChunking(t, r, stdout, o)
		})
	}
	t.Run("emit error stops parsing", func(t *testing.T) { checkEmitError(t, r, tr[WriteAndRun]) })
	t.Run("canceled context", func(t *testing.T) { checkCanceled(t, r, tr[Plain]) })
	t.Run("empty output", func(t *testing.T) {
		o := Parse(r, nil)
		assert.Error(t, o.Err, "an empty stream has no result and must fail")
		assert.True(t, o.Completion.IsError)
	})
	return out
}

// withCut adds a CutStream transcript derived from WriteAndRun when the
// runner supplied none: everything before its last non-empty line.
func withCut(t *testing.T, tr Transcripts) Transcripts {
	if _, ok := tr[CutStream]; ok {
		return tr
	}
	src, ok := tr[WriteAndRun]
	require.True(t, ok, "no transcript for behaviour %q", WriteAndRun)
	trimmed := bytes.TrimRight(src, "\n")
	cut := trimmed[:bytes.LastIndexByte(trimmed, '\n')+1]
	out := make(Transcripts, len(tr)+1)
	for k, v := range tr {
		out[k] = v
	}
	out[CutStream] = cut
	return out
}

// Check checks one outcome against the contract of behaviour b; Run calls
// it for each transcript, and end-to-end tests call it for outcomes of real
// runs.
func Check(t *testing.T, b Behaviour, o Outcome, opts ...Option) {
	t.Helper()
	var op options
	for _, f := range opts {
		f(&op)
	}
	check, ok := checks[b]
	require.True(t, ok, "unknown behaviour %q", b)
	checkCommon(t, o)
	check(t, o, op)
}

// checkCommon holds for every outcome.
func checkCommon(t *testing.T, o Outcome) {
	t.Helper()
	require.NotEmpty(t, o.Events, "no events at all")
	assert.Equal(t, executor.EventInit, o.Events[0].Kind, "the first event is the CLI's init")
	var text strings.Builder
	uses := map[string]bool{}
	for i, e := range o.Events {
		switch e.Kind {
		case executor.EventInit:
			require.NotNil(t, e.Init, "event %d: init without InitInfo", i)
		case executor.EventText, executor.EventThinking:
			assert.NotEmpty(t, e.Text, "event %d: empty %s", i, e.Kind)
			if e.Kind == executor.EventText {
				text.WriteString(e.Text)
			}
		case executor.EventToolUse:
			require.NotNil(t, e.Tool, "event %d: tool_use without ToolUse", i)
			assert.NotEmpty(t, e.Tool.ID, "event %d: tool use without id", i)
			assert.NotEmpty(t, e.Tool.Name, "event %d: tool use without name", i)
			uses[e.Tool.ID] = true
		case executor.EventToolResult:
			require.NotNil(t, e.ToolResult, "event %d: tool_result without ToolResult", i)
			assert.True(t, uses[e.ToolResult.ToolUseID], "event %d: result for tool use %q that was not emitted before", i, e.ToolResult.ToolUseID)
		case executor.EventRetry:
		default:
			t.Errorf("event %d: kind %q is not in a runner's vocabulary", i, e.Kind)
		}
	}
	assert.Equal(t, text.String(), o.Completion.Content, "Content must be the concatenation of the text events")
	switch {
	case o.Err != nil:
		assert.True(t, o.Completion.IsError, "a failed parse must mark the completion as an error")
		assert.Equal(t, executor.FinishError, o.Completion.FinishReason)
	case o.Completion.IsError:
		assert.Equal(t, executor.FinishError, o.Completion.FinishReason)
	default:
		assert.Contains(t, []string{executor.FinishStop, executor.FinishMaxTurns}, o.Completion.FinishReason)
	}
}

// checks holds the contract of each behaviour.
var checks = map[Behaviour]func(*testing.T, Outcome, options){
	Plain: func(t *testing.T, o Outcome, _ options) {
		require.NoError(t, o.Err)
		assert.Equal(t, Shape{Text: true, End: EndStop}, o.Shape())
		assert.Contains(t, o.Completion.Content, "2", "the answer to 1+1")
		assert.NotEmpty(t, o.Completion.SessionID)
	},
	WriteAndRun: func(t *testing.T, o Outcome, op options) {
		require.NoError(t, o.Err)
		assert.Equal(t, Shape{
			Tools: []string{"use:Write", "result:ok", "use:Bash", "result:ok"},
			Text:  true, End: EndStop,
		}, o.Shape())
		uses := toolUses(o)
		require.Len(t, uses, 2)
		assert.Contains(t, string(uses[0].Input), "hello.txt", "the write names the file")
		if !op.writeWithoutContent {
			assert.Contains(t, string(uses[0].Input), "hello world", "the write carries the content")
		}
		assert.Contains(t, string(uses[1].Input), "cat hello.txt")
		results := toolResults(o)
		require.Len(t, results, 2)
		assert.Contains(t, results[1].Content, "hello world", "the command's output")
		assert.Equal(t, uses[1].ID, results[1].ToolUseID)
	},
	FailingTool: func(t *testing.T, o Outcome, _ options) {
		require.NoError(t, o.Err)
		assert.Equal(t, Shape{Tools: []string{"use:Bash", "result:error"}, Text: true, End: EndStop}, o.Shape())
		results := toolResults(o)
		require.Len(t, results, 1)
		assert.NotEmpty(t, results[0].Content, "a failed tool says why")
	},
	ErrorResult: func(t *testing.T, o Outcome, _ options) {
		require.NoError(t, o.Err, "the CLI reported the failure; parsing itself succeeded")
		s := o.Shape()
		assert.Empty(t, s.Tools)
		assert.Equal(t, EndError, s.End)
		assert.True(t, o.Completion.IsError)
		assert.NotEmpty(t, o.Completion.Errors, "the CLI's error message is kept")
	},
	CutStream: func(t *testing.T, o Outcome, _ options) {
		require.Error(t, o.Err, "a stream without its result is a failure")
		assert.Equal(t, EndFailed, o.Shape().End)
		assert.NotEmpty(t, o.Completion.Errors)
	},
}

// checkChunking parses the transcript again one byte per read: the
// outcome must not depend on how the pipe delivers the output.
func checkChunking(t *testing.T, r executor.Runner, stdout []byte, whole Outcome) {
	t.Helper()
	var o Outcome
	o.Completion, o.Err = r.Parse(context.Background(), iotest.OneByteReader(bytes.NewReader(stdout)), func(e executor.Event) error {
		o.Events = append(o.Events, e)
		return nil
	})
	assert.Equal(t, whole.Shape(), o.Shape(), "one byte per read changes the events")
	assert.Equal(t, whole.Completion.Content, o.Completion.Content)
	assert.Equal(t, whole.Err != nil, o.Err != nil)
}

// errStop is what the suite's emit returns to stop a parse.
var errStop = errors.New("runnertest: stop")

func checkEmitError(t *testing.T, r executor.Runner, stdout []byte) {
	n := 0
	_, err := r.Parse(context.Background(), bytes.NewReader(stdout), func(executor.Event) error {
		n++
		if n == 2 {
			return errStop
		}
		return nil
	})
	assert.ErrorIs(t, err, errStop, "an error from emit must be returned")
	assert.Equal(t, 2, n, "no event may follow a failed emit")
}

func checkCanceled(t *testing.T, r executor.Runner, stdout []byte) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := r.Parse(ctx, bytes.NewReader(stdout), func(executor.Event) error { return nil })
	assert.ErrorIs(t, err, context.Canceled, "a canceled context stops parsing")
}

func toolUses(o Outcome) []*executor.ToolUse {
	var out []*executor.ToolUse
	for _, e := range o.Events {
		if e.Kind == executor.EventToolUse {
			out = append(out, e.Tool)
		}
	}
	return out
}

func toolResults(o Outcome) []*executor.ToolResult {
	var out []*executor.ToolResult
	for _, e := range o.Events {
		if e.Kind == executor.EventToolResult {
			out = append(out, e.ToolResult)
		}
	}
	return out
}

// String renders a shape for test messages.
func (s Shape) String() string {
	return fmt.Sprintf("tools=%v text=%v end=%s", s.Tools, s.Text, s.End)
}
