package claude

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/jsonl"
	"github.com/agentbox/agentbox/internal/reminder"
	"github.com/agentbox/agentbox/internal/runnerkit"
)

// ErrNoResult is matched by the error Parse returns when the CLI's output
// ended without a final result line: the CLI crashed, was killed (SIGTERM
// leaves no result), or its output was cut.
var ErrNoResult = errors.New("claude: the CLI's output ended without a result")

// IncompleteError is the error Parse returns for output without a result.
// It matches ErrNoResult and unwraps to the read error that ended the
// output, if any. WithExit adds how the process ended.
type IncompleteError = runnerkit.IncompleteError

// WithExit adds the CLI's exit status and the end of its stderr to an
// error from Parse that reports a missing result; other errors are
// returned unchanged.
func WithExit(err error, res executor.ExecResult, stderr string) error {
	return runnerkit.WithExit(err, res, stderr)
}

// textSeparator goes between text blocks that are not adjacent blocks of
// one assistant message (different turns of the agent, or text around a
// tool call). It is emitted as a text event of its own.
const textSeparator = "\n\n"

// Parse implements executor.Runner: it reads the CLI's stream-json output
// up to its result (WithResults; to its end with WithResults(0), or when
// the agent started work in the background, whose completions add main
// turns and results) and maps it to events and a completion as the
// package documentation describes. It does not wait for the CLI's exit,
// which takes 30-80 ms after the result (MCP servers are stopped then):
// the caller drains what follows.
func (r *Runner) Parse(ctx context.Context, stdout io.Reader, emit func(executor.Event) error) (executor.Completion, error) {
	p := &parser{r: r, emit: emit, streamed: map[string]bool{}, blockCount: map[string]int{}}
	lines := jsonl.NewReader(stdout, r.maxLine)
	for {
		if ctx.Err() != nil {
			return p.fail(fmt.Errorf("claude: parsing stopped: %w", context.Cause(ctx)))
		}
		line, err := lines.ReadLine()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if p.results > 0 && !errors.Is(err, jsonl.ErrLineTooLong) {
				// The CLI exits non-zero after some results (max turns);
				// the pipe then reports that after the result line. With
				// work in the background, a stall or the run's end stopped
				// the wait for it.
				if p.background {
					r.logger.Info("the output ended while the agent's background work ran; the answer is what it said until then", "error", err)
				} else {
					r.logger.Debug("output ended after the result", "error", err)
				}
				break
			}
			if errors.Is(err, jsonl.ErrLineTooLong) {
				return p.fail(fmt.Errorf("claude: reading the CLI's output: %w", err))
			}
			if cause := context.Cause(ctx); ctx.Err() != nil && !errors.Is(err, cause) {
				err = fmt.Errorf("%w (%w)", err, cause)
			}
			return p.fail(&IncompleteError{Sentinel: ErrNoResult, Lines: lines.Line(), LastType: p.lastType, Cause: err})
		}
		if err := p.line(line); err != nil {
			return p.finish(), err
		}
		if r.results > 0 && p.results >= r.results && !p.background {
			break
		}
	}
	if p.results == 0 {
		if ctx.Err() != nil {
			return p.fail(fmt.Errorf("claude: parsing stopped: %w", context.Cause(ctx)))
		}
		return p.fail(&IncompleteError{Sentinel: ErrNoResult, Lines: lines.Line(), LastType: p.lastType})
	}
	return p.finish(), nil
}

// parser is the state of one Parse call.
type parser struct {
	r    *Runner
	emit func(executor.Event) error

	comp     executor.Completion
	content  strings.Builder
	results  int
	lastType string

	// streamed marks message ids whose text arrived as stream_event deltas,
	// so the complete assistant message does not repeat it.
	streamed map[string]bool
	// blockCount numbers the blocks of a message across the separate
	// assistant lines the CLI writes for them.
	blockCount map[string]int
	// cur is the message being streamed (stream_event message_start).
	cur string
	// lastText locates the last text block that produced text.
	lastTextMsg   string
	lastTextIndex int
	// pendingSep: the current text block must be preceded by a separator
	// once it produces text.
	pendingSep bool
	// errTexts are the texts of synthetic error messages.
	errTexts []string
	// curStopped: the streamed message cur got its stop reason
	// (message_delta); a message without one broke off.
	curStopped bool
	// resumed: the CLI asked the model to resume a broken answer; the
	// next text block continues it without a separator.
	resumed bool
	// background: the agent started work in the background (a Task
	// subagent or a Bash command with run_in_background). Each one's
	// completion starts another main turn with a result of its own (a
	// subagent's report reaches the answer only there), and the CLI
	// exits once none is left, so Parse reads to the end.
	background bool
}

