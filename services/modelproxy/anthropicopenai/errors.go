package anthropicopenai

import (
	"encoding/json"
	"net/http"
	"strings"
)

// PromptTooLong starts the message of a context-length error, as
// Anthropic's does; the CLI matches it to offer compaction.
const PromptTooLong = "prompt is too long"

type errorBody struct {
	Type  string      `json:"type"`
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

func errorJSON(typ, msg string) []byte {
	b, _ := json.Marshal(errorBody{Type: "error", Error: errorDetail{Type: typ, Message: msg}})
	return b
}

func errorResponse(req *http.Request, status int, typ, msg string) *http.Response {
	return newResponse(req, status, "application/json", errorJSON(typ, msg))
}

// providerMessage digs the message out of an OpenAI-style error body
// ({"error":{"message":...}}, {"error":"..."}, {"message":...}) or returns
// the body's text.
func providerMessage(b []byte) (msg, code string) {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(b, &e) == nil {
		var d struct {
			Message string `json:"message"`
			Code    any    `json:"code"`
			Type    string `json:"type"`
		}
		if json.Unmarshal(e.Error, &d) == nil && d.Message != "" {
			c, _ := d.Code.(string)
			if c == "" {
				c = d.Type
			}
			return d.Message, c
		}
		var s string
		if json.Unmarshal(e.Error, &s) == nil && s != "" {
			return s, ""
		}
		if e.Message != "" {
			return e.Message, ""
		}
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = s[:2000] + "..."
	}
	return s, ""
}

// contextTooLong reports whether a provider error says the prompt exceeds
// the model's context; providers word it differently.
func contextTooLong(msg, code string) bool {
	if code == "context_length_exceeded" {
		return true
	}
	m := strings.ToLower(msg)
	for _, s := range []string{"context length", "context_length", "maximum context", "context window", "prompt is too long", "too many tokens", "reduce the length", "input is too long"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// classify maps a provider status and message to Anthropic's status, error
// type and message.
func classify(status int, msg, code string) (int, string, string) {
	said := "provider said: " + msg
	switch {
	case (status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge || status == http.StatusUnprocessableEntity) && contextTooLong(msg, code):
		return http.StatusBadRequest, "invalid_request_error", PromptTooLong + ": " + said
	case status == http.StatusBadRequest || status == http.StatusUnprocessableEntity:
		return http.StatusBadRequest, "invalid_request_error", said
	case status == http.StatusUnauthorized:
		return status, "authentication_error", said
	case status == http.StatusForbidden:
		return status, "permission_error", said
	case status == http.StatusNotFound:
		return status, "not_found_error", said
	case status == http.StatusRequestEntityTooLarge:
		return status, "request_too_large", said
	case status == http.StatusTooManyRequests:
		return status, "rate_limit_error", said
	case status == http.StatusServiceUnavailable || status == 529:
		return 529, "overloaded_error", said
	case status >= 500:
		return status, "api_error", said
	}
	return status, "invalid_request_error", said
}

// providerError turns a provider's error answer into Anthropic's, keeping
// the retry hints the CLI honours.
func providerError(req *http.Request, resp *http.Response, body []byte) *http.Response {
	msg, code := providerMessage(body)
	if msg == "" {
		msg = resp.Status
	}
	status, typ, text := classify(resp.StatusCode, msg, code)
	r := errorResponse(req, status, typ, text)
	for _, h := range []string{"Retry-After", "Retry-After-Ms", "X-Should-Retry"} {
		if v := resp.Header.Get(h); v != "" {
			r.Header.Set(h, v)
		}
	}
	return r
}

// streamError maps an error object a provider sent inside its stream.
func streamError(raw json.RawMessage) errorBody {
	msg, code := providerMessage([]byte(`{"error":` + string(raw) + `}`))
	status := http.StatusInternalServerError
	switch {
	case contextTooLong(msg, code):
		status = http.StatusBadRequest
	case strings.Contains(strings.ToLower(code), "rate"):
		status = http.StatusTooManyRequests
	}
	_, typ, text := classify(status, msg, code)
	return errorBody{Type: "error", Error: errorDetail{Type: typ, Message: text}}
}
