package scriptedapi

import (
	"encoding/json"
	"net/http"
	"time"
)

// Turn is the scripted answer to one messages request.
type Turn struct {
	// Blocks are the content blocks of the answer, in order.
	Blocks []Block
	// StopReason defaults to "tool_use" when a block is a tool call and to
	// "end_turn" otherwise.
	StopReason string
	// Usage defaults to 100 input tokens and about one output token per
	// four characters of output.
	Usage *Usage
	// Error answers with an HTTP error status and Anthropic's error JSON
	// instead of a message.
	Error *APIError
	// MidStreamError sends an SSE error event after the message_start and
	// the first block, then ends the stream (streaming requests only).
	MidStreamError *APIError
	// Disconnect drops the connection after the message_start and the first
	// block, without an error event, as a network failure would
	// (streaming requests only).
	Disconnect bool
	// Stall holds the connection open without sending anything further at
	// the given point, until the client goes away or the server closes.
	Stall StallPoint
	// Delay is slept before each SSE event, to make streams observable.
	Delay time.Duration
}

// StallPoint says where a Turn stops sending.
type StallPoint int

// Stall points.
const (
	NoStall StallPoint = iota
	// StallBeforeHeaders sends nothing at all.
	StallBeforeHeaders
	// StallAfterStart sends the headers, message_start and a ping, then
	// nothing.
	StallAfterStart
)

// Usage is the token usage a Turn reports.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// APIError is an error answer in the API's shape.
type APIError struct {
	// Status is the HTTP status (400, 401, 404, 429, 500, 529...).
	Status int
	// Type is the error type ("invalid_request_error"...); empty picks the
	// API's type for Status.
	Type string
	// Message is the human-readable message.
	Message string
	// RetryAfter, when set, is sent as the retry-after header (seconds).
	RetryAfter string
}

// errorType is the API's error type for each status.
func (e *APIError) errorType() string {
	if e.Type != "" {
		return e.Type
	}
	switch e.Status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	default:
		return "api_error"
	}
}

// Ready-made errors, matching what the API answers.
var (
	ErrPromptTooLong = &APIError{Status: http.StatusBadRequest, Message: "prompt is too long: 250000 tokens > 200000 maximum"}
	ErrUnauthorized  = &APIError{Status: http.StatusUnauthorized, Message: "invalid x-api-key"}
	ErrModelNotFound = &APIError{Status: http.StatusNotFound, Message: "model: not found"}
	ErrRateLimited   = &APIError{Status: http.StatusTooManyRequests, Message: "Number of request tokens has exceeded your per-minute rate limit", RetryAfter: "1"}
	ErrInternal      = &APIError{Status: http.StatusInternalServerError, Message: "Internal server error"}
	ErrOverloaded    = &APIError{Status: 529, Message: "Overloaded"}
)

// Block is one content block of a scripted answer.
type Block struct {
	// Type is "text", "thinking" or "tool_use".
	Type string
	// Text is the text of a text block or the thinking of a thinking block.
	Text string
	// Signature is a thinking block's signature (one is made up if empty).
	Signature string
	// ID, Name and Input describe a tool_use block; an empty ID is
	// generated.
	ID    string
	Name  string
	Input json.RawMessage
}

// Text is a text block.
func Text(s string) Block { return Block{Type: "text", Text: s} }

// Thinking is a thinking block.
func Thinking(s string) Block { return Block{Type: "thinking", Text: s} }

// ToolUse is a tool call; input is marshalled to JSON (a json.RawMessage
// or []byte is used as is). It panics on input that cannot be marshalled,
// which is a bug in the test script.
func ToolUse(name string, input any) Block {
	var raw json.RawMessage
	switch v := input.(type) {
	case json.RawMessage:
		raw = v
	case []byte:
		raw = v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			panic("scriptedapi: tool input does not marshal: " + err.Error())
		}
		raw = b
	}
	return Block{Type: "tool_use", Name: name, Input: raw}
}

// Say is a Turn with one text block.
func Say(s string) Turn { return Turn{Blocks: []Block{Text(s)}} }

// Call is a Turn that calls one tool.
func Call(name string, input any) Turn { return Turn{Blocks: []Block{ToolUse(name, input)}} }

// Fail is a Turn answered with an error status.
func Fail(e *APIError) Turn { return Turn{Error: e} }
