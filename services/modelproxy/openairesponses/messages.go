package openairesponses

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/tidwall/gjson"
)

// defaultMaxTokens is max_tokens (which the Messages API requires) when
// the request names no max_output_tokens; the model proxy always sets one.
const defaultMaxTokens = 32000

// ephemeral marks a prompt cache breakpoint.
var ephemeral = map[string]string{"type": "ephemeral"}

// messagesBody encodes r as an Anthropic Messages request. The
// instructions and the last message end with a prompt cache breakpoint
// each, as Claude Code sets them, so that each turn reads the conversation
// so far from the cache.
func messagesBody(r *request, o MessagesOptions) ([]byte, error) {
	var msgs []map[string]any
	for _, t := range r.turns {
		var blocks []map[string]any
		for _, p := range t.parts {
			if b := messagesBlock(p); b != nil {
				blocks = append(blocks, b)
			}
		}
		if len(blocks) == 0 {
			continue
		}
		if len(msgs) == 0 && t.role == "assistant" {
			// The API wants a user message first.
			msgs = append(msgs, map[string]any{"role": "user", "content": []map[string]any{{"type": "text", "text": "(continued)"}}})
		}
		msgs = append(msgs, map[string]any{"role": t.role, "content": blocks})
	}
	if len(msgs) == 0 {
		return nil, fmt.Errorf("the request has no user message")
	}
	last := msgs[len(msgs)-1]["content"].([]map[string]any)
	last[len(last)-1]["cache_control"] = ephemeral
	body := map[string]any{"model": cmpOr(o.Model, r.model), "messages": msgs, "stream": r.stream,
		"max_tokens": capTokens(cmpInt(r.maxOutput, defaultMaxTokens), o.MaxTokensCeiling)}
	if s := r.systemText(); s != "" {
		body["system"] = []map[string]any{{"type": "text", "text": s, "cache_control": ephemeral}}
	}
	if len(r.tools) > 0 {
		tools := make([]map[string]any, len(r.tools))
		for i, f := range r.tools {
			tools[i] = map[string]any{"name": f.name, "description": f.description, "input_schema": f.parameters}
		}
		body["tools"] = tools
		choice := map[string]any{"type": "auto"}
		switch r.choice {
		case "auto":
		case "none":
			choice["type"] = "none"
		case "required":
			choice["type"] = "any"
		default:
			choice = map[string]any{"type": "tool", "name": r.choice}
		}
		if !r.parallel && choice["type"] != "none" {
			choice["disable_parallel_tool_use"] = true
		}
		body["tool_choice"] = choice
	}
	if r.temperature != nil {
		body["temperature"] = *r.temperature
	} else if r.topP != nil {
		body["top_p"] = *r.topP // the API takes one of the two
	}
	return json.Marshal(body)
}

// cmpInt is a, or b when a is not positive.
func cmpInt(a, b int64) int64 {
	if a > 0 {
		return a
	}
	return b
}

// messagesBlock is one part as a content block, or nil for an empty text
// (which the API refuses).
func messagesBlock(p part) map[string]any {
	switch p.kind {
	case "text":
		if strings.TrimSpace(p.text) == "" {
			return nil
		}
		return map[string]any{"type": "text", "text": p.text}
	case "image":
		if mediaType, data, ok := dataURL(p.image); ok {
			return map[string]any{"type": "image", "source": map[string]string{"type": "base64", "media_type": mediaType, "data": data}}
		}
		return map[string]any{"type": "image", "source": map[string]string{"type": "url", "url": p.image}}
	case "call":
		var input any
		if err := json.Unmarshal([]byte(p.args), &input); err != nil {
			input = map[string]string{"arguments": p.args}
		}
		if _, ok := input.(map[string]any); !ok {
			input = map[string]any{"arguments": input}
		}
		return map[string]any{"type": "tool_use", "id": p.id, "name": p.name, "input": input}
	case "result":
		b := map[string]any{"type": "tool_result", "tool_use_id": p.id, "content": p.text}
		if p.text == "" {
			b["content"] = "(no output)"
		}
		return b
	}
	return nil
}

