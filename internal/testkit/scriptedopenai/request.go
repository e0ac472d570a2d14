package scriptedopenai

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/agentbox/agentbox/internal/testkit/scriptbook"
)

// Request is one request the server received.
type Request struct {
	scriptbook.Received
	// Body is the decoded body of a chat completions request.
	Body Body
}

// Body is the decoded JSON of POST /chat/completions.
type Body struct {
	Model               string          `json:"model"`
	Messages            []Message       `json:"messages"`
	Tools               []Tool          `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls"`
	MaxTokens           int64           `json:"max_tokens"`
	MaxCompletionTokens int64           `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	Stop                json.RawMessage `json:"stop"`
	Stream              bool            `json:"stream"`
	StreamOptions       struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	ReasoningEffort string `json:"reasoning_effort"`
}

// Message is one chat message; Content may be a string or a list of parts.
type Message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []ToolCall      `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

// Text is the message's text: the string content or its text parts joined.
func (m Message) Text() string {
	c := bytes.TrimSpace(m.Content)
	if len(c) == 0 || c[0] == 'n' {
		return ""
	}
	var s string
	if json.Unmarshal(c, &s) == nil {
		return s
	}
	var parts []struct{ Type, Text string }
	_ = json.Unmarshal(c, &parts)
	var out []string
	for _, p := range parts {
		if p.Type == "text" {
			out = append(out, p.Text)
		}
	}
	return strings.Join(out, "\n")
}

// ToolCall is a call the model made, in an assistant message or a turn.
type ToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Tool is a tool the client offered.
type Tool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// ToolResult pairs a tool call with the tool message answering it.
type ToolResult struct {
	Name      string
	Arguments string
	Content   string
}

// NewToolResults returns the tool messages at the end of the conversation
// (what the model reacts to now), each with the call it answers.
func (r *Request) NewToolResults() []ToolResult {
	msgs := r.Body.Messages
	calls := map[string]ToolCall{}
	for _, m := range msgs {
		for _, c := range m.ToolCalls {
			calls[c.ID] = c
		}
	}
	i := len(msgs)
	for i > 0 && msgs[i-1].Role == "tool" {
		i--
	}
	var out []ToolResult
	for _, m := range msgs[i:] {
		c := calls[m.ToolCallID]
		out = append(out, ToolResult{Name: c.Function.Name, Arguments: c.Function.Arguments, Content: m.Text()})
	}
	return out
}

// LastUserText is the text of the last user message.
func (r *Request) LastUserText() string {
	for i := len(r.Body.Messages) - 1; i >= 0; i-- {
		if r.Body.Messages[i].Role == "user" {
			return r.Body.Messages[i].Text()
		}
	}
	return ""
}

// ToolNames lists the names of the offered tools.
func (r *Request) ToolNames() []string {
	out := make([]string, 0, len(r.Body.Tools))
	for _, t := range r.Body.Tools {
		out = append(out, t.Function.Name)
	}
	return out
}
