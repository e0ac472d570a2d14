package scriptedopenai

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Turn is one scripted answer.
type Turn struct {
	// Reasoning is streamed first, in the server's reasoning field.
	Reasoning string
	// Text is the answer's content.
	Text string
	// Calls are tool calls; more than one is a parallel call.
	Calls []Call
	// Pieces is how many chunks each text and argument string is cut into
	// (default 3, keeping UTF-8 characters whole).
	Pieces int
	// FinishReason overrides the finish_reason ("stop", or "tool_calls"
	// when there are calls).
	FinishReason string
	// Usage overrides the reported usage (default: an estimate).
	Usage *Usage
	// Error answers with this status and error JSON instead.
	Error *APIError
	// MidStreamError is sent as an error object after the first content
	// chunk of a streamed answer, which then ends.
	MidStreamError *APIError
	// Cut ends a streamed answer after the first content chunk without
	// finish_reason or [DONE].
	Cut bool
}

// Call is one tool call of a turn.
type Call struct {
	ID        string
	Name      string
	Arguments string
}

// Usage is the provider's usage object.
type Usage struct {
	PromptTokens     int64
	CompletionTokens int64
	CachedTokens     int64
}

// APIError is an error answer.
type APIError struct {
	Status     int
	Message    string
	Type       string
	Code       string
	RetryAfter string
}

// Object is the error's object in OpenAI's shape (message, type, param,
// code): what an error answer's "error" member holds.
func (e *APIError) Object() map[string]any {
	typ := e.Type
	if typ == "" {
		switch {
		case e.Status == http.StatusTooManyRequests:
			typ = "rate_limit_exceeded"
		case e.Status >= 500 || e.Status == 0:
			typ = "server_error"
		default:
			typ = "invalid_request_error"
		}
	}
	var code any
	if e.Code != "" {
		code = e.Code
	}
	return map[string]any{"message": e.Message, "type": typ, "param": nil, "code": code}
}

// body is the error answer's JSON.
func (e *APIError) body() map[string]any { return map[string]any{"error": e.Object()} }

// Say is a turn answering text.
func Say(text string) Turn { return Turn{Text: text} }

// CallTool is a turn calling one tool with args encoded as JSON.
func CallTool(name string, args any) Turn { return Turn{Calls: []Call{NewCall(name, args)}} }

// NewCall is a tool call with args encoded as JSON.
func NewCall(name string, args any) Call {
	b, err := json.Marshal(args)
	if err != nil {
		panic(fmt.Sprintf("scriptedopenai: tool arguments do not encode: %v", err))
	}
	return Call{Name: name, Arguments: string(b)}
}

// Fail is a turn answering an error.
func Fail(e *APIError) Turn { return Turn{Error: e} }

// ContextTooLong is the error OpenAI answers for an over-long prompt.
func ContextTooLong() *APIError {
	return &APIError{Status: http.StatusBadRequest, Code: "context_length_exceeded",
		Message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens. Please reduce the length of the messages."}
}
