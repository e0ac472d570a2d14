// Package cursor runs Cursor's CLI (cursor-agent) as agentbox's second
// runner: it builds argv, env, stdin and workspace files for one headless
// run and parses the CLI's stream-json output into the same executor events
// and completion as package claude.
//
// # Invocation
//
// One run is
//
//	cursor-agent -p --output-format stream-json --stream-partial-output \
//	    --force --trust --workspace /workspace [--model M] [--approve-mcps]
//
// (--force unless the assistant sets the sandbox argument force to false;
// the argument model overrides the connector's model) with the prompt on
// stdin and no positional prompt: cursor-agent reads a
// non-TTY stdin to EOF when no prompt argument is given, so prompts and
// conversation history of any size avoid Linux's 128 KiB cap on one argv
// element. The CLI has no structured input format and no way to seed a new
// session with earlier turns (--resume needs its own session store, which
// lives in the per-run HOME and is gone), so earlier turns are written into
// the prompt text as a tagged transcript ahead of the latest user message.
//
// Workspace files written before the run (Invocation.Files):
//
//   - .cursor/rules/agentbox.mdc: the assistant's instructions as an
//     always-applied project rule (frontmatter alwaysApply: true). It is
//     written on every run, empty when there are no instructions, so
//     instructions from an earlier configuration never linger. A user's own
//     AGENTS.md is left alone.
//   - .cursor/mcp.json: the MCP servers (same mcpServers shape as Claude's
//     .mcp.json, entries normally run `agentbox-helper mcp`), or an empty
//     server list. It is written on every run so that a file the agent
//     itself wrote in the persistent workspace is never loaded by the next
//     run; --approve-mcps is passed only when servers are configured.
//
// Skills need nothing from this package: Cursor reads .cursor/skills/ and,
// for compatibility, .claude/skills/, where agentbox already copies them.
//
// # Credentials
//
// Cursor's CLI talks to Cursor's own service and cannot be pointed at a
// local model endpoint, so unlike Claude Code it cannot run against the
// model proxy with a per-request token: RunRequest.APIKey must be the
// connector's real Cursor API key, and the sandbox needs egress to Cursor
// (the assistant's config must declare network access; the config package
// refuses a cursor assistant without it). What agentbox does to narrow the
// exposure:
//
//   - the key is passed only in the CLI process's environment
//     (CURSOR_API_KEY in Invocation.Env, handed to the helper's exec), never
//     in argv (visible in ps), never in a workspace file, never in the
//     container's own environment (docker inspect);
//   - the environment is built from scratch (HOME, PATH, NO_COLOR and the
//     key), so nothing from the gateway's environment leaks in;
//   - the run's HOME is a per-run tmpfs, so the CLI's session files and
//     caches die with the container;
//   - ModelBaseURL is ignored and model traffic is not metered by the model
//     proxy: usage comes only from what the CLI reports.
//
// The agent can still read its own environment (a shell tool can print
// CURSOR_API_KEY), so use a dedicated, low-privilege key per connector that
// can be revoked on its own, and keep Cursor assistants to trusted users.
//
// # Events
//
// The parser maps stream-json lines to executor events (sources for every
// field are in testdata/README.md):
//
//   - system/init -> EventInit (session_id, model, permissionMode)
//   - thinking/delta -> EventThinking
//   - assistant -> EventText, deduplicated: with --stream-partial-output the
//     CLI emits token deltas and then the same text again as a consolidated
//     message (with model_call_id, or without timestamp_ms); only text not
//     yet emitted becomes an event. Messages that a tool call (or another
//     message) separates get a "\n\n" text event between them, as in
//     package claude; Cursor's own result text joins them without one
//   - tool_call/started -> EventToolUse, with Cursor's typed payloads named
//     as Claude names the equivalent tool (readToolCall=Read,
//     writeToolCall=Write, editToolCall=Edit, shellToolCall=Bash, ...; MCP
//     calls mcp__server__tool) and the payload's args as input
//   - tool_call/completed -> EventToolResult; is_error when the result is
//     not a success or a shell command exited non-zero
//   - result -> the Completion (duration_ms, is_error, session_id); with
//     is_error its result text is the error message, otherwise text the
//     stream did not carry is emitted so that Content (less separators)
//     matches it
//
// A stream that ends without a result is a failure (ErrNoResult), as
// Cursor documents for failed runs. Unknown event types and fields are
// skipped (logged at debug level).
//
// Concurrency: a Runner holds no per-run state and is safe for concurrent
// use; each Parse call owns its reader.
package cursor
