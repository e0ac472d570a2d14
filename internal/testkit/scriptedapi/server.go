package scriptedapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/internal/testkit/scriptbook"
)

// Script answers a request with a Turn; it is consulted when the queue of
// enqueued turns is empty.
type Script func(req *Request) Turn

// maxBody caps a request body (the CLI sends whole conversations; tens of
// MiB are plenty).
const maxBody = 64 << 20

// Server is the scripted API. Serve it with Start (loopback HTTP) or mount
// it as an http.Handler anywhere (a unix socket, a test mux).
type Server struct {
	// URL is the base URL once Start ran ("http://127.0.0.1:port").
	URL string

	log  hclog.Logger
	ts   *httptest.Server
	done chan struct{}
	once sync.Once
	// chat serves POST /v1/chat/completions when set (WithChatCompletions).
	chat http.Handler
	// responses serves POST /v1/responses when set (WithResponses).
	responses http.Handler

	book
	mu  sync.Mutex
	ids int
}

// book is the Server's queue, script and record of requests.
type book = scriptbook.Book[Turn, Request]

// interface guard
var _ http.Handler = (*Server)(nil)

// Option configures a Server.
type Option func(*Server)

// WithLogger logs every request and answer to l.
func WithLogger(l hclog.Logger) Option { return func(s *Server) { s.log = l } }

// WithScript sets the Script consulted when the queue is empty.
func WithScript(fn Script) Option { return func(s *Server) { s.SetScript(fn) } }

// WithChatCompletions serves POST /v1/chat/completions with h (for example
// an internal/scriptedopenai Server), as Anthropic serves its OpenAI SDK
// compatibility endpoint beside the Messages API. Those requests are h's
// to record, not this Server's.
func WithChatCompletions(h http.Handler) Option { return func(s *Server) { s.chat = h } }

// WithResponses serves POST /v1/responses with h (for example an
// internal/testkit/scriptedresponses Server), as OpenAI serves the
// Responses API beside Chat Completions on one host. Those requests are
// h's to record, not this Server's.
func WithResponses(h http.Handler) Option { return func(s *Server) { s.responses = h } }

// WithTurns enqueues turns.
func WithTurns(turns ...Turn) Option { return func(s *Server) { s.Enqueue(turns...) } }

// New returns a Server that is not listening; use it as an http.Handler.
func New(opts ...Option) *Server {
	s := &Server{log: hclog.NewNullLogger(), done: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Start returns a Server listening on a loopback port; Close stops it.
func Start(opts ...Option) *Server {
	s := New(opts...)
	s.ts = httptest.NewServer(s)
	s.URL = s.ts.URL
	return s
}

// Close releases stalled requests and stops the listener, if any. It is
// safe to call more than once.
func (s *Server) Close() {
	s.once.Do(func() { close(s.done) })
	if s.ts != nil {
		s.ts.Close()
	}
}

// MessageRequests returns the POST /v1/messages requests received so far.
func (s *Server) MessageRequests() []*Request {
	var out []*Request
	for _, r := range s.Requests() {
		if r.Method == http.MethodPost && r.Path == "/v1/messages" {
			out = append(out, r)
		}
	}
	return out
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.chat != nil && r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions" {
		s.chat.ServeHTTP(w, r)
		return
	}
	if s.responses != nil && r.Method == http.MethodPost && r.URL.Path == "/v1/responses" {
		s.responses.ServeHTTP(w, r)
		return
	}
	rec, err := scriptbook.Read(r, maxBody)
	if err != nil {
		writeError(w, &APIError{Status: http.StatusRequestEntityTooLarge, Message: err.Error()})
		return
	}
	req := &Request{Received: rec}
	s.Record(req, &req.Seq)
	raw := rec.Raw
	s.log.Debug("request", "seq", req.Seq, "method", r.Method, "path", r.URL.Path, "bytes", len(raw))

	switch {
	case r.Method == http.MethodHead || r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, "/v1/messages"):
		w.WriteHeader(http.StatusOK)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens":
		if err := json.Unmarshal(raw, &req.Body); err != nil {
			writeError(w, &APIError{Status: http.StatusBadRequest, Message: "body is not valid JSON: " + err.Error()})
			return
		}
		scriptbook.WriteJSON(w, http.StatusOK, map[string]int{"input_tokens": max(1, len(raw)/4)})
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		if err := json.Unmarshal(raw, &req.Body); err != nil {
			writeError(w, &APIError{Status: http.StatusBadRequest, Message: "body is not valid JSON: " + err.Error()})
			return
		}
		s.answer(w, r, req, s.next(req))
	default:
		writeError(w, &APIError{Status: http.StatusNotFound, Message: fmt.Sprintf("scriptedapi: no route for %s %s", r.Method, r.URL.Path)})
	}
}

