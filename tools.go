package agentbox

import (
	"errors"
	"io"
	"slices"

	"github.com/agentbox/agentbox/executor/mcphost"
	"github.com/agentbox/agentbox/middleware"
)

// MCPTools is the middleware's ToolHost for executor/mcphost's Host: a run
// whose assistant is allowed mcp__<server> tools registered on h gets an
// mcphost Session on mcp.sock in its host directory; the calls the agent
// makes through the abx CLI from its shell are reported as tool calls
// (those through the CLI's own MCP client are in the CLI's stream).
func MCPTools(h *mcphost.Host) middleware.ToolHost { return mcpTools{h} }

type mcpTools struct{ h *mcphost.Host }

// Serves reports whether any of allowedTools names a server registered on
// the host (mcp__<server> or mcp__<server>__<tool>).
func (t mcpTools) Serves(allowedTools []string) bool {
	servers := t.h.Servers()
	for srv := range mcphost.AllowFromTools(allowedTools) {
		if slices.Contains(servers, srv) {
			return true
		}
	}
	return false
}

func (t mcpTools) Open(g middleware.ToolGrant) (io.Closer, error) {
	allow := mcphost.AllowFromTools(g.AllowedTools)
	if len(allow) == 0 {
		return nil, nil
	}
	if g.HostDir == "" {
		return nil, errors.New("agentbox: the sandbox has no host directory for the tools socket; run the executor with the helper")
	}
	var onCall func(mcphost.CallEvent)
	if g.OnShellCall != nil {
		onCall = func(ev mcphost.CallEvent) {
			if ev.Via != mcphost.ViaCLI {
				return
			}
			c := middleware.ToolCall{ID: mcphost.ViaCLI + "-" + ev.ID, Name: "mcp__" + ev.Server + "__" + ev.Tool, Arguments: ev.Arguments, Done: ev.Done}
			if ev.Result != nil {
				c.Result, c.IsError = ev.Result.Text, ev.Result.IsError
			}
			g.OnShellCall(c)
		}
	}
	s, err := t.h.Open(mcphost.OpenOptions{HostDir: g.HostDir, UID: g.UID, GID: g.GID, Sandbox: g.Sandbox,
		Grant: mcphost.Grant{Identity: mcphost.Identity{User: g.User, Chat: g.Chat, Assistant: g.Assistant}, Allow: allow}, OnCall: onCall})
	if err != nil {
		return nil, err
	}
	return s, nil
}
