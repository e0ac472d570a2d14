package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/middleware"
)

// Defaults of Options.
const (
	DefaultMaxBodyBytes = 8 << 20
	DefaultHeartbeat    = 15 * time.Second
	DefaultBodyTimeout  = 30 * time.Second
)

// Options configure a Server. Handler is required.
type Options struct {
	// Handler answers the chat completions: the gateway's chain with the
	// agentbox middleware in it.
	Handler middleware.Handler
	// Catalog lists the assistants for GET /v1/models (optional: without
	// it the list is empty).
	Catalog middleware.Catalog
	// MaxBodyBytes caps a request body (default DefaultMaxBodyBytes); a
	// larger body is answered with 413.
	MaxBodyBytes int64
	// BodyTimeout bounds the read of a request body from the end of its
	// headers (default DefaultBodyTimeout; negative: no bound), so that
	// clients sending their bodies a byte at a time cannot hold
	// connections and goroutines; a late body is answered with 408. The
	// http.Server's ReadHeaderTimeout bounds the headers; its ReadTimeout
	// must stay zero, since a run's stream lasts minutes.
	BodyTimeout time.Duration
	// Heartbeat is the idle time after which a stream gets an SSE comment
	// to keep proxies from closing it (default DefaultHeartbeat; negative
	// turns it off).
	Heartbeat time.Duration
	// Authenticate, when set, returns the user id of the request's
	// credentials (its Authorization header, say); that id is then the
	// request's user whatever the X-Agentbox-User header or the "user"
	// field say, and an error is answered with 401. Without it the adapter
	// trusts the header and the field, so it must sit behind a gateway
	// that authenticates the client and sets or strips them: the user id
	// selects the workspace.
	Authenticate func(r *http.Request) (userID string, err error)
	// Next, when set, is the gateway's own handler behind the adapter (see
	// Middleware): chat completions for anything but a sandboxed assistant
	// of Catalog, and every other path, reach it unchanged; GET /v1/models
	// lists its models after the catalog's. Without it, the adapter
	// answers everything itself and unknown paths get 404.
	//
	// The adapter reads a body it routes once and strictly (see
	// reading.go): a chat completion (or a completions, responses,
	// messages or embeddings request) whose body it cannot read as exactly
	// one meaning, or that is larger than MaxBodyBytes, is refused rather
	// than passed on, since Next might read it as a sandboxed assistant's.
	Next http.Handler
	// PassUnreadable hands the bodies that the strict reading refuses
	// (not strict JSON, duplicate or look-alike names, compressed, larger
	// than MaxBodyBytes) to Next unread instead of answering 400 or 413.
	// Set it only when Next refuses those bodies itself; a body that names
	// a sandboxed assistant is never passed on, and a late body is 408
	// either way.
	PassUnreadable bool
	// Environments, when set, adds each sandboxed assistant's environment
	// snapshot (executor.Environment: OS, tools, limits, network) to GET
	// /v1/models/{id} as "environment" (the Orchestrator is one).
	Environments middleware.EnvironmentSource
	// Sandboxes, when set, serves the client sandbox API under
	// /v1/sandboxes (see sandboxes.go; the Orchestrator is one) and lets
	// chat completions name a sandbox (X-Agentbox-Sandbox or "sandbox").
	// Without it those paths are 404 (or Next's) and a named sandbox is
	// refused.
	Sandboxes middleware.SandboxManager
	// Checkpoints, when set, serves the checkpoint API of the user's chats
	// (/v1/chats/{chat}/checkpoints, .../restore, /v1/chats/{chat}/fork)
	// and, with Sandboxes, of their client sandboxes (see checkpoints.go;
	// the Orchestrator is one). Without it those paths are 404 (or Next's).
	Checkpoints middleware.CheckpointManager
	// ResponseTTL is how long a response of POST /v1/responses created
	// with "store": true (the default) can be read back (GET
	// /v1/responses/{id}) and continued (previous_response_id): default
	// DefaultResponseTTL. Stored responses live in memory, so a restart
	// forgets them.
	ResponseTTL time.Duration
	// MaxResponsesPerUser bounds one user's stored responses (default
	// DefaultMaxResponsesPerUser); MaxResponseBytes bounds all of them
	// (default DefaultMaxResponseBytes). The oldest go first.
	MaxResponsesPerUser int
	MaxResponseBytes    int64
	// OwnedBy is the owned_by of the listed models (default "agentbox").
	OwnedBy string
	// Logger receives one line per failed request (default: discarded).
	Logger hclog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Server is the OpenAI-compatible HTTP adapter: an http.Handler serving
// POST /v1/chat/completions, GET /v1/models and GET /v1/models/{id}. It is
// safe for concurrent use.
type Server struct {
	opts  Options
	log   hclog.Logger
	mux   *http.ServeMux
	store *responseStore
}

var _ http.Handler = (*Server)(nil)

// New returns a Server.
func New(opts Options) (*Server, error) {
	if opts.Handler == nil {
		return nil, errors.New("openai: Options.Handler is nil; pass the gateway's handler chain")
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.BodyTimeout == 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.Heartbeat == 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.OwnedBy == "" {
		opts.OwnedBy = "agentbox"
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ResponseTTL <= 0 {
		opts.ResponseTTL = DefaultResponseTTL
	}
	if opts.MaxResponsesPerUser <= 0 {
		opts.MaxResponsesPerUser = DefaultMaxResponsesPerUser
	}
	if opts.MaxResponseBytes <= 0 {
		opts.MaxResponseBytes = DefaultMaxResponseBytes
	}
	s := &Server{opts: opts, log: opts.Logger, mux: http.NewServeMux(), store: newResponseStore(opts)}
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	s.mux.HandleFunc("/v1/chat/completions", s.chatCompletions)
	s.mux.HandleFunc("/v1/responses", s.responses)
	s.mux.HandleFunc("/v1/responses/{id}", s.storedResponseOf)
	s.mux.HandleFunc("/v1/messages", s.messages)
	s.mux.HandleFunc("/v1/models", s.models)
	s.mux.HandleFunc("/v1/models/{id}", s.models)
	s.mux.HandleFunc("/v1/sandboxes", s.sandboxes)
	s.mux.HandleFunc("/v1/sandboxes/{id}", s.sandbox)
	s.mux.HandleFunc("/v1/sandboxes/{id}/heartbeat", s.sandbox)
	s.mux.HandleFunc("/v1/sandboxes/{id}/checkpoints", s.sandboxCheckpoints)
	s.mux.HandleFunc("/v1/sandboxes/{id}/checkpoints/{checkpoint}/restore", s.sandboxCheckpoints)
	s.mux.HandleFunc("/v1/sandboxes/{id}/fork", s.forkSandbox)
	s.mux.HandleFunc("/v1/chats/{chat}/checkpoints", s.chatCheckpoints)
	s.mux.HandleFunc("/v1/chats/{chat}/checkpoints/{checkpoint}/restore", s.chatCheckpoints)
	s.mux.HandleFunc("/v1/chats/{chat}/fork", s.forkChat)
	for _, p := range guardedPaths {
		s.mux.HandleFunc(p, s.guarded)
	}
	s.mux.HandleFunc("/", s.noRoute)
	return s, nil
}

// noRoute passes a request for no route of the adapter to Next, or
// answers 404.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	if s.opts.Next != nil {
		if route := routeTwin(r.URL.Path); route != "" {
			e := &middleware.Error{Kind: middleware.KindNotFound, Message: "no route for " + r.Method + " " + clip(r.URL.EscapedPath()) +
				"; send the request to exactly " + route}
			d := doorOf(route)
			s.logFailure(d, "", e)
			d.errors.write(w, 0, e)
			return
		}
		s.opts.Next.ServeHTTP(w, r)
		return
	}
	routes := "POST /v1/chat/completions, /v1/responses and /v1/messages, GET /v1/models"
	if s.opts.Sandboxes != nil {
		routes += ", /v1/sandboxes"
	}
	if s.opts.Checkpoints != nil {
		routes += ", /v1/chats/{chat}/checkpoints"
	}
	writeError(w, &middleware.Error{Kind: middleware.KindNotFound, Message: "no route for " + r.Method + " " + r.URL.Path +
		"; this endpoint serves " + routes})
}

func (s *Server) now() time.Time { return s.opts.Now() }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// chatDoor is Chat Completions.
var chatDoor = &door{name: "chat completion", what: "chat completion request", names: knownFields, idPrefix: "chatcmpl-", idsField: userField, errors: openaiErrors{}}

// chatCompletions serves POST /v1/chat/completions: it reads the body
// once (reading.go), answers a sandboxed assistant's request, and passes
// any other one to Next.
func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	a := s.admit(w, r, chatDoor)
	if a == nil {
		return
	}
	req, derr := s.decodeChat(a.obj, r.Header, a.authUser)
	if derr != nil {
		s.refuseDecoded(w, chatDoor, a.id, derr)
		return
	}
	if req.Stream {
		s.serveStream(r.Context(), w, req, a.id)
		return
	}
	resp, e := s.run(r.Context(), chatDoor, a.id, req, func(executor.Event) error { return r.Context().Err() })
	if e != nil {
		writeError(w, e)
		return
	}
	out := completion{
		ID: a.id, Object: "chat.completion", Created: s.now().Unix(), Model: req.Model,
		Choices: []completionChoice{{Message: responseMessage{Role: "assistant", Content: resp.Content},
			FinishReason: finishReason(resp.FinishReason)}},
		Usage:    usageOf(resp.Usage),
		Agentbox: doneExtension(resp),
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// serveStream answers a streamed request.
func (s *Server) serveStream(ctx context.Context, w http.ResponseWriter, req *middleware.Request, id string) {
	st := s.newStream(w, id, req.Model)
	resp, e := s.run(ctx, chatDoor, id, req, st.emit)
	if e != nil {
		st.fail(e)
		return
	}
	st.finish(resp, req.StreamOptions.IncludeUsage)
}

// clientError classifies err and adds the adapter's hints to messages
// about the ids.
func clientError(err error, d *door) *middleware.Error {
	e := middleware.AsError(err)
	if e.Kind == middleware.KindNotFound && e.Param == "" {
		c := *e
		c.Param = "model"
		return &c
	}
	if e.Kind == middleware.KindBadRequest && (e.Param == "user" || e.Param == "chat") {
		c := *e
		c.Message += "; send the ids in the " + HeaderUser + " and " + HeaderChat + " headers or as " + d.idsField
		return &c
	}
	return e
}

// models serves GET /v1/models and GET /v1/models/{id}.
func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w, r, http.MethodGet, openaiErrors{})
		return
	}
	if s.opts.Authenticate != nil {
		if _, err := s.opts.Authenticate(r); err != nil {
			openaiErrors{}.write(w, http.StatusUnauthorized, unauthorized())
			return
		}
	}
	var list []*middleware.Assistant
	if s.opts.Catalog != nil {
		var err error
		if list, err = s.opts.Catalog.List(r.Context()); err != nil {
			writeError(w, middleware.Errorf(middleware.KindConfig, err, "the assistants cannot be listed; the gateway's log has the details"))
			return
		}
	}
	data := make([]model, 0, len(list))
	for _, a := range list {
		data = append(data, model{ID: a.ID, Object: "model", OwnedBy: s.opts.OwnedBy, Name: a.Name, Sandbox: a.Sandbox != nil})
	}
	id := r.PathValue("id")
	if id == "" {
		w.Header().Set("Content-Type", "application/json")
		if s.opts.Next != nil {
			_ = json.NewEncoder(w).Encode(mergedList{Object: "list", Data: mergeModels(data, s.nextModels(r.Context(), r))})
			return
		}
		_ = json.NewEncoder(w).Encode(modelList{Object: "list", Data: data})
		return
	}
	for i, m := range data {
		if m.ID == id {
			if s.opts.Environments != nil && list[i].Sandbox != nil {
				if env, err := s.opts.Environments.Environment(r.Context(), list[i]); err == nil {
					m.Environment = &env
				} else if !errors.Is(err, middleware.ErrNoEnvironment) {
					s.log.Info("no environment snapshot for the model", "model", id, "error", err)
				}
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(m)
			return
		}
	}
	if s.opts.Next != nil {
		s.opts.Next.ServeHTTP(w, r)
		return
	}
	e := middleware.Errorf(middleware.KindNotFound, nil, "the model %q does not exist; GET /v1/models lists the assistants", id)
	e.Param = "model"
	writeError(w, e)
}