// next takes the next queued turn, or asks the script.
func (s *Server) next(req *Request) Turn {
	if t, ok := s.Next(req); ok {
		return t
	}
	return Fail(&APIError{Status: http.StatusInternalServerError,
		Message: fmt.Sprintf("scriptedapi: no scripted turn left for request %d; enqueue more turns or set a script", req.Seq)})
}

// newID returns a fresh id with the given prefix.
func (s *Server) newID(prefix string) string {
	s.mu.Lock()
	s.ids++
	n := s.ids
	s.mu.Unlock()
	return fmt.Sprintf("%s_scripted_%06d", prefix, n)
}

// answer writes turn t as the response to req.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, req *Request, t Turn) {
	w.Header().Set("request-id", s.newID("req"))
	if t.Stall == StallBeforeHeaders {
		s.hold(r)
		return
	}
	if t.Error != nil {
		s.log.Debug("answer error", "seq", req.Seq, "status", t.Error.Status)
		writeError(w, t.Error)
		return
	}
	msg := s.message(req, t)
	if !req.Body.Stream {
		scriptbook.WriteJSON(w, http.StatusOK, msg)
		return
	}
	s.stream(w, r, msg, t)
}

// hold blocks until the client goes away or the server closes.
func (s *Server) hold(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.done:
	}
}

// message builds the complete (non-streaming) message of turn t.
func (s *Server) message(req *Request, t Turn) message {
	m := message{
		ID: s.newID("msg"), Type: "message", Role: "assistant", Model: req.Body.Model,
		Content: make([]outBlock, 0, len(t.Blocks)), StopReason: t.StopReason,
	}
	chars := 0
	for _, b := range t.Blocks {
		ob := outBlock{Type: b.Type}
		switch b.Type {
		case "text":
			ob.Text = &b.Text
		case "thinking":
			sig := b.Signature
			if sig == "" {
				sig = "c2lnbmF0dXJl" + strconv.Itoa(len(b.Text))
			}
			ob.Thinking, ob.Signature = &b.Text, &sig
		case "tool_use":
			ob.ID, ob.Name, ob.Input = b.ID, b.Name, b.Input
			if ob.ID == "" {
				ob.ID = s.newID("toolu")
			}
			if len(ob.Input) == 0 {
				ob.Input = json.RawMessage(`{}`)
			}
			if m.StopReason == "" {
				m.StopReason = "tool_use"
			}
		}
		chars += len(b.Text) + len(b.Input)
		m.Content = append(m.Content, ob)
	}
	if m.StopReason == "" {
		m.StopReason = "end_turn"
	}
	if t.Usage != nil {
		m.Usage = *t.Usage
	} else {
		m.Usage = Usage{InputTokens: 100, OutputTokens: int64(max(1, chars/4))}
	}
	return m
}

// message is the API's message object.
type message struct {
	ID           string     `json:"id"`
	Type         string     `json:"type"`
	Role         string     `json:"role"`
	Model        string     `json:"model"`
	Content      []outBlock `json:"content"`
	StopReason   string     `json:"stop_reason"`
	StopSequence *string    `json:"stop_sequence"`
	Usage        Usage      `json:"usage"`
}

