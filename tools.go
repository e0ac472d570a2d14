package agentbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/agentbox/agentbox/executor/helper"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/services/mcphost"
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

func (t mcpTools) Open(g middleware.ToolGrant) (middleware.ToolSession, error) {
	allow := mcphost.AllowFromTools(g.AllowedTools)
	if len(allow) == 0 {
		return nil, nil
	}
	var ln net.Listener
	var writeToken func(string) error
	if g.HostDir == "" {
		// A pod: the socket is the helper's own, relayed back through the
		// backend, and the token reaches it through the helper.
		tw, ok := g.Box.(interface {
			WriteToken(context.Context, string) error
		})
		if !ok {
			return nil, errors.New("agentbox: the sandbox has no host directory for the tools socket and its backend cannot relay one; run the executor with the helper")
		}
		var err error
		if ln, err = helper.ListenSandbox(context.Background(), g.Box, helper.MCPSocket, g.UID, g.GID); err != nil {
			return nil, fmt.Errorf("agentbox: tools socket: %w", err)
		}
		writeToken = func(tok string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return tw.WriteToken(ctx, tok)
		}
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
	s, err := t.h.Open(mcphost.OpenOptions{HostDir: g.HostDir, Listener: ln, WriteToken: writeToken, UID: g.UID, GID: g.GID, Sandbox: g.Sandbox,
		Grant: mcphost.Grant{Identity: mcphost.Identity{User: g.User, Chat: g.Chat, Assistant: g.Assistant}, Allow: allow}, OnCall: onCall})
	if err != nil {
		if ln != nil {
			_ = ln.Close()
		}
		return nil, err
	}
	return mcpSession{s}, nil
}

// mcpSession is an mcphost Session as the middleware's ToolSession.
type mcpSession struct{ *mcphost.Session }

func (s mcpSession) Bind(user, chat string) error {
	id := s.Identity()
	id.User, id.Chat = user, chat
	return s.Session.Bind(id)
}
