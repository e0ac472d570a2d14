package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/strictjson"
	"github.com/agentbox/agentbox/middleware"
)

// The Responses door: OpenAI's Responses API (POST /v1/responses, GET
// /v1/responses/{id}) for the sandboxed assistants. See the package
// documentation for what it takes and answers; responses_stream.go writes
// its events.

// responsesDoor is the Responses API.
var responsesDoor = &door{name: "response", what: "responses request", names: responsesFields, idPrefix: "resp_", idsField: userField, errors: openaiErrors{}}

// responsesRequest is the part of a Responses request the door reads;
// every other member is passed on in middleware.Request.Options (metadata
// too, which the response also echoes). It is decoded with json v2: names
// match exactly.
type responsesRequest struct {
	Model              string         `json:"model"`
	Input              jsontext.Value `json:"input"`
	Instructions       *string        `json:"instructions"`
	PreviousResponseID *string        `json:"previous_response_id"`
	Store              *bool          `json:"store"`
	Stream             bool           `json:"stream"`
	User               string         `json:"user"`
	Metadata           map[string]any `json:"metadata"`
	// Background and Conversation are refused: a run is answered while
	// the client waits, and its conversation continues by
	// previous_response_id.
	Background   *bool          `json:"background"`
	Conversation jsontext.Value `json:"conversation"`
	// Sandbox names the client sandbox (an extension; HeaderSandbox).
	Sandbox string `json:"sandbox"`
}

// responsesFields are the members the door reads: the body's reading
// refuses a member that folds to one of them without being it.
var responsesFields = []string{"model", "input", "instructions", "previous_response_id", "store", "stream", "user",
	"metadata", "background", "conversation", "sandbox"}

// inputItem is one item of a Responses input array: a message (type
// "message" or none), or an item of another type.
type inputItem struct {
	Type    string         `json:"type"`
	Role    string         `json:"role"`
	Content jsontext.Value `json:"content"`
}

// responseTurn is a decoded Responses request: the middleware request and
// what the response echoes and stores.
type responseTurn struct {
	req          *middleware.Request
	instructions *string
	previous     *string
	store        bool
	metadata     map[string]any
	// history is req.Messages without the instructions; input is the
	// byte count of the turn's own input.
	history []executor.Message
	input   int64
}

// responses serves POST /v1/responses.
func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	a := s.admit(w, r, responsesDoor)
	if a == nil {
		return
	}
	t, derr := s.decodeResponses(a, r.Header)
	if derr != nil {
		s.refuseDecoded(w, responsesDoor, a.id, derr)
		return
	}
	run := s.newResponseRun(a.id, t)
	if t.req.Stream {
		run.stream(w)
	}
	resp, e := s.run(r.Context(), responsesDoor, a.id, t.req, run.emit)
	if e != nil {
		run.fail(w, e)
		return
	}
	run.finish(w, resp)
}

