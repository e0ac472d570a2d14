// Package modelproxy is the host side of a sandbox's model traffic: an HTTP
// reverse proxy served on the per-sandbox unix socket {hostDir}/model.sock,
// which the in-container helper relays the agent CLI's loopback connections
// to.
//
// The agent is an attacker holding a per-request token (its
// ANTHROPIC_API_KEY), and the proxy holds a connector key that every tenant
// shares, so everything is default deny. The proxy accepts that token alone
// (x-api-key or Authorization: Bearer, compared in constant time); forwards
// only POST /v1/messages and POST /v1/messages/count_tokens, matched byte
// for byte on the raw request target (optionally "?beta=true"), and refuses
// every other method, path, query, dot-segment or encoded slash with a 403
// in Anthropic's error shape and a WARN line; forwards only allowlisted
// request headers (Anthropic's and the SDK's own) and passes back only
// allowlisted response headers; refuses invalid JSON, duplicate top-level
// keys and body fields that would make the upstream reach the network
// (mcp_servers, web_fetch tools); pins the model to the connector's (or
// Options.AllowedModels) and caps max_tokens, splicing the new values into
// the body without copying it; then swaps in the connector's real key,
// forwards without retrying, streams the answer back (SSE flushed per
// chunk), enforces the request's budget (model calls, tokens, wall time)
// and meters every call's usage as it streams past. Keys and tokens are
// never logged.
//
// The proxy serves one model API (Options.API): Anthropic's Messages API,
// which Claude Code speaks (the default, as above), or OpenAI's Responses
// API, which the Codex CLI speaks. For the Responses API it forwards POST
// /v1/responses alone (to the connector's base URL, /v1 included, plus
// /responses; the compaction and retrieval endpoints and every other path
// are refused), refuses the fields that read or write what the connector's
// account keeps for every tenant of its key (previous_response_id,
// conversation, prompt, store other than false, background) and every tool
// type but those the agent runs itself (function, custom, local_shell and
// namespaces of them: hosted web search, file search, code interpreter,
// computer use, remote MCP and image generation are refused), caps
// max_output_tokens, sends the key as a bearer token, answers its own
// errors in OpenAI's shape and meters response.completed's usage (input
// tokens less the cached ones, which are cache reads). A connector that
// serves another API is reached through a translating transport
// (Options.Client; see anthropicopenai and its siblings).
//
// Between requests, a WarmUp serves the same socket for a pre-started CLI's
// warm-up call: the token alone, POST /v1/messages alone, the body dropped
// and a canned answer given by the gateway itself; nothing reaches the
// upstream.
//
// Memory: a body needs a Content-Length within MaxRequestBytes; it is read
// only after reserving its length from the sandbox's own byte budget (one
// body's worth) and from the gateway's BodyBudget shared by all proxies,
// within BodyTimeout, and at most MaxConcurrent calls per sandbox are in
// flight (more wait), so concurrent large bodies queue instead of growing
// the heap.
//
// Concurrency: a Proxy is safe for concurrent use; Usage and Calls may be
// read while requests are in flight (they reflect finished calls). Close
// may be called from any goroutine and more than once. A BodyBudget is
// safe for concurrent use by any number of proxies.
package modelproxy