// outBlock is a content block as the API sends it.
type outBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text,omitempty"`
	Thinking  *string         `json:"thinking,omitempty"`
	Signature *string         `json:"signature,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
}

// sse writes server-sent events, flushing each.
type sse struct {
	w     http.ResponseWriter
	f     http.Flusher
	delay time.Duration
	done  <-chan struct{}
	ctx   <-chan struct{}
	err   error
}

// event writes one event; after a failure (client gone) it does nothing.
func (e *sse) event(name string, data any) {
	if e.err != nil {
		return
	}
	if e.delay > 0 {
		select {
		case <-time.After(e.delay):
		case <-e.ctx:
		case <-e.done:
		}
	}
	b, err := json.Marshal(data)
	if err != nil {
		e.err = err
		return
	}
	if _, err := fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", name, b); err != nil {
		e.err = err
		return
	}
	e.f.Flush()
}

// stream writes msg as the API's event stream.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, msg message, t Turn) {
	f, ok := w.(http.Flusher)
	if !ok {
		writeError(w, &APIError{Status: http.StatusInternalServerError, Message: "scriptedapi: response writer cannot flush"})
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	e := &sse{w: w, f: f, delay: t.Delay, done: s.done, ctx: r.Context().Done()}

	start := msg
	start.Content = []outBlock{}
	start.StopReason = ""
	start.Usage.OutputTokens = 1
	e.event("message_start", map[string]any{"type": "message_start", "message": startMessage(start)})
	e.event("ping", map[string]string{"type": "ping"})
	if t.Stall == StallAfterStart {
		s.hold(r)
		return
	}
	for i, b := range msg.Content {
		if i == 1 && (t.MidStreamError != nil || t.Disconnect) {
			break
		}
		streamBlock(e, i, b)
	}
	if t.Disconnect {
		// Aborting the handler makes net/http drop the connection.
		panic(http.ErrAbortHandler)
	}
	if t.MidStreamError != nil {
		e.event("error", errorBody(t.MidStreamError))
		return
	}
	e.event("message_delta", map[string]any{
		"type":  "message_delta",
		"delta": map[string]any{"stop_reason": msg.StopReason, "stop_sequence": nil},
		"usage": map[string]int64{"output_tokens": msg.Usage.OutputTokens},
	})
	e.event("message_stop", map[string]string{"type": "message_stop"})
	if e.err != nil {
		s.log.Debug("stream ended early", "error", e.err)
	}
}

// startMessage is message_start's message: no stop_reason yet.
func startMessage(m message) map[string]any {
	return map[string]any{
		"id": m.ID, "type": "message", "role": "assistant", "model": m.Model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": m.Usage,
	}
}

// streamBlock writes one content block as start, deltas and stop.
func streamBlock(e *sse, i int, b outBlock) {
	switch b.Type {
	case "text":
		e.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
			"content_block": map[string]string{"type": "text", "text": ""}})
		for _, part := range split(*b.Text) {
			e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]string{"type": "text_delta", "text": part}})
		}
	case "thinking":
		e.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
			"content_block": map[string]string{"type": "thinking", "thinking": "", "signature": ""}})
		for _, part := range split(*b.Thinking) {
			e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]string{"type": "thinking_delta", "thinking": part}})
		}
		e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
			"delta": map[string]string{"type": "signature_delta", "signature": *b.Signature}})
	case "tool_use":
		e.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
			"content_block": map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}}})
		for _, part := range split(string(b.Input)) {
			e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]string{"type": "input_json_delta", "partial_json": part}})
		}
	}
	e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
}

// split cuts s into up to three pieces on byte boundaries that keep UTF-8
// characters whole, so clients see several deltas per block.
func split(s string) []string {
	if len(s) < 12 {
		return []string{s}
	}
	var parts []string
	step := len(s)/3 + 1
	for len(s) > 0 {
		n := min(step, len(s))
		for n < len(s) && !utf8Start(s[n]) {
			n++
		}
		parts = append(parts, s[:n])
		s = s[n:]
	}
	return parts
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// errorBody is the API's error JSON.
func errorBody(e *APIError) map[string]any {
	return map[string]any{"type": "error", "error": map[string]string{"type": e.errorType(), "message": e.Message}}
}

// writeError answers with the API's error JSON.
func writeError(w http.ResponseWriter, e *APIError) {
	if e.RetryAfter != "" {
		w.Header().Set("retry-after", e.RetryAfter)
	}
	scriptbook.WriteJSON(w, e.Status, errorBody(e))
}
