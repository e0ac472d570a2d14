package config

import (
	"fmt"
	"strings"
)

// field documents one key of a file format; the decoders take their known
// keys from these tables, so REFERENCE.md cannot drift from the code.
type field struct {
	Key, Type, Default, Doc string
}

func fieldKeys(fs []field) []string {
	keys := make([]string, len(fs))
	for i, f := range fs {
		keys[i] = f.Key
	}
	return keys
}

var packageFields = []field{
	{"name", "string", "the directory name", "display name"},
	{"description", "string", "", "what the assistant is for"},
	{"connector", "string", "(required)", "connector id, e.g. \"deepseek.v3\" for connectors/deepseek/v3.conn.yao"},
	{"sandbox", "object", "none: a plain assistant", "run requests in a sandbox with an agent CLI; see Sandbox options"},
	{"mcp", "object", "", "`{\"servers\": [{\"server_id\": \"filesystem\", \"tools\": [\"read_file\"]}]}`: servers from mcps/ the agent may use; no `tools` allows every tool of the server"},
}

var connectorFields = []field{
	{"label", "string", "", "display name"},
	{"type", "string", "(required)", quoteList(connectorTypes) + "; claude and codex use anthropic or openai, cursor uses cursor"},
	{"options.host", "string", "per type", "API base URL (http or https)"},
	{"options.model", "string", "(required)", "model name"},
	{"options.key", "string", "none", "API key, or \"$ENV.NAME\" to read it from the gateway's environment (an unset variable is an error)"},
	{"options.api", "string", "\"chat_completions\"", "openai only: the API the provider serves, \"chat_completions\" or \"responses\" (OpenAI's own); a codex assistant's calls are passed through to a Responses provider and translated to Chat Completions otherwise; a claude assistant's go through Chat Completions either way"},
	{"options.reasoning_field", "string", "both", "openai only: the field the provider streams reasoning in, \"reasoning_content\" (DeepSeek, Qwen, Kimi, vLLM before 0.10) or \"reasoning\" (OpenRouter, Ollama, vLLM 0.10+); it becomes thinking for the Claude CLI"},
	{"options.thinking", "string", "none", "openai only: how to ask for reasoning when the CLI enables thinking, \"reasoning_effort\" (OpenAI o-series and gpt-5, OpenRouter, Groq) or \"enable_thinking\" (Qwen on DashScope, vLLM/SGLang serving Qwen3)"},
	{"options.stream_usage", "boolean", "true", "openai only: send stream_options.include_usage (most providers send no usage in streams without it); false only for providers that refuse the field"},
	{"options.max_tokens", "integer", "none", "openai only: ceiling on max_tokens (the Claude CLI asks for up to 32000; DeepSeek chat allows 8192)"},
	{"options.max_completion_tokens", "boolean", "false", "openai only: send max_completion_tokens instead of max_tokens (OpenAI's reasoning models require it)"},
}

var mcpServerFields = []field{
	{"label", "string", "", "display name"},
	{"description", "string", "", "what the server offers"},
	{"transport", "string", "(required)", "\"stdio\", \"http\" or \"gateway\" (tools the gateway registers in Go, reached through the helper)"},
	{"command", "string", "(stdio: required)", "program to run"},
	{"args", "array of strings", "[]", "its arguments"},
	{"env", "object of strings", "{}", "its environment; values may be \"$ENV.NAME\""},
	{"url", "string", "(http: required)", "server URL"},
	{"headers", "object of strings", "{}", "HTTP headers; values may be \"$ENV.NAME\""},
}

var promptFields = []field{
	{"role", "string", "(required)", quoteList(promptRoles)},
	{"content", "string", "(required)", "message text; the system messages, joined by a blank line, are the agent's instructions"},
	{"name", "string", "", "optional speaker name"},
}

var skillDocFields = []field{
	{"name", "string", "the directory name", "1-64 lowercase letters, digits and single hyphens; must equal the directory name (else the skill is excluded)"},
	{"description", "string", "(required)", "1-1024 characters: what the skill does and when to use it (missing: excluded; longer: warning)"},
	{"license", "string", "", "license name or bundled file"},
	{"compatibility", "string", "", "environment requirements, up to 500 characters"},
	{"metadata", "map of strings", "", "extra key-value pairs"},
	{"allowed-tools", "string", "", "space-separated pre-approved tools, e.g. `Read Bash(git:*)` (a YAML list is accepted with a warning)"},
}

