package cursor

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
)

// ErrNoResult is returned by Parse when the stream ended without a result
// event: the CLI failed, was killed, or its output was cut. Cursor documents
// that a failed run may end without a terminal event.
var ErrNoResult = errors.New("cursor: stream ended without a result event")

// Parse reads cursor-agent's stream-json output to its end, emitting events
// in order, and returns the completion. See the package documentation for
// the mapping. Errors from emit stop parsing and are returned as they are;
// a stream without a result returns the partial completion (FinishError)
// and an error wrapping ErrNoResult.
func (r *Runner) Parse(ctx context.Context, stdout io.Reader, emit func(executor.Event) error) (executor.Completion, error) {
	p := &parser{log: r.logger, emit: emit, started: map[string]bool{}}
	lines := jsonl.NewReader(stdout, r.maxLine)
	for {
		if err := ctx.Err(); err != nil {
			return p.fail(fmt.Errorf("cursor: parsing stopped: %w", context.Cause(ctx)))
		}
		line, err := lines.ReadLine()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, jsonl.ErrLineTooLong) {
			r.logger.Warn("skipping an over-long output line", "error", err)
			continue
		}
		if err != nil {
			return p.fail(fmt.Errorf("cursor: reading the CLI's output: %w", err))
		}
		if err := p.line(line); err != nil {
			p.comp.Content = p.emitted.String()
			return p.comp, err
		}
	}
	if !p.done {
		return p.fail(fmt.Errorf("%w (after %d lines); the CLI failed or was stopped, see its stderr", ErrNoResult, lines.Line()))
	}
	return p.comp, nil
}

// parser holds the state of one Parse call.
type parser struct {
	log     hclogger
	emit    func(executor.Event) error
	comp    executor.Completion
	done    bool            // the result event was seen
	started map[string]bool // tool call ids already emitted as EventToolUse

	// Text bookkeeping (see assistant): all text emitted (Content, with
	// separators), the CLI's own text (without them), text emitted since
	// the last tool call, and text emitted as deltas since the last
	// consolidated message.
	emitted strings.Builder
	raw     strings.Builder
	segment strings.Builder
	pending strings.Builder
	deltas  int  // deltas in pending
	sep     bool // a separator goes before the next text
}

// textSeparator goes between assistant messages that a tool call or
// another message separates; Cursor's own result text joins them without
// one. It is emitted as a text event of its own, as package claude does.
const textSeparator = "\n\n"

// hclogger is the part of hclog.Logger the parser uses.
type hclogger interface {
	Debug(msg string, args ...any)
}

// fail marks the completion failed and returns it with err.
func (p *parser) fail(err error) (executor.Completion, error) {
	p.comp.Content = p.emitted.String()
	p.comp.IsError = true
	p.comp.FinishReason = executor.FinishError
	p.comp.Errors = append(p.comp.Errors, err.Error())
	return p.comp, err
}

// line handles one output line.
func (p *parser) line(line []byte) error {
	if len(strings.TrimSpace(string(line))) == 0 {
		return nil
	}
	if !gjson.ValidBytes(line) {
		p.log.Debug("skipping a line that is not JSON", "line", truncate(string(line), 200))
		return nil
	}
	v := gjson.ParseBytes(line)
	if p.done {
		p.log.Debug("ignoring output after the result event", "type", v.Get("type").String())
		return nil
	}
	switch typ := v.Get("type").String(); typ {
	case "system":
		return p.system(v)
	case "user":
		return nil // the CLI echoes the prompt
	case "thinking":
		if v.Get("subtype").String() == "delta" {
			if t := v.Get("text").String(); t != "" {
				return p.emit(executor.Event{Kind: executor.EventThinking, Text: t})
			}
		}
		return nil
	case "assistant":
		return p.assistant(v)
	case "tool_call":
		return p.toolCall(v)
	case "result":
		return p.result(v)
	default:
		p.log.Debug("skipping an unknown event type", "type", typ)
		return nil
	}
}

func (p *parser) system(v gjson.Result) error {
	if v.Get("subtype").String() != "init" {
		p.log.Debug("skipping a system event", "subtype", v.Get("subtype").String())
		return nil
	}
	info := &executor.InitInfo{
		SessionID:  v.Get("session_id").String(),
		Model:      v.Get("model").String(),
		Permission: v.Get("permissionMode").String(),
	}
	if p.comp.SessionID == "" {
		p.comp.SessionID = info.SessionID
	}
	return p.emit(executor.Event{Kind: executor.EventInit, Init: info})
}

