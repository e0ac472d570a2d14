package scriptedopenai

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/scriptbook"
)

// Script answers a request when the queue of turns is empty.
type Script func(req *Request) Turn

const maxBody = 64 << 20

// Server is the scripted provider. Serve it with Start or mount it as an
// http.Handler.
type Server struct {
	// URL is the OpenAI base URL once Start ran ("http://127.0.0.1:port/v1").
	URL string

	ts             *httptest.Server
	reasoningField string
	usageAlways    bool

	book
}

// book is the Server's queue, script and record of requests.
type book = scriptbook.Book[Turn, Request]

var _ http.Handler = (*Server)(nil)

// Option configures a Server.
type Option func(*Server)

// WithTurns enqueues turns.
func WithTurns(turns ...Turn) Option { return func(s *Server) { s.Enqueue(turns...) } }

// WithScript sets the Script consulted when the queue is empty.
func WithScript(fn Script) Option { return func(s *Server) { s.SetScript(fn) } }

// WithReasoningField names the field reasoning is sent in (default
// "reasoning_content", as DeepSeek and Qwen do; OpenRouter uses
// "reasoning").
func WithReasoningField(name string) Option { return func(s *Server) { s.reasoningField = name } }

// WithUsageAlways sends usage in the last chunk even when the request did
// not ask with stream_options.include_usage, as some providers do.
func WithUsageAlways() Option { return func(s *Server) { s.usageAlways = true } }

// New returns a Server that is not listening.
func New(opts ...Option) *Server {
	s := &Server{reasoningField: "reasoning_content"}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Start returns a Server listening on a loopback port.
func Start(opts ...Option) *Server {
	s := New(opts...)
	s.ts = httptest.NewServer(s)
	s.URL = s.ts.URL + "/v1"
	return s
}

// Close stops the listener, if any.
func (s *Server) Close() {
	if s.ts != nil {
		s.ts.Close()
	}
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec, err := scriptbook.Read(r, maxBody)
	if err != nil {
		writeError(w, &APIError{Status: http.StatusRequestEntityTooLarge, Message: err.Error()})
		return
	}
	req := &Request{Received: rec}
	s.Record(req, &req.Seq)
	raw := rec.Raw
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		writeError(w, &APIError{Status: http.StatusNotFound, Message: fmt.Sprintf("scriptedopenai: no route for %s %s", r.Method, r.URL.Path)})
		return
	}
	if err := json.Unmarshal(raw, &req.Body); err != nil {
		writeError(w, &APIError{Status: http.StatusBadRequest, Message: "body is not valid JSON: " + err.Error()})
		return
	}
	t := s.next(req)
	if t.Error != nil {
		writeError(w, t.Error)
		return
	}
	id := fmt.Sprintf("chatcmpl-scripted-%06d", req.Seq)
	u := usageOf(t, req)
	if !req.Body.Stream {
		scriptbook.WriteJSON(w, http.StatusOK, s.completion(id, req.Body.Model, t, u))
		return
	}
	s.stream(w, id, req, t, u)
}

// next takes the next queued turn, or asks the script.
func (s *Server) next(req *Request) Turn {
	if t, ok := s.Next(req); ok {
		return t
	}
	return Fail(&APIError{Status: http.StatusInternalServerError,
		Message: fmt.Sprintf("scriptedopenai: no scripted turn left for request %d; enqueue more turns or set a script", req.Seq)})
}

func usageOf(t Turn, req *Request) map[string]any {
	u := Usage{PromptTokens: int64(max(1, len(req.Raw)/4)), CompletionTokens: int64(max(1, (len(t.Text)+len(t.Reasoning))/4))}
	for _, c := range t.Calls {
		u.CompletionTokens += int64(len(c.Arguments) / 4)
	}
	if t.Usage != nil {
		u = *t.Usage
	}
	m := map[string]any{"prompt_tokens": u.PromptTokens, "completion_tokens": u.CompletionTokens,
		"total_tokens": u.PromptTokens + u.CompletionTokens}
	if u.CachedTokens > 0 {
		m["prompt_tokens_details"] = map[string]int64{"cached_tokens": u.CachedTokens}
	}
	return m
}

func finish(t Turn) string {
	switch {
	case t.FinishReason != "":
		return t.FinishReason
	case len(t.Calls) > 0:
		return "tool_calls"
	}
	return "stop"
}

func callID(c Call, seq, i int) string {
	if c.ID != "" {
		return c.ID
	}
	return fmt.Sprintf("call_%d_%d", seq, i)
}

func (s *Server) completion(id, model string, t Turn, u map[string]any) map[string]any {
	msg := map[string]any{"role": "assistant", "content": t.Text}
	if t.Text == "" && len(t.Calls) > 0 {
		msg["content"] = nil
	}
	if t.Reasoning != "" {
		msg[s.reasoningField] = t.Reasoning
	}
	if len(t.Calls) > 0 {
		var calls []map[string]any
		for i, c := range t.Calls {
			calls = append(calls, map[string]any{"id": callID(c, 0, i), "type": "function",
				"function": map[string]string{"name": c.Name, "arguments": c.Arguments}})
		}
		msg["tool_calls"] = calls
	}
	return map[string]any{"id": id, "object": "chat.completion", "created": time.Now().Unix(), "model": model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish(t), "logprobs": nil}},
		"usage":   u}
}

// stream writes t as chunks: role, reasoning, text, tool calls (each one's
// id and name, then its arguments in pieces), finish_reason, usage, [DONE].
func (s *Server) stream(w http.ResponseWriter, id string, req *Request, t Turn, u map[string]any) {
	f, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	created := time.Now().Unix()
	send := func(v any) {
		b, _ := json.Marshal(v)
		_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
		if f != nil {
			f.Flush()
		}
	}
	chunk := func(delta map[string]any, fin any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Body.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": fin, "logprobs": nil}}}
	}
	content := 0
	// after reports whether the stream must stop after a content chunk.
	after := func() bool {
		content++
		if content != 1 {
			return false
		}
		if t.MidStreamError != nil {
			send(t.MidStreamError.body())
			return true
		}
		return t.Cut
	}
	send(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	for _, p := range scriptbook.Split(t.Reasoning, t.Pieces) {
		send(chunk(map[string]any{s.reasoningField: p}, nil))
		if after() {
			return
		}
	}
	for _, p := range scriptbook.Split(t.Text, t.Pieces) {
		send(chunk(map[string]any{"content": p}, nil))
		if after() {
			return
		}
	}
	for i, c := range t.Calls {
		send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": callID(c, req.Seq, i), "type": "function",
			"function": map[string]string{"name": c.Name, "arguments": ""}}}}, nil))
		for _, p := range scriptbook.Split(c.Arguments, t.Pieces) {
			send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]string{"arguments": p}}}}, nil))
			if after() {
				return
			}
		}
	}
	send(chunk(map[string]any{}, finish(t)))
	if req.Body.StreamOptions.IncludeUsage || s.usageAlways {
		send(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Body.Model,
			"choices": []any{}, "usage": u})
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	if f != nil {
		f.Flush()
	}
}

func writeError(w http.ResponseWriter, e *APIError) {
	if e.RetryAfter != "" {
		w.Header().Set("Retry-After", e.RetryAfter)
	}
	scriptbook.WriteJSON(w, e.Status, e.body())
}
