package openairesponses

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/tidwall/gjson"
)

// chatBody encodes r as a Chat Completions request.
func chatBody(r *request, o ChatOptions) ([]byte, error) {
	var msgs []map[string]any
	if s := r.systemText(); s != "" {
		msgs = append(msgs, map[string]any{"role": "system", "content": s})
	}
	for _, t := range r.turns {
		if t.role == "assistant" {
			msgs = append(msgs, chatAssistant(t))
			continue
		}
		var content []map[string]any
		flush := func() {
			if len(content) == 0 {
				return
			}
			if len(content) == 1 && content[0]["type"] == "text" {
				msgs = append(msgs, map[string]any{"role": "user", "content": content[0]["text"]})
			} else {
				msgs = append(msgs, map[string]any{"role": "user", "content": content})
			}
			content = nil
		}
		for _, p := range t.parts {
			switch p.kind {
			case "text":
				content = append(content, map[string]any{"type": "text", "text": p.text})
			case "image":
				content = append(content, map[string]any{"type": "image_url", "image_url": map[string]string{"url": p.image}})
			case "result":
				flush()
				msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": p.id, "content": p.text})
			}
		}
		flush()
	}
	body := map[string]any{"model": cmpOr(o.Model, r.model), "messages": msgs, "stream": r.stream}
	if r.stream && o.StreamUsage {
		body["stream_options"] = map[string]any{"include_usage": true}
	}
	if n := capTokens(r.maxOutput, o.MaxTokensCeiling); n > 0 {
		if o.MaxCompletionTokens {
			body["max_completion_tokens"] = n
		} else {
			body["max_tokens"] = n
		}
	}
	if len(r.tools) > 0 {
		tools := make([]map[string]any, len(r.tools))
		for i, f := range r.tools {
			tools[i] = map[string]any{"type": "function", "function": map[string]any{"name": f.name, "description": f.description, "parameters": f.parameters}}
		}
		body["tools"] = tools
		switch r.choice {
		case "auto", "none", "required":
			body["tool_choice"] = r.choice
		default:
			body["tool_choice"] = map[string]any{"type": "function", "function": map[string]string{"name": r.choice}}
		}
		body["parallel_tool_calls"] = r.parallel
	}
	if r.effort != "" {
		switch o.ThinkingParam {
		case ThinkingReasoningEffort:
			body["reasoning_effort"] = r.effort
		case ThinkingEnableThinking:
			body["enable_thinking"] = r.effort != "none" && r.effort != "minimal"
		}
	}
	if r.temperature != nil {
		body["temperature"] = *r.temperature
	}
	if r.topP != nil {
		body["top_p"] = *r.topP
	}
	return json.Marshal(body)
}

// chatAssistant is an assistant turn as one Chat Completions message.
func chatAssistant(t turn) map[string]any {
	var text bytes.Buffer
	var calls []map[string]any
	for _, p := range t.parts {
		switch p.kind {
		case "text":
			if text.Len() > 0 {
				text.WriteString("\n\n")
			}
			text.WriteString(p.text)
		case "call":
			calls = append(calls, map[string]any{"id": p.id, "type": "function", "function": map[string]string{"name": p.name, "arguments": p.args}})
		}
	}
	m := map[string]any{"role": "assistant", "content": text.String()}
	if len(calls) > 0 {
		m["tool_calls"] = calls
		if text.Len() == 0 {
			m["content"] = nil
		}
	}
	return m
}

// capTokens is n capped at ceiling (0: no cap).
func capTokens(n, ceiling int64) int64 {
	if ceiling > 0 && (n <= 0 || n > ceiling) {
		return ceiling
	}
	return n
}

// cmpOr is a, or b when a is empty.
func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// chatUsage reads a Chat Completions usage object.
func chatUsage(u gjson.Result) usage {
	return usage{input: u.Get("prompt_tokens").Int(), cached: u.Get("prompt_tokens_details.cached_tokens").Int(),
		output: u.Get("completion_tokens").Int(), reasoning: u.Get("completion_tokens_details.reasoning_tokens").Int()}
}

