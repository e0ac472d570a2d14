package scriptedresponses

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/scriptedopenai"
)

// Turn is one scripted answer.
type Turn struct {
	// Reasoning is a reasoning item's summary, streamed first.
	Reasoning string
	// Text is the answer's message text.
	Text string
	// Calls are function calls, after the text; more than one is a
	// parallel call.
	Calls []Call
	// Pieces is how many deltas each text and argument string is cut into
	// (default 3, keeping UTF-8 characters whole).
	Pieces int
	// Usage overrides the reported usage (default: an estimate).
	Usage *Usage
	// Error answers with this HTTP status and OpenAI's error JSON instead.
	Error *APIError
	// Failed ends a streamed answer with a response.failed event carrying
	// this error after the first content delta.
	Failed *APIError
	// Cut ends a streamed answer after the first content delta, without
	// response.completed, as a dropped connection would.
	Cut bool
	// Stall sends response.created and then nothing, until the client goes
	// away or the server closes.
	Stall bool
	// Delay is slept before each event, to make streams observable.
	Delay time.Duration
}

// Call is one function call of a turn.
type Call struct {
	// ID is the call_id (generated when empty).
	ID string
	// Name is the function's name.
	Name string
	// Arguments is the JSON arguments string of a function call, or the
	// raw input of a custom (freeform) tool call.
	Arguments string
	// Custom makes it a custom_tool_call (freeform input, as Codex's
	// apply_patch), not a function_call.
	Custom bool
	// Namespace is the namespace of a function in a namespace tool (the
	// Codex CLI offers an MCP server's tools as namespace mcp__<server>).
	Namespace string
	// Search makes it a tool_search_call of the client-executed
	// tool_search tool, Arguments its JSON arguments.
	Search bool
}

// SearchTools is a call of the Codex CLI's tool_search for query: the CLI
// answers with the deferred tools that match, which the next request
// offers.
func SearchTools(query string) Call {
	c := NewCall("tool_search", map[string]any{"query": query})
	c.Search = true
	return c
}

// Usage is the Responses API's usage.
type Usage struct {
	InputTokens     int64
	OutputTokens    int64
	CachedTokens    int64
	ReasoningTokens int64
}

// APIError is an error answer in OpenAI's shape, as the Chat Completions
// stand-in answers it.
type APIError = scriptedopenai.APIError

// Say is a turn answering text.
func Say(text string) Turn { return Turn{Text: text} }

// CallTool is a turn calling one function with args encoded as JSON.
func CallTool(name string, args any) Turn { return Turn{Calls: []Call{NewCall(name, args)}} }

// NewCall is a function call with args encoded as JSON. It panics on args
// that do not encode, which is a bug in the test script.
func NewCall(name string, args any) Call {
	b, err := json.Marshal(args)
	if err != nil {
		panic(fmt.Sprintf("scriptedresponses: tool arguments do not encode: %v", err))
	}
	return Call{Name: name, Arguments: string(b)}
}

// Fail is a turn answering an HTTP error.
func Fail(e *APIError) Turn { return Turn{Error: e} }

// Ready-made errors, as OpenAI answers them.
var (
	ErrUnauthorized   = &APIError{Status: http.StatusUnauthorized, Code: "invalid_api_key", Message: "Incorrect API key provided."}
	ErrRateLimited    = &APIError{Status: http.StatusTooManyRequests, Code: "rate_limit_exceeded", Message: "Rate limit reached. Please try again in 1s.", RetryAfter: "1"}
	ErrInternal       = &APIError{Status: http.StatusInternalServerError, Message: "The server had an error while processing your request."}
	ErrContextTooLong = &APIError{Status: http.StatusBadRequest, Code: "context_length_exceeded",
		Message: "Your input exceeds the context window of this model. Please adjust your input and try again."}
)
