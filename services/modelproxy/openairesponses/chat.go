package openairesponses

import (
	"bufio"
	"bytes"
	"fmt"
	"io"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/tidwall/gjson"
)

// chatRequest is a Chat Completions request body. Its fields are in the
// order the API documents them; optional ones are left out when zero.
type chatRequest struct {
	Model               string             `json:"model"`
	Messages            []chatMessage      `json:"messages"`
	Stream              bool               `json:"stream"`
	StreamOptions       *chatStreamOptions `json:"stream_options,omitzero"`
	MaxCompletionTokens int64              `json:"max_completion_tokens,omitzero"`
	MaxTokens           int64              `json:"max_tokens,omitzero"`
	Tools               []chatTool         `json:"tools,omitzero"`
	ToolChoice          any                `json:"tool_choice,omitzero"`
	ParallelToolCalls   *bool              `json:"parallel_tool_calls,omitzero"`
	ReasoningEffort     string             `json:"reasoning_effort,omitzero"`
	EnableThinking      *bool              `json:"enable_thinking,omitzero"`
	Temperature         *float64           `json:"temperature,omitzero"`
	TopP                *float64           `json:"top_p,omitzero"`
}

// chatStreamOptions is stream_options.
type chatStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chatMessage is one message. Content is a jstr, nil (null: an
// assistant's calls without text) or []chatPart.
type chatMessage struct {
	Role       string         `json:"role"`
	Content    any            `json:"content"`
	ToolCallID *string        `json:"tool_call_id,omitzero"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitzero"`
}

// chatPart is a content part: a text or an image.
type chatPart struct {
	Type     string        `json:"type"`
	Text     jstr          `json:"text,omitzero"`
	ImageURL *chatImageURL `json:"image_url,omitzero"`
}

// chatImageURL is an image part's URL.
type chatImageURL struct {
	URL string `json:"url"`
}

// chatToolCall is an assistant's tool call.
type chatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

// chatFunction is a called function.
type chatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// chatTool is an offered function.
type chatTool struct {
	Type     string          `json:"type"`
	Function chatFunctionDef `json:"function"`
}

// chatFunctionDef is an offered function's name, description and schema.
type chatFunctionDef struct {
	Name        string         `json:"name"`
	Description jstr           `json:"description"`
	Parameters  jsontext.Value `json:"parameters"`
}

// chatToolChoice is tool_choice naming a function.
type chatToolChoice struct {
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
	} `json:"function"`
}

// encodeOptions write an upstream body: texts and schemas pass as they
// came in the request (escapes, repeated names and all), and an empty
// conversation is null, as encoding/json wrote it.
var encodeOptions = jsonv2.JoinOptions(jsontext.PreserveRawStrings(true), jsontext.AllowDuplicateNames(true),
	jsontext.AllowInvalidUTF8(true), jsonv2.FormatNilSliceAsNull(true))

// chatBody encodes r as a Chat Completions request.
func chatBody(r *request, o ChatOptions) ([]byte, error) {
	var msgs []chatMessage
	if s := r.systemText(); !emptyText(s) {
		msgs = append(msgs, chatMessage{Role: "system", Content: s})
	}
	for _, t := range r.turns {
		if t.role == "assistant" {
			msgs = append(msgs, chatAssistant(t))
			continue
		}
		var content []chatPart
		flush := func() {
			if len(content) == 0 {
				return
			}
			if len(content) == 1 && content[0].Type == "text" {
				msgs = append(msgs, chatMessage{Role: "user", Content: content[0].Text})
			} else {
				msgs = append(msgs, chatMessage{Role: "user", Content: content})
			}
			content = nil
		}
		for _, p := range t.parts {
			switch p.kind {
			case "text":
				content = append(content, chatPart{Type: "text", Text: p.text})
			case "image":
				content = append(content, chatPart{Type: "image_url", ImageURL: &chatImageURL{URL: p.image}})
			case "result":
				flush()
				msgs = append(msgs, chatMessage{Role: "tool", ToolCallID: &p.id, Content: p.text})
			}
		}
		flush()
	}
	body := chatRequest{Model: cmpOr(o.Model, r.model), Messages: msgs, Stream: r.stream, Temperature: r.temperature, TopP: r.topP}
	if r.stream && o.StreamUsage {
		body.StreamOptions = &chatStreamOptions{IncludeUsage: true}
	}
	if n := capTokens(r.maxOutput, o.MaxTokensCeiling); n > 0 {
		if o.MaxCompletionTokens {
			body.MaxCompletionTokens = n
		} else {
			body.MaxTokens = n
		}
	}
	if len(r.tools) > 0 {
		body.Tools = make([]chatTool, len(r.tools))
		for i, f := range r.tools {
			body.Tools[i] = chatTool{Type: "function", Function: chatFunctionDef{Name: f.name, Description: f.description, Parameters: f.parameters}}
		}
		switch r.choice {
		case "auto", "none", "required":
			body.ToolChoice = r.choice
		default:
			c := chatToolChoice{Type: "function"}
			c.Function.Name = r.choice
			body.ToolChoice = c
		}
		body.ParallelToolCalls = &r.parallel
	}
	if r.effort != "" {
		switch o.ThinkingParam {
		case ThinkingReasoningEffort:
			body.ReasoningEffort = r.effort
		case ThinkingEnableThinking:
			on := r.effort != "none" && r.effort != "minimal"
			body.EnableThinking = &on
		}
	}
	return jsonv2.Marshal(body, encodeOptions)
}

// chatAssistant is an assistant turn as one Chat Completions message.
func chatAssistant(t turn) chatMessage {
	var texts []jstr
	var calls []chatToolCall
	for _, p := range t.parts {
		switch p.kind {
		case "text":
			if !emptyText(p.text) { // an empty text adds no separator
				texts = append(texts, p.text)
			}
		case "call":
			calls = append(calls, chatToolCall{ID: p.id, Type: "function", Function: chatFunction{Name: p.name, Arguments: p.args}})
		}
	}
	m := chatMessage{Role: "assistant", Content: joinText(texts, "\n\n"), ToolCalls: calls}
	if len(calls) > 0 && len(texts) == 0 {
		m.Content = nil
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
