package scriptedresponses

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/scriptbook"
)

// Script answers a request when the queue of turns is empty.
type Script func(req *Request) Turn

// maxBody caps a request body (the CLI sends whole conversations).
const maxBody = 64 << 20

// Server is the scripted Responses API. Serve it with Start or mount it as
// an http.Handler.
type Server struct {
	// URL is the OpenAI base URL once Start ran ("http://127.0.0.1:port/v1").
	URL string

	ts   *httptest.Server
	done chan struct{}
	once sync.Once

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

// New returns a Server that is not listening.
func New(opts ...Option) *Server {
	s := &Server{done: make(chan struct{})}
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

// Close releases stalled answers and stops the listener, if any. It is safe
// to call more than once.
func (s *Server) Close() {
	s.once.Do(func() { close(s.done) })
	if s.ts != nil {
		s.ts.Close()
	}
}

// ResponseRequests returns the POST .../responses requests received so far.
func (s *Server) ResponseRequests() []*Request {
	var out []*Request
	for _, r := range s.Requests() {
		if isResponses(r.Method, r.Path) {
			out = append(out, r)
		}
	}
	return out
}

// isResponses reports whether a request is one this server answers.
func isResponses(method, path string) bool {
	return method == http.MethodPost && (path == "/responses" || path == "/v1/responses")
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
	if !isResponses(r.Method, r.URL.Path) {
		writeError(w, &APIError{Status: http.StatusNotFound, Message: fmt.Sprintf("scriptedresponses: no route for %s %s", r.Method, r.URL.Path)})
		return
	}
	if err := json.Unmarshal(rec.Raw, &req.Body); err != nil {
		writeError(w, &APIError{Status: http.StatusBadRequest, Message: "body is not valid JSON: " + err.Error()})
		return
	}
	t := s.next(req)
	if t.Error != nil {
		writeError(w, t.Error)
		return
	}
	a := s.answer(req, t)
	if !req.Body.Stream {
		scriptbook.WriteJSON(w, http.StatusOK, a.response("completed", a.output, a.usage()))
		return
	}
	a.stream(w, r)
}

// next takes the next queued turn, or asks the script.
func (s *Server) next(req *Request) Turn {
	if t, ok := s.Next(req); ok {
		return t
	}
	return Fail(&APIError{Status: http.StatusInternalServerError,
		Message: fmt.Sprintf("scriptedresponses: no scripted turn left for request %d; enqueue more turns or set a script", req.Seq)})
}

// answer is one turn being answered.
type answer struct {
	s       *Server
	req     *Request
	t       Turn
	id      string
	created int64
	// output are the complete output items, in order.
	output []map[string]any
	seq    int
}

// answer builds the output items of t for req.
func (s *Server) answer(req *Request, t Turn) *answer {
	a := &answer{s: s, req: req, t: t, id: fmt.Sprintf("resp_scripted_%06d", req.Seq), created: time.Now().Unix()}
	if t.Reasoning != "" {
		a.output = append(a.output, map[string]any{"type": "reasoning", "id": a.itemID("rs", 0),
			"summary": []any{map[string]any{"type": "summary_text", "text": t.Reasoning}}})
	}
	if t.Text != "" {
		a.output = append(a.output, map[string]any{"type": "message", "id": a.itemID("msg", 0), "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": t.Text, "annotations": []any{}, "logprobs": []any{}}}})
	}
	for i, c := range t.Calls {
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("call_%d_%d", req.Seq, i)
		}
		if c.Search {
			a.output = append(a.output, map[string]any{"type": "tool_search_call", "id": a.itemID("ts", i), "status": "completed",
				"call_id": id, "execution": "client", "arguments": json.RawMessage(c.Arguments)})
			continue
		}
		if c.Custom {
			a.output = append(a.output, map[string]any{"type": "custom_tool_call", "id": a.itemID("ctc", i), "status": "completed",
				"call_id": id, "name": c.Name, "input": c.Arguments})
			continue
		}
		call := map[string]any{"type": "function_call", "id": a.itemID("fc", i), "status": "completed",
			"call_id": id, "name": c.Name, "arguments": c.Arguments}
		if c.Namespace != "" {
			call["namespace"] = c.Namespace
		}
		a.output = append(a.output, call)
	}
	return a
}

// itemID is an output item's id.
func (a *answer) itemID(prefix string, i int) string {
	return fmt.Sprintf("%s_scripted_%06d_%d", prefix, a.req.Seq, i)
}

// usage is the turn's usage object.
func (a *answer) usage() map[string]any {
	u := Usage{InputTokens: int64(max(1, len(a.req.Raw)/4)), OutputTokens: int64(max(1, (len(a.t.Text)+len(a.t.Reasoning))/4))}
	for _, c := range a.t.Calls {
		u.OutputTokens += int64(len(c.Arguments) / 4)
	}
	if a.t.Usage != nil {
		u = *a.t.Usage
	}
	return map[string]any{
		"input_tokens": u.InputTokens, "input_tokens_details": map[string]int64{"cached_tokens": u.CachedTokens},
		"output_tokens": u.OutputTokens, "output_tokens_details": map[string]int64{"reasoning_tokens": u.ReasoningTokens},
		"total_tokens": u.InputTokens + u.OutputTokens,
	}
}