// line handles one line of output.
func (p *parser) line(line []byte) error {
	if len(strings.TrimSpace(string(line))) == 0 {
		return nil
	}
	if !gjson.ValidBytes(line) {
		p.r.logger.Warn("skipping a line that is not JSON", "line", truncate(string(line), 200))
		return nil
	}
	v := gjson.ParseBytes(line)
	typ := v.Get("type").String()
	p.lastType = typ
	switch typ {
	case "system":
		return p.system(v)
	case "stream_event":
		return p.streamEvent(v)
	case "assistant":
		return p.assistant(v)
	case "user":
		return p.user(v)
	case "result":
		p.result(v)
		return nil
	default:
		p.r.logger.Debug("skipping an output line of unknown type", "type", typ)
		return nil
	}
}

// system handles init, api_retry and the start of background work; other
// subtypes are progress noise.
func (p *parser) system(v gjson.Result) error {
	switch v.Get("subtype").String() {
	case "init":
		info := &executor.InitInfo{
			SessionID:  v.Get("session_id").String(),
			Model:      v.Get("model").String(),
			Tools:      stringList(v.Get("tools")),
			Skills:     stringList(v.Get("skills")),
			Permission: v.Get("permissionMode").String(),
			Version:    v.Get("claude_code_version").String(),
		}
		for _, s := range v.Get("mcp_servers").Array() {
			if info.MCPServers == nil {
				info.MCPServers = map[string]string{}
			}
			info.MCPServers[s.Get("name").String()] = s.Get("status").String()
		}
		if p.comp.SessionID == "" {
			p.comp.SessionID = info.SessionID
		}
		return p.emit(executor.Event{Kind: executor.EventInit, Init: info})
	case "task_started", "background_tasks_changed":
		if !p.background && (v.Get("is_backgrounded").Bool() || len(v.Get("tasks").Array()) > 0) {
			p.background = true
			p.r.logger.Debug("the agent works in the background; the answer takes every result to the end of the output")
		}
		return nil
	case "api_retry":
		return p.emit(executor.Event{Kind: executor.EventRetry, Text: fmt.Sprintf(
			"model API call failed with status %d (%s); retry %d of %d in %s",
			v.Get("error_status").Int(), v.Get("error").String(), v.Get("attempt").Int(), v.Get("max_retries").Int(),
			(time.Duration(v.Get("retry_delay_ms").Float()) * time.Millisecond).Round(time.Millisecond))})
	default:
		p.r.logger.Debug("skipping a system line", "subtype", v.Get("subtype").String())
		return nil
	}
}

// topLevel reports whether a line belongs to the main agent, not to a
// subagent (Task) whose text is not part of the answer.
func topLevel(v gjson.Result) bool {
	pt := v.Get("parent_tool_use_id")
	return !pt.Exists() || pt.Type == gjson.Null || pt.String() == ""
}

// streamEvent handles partial-message deltas: text and thinking stream
// from here; tool calls are reported from the complete assistant message,
// where their input is whole.
func (p *parser) streamEvent(v gjson.Result) error {
	if !topLevel(v) {
		return nil
	}
	ev := v.Get("event")
	switch ev.Get("type").String() {
	case "message_start":
		p.cur = ev.Get("message.id").String()
		p.streamed[p.cur] = true
		p.curStopped = false
	case "message_delta":
		if sr := ev.Get("delta.stop_reason"); sr.Exists() && sr.Type != gjson.Null {
			p.curStopped = true
		}
	case "content_block_start":
		if ev.Get("content_block.type").String() == "text" {
			p.startText(p.cur, int(ev.Get("index").Int()))
			if t := ev.Get("content_block.text").String(); t != "" {
				return p.text(t)
			}
		}
	case "content_block_delta":
		d := ev.Get("delta")
		switch d.Get("type").String() {
		case "text_delta":
			return p.text(d.Get("text").String())
		case "thinking_delta":
			if t := d.Get("thinking").String(); t != "" {
				return p.emit(executor.Event{Kind: executor.EventThinking, Text: t})
			}
		}
	}
	return nil
}

// startText begins a text block at index of message msg, deciding whether
// a separator must precede its text.
func (p *parser) startText(msg string, index int) {
	p.pendingSep = p.content.Len() > 0 && (msg != p.lastTextMsg || index != p.lastTextIndex+1) && !p.resumed
	p.resumed = false
	p.lastTextMsg, p.lastTextIndex = msg, index
}

