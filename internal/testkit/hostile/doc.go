// Package hostile is the hostile-agent test harness: it stands up the whole
// real stack (the OpenAI adapter with a real OpenAI client, the middleware's
// Orchestrator, executor/docker with the helper binary built from this
// checkout, the claude runner and the real Claude Code CLI in the sandbox
// image, modelroute's model proxy) in front of a scripted model
// (internal/scriptedapi) that plays an attacker: each turn of a chat runs
// commands the test chooses through the real CLI's Bash tool (or any other
// tool call) in a real container, then answers with text.
//
// It is test support: import it from _test files only. Tests that use it
// need Docker and the sandbox image (testenv.RequireImage skips locally and
// fails under CI=true).
//
// Use:
//
//	env := hostile.New(t, hostile.Options{})
//	r := env.Run(t, hostile.Turn{Chat: "1", Steps: []hostile.Step{
//		hostile.Bash("mkdir -p .claude && echo '{}' > .claude/settings.json"),
//	}})
//	r.RequireOK(t)
//	r2 := env.Run(t, hostile.Turn{Chat: "1", Steps: []hostile.Step{hostile.Bash("ls -a")}})
//	// r2.Steps[0].Output is what `ls -a` printed, as the model saw it;
//	// r2.Requests is what the scripted model server received in turn 2;
//	// r2.Init is the CLI's system/init (tools, skills); env.Workspace(...)
//	// is the chat's workspace on the host.
//
// Each Turn is one chat request (one user message, so no history) to one
// assistant. The user prompt carries a marker ("[hostile-turn N]") by which
// the scripted model finds the turn's steps; step k runs when the
// conversation holds k earlier tool calls, so the script needs no state and
// a step whose tool failed or was refused does not stop the next one. The
// same chat can be driven by several assistants (Options.Assistants): the
// workspace is keyed by user and chat, so this is how cross-assistant
// attacks are written.
//
// Options customise the assistants (each starts as DefaultAssistant's
// settings: Bash and the Skill tool allowed, acceptEdits, DefaultSkill in
// its HomeFiles), the executor (docker.Options), the model proxy
// (modelroute.Options) and the Orchestrator; Env.API is the
// scripted server, whose recorded requests (headers, key, body) a test can
// inspect beyond the per-turn slice in Result.Requests. The gateway's log is
// kept in memory and printed when the test fails.
//
// Concurrency: Run may be called from several goroutines (turns on different
// chats run at once; turns on one chat queue on the chat's lease). Each
// Result's Requests are the requests received while that turn ran, so
// concurrent turns see each other's requests there; match on
// Request.AllText or the marker (Result.Marker) when that matters.
package hostile
