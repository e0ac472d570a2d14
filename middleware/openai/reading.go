package openai

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strings"

	"github.com/agentbox/agentbox/internal/strictjson"
	"github.com/agentbox/agentbox/middleware"
)

// One reading of every request.
//
// In front of a gateway's own handler (Options.Next) the adapter decides
// from the body whether a request is a sandboxed assistant's, and Next may
// decode the same body again with a reader of its own. Wherever the two
// readings could differ, a request for a sandboxed assistant would reach
// Next and run without the sandbox: no container, no hooks, no budget, no
// admission. So the adapter reads each body it routes once, strictly
// (package strictjson: one JSON object, no name twice at any depth, no
// top-level name that folds to one it reads, valid UTF-8, no byte order
// mark, nothing after the object), and then either answers it, passes it on
// with a body that no reader takes for a sandboxed assistant, or refuses it
// in OpenAI's error shape: 400 for a body it cannot read that way, 413 for
// one too large to read, 408 for one too slow. Options.PassUnreadable
// loosens this for a Next known to refuse such bodies itself.
//
// The routing headers get the same care: a header sent twice (in any case,
// which net/http merges into one name) or under a look-alike name
// (X_Agentbox_User, which CGI-style stacks and some proxies map onto
// X-Agentbox-User) is refused.

// guardedPaths are the model APIs' paths, beside the chat completions the
// adapter serves, whose JSON body names a model in "model". Next may serve
// them for any model it knows, a sandboxed assistant's included, so the
// adapter reads their bodies too and refuses one that names a sandboxed
// assistant (or cannot be read) instead of passing it on.
var guardedPaths = []string{"/v1/completions", "/v1/embeddings"}

// guardedDoor is a path of guardedPaths, as the adapter refuses its
// bodies.
var guardedDoor = &door{name: "request", what: "request", names: []string{"model"}, errors: openaiErrors{}}

// doorOf is the door of route, a path of bodyRoutes, whose shape a
// refusal on it takes.
func doorOf(route string) *door {
	switch route {
	case "/v1/chat/completions":
		return chatDoor
	case "/v1/responses":
		return responsesDoor
	case "/v1/messages":
		return messagesDoor
	}
	return guardedDoor
}

// bodyRoutes are the paths on which the adapter routes by the body.
var bodyRoutes = append([]string{"/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/sandboxes"}, guardedPaths...)

// routeTwin returns the route of bodyRoutes that p, a path no route of
// the adapter matched, would be to a looser router behind it (one that
// folds case, ignores a trailing slash or ";params", or decodes %2F), or
// "".
func routeTwin(p string) string {
	if i := strings.IndexByte(p, ';'); i >= 0 {
		p = p[:i]
	}
	p = strings.ToLower(path.Clean("/" + p))
	for _, route := range bodyRoutes {
		if p == route {
			return route
		}
	}
	return ""
}

// routingHeaders are the headers that select the user, chat and sandbox.
var routingHeaders = []string{HeaderUser, HeaderChat, HeaderSandbox}

// verdict is who answers a request the adapter read.
type verdict int

const (
	// toNext: the gateway's own handler, with the body as it came.
	toNext verdict = iota
	// toAgentbox: the adapter, for a sandboxed assistant.
	toAgentbox
)

// readOnce reads r's whole body, bounded by Options.MaxBodyBytes and
// Options.BodyTimeout. A body over the cap comes back with its first
// MaxBodyBytes+1 bytes and errBodyTooLarge, so that PassUnreadable can
// put it back whole; a compressed body is refused, since the adapter would
// route on bytes that Next may read inflated.
func (s *Server) readOnce(w http.ResponseWriter, r *http.Request) ([]byte, *middleware.Error) {
	if ce := r.Header.Values("Content-Encoding"); len(ce) > 1 || len(ce) == 1 && !strings.EqualFold(ce[0], "identity") {
		return nil, badRequest("", "the body has Content-Encoding %q; send it uncompressed", strings.Join(ce, ", "))
	}
	lift := bodyDeadline(w, s.opts.BodyTimeout)
	body, err := io.ReadAll(io.LimitReader(r.Body, s.opts.MaxBodyBytes+1))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, bodyTimeout(w, s.opts.BodyTimeout)
	case err != nil:
		return nil, badRequest("", "reading the request body failed: %v", err)
	}
	lift()
	if int64(len(body)) > s.opts.MaxBodyBytes {
		// The rest is not read: the connection closes after the answer.
		w.Header().Set("Connection", "close")
		return body, middleware.Errorf(middleware.KindBadRequest, errBodyTooLarge,
			"the request body is larger than %d bytes, too large to read; shorten the conversation or raise the gateway's body limit (Options.MaxBodyBytes)", s.opts.MaxBodyBytes)
	}
	return body, nil
}

