// Package claude runs the Claude Code CLI: it builds argv, env and stdin for
// one run and parses the CLI's stream-json output into executor events and a
// completion. The parser is a pure function of the CLI's stdout. Facts it
// relies on were verified against the real CLI at the pin (2.1.330) and the
// previous pin (2.1.197), both named in examples/images/VERSIONS; real
// transcripts are under testdata/cli-2.1.197, testdata/recorded (2.1.197)
// and testdata/recorded-2.1.330, and CI runs this package's tests against
// an image of each pin (make test-claude-previous).
//
// # Invocation
//
// argv (each element well under the kernel's 128 KiB cap):
//
//	claude -p --verbose --output-format stream-json --input-format stream-json
//	  --include-partial-messages
//	  (--no-session-persistence | --session-id ID | --resume ID)
//	  --max-turns N --permission-mode MODE --strict-mcp-config
//	  --setting-sources=user --add-dir=<workdir> [--model M] --allowedTools=Bash,Skill,<assistant's>,<request's MCP tools>
//	  [--disallowedTools=...] [--mcp-config=<inline JSON>]
//	  [--append-system-prompt=<text> | --append-system-prompt-file=<workdir>/.agentbox/system-prompt.md]
//
// --verbose is mandatory with stream-json output. --strict-mcp-config is
// always on, so a .mcp.json the agent writes into its workspace is never
// loaded. A system prompt over 96 KiB goes to a file returned in
// Invocation.Files (the middleware restores it over whatever the agent
// left at its name).
//
// # Settings the agent cannot plant
//
// The workspace is the CLI's project directory and the agent writes it, so
// its .claude/settings.json and settings.local.json (hooks, env such as
// ANTHROPIC_BASE_URL, apiKeyHelper, permissions), .claude/skills, agents
// and commands would load on the next turn, for whichever assistant
// answers it. --setting-sources=user turns the project and local sources
// off; only CLAUDE_CONFIG_DIR ($HOME/.claude) loads, and HOME is a tmpfs
// that lives as long as the container: the gateway writes the assistant's
// skills there before every run (middleware Sandbox.HomeFiles), and what
// the agent changes there is gone with the container. Verified on CLI
// 2.1.197 (and by TestE2E's skill test on each pin): with the user source only, no project hook, env, apiKeyHelper,
// skill, agent or command loads, and user skills are listed.
//
// The workspace's CLAUDE.md does load: it is the user's project file, and
// it is text the model reads, not configuration. The user source alone
// skips it, so the runner adds the workspace with --add-dir and sets
// CLAUDE_CODE_ADDITIONAL_DIRECTORIES_CLAUDE_MD=1, which loads an added
// directory's CLAUDE.md and nothing else of it (CLAUDE.local.md and
// .claude/ stay off). A CLAUDE.md the agent writes therefore reaches later
// turns as instructions, like any file it leaves in the workspace.
//
// stdin is one stream-json user line; the CLI answers it and exits when
// stdin closes. The environment is built from scratch: PATH, HOME and
// CLAUDE_CONFIG_DIR (RunRequest.Home), SHELL, LANG, ANTHROPIC_BASE_URL
// (RunRequest.ModelBaseURL), ANTHROPIC_API_KEY (the per-request token),
// CLAUDE_CODE_ADDITIONAL_DIRECTORIES_CLAUDE_MD=1 (see below),
// CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 (without it the CLI sends the
// key to its vendor's hosts), CLAUDE_CODE_MAX_RETRIES (default 2: the CLI's
// default of 10 takes about three minutes to give up on a dead upstream),
// DISABLE_AUTOUPDATER and friends, ENABLE_TOOL_SEARCH=false (from
// 2.1.3xx the CLI otherwise defers MCP tools behind its ToolSearch tool,
// and the model's tool list lacks the gateway's tools until it searches),
// MCP_CONNECTION_NONBLOCKING=0, BUN_JSC_numberOfGCMarkers=2 under a CPU
// quota below two cores (RunRequest.CPUs: the CLI's runtime reads the
// quota in its cgroup and would mark on one thread, which made every
// message wait about 70 ms longer), and IS_SANDBOX=1 only in
// bypassPermissions mode (the CLI refuses that mode as root otherwise).
//
// Sandbox arguments (package.yao sandbox.arguments): max_turns (1-1000,
// default 50), permission_mode (acceptEdits by default), allowed_tools,
// disallowed_tools, max_retries (0-5), sessions (default true). Unknown keys
// are errors.
//
// # Conversation history
//
// With RunRequest.SessionID empty the CLI keeps no session
// (--no-session-persistence) and earlier turns reach the model inside the
// prompt: the stdin message holds a <conversation_history> block with each
// earlier user and assistant message in a <user>/<assistant> element, then
// the new user message. With a SessionID the CLI keeps its transcript at
// $CLAUDE_CONFIG_DIR/projects/<workdir slug>/<id>.jsonl (TranscriptFile,
// relative to HOME): a new session (--session-id) gets the history as
// above; a resumed one (Resume: --resume, the caller having placed the
// transcript in HOME) gets the new user message alone, and the model sees
// the earlier turns as the CLI recorded them, tool calls and results
// included. The middleware keeps transcripts between turns and decides
// when a history continues one. System messages join the assistant's
// system prompt on every run. The sandbox argument "sessions: false" turns
// sessions off for an assistant (SessionsEnabled). Other ways were tried on
// the real CLI and rejected: every user line on stdin starts a new model
// call (replaying N turns costs N calls and answers them again), and an
// assistant line on stdin is inserted out of order.
//
// # Events
//
//   - system/init → EventInit (tools, skills, MCP servers and status, model,
//     permission mode, version, session id)
//   - system/api_retry → EventRetry; other system lines are skipped
//   - the CLI's request to resume a broken answer (2.1.330: after a
//     model stream that broke off, an error event or a dropped
//     connection, a synthetic user message asks the model to continue
//     and a second model call follows) → EventRetry; the continuation's
//     text joins the broken text without a separator, and the message
//     itself is never text
//   - text and thinking of the main agent → EventText / EventThinking, as
//     deltas from stream_event lines when the message was streamed, from
//     the complete assistant message otherwise, never both
//   - tool_use blocks (from assistant messages, where input is whole) →
//     EventToolUse; tool_result blocks of user messages → EventToolResult;
//     replayed and synthetic user messages (skill bodies) are skipped.
//     A subagent's tool events carry its parent_tool_use_id (the main
//     agent's Task call) as ParentToolUseID; the main agent's have none.
//     <system-reminder> blocks the CLI appends to tool results (2.1.330:
//     tokens left, file state) are stripped from the event
//     (StripSystemReminders): they are the CLI's notes to the model, not
//     the tool's output, and the model still gets them because the CLI
//     sends it the result itself
//   - synthetic assistant messages carrying an "error" (failed API calls)
//     are not text: their message is the result's error
//   - result → the Completion: is_error decides failure (API failures keep
//     subtype "success"); error_max_turns finishes with FinishMaxTurns,
//     other failures with FinishError; usage (with cache tokens), cost,
//     turns, duration, permission denials and api_error_status are copied
//   - a "success" result without a stop reason is a failure: the CLI
//     reports a model stream that broke off mid-answer that way, with the
//     partial text as its result
//   - unknown line types are skipped and logged at debug level
//
// Completion.Content is exactly the concatenation of the EventText texts:
// the main agent's text blocks in order, with "\n\n" (emitted as its own
// text event) between two blocks unless they are adjacent blocks of the
// same message. So an agent that says "I'll write the file.", calls tools
// and then says "Done." yields "I'll write the file.\n\nDone.".
//
// Parse returns at the result line (the CLI writes nothing after it but
// exits, which takes it 30-80 ms more): the caller does not wait for the
// exit to answer. WithResults(n) reads n results (several prompts on
// stdin), WithResults(0) to the end of the output.
//
// Output that ends without a result is an error matching ErrNoResult (an
// *IncompleteError); WithExit adds the exit status and stderr. A line over
// the cap (64 MiB by default) is an error, never a silent truncation.
//
// Concurrency: a Runner holds no per-run state and is safe for concurrent
// use; each Parse call owns its reader.
package claude
