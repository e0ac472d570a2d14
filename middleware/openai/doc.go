// Package openai is the HTTP adapter for a middleware.Handler: standard
// clients talk to agentbox assistants as if they were models, through
// three doors, OpenAI's Chat Completions and Responses APIs and
// Anthropic's Messages API (the official SDKs of both, and the tools built
// on them). Each door has what the others have (the one reading of the
// body and the pass-through of other models, the ids, Authenticate,
// admission and its queue events, cancellation, keep-alives), in its own
// API's shapes (door.go).
//
// # Routes
//
//   - POST /v1/chat/completions: "model" names the assistant; "stream"
//     selects SSE; "stream_options": {"include_usage": true} adds a last
//     chunk with empty choices and the usage, as OpenAI does. Message
//     content is a string or an array of text parts; role "developer" is
//     a system message; tool and function messages, images and n > 1 are
//     refused with 400. Other fields (temperature, ...) reach the handler
//     in Request.Options.
//   - POST /v1/responses: OpenAI's Responses API. "input" is a string or
//     input items (messages with text parts; role developer is a system
//     message; the reasoning and mcp_call items of earlier answers are
//     skipped; other items, function outputs among them, are refused with
//     400), "instructions" a system message, "stream" selects SSE,
//     "metadata" reaches the hooks in Request.Options and is echoed;
//     "background" and "conversation" are refused. The agent's tool calls
//     are mcp_call output items (server_label "agentbox"): the server ran
//     them, and clients render or skip them, never answer them; its
//     thinking is a reasoning item's summary. The events and their order
//     are in responses_stream.go. With "store" (true by default) the
//     response is kept for GET /v1/responses/{id} and for
//     "previous_response_id", which continues the conversation: the door
//     rebuilds the chain's history (each stored turn's messages and answer,
//     without the earlier instructions, as OpenAI's API does) so that the
//     chat's agent session resumes. The chat is the one the request names
//     (X-Agentbox-Chat or the user field), else the previous response's,
//     else the new response's own id. Stored responses are per user, in
//     memory (a restart forgets them: previous_response_id is then 404, and
//     the client can send the whole conversation instead), at most
//     Options.MaxResponsesPerUser per user and Options.MaxResponseBytes in
//     all, for Options.ResponseTTL; another user's id is a 404 like an
//     unknown one.
//   - POST /v1/messages: Anthropic's Messages API. "system" is a string or
//     text blocks, message content a string or blocks (text; the thinking,
//     mcp_tool_use and mcp_tool_result blocks of earlier answers are
//     skipped; tool_use, tool_result and images are refused), the ids come
//     in "metadata": {"user_id": "<user>:<chat>"} (a top-level "user" is
//     refused). The agent's tool calls are mcp_tool_use and
//     mcp_tool_result blocks (server_name "agentbox"), its thinking
//     thinking blocks; the events are in messages.go. Usage has Anthropic's
//     fields; errors are {"type": "error", "error": {"type", "message"}}
//     with the statuses below but 529 overloaded_error for overloaded, and
//     a failure after the stream started is an error event.
//   - GET /v1/models and GET /v1/models/{id}: the catalog's assistants,
//     each with the extensions "name" and "sandbox" (true when it runs in
//     a sandbox); GET /v1/models/{id} adds "environment", the snapshot of
//     what the agent finds in its sandbox, when Options.Environments
//     has one.
//   - /v1/sandboxes (when Options.Sandboxes is set): the client sandbox
//     API, see sandboxes.go; a chat completion names a sandbox with the
//     X-Agentbox-Sandbox header or the "sandbox" field, and its stream
//     then carries the sandbox's lifecycle (kind "sandbox": connected,
//     file_written, exec) in the extension.
//
// Every body the adapter routes on is read once, strictly, and refused
// with 400 when another reader could read it differently (reading.go:
// duplicate or look-alike names, invalid UTF-8, data after the object),
// whether agentbox or Options.Next would have answered it.
//
// The request body is capped (Options.MaxBodyBytes, 8 MiB by default;
// 413 beyond it). When the client goes away the handler's context is
// canceled, which tears the sandbox down.
//
// # User and chat ids
//
// Each id is taken from its header when set (X-Agentbox-User,
// X-Agentbox-Chat), else from the "user" field, which is "<user>" or
// "<user>:<chat>". A header wins over the field, id by id. Ids are checked
// with executor.ValidateID (1-128 characters of [A-Za-z0-9_.-], not
// starting with '.' or '-'); a bad id is a 400 naming the header or field.
// A sandboxed assistant needs both ids; plain assistants pass them on as
// they came.
//
// The user id selects the workspace, so it must not be the client's to
// choose: set Options.Authenticate (its user id then wins over the header
// and the field, and a refusal is a 401 authentication_error), or put the
// adapter behind a gateway that authenticates clients and sets or strips
// X-Agentbox-User.
//
// # Streaming and the agentbox extension
//
// On Chat Completions, assistant text travels in
// choices[0].delta.content; everything else in a top-level "agentbox"
// object of a chunk whose delta is empty, which standard clients ignore
// (on Responses, in events of type "agentbox", which the SDKs pass by; on
// Messages, in ping events, which they skip; tool calls and thinking are
// output items and blocks there, see Routes):
//
//	{"id": "chatcmpl-…", "object": "chat.completion.chunk", "created": 1763730000,
//	 "model": "coder", "choices": [{"index": 0, "delta": {}, "finish_reason": null}],
//	 "agentbox": {"kind": "tool_use", "tool": {"id": "toolu_1", "name": "Write", "input": {…}}}}
//
// "agentbox" holds the fields of an executor.Event: "kind" (init,
// thinking, tool_use, tool_result, retry, ui, sandbox), "text" (thinking
// and retry text; for sandbox, the lifecycle step: "queued" while the
// request waits for a sandbox, "ready" when the container is up,
// "closed" when it is removed), "queue" (with "queued": "position", 1
// for the next to run, and "waited_ms"), "init", "tool",
// "tool_result", "ui" (hook UI messages: {"id", "action": send | replace |
// end, "type", "props"}). Two kinds are the adapter's own: "reset"
// (discard the content streamed so far; the content that follows replaces
// it: a Next hook replaced the answer) and "done" (on the chunk carrying
// finish_reason: "timings" in milliseconds: lease_ms, container_start_ms,
// workspace_ms, create_hook_ms, agent_ms, next_hook_ms, teardown_ms,
// total_ms; and "usage", the agent CLI's own report in Anthropic's
// fields). A non-streamed completion carries the "done" object too.
//
// Every SSE line is shorter than 64 KiB (MaxLine), the limit of clients
// that read SSE with bufio.Scanner: long text and thinking are split
// across chunks losslessly; a tool input, tool result or UI props too
// large for one line is cut and the object gets "truncated": true (a cut
// string ends with "…[truncated by agentbox: N bytes in all]"; a cut tool
// input becomes a JSON string holding the start of the JSON).
//
// The delta.content texts of a stream concatenate to exactly the content
// of the same run answered without streaming (after the last "reset", when
// there is one). An idle stream gets a keep-alive every Options.Heartbeat
// (15 s) to keep proxies from closing it: an SSE comment on the OpenAI
// doors, a ping event on Messages (Anthropic's own), which every SDK of
// the real-client test reads through a 60 s silence
// (TestRealClientsOverASilentRun). On Responses the deltas keep to
// MaxLine; the done and completed events carry the whole text, as
// OpenAI's do (openai-go v3 reads lines of 32 MiB).
//
// # Errors
//
// Errors use OpenAI's JSON, {"error": {"message", "type", "param",
// "code"}} (Anthropic's on Messages), and carry x-should-retry: false unless nothing ran (busy,
// shutting down), so that SDKs never re-run an expensive agent job by
// themselves. The status of each middleware.Kind:
//
//	kind            status  type                   code
//	bad_request     400     invalid_request_error  invalid_request (413 request_too_large for the body cap)
//	not_found       404     invalid_request_error  model_not_found (param "model") (sandbox_not_found, checkpoint_not_found, ... for the others)
//	busy            409     conflict_error         chat_busy (x-should-retry: true)
//	overloaded      429     rate_limit_error       sandbox_capacity (x-should-retry: true, Retry-After, retry-after-ms)
//	hook_rejected   422     invalid_request_error  rejected_by_hook
//	config          500     server_error           assistant_misconfigured
//	sandbox_start   500     server_error           sandbox_start_failed
//	internal        500     server_error           internal_error
//	agent           502     server_error           agent_failed
//	sandbox_gone    502     server_error           sandbox_gone (the container went away mid-run)
//	unavailable     503     server_error           unavailable (x-should-retry: true; shutting down, or the container runtime does not answer)
//	timeout         504     server_error           agent_timeout
//	canceled        499     server_error           client_closed_request (nobody reads it)
//
// Busy is 409, not 429: the chat's workspace is held by another request
// (a conflict on a resource), not a rate limit on the client. Overloaded
// is 429: the gateway's sandbox queue is full (or the request waited
// past middleware.Admission.MaxWait); nothing ran, and both SDKs retry it
// by themselves after Retry-After. While a request waits in the queue, a
// streamed request gets sandbox events {"kind": "sandbox", "text":
// "queued", "queue": {"position": 3, "waited_ms": 1200}} as its position
// changes (at most one a second); a wait that ends in overloaded then
// arrives as an error event.
//
// A streamed request that fails before its first event gets the status
// above; once the stream started (the sandbox "ready" event is usually
// the first), the error arrives as a data event {"error": {…}} and the
// stream ends without [DONE]; both SDKs raise it as an error.
//
// An agent run can take minutes: the gateway's http.Server needs a
// WriteTimeout of zero or longer than the longest sandbox timeout, and
// non-streamed requests send nothing until the run ends (prefer streaming
// through proxies with idle timeouts).
//
// Concurrency: a Server is safe for concurrent use.
package openai
