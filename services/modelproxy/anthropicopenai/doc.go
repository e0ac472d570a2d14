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
// Per-connector Options and the providers they are known to suit:
//
//	provider              ReasoningField     ThinkingParam     StreamUsage  MaxTokensCeiling
//	OpenAI (gpt-4.1/5,o*) -                  reasoning_effort  true         model's limit; MaxCompletionTokens
//	DeepSeek              reasoning_content  -                 true         8192 (chat), 65536 (reasoner)
//	Qwen (DashScope)      reasoning_content  enable_thinking   true         8192-32768 by model
//	Kimi (Moonshot)       reasoning_content  -                 true         model's limit
//	vLLM / SGLang         reasoning_content  enable_thinking   true         server's max_model_len minus prompt
//	Ollama                reasoning          -                 true         num_predict of the model
//	OpenRouter            reasoning          reasoning_effort  true         model's limit
//
// What is not carried over: top_k, cache_control (providers cache by
// prefix on their own), server tools such as web search, images inside
// tool results (named in the text instead), and the CLI's own thinking
// blocks in the history (providers reject them as input). Mid-conversation
// role "system" turns go as user messages, and the CLI's
// x-anthropic-billing-header system block is dropped.
//
// Concurrency: a Transport is safe for concurrent use; each RoundTrip
// translates one call, and a streamed answer is translated by one goroutine
// that ends when the provider's stream ends, the response body is closed,
// or the request's context is done.
package anthropicopenai