// classify reads body, a request on a path whose body names a model, and
// says who answers it: the adapter (a sandboxed assistant of the catalog,
// or every request when there is no Next), or Next. what names the kind
// of request for messages; names are the top-level members the adapter
// reads on that path. The Object is the one
// reading the adapter then decodes; an error is a body to refuse.
func (s *Server) classify(ctx context.Context, body []byte, what string, names []string) (verdict, *strictjson.Object, *middleware.Error) {
	obj, err := strictjson.Read(body, strictjson.Options{Names: names})
	if err != nil {
		return toNext, nil, refusal(what, err)
	}
	model, has, err := obj.String("model")
	if err != nil {
		return toNext, nil, refusal(what, err)
	}
	if s.opts.Next == nil {
		return toAgentbox, obj, nil
	}
	if !has {
		return toNext, obj, nil
	}
	a, lerr := s.opts.Catalog.Lookup(ctx, model)
	switch {
	case lerr == nil && a != nil && a.Sandbox != nil:
		return toAgentbox, obj, nil
	case lerr == nil && a != nil:
		return toNext, obj, nil
	}
	if twin := s.sandboxedTwin(ctx, model); twin != "" {
		return toNext, nil, badRequest("model", "the model %q is not the sandboxed assistant %q; name it exactly", clip(model), twin)
	}
	return toNext, obj, nil
}

// sandboxedTwin returns the sandboxed assistant of the catalog whose id
// model equals but for case, surrounding space, '-' and '_', or "": a
// gateway handler behind the adapter that looks models up loosely would
// take model for that assistant.
func (s *Server) sandboxedTwin(ctx context.Context, model string) string {
	list, err := s.opts.Catalog.List(ctx)
	if err != nil {
		return ""
	}
	want := looseName(model)
	for _, a := range list {
		if a.Sandbox != nil && looseName(a.ID) == want {
			return a.ID
		}
	}
	return ""
}

// looseName is what a loose lookup compares: no surrounding space, no '-'
// or '_', lower case.
func looseName(s string) string {
	s = strings.TrimSpace(s)
	s = strings.NewReplacer("-", "", "_", "").Replace(s)
	return strings.ToLower(s)
}

// refusal is the 400 of a body that strictjson refused as a request of
// the kind what names ("chat completion request").
func refusal(what string, err error) *middleware.Error {
	var se *strictjson.Error
	if errors.As(err, &se) {
		return badRequest(se.Name, "the body is not a valid %s: %s", what, se.Reason)
	}
	return badRequest("", "the body is not a valid %s: %v", what, err)
}

// refuse answers e, or, with Options.PassUnreadable, hands the request to
// Next with its body put back whole (head is what was read of it). A body
// that did not arrive in time is refused either way.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, head []byte, e *middleware.Error, d *door) {
	if s.opts.PassUnreadable && s.opts.Next != nil && !errors.Is(e, errBodyTimeout) {
		r.Body = &rejoined{Reader: io.MultiReader(bytes.NewReader(head), r.Body), Closer: r.Body}
		w.Header().Del("Connection")
		s.opts.Next.ServeHTTP(w, r)
		return
	}
	s.logFailure(d, "", e)
	s.refuseOwn(w, e, d.errors)
}

// refuseOwn answers a body the adapter would not read with its status,
// in sh's shape: 413, 408 or 400.
func (s *Server) refuseOwn(w http.ResponseWriter, e *middleware.Error, sh errorShape) {
	switch {
	case errors.Is(e, errBodyTooLarge):
		sh.write(w, http.StatusRequestEntityTooLarge, e)
	case errors.Is(e, errBodyTimeout):
		sh.write(w, http.StatusRequestTimeout, e)
	default:
		sh.write(w, 0, e)
	}
}

// passOn hands r to Next with the body the adapter read, unchanged.
func (s *Server) passOn(w http.ResponseWriter, r *http.Request, body []byte) {
	r.Body = &rejoined{Reader: bytes.NewReader(body), Closer: r.Body}
	s.opts.Next.ServeHTTP(w, r)
}

// rejoined is a request body put back together after the adapter read it.
type rejoined struct {
	io.Reader
	io.Closer
}

// guarded serves a path of guardedPaths: a body that names a sandboxed
// assistant is refused (that assistant answers on chat completions only),
// every other one reaches Next as it came.
func (s *Server) guarded(w http.ResponseWriter, r *http.Request) {
	if s.opts.Next == nil {
		s.noRoute(w, r)
		return
	}
	if s.opts.Catalog == nil || r.Body == nil || r.Body == http.NoBody {
		s.opts.Next.ServeHTTP(w, r)
		return
	}
	body, e := s.readOnce(w, r)
	if e != nil {
		s.refuse(w, r, body, e, guardedDoor)
		return
	}
	v, obj, e := s.classify(r.Context(), body, guardedDoor.what, guardedDoor.names)
	if e != nil {
		s.refuse(w, r, body, e, guardedDoor)
		return
	}
	if v == toAgentbox {
		model, _, _ := obj.String("model")
		e := middleware.Errorf(middleware.KindNotFound, nil,
			"the model %q is a sandboxed assistant; it answers on POST /v1/chat/completions, not on %s", clip(model), r.URL.Path)
		e.Param = "model"
		s.logFailure(guardedDoor, "", e)
		writeError(w, e)
		return
	}
	s.passOn(w, r, body)
}

// checkHeaders refuses routing headers sent twice or under a look-alike
// name.
func checkHeaders(h http.Header) *middleware.Error {
	for name, vals := range h {
		for _, want := range routingHeaders {
			switch {
			case name == want && len(vals) > 1:
				return badRequest(want, "the %s header is sent %d times; send it once", want, len(vals))
			case name != want && looseName(name) == looseName(want):
				return badRequest(want, "the header %q is not %s; send %s, spelled exactly, once", clip(name), want, want)
			}
		}
	}
	return nil
}

// clip shortens a client's string for an error message.
func clip(s string) string {
	if len(s) <= maxModelLen {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", strings.ToValidUTF8(s[:64], ""), len(s))
}
