package openai

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/middleware"
)

// statusOf is the status-code map of the package documentation.
type status struct {
	code    int
	errType string
	errCode string
}

var statuses = map[middleware.Kind]status{
	middleware.KindBadRequest:   {http.StatusBadRequest, "invalid_request_error", "invalid_request"},
	middleware.KindNotFound:     {http.StatusNotFound, "invalid_request_error", "model_not_found"},
	middleware.KindHookRejected: {http.StatusUnprocessableEntity, "invalid_request_error", "rejected_by_hook"},
	middleware.KindBusy:         {http.StatusConflict, "conflict_error", "chat_busy"},
	middleware.KindConfig:       {http.StatusInternalServerError, "server_error", "assistant_misconfigured"},
	middleware.KindSandboxStart: {http.StatusInternalServerError, "server_error", "sandbox_start_failed"},
	middleware.KindInternal:     {http.StatusInternalServerError, "server_error", "internal_error"},
	middleware.KindAgent:        {http.StatusBadGateway, "server_error", "agent_failed"},
	middleware.KindSandboxGone:  {http.StatusBadGateway, "server_error", "sandbox_gone"},
	middleware.KindUnavailable:  {http.StatusServiceUnavailable, "server_error", "unavailable"},
	middleware.KindOverloaded:   {http.StatusTooManyRequests, "rate_limit_error", "sandbox_capacity"},
	middleware.KindTimeout:      {http.StatusGatewayTimeout, "server_error", "agent_timeout"},
	// 499 is nginx's "client closed request": the client is gone and
	// never reads it; it shows in access logs.
	middleware.KindCanceled: {499, "server_error", "client_closed_request"},
}

func statusOf(e *middleware.Error) status {
	if s, ok := statuses[e.Kind]; ok {
		return s
	}
	return statuses[middleware.KindInternal]
}

// bodyOf is the OpenAI error JSON of e.
func bodyOf(e *middleware.Error) errorBody {
	s := statusOf(e)
	code := s.errCode
	switch {
	case e.Kind == middleware.KindNotFound && e.Param == "sandbox":
		code = "sandbox_not_found"
	case e.Kind == middleware.KindNotFound && e.Param == "checkpoint":
		code = "checkpoint_not_found"
	case e.Kind == middleware.KindBusy && e.Param == "id":
		code = "sandbox_exists"
	case e.Kind == middleware.KindNotFound && e.Param == "previous_response_id":
		code = "previous_response_not_found"
	case e.Kind == middleware.KindNotFound && e.Param == "response_id":
		code = "response_not_found"
	}
	b := errorBody{Error: errorObject{Message: e.Message, Type: s.errType, Code: &code}}
	if e.Param != "" {
		p := e.Param
		b.Error.Param = &p
	}
	return b
}

// errorShape is one API's way of answering an error: its JSON and its
// status codes. Every door answers every refusal in its own API's shape,
// the refusals of the shared steps (the body's reading, authentication,
// the method) included, so that its SDKs parse them.
type errorShape interface {
	// write answers e with the status of e's Kind, or with status when it
	// is not 0: the refusals that are no Kind of the middleware (401,
	// 405, 408, 413).
	write(w http.ResponseWriter, status int, e *middleware.Error)
}

// refusalStatus is the error type and code of a status that is no Kind
// of the middleware, in OpenAI's vocabulary.
var refusalStatus = map[int]struct{ errType, code string }{
	http.StatusUnauthorized:          {"authentication_error", "invalid_api_key"},
	http.StatusMethodNotAllowed:      {"invalid_request_error", "method_not_allowed"},
	http.StatusRequestTimeout:        {"invalid_request_error", "request_timeout"},
	http.StatusRequestEntityTooLarge: {"invalid_request_error", "request_too_large"},
}

// openaiErrors answers errors in OpenAI's JSON (Chat Completions,
// Responses, and the routes that are the adapter's own).
type openaiErrors struct{}

func (openaiErrors) write(w http.ResponseWriter, status int, e *middleware.Error) {
	b := bodyOf(e)
	if r, ok := refusalStatus[status]; ok {
		c := r.code
		b.Error.Type, b.Error.Code = r.errType, &c
	}
	if status == 0 {
		status = statusOf(e).code
	}
	errorHeaders(w, e)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(b)
}

// errorHeaders are the headers of every error answer: x-should-retry:
// false unless a retry is safe (nothing ran), and when to retry.
func errorHeaders(w http.ResponseWriter, e *middleware.Error) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("x-should-retry", strconv.FormatBool(e.Retry))
	if e.RetryAfter > 0 {
		// Retry-After has whole seconds; the SDKs (openai-go, openai-node,
		// Anthropic's) prefer retry-after-ms when it is there.
		h.Set("Retry-After", strconv.FormatInt(int64((e.RetryAfter+time.Second-1)/time.Second), 10))
		h.Set("retry-after-ms", strconv.FormatInt(e.RetryAfter.Milliseconds(), 10))
	}
}

// writeError answers with e's status, OpenAI error JSON and
// x-should-retry: false unless a retry is safe (nothing ran).
func writeError(w http.ResponseWriter, e *middleware.Error) { openaiErrors{}.write(w, 0, e) }

// unauthorized is the refusal of credentials, saying nothing about why.
func unauthorized() *middleware.Error {
	return &middleware.Error{Kind: middleware.KindBadRequest, Message: "the request's credentials were not accepted; check the API key"}
}

// methodNotAllowed answers 405 in sh's shape.
func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string, sh errorShape) {
	w.Header().Set("Allow", allow)
	sh.write(w, http.StatusMethodNotAllowed, &middleware.Error{Kind: middleware.KindBadRequest,
		Message: r.Method + " is not allowed on " + r.URL.Path + "; use " + allow})
}

// badRequest is a KindBadRequest error about param.
func badRequest(param, format string, args ...any) *middleware.Error {
	e := middleware.Errorf(middleware.KindBadRequest, nil, format, args...)
	e.Param = param
	return e
}
