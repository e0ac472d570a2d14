package openairesponses

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/tidwall/gjson"
)

// defaultMaxTokens is max_tokens (which the Messages API requires) when
// the request names no max_output_tokens; the model proxy always sets one.
const defaultMaxTokens = 32000

// messagesRequest is a Messages request body. Its fields are in the
// order the API documents them; optional ones are left out when zero.
type messagesRequest struct {
	Model       string          `json:"model"`
	Messages    []messagesTurn  `json:"messages"`
	Stream      bool            `json:"stream"`
	MaxTokens   int64           `json:"max_tokens"`
	System      []messagesBlock `json:"system,omitzero"`
	Tools       []messagesTool  `json:"tools,omitzero"`
	ToolChoice  *messagesChoice `json:"tool_choice,omitzero"`
	Temperature *float64        `json:"temperature,omitzero"`
	TopP        *float64        `json:"top_p,omitzero"`
}

// messagesTurn is one message of content blocks.
type messagesTurn struct {
	Role    string          `json:"role"`
	Content []messagesBlock `json:"content"`
}

// messagesBlock is a content block: a text (Text), an image (Source), a
// tool use (ID, Name, Input) or a tool result (ToolUseID, Content).
type messagesBlock struct {
	Type         string         `json:"type"`
	Text         jstr           `json:"text,omitzero"`
	Source       any            `json:"source,omitzero"`
	ID           *string        `json:"id,omitzero"`
	Name         *string        `json:"name,omitzero"`
	Input        jsontext.Value `json:"input,omitzero"`
	ToolUseID    *string        `json:"tool_use_id,omitzero"`
	Content      jstr           `json:"content,omitzero"`
	CacheControl *cacheControl  `json:"cache_control,omitzero"`
}

// base64Source is an image's inline data.
type base64Source struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

// urlSource is an image's URL.
type urlSource struct {
	Type string `json:"type"`
	URL  string `json:"url"`
}

// cacheControl marks a prompt cache breakpoint.
type cacheControl struct {
	Type string `json:"type"`
}

// messagesTool is an offered tool.
type messagesTool struct {
	Name        string         `json:"name"`
	Description jstr           `json:"description"`
	InputSchema jsontext.Value `json:"input_schema"`
}

// messagesChoice is tool_choice.
type messagesChoice struct {
	Type                   string  `json:"type"`
	Name                   *string `json:"name,omitzero"`
	DisableParallelToolUse bool    `json:"disable_parallel_tool_use,omitzero"`
}

// ephemeral marks a prompt cache breakpoint.
var ephemeral = &cacheControl{Type: "ephemeral"}

// messagesBody encodes r as an Anthropic Messages request. The
// instructions and the last message end with a prompt cache breakpoint
// each, as Claude Code sets them, so that each turn reads the conversation
// so far from the cache.
func messagesBody(r *request, o MessagesOptions) ([]byte, error) {
	var msgs []messagesTurn
	dec := jsontext.NewDecoder(strings.NewReader(""))
	for _, t := range r.turns {
		var blocks []messagesBlock
		for _, p := range t.parts {
			if b, ok := messagesContent(p, dec); ok {
				blocks = append(blocks, b)
			}
		}
		if len(blocks) == 0 {
			continue
		}
		if len(msgs) == 0 && t.role == "assistant" {
			// The API wants a user message first.
			msgs = append(msgs, messagesTurn{Role: "user", Content: []messagesBlock{{Type: "text", Text: jstr(`"(continued)"`)}}})
		}
		msgs = append(msgs, messagesTurn{Role: t.role, Content: blocks})
	}
	if len(msgs) == 0 {
		return nil, fmt.Errorf("the request has no user message")
	}
	last := msgs[len(msgs)-1].Content
	last[len(last)-1].CacheControl = ephemeral
	body := messagesRequest{Model: cmpOr(o.Model, r.model), Messages: msgs, Stream: r.stream,
		MaxTokens: capTokens(cmpInt(r.maxOutput, defaultMaxTokens), o.MaxTokensCeiling)}
	if s := r.systemText(); !emptyText(s) {
		body.System = []messagesBlock{{Type: "text", Text: s, CacheControl: ephemeral}}
	}
	if len(r.tools) > 0 {
		body.Tools = make([]messagesTool, len(r.tools))
		for i, f := range r.tools {
			body.Tools[i] = messagesTool{Name: f.name, Description: f.description, InputSchema: f.parameters}
		}
		choice := &messagesChoice{Type: "auto"}
		switch r.choice {
		case "auto":
		case "none":
			choice.Type = "none"
		case "required":
			choice.Type = "any"
		default:
			choice = &messagesChoice{Type: "tool", Name: &r.choice}
		}
		choice.DisableParallelToolUse = !r.parallel && choice.Type != "none"
		body.ToolChoice = choice
	}
	if r.temperature != nil {
		body.Temperature = r.temperature
	} else if r.topP != nil {
		body.TopP = r.topP // the API takes one of the two
	}
	return jsonv2.Marshal(body, encodeOptions)
}

