package anthropicopenai

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"
	"github.com/tidwall/gjson"
)

// ToolErrorPrefix starts the tool message of a tool_result the CLI marked
// is_error, since Chat Completions has no such flag.
const ToolErrorPrefix = "Error: "

// translated is an Anthropic request turned into a Chat Completions one.
type translated struct {
	params openai.ChatCompletionNewParams
	stream bool
	// model is the model the CLI asked for, echoed in the answer.
	model string
}

// body is the Chat Completions JSON to send.
func (tr *translated) body() ([]byte, error) { return json.Marshal(tr.params) }

// ToChatCompletions translates an Anthropic Messages request body into a
// Chat Completions request body under o, and reports whether it streams.
func ToChatCompletions(anthropicBody []byte, o Options) (body []byte, stream bool, err error) {
	tr, err := translateRequest(anthropicBody, o)
	if err != nil {
		return nil, false, err
	}
	b, err := tr.body()
	return b, tr.stream, err
}

func translateRequest(raw []byte, o Options) (*translated, error) {
	if err := checkShape(raw); err != nil {
		return nil, err
	}
	var in anthropic.MessageNewParams
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("the body is not an Anthropic Messages request: %w", err)
	}
	var flags struct {
		Stream bool `json:"stream"`
	}
	_ = json.Unmarshal(raw, &flags)
	tr := &translated{stream: flags.Stream, model: in.Model}
	p := &tr.params
	p.Model = in.Model
	if o.Model != "" {
		p.Model = o.Model
	}

	if sys := systemText(in.System); sys != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(sys))
	}
	for i, m := range in.Messages {
		msgs, err := translateMessage(m)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		p.Messages = append(p.Messages, msgs...)
	}

	for _, t := range in.Tools {
		if t.OfTool == nil {
			continue // server tools (web search...) have no Chat Completions form
		}
		schema, err := schemaMap(t.OfTool.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("tool %q: %w", t.OfTool.Name, err)
		}
		fn := shared.FunctionDefinitionParam{Name: t.OfTool.Name, Parameters: schema}
		if t.OfTool.Description.Valid() {
			fn.Description = param.NewOpt(t.OfTool.Description.Value)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionToolUnionParam{OfFunction: &openai.ChatCompletionFunctionToolParam{Function: fn}})
	}
	if len(p.Tools) > 0 {
		translateToolChoice(in.ToolChoice, p)
	}

	maxTokens := in.MaxTokens
	if o.MaxTokensCeiling > 0 && (maxTokens <= 0 || maxTokens > o.MaxTokensCeiling) {
		maxTokens = o.MaxTokensCeiling
	}
	if maxTokens > 0 {
		if o.MaxCompletionTokens {
			p.MaxCompletionTokens = param.NewOpt(maxTokens)
		} else {
			p.MaxTokens = param.NewOpt(maxTokens)
		}
	}
	if in.Temperature.Valid() {
		p.Temperature = param.NewOpt(in.Temperature.Value)
	}
	if in.TopP.Valid() {
		p.TopP = param.NewOpt(in.TopP.Value)
	}
	if len(in.StopSequences) > 0 {
		p.Stop = openai.ChatCompletionNewParamsStopUnion{OfStringArray: in.StopSequences}
	}

	extra := map[string]any{}
	if tr.stream {
		extra["stream"] = true
		if o.StreamUsage {
			p.StreamOptions.IncludeUsage = param.NewOpt(true)
		}
	}
	if on, budget, eff := thinkingOf(in); on {
		switch o.ThinkingParam {
		case ThinkingReasoningEffort:
			p.ReasoningEffort = eff
		case ThinkingEnableThinking:
			extra["enable_thinking"] = true
			if budget > 0 {
				extra["thinking_budget"] = budget
			}
		}
	}
	if len(extra) > 0 {
		p.SetExtraFields(extra)
	}
	return tr, nil
}

