package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/strictjson"
	"github.com/agentbox/agentbox/middleware"
)

// The Messages door: Anthropic's Messages API (POST /v1/messages) for the
// sandboxed assistants. It lives in this package, beside the OpenAI doors,
// because the three share one Server: one route table, the one reading of
// every body (reading.go), and one mount (Middleware) that a gateway
// wraps around its handler; a sibling package would have to export that
// machinery or wrap the handler a second time.
//
// A streamed answer is the API's event sequence:
//
//	message_start                               when the stream starts (its first event)
//	content_block_start {text}, content_block_delta {text_delta} ..., content_block_stop
//	content_block_start {thinking}, {thinking_delta} ..., content_block_stop   the agent's thinking
//	content_block_start {mcp_tool_use}, content_block_stop                     each tool call of the agent
//	content_block_start {mcp_tool_result}, content_block_stop                  and its result
//	ping                                        keep-alives, and the agentbox extension
//	message_delta {stop_reason, usage}, message_stop
//
// The agent's tool calls are mcp_tool_use and mcp_tool_result blocks
// (server_name "agentbox"), the blocks of tools that the server ran
// itself: clients render them (the Vercel AI SDK as provider-executed
// tool calls) and never answer them, unlike tool_use blocks. The
// extension travels in ping events, which every SDK skips (the Anthropic
// SDKs drop them before parsing, the Vercel AI SDK reads only their type),
// and "agentbox" in a non-streamed message holds the "done" object. A
// failure after the stream started is an error event, which the SDKs
// raise.

// messagesDoor is the Messages API.
var messagesDoor = &door{name: "message", what: "messages request", names: messagesFields, idPrefix: "msg_", idsField: `"metadata": {"user_id": "<user>:<chat>"}`, errors: anthropicErrors{}}

// messagesRequest is the part of a Messages request the door reads; every
// other member is passed on in middleware.Request.Options (metadata too).
type messagesRequest struct {
	Model    string           `json:"model"`
	Messages []anthropicInput `json:"messages"`
	System   jsontext.Value   `json:"system"`
	Stream   bool             `json:"stream"`
	Metadata jsontext.Value   `json:"metadata"`
	// Sandbox names the client sandbox (an extension; HeaderSandbox).
	Sandbox string `json:"sandbox"`
}

// messagesFields are the members the door reads. "user" is not the
// Messages API's: the ids travel in metadata.user_id, and a body with
// both would be read two ways.
var messagesFields = []string{"model", "messages", "system", "stream", "metadata", "sandbox", "user"}

// anthropicInput is one input message; Content is a string or blocks.
type anthropicInput struct {
	Role    string         `json:"role"`
	Content jsontext.Value `json:"content"`
}

// messages serves POST /v1/messages.
func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	a := s.admit(w, r, messagesDoor)
	if a == nil {
		return
	}
	w.Header().Set("request-id", a.id)
	req, derr := s.decodeMessages(a, r.Header)
	if derr != nil {
		s.refuseDecoded(w, messagesDoor, a.id, derr)
		return
	}
	m := s.newMessageRun(a.id, req.Model)
	if req.Stream {
		m.stream(w)
	}
	resp, e := s.run(r.Context(), messagesDoor, a.id, req, m.emit)
	if e != nil {
		m.fail(w, e)
		return
	}
	m.finish(w, resp)
}

// decodeMessages checks a Messages request.
func (s *Server) decodeMessages(a *admitted, h http.Header) (*middleware.Request, *middleware.Error) {
	var mr messagesRequest
	if err := a.obj.Into(&mr); err != nil {
		return nil, refusal(messagesDoor.what, err)
	}
	rest, e := restOf(a.obj, messagesFields, "metadata")
	if e != nil {
		return nil, e
	}
	switch {
	case a.obj.Has("user"):
		return nil, badRequest("user", `user is not a member of the Messages API; send the ids as "metadata": {"user_id": "<user>:<chat>"} or in the %s and %s headers`, HeaderUser, HeaderChat)
	case mr.Model == "":
		return nil, badRequest("model", "model is missing; name the assistant (GET /v1/models lists them)")
	case len(mr.Model) > maxModelLen:
		return nil, badRequest("model", "model is %d bytes long; assistant ids are at most %d", len(mr.Model), maxModelLen)
	case len(mr.Messages) == 0:
		return nil, badRequest("messages", "messages is empty; send at least one user message")
	}
	if herr := checkHeaders(h); herr != nil {
		return nil, herr
	}
	userField, merr := metadataUser(mr.Metadata)
	if merr != nil {
		return nil, merr
	}
	var msgs []executor.Message
	if sys, serr := systemOf(mr.System); serr != nil {
		return nil, serr
	} else if sys != "" {
		msgs = append(msgs, executor.Message{Role: "system", Content: sys})
	}
	for i, m := range mr.Messages {
		param := fmt.Sprintf("messages[%d]", i)
		if m.Role != "user" && m.Role != "assistant" {
			return nil, badRequest(param+".role", "%s has role %q; use user or assistant (the system prompt is the system member)", param, m.Role)
		}
		text, berr := blocksText(m.Content, m.Role)
		if berr != nil {
			berr.Param = param + ".content" + berr.Param
			berr.Message = param + ".content: " + berr.Message
			return nil, berr
		}
		msgs = append(msgs, executor.Message{Role: m.Role, Content: text})
	}
	user, chat, ierr := idsOf(h, userField, a.authUser)
	if ierr != nil {
		if ierr.Param == "user" {
			ierr.Param, ierr.Message = "metadata.user_id", "metadata.user_id"+strings.TrimPrefix(ierr.Message, "user")
		}
		return nil, ierr
	}
	sandbox, serr := s.sandboxOf(h, mr.Sandbox)
	if serr != nil {
		return nil, serr
	}
	return &middleware.Request{
		AssistantID: mr.Model, Model: mr.Model, Messages: msgs,
		UserID: user, ChatID: chat, SandboxID: sandbox,
		Stream: mr.Stream, Options: rest,
	}, nil
}