// reference renders REFERENCE.md.
func reference() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Configuration reference\n\n")
	w("Generated from the tables in package config by `go test ./config -run TestReference -update`; do not edit.\n\n")
	w("A gateway directory holds:\n\n")
	w("```\nassistants/<id>/\n  package.yao            JSONC: comments and trailing commas allowed\n  prompts.yml            optional: YAML list of messages\n  mcps/<server_id>.mcp.yao   optional: MCP server definitions (JSONC)\n  src/index.ts | index.js    optional: hooks (never both)\n  skills/<name>/SKILL.md     optional: Agent Skills (+ scripts/, references/, assets/)\nconnectors/**/<name>.conn.yao   JSONC; id = path without .conn.yao, \"/\" -> \".\"\n```\n\n")
	w("Decoding is strict: an unknown key is an error (with \"did you mean\" when a known key is close). ")
	w("`config.Load` reports every problem at once, one per line, as\n`file:line:col: key.path: what is wrong; how to fix it` (warnings carry `warning:` after the position). ")
	w("Skill problems never fail loading: a refused skill is left out with a `skill excluded` error in `Gateway.Problems`.\n\n")

	w("## package.yao\n\n")
	fieldTable(&b, packageFields)

	w("## Sandbox options\n\nKeys of the `sandbox` block. Defaults are applied in one place and are visible in the loaded `Sandbox`.\n\n")
	w("| key | type | default | meaning |\n|---|---|---|---|\n")
	for _, o := range sandboxOptions {
		w("| `%s` | %s | %s | %s |\n", o.Key, o.Type, cell(o.Default), cell(o.Doc))
	}
	w("\nSizes are a number with k, m or g (binary multiples, e.g. \"512m\", \"4g\"). Durations are Go durations (\"500ms\", \"30s\", \"10m\").\n\n")

	w("%s", egressReference)
	w("## Commands\n\n")
	for _, c := range commands {
		w("### %s\n\n%s\n\n- default image: `%s`\n- connector types: %s\n", c.Name, c.Doc, c.DefaultImage, quoteList(c.ConnectorTypes))
		if c.NeedsNetwork != "" {
			w("- network must not be \"none\": %s\n", c.NeedsNetwork)
		}
		if c.NeedsKey != "" {
			w("- the connector must have a key: %s\n", c.NeedsKey)
		}
		w("\n| argument | type | meaning |\n|---|---|---|\n")
		for _, a := range c.Arguments {
			t := string(a.Type)
			switch a.Type {
			case argEnum:
				t += " " + quoteList(a.Enum)
			case argInt:
				t += fmt.Sprintf(" %d to %d", a.Min, a.Max)
			}
			w("| `%s` | %s | %s |\n", a.Name, cell(t), cell(a.Doc))
		}
		w("\nArguments of another command are errors naming it; refused here:\n\n")
		for _, name := range sorted(mapKeys(c.Refused)) {
			w("- `%s`: %s\n", name, c.Refused[name])
		}
		w("\n")
	}

	w("## connectors/**/<name>.conn.yao\n\n")
	fieldTable(&b, connectorFields)
	w("Default hosts: ")
	for i, t := range connectorTypes {
		if i > 0 {
			w(", ")
		}
		w("%s `%s`", t, defaultHosts[t])
	}
	w(".\n\n")

	w("## mcps/<server_id>.mcp.yao\n\nThe file name is the server id (letters, digits, `_`, `-`; no `__`). ")
	w("A definition not listed in `mcp.servers` is reported as a warning. ")
	w("`Assistant.MCPConfig` renders Claude Code's `.mcp.json`; `HelperRelay` rewrites each server to the in-container relay (`agentbox-helper mcp --server <id>`). ")
	w("`Assistant.MCPAllowedTools` lists `mcp__<server>__<tool>` per allowlisted tool, or `mcp__<server>` when a server has no allowlist.\n\n")
	fieldTable(&b, mcpServerFields)

	w("## prompts.yml\n\nA YAML list of messages:\n\n")
	fieldTable(&b, promptFields)

	w("## skills/<name>/SKILL.md\n\nYAML front matter between `---` lines at the top ([Agent Skills](https://agentskills.io)). ")
	w("What Claude Code refuses excludes the skill (no front matter, malformed front matter, no description, name different from the directory); ")
	w("what it tolerates is a warning (over-long fields, unknown fields, a name breaking the naming rule). ")
	w("Claude Code's own fields are accepted: %s.\n\n", "`"+strings.Join(claudeSkillFields, "`, `")+"`")
	fieldTable(&b, skillDocFields)
	return b.String()
}

func fieldTable(b *strings.Builder, fs []field) {
	b.WriteString("| key | type | default | meaning |\n|---|---|---|---|\n")
	for _, f := range fs {
		fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", f.Key, f.Type, cell(f.Default), cell(f.Doc))
	}
	b.WriteString("\n")
}

// cell escapes a Markdown table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

func mapKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
