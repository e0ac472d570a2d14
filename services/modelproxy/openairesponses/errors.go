package openairesponses

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"
)

// contextExceeded is the code with which the Codex CLI recognizes a
// context overflow: it reports it and does not retry.
const contextExceeded = "context_length_exceeded"

// openaiError reads a Chat Completions provider's error answer: its code
// (or type) and message, or the body as text.
func openaiError(status int, b []byte) (code, msg string) {
	e := gjson.GetBytes(b, "error")
	msg = cmpOr(e.Get("message").String(), strings.TrimSpace(string(b)))
	code = cmpOr(e.Get("code").String(), e.Get("type").String())
	if strings.Contains(strings.ToLower(msg), "context length") || strings.Contains(strings.ToLower(msg), "maximum context") {
		code = contextExceeded
	}
	return cmpOr(code, statusCode(status)), fmt.Sprintf("agentbox: the Chat Completions provider answered %d: %s", status, msg)
}

// anthropicError reads the Messages API's error answer ({"type":"error",
// "error":{"type","message"}}).
func anthropicError(status int, b []byte) (code, msg string) {
	e := gjson.GetBytes(b, "error")
	msg = cmpOr(e.Get("message").String(), strings.TrimSpace(string(b)))
	return anthropicCode(e.Get("type").String(), msg), fmt.Sprintf("agentbox: the Messages API answered %d: %s", status, msg)
}

// anthropicCode is the OpenAI error code of an Anthropic error type.
func anthropicCode(typ, msg string) string {
	switch {
	case strings.Contains(strings.ToLower(msg), "prompt is too long"):
		return contextExceeded
	case typ == "rate_limit_error":
		return "rate_limit_exceeded"
	case typ == "authentication_error":
		return "invalid_api_key"
	case typ == "overloaded_error" || typ == "api_error":
		return "server_error"
	}
	return cmpOr(typ, "server_error")
}

// statusCode is a code for a status without one.
func statusCode(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	case status == http.StatusUnauthorized:
		return "invalid_api_key"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}
