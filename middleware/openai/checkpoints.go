package openai

import (
	"net/http"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/strictjson"
	"github.com/agentbox/agentbox/middleware"
)

// The checkpoint API (issue "the workspace follows the conversation"),
// when Options.Checkpoints is set, for the user's chats and their client
// sandboxes:
//
//	GET  /v1/chats/{chat}/checkpoints                         -> {"object": "list", "data": [checkpoint...], "current"}
//	POST /v1/chats/{chat}/checkpoints/{checkpoint}/restore    -> {"object": "checkpoint.restored", ...}
//	POST /v1/chats/{chat}/fork             {"chat", "checkpoint"} -> 201 checkpoint (the new chat's first)
//	GET  /v1/sandboxes/{id}/checkpoints                       -> as for a chat
//	POST /v1/sandboxes/{id}/checkpoints/{checkpoint}/restore  -> as for a chat
//	POST /v1/sandboxes/{id}/fork  {"checkpoint", "count", "id", "ttl_seconds", "tags", "prewarm"} -> 201 {"object": "list", "data": [sandbox...]}
//
// A fork without "checkpoint" starts from the newest one. The user is the
// one of the sandbox API (sandboxUser); another user's chat has no
// checkpoints and another user's sandbox is 404.

// checkpointObject is a checkpoint on the wire.
type checkpointObject struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	Parent    string `json:"parent,omitempty"`
	Label     string `json:"label,omitempty"`
	Turn      int    `json:"turn"`
	Chat      string `json:"chat,omitempty"`
	Answered  bool   `json:"answered"`
	CreatedAt int64  `json:"created_at"`
	Files     int    `json:"files"`
	Bytes     int64  `json:"bytes"`
	Changed   int    `json:"files_changed"`
	NewBytes  int64  `json:"new_bytes"`
	Skipped   int    `json:"skipped"`
	Current   bool   `json:"current"`
}

func checkpointOf(c middleware.Checkpoint, head string) checkpointObject {
	return checkpointObject{ID: c.ID, Object: "checkpoint", Parent: c.Parent, Label: c.Label, Turn: c.Turn, Chat: c.Chat,
		Answered: c.Answered, CreatedAt: c.Created.Unix(), Files: c.Files, Bytes: c.Bytes, Changed: c.Changed,
		NewBytes: c.NewBytes, Skipped: c.Skipped, Current: c.ID == head}
}

// forkChatFields and forkSandboxFields are the members of the fork
// bodies.
var (
	forkChatFields    = []string{"chat", "checkpoint"}
	forkSandboxFields = []string{"checkpoint", "count", "id", "ttl_seconds", "tags", "prewarm"}
)

// forkBody is the body of POST .../fork; Chat is a chat's, the rest a
// sandbox's (createSandbox's members but the model, which is the forked
// sandbox's).
type forkBody struct {
	Chat       string            `json:"chat"`
	Checkpoint string            `json:"checkpoint"`
	Count      *int              `json:"count"`
	ID         string            `json:"id"`
	TTLSeconds *float64          `json:"ttl_seconds"`
	Tags       map[string]string `json:"tags"`
	Prewarm    bool              `json:"prewarm"`
}

// checkpointUser is the request's user for the checkpoint API; false when
// the request is answered already.
func (s *Server) checkpointUser(w http.ResponseWriter, r *http.Request) (string, bool) {
	if s.opts.Checkpoints == nil {
		s.noRoute(w, r)
		return "", false
	}
	return s.apiUser(w, r)
}

// chatCheckpoints serves /v1/chats/{chat}/checkpoints and its restore.
func (s *Server) chatCheckpoints(w http.ResponseWriter, r *http.Request) {
	s.checkpointsOf(w, r, r.PathValue("chat"), "")
}

// sandboxCheckpoints serves /v1/sandboxes/{id}/checkpoints and its
// restore.
func (s *Server) sandboxCheckpoints(w http.ResponseWriter, r *http.Request) {
	if s.opts.Sandboxes == nil {
		s.noRoute(w, r)
		return
	}
	s.checkpointsOf(w, r, "", r.PathValue("id"))
}