// cmpInt is a, or b when a is not positive.
func cmpInt(a, b int64) int64 {
	if a > 0 {
		return a
	}
	return b
}

// messagesContent is one part as a content block; an empty text (which
// the API refuses) is none.
func messagesContent(p part, dec *jsontext.Decoder) (messagesBlock, bool) {
	switch p.kind {
	case "text":
		if blank(p.text) {
			return messagesBlock{}, false
		}
		return messagesBlock{Type: "text", Text: p.text}, true
	case "image":
		if mediaType, data, ok := dataURL(p.image); ok {
			return messagesBlock{Type: "image", Source: base64Source{Type: "base64", MediaType: mediaType, Data: data}}, true
		}
		return messagesBlock{Type: "image", Source: urlSource{Type: "url", URL: p.image}}, true
	case "call":
		if in, ok := rawInput(dec, p.args); ok {
			return messagesBlock{Type: "tool_use", ID: &p.id, Name: &p.name, Input: in}, true
		}
		b, err := json.Marshal(toolInput(p.args))
		if err != nil {
			return messagesBlock{}, false
		}
		return messagesBlock{Type: "tool_use", ID: &p.id, Name: &p.name, Input: b}, true
	case "result":
		b := messagesBlock{Type: "tool_result", ToolUseID: &p.id, Content: p.text}
		if emptyText(p.text) {
			b.Content = jstr(`"(no output)"`)
		}
		return b, true
	}
	return messagesBlock{}, false
}

// toolInput is a call's arguments as a Messages tool use's input, which
// must be an object: arguments that are not JSON become {"arguments":
// text}, JSON that is not an object {"arguments": value}. Numbers stay as
// they were written (a float64 would change 12345678901234567); a
// repeated name keeps its last value and invalid UTF-8 becomes U+FFFD,
// as encoding/json reads them.
func toolInput(args string) any {
	if !json.Valid([]byte(args)) {
		return map[string]any{"arguments": args}
	}
	d := json.NewDecoder(strings.NewReader(args))
	d.UseNumber()
	var input any
	if err := d.Decode(&input); err != nil {
		return map[string]any{"arguments": args}
	}
	if _, ok := input.(map[string]any); !ok {
		return map[string]any{"arguments": input}
	}
	return input
}

// rawInput is args as a tool use's input when it is what toolInput's
// round trip (into any and back) gives as JSON, so that it can pass as it
// is: one object, strictly valid (no repeated name, valid UTF-8, which the
// round trip would merge or replace). Most calls' arguments are, and the
// round trip is the larger part of a body's encoding. dec is reused from
// call to call.
func rawInput(dec *jsontext.Decoder, args string) (jsontext.Value, bool) {
	if len(args) == 0 || args[0] != '{' {
		return nil, false
	}
	dec.Reset(strings.NewReader(args))
	if _, err := dec.ReadValue(); err != nil {
		return nil, false
	}
	// One value: "{} {}" is a stream to the decoder, not JSON.
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return nil, false
	}
	return jsontext.Value(args), true
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