// text emits assistant text, preceded by a pending separator.
func (p *parser) text(t string) error {
	if t == "" {
		return nil
	}
	if p.pendingSep {
		p.pendingSep = false
		p.content.WriteString(textSeparator)
		if err := p.emit(executor.Event{Kind: executor.EventText, Text: textSeparator}); err != nil {
			return err
		}
	}
	p.content.WriteString(t)
	return p.emit(executor.Event{Kind: executor.EventText, Text: t})
}

// assistant handles a complete assistant message (the CLI writes one line
// per content block).
func (p *parser) assistant(v gjson.Result) error {
	msg := v.Get("message")
	id := msg.Get("id").String()
	if id == "" {
		// An assistant line sent on stdin, echoed back: input, not output.
		p.r.logger.Debug("skipping an echoed input message")
		return nil
	}
	if v.Get("error").Exists() {
		// A synthetic message standing for a failed API call: its text is
		// the error, reported by the result, not part of the answer.
		for _, b := range msg.Get("content").Array() {
			if t := b.Get("text").String(); t != "" {
				p.errTexts = append(p.errTexts, t)
			}
		}
		return nil
	}
	top := topLevel(v)
	for _, b := range msg.Get("content").Array() {
		index := p.blockCount[id]
		p.blockCount[id]++
		switch b.Get("type").String() {
		case "text":
			if !top || p.streamed[id] {
				continue
			}
			p.startText(id, index)
			if err := p.text(b.Get("text").String()); err != nil {
				return err
			}
		case "thinking":
			if !top || p.streamed[id] {
				continue
			}
			if t := b.Get("thinking").String(); t != "" {
				if err := p.emit(executor.Event{Kind: executor.EventThinking, Text: t}); err != nil {
					return err
				}
			}
		case "tool_use":
			if top {
				// Text after a tool call is a new block, not the
				// continuation of a resumed answer.
				p.resumed = false
			}
			input := json.RawMessage(b.Get("input").Raw)
			if len(input) == 0 {
				input = nil
			}
			if err := p.emit(executor.Event{Kind: executor.EventToolUse, Tool: &executor.ToolUse{
				ID: b.Get("id").String(), Name: b.Get("name").String(), Input: input,
				ParentToolUseID: parentID(v),
			}}); err != nil {
				return err
			}
		}
	}
	return nil
}

// user handles tool results; replayed and synthetic user messages (skill
// bodies, interruption notes) are not events, except the CLI's request to
// resume a broken answer, which is a retry.
func (p *parser) user(v gjson.Result) error {
	if v.Get("isReplay").Bool() {
		return nil
	}
	if v.Get("isSynthetic").Bool() {
		if p.isResume(v) {
			if topLevel(v) {
				p.resumed = true
			}
			return p.emit(executor.Event{Kind: executor.EventRetry, Text: resumeNotice})
		}
		return nil
	}
	parent := parentID(v)
	for _, b := range v.Get("message.content").Array() {
		if b.Get("type").String() != "tool_result" {
			continue
		}
		if err := p.emit(executor.Event{Kind: executor.EventToolResult, ToolResult: &executor.ToolResult{
			ToolUseID:       b.Get("tool_use_id").String(),
			Content:         StripSystemReminders(resultText(b.Get("content"))),
			IsError:         b.Get("is_error").Bool(),
			ParentToolUseID: parent,
		}}); err != nil {
			return err
		}
	}
	return nil
}

// resumeNotice is the text of the retry event for the CLI's resumption
// of a broken answer.
const resumeNotice = "the model's answer broke off mid-stream; the CLI asked the model to resume it (the text that follows continues the answer)"

// resumePrefix starts the synthetic user message with which the CLI
// (2.1.330) asks the model to resume an answer whose stream broke off.
const resumePrefix = "Your response above was cut off"

// isResume reports whether a synthetic user message is the CLI's request
// to resume a broken answer: plain text (no tool result) after a streamed
// message that ended without a stop reason, or, in whole-message output,
// the CLI's wording.
func (p *parser) isResume(v gjson.Result) bool {
	text := ""
	for _, b := range v.Get("message.content").Array() {
		if b.Get("type").String() == "tool_result" {
			return false
		}
		text += b.Get("text").String()
	}
	if c := v.Get("message.content"); c.Type == gjson.String {
		text = c.String()
	}
	if text == "" {
		return false
	}
	broken := topLevel(v) && p.cur != "" && !p.curStopped
	return broken || strings.HasPrefix(text, resumePrefix)
}

