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
	case e.Kind == middleware.KindBusy && e.Param == "id":
		code = "sandbox_exists"
	}
	b := errorBody{Error: errorObject{Message: e.Message, Type: s.errType, Code: &code}}
	if e.Param != "" {
		p := e.Param
		b.Error.Param = &p
	}
	return b
}

// writeError answers with e's status, OpenAI error JSON and
// x-should-retry: false unless a retry is safe (nothing ran).
func writeError(w http.ResponseWriter, e *middleware.Error) {
	s := statusOf(e)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("x-should-retry", strconv.FormatBool(e.Retry))
	if e.RetryAfter > 0 {
		// Retry-After has whole seconds; the SDKs (openai-go, openai-node)
		// prefer retry-after-ms when it is there.
		h.Set("Retry-After", strconv.FormatInt(int64((e.RetryAfter+time.Second-1)/time.Second), 10))
		h.Set("retry-after-ms", strconv.FormatInt(e.RetryAfter.Milliseconds(), 10))
	}
	w.WriteHeader(s.code)
	_ = json.NewEncoder(w).Encode(bodyOf(e))
}

// badRequest is a KindBadRequest error about param.
func badRequest(param, format string, args ...any) *middleware.Error {
	e := middleware.Errorf(middleware.KindBadRequest, nil, format, args...)
	e.Param = param
	return e
}
