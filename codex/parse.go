package codex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/jsonl"
	"github.com/agentbox/agentbox/internal/runnerkit"
)

// ErrNoResult is matched by the error Parse returns when the CLI's output
// ended without the turn's end (turn.completed or turn.failed): the CLI
// crashed, was killed, or its output was cut.
var ErrNoResult = errors.New("codex: the CLI's output ended without the end of its turn")

// IncompleteError is the error Parse returns for output without the
// turn's end. It matches ErrNoResult and unwraps to the read error that
// ended the output, if any. WithExit adds how the process ended.
type IncompleteError = runnerkit.IncompleteError

// WithExit adds the CLI's exit status and the end of its stderr to an
// error from Parse that reports a missing end of turn; other errors are
// returned unchanged. The CLI prints its start-up errors (a transcript it
// cannot resume, a configuration it refuses) on stderr before any event.
func WithExit(err error, res executor.ExecResult, stderr string) error {
	return runnerkit.WithExit(err, res, stderr)
}

// textSeparator goes between two agent messages of a turn (the text
// before a tool call and the text after it); it is emitted as a text
// event of its own, as the claude runner does between text blocks.
const textSeparator = "\n\n"

// retryPrefix starts the message of the error event the CLI prints before
// it retries a model request or a broken stream ("Reconnecting... 1/2
// (...)"); any other error event is the turn's failure, which turn.failed
// repeats.
const retryPrefix = "Reconnecting..."

// statusPattern finds the HTTP status in the CLI's messages about a failed
// model request ("unexpected status 401 Unauthorized", "last status: 429").
var statusPattern = regexp.MustCompile(`status:? (\d{3})\b`)

// Parse implements executor.Runner: it reads the CLI's JSON events up to
// the end of the turn (turn.completed or turn.failed) and maps them to
// events and a completion as the package documentation describes. It does
// not wait for the CLI's exit: the caller drains what follows.
func (r *Runner) Parse(ctx context.Context, stdout io.Reader, emit func(executor.Event) error) (executor.Completion, error) {
	p := &parser{r: r, emit: emit, started: map[string]bool{}}
	lines := jsonl.NewReader(stdout, r.maxLine)
	for !p.done {
		if ctx.Err() != nil {
			return p.fail(fmt.Errorf("codex: parsing stopped: %w", context.Cause(ctx)))
		}
		line, err := lines.ReadLine()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, jsonl.ErrLineTooLong) {
			return p.fail(fmt.Errorf("codex: reading the CLI's output: %w", err))
		}
		if err != nil {
			if cause := context.Cause(ctx); ctx.Err() != nil && !errors.Is(err, cause) {
				err = fmt.Errorf("%w (%w)", err, cause)
			}
			return p.fail(&IncompleteError{Sentinel: ErrNoResult, Lines: lines.Line(), LastType: p.lastType, Cause: err})
		}
		if err := p.line(line); err != nil {
			return p.finish(), err
		}
	}
	if !p.done {
		if ctx.Err() != nil {
			return p.fail(fmt.Errorf("codex: parsing stopped: %w", context.Cause(ctx)))
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
	lastType string
	done     bool
	// started marks tool items whose use was emitted at item.started.
	started map[string]bool
	// errMsg is the last error event that was not a retry notice.
	errMsg string
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
	case "thread.started":
		id := v.Get("thread_id").String()
		p.comp.SessionID = id
		return p.emit(executor.Event{Kind: executor.EventInit, Init: &executor.InitInfo{SessionID: id}})
	case "turn.started":
		p.comp.NumTurns++
	case "item.started":
		return p.itemStarted(v.Get("item"))
	case "item.completed":
		return p.itemCompleted(v.Get("item"))
	case "error":
		msg := v.Get("message").String()
		if strings.HasPrefix(msg, retryPrefix) {
			return p.emit(executor.Event{Kind: executor.EventRetry, Text: msg})
		}
		p.errMsg = msg
	case "turn.completed":
		p.done = true
		p.usage(v.Get("usage"))
		p.comp.FinishReason = executor.FinishStop
	case "turn.failed":
		p.done = true
		p.usage(v.Get("usage"))
		msg := v.Get("error.message").String()
		if msg == "" {
			msg = p.errMsg
		}
		if msg == "" {
			msg = "the CLI reported a failed turn without a message"
		}
		p.comp.IsError, p.comp.FinishReason = true, executor.FinishError
		p.comp.Subtype = "turn.failed"
		p.comp.Errors = []string{msg}
		if m := statusPattern.FindStringSubmatch(msg); m != nil {
			p.comp.APIErrorStatus, _ = strconv.Atoi(m[1])
		}
	default:
		// item.updated (a running command, the to-do list) and types of
		// later versions.
		p.r.logger.Debug("skipping an event", "type", typ)
	}
	return nil
}

