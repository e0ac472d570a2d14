package cursor

import (
	"strings"

	"github.com/tidwall/gjson"
)

// toolNames maps Cursor's typed tool-call payload keys to the names Claude
// Code gives the equivalent tools, so both runners describe the same action
// the same way. Payload keys not listed keep their own name without the
// "ToolCall" suffix.
var toolNames = map[string]string{
	"readToolCall":        "Read",
	"writeToolCall":       "Write",
	"editToolCall":        "Edit",
	"deleteToolCall":      "Delete",
	"shellToolCall":       "Bash",
	"grepToolCall":        "Grep",
	"globToolCall":        "Glob",
	"lsToolCall":          "LS",
	"todoToolCall":        "TodoWrite",
	"updateTodosToolCall": "TodoWrite",
	"webFetchToolCall":    "WebFetch",
	"webSearchToolCall":   "WebSearch",
}

// toolCall is the typed payload of a tool_call event.
type toolCall struct {
	kind string       // payload key, e.g. "writeToolCall", or "function"
	body gjson.Result // the payload object
}

// findToolCall picks the payload out of a tool_call object: the one key
// ending in "ToolCall" (or "function") whose value is an object. Other keys
// at that level (toolCallId, startedAtMs, ...) are metadata.
func findToolCall(tc gjson.Result) (toolCall, bool) {
	var found toolCall
	ok := false
	tc.ForEach(func(k, v gjson.Result) bool {
		key := k.String()
		if v.IsObject() && (strings.HasSuffix(key, "ToolCall") || key == "function") {
			found, ok = toolCall{kind: key, body: v}, true
			return false
		}
		return true
	})
	return found, ok
}

// name is the executor tool name of the call.
func (t toolCall) name() string {
	switch t.kind {
	case "function":
		if n := t.body.Get("name").String(); n != "" {
			return n
		}
		return "function"
	case "mcpToolCall":
		args := t.body.Get("args")
		server, tool := args.Get("providerIdentifier").String(), args.Get("toolName").String()
		if server != "" && tool != "" {
			return "mcp__" + server + "__" + tool
		}
		if n := args.Get("name").String(); n != "" {
			return n
		}
		return "mcp"
	}
	if n, ok := toolNames[t.kind]; ok {
		return n
	}
	return strings.TrimSuffix(t.kind, "ToolCall")
}

// input is the call's arguments as JSON.
func (t toolCall) input() []byte {
	if t.kind == "function" {
		a := t.body.Get("arguments")
		if a.Type == gjson.String && gjson.Valid(a.String()) {
			return []byte(a.String())
		}
		if a.Exists() {
			return []byte(a.Raw)
		}
		return nil
	}
	if a := t.body.Get("args"); a.Exists() {
		return []byte(a.Raw)
	}
	return nil
}

// result renders a completed call's result as text and tells whether it
// failed. Cursor wraps results in a one-key object naming the outcome:
// {"success": {...}} or {"error"|"failure"|"rejected"|...: ...}; a shell
// command that exited non-zero is a failure even inside "success".
func (t toolCall) result() (content string, isError bool) {
	res := t.body.Get("result")
	if t.kind == "function" && !res.Exists() {
		res = t.body.Get("output")
	}
	switch {
	case !res.Exists() || res.Type == gjson.Null:
		return "", false
	case res.Type == gjson.String:
		return res.String(), false
	case !res.IsObject():
		return res.Raw, false
	}
	outcome, value := "", gjson.Result{}
	res.ForEach(func(k, v gjson.Result) bool {
		outcome, value = k.String(), v
		return false
	})
	isError = outcome != "success"
	content = describe(value)
	if code := value.Get("exitCode"); code.Exists() && code.Int() != 0 {
		isError = true
		content = joinNonEmpty("\n", "Exit code "+code.String(), content)
	}
	return content, isError
}

// describe picks the readable part of a result payload: a plain string, the
// file content of a read, a shell command's output, an error message, or
// else the payload's JSON.
func describe(v gjson.Result) string {
	if v.Type == gjson.String {
		return v.String()
	}
	if !v.IsObject() {
		return v.Raw
	}
	if c := v.Get("content"); c.Type == gjson.String {
		return c.String()
	} else if c.IsArray() {
		// MCP results: a list of content items with text parts.
		var parts []string
		for _, item := range c.Array() {
			if t := item.Get("text.text"); t.Type == gjson.String {
				parts = append(parts, t.String())
			} else if t := item.Get("text"); t.Type == gjson.String {
				parts = append(parts, t.String())
			}
		}
		if len(parts) > 0 {
			return strings.Join(parts, "\n")
		}
	}
	if v.Get("stdout").Exists() || v.Get("stderr").Exists() {
		return joinNonEmpty("\n", strings.TrimRight(v.Get("stdout").String(), "\n"), strings.TrimRight(v.Get("stderr").String(), "\n"))
	}
	for _, key := range []string{"error", "message", "reason"} {
		if m := v.Get(key); m.Type == gjson.String {
			return m.String()
		}
	}
	return v.Raw
}
