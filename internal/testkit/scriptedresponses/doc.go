// Package scriptedresponses is a scripted stand-in for the OpenAI Responses
// API (POST /v1/responses and /responses), beside internal/testkit/scriptedapi
// for Anthropic's Messages API and internal/testkit/scriptedopenai for Chat
// Completions: the one remote part the Codex CLI's tests and the offline demo
// replace. It answers with turns a test scripts ahead (a queue and/or a
// function of the request): reasoning summaries, text streamed in pieces,
// function calls whose arguments arrive in pieces, parallel calls, usage in
// response.completed, error statuses with OpenAI's error JSON, a
// response.failed event, a stream cut before response.completed and a stall.
// The event stream follows the real API's order and shapes (response.created,
// response.in_progress, output_item.added/done, content_part.added/done,
// output_text.delta/done, function_call_arguments.delta/done,
// response.completed, each with a sequence_number), since the Codex CLI only
// takes an answer that ends with response.completed. Every request is
// recorded (headers, key, raw and decoded body) for assertions; requests on
// other paths are recorded too and answered 404, so a test can assert that
// the CLI sent nothing else.
//
// Concurrency: a Server is safe for concurrent use; turns are handed out one
// at a time in arrival order, and Enqueue, Requests and the other methods may
// be called from any goroutine while it serves.
package scriptedresponses