// usage copies the turn's usage. The CLI reports the session's running
// total, so a resumed session's figures include its earlier turns; the
// middleware puts the model proxy's metered figures beside them.
func (p *parser) usage(u gjson.Result) {
	if !u.Exists() {
		return
	}
	cached, written := u.Get("cached_input_tokens").Int(), u.Get("cache_write_input_tokens").Int()
	p.comp.Usage = executor.Usage{
		InputTokens:              max(0, u.Get("input_tokens").Int()-cached-written),
		OutputTokens:             u.Get("output_tokens").Int(),
		CacheReadInputTokens:     cached,
		CacheCreationInputTokens: written,
	}
}

// itemStarted reports a tool call when its item starts, so that a client
// sees a long command before it ends.
func (p *parser) itemStarted(it gjson.Result) error {
	uses := toolUses(it)
	if len(uses) == 0 {
		return nil
	}
	p.started[it.Get("id").String()] = true
	for _, u := range uses {
		if err := p.emit(executor.Event{Kind: executor.EventToolUse, Tool: u}); err != nil {
			return err
		}
	}
	return nil
}

// itemCompleted maps a finished item: text, reasoning, or a tool call's
// result (with its use first when the item was not reported started).
func (p *parser) itemCompleted(it gjson.Result) error {
	id := it.Get("id").String()
	switch it.Get("type").String() {
	case "agent_message":
		return p.text(it.Get("text").String())
	case "reasoning":
		if t := it.Get("text").String(); t != "" {
			return p.emit(executor.Event{Kind: executor.EventThinking, Text: t})
		}
		return nil
	case "error":
		// A notice the CLI raises without failing the turn (a model it
		// has no metadata for, an unstable feature).
		p.r.logger.Warn("the CLI reported a problem", "message", it.Get("message").String())
		return nil
	}
	if !p.started[id] {
		for _, u := range toolUses(it) {
			if err := p.emit(executor.Event{Kind: executor.EventToolUse, Tool: u}); err != nil {
				return err
			}
		}
	}
	delete(p.started, id)
	for _, res := range toolResults(it) {
		if err := p.emit(executor.Event{Kind: executor.EventToolResult, ToolResult: res}); err != nil {
			return err
		}
	}
	return nil
}

// text emits an agent message, after a separator when text came before.
func (p *parser) text(t string) error {
	if t == "" {
		return nil
	}
	if p.content.Len() > 0 {
		p.content.WriteString(textSeparator)
		if err := p.emit(executor.Event{Kind: executor.EventText, Text: textSeparator}); err != nil {
			return err
		}
	}
	p.content.WriteString(t)
	return p.emit(executor.Event{Kind: executor.EventText, Text: t})
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

// truncate cuts s to n bytes for a log line.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// rawJSON is v's raw JSON, or nil when there is none.
func rawJSON(v gjson.Result) json.RawMessage {
	if !v.Exists() || v.Raw == "" {
		return nil
	}
	return json.RawMessage(v.Raw)
}
