// Package scriptedopenai is a scripted stand-in for an OpenAI-compatible
// Chat Completions provider, beside internal/scriptedapi for Anthropic. It
// answers POST /chat/completions and /v1/chat/completions (streamed SSE and
// not) with turns a test scripts ahead: text, reasoning content in the
// provider's field, tool calls whose arguments arrive in pieces across
// chunks, parallel tool calls, usage in the last chunk (when the request
// asks with stream_options.include_usage, or always when configured), error
// statuses with OpenAI's error JSON and an error object mid-stream. Every
// request is recorded (headers, key, raw and decoded body) for assertions.
//
// Concurrency: a Server is safe for concurrent use; turns are handed out
// one at a time in arrival order, and Enqueue, Requests and the other
// methods may be called from any goroutine while it serves.
package scriptedopenai