// checkpointsOf lists or restores the checkpoints of a chat, or of a
// client sandbox when sandbox is set.
func (s *Server) checkpointsOf(w http.ResponseWriter, r *http.Request, chat, sandbox string) {
	user, ok := s.checkpointUser(w, r)
	if !ok {
		return
	}
	if id := r.PathValue("checkpoint"); id != "" {
		if r.Method != http.MethodPost {
			methodNotAllowed(w, r, http.MethodPost, openaiErrors{})
			return
		}
		var none struct{}
		if !s.optionalBody(w, r, "restore request", "; send no body, or {}", nil, &none) {
			return
		}
		res, err := s.opts.Checkpoints.RestoreCheckpoint(r.Context(), user, chat, sandbox, id)
		if err != nil {
			s.writeSandboxError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "checkpoint.restored",
			"files_written": res.Written, "files_removed": res.Removed, "bytes_written": res.Bytes})
		return
	}
	if r.Method != http.MethodGet {
		methodNotAllowed(w, r, http.MethodGet, openaiErrors{})
		return
	}
	list, err := s.opts.Checkpoints.Checkpoints(r.Context(), user, chat, sandbox)
	if err != nil {
		s.writeSandboxError(w, err)
		return
	}
	data := make([]checkpointObject, len(list.Checkpoints))
	for i, c := range list.Checkpoints {
		data[i] = checkpointOf(c, list.Head)
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "current": list.Head})
}

// optionalBody reads into v a body that may be absent, strictly, with
// members names (none: only {}); a body that is not such an object is
// refused with hint appended. False when the request is answered already.
func (s *Server) optionalBody(w http.ResponseWriter, r *http.Request, what, hint string, names []string, v any) bool {
	defer func() { _ = r.Body.Close() }()
	body, e := s.readOnce(w, r)
	if e != nil {
		s.refuseOwn(w, e, openaiErrors{})
		return false
	}
	if len(body) == 0 {
		return true
	}
	if err := strictjson.Unmarshal(body, v, strictjson.Options{Names: names}); err != nil {
		e := refusal(what, err)
		e.Message += hint
		writeError(w, e)
		return false
	}
	return true
}

// readFork answers the preamble of a fork: the user, the method, and the
// body, whose members are names; false when the request is answered
// already.
func (s *Server) readFork(w http.ResponseWriter, r *http.Request, names []string) (string, forkBody, bool) {
	var f forkBody
	user, ok := s.checkpointUser(w, r)
	if !ok {
		return "", f, false
	}
	if r.Method != http.MethodPost {
		methodNotAllowed(w, r, http.MethodPost, openaiErrors{})
		return "", f, false
	}
	hint := `; send a JSON object with any of "` + strings.Join(names, `", "`) + `"`
	if !s.optionalBody(w, r, "fork request", hint, names, &f) {
		return "", f, false
	}
	return user, f, true
}

// forkChat serves POST /v1/chats/{chat}/fork.
func (s *Server) forkChat(w http.ResponseWriter, r *http.Request) {
	user, f, ok := s.readFork(w, r, forkChatFields)
	if !ok {
		return
	}
	if f.Chat == "" {
		writeError(w, badRequest("chat", `chat is missing; name the new chat the fork makes, {"chat": "<id>"}`))
		return
	}
	info, err := s.opts.Checkpoints.ForkChat(r.Context(), user, r.PathValue("chat"), f.Checkpoint, f.Chat)
	if err != nil {
		s.writeSandboxError(w, err)
		return
	}
	c := checkpointOf(middleware.Checkpoint{CheckpointInfo: info}, info.ID)
	c.Chat = f.Chat
	writeJSON(w, http.StatusCreated, c)
}

// forkSandbox serves POST /v1/sandboxes/{id}/fork.
func (s *Server) forkSandbox(w http.ResponseWriter, r *http.Request) {
	if s.opts.Sandboxes == nil {
		s.noRoute(w, r)
		return
	}
	user, f, ok := s.readFork(w, r, forkSandboxFields)
	if !ok {
		return
	}
	count := 1
	if f.Count != nil {
		count = *f.Count
	}
	ttl, e := sandboxTTL(f.TTLSeconds)
	if e != nil {
		writeError(w, e)
		return
	}
	made, err := s.opts.Checkpoints.ForkSandbox(r.Context(), user, r.PathValue("id"), f.Checkpoint, count,
		middleware.SandboxCreate{ID: f.ID, TTL: ttl, Tags: f.Tags, Prewarm: f.Prewarm})
	if err != nil {
		s.writeSandboxError(w, err)
		return
	}
	data := make([]sandboxObject, len(made))
	for i, sb := range made {
		data[i] = sandboxOf(sb)
	}
	writeJSON(w, http.StatusCreated, map[string]any{"object": "list", "data": data})
}

// sandboxTTL is the duration of a body's ttl_seconds (0 when absent: the
// default), or a refusal of a value out of range.
func sandboxTTL(sec *float64) (time.Duration, *middleware.Error) {
	if sec == nil {
		return 0, nil
	}
	if *sec <= 0 || *sec > float64(middleware.MaxSandboxTTL/time.Second) {
		return 0, badRequest("ttl_seconds", "ttl_seconds %v is out of range; use %v to %v seconds", *sec,
			middleware.MinSandboxTTL.Seconds(), middleware.MaxSandboxTTL.Seconds())
	}
	return time.Duration(*sec * float64(time.Second)), nil
}
