package openai

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/strictjson"
	"github.com/agentbox/agentbox/middleware"
)

// HeaderSandbox names the client sandbox a chat completion runs in (the
// body's "sandbox" field does the same).
const HeaderSandbox = "X-Agentbox-Sandbox"

// The client sandbox API (seed 004), when Options.Sandboxes is set:
//
//	POST   /v1/sandboxes                {"id", "model", "ttl_seconds", "tags", "prewarm"} -> 201 sandbox
//	GET    /v1/sandboxes[?tag=key=value] -> {"object": "list", "data": [sandbox...]}
//	GET    /v1/sandboxes/{id}           -> sandbox
//	POST   /v1/sandboxes/{id}/heartbeat -> sandbox (its ttl restarts)
//	DELETE /v1/sandboxes/{id}           -> {"id", "object": "sandbox.deleted", "deleted": true}
//
// The user is the authenticated one (Options.Authenticate) or the
// X-Agentbox-User header; a sandbox of another user is 404.

// sandboxObject is a sandbox on the wire.
type sandboxObject struct {
	ID         string            `json:"id"`
	Object     string            `json:"object"`
	Model      string            `json:"model"`
	Tags       map[string]string `json:"tags"`
	CreatedAt  int64             `json:"created_at"`
	ExpiresAt  int64             `json:"expires_at"`
	TTLSeconds int64             `json:"ttl_seconds"`
	State      string            `json:"state"`
}

func sandboxOf(sb middleware.ClientSandbox) sandboxObject {
	tags := sb.Tags
	if tags == nil {
		tags = map[string]string{}
	}
	return sandboxObject{ID: sb.ID, Object: "sandbox", Model: sb.Assistant, Tags: tags, CreatedAt: sb.Created.Unix(),
		ExpiresAt: sb.Expires.Unix(), TTLSeconds: int64(sb.TTL / time.Second), State: sb.State}
}

// createFields are the members of createSandbox.
var createFields = []string{"id", "model", "ttl_seconds", "tags", "prewarm"}

// createSandbox is the body of POST /v1/sandboxes.
type createSandbox struct {
	ID         string            `json:"id"`
	Model      string            `json:"model"`
	TTLSeconds *float64          `json:"ttl_seconds"`
	Tags       map[string]string `json:"tags"`
	Prewarm    bool              `json:"prewarm"`
}

// sandboxUser is the request's user for the sandbox API; false when the
// request is answered already (no sandbox API: noRoute; no valid user).
func (s *Server) sandboxUser(w http.ResponseWriter, r *http.Request) (string, bool) {
	if s.opts.Sandboxes == nil {
		s.noRoute(w, r)
		return "", false
	}
	if e := checkHeaders(r.Header); e != nil {
		writeError(w, e)
		return "", false
	}
	user := r.Header.Get(HeaderUser)
	if s.opts.Authenticate != nil {
		u, err := s.opts.Authenticate(r)
		if err != nil {
			openaiErrors{}.write(w, http.StatusUnauthorized, unauthorized())
			return "", false
		}
		user = u
	}
	if user == "" {
		writeError(w, badRequest(HeaderUser, "the sandbox API needs the user id; send it in the %s header", HeaderUser))
		return "", false
	}
	if err := executor.ValidateID("user", user); err != nil {
		writeError(w, badRequest(HeaderUser, "%s: %s", HeaderUser, idProblem(err)))
		return "", false
	}
	return user, true
}

