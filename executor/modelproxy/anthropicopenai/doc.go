// Package anthropicopenai lets the Claude Code CLI, which speaks only the
// Anthropic Messages API, talk to an OpenAI-compatible Chat Completions
// provider (DeepSeek, Qwen, Kimi, vLLM, Ollama, OpenAI itself). Transport
// is an http.RoundTripper: the model proxy hands it the CLI's Anthropic
// request unchanged and gets back an Anthropic response (JSON or an SSE
// event stream) built from the provider's answer, so the proxy's metering,
// budget and streaming code stay as they are for Anthropic.
//
// Requests are decoded with anthropic-sdk-go's MessageNewParams and encoded
// with openai-go's ChatCompletionNewParams; provider answers are decoded
// with openai-go's ChatCompletion and ChatCompletionChunk. The Anthropic
// answers are written from small local structs, because the SDK's response
// types are unions meant for decoding and do not marshal to the wire shape.
// count_tokens is answered locally from an estimate (about 4 bytes a token)
// since Chat Completions has no such endpoint.
//
// Concurrency: a Transport is safe for concurrent use; each RoundTrip
// translates one call, and a streamed answer is translated by one goroutine
// that ends when the provider's stream ends, the response body is closed,
// or the request's context is done.
package anthropicopenai