// assistant emits the new part of an assistant message. With
// --stream-partial-output the CLI sends token deltas (timestamp_ms, no
// model_call_id) and then the whole message again, consolidated (with
// model_call_id, or without timestamp_ms); without it, only consolidated
// messages. Consolidated text already streamed as deltas, or repeating the
// current segment or the whole response, is not emitted again.
func (p *parser) assistant(v gjson.Result) error {
	var b strings.Builder
	for _, c := range v.Get("message.content").Array() {
		if c.Get("type").String() == "text" {
			b.WriteString(c.Get("text").String())
		}
	}
	text := b.String()
	if text == "" {
		return nil
	}
	delta := v.Get("timestamp_ms").Exists() && !v.Get("model_call_id").Exists()
	// A delta-shaped event repeating all of several deltas is their
	// consolidation, not new text.
	repeat := p.deltas >= 2 && text == p.pending.String()
	if delta && !repeat {
		p.pending.WriteString(text)
		p.deltas++
		return p.text(text)
	}
	pending, segment, emitted := p.pending.String(), p.segment.String(), p.raw.String()
	p.pending.Reset()
	p.deltas = 0
	switch {
	case pending != "":
		if rest, ok := strings.CutPrefix(text, pending); ok {
			return p.text(rest)
		}
		p.log.Debug("consolidated assistant message differs from its deltas; keeping the deltas", "deltas", len(pending), "message", len(text))
		return nil
	case segment != "" && text == segment, emitted != "" && text == emitted:
		return nil
	case emitted != "" && strings.HasPrefix(text, emitted):
		return p.text(text[len(emitted):])
	default:
		p.sep = p.sep || segment != "" // a new whole message
		return p.text(text)
	}
}

// text emits a text event and records it, preceded by a pending
// separator.
func (p *parser) text(t string) error {
	if t == "" {
		return nil
	}
	if p.sep && p.emitted.Len() > 0 {
		p.emitted.WriteString(textSeparator)
		if err := p.emit(executor.Event{Kind: executor.EventText, Text: textSeparator}); err != nil {
			return err
		}
	}
	p.sep = false
	p.raw.WriteString(t)
	p.emitted.WriteString(t)
	p.segment.WriteString(t)
	return p.emit(executor.Event{Kind: executor.EventText, Text: t})
}

func (p *parser) toolCall(v gjson.Result) error {
	call, ok := findToolCall(v.Get("tool_call"))
	if !ok {
		p.log.Debug("skipping a tool_call without a known payload", "subtype", v.Get("subtype").String())
		return nil
	}
	id := v.Get("call_id").String()
	if id == "" {
		id = v.Get("tool_call.toolCallId").String()
	}
	p.segment.Reset()
	p.pending.Reset()
	p.deltas = 0
	p.sep = true
	switch sub := v.Get("subtype").String(); sub {
	case "started":
		return p.toolUse(id, call)
	case "completed":
		if !p.started[id] {
			if err := p.toolUse(id, call); err != nil {
				return err
			}
		}
		content, isError := call.result()
		return p.emit(executor.Event{Kind: executor.EventToolResult, ToolResult: &executor.ToolResult{
			ToolUseID: id, Content: content, IsError: isError,
		}})
	default:
		p.log.Debug("skipping a tool_call event", "subtype", sub)
		return nil
	}
}

func (p *parser) toolUse(id string, call toolCall) error {
	if p.started[id] {
		return nil
	}
	p.started[id] = true
	return p.emit(executor.Event{Kind: executor.EventToolUse, Tool: &executor.ToolUse{
		ID: id, Name: call.name(), Input: json.RawMessage(call.input()),
	}})
}

// result completes the run. On success, text of the result the stream did
// not carry (a run without assistant events) is emitted so that Content
// agrees with it; with is_error the result text is the error message.
func (p *parser) result(v gjson.Result) error {
	p.done = true
	c := &p.comp
	c.Subtype = v.Get("subtype").String()
	c.IsError = v.Get("is_error").Bool()
	c.Duration = time.Duration(v.Get("duration_ms").Int()) * time.Millisecond
	if s := v.Get("session_id").String(); s != "" {
		c.SessionID = s
	}
	c.Usage = usage(v.Get("usage"))
	res := v.Get("result").String()
	if c.IsError {
		c.FinishReason = executor.FinishError
		if res == "" {
			res = "cursor-agent reported an error without a message; see its stderr"
		}
		c.Errors = append(c.Errors, res)
	} else {
		c.FinishReason = executor.FinishStop
		emitted := p.raw.String()
		if rest, ok := strings.CutPrefix(res, emitted); ok && rest != "" {
			if err := p.text(rest); err != nil {
				return err
			}
		} else if !ok {
			p.log.Debug("result text differs from the streamed text; keeping the streamed text", "streamed", len(emitted), "result", len(res))
		}
	}
	c.Content = p.emitted.String()
	return nil
}

// usage reads token counts if the CLI reports them (older versions do not;
// both camelCase and snake_case keys are accepted).
func usage(u gjson.Result) executor.Usage {
	if !u.IsObject() {
		return executor.Usage{}
	}
	pick := func(keys ...string) int64 {
		for _, k := range keys {
			if f := u.Get(k); f.Exists() {
				return f.Int()
			}
		}
		return 0
	}
	return executor.Usage{
		InputTokens:              pick("inputTokens", "input_tokens"),
		OutputTokens:             pick("outputTokens", "output_tokens"),
		CacheReadInputTokens:     pick("cacheReadTokens", "cache_read_input_tokens"),
		CacheCreationInputTokens: pick("cacheWriteTokens", "cache_creation_input_tokens"),
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
