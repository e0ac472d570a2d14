package openai

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/strictjson"
	"github.com/agentbox/agentbox/middleware"
)

// Headers that carry the user and chat ids (see the package documentation
// for the rule).
const (
	HeaderUser = "X-Agentbox-User"
	HeaderChat = "X-Agentbox-Chat"
)

// userField is how the OpenAI doors' bodies name the ids.
const userField = `"user": "<user>:<chat>"`

// maxModelLen bounds the model name, which every chunk repeats.
const maxModelLen = 256

// decodeChat checks a chat completion request from the adapter's one
// reading of its body (obj) and its headers. authUser, when not empty, is
// the authenticated user id, which wins.
func (s *Server) decodeChat(obj *strictjson.Object, h http.Header, authUser string) (*middleware.Request, *middleware.Error) {
	var cr chatRequest
	if err := obj.Into(&cr); err != nil {
		return nil, refusal("chat completion request", err)
	}
	rest, e := restOf(obj, knownFields)
	if e != nil {
		return nil, e
	}
	switch {
	case cr.Model == "":
		return nil, badRequest("model", "model is missing; name the assistant (GET /v1/models lists them)")
	case len(cr.Model) > maxModelLen:
		return nil, badRequest("model", "model is %d bytes long; assistant ids are at most %d", len(cr.Model), maxModelLen)
	case len(cr.Messages) == 0:
		return nil, badRequest("messages", "messages is empty; send at least one user message")
	case cr.N != nil && *cr.N != 1:
		return nil, badRequest("n", "n is %d; this endpoint answers with one choice, so leave n out or set it to 1", *cr.N)
	}
	if herr := checkHeaders(h); herr != nil {
		return nil, herr
	}
	msgs, merr := messagesOf(cr.Messages)
	if merr != nil {
		return nil, merr
	}
	user, chat, ierr := idsOf(h, cr.User, authUser)
	if ierr != nil {
		return nil, ierr
	}
	sandbox, serr := s.sandboxOf(h, cr.Sandbox)
	if serr != nil {
		return nil, serr
	}
	req := &middleware.Request{
		AssistantID: cr.Model, Model: cr.Model, Messages: msgs,
		UserID: user, ChatID: chat, SandboxID: sandbox,
		Stream: cr.Stream, Options: rest,
	}
	if cr.StreamOptions != nil {
		req.StreamOptions.IncludeUsage = cr.StreamOptions.IncludeUsage
	}
	return req, nil
}

// errBodyTooLarge marks a body over the cap, answered with 413;
// errBodyTimeout one that did not arrive in time, answered with 408.
var (
	errBodyTooLarge = errors.New("openai: request body too large")
	errBodyTimeout  = errors.New("openai: request body too slow")
)

// bodyDeadline bounds the read of the request body by timeout (none when
// it is not positive or w has no deadlines) and returns what lifts the
// bound once the body is in: the server's background read, which notices
// a client that goes away during the run, must not time out. After a
// failed read the bound stays, and the connection is closed after the
// error.
func bodyDeadline(w http.ResponseWriter, timeout time.Duration) (lift func()) {
	rc := http.NewResponseController(w)
	if timeout <= 0 || rc.SetReadDeadline(time.Now().Add(timeout)) != nil {
		return func() {}
	}
	return func() { _ = rc.SetReadDeadline(time.Time{}) }
}

// bodyTimeout is the error of a body that did not arrive within timeout.
// The connection is closed after the answer: the server must not wait for
// the rest of the body first, as it does to keep a connection alive.
func bodyTimeout(w http.ResponseWriter, timeout time.Duration) *middleware.Error {
	w.Header().Set("Connection", "close")
	return middleware.Errorf(middleware.KindBadRequest, errBodyTimeout,
		"the request body did not arrive within %v of the headers; send it at once", timeout)
}

// messagesOf converts the input messages: "developer" is a system message;
// content is a string or an array of text parts (joined without
// separator); other roles and part types are refused.
func messagesOf(in []chatMessage) ([]executor.Message, *middleware.Error) {
	out := make([]executor.Message, 0, len(in))
	for i, m := range in {
		role := m.Role
		switch role {
		case "system", "user", "assistant":
		case "developer":
			role = "system"
		case "":
			return nil, badRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d] has no role; use system, developer, user or assistant", i)
		default:
			return nil, badRequest(fmt.Sprintf("messages[%d].role", i),
				"messages[%d] has role %q, which this endpoint does not take; use system, developer, user or assistant (tools run inside the sandbox)", i, m.Role)
		}
		text, err := textOf(m.Content)
		if err != nil {
			err.Param = fmt.Sprintf("messages[%d].content%s", i, err.Param)
			err.Message = fmt.Sprintf("messages[%d].content: %s", i, err.Message)
			return nil, err
		}
		out = append(out, executor.Message{Role: role, Content: text})
	}
	return out, nil
}

// textOf reads a message content: a string, null (empty) or text parts.
func textOf(raw jsontext.Value) (string, *middleware.Error) {
	return partsText(raw, "part", func(typ string) (bool, string) {
		return typ == "text", "only text parts are supported"
	})
}

// partsText reads a content of any door: a string, null (empty), or an
// array of typed parts ({"type", "text"}: a part, or a block), joined
// without separator. take says of each part's type whether its text is
// kept; a type it neither keeps nor skips (a refusal, non-empty) is an
// error saying what to send instead.
func partsText(raw jsontext.Value, noun string, take func(typ string) (keep bool, refusal string)) (string, *middleware.Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := jsonv2.Unmarshal(raw, &s); err != nil {
			return "", badRequest("", "not a valid string: %v", err)
		}
		return s, nil
	case '[':
		var parts []contentPart
		if err := jsonv2.Unmarshal(raw, &parts); err != nil {
			return "", badRequest("", "not a valid array of content %ss: %v", noun, err)
		}
		var b strings.Builder
		for j, p := range parts {
			keep, refusal := take(p.Type)
			switch {
			case keep:
				b.WriteString(p.Text)
			case refusal != "":
				return "", badRequest(fmt.Sprintf("[%d].type", j), "%s %d has type %q; %s", noun, j, p.Type, refusal)
			}
		}
		return b.String(), nil
	}
	return "", badRequest("", "must be a string or an array of content %ss", noun)
}

// idsOf takes the user and chat ids: each from its header when the header
// is set, else from the "user" field, which is either "<user>" or
// "<user>:<chat>"; an authenticated user id (authUser, when not empty)
// wins over both. Ids that are set are checked with executor.ValidateID.
func idsOf(h http.Header, userField, authUser string) (user, chat string, _ *middleware.Error) {
	fieldUser, fieldChat, _ := strings.Cut(userField, ":")
	user, chat = h.Get(HeaderUser), h.Get(HeaderChat)
	userParam, chatParam := HeaderUser, HeaderChat
	switch {
	case authUser != "":
		user = authUser
	case user == "":
		user, userParam = fieldUser, "user"
	}
	if chat == "" {
		chat, chatParam = fieldChat, "user"
	}
	if user != "" {
		if err := executor.ValidateID("user", user); err != nil {
			return "", "", badRequest(userParam, "%s: %s", userParam, idProblem(err))
		}
	}
	if chat != "" {
		if err := executor.ValidateID("chat", chat); err != nil {
			return "", "", badRequest(chatParam, "%s: %s", chatParam, idProblem(err))
		}
	}
	return user, chat, nil
}

// idProblem is ValidateID's message without the sentinel's suffix.
func idProblem(err error) string {
	return strings.TrimSuffix(err.Error(), ": "+executor.ErrInvalid.Error())
}