// metadataUser is metadata.user_id: "<user>" or "<user>:<chat>", as the
// OpenAI doors' user field. metadata is read strictly too, since it
// routes: no user_id twice or under a look-alike name.
func metadataUser(raw jsontext.Value) (string, *middleware.Error) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	obj, err := strictjson.Read(raw, strictjson.Options{Names: []string{"user_id"}})
	if err != nil {
		e := refusal("metadata object", err)
		e.Param = "metadata"
		return "", e
	}
	u, _, err := obj.String("user_id")
	if err != nil {
		return "", badRequest("metadata.user_id", "metadata.user_id must be a string")
	}
	return u, nil
}

// systemOf reads the system prompt: a string or text blocks.
func systemOf(raw jsontext.Value) (string, *middleware.Error) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	s, e := blocksText(raw, "system")
	if e != nil {
		e.Param = "system" + e.Param
		e.Message = "system: " + e.Message
	}
	return s, e
}

// blocksText reads a content: a string or blocks. Text blocks are joined
// without separator; in an assistant message the door's own blocks that a
// client sends back with its history (thinking, mcp_tool_use,
// mcp_tool_result) are skipped, so that the history reads as the answer
// the door gave. Other blocks are refused: the agent's tools run in its
// sandbox, and only text is taken.
func blocksText(raw jsontext.Value, role string) (string, *middleware.Error) {
	if raw = bytes.TrimSpace(raw); len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", badRequest("", "is missing; send a string or an array of content blocks")
	}
	return partsText(raw, "block", func(typ string) (bool, string) {
		switch {
		case typ == "text":
			return true, ""
		case role == "assistant" && (typ == "thinking" || typ == "redacted_thinking" || typ == "mcp_tool_use" || typ == "mcp_tool_result"):
			return false, ""
		case typ == "tool_use" || typ == "tool_result":
			return false, "the agent's tools run inside the sandbox, so send text only"
		}
		return false, "only text blocks are supported"
	})
}

// anthropicStatus is the status and error type of each Kind in the
// Messages API's vocabulary. Overloaded is 529 overloaded_error, the
// API's own answer when it has no capacity; the SDKs retry it, after
// retry-after.
var anthropicStatus = map[middleware.Kind]struct {
	code    int
	errType string
}{
	middleware.KindBadRequest:   {http.StatusBadRequest, "invalid_request_error"},
	middleware.KindNotFound:     {http.StatusNotFound, "not_found_error"},
	middleware.KindHookRejected: {http.StatusUnprocessableEntity, "invalid_request_error"},
	middleware.KindBusy:         {http.StatusConflict, "conflict_error"},
	middleware.KindConfig:       {http.StatusInternalServerError, "api_error"},
	middleware.KindSandboxStart: {http.StatusInternalServerError, "api_error"},
	middleware.KindInternal:     {http.StatusInternalServerError, "api_error"},
	middleware.KindAgent:        {http.StatusBadGateway, "api_error"},
	middleware.KindSandboxGone:  {http.StatusBadGateway, "api_error"},
	middleware.KindUnavailable:  {http.StatusServiceUnavailable, "api_error"},
	middleware.KindOverloaded:   {529, "overloaded_error"},
	middleware.KindTimeout:      {http.StatusGatewayTimeout, "timeout_error"},
	middleware.KindCanceled:     {499, "api_error"},
}

// anthropicRefusal is the error type of a status that is no Kind.
var anthropicRefusal = map[int]string{
	http.StatusUnauthorized:          "authentication_error",
	http.StatusMethodNotAllowed:      "invalid_request_error",
	http.StatusRequestTimeout:        "timeout_error",
	http.StatusRequestEntityTooLarge: "request_too_large",
}

// anthropicErrors answers errors in the Messages API's JSON:
// {"type": "error", "error": {"type", "message"}}.
type anthropicErrors struct{}

// anthropicError is the API's error JSON.
type anthropicError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

func anthropicErrorOf(status int, e *middleware.Error) (int, anthropicError) {
	st, ok := anthropicStatus[e.Kind]
	if !ok {
		st = anthropicStatus[middleware.KindInternal]
	}
	if t, ok := anthropicRefusal[status]; ok {
		st.code, st.errType = status, t
	}
	b := anthropicError{Type: "error"}
	b.Error.Type, b.Error.Message = st.errType, e.Message
	if e.Param != "" && !strings.Contains(e.Message, e.Param) {
		b.Error.Message = e.Param + ": " + e.Message
	}
	return st.code, b
}

func (anthropicErrors) write(w http.ResponseWriter, status int, e *middleware.Error) {
	code, b := anthropicErrorOf(status, e)
	errorHeaders(w, e)
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(b)
}