// checkShape rejects what the SDK's lenient decoder would let through as
// an empty request: the SDK leaves mistyped fields unset instead of failing.
func checkShape(raw []byte) error {
	if !gjson.ValidBytes(raw) {
		return errors.New("the body is not valid JSON")
	}
	root := gjson.ParseBytes(raw)
	if !root.IsObject() {
		return errors.New("the body is not a JSON object; send an Anthropic Messages request")
	}
	if m := root.Get("model"); m.Type != gjson.String || m.Str == "" {
		return errors.New("model: a non-empty string is required")
	}
	msgs := root.Get("messages")
	if !msgs.IsArray() || len(msgs.Array()) == 0 {
		return errors.New("messages: a non-empty array is required")
	}
	for i, m := range msgs.Array() {
		if r := m.Get("role").String(); r != "user" && r != "assistant" && r != "system" {
			return fmt.Errorf("messages[%d].role: %q is not user, assistant or system", i, r)
		}
		if c := m.Get("content"); c.Type != gjson.String && !c.IsArray() {
			return fmt.Errorf("messages[%d].content: a string or an array of blocks is required", i)
		}
	}
	for _, k := range []string{"system", "tools", "stop_sequences"} {
		if v := root.Get(k); v.Exists() && v.Type != gjson.Null && !v.IsArray() && (k != "system" || v.Type != gjson.String) {
			return fmt.Errorf("%s: has the wrong JSON type", k)
		}
	}
	return nil
}

// thinkingOf says whether the CLI asked for thinking, with its budget
// (enabled) or effort (adaptive, from output_config.effort).
func thinkingOf(in anthropic.MessageNewParams) (on bool, budget int64, eff shared.ReasoningEffort) {
	switch {
	case in.Thinking.OfEnabled != nil:
		b := in.Thinking.OfEnabled.BudgetTokens
		return true, b, effort(b)
	case in.Thinking.OfAdaptive != nil:
		switch e := string(in.OutputConfig.Effort); e {
		case "low", "medium", "high":
			return true, 0, shared.ReasoningEffort(e)
		case "":
			return true, 0, shared.ReasoningEffortMedium
		default: // xhigh, max
			return true, 0, shared.ReasoningEffortHigh
		}
	}
	return false, 0, ""
}

// effort maps an Anthropic thinking budget to an OpenAI reasoning effort.
func effort(budget int64) shared.ReasoningEffort {
	switch {
	case budget < 4096:
		return shared.ReasoningEffortLow
	case budget < 16384:
		return shared.ReasoningEffortMedium
	default:
		return shared.ReasoningEffortHigh
	}
}

