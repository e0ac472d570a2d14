package anthropicopenai

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/respjson"
)

// placeholderSignature signs translated thinking blocks: the CLI expects a
// signature, and the block is dropped (not verified) when it is sent back.
const placeholderSignature = "agentbox-openai-translated"

// message is Anthropic's message object.
type message struct {
	ID           string  `json:"id"`
	Type         string  `json:"type"`
	Role         string  `json:"role"`
	Model        string  `json:"model"`
	Content      []block `json:"content"`
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        usage   `json:"usage"`
}

// block is one content block of an Anthropic answer.
type block struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text,omitempty"`
	Thinking  *string         `json:"thinking,omitempty"`
	Signature *string         `json:"signature,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
}

// usage is Anthropic's usage object. input_tokens excludes cache reads, as
// Anthropic counts them, while OpenAI's prompt_tokens includes them.
type usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

func mapUsage(u openai.CompletionUsage) usage {
	cached := u.PromptTokensDetails.CachedTokens
	if cached == 0 {
		// DeepSeek reports cache hits beside the OpenAI fields.
		if f, ok := u.JSON.ExtraFields["prompt_cache_hit_tokens"]; ok {
			_ = json.Unmarshal([]byte(f.Raw()), &cached)
		}
	}
	cached = min(max(cached, 0), u.PromptTokens)
	return usage{
		InputTokens:              u.PromptTokens - cached,
		OutputTokens:             u.CompletionTokens,
		CacheReadInputTokens:     cached,
		CacheCreationInputTokens: u.PromptTokensDetails.CacheWriteTokens,
	}
}

// stopReason maps a finish_reason; a turn that called tools is tool_use
// whatever the provider said, since some say "stop" there.
func stopReason(finish string, calledTools bool) string {
	switch {
	case calledTools:
		return "tool_use"
	case finish == "length":
		return "max_tokens"
	case finish == "content_filter":
		return "refusal"
	}
	return "end_turn"
}

// reasoning returns the reasoning text in the extra fields of a delta or
// message, from the configured field or, when none is, from either name.
func reasoning(extra map[string]respjson.Field, field string) string {
	names := []string{field}
	if field == "" {
		names = []string{"reasoning_content", "reasoning"}
	}
	for _, n := range names {
		f, ok := extra[n]
		if !ok || !present(f) {
			continue
		}
		var s string
		if json.Unmarshal([]byte(f.Raw()), &s) == nil && s != "" {
			return s
		}
	}
	return ""
}

// present reports whether an extra field holds a value. Extra fields are
// never Valid() in openai-go, which checks them against no type.
func present(f respjson.Field) bool {
	r := f.Raw()
	return r != respjson.Omitted && r != respjson.Null
}

func ptr[T any](v T) *T { return &v }

// validArgs returns tool arguments as a JSON object; providers sometimes
// send "" for no arguments.
func validArgs(s string) json.RawMessage {
	s = strings.TrimSpace(s)
	if s == "" {
		return json.RawMessage("{}")
	}
	return json.RawMessage(s)
}

// translateCompletion turns a non-streamed chat completion into an
// Anthropic message.
func translateCompletion(b []byte, model, reasoningField string) (*message, error) {
	var c openai.ChatCompletion
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	if e, ok := c.JSON.ExtraFields["error"]; ok && present(e) {
		eb := streamError(json.RawMessage(e.Raw()))
		return nil, fmt.Errorf("%s", eb.Error.Message)
	}
	if len(c.Choices) == 0 {
		return nil, fmt.Errorf("it has no choices")
	}
	ch := c.Choices[0]
	m := &message{ID: "msg_" + c.ID, Type: "message", Role: "assistant", Model: model, Content: []block{}, Usage: mapUsage(c.Usage)}
	if r := reasoning(ch.Message.JSON.ExtraFields, reasoningField); r != "" {
		m.Content = append(m.Content, block{Type: "thinking", Thinking: ptr(r), Signature: ptr(placeholderSignature)})
	}
	if ch.Message.Content != "" {
		m.Content = append(m.Content, block{Type: "text", Text: ptr(ch.Message.Content)})
	}
	for i, tc := range ch.Message.ToolCalls {
		args := validArgs(tc.Function.Arguments)
		if !json.Valid(args) {
			return nil, fmt.Errorf("tool call %d (%s) has arguments that are not JSON: %.200q", i, tc.Function.Name, tc.Function.Arguments)
		}
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("toolu_%s_%d", c.ID, i)
		}
		m.Content = append(m.Content, block{Type: "tool_use", ID: id, Name: tc.Function.Name, Input: args})
	}
	m.StopReason = ptr(stopReason(ch.FinishReason, len(ch.Message.ToolCalls) > 0))
	return m, nil
}