// incompleteReason is the Responses reason for a finish_reason that is not
// a normal end.
func incompleteReason(finish string) string {
	switch finish {
	case "length":
		return "max_output_tokens"
	case "content_filter":
		return "content_filter"
	}
	return ""
}

// reasoningDelta is a delta's reasoning in field ("" reads both).
func reasoningDelta(d gjson.Result, field string) string {
	if field != "" {
		return d.Get(field).String()
	}
	if s := d.Get("reasoning_content").String(); s != "" {
		return s
	}
	return d.Get("reasoning").String()
}

// chatStream translates a Chat Completions event stream into w. A stream
// that ends without a finish reason and without [DONE] was cut: w gets no
// end, so the CLI sees a stream closed before response.completed, as it
// would from the API, and retries.
func chatStream(body io.Reader, w *writer, o ChatOptions) error {
	w.start()
	type call struct{ id, name string }
	var calls []call
	var args []bytes.Buffer
	var u usage
	finish, done := "", false
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), maxRequestBody)
	for sc.Scan() {
		data := dataOf(sc.Bytes())
		if data == nil {
			continue
		}
		if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
			done = true
			break
		}
		if !gjson.ValidBytes(data) {
			continue
		}
		ch := gjson.ParseBytes(data)
		if e := ch.Get("error"); e.Exists() {
			w.fail(cmpOr(e.Get("code").String(), "server_error"), cmpOr(e.Get("message").String(), e.Raw))
			return w.err
		}
		if v := ch.Get("usage"); v.IsObject() {
			u = chatUsage(v)
		}
		c := ch.Get("choices.0")
		d := c.Get("delta")
		w.reasoning(reasoningDelta(d, o.ReasoningField))
		w.text(d.Get("content").String())
		for _, tc := range d.Get("tool_calls").Array() {
			i := int(tc.Get("index").Int())
			if i < 0 || i > 1024 {
				continue
			}
			for len(calls) <= i {
				calls = append(calls, call{})
				args = append(args, bytes.Buffer{})
			}
			if id := tc.Get("id").String(); id != "" {
				calls[i].id = id
			}
			if n := tc.Get("function.name").String(); n != "" {
				calls[i].name = n
			}
			args[i].WriteString(tc.Get("function.arguments").String())
		}
		if f := c.Get("finish_reason").String(); f != "" {
			finish = f
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the provider's stream: %w", err)
	}
	if finish == "" && !done {
		return w.err
	}
	for i, c := range calls {
		if c.name != "" {
			w.call(c.id, c.name, args[i].String())
		}
	}
	w.finish(u, incompleteReason(finish))
	return w.err
}

// chatCompletion translates a whole Chat Completions answer into w.
func chatCompletion(body []byte, w *writer, o ChatOptions) (map[string]any, error) {
	if !gjson.ValidBytes(body) {
		return nil, fmt.Errorf("the provider's answer is not JSON")
	}
	doc := gjson.ParseBytes(body)
	c := doc.Get("choices.0")
	if !c.Exists() {
		return nil, fmt.Errorf("the provider's answer has no choice")
	}
	m := c.Get("message")
	w.start()
	w.reasoning(reasoningDelta(m, o.ReasoningField))
	w.text(m.Get("content").String())
	for _, tc := range m.Get("tool_calls").Array() {
		w.call(tc.Get("id").String(), tc.Get("function.name").String(), tc.Get("function.arguments").String())
	}
	return w.finish(chatUsage(doc.Get("usage")), incompleteReason(c.Get("finish_reason").String())), w.err
}

// dataOf returns an SSE line's data, or nil.
func dataOf(line []byte) []byte {
	line = bytes.TrimRight(line, "\r")
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return nil
	}
	return bytes.TrimPrefix(data, []byte(" "))
}