// decodeResponses checks a Responses request and builds its conversation:
// the instructions, the stored turns it continues (previous_response_id),
// its input.
func (s *Server) decodeResponses(a *admitted, h http.Header) (*responseTurn, *middleware.Error) {
	var rr responsesRequest
	if err := a.obj.Into(&rr); err != nil {
		return nil, refusal(responsesDoor.what, err)
	}
	rest, e := restOf(a.obj, responsesFields, "metadata")
	if e != nil {
		return nil, e
	}
	switch {
	case rr.Model == "":
		return nil, badRequest("model", "model is missing; name the assistant (GET /v1/models lists them)")
	case len(rr.Model) > maxModelLen:
		return nil, badRequest("model", "model is %d bytes long; assistant ids are at most %d", len(rr.Model), maxModelLen)
	case rr.Background != nil && *rr.Background:
		return nil, badRequest("background", "background is true; a sandboxed assistant answers while the request waits: leave background out and stream the response instead")
	case len(rr.Conversation) > 0 && !bytes.Equal(rr.Conversation, []byte("null")):
		return nil, badRequest("conversation", "conversation is not supported; continue a conversation with previous_response_id")
	}
	if herr := checkHeaders(h); herr != nil {
		return nil, herr
	}
	input, n, ierr := inputOf(rr.Input)
	if ierr != nil {
		return nil, ierr
	}
	user, chat, idErr := idsOf(h, rr.User, a.authUser)
	if idErr != nil {
		return nil, idErr
	}
	sandbox, serr := s.sandboxOf(h, rr.Sandbox)
	if serr != nil {
		return nil, serr
	}
	t := &responseTurn{instructions: rr.Instructions, previous: rr.PreviousResponseID, store: rr.Store == nil || *rr.Store,
		metadata: rr.Metadata, input: n}
	if rr.PreviousResponseID != nil {
		if user == "" {
			return nil, badRequest(HeaderUser, "previous_response_id needs the user id whose response it is; send it in the %s header or the user field", HeaderUser)
		}
		prev := s.store.get(user, *rr.PreviousResponseID)
		if prev == nil {
			e := middleware.Errorf(middleware.KindNotFound, nil, "Previous response with id '%s' not found.", clip(*rr.PreviousResponseID))
			e.Param = "previous_response_id"
			return nil, e
		}
		t.history = append(slices.Clip(prev.history), executor.Message{Role: "assistant", Content: prev.answer})
		if chat == "" {
			chat = prev.chat
		}
	}
	t.history = append(t.history, input...)
	if chat == "" {
		// A conversation's first response names its chat: previous_response_id
		// carries the chat on, and the client needs no chat id of its own.
		chat = a.id
	}
	msgs := t.history
	if rr.Instructions != nil && *rr.Instructions != "" {
		msgs = append([]executor.Message{{Role: "system", Content: *rr.Instructions}}, t.history...)
	}
	t.req = &middleware.Request{
		AssistantID: rr.Model, Model: rr.Model, Messages: msgs,
		UserID: user, ChatID: chat, SandboxID: sandbox,
		Stream: rr.Stream, Options: rest,
	}
	return t, nil
}

// inputOf reads a Responses input: a string (one user message) or an array
// of items. Messages of role developer are system messages. The door's
// own output items that a client sends back with its history (reasoning,
// mcp_call) are skipped, and the texts of assistant messages between them
// joined, so that the history reads as the answer the door gave. It
// returns the messages and their bytes.
func inputOf(raw jsontext.Value) ([]executor.Message, int64, *middleware.Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, 0, badRequest("input", "input is missing; send the user's message as a string or an array of input items")
	}
	if raw[0] == '"' {
		var s string
		if err := jsonv2.Unmarshal(raw, &s); err != nil {
			return nil, 0, badRequest("input", "input is not a valid string: %v", err)
		}
		return []executor.Message{{Role: "user", Content: s}}, int64(len(s)), nil
	}
	if k := raw.Kind(); k != '[' {
		return nil, 0, badRequest("input", "input is %s; send the user's message as a string or an array of input items", strictjson.KindName(k))
	}
	var items []inputItem
	if err := strictjson.UnmarshalAt("input", raw, &items); err != nil {
		return nil, 0, refusal("responses request", err)
	}
	var out []executor.Message
	var n int64
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		switch it.Type {
		case "", "message":
		case "reasoning", "mcp_call", "mcp_list_tools":
			continue
		default:
			return nil, 0, badRequest(param+".type", "%s has type %q, which this endpoint does not take; send messages (the agent's tools run inside the sandbox)", param, it.Type)
		}
		role := it.Role
		switch role {
		case "user", "system", "assistant":
		case "developer":
			role = "system"
		case "":
			return nil, 0, badRequest(param+".role", "%s has no role; use user, system, developer or assistant", param)
		default:
			return nil, 0, badRequest(param+".role", "%s has role %q; use user, system, developer or assistant", param, it.Role)
		}
		text, err := itemText(it.Content, role)
		if err != nil {
			err.Param = param + ".content" + err.Param
			err.Message = param + ".content: " + err.Message
			return nil, 0, err
		}
		n += int64(len(text))
		if role == "assistant" && len(out) > 0 && out[len(out)-1].Role == "assistant" {
			out[len(out)-1].Content += text
			continue
		}
		out = append(out, executor.Message{Role: role, Content: text})
	}
	if len(out) == 0 {
		return nil, 0, badRequest("input", "input has no message; send at least one user message")
	}
	return out, n, nil
}

