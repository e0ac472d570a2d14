// Package mcphost is the gateway's side of the agent's tools: an MCP server
// per sandbox run, built on the official Go MCP SDK, serving tools that the
// gateway registers in Go.
//
// A Host holds the tools (Register: server id, name, description, JSON
// schema, handler). For each run, Open starts a Session on mcp.sock in the
// sandbox's host directory (mounted at /run/agentbox in the container) and
// writes the run's token there, readable only by the sandbox user. Inside
// the container two clients reach it through the helper:
//
//   - `agentbox-helper mcp --server <id>`, the stdio MCP server that the
//     agent CLI starts from .mcp.json (config.HelperRelay), sees the
//     granted tools of one server, named as registered; Claude Code calls
//     them mcp__<id>__<tool>;
//   - `abx` (`agentbox-helper tools`), the agent-facing CLI, connects as
//     server "" (AgentServer) and sees every granted tool as
//     mcp__<server>__<tool>, plus the request's context.
//
// Every connection first presents the token in a hello line; the identity
// (user, chat, assistant) handlers see comes from the Session's Grant,
// never from the caller's arguments. The Grant's allowlist (from the
// assistant's mcp.servers[].tools, see AllowFromTools) decides which tools
// are listed; a call to any other tool is refused and logged. Arguments
// are validated against the tool's schema before the handler runs. Every
// call has a deadline (Options.CallTimeout) and is cancelled when the
// Session is revoked; a handler that ignores its context is abandoned at
// the deadline, and a panicking handler becomes an error result while the
// Session keeps serving. Messages are capped (Options.MaxLine), as are
// concurrent connections (Options.MaxConns). Revoke (or Close) kills the
// token when the request ends.
//
// OpenOptions.OnCall hears of every call as it starts and ends, with how it
// came (ViaMCP from the CLI's MCP client, ViaCLI from abx); the middleware
// streams the abx ones as tool events, since the agent CLI's own stream
// shows only the shell command. Each connection carries newline-delimited
// JSON-RPC after the hello (helper.LineTransport on both sides).
//
// Concurrency: Host and Session are safe for concurrent use; handlers run
// concurrently, one goroutine per call. OnCall is called from the calls'
// goroutines, one at a time, and never after Close returned.
package mcphost
