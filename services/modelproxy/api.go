package modelproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/agentbox/agentbox/executor"
)

// API names the model API a proxy serves to its sandbox: the agent CLI's
// wire format. The upstream speaks the same one, unless the connector's
// transport translates (Options.Client).
type API string

// The APIs a proxy serves.
const (
	// APIMessages is Anthropic's Messages API, which Claude Code speaks
	// (the default).
	APIMessages API = "messages"
	// APIResponses is OpenAI's Responses API, which the Codex CLI speaks.
	APIResponses API = "responses"
)

// PathResponses is the one endpoint of APIResponses: the Codex CLI POSTs
// {base_url}/responses and the runner's base URL ends in /v1.
const PathResponses = "/v1/responses"

// apiSpec is what differs between the APIs a proxy serves: the endpoints,
// the body's fields and tools, the output cap's field, the headers each
// way, how the key travels, how usage is read and how errors are written.
// Everything else (the token, strict reading, model pin, budgets, byte
// bounds, streaming) is the proxy's own.
type apiSpec struct {
	name API
	// paths are the exact request targets forwarded (POST only); query is
	// the one query string allowed besides none.
	paths []string
	query string
	// upstreamPath is where a forwarded path goes, appended to the
	// upstream's base path.
	upstreamPath func(path string) string
	// bodyKeys are the top-level body fields forwarded; any other is
	// refused.
	bodyKeys []string
	// maxOutputKey is the field capped at MaxOutputTokens on capPath.
	maxOutputKey, capPath string
	// tool returns why a tool of the body's tools list is refused ("" when
	// it passes).
	tool func(tool gjson.Result) string
	// field returns why a top-level field's value is refused ("" when it
	// passes); nil accepts every value of an allowed field.
	field func(key string, v gjson.Result) string
	// Request headers forwarded upstream and response headers passed back.
	requestHeaders, requestHeaderPrefixes   []string
	responseHeaders, responseHeaderPrefixes []string
	// setKey puts the connector's key on an upstream request.
	setKey func(h http.Header, key string)
	// errorBody is an error answer's JSON in the API's shape.
	errorBody func(errType, msg string) []byte
	// errorHeaders are set on every error the proxy answers itself.
	errorHeaders map[string]string
	// usage reads one SSE data line's usage into u (reporting whether it
	// held any), and usageJSON a whole JSON body's.
	usage     func(data []byte, u *executor.Usage) bool
	usageJSON func(body []byte, u *executor.Usage)
}

// specOf returns the spec of api ("" is APIMessages).
func specOf(api API) (*apiSpec, error) {
	switch api {
	case "", APIMessages:
		return &messagesSpec, nil
	case APIResponses:
		return &responsesSpec, nil
	}
	return nil, fmt.Errorf("modelproxy: API %q is not one the proxy serves; use %q or %q", api, APIMessages, APIResponses)
}

// messagesSpec is Anthropic's Messages API as Claude Code uses it.
var messagesSpec = apiSpec{
	name:         APIMessages,
	paths:        []string{PathMessages, PathCountTokens},
	query:        allowedQuery,
	upstreamPath: func(path string) string { return path },
	bodyKeys:     bodyKeys,
	// max_tokens is capped on messages calls; count_tokens has none.
	maxOutputKey: "max_tokens", capPath: PathMessages,
	tool: func(tool gjson.Result) string {
		typ := tool.Get("type").String()
		for _, d := range deniedToolTypes {
			if strings.HasPrefix(typ, d) {
				return fmt.Sprintf("the server tool %q is not allowed through the sandbox's model proxy", clip(typ))
			}
		}
		return ""
	},
	requestHeaders: requestHeaders, requestHeaderPrefixes: requestHeaderPrefixes,
	responseHeaders: responseHeaders, responseHeaderPrefixes: responseHeaderPrefixes,
	setKey: func(h http.Header, key string) { h.Set("X-Api-Key", key) },
	errorBody: func(errType, msg string) []byte {
		b, _ := json.Marshal(errorBody{Type: "error", Error: errorDetail{Type: errType, Message: msg}})
		return b
	},
	// The Anthropic SDK reads it: a refusal is not worth a retry.
	errorHeaders: map[string]string{"X-Should-Retry": "false"},
	usage: func(data []byte, u *executor.Usage) bool {
		switch gjson.GetBytes(data, "type").String() {
		case "message_start":
			return mergeMessagesUsage(gjson.GetBytes(data, "message.usage"), u)
		case "message_delta":
			return mergeMessagesUsage(gjson.GetBytes(data, "usage"), u)
		}
		return false
	},
	usageJSON: func(body []byte, u *executor.Usage) { mergeMessagesUsage(gjson.GetBytes(body, "usage"), u) },
}

// mergeMessagesUsage sets the fields of a Messages usage object present in
// v: message_delta's cumulative usage overrides message_start's field by
// field.
func mergeMessagesUsage(v gjson.Result, u *executor.Usage) bool {
	if !v.IsObject() {
		return false
	}
	set := func(dst *int64, key string) {
		if x := v.Get(key); x.Exists() && x.Type == gjson.Number {
			*dst = x.Int()
		}
	}
	set(&u.InputTokens, "input_tokens")
	set(&u.OutputTokens, "output_tokens")
	set(&u.CacheCreationInputTokens, "cache_creation_input_tokens")
	set(&u.CacheReadInputTokens, "cache_read_input_tokens")
	return true
}

