package openai

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/strictjson"
	"github.com/agentbox/agentbox/middleware"
)

// The doors: the APIs through which clients reach the sandboxed
// assistants. Chat Completions (POST /v1/chat/completions), OpenAI's
// Responses (POST /v1/responses) and Anthropic's Messages (POST
// /v1/messages) share everything but the shapes of their requests,
// answers and errors: the one reading of the body and the pass-through to
// Next (reading.go), the method, the request id, authentication, the
// user, chat and sandbox ids, the handler's run with its cancellation and
// lifecycle events, the error of each middleware.Kind, and the SSE stream
// with its heartbeat (sseWriter). A door only translates its request into
// a middleware.Request and the handler's events and response into its
// API's events.

// door is what sets one API apart in the shared steps.
type door struct {
	// name names its requests in log lines ("chat completion").
	name string
	// what names its body in refusals ("chat completion request").
	what string
	// names are the top-level members it reads (strictjson.Options).
	names []string
	// idPrefix starts its ids ("chatcmpl-"), which are the request ids.
	idPrefix string
	// idsField is how a body names the user and chat ids, for hints.
	idsField string
	errors   errorShape
}

// admitted is a request a door answers itself.
type admitted struct {
	// id is the request's id (x-request-id), in the door's form.
	id  string
	obj *strictjson.Object
	// authUser is the authenticated user id, "" without Authenticate.
	authUser string
}

// admit runs the steps every door takes before it decodes a request: Next
// answers what is not a sandboxed assistant's, the body is read once
// (refused when it cannot be), the method checked, the request id set and
// the client authenticated. It returns nil when the request is answered
// already.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, d *door) *admitted {
	if s.opts.Next != nil && (s.opts.Catalog == nil || r.Method != http.MethodPost && (r.Body == nil || r.Body == http.NoBody)) {
		s.opts.Next.ServeHTTP(w, r)
		return nil
	}
	if s.opts.Next == nil && r.Method != http.MethodPost {
		methodNotAllowed(w, r, http.MethodPost, d.errors)
		return nil
	}
	defer func() { _ = r.Body.Close() }()
	body, e := s.readOnce(w, r)
	if e != nil {
		s.refuse(w, r, body, e, d)
		return nil
	}
	v, obj, e := s.classify(r.Context(), body, d.what, d.names)
	switch {
	case e != nil:
		s.refuse(w, r, body, e, d)
		return nil
	case v == toNext:
		s.passOn(w, r, body)
		return nil
	case r.Method != http.MethodPost:
		methodNotAllowed(w, r, http.MethodPost, d.errors)
		return nil
	}
	a := &admitted{id: newID(d.idPrefix), obj: obj}
	w.Header().Set("x-request-id", a.id)
	if s.opts.Authenticate != nil {
		u, err := s.opts.Authenticate(r)
		if err == nil {
			err = executor.ValidateID("user", u)
		}
		if err != nil {
			s.log.Info(d.name+" refused: authentication failed", "request", a.id, "error", err)
			d.errors.write(w, http.StatusUnauthorized, unauthorized())
			return nil
		}
		a.authUser = u
	}
	return a
}

// run answers req through the handler: emit receives its events, and the
// result is its response or the error as the client gets it (logged).
func (s *Server) run(ctx context.Context, d *door, id string, req *middleware.Request, emit middleware.Emit) (*middleware.Response, *middleware.Error) {
	ctx = middleware.WithRequestID(ctx, id)
	resp, err := s.opts.Handler.Handle(ctx, req, emit)
	if err == nil && resp == nil {
		err = errNilResponse
	}
	if err != nil {
		e := clientError(err, d)
		s.logHandled(d, id, err, e)
		return nil, e
	}
	return resp, nil
}

// errNilResponse is a handler's bug: no response and no error.
var errNilResponse = errors.New("openai: the handler returned neither a response nor an error")

// refuseDecoded answers a request the door could not decode.
func (s *Server) refuseDecoded(w http.ResponseWriter, d *door, id string, e *middleware.Error) {
	s.logFailure(d, id, e)
	d.errors.write(w, 0, e)
}

// logHandled logs the handler's failure err (e as the client gets it):
// at DEBUG when the middleware logged the request's line itself, so that
// one request makes one INFO line.
func (s *Server) logHandled(d *door, id string, err error, e *middleware.Error) {
	if middleware.Logged(err) {
		s.log.Debug(d.name+" failed", "request", id, "kind", e.Kind, "status", statusOf(e).code, "error", e.Error())
		return
	}
	s.logFailure(d, id, e)
}

func (s *Server) logFailure(d *door, id string, e *middleware.Error) {
	s.log.Info(d.name+" failed", "request", id, "kind", e.Kind, "status", statusOf(e).code, "error", e.Error())
}

// newID returns a random id with prefix, like the APIs' own.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