// parentID is the parent_tool_use_id of a subagent's line ("" for the
// main agent's).
func parentID(v gjson.Result) string {
	if topLevel(v) {
		return ""
	}
	return v.Get("parent_tool_use_id").String()
}

// StripSystemReminders removes the <system-reminder> blocks the CLI
// (2.1.330) appends to tool results. They are the CLI's notes to the
// model (for example how to treat the output, or that a file changed),
// not the tool's output: the model still gets them, since the CLI sends
// the result to the model itself; a client showing the tool's output
// does not. An unterminated block is kept, so output that merely
// mentions the tag is not cut.
func StripSystemReminders(s string) string { return reminder.Strip(s) }

// resultText flattens a tool_result's content: a string, or blocks of
// which text is kept and others are named.
func resultText(c gjson.Result) string {
	if !c.IsArray() {
		return c.String()
	}
	var parts []string
	for _, b := range c.Array() {
		if b.Get("type").String() == "text" {
			parts = append(parts, b.Get("text").String())
		} else {
			parts = append(parts, "["+b.Get("type").String()+"]")
		}
	}
	return strings.Join(parts, "\n")
}

// result records the CLI's final result. With several prompts on stdin
// there is one result per prompt: usage and turns add up, the rest is the
// last one's (total_cost_usd is already cumulative).
func (p *parser) result(v gjson.Result) {
	p.results++
	c := &p.comp
	c.IsError = v.Get("is_error").Bool()
	c.Subtype = v.Get("subtype").String()
	if s := v.Get("session_id").String(); s != "" {
		c.SessionID = s
	}
	c.NumTurns += int(v.Get("num_turns").Int())
	c.Duration += time.Duration(v.Get("duration_ms").Int()) * time.Millisecond
	c.CostUSD = v.Get("total_cost_usd").Float()
	c.APIErrorStatus = int(v.Get("api_error_status").Int())
	u := v.Get("usage")
	c.Usage = c.Usage.Add(executor.Usage{
		InputTokens:              u.Get("input_tokens").Int(),
		OutputTokens:             u.Get("output_tokens").Int(),
		CacheCreationInputTokens: u.Get("cache_creation_input_tokens").Int(),
		CacheReadInputTokens:     u.Get("cache_read_input_tokens").Int(),
	})
	c.PermissionDenials = nil
	for _, d := range v.Get("permission_denials").Array() {
		c.PermissionDenials = append(c.PermissionDenials, executor.PermissionDenial{
			ToolName: d.Get("tool_name").String(), ToolUseID: d.Get("tool_use_id").String(),
			Input: json.RawMessage(d.Get("tool_input").Raw),
		})
	}
	c.Errors = stringList(v.Get("errors"))
	if sr := v.Get("stop_reason"); !c.IsError && sr.Exists() && sr.Type == gjson.Null {
		// The CLI reports a model stream that broke off (connection
		// dropped, no message_stop) as a success with the partial text
		// and no stop reason; every complete answer has one.
		c.IsError = true
		c.Errors = []string{"the model's answer broke off before it was complete (the stream ended without a stop reason); the content is partial, retry the request"}
	}
	switch {
	case !c.IsError:
		c.FinishReason = executor.FinishStop
		c.Errors = nil
	case c.Subtype == "error_max_turns":
		c.FinishReason = executor.FinishMaxTurns
	default:
		c.FinishReason = executor.FinishError
	}
	if c.IsError && len(c.Errors) == 0 {
		if t := v.Get("result").String(); t != "" {
			c.Errors = []string{t}
		} else if len(p.errTexts) > 0 {
			c.Errors = append([]string(nil), p.errTexts...)
		} else {
			c.Errors = []string{fmt.Sprintf("the CLI reported %q without a message", c.Subtype)}
		}
	}
}

// finish returns the completion with the content emitted so far.
func (p *parser) finish() executor.Completion {
	p.comp.Content = p.content.String()
	return p.comp
}

// fail returns the completion so far marked as failed, and err.
func (p *parser) fail(err error) (executor.Completion, error) {
	c := p.finish()
	c.IsError = true
	c.FinishReason = executor.FinishError
	c.Errors = append(c.Errors, err.Error())
	return c, err
}

// stringList returns a JSON array's strings.
func stringList(v gjson.Result) []string {
	var out []string
	for _, s := range v.Array() {
		out = append(out, s.String())
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
