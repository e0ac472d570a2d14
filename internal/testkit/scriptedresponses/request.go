package scriptedresponses

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/internal/testkit/scriptbook"
)

// Request is one request the server received.
type Request struct {
	scriptbook.Received
	// Body is the decoded body of a responses request (zero otherwise).
	Body Body
}

// Body is the decoded JSON of POST /responses.
type Body struct {
	Model             string          `json:"model"`
	Instructions      string          `json:"instructions"`
	Input             Input           `json:"input"`
	Tools             []Tool          `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
	MaxOutputTokens   int64           `json:"max_output_tokens"`
	Reasoning         json.RawMessage `json:"reasoning"`
	Store             *bool           `json:"store"`
	Stream            bool            `json:"stream"`
	Include           []string        `json:"include"`
	PromptCacheKey    string          `json:"prompt_cache_key"`
}

// Input is the request's input items; in JSON it may also be a string,
// which decodes to one user message.
type Input []Item

// UnmarshalJSON accepts a string or a list of items.
func (in *Input) UnmarshalJSON(data []byte) error {
	items, err := scriptbook.DecodeList(data, func(s string) Item {
		return Item{Type: "message", Role: "user", Content: Content{{Type: "input_text", Text: s}}}
	})
	if err != nil {
		return fmt.Errorf("input: %w", err)
	}
	*in = items
	return nil
}

// Item is one input item: a message, a function or custom tool call the
// model made earlier, its output, a reasoning item...
type Item struct {
	Type      string    `json:"type"`
	Role      string    `json:"role,omitempty"`
	Content   Content   `json:"content,omitempty"`
	CallID    string    `json:"call_id,omitempty"`
	Name      string    `json:"name,omitempty"`
	Arguments Arguments `json:"arguments,omitempty"`
	// Namespace is a namespaced function call's namespace.
	Namespace string `json:"namespace,omitempty"`
	// Input is a custom tool call's freeform input.
	Input string `json:"input,omitempty"`
	// Output is a function or custom tool call's output: a string or a
	// list of content parts.
	Output Content `json:"output,omitempty"`
	// Tools are the tools a tool_search_output found.
	Tools json.RawMessage `json:"tools,omitempty"`
}

// Arguments is a call's arguments: a function call's JSON string, or the
// JSON object of a tool_search_call, kept as its text.
type Arguments string

// UnmarshalJSON accepts a JSON string or any other JSON value.
func (a *Arguments) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*a = Arguments(s)
		return nil
	}
	*a = Arguments(data)
	return nil
}

// Content is a list of content parts; in JSON it may also be a string,
// which decodes to one text part.
type Content []Part

// UnmarshalJSON accepts a string or a list of parts.
func (c *Content) UnmarshalJSON(data []byte) error {
	parts, err := scriptbook.DecodeList(data, func(s string) Part { return Part{Type: "input_text", Text: s} })
	if err != nil {
		return fmt.Errorf("content: %w", err)
	}
	*c = parts
	return nil
}

// Part is one content part (input_text, output_text, input_image...).
type Part struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
}

// Text joins the text of the parts with newlines.
func (c Content) Text() string {
	var out []string
	for _, p := range c {
		if p.Text != "" {
			out = append(out, p.Text)
		}
	}
	return strings.Join(out, "\n")
}

// Tool is a tool the client offered: a function (name, parameters), a
// custom tool (name, format) or a hosted one (type only).
type Tool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	// Tools are a namespace's members.
	Tools []Tool `json:"tools,omitempty"`
}

// ToolResult pairs a tool call with the output answering it.
type ToolResult struct {
	CallID string
	Name   string
	// Arguments is a function call's arguments, or a custom call's input.
	Arguments string
	Output    string
}

// NewToolResults returns the call outputs at the end of the input (what
// the model reacts to now), each with the call it answers. It is empty at
// the start of a user turn.
func (r *Request) NewToolResults() []ToolResult {
	items := r.Body.Input
	calls := map[string]Item{}
	for _, it := range items {
		switch it.Type {
		case "function_call", "custom_tool_call":
			calls[it.CallID] = it
		case "tool_search_call":
			it.Name = "tool_search"
			calls[it.CallID] = it
		}
	}
	i := len(items)
	// The calls and their outputs (and the reasoning before them) after
	// the last message are this step's.
	for i > 0 && (items[i-1].Type != "message" || cliNotice(items[i-1])) {
		i--
	}
	var out []ToolResult
	for _, it := range items[i:] {
		if !isOutput(it.Type) {
			continue
		}
		c := calls[it.CallID]
		args := string(c.Arguments)
		if c.Type == "custom_tool_call" {
			args = c.Input
		}
		output := it.Output.Text()
		if it.Type == "tool_search_output" {
			output = string(it.Tools)
		}
		out = append(out, ToolResult{CallID: it.CallID, Name: c.Name, Arguments: args, Output: output})
	}
	return out
}

// cliNotice reports whether it is a user message the CLI adds in the
// middle of a turn, not one the user sent: when an AGENTS.md it reads
// changes (a command wrote one), the next call carries the new
// instructions after the command's output.
func cliNotice(it Item) bool {
	return it.Type == "message" && it.Role == "user" && strings.HasPrefix(it.Content.Text(), "# AGENTS.md instructions")
}

// isOutput reports whether an input item type is a tool call's output.
func isOutput(typ string) bool {
	return typ == "function_call_output" || typ == "custom_tool_call_output" || typ == "tool_search_output"
}

// UserPrompt is the text of the last user message: what the user asked in
// this turn.
func (r *Request) UserPrompt() string {
	for i := len(r.Body.Input) - 1; i >= 0; i-- {
		if it := r.Body.Input[i]; it.Type == "message" && it.Role == "user" && !cliNotice(it) {
			return it.Content.Text()
		}
	}
	return ""
}

// Messages returns the message items of the input with role (all roles when
// role is empty).
func (r *Request) Messages(role string) []Item {
	var out []Item
	for _, it := range r.Body.Input {
		if it.Type == "message" && (role == "" || it.Role == role) {
			out = append(out, it)
		}
	}
	return out
}

// AllText is every text the request carries (instructions, messages, call
// arguments and outputs), for "did the model see X" assertions.
func (r *Request) AllText() string {
	var sb strings.Builder
	sb.WriteString(r.Body.Instructions)
	for _, it := range r.Body.Input {
		sb.WriteString("\n")
		sb.WriteString(it.Content.Text())
		sb.WriteString(string(it.Arguments))
		sb.WriteString(it.Input)
		sb.WriteString(it.Output.Text())
	}
	return sb.String()
}

// Offers reports whether the request offers a tool named name: a
// function, a custom tool, a namespace (mcp__gateway), or a tool type
// without a name (tool_search).
func (r *Request) Offers(name string) bool {
	for _, t := range r.Body.Tools {
		if cmp.Or(t.Name, t.Type) == name {
			return true
		}
	}
	return false
}

// ToolNames lists the names of the offered tools (the type of a hosted one).
func (r *Request) ToolNames() []string {
	out := make([]string, 0, len(r.Body.Tools))
	for _, t := range r.Body.Tools {
		out = append(out, cmp.Or(t.Name, t.Type))
	}
	return out
}

// outputMarker ends the preamble the Codex CLI puts before a command's
// output in the function_call_output it sends ("Chunk ID: ...\nWall time:
// ...\nProcess exited with code 0\n...\nOutput:\n").
const outputMarker = "\nOutput:\n"

// CommandOutput is the command's own output in a Codex CLI exec_command
// result (without the CLI's preamble), or Output as it is for other tools.
func (t ToolResult) CommandOutput() string {
	if i := strings.Index(t.Output, outputMarker); i >= 0 {
		return t.Output[i+len(outputMarker):]
	}
	return t.Output
}
