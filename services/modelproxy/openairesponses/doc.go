// Package openairesponses lets the Codex CLI, which speaks only OpenAI's
// Responses API, talk to a provider that does not serve it: an
// OpenAI-compatible Chat Completions provider (NewChat: DeepSeek, Qwen,
// vLLM, Ollama, OpenAI's own chat endpoint) or Anthropic's Messages API
// (NewMessages). A Transport is an http.RoundTripper: the model proxy hands
// it the CLI's Responses request as it checked and pinned it, and gets
// back a Responses answer (an event stream in the API's order, or the
// response object) built from the upstream's, so that the proxy's
// metering, budget and streaming work as for a Responses upstream.
//
// The request: instructions and developer or system messages become the
// system prompt (Chat: one system message first; Messages: the system
// parameter); user and assistant messages, function calls and their
// outputs become turns, consecutive items of one role merged (Messages
// requires alternation and tool results first in the user turn after the
// calls); images pass as URLs (base64 data for Messages); the CLI's
// reasoning items (encrypted for OpenAI) are dropped. Tools become
// functions: a function as it is, a custom (freeform) tool such as
// apply_patch as a function of one string "input" whose description holds
// the tool's grammar, the members of a namespace (an MCP server's tools) as
// namespace__member, and the client-executed tool_search as a function;
// the tools a tool_search_output found join the list. tool_choice and
// parallel_tool_calls map to each API's. For Messages, the system prompt
// and the last message carry a prompt cache breakpoint each.
//
// The answer: text streams as output_text deltas of one message item,
// reasoning (Chat's reasoning_content or reasoning, Messages' thinking) as
// a reasoning item's summary; tool calls become whole items at the end of
// the answer (a function call in its namespace, a custom tool call with
// the function's "input", a tool search call with its arguments), since a
// custom tool's input is known only once its JSON is complete and the CLI
// acts on output_item.done alone. Usage is exact: input tokens count the
// cached ones (Chat's prompt_tokens_details.cached_tokens, Messages'
// cache_read_input_tokens) in input_tokens_details.cached_tokens, and
// Messages' cache_creation_input_tokens in input_tokens and in
// input_tokens_details.cache_creation_tokens (not OpenAI's, read by the
// model proxy). A stop at the output limit is response.incomplete, an
// error inside the stream response.failed, and a stream that ends without
// its end gets no end either, so the CLI retries each as it would against
// the API. The upstream's error answers keep their status and become
// OpenAI errors; a context overflow is coded context_length_exceeded,
// which the CLI reports without retrying.
//
// A request is read in one pass with jsontext (encoding/json/v2's
// streaming decoder), its texts kept as the escaped JSON strings they are
// in the body, and the upstream body is written from structs with
// encoding/json/v2, the texts copied as they came: most of a 64 KB request
// is text that passes unchanged. Answers are read with gjson and written
// from maps. The Responses API's item and event unions in openai-go are
// meant for a client, and decoding into them would drop what they do not
// model (namespaces, tool search items) or add defaults.
//
// Concurrency: a Transport is safe for concurrent use; each RoundTrip
// translates one call, and a streamed answer is translated by one
// goroutine that ends when the upstream's stream ends or the response body
// is closed.
package openairesponses