// response is the response object with status, output and usage.
func (a *answer) response(status string, output []map[string]any, usage any) map[string]any {
	if output == nil {
		output = []map[string]any{}
	}
	return map[string]any{"id": a.id, "object": "response", "created_at": a.created, "status": status,
		"model": a.req.Body.Model, "output": output, "usage": usage, "error": nil,
		"parallel_tool_calls": true, "tool_choice": "auto", "tools": []any{}}
}

// errStopped ends a stream that the turn cuts, fails or stalls.
type errStopped struct{}

// stream writes the answer as server-sent events, in the API's order.
func (a *answer) stream(w http.ResponseWriter, r *http.Request) {
	f, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(typ string, v map[string]any) {
		if a.t.Delay > 0 {
			time.Sleep(a.t.Delay)
		}
		v["type"] = typ
		v["sequence_number"] = a.seq
		a.seq++
		b, _ := json.Marshal(v)
		_, _ = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b)
		if f != nil {
			f.Flush()
		}
	}
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(errStopped); !ok {
				panic(v)
			}
		}
	}()
	deltas := 0
	// delta sends one content delta and stops the stream after the first
	// when the turn says so.
	delta := func(typ string, v map[string]any) {
		send(typ, v)
		deltas++
		if deltas > 1 {
			return
		}
		switch {
		case a.t.Failed != nil:
			failed := a.response("failed", nil, nil)
			failed["error"] = map[string]any{"code": a.t.Failed.Object()["code"], "message": a.t.Failed.Message}
			send("response.failed", map[string]any{"response": failed})
			panic(errStopped{})
		case a.t.Cut:
			panic(errStopped{})
		}
	}
	send("response.created", map[string]any{"response": a.response("in_progress", nil, nil)})
	if a.t.Stall {
		select {
		case <-r.Context().Done():
		case <-a.s.done:
		}
		return
	}
	send("response.in_progress", map[string]any{"response": a.response("in_progress", nil, nil)})
	for i, it := range a.output {
		id := it["id"]
		switch it["type"] {
		case "reasoning":
			send("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{"type": "reasoning", "id": id, "summary": []any{}}})
			send("response.reasoning_summary_part.added", map[string]any{"item_id": id, "output_index": i, "summary_index": 0,
				"part": map[string]any{"type": "summary_text", "text": ""}})
			for _, p := range scriptbook.Split(a.t.Reasoning, a.t.Pieces) {
				delta("response.reasoning_summary_text.delta", map[string]any{"item_id": id, "output_index": i, "summary_index": 0, "delta": p})
			}
			send("response.reasoning_summary_text.done", map[string]any{"item_id": id, "output_index": i, "summary_index": 0, "text": a.t.Reasoning})
			send("response.reasoning_summary_part.done", map[string]any{"item_id": id, "output_index": i, "summary_index": 0,
				"part": map[string]any{"type": "summary_text", "text": a.t.Reasoning}})
		case "message":
			send("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{"type": "message", "id": id,
				"role": "assistant", "status": "in_progress", "content": []any{}}})
			send("response.content_part.added", map[string]any{"item_id": id, "output_index": i, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
			for _, p := range scriptbook.Split(a.t.Text, a.t.Pieces) {
				delta("response.output_text.delta", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "delta": p, "logprobs": []any{}})
			}
			send("response.output_text.done", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "text": a.t.Text, "logprobs": []any{}})
			send("response.content_part.done", map[string]any{"item_id": id, "output_index": i, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": a.t.Text, "annotations": []any{}}})
		case "tool_search_call":
			send("response.output_item.added", map[string]any{"output_index": i, "item": it})
		case "function_call", "custom_tool_call":
			// A function call's arguments and a custom call's input
			// stream alike, under their own event names.
			field, events := "arguments", "response.function_call_arguments"
			if it["type"] == "custom_tool_call" {
				field, events = "input", "response.custom_tool_call_input"
			}
			added := maps.Clone(it)
			added[field], added["status"] = "", "in_progress"
			send("response.output_item.added", map[string]any{"output_index": i, "item": added})
			whole, _ := it[field].(string)
			for _, p := range scriptbook.Split(whole, a.t.Pieces) {
				delta(events+".delta", map[string]any{"item_id": id, "output_index": i, "delta": p})
			}
			send(events+".done", map[string]any{"item_id": id, "output_index": i, field: whole})
		}
		send("response.output_item.done", map[string]any{"output_index": i, "item": it})
	}
	send("response.completed", map[string]any{"response": a.response("completed", a.output, a.usage())})
}

// writeError answers e in OpenAI's error shape.
func writeError(w http.ResponseWriter, e *APIError) {
	if e.RetryAfter != "" {
		w.Header().Set("Retry-After", e.RetryAfter)
	}
	scriptbook.WriteJSON(w, e.Status, map[string]any{"error": e.Object()})
}
