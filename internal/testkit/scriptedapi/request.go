package scriptedapi

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/internal/reminder"
	"github.com/agentbox/agentbox/internal/testkit/scriptbook"
)

// Request is one request the server received, as recorded for assertions.
type Request struct {
	scriptbook.Received
	// Body is the decoded body of a messages request (zero otherwise).
	Body Body
}

// Body is the decoded JSON body of POST /v1/messages.
type Body struct {
	Model     string    `json:"model"`
	MaxTokens int       `json:"max_tokens"`
	Stream    bool      `json:"stream"`
	System    Content   `json:"system"`
	Messages  []Message `json:"messages"`
	Tools     []Tool    `json:"tools"`
}

// Message is one turn of the conversation a client sent.
type Message struct {
	Role    string  `json:"role"`
	Content Content `json:"content"`
}

// Tool is a tool the client offered the model.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// Content is a list of content blocks; in JSON it may also be a plain
// string, which decodes to one text block.
type Content []ContentBlock

// UnmarshalJSON accepts a string or an array of blocks.
func (c *Content) UnmarshalJSON(data []byte) error {
	blocks, err := scriptbook.DecodeList(data, func(s string) ContentBlock { return ContentBlock{Type: "text", Text: s} })
	if err != nil {
		return fmt.Errorf("content: %w", err)
	}
	*c = blocks
	return nil
}

// Text joins the text of the text blocks with newlines.
func (c Content) Text() string {
	var parts []string
	for _, b := range c {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// ContentBlock is one block of a request message: text, tool_use (in
// assistant messages), tool_result (in user messages), thinking, image...
type ContentBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Thinking  string          `json:"thinking,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   Content         `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

// ToolCall pairs a tool_use the model made earlier in the conversation with
// the tool_result the client sent back for it.
type ToolCall struct {
	Name    string
	Input   json.RawMessage
	Result  string
	IsError bool
}

// Output is Result without the <system-reminder> blocks the CLI appends
// to tool results: the tool's own output, what a model quoting it repeats.
func (c ToolCall) Output() string { return reminder.Strip(c.Result) }

// LastUserText is the text of the last user message (tool results and
// other blocks left out).
func (r *Request) LastUserText() string {
	for i := len(r.Body.Messages) - 1; i >= 0; i-- {
		if r.Body.Messages[i].Role == "user" {
			return r.Body.Messages[i].Content.Text()
		}
	}
	return ""
}

// UserPrompt is the text of the last user message that carries text
// (messages of only tool results are skipped), without the CLI's
// <system-reminder> blocks: what the user asked in this turn.
func (r *Request) UserPrompt() string {
	for i := len(r.Body.Messages) - 1; i >= 0; i-- {
		if m := r.Body.Messages[i]; m.Role == "user" {
			if t := strings.TrimSpace(reminder.Strip(m.Content.Text())); t != "" {
				return t
			}
		}
	}
	return ""
}

// NewToolResults returns the tool calls answered by the last message when
// it is a user message carrying tool_result blocks: what the model is
// expected to react to now. It is empty at the start of a user turn.
func (r *Request) NewToolResults() []ToolCall {
	msgs := r.Body.Messages
	// The CLI may append role "system" entries after the last user
	// message; they are not turns.
	for len(msgs) > 0 && msgs[len(msgs)-1].Role == "system" {
		msgs = msgs[:len(msgs)-1]
	}
	if len(msgs) == 0 || msgs[len(msgs)-1].Role != "user" {
		return nil
	}
	uses := map[string]ContentBlock{}
	for _, m := range msgs {
		if m.Role != "assistant" {
			continue
		}
		for _, b := range m.Content {
			if b.Type == "tool_use" {
				uses[b.ID] = b
			}
		}
	}
	var out []ToolCall
	for _, b := range msgs[len(msgs)-1].Content {
		if b.Type != "tool_result" {
			continue
		}
		use := uses[b.ToolUseID]
		out = append(out, ToolCall{Name: use.Name, Input: use.Input, Result: b.Content.Text(), IsError: b.IsError})
	}
	return out
}

// AllText is every text the request carries (system, and all message text
// and tool results), for "did the model see X" assertions.
func (r *Request) AllText() string {
	var sb strings.Builder
	sb.WriteString(r.Body.System.Text())
	for _, m := range r.Body.Messages {
		for _, b := range m.Content {
			sb.WriteString("\n")
			switch b.Type {
			case "tool_result":
				sb.WriteString(b.Content.Text())
			default:
				sb.WriteString(b.Text)
			}
		}
	}
	return sb.String()
}

// ToolNames lists the names of the tools the request offered.
func (r *Request) ToolNames() []string {
	names := make([]string, 0, len(r.Body.Tools))
	for _, t := range r.Body.Tools {
		names = append(names, t.Name)
	}
	return names
}
