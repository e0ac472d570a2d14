package middleware

import (
	"encoding/json"
	"io"

	"github.com/agentbox/agentbox/executor"
)

// ToolHost serves the gateway's own tools to the agents: for each run, a
// session on the sandbox's host directory (where the in-container helper
// relays the agent's tool calls), granted the assistant's allowed tools
// and the request's identity, closed (revoked) when the run ends.
// agentbox.MCPTools adapts executor/mcphost's Host. Implementations are
// safe for concurrent use.
type ToolHost interface {
	// Open starts serving one run as g says. It returns a nil session and
	// no error when the host serves none of g.AllowedTools.
	Open(g ToolGrant) (ToolSession, error)
	// Serves reports whether Open would serve any of allowedTools. A run
	// with such a tool needs a session before its CLI starts: for a
	// pre-started CLI (session policy) it opens with the chat's identity
	// when the previous turn ends, and the next request takes it; for the
	// CLI of a pre-warmed client sandbox it opens without a chat, and the
	// request that adopts the CLI binds its chat.
	Serves(allowedTools []string) bool
}

// ToolSession is one run's tool session. Close revokes it.
type ToolSession interface {
	io.Closer
	// Bind gives a session opened without a chat (ToolGrant.Chat "") the
	// chat of the request that takes it, once; until then the session
	// refuses every call. Binding it to the chat it serves is a no-op;
	// to another one, an error.
	Bind(user, chat string) error
}

// ToolGrant is what one run's agent may call, and who it is.
type ToolGrant struct {
	// HostDir is the sandbox's host directory (Sandbox.HostDir); UID and
	// GID own what the session makes there (the sandbox user).
	HostDir  string
	UID, GID int
	// Box is the sandbox itself, for a tool host that reaches a sandbox
	// without a host directory (HostDir "", a Kubernetes pod) through its
	// backend.
	Box executor.Sandbox
	// Sandbox is the sandbox's id, for the handlers and the logs.
	Sandbox string
	// User, Chat and Assistant identify the request to the tools. Chat
	// is "" for a session opened before its request (ToolSession.Bind).
	User, Chat, Assistant string
	// AllowedTools are the assistant's allowed tools
	// (Sandbox.Run.AllowedTools); the host serves the ones it has.
	AllowedTools []string
	// OnShellCall hears of each tool call the agent made from its shell,
	// which the agent CLI's own stream does not show as a tool call: once
	// when it starts and once when it ended, never after the session was
	// closed, one at a time.
	OnShellCall func(ToolCall)
}

// ToolCall is a tool call the agent made from its shell.
type ToolCall struct {
	// ID is unique within the run; Name is the tool's name as the agent
	// CLI would show it (mcp__<server>__<tool>).
	ID, Name string
	// Arguments is the JSON object the agent sent.
	Arguments json.RawMessage
	// Done is false at the start and true at the end, when Result (the
	// text the agent got) and IsError are set.
	Done    bool
	Result  string
	IsError bool
}