// responsesKeys are the top-level fields of a Responses API request the
// proxy forwards: what the Codex CLI sends (0.169.0 and 0.171.0: model,
// instructions, input, tools, tool_choice, parallel_tool_calls, reasoning,
// store, stream, include, prompt_cache_key, client_metadata, text) and the
// sampling and output settings. previous_response_id, conversation and
// prompt would read what the connector's account stored for anyone
// (another tenant's responses, stored prompts); background and
// max_tool_calls change how the upstream runs the call; they are refused
// with everything not listed.
var responsesKeys = []string{"client_metadata", "include", "input", "instructions", "max_output_tokens", "metadata",
	"model", "parallel_tool_calls", "prompt_cache_key", "reasoning", "service_tier", "store", "stream",
	"stream_options", "temperature", "text", "tool_choice", "tools", "top_logprobs", "top_p", "truncation", "user"}

// responsesTools are the tool types a Responses call may offer: the ones
// the client runs itself. Hosted tools (web_search, file_search over the
// connector's vector stores, code_interpreter, computer_use, remote mcp,
// image_generation) run on the upstream's side, outside the sandbox's
// egress policy and on the connector's account.
var responsesTools = []string{"function", "custom", "local_shell", "namespace"}

// responsesSpec is OpenAI's Responses API as the Codex CLI uses it.
var responsesSpec = apiSpec{
	name:  APIResponses,
	paths: []string{PathResponses},
	// An OpenAI-compatible connector's host is its API base URL with the
	// version (https://api.openai.com/v1), as OpenAI's SDKs take it.
	upstreamPath: func(string) string { return "/responses" },
	bodyKeys:     responsesKeys,
	// The Codex CLI sends no max_output_tokens; a missing one is set.
	maxOutputKey: "max_output_tokens", capPath: PathResponses,
	tool: responsesTool,
	field: func(key string, v gjson.Result) string {
		if key == "store" && v.Type != gjson.False {
			return "store must be false: a stored response stays on the connector's account, readable by id to every tenant of its key"
		}
		return ""
	},
	requestHeaders:         []string{"Accept", "Content-Type", "Openai-Beta", "Originator", "Session_id", "User-Agent", "Version"},
	responseHeaders:        []string{"Content-Type", "Openai-Processing-Ms", "Retry-After", "Retry-After-Ms", "X-Request-Id"},
	responseHeaderPrefixes: []string{"X-Ratelimit-"},
	setKey:                 func(h http.Header, key string) { h.Set("Authorization", "Bearer "+key) },
	errorBody: func(errType, msg string) []byte {
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": errType, "param": nil, "code": errType}})
		return b
	},
	usage: func(data []byte, u *executor.Usage) bool {
		switch gjson.GetBytes(data, "type").String() {
		case "response.completed", "response.incomplete", "response.failed":
			return mergeResponsesUsage(gjson.GetBytes(data, "response.usage"), u)
		}
		return false
	},
	usageJSON: func(body []byte, u *executor.Usage) { mergeResponsesUsage(gjson.GetBytes(body, "usage"), u) },
}

// responsesTool refuses a hosted tool, in a namespace too. A tool_search
// tool passes when the client executes it (the Codex CLI offers one, with
// "execution": "client", on a resumed session, to search the tools it
// defers); the hosted one searches on the upstream's side.
func responsesTool(tool gjson.Result) string {
	typ := tool.Get("type").String()
	if typ == "tool_search" && tool.Get("execution").String() == "client" {
		return ""
	}
	ok := false
	for _, t := range responsesTools {
		ok = ok || typ == t
	}
	if !ok {
		return fmt.Sprintf("the tool type %q is not allowed through the sandbox's model proxy (only %s: tools the agent runs itself)", clip(typ), strings.Join(responsesTools, ", "))
	}
	if typ == "namespace" {
		why := ""
		tool.Get("tools").ForEach(func(_, t gjson.Result) bool {
			if t.Get("type").String() == "namespace" {
				why = "a namespace may not hold a namespace"
			} else {
				why = responsesTool(t)
			}
			return why == ""
		})
		return why
	}
	return ""
}

// mergeResponsesUsage reads a Responses usage object: input_tokens counts
// the cached ones too (input_tokens_details.cached_tokens), which the
// executor's Usage keeps apart as cache reads, and the tokens a translated
// Anthropic upstream wrote to its cache
// (input_tokens_details.cache_creation_tokens, see openairesponses).
func mergeResponsesUsage(v gjson.Result, u *executor.Usage) bool {
	if !v.IsObject() {
		return false
	}
	cached, written := v.Get("input_tokens_details.cached_tokens").Int(), v.Get("input_tokens_details.cache_creation_tokens").Int()
	*u = executor.Usage{InputTokens: max(0, v.Get("input_tokens").Int()-cached-written), OutputTokens: v.Get("output_tokens").Int(),
		CacheReadInputTokens: cached, CacheCreationInputTokens: written}
	return true
}

// hasPath reports whether target is one of the spec's paths.
func (s *apiSpec) hasPath(target string) bool {
	for _, p := range s.paths {
		if target == p {
			return true
		}
	}
	return false
}

// writeError answers an error in the API's shape.
func (s *apiSpec) writeError(w http.ResponseWriter, status int, errType, msg string) {
	w.Header().Set("Content-Type", "application/json")
	for k, v := range s.errorHeaders {
		w.Header().Set(k, v)
	}
	w.WriteHeader(status)
	_, _ = w.Write(s.errorBody(errType, msg))
}

// dataLine returns an SSE line's data, or nil.
func dataLine(line []byte) []byte {
	data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("data:"))
	if !ok {
		return nil
	}
	return data
}
