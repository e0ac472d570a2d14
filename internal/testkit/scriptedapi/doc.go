// Package scriptedapi is a scripted stand-in for the Anthropic Messages API:
// the one remote part the project's tests and offline demo replace. It
// answers POST /v1/messages (streaming SSE and non-streaming) with turns a
// test scripts ahead (a queue of turns and/or a function of the request),
// reproduces the API's failures (error statuses with Anthropic's error JSON,
// an error event mid-stream, a stalled connection), and records every
// request it receives (headers, API key, decoded body) for assertions.
//
// The event stream follows the real API's order and shapes (message_start,
// ping, content_block_start/delta/stop, message_delta with usage,
// message_stop), since the Claude Code CLI's parser is strict.
//
// Concurrency: a Server is safe for concurrent use; requests are answered
// concurrently, scripted turns are handed out one at a time in arrival
// order, and Enqueue, Requests and the other methods may be called from any
// goroutine while it serves.
package scriptedapi
