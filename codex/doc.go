// Package codex runs OpenAI's Codex CLI (`codex exec`, npm @openai/codex,
// its native binary from @openai/codex-linux-x64): it builds argv, env and
// stdin for one non-interactive run and parses the CLI's JSON events
// (--json) into executor events and a completion. The parser is a pure
// function of the CLI's stdout. Facts it relies on were verified against
// the real CLI at the pin (0.171.0) and the previous pin (0.169.0), both
// named in examples/images/VERSIONS; real transcripts are under
// testdata/recorded-<version>, with what they show in its README.md, and CI
// runs this package's tests against an image of each pin (make
// test-codex-previous).
//
// # Invocation
//
//	codex exec --json --color never --skip-git-repo-check
//	  --dangerously-bypass-approvals-and-sandbox --ignore-user-config --ignore-rules
//	  --cd <workdir> -m <model_profile or the connector's model>
//	  --disable <each of DisabledFeatures>
//	  -c model_provider="agentbox" -c model_providers.agentbox.base_url="<relay>/v1" ...
//	     (env_key AGENTBOX_MODEL_TOKEN, wire_api "responses", request_max_retries 0,
//	      stream_max_retries <max_retries>)
//	  -c web_search="disabled" -c analytics.enabled=false -c check_for_update_on_startup=false
//	  -c shell_environment_policy.exclude=["AGENTBOX_MODEL_TOKEN"]
//	  [-c model_context_window=N] [-c mcp_servers.<name>.* ...] [-c developer_instructions="<system prompt>"]
//	  (--ephemeral | resume <session id>) -
//
// The CLI speaks the Responses API only: it POSTs {base_url}/responses with
// stream true, and refuses a provider with wire_api "chat". The provider's
// base URL is the sandbox's model relay, so every model call goes to the
// gateway's model proxy with the run's token (AGENTBOX_MODEL_TOKEN), never
// the connector's key. The CLI's own sandbox and approvals are off
// (--dangerously-bypass-approvals-and-sandbox): the container is the
// boundary, its sandbox would need namespaces the container does not give,
// and nothing may prompt. The prompt is read from stdin ("-"), so that a
// CLI started before its request (the session policy's warm turn) waits
// there for its message. Settings are -c overrides only, each a TOML value
// in one argv element (at most 96 KiB; a longer system prompt is an
// error): --ignore-user-config leaves $CODEX_HOME/config.toml unread, so
// nothing the agent writes there takes effect.
//
// The environment is built from scratch: PATH, HOME, SHELL, LANG,
// AGENTBOX_MODEL_TOKEN, NO_COLOR, TERM=dumb. CODEX_HOME is unset, so the
// CLI keeps its state and sessions in $HOME/.codex (CodexDir), which it
// creates (a CODEX_HOME naming a missing directory is an error). The
// agent's commands get that environment without the token
// (shell_environment_policy.exclude): the CLI's own default excludes do
// not apply at the pins.
//
// Sandbox arguments (package.yao sandbox.arguments): model_profile (the
// model the CLI believes it uses; default the connector's), context_window,
// max_retries (0-5, default 2), sessions (default true). Unknown keys are
// errors. The CLI takes its tools, instructions and context window from its
// catalog entry of the model it is given (-m); for a model it does not know
// it warns and falls back to a shell-only tool set without apply_patch, so
// an assistant on a connector whose model the CLI does not know (an
// Anthropic model, a local one) names a profile, e.g. "gpt-5.5", and
// context_window when the real model's is smaller. The model proxy pins
// the connector's model whatever the CLI names.
//
// # Files the CLI reads at start-up
//
// From HOME: nothing but what the gateway places (CODEX_HOME/config.toml is
// not read; execpolicy rules are off; hooks, plugins, apps and memories are
// disabled features), and the assistant's skills under $HOME/.agents/skills.
// From the workspace: AGENTS.md (the user's project instructions, text the
// model reads, as Claude Code's CLAUDE.md) and the project's skills
// (.agents/skills, .codex/skills), listed to the model as text; the
// workspace's .codex/config.toml, hooks and rules belong to an untrusted
// project and stay off (the runner never passes --trust and never writes a
// trust entry), and a skill's MCP dependencies are never installed
// (skill_mcp_dependency_install is off). A file the agent leaves in the
// workspace therefore reaches later turns as text, like any file, and never
// as configuration, keys or shell.
//
// # Conversation history and sessions
//
// Without a SessionID the CLI keeps no session (--ephemeral) and earlier
// turns reach the model inside the prompt, in a <conversation_history>
// block as the claude runner writes it. The CLI cannot start a session
// under an id the gateway chooses, so a session starts from a transcript
// the gateway writes (ReplayTranscript: the session's metadata line and the
// earlier turns as the CLI's own message items) at
// $CODEX_HOME/sessions/agentbox/rollout-<id>.jsonl (TranscriptFile), and
// every run with a SessionID resumes it (`exec resume <id>`): the CLI finds
// the file by id, sends the replayed turns to the model as real turns,
// appends the new turn to the file, and the middleware keeps that file for
// the next turn (SeedsSessions). The CLI forks only whole sessions, so a
// regenerated answer or a branch after an earlier turn starts a new
// session with the history replayed (ReplayTranscript reports no fork
// points).
//
// # Events
//
//   - thread.started → EventInit (the session id)
//   - item.completed agent_message → EventText, "\n\n" (its own text event)
//     between two messages; the CLI prints a message whole, when the model
//     has finished it, never as deltas
//   - item.completed reasoning → EventThinking
//   - command_execution → EventToolUse "Bash" (input {"command"}, the CLI's
//     `/bin/bash -lc '...'` wrapper taken off) at item.started, then
//     EventToolResult with the output; a non-zero exit is an error result
//     starting "Exit code N" (Claude Code's form, which the middleware's
//     client sandbox events read)
//   - file_change → one EventToolUse per file ("Write" for an added file,
//     "Edit", "Delete"; input {"file_path"}, the CLI reports no content)
//     and its EventToolResult
//   - mcp_tool_call → EventToolUse "mcp__<server>__<tool>" with the
//     arguments, EventToolResult with the text blocks or the error
//   - web_search → EventToolUse "WebSearch"
//   - error events "Reconnecting... n/m (...)" → EventRetry; the CLI retries
//     a failed request or a broken stream max_retries times
//   - turn.completed → the Completion (FinishStop, usage); turn.failed → a
//     failed Completion with the CLI's message and the HTTP status it names
//     (APIErrorStatus)
//   - item.completed error (a notice such as a model without metadata) is
//     logged; item.updated, todo_list and unknown types are skipped and
//     logged at debug level
//
// The usage of turn.completed is the session's running total: a resumed
// session's first turn reports the earlier turns too. The middleware's
// usage is the model proxy's metered figures.
//
// Parse returns at turn.completed or turn.failed (the CLI exits right
// after). Output that ends without them is an error matching ErrNoResult
// (an *IncompleteError); WithExit adds the exit status and stderr, where
// the CLI prints a start-up failure. A line over the cap (64 MiB by
// default) is an error, never a silent truncation. Since the CLI prints
// nothing while the model streams an answer, the sandbox's stall_timeout
// must outlast the longest single model answer.
//
// Concurrency: a Runner holds no per-run state and is safe for concurrent
// use; each Parse call owns its reader.
package codex
