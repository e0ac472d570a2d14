package openai

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"

	"github.com/tidwall/gjson"

	"github.com/agentbox/agentbox/middleware"
)

// Middleware mounts agentbox in front of a gateway's own http.Handler:
// chat completions for the catalog's sandboxed assistants are answered by
// opts.Handler; every other request, chat completions for any other model
// included, reaches next with its method, headers and body as the client
// sent them. GET /v1/models lists the catalog's assistants and next's
// models together. opts.Next is set to next.
//
//	mux.Handle("/", openai.Middleware(openai.Options{Handler: orch.Handler(), Catalog: cat})(gatewayHandler))
func Middleware(opts Options) func(next http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		opts.Next = next
		s, err := New(opts)
		if err != nil {
			// New fails only on a nil Handler: a wiring bug the first
			// request would hit anyway; say so on every request.
			return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				writeError(w, middleware.Errorf(middleware.KindConfig, err, "the gateway's agentbox middleware is not wired: %v", err))
			})
		}
		return s
	}
}

// nextModels asks next for its model list (GET /v1/models with the
// client's headers) and returns its entries as they are, or nil when next
// has none to give.
func (s *Server) nextModels(ctx context.Context, r *http.Request) []json.RawMessage {
	req := r.Clone(ctx)
	req.URL.Path = "/v1/models"
	rec := httptest.NewRecorder()
	s.opts.Next.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		s.log.Debug("the next handler's model list is left out", "status", rec.Code)
		return nil
	}
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
		s.log.Warn("the next handler's model list is not OpenAI's list shape; it is left out", "error", err)
		return nil
	}
	return list.Data
}

// mergeModels appends to ours next's entries whose ids ours do not have.
func mergeModels(ours []model, theirs []json.RawMessage) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(ours)+len(theirs))
	seen := make(map[string]bool, len(ours))
	for _, m := range ours {
		b, _ := json.Marshal(m)
		out = append(out, b)
		seen[m.ID] = true
	}
	for _, raw := range theirs {
		id := gjson.GetBytes(raw, "id").String()
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, raw)
	}
	return out
}
