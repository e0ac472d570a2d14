package codex

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/agentbox/agentbox/executor"
)

// The tool names events carry: Claude Code's names for the same actions,
// so that both runners describe them alike (the middleware's client
// sandbox events read Bash, Write and Edit).
const (
	toolBash      = "Bash"
	toolWrite     = "Write"
	toolEdit      = "Edit"
	toolDelete    = "Delete"
	toolWebSearch = "WebSearch"
)

// changeTools names a file change by its kind.
var changeTools = map[string]string{"add": toolWrite, "update": toolEdit, "delete": toolDelete}

// toolUses returns the tool calls an item stands for: one for a command,
// an MCP tool call or a web search, one per file for a file change, none
// for other items.
func toolUses(it gjson.Result) []*executor.ToolUse {
	id := it.Get("id").String()
	switch it.Get("type").String() {
	case "command_execution":
		return []*executor.ToolUse{{ID: id, Name: toolBash, Input: marshal(map[string]string{"command": unwrapShell(it.Get("command").String())})}}
	case "file_change":
		changes := it.Get("changes").Array()
		out := make([]*executor.ToolUse, 0, len(changes))
		for i, c := range changes {
			name := changeTools[c.Get("kind").String()]
			if name == "" {
				name = toolEdit
			}
			out = append(out, &executor.ToolUse{ID: changeID(id, i, len(changes)), Name: name,
				Input: marshal(map[string]string{"file_path": c.Get("path").String()})})
		}
		return out
	case "mcp_tool_call":
		args := rawJSON(it.Get("arguments"))
		if string(args) == "null" {
			args = nil
		}
		return []*executor.ToolUse{{ID: id, Name: "mcp__" + it.Get("server").String() + "__" + it.Get("tool").String(), Input: args}}
	case "web_search":
		return []*executor.ToolUse{{ID: id, Name: toolWebSearch, Input: marshal(map[string]string{"query": it.Get("query").String()})}}
	}
	return nil
}

// toolResults returns the results of a finished tool item, in the order
// of its uses.
func toolResults(it gjson.Result) []*executor.ToolResult {
	id := it.Get("id").String()
	status := it.Get("status").String()
	switch it.Get("type").String() {
	case "command_execution":
		out := it.Get("aggregated_output").String()
		code := it.Get("exit_code")
		failed := status != "completed" || code.Exists() && code.Type == gjson.Number && code.Int() != 0
		if failed && code.Type == gjson.Number {
			// Claude Code's form, which the middleware reads the exit
			// code from.
			out = fmt.Sprintf("Exit code %d\n%s", code.Int(), out)
		} else if status == "declined" {
			out = "the command was declined: " + out
		}
		return []*executor.ToolResult{{ToolUseID: id, Content: out, IsError: failed}}
	case "file_change":
		changes := it.Get("changes").Array()
		out := make([]*executor.ToolResult, 0, len(changes))
		for i, c := range changes {
			res := &executor.ToolResult{ToolUseID: changeID(id, i, len(changes)), Content: c.Get("kind").String() + " " + c.Get("path").String()}
			if status != "completed" {
				res.IsError, res.Content = true, "the patch was not applied ("+status+"): "+res.Content
			}
			out = append(out, res)
		}
		return out
	case "mcp_tool_call":
		if e := it.Get("error.message"); e.Exists() || status == "failed" {
			return []*executor.ToolResult{{ToolUseID: id, Content: e.String(), IsError: true}}
		}
		return []*executor.ToolResult{{ToolUseID: id, Content: contentText(it.Get("result.content"))}}
	case "web_search":
		return []*executor.ToolResult{{ToolUseID: id, Content: it.Get("action").Raw}}
	}
	return nil
}

// changeID is the id of the i-th of n changes of a file change item: the
// item's own id when it changes one file.
func changeID(id string, i, n int) string {
	if n == 1 {
		return id
	}
	return fmt.Sprintf("%s/%d", id, i)
}

// contentText flattens MCP content blocks: text is kept, other blocks are
// named.
func contentText(c gjson.Result) string {
	var parts []string
	for _, b := range c.Array() {
		if b.Get("type").String() == "text" {
			parts = append(parts, b.Get("text").String())
		} else {
			parts = append(parts, "["+b.Get("type").String()+"]")
		}
	}
	return strings.Join(parts, "\n")
}

// marshal encodes a tool input; its maps of strings always encode.
func marshal(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// shellPrefixes are how the CLI reports a command it ran through a shell:
// "/bin/bash -lc 'cat hello.txt'".
var shellPrefixes = []string{"/bin/bash -lc ", "bash -lc ", "/bin/sh -c ", "sh -c "}

// unwrapShell returns the command a shell wrapper runs, when the rest is
// one quoted word; the command as reported otherwise.
func unwrapShell(cmd string) string {
	for _, p := range shellPrefixes {
		rest, ok := strings.CutPrefix(cmd, p)
		if !ok {
			continue
		}
		if w, ok := shellWord(rest); ok {
			return w
		}
	}
	return cmd
}

// shellWord unquotes s when it is exactly one POSIX shell word of quoted
// parts ('...', "..." with \\ \" \$ \` escapes, and bare characters).
func shellWord(s string) (string, bool) {
	var sb strings.Builder
	for i := 0; i < len(s); {
		switch c := s[i]; c {
		case '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return "", false
			}
			sb.WriteString(s[i+1 : i+1+j])
			i += j + 2
		case '"':
			i++
			for {
				if i >= len(s) {
					return "", false
				}
				if s[i] == '"' {
					i++
					break
				}
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\\\"$`", s[i+1]) >= 0 {
					sb.WriteByte(s[i+1])
					i += 2
					continue
				}
				sb.WriteByte(s[i])
				i++
			}
		case ' ', '\t', '\n', ';', '&', '|', '<', '>', '(', ')', '$', '`', '\\', '*', '?', '[', '#', '~':
			return "", false
		default:
			sb.WriteByte(c)
			i++
		}
	}
	return sb.String(), true
}