// sandboxes serves /v1/sandboxes.
func (s *Server) sandboxes(w http.ResponseWriter, r *http.Request) {
	user, ok := s.sandboxUser(w, r)
	if !ok {
		return
	}
	switch r.Method {
	case http.MethodGet:
		var filter []string
		for _, t := range r.URL.Query()["tag"] {
			k, v, ok := strings.Cut(t, "=")
			if !ok {
				writeError(w, badRequest("tag", "tag filter %q: use tag=key=value", t))
				return
			}
			filter = append(filter, k, v)
		}
		data := []sandboxObject{}
	next:
		for _, sb := range s.opts.Sandboxes.Sandboxes(user) {
			for i := 0; i < len(filter); i += 2 {
				if v, ok := sb.Tags[filter[i]]; !ok || v != filter[i+1] {
					continue next
				}
			}
			data = append(data, sandboxOf(sb))
		}
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
	case http.MethodPost:
		defer func() { _ = r.Body.Close() }()
		body, e := s.readOnce(w, r)
		if e != nil {
			s.refuseOwn(w, e, openaiErrors{})
			return
		}
		var c createSandbox
		if err := strictjson.Unmarshal(body, &c, strictjson.Options{Names: createFields}); err != nil {
			e := refusal("sandbox request", err)
			e.Message += `; send {"model": "<assistant>", "id", "ttl_seconds", "tags", "prewarm"}`
			writeError(w, e)
			return
		}
		if c.Model == "" {
			writeError(w, badRequest("model", "model is missing; name the sandboxed assistant the sandbox is for"))
			return
		}
		var ttl time.Duration
		if c.TTLSeconds != nil {
			if *c.TTLSeconds <= 0 || *c.TTLSeconds > float64(middleware.MaxSandboxTTL/time.Second) {
				writeError(w, badRequest("ttl_seconds", "ttl_seconds %v is out of range; use %v to %v seconds", *c.TTLSeconds,
					middleware.MinSandboxTTL.Seconds(), middleware.MaxSandboxTTL.Seconds()))
				return
			}
			ttl = time.Duration(*c.TTLSeconds * float64(time.Second))
		}
		sb, cerr := s.opts.Sandboxes.CreateSandbox(r.Context(), user, middleware.SandboxCreate{
			ID: c.ID, Assistant: c.Model, TTL: ttl, Tags: c.Tags, Prewarm: c.Prewarm})
		if cerr != nil {
			s.writeSandboxError(w, cerr)
			return
		}
		writeJSON(w, http.StatusCreated, sandboxOf(sb))
	default:
		methodNotAllowed(w, r, "GET, POST", openaiErrors{})
	}
}

// sandbox serves /v1/sandboxes/{id} and /v1/sandboxes/{id}/heartbeat.
func (s *Server) sandbox(w http.ResponseWriter, r *http.Request) {
	user, ok := s.sandboxUser(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if strings.HasSuffix(r.URL.Path, "/heartbeat") {
		if r.Method != http.MethodPost {
			methodNotAllowed(w, r, http.MethodPost, openaiErrors{})
			return
		}
		sb, err := s.opts.Sandboxes.HeartbeatSandbox(user, id)
		if err != nil {
			s.writeSandboxError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, sandboxOf(sb))
		return
	}
	switch r.Method {
	case http.MethodGet:
		sb, err := s.opts.Sandboxes.Sandbox(user, id)
		if err != nil {
			s.writeSandboxError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, sandboxOf(sb))
	case http.MethodDelete:
		if err := s.opts.Sandboxes.DeleteSandbox(r.Context(), user, id); err != nil {
			s.writeSandboxError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "sandbox.deleted", "deleted": true})
	default:
		methodNotAllowed(w, r, "GET, DELETE", openaiErrors{})
	}
}

// writeSandboxError answers a sandbox call's error.
func (s *Server) writeSandboxError(w http.ResponseWriter, err error) {
	var e *middleware.Error
	if !errors.As(err, &e) {
		e = middleware.Errorf(middleware.KindInternal, err, "the sandbox call failed; the gateway's log has the details")
	}
	if e.Kind != middleware.KindNotFound && e.Kind != middleware.KindBadRequest {
		s.log.Info("sandbox call failed", "kind", e.Kind, "error", e.Error())
	}
	writeError(w, e)
}

// writeJSON answers v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