// dataURL splits a data: URL of base64 data.
func dataURL(u string) (mediaType, data string, ok bool) {
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		return "", "", false
	}
	meta, data, ok := strings.Cut(rest, ",")
	mediaType, b64 := strings.CutSuffix(meta, ";base64")
	if !ok || !b64 {
		return "", "", false
	}
	return mediaType, data, true
}

// messagesUsage reads a Messages usage object, with what the stream said
// before (message_delta's usage overrides message_start's field by field).
func messagesUsage(v gjson.Result, u *usage, in *[3]int64) {
	set := func(dst *int64, key string) {
		if x := v.Get(key); x.Exists() && x.Type == gjson.Number {
			*dst = x.Int()
		}
	}
	set(&in[0], "input_tokens")
	set(&in[1], "cache_read_input_tokens")
	set(&in[2], "cache_creation_input_tokens")
	set(&u.output, "output_tokens")
	u.input, u.cached, u.cacheWrite = in[0]+in[1]+in[2], in[1], in[2]
}

// stopReason is the Responses reason for a stop_reason that is not a
// normal end.
func stopReason(s string) string {
	switch s {
	case "max_tokens", "model_context_window_exceeded":
		return "max_output_tokens"
	case "refusal":
		return "content_filter"
	}
	return ""
}

// messagesStream translates a Messages event stream into w. A stream that
// ends before message_stop was cut: w gets no end (see chatStream).
func messagesStream(body io.Reader, w *writer) error {
	w.start()
	var u usage
	var in [3]int64
	type block struct {
		kind, id, name string
		args           bytes.Buffer
	}
	blocks := map[int64]*block{}
	var order []int64
	stop, done := "", false
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), maxRequestBody)
	for sc.Scan() {
		data := dataOf(sc.Bytes())
		if data == nil || !gjson.ValidBytes(data) {
			continue
		}
		ev := gjson.ParseBytes(data)
		switch ev.Get("type").String() {
		case "message_start":
			messagesUsage(ev.Get("message.usage"), &u, &in)
		case "content_block_start":
			i := ev.Get("index").Int()
			cb := ev.Get("content_block")
			b := &block{kind: cb.Get("type").String(), id: cb.Get("id").String(), name: cb.Get("name").String()}
			blocks[i] = b
			order = append(order, i)
			if b.kind == "text" {
				w.text(cb.Get("text").String())
			}
		case "content_block_delta":
			b := blocks[ev.Get("index").Int()]
			if b == nil {
				continue
			}
			d := ev.Get("delta")
			switch d.Get("type").String() {
			case "text_delta":
				w.text(d.Get("text").String())
			case "input_json_delta":
				b.args.WriteString(d.Get("partial_json").String())
			case "thinking_delta":
				w.reasoning(d.Get("thinking").String())
			}
		case "message_delta":
			messagesUsage(ev.Get("usage"), &u, &in)
			if s := ev.Get("delta.stop_reason").String(); s != "" {
				stop = s
			}
		case "message_stop":
			done = true
		case "error":
			w.fail(anthropicCode(ev.Get("error.type").String(), ev.Get("error.message").String()), ev.Get("error.message").String())
			return w.err
		}
		if done {
			break
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the provider's stream: %w", err)
	}
	if !done {
		return w.err
	}
	for _, i := range order {
		if b := blocks[i]; b.kind == "tool_use" {
			w.call(b.id, b.name, b.args.String())
		}
	}
	w.finish(u, stopReason(stop))
	return w.err
}

// messagesMessage translates a whole Messages answer into w.
func messagesMessage(body []byte, w *writer) (map[string]any, error) {
	if !gjson.ValidBytes(body) || gjson.GetBytes(body, "type").String() != "message" {
		return nil, fmt.Errorf("the provider's answer is not a message")
	}
	doc := gjson.ParseBytes(body)
	w.start()
	for _, b := range doc.Get("content").Array() {
		switch b.Get("type").String() {
		case "text":
			w.text(b.Get("text").String())
		case "thinking":
			w.reasoning(b.Get("thinking").String())
		case "tool_use":
			w.call(b.Get("id").String(), b.Get("name").String(), b.Get("input").Raw)
		}
	}
	var u usage
	var in [3]int64
	messagesUsage(doc.Get("usage"), &u, &in)
	return w.finish(u, stopReason(doc.Get("stop_reason").String())), w.err
}