// itemText reads an input message's content: a string or text parts
// (input_text; output_text and refusal in an assistant message), joined
// without separator.
func itemText(raw jsontext.Value, role string) (string, *middleware.Error) {
	if raw = bytes.TrimSpace(raw); len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", badRequest("", "is missing; send a string or an array of content parts")
	}
	return partsText(raw, "part", func(typ string) (bool, string) {
		switch {
		case typ == "input_text", role == "assistant" && typ == "output_text":
			return true, ""
		case role == "assistant" && typ == "refusal":
			return false, ""
		}
		return false, "only text parts are supported (input_text, and output_text in assistant messages)"
	})
}

// restOf are the members of obj that the door does not consume (all but
// consumed, keep excepted), for middleware.Request.Options.
func restOf(obj *strictjson.Object, consumed []string, keep ...string) (map[string]any, *middleware.Error) {
	rest := make(map[string]any, len(obj.Names()))
	for _, k := range obj.Names() {
		if slices.Contains(consumed, k) && !slices.Contains(keep, k) {
			continue
		}
		var v any
		if err := obj.Decode(k, &v); err != nil {
			return nil, refusal("request", err)
		}
		rest[k] = v
	}
	return rest, nil
}

// sandboxOf is the client sandbox a request names in its header or its
// field, "" for none.
func (s *Server) sandboxOf(h http.Header, field string) (string, *middleware.Error) {
	sandbox := h.Get(HeaderSandbox)
	switch {
	case sandbox == "":
		sandbox = field
	case field != "" && field != sandbox:
		return "", badRequest("sandbox", "the %s header names %q and the sandbox field %q; name one sandbox", HeaderSandbox, sandbox, field)
	}
	if sandbox == "" {
		return "", nil
	}
	if s.opts.Sandboxes == nil {
		return "", badRequest("sandbox", "this gateway has no client sandboxes; leave %s and the sandbox field out", HeaderSandbox)
	}
	if err := executor.ValidateID("sandbox", sandbox); err != nil {
		return "", badRequest("sandbox", "%s", idProblem(err))
	}
	return sandbox, nil
}

// storedResponseOf serves GET /v1/responses/{id}: the user's stored
// response, or Next's answer (404 without Next) for an id it does not
// hold, another user's included.
func (s *Server) storedResponseOf(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		if s.opts.Next != nil {
			s.opts.Next.ServeHTTP(w, r)
			return
		}
		methodNotAllowed(w, r, http.MethodGet, openaiErrors{})
		return
	}
	if e := checkHeaders(r.Header); e != nil {
		writeError(w, e)
		return
	}
	user := r.Header.Get(HeaderUser)
	if s.opts.Authenticate != nil {
		u, err := s.opts.Authenticate(r)
		if err != nil {
			openaiErrors{}.write(w, http.StatusUnauthorized, unauthorized())
			return
		}
		user = u
	}
	id := r.PathValue("id")
	var stored *storedResponse
	if user != "" {
		stored = s.store.get(user, id)
	}
	switch {
	case stored != nil && r.URL.Query().Get("stream") == "true":
		writeError(w, badRequest("stream", "a stored response is answered whole; leave stream=true out"))
	case stored != nil:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(stored.body)
	case s.opts.Next != nil:
		s.opts.Next.ServeHTTP(w, r)
	default:
		e := middleware.Errorf(middleware.KindNotFound, nil, "Response with id '%s' not found.", clip(id))
		e.Param = "response_id"
		writeError(w, e)
	}
}

// encode is v as JSON, for a stored body.
func encode(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
