package codex

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/agentbox/agentbox/executor"
)

// mcpServer is one entry of RunRequest.MCPConfig, Claude Code's .mcp.json
// shape ({"mcpServers": {name: ...}}), which config writes for every
// runner.
type mcpServer struct {
	Type    string            `json:"type"`
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

// bareKey is a TOML bare key: MCP server names, environment variable and
// header names are written as parts of dotted -c keys.
var bareKey = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// mcpOverrides turns the MCP configuration into the CLI's
// mcp_servers.<name>.* settings. allowed is the run's allowed tools in
// Claude Code's naming: mcp__<server> allows every tool of a server,
// mcp__<server>__<tool> one tool, and a server with neither gets no tool
// (enabled_tools = []), so the gateway's allowlist holds in the CLI as it
// does on the host.
func mcpOverrides(config []byte, allowed []string) ([]override, error) {
	if config == nil {
		return nil, nil
	}
	var doc struct {
		Servers map[string]mcpServer `json:"mcpServers"`
	}
	if err := json.Unmarshal(config, &doc); err != nil {
		return nil, fmt.Errorf("%w: the MCP configuration is not valid JSON (%w); check the assistant's mcp servers", executor.ErrInvalid, err)
	}
	names := make([]string, 0, len(doc.Servers))
	for n := range doc.Servers {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []override
	for _, name := range names {
		s := doc.Servers[name]
		if !bareKey.MatchString(name) {
			return nil, fmt.Errorf("%w: MCP server name %q; use letters, digits, - and _", executor.ErrInvalid, name)
		}
		key := "mcp_servers." + name + "."
		switch {
		case s.Type == "http" || s.Type == "sse" || s.URL != "":
			if s.Command != "" || s.URL == "" {
				return nil, fmt.Errorf("%w: MCP server %q: an http server has a url and no command", executor.ErrInvalid, name)
			}
			out = append(out, override{key + "url", tomlString(s.URL)})
			for _, h := range sortedKeys(s.Headers) {
				if !bareKey.MatchString(h) {
					return nil, fmt.Errorf("%w: MCP server %q: header name %q", executor.ErrInvalid, name, h)
				}
				out = append(out, override{key + "http_headers." + h, tomlString(s.Headers[h])})
			}
		case s.Command != "":
			out = append(out, override{key + "command", tomlString(s.Command)})
			if len(s.Args) > 0 {
				out = append(out, override{key + "args", tomlStrings(s.Args)})
			}
			for _, e := range sortedKeys(s.Env) {
				if !bareKey.MatchString(e) {
					return nil, fmt.Errorf("%w: MCP server %q: environment variable name %q", executor.ErrInvalid, name, e)
				}
				out = append(out, override{key + "env." + e, tomlString(s.Env[e])})
			}
		default:
			return nil, fmt.Errorf("%w: MCP server %q has neither a command nor a url", executor.ErrInvalid, name)
		}
		if tools, all := allowedTools(name, allowed); !all {
			out = append(out, override{key + "enabled_tools", tomlStrings(tools)})
		}
	}
	return out, nil
}

// allowedTools returns the tools of server the allowlist names, or
// all=true when it allows the whole server.
func allowedTools(server string, allowed []string) (tools []string, all bool) {
	prefix := "mcp__" + server
	tools = []string{}
	for _, a := range allowed {
		switch {
		case a == prefix:
			return nil, true
		case strings.HasPrefix(a, prefix+"__"):
			if t := strings.TrimPrefix(a, prefix+"__"); t != "" && !slices.Contains(tools, t) {
				tools = append(tools, t)
			}
		}
	}
	return tools, false
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