func systemText(blocks []anthropic.TextBlockParam) string {
	parts := make([]string, 0, len(blocks))
	for _, b := range blocks {
		// The CLI's billing header is for Anthropic, and its per-build
		// hash at the very start would defeat providers' prefix caches.
		if b.Text != "" && !strings.HasPrefix(b.Text, "x-anthropic-billing-header:") {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n\n")
}

// schemaMap turns a tool's input schema into Chat Completions parameters,
// keeping fields the SDK has no name for (additionalProperties, $schema).
func schemaMap(s anthropic.ToolInputSchemaParam) (shared.FunctionParameters, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("input_schema does not encode: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("input_schema is not a JSON object: %w", err)
	}
	if _, ok := m["type"]; !ok {
		m["type"] = "object"
	}
	return m, nil
}

func translateToolChoice(tc anthropic.ToolChoiceUnionParam, p *openai.ChatCompletionNewParams) {
	disable := false
	switch {
	case tc.OfAuto != nil:
		p.ToolChoice.OfAuto = param.NewOpt("auto")
		disable = tc.OfAuto.DisableParallelToolUse.Value
	case tc.OfAny != nil:
		p.ToolChoice.OfAuto = param.NewOpt("required")
		disable = tc.OfAny.DisableParallelToolUse.Value
	case tc.OfTool != nil:
		p.ToolChoice.OfFunctionToolChoice = &openai.ChatCompletionNamedToolChoiceParam{
			Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: tc.OfTool.Name}}
		disable = tc.OfTool.DisableParallelToolUse.Value
	case tc.OfNone != nil:
		p.ToolChoice.OfAuto = param.NewOpt("none")
	}
	if disable {
		p.ParallelToolCalls = param.NewOpt(false)
	}
}

// translateMessage turns one Anthropic turn into Chat Completions
// messages: an assistant turn into one assistant message with tool_calls,
// a user turn into one tool message per tool_result (they must follow the
// assistant's tool_calls directly) and then a user message for the rest.
func translateMessage(m anthropic.MessageParam) ([]openai.ChatCompletionMessageParamUnion, error) {
	// role "system" turns (the CLI adds some after the last user turn) go
	// as user messages: many chat templates refuse a system message that
	// is not first.
	if m.Role == anthropic.MessageParamRoleAssistant {
		var a openai.ChatCompletionAssistantMessageParam
		var text []string
		for _, b := range m.Content {
			switch {
			case b.OfText != nil:
				text = append(text, b.OfText.Text)
			case b.OfToolUse != nil:
				args, err := json.Marshal(b.OfToolUse.Input)
				if err != nil {
					return nil, fmt.Errorf("tool_use %s input: %w", b.OfToolUse.ID, err)
				}
				if string(args) == "null" {
					args = []byte("{}")
				}
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID: b.OfToolUse.ID, Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: b.OfToolUse.Name, Arguments: string(args)}}})
			}
			// thinking and redacted_thinking are the provider's own
			// reasoning; most providers reject it as input, so it is dropped.
		}
		if len(text) > 0 {
			a.Content.OfString = param.NewOpt(strings.Join(text, ""))
		}
		if len(text) == 0 && len(a.ToolCalls) == 0 {
			a.Content.OfString = param.NewOpt("")
		}
		return []openai.ChatCompletionMessageParamUnion{{OfAssistant: &a}}, nil
	}

	var out []openai.ChatCompletionMessageParamUnion
	var parts []openai.ChatCompletionContentPartUnionParam
	for _, b := range m.Content {
		switch {
		case b.OfText != nil:
			parts = append(parts, openai.TextContentPart(b.OfText.Text))
		case b.OfImage != nil:
			if p, ok := imagePart(b.OfImage.Source); ok {
				parts = append(parts, p)
			}
		case b.OfToolResult != nil:
			r := b.OfToolResult
			text := toolResultText(r.Content)
			if r.IsError.Value {
				text = ToolErrorPrefix + text
			}
			out = append(out, openai.ToolMessage(text, r.ToolUseID))
		case b.OfDocument != nil:
			if t := b.OfDocument.Source.OfText; t != nil {
				parts = append(parts, openai.TextContentPart(t.Data))
			}
		}
	}
	if text, ok := allText(parts); ok {
		out = append(out, openai.UserMessage(text))
	} else if len(parts) > 0 {
		out = append(out, openai.UserMessage(parts))
	}
	return out, nil
}

// allText joins parts that are all text into one string: several
// providers (DeepSeek among them) accept only string content.
func allText(parts []openai.ChatCompletionContentPartUnionParam) (string, bool) {
	if len(parts) == 0 {
		return "", false
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.OfText == nil {
			return "", false
		}
		texts = append(texts, p.OfText.Text)
	}
	return strings.Join(texts, "\n"), true
}

func imagePart(src anthropic.ImageBlockParamSourceUnion) (openai.ChatCompletionContentPartUnionParam, bool) {
	switch {
	case src.OfBase64 != nil:
		return openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{
			URL: "data:" + string(src.OfBase64.MediaType) + ";base64," + src.OfBase64.Data}), true
	case src.OfURL != nil:
		return openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: src.OfURL.URL}), true
	}
	return openai.ChatCompletionContentPartUnionParam{}, false
}

// toolResultText flattens a tool result's blocks; images are named, not
// sent, since tool messages carry text only.
func toolResultText(blocks []anthropic.ToolResultBlockParamContentUnion) string {
	var sb strings.Builder
	for i, c := range blocks {
		if i > 0 {
			sb.WriteString("\n")
		}
		switch {
		case c.OfText != nil:
			sb.WriteString(c.OfText.Text)
		case c.OfImage != nil:
			sb.WriteString("[image omitted: the provider's tool messages carry text only]")
		}
	}
	return sb.String()
}
