package openairesponses

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// usage is a call's token counts, the Responses API's way: input counts
// the cached and cache-written tokens too.
type usage struct {
	input, cached, cacheWrite, output, reasoning int64
}

// object is the usage object of a response. cache_creation_tokens is not
// OpenAI's: it keeps what an upstream reports as written to its cache, so
// that the model proxy meters it as such.
func (u usage) object() map[string]any {
	details := map[string]any{"cached_tokens": u.cached}
	if u.cacheWrite > 0 {
		details["cache_creation_tokens"] = u.cacheWrite
	}
	return map[string]any{"input_tokens": u.input, "input_tokens_details": details,
		"output_tokens": u.output, "output_tokens_details": map[string]any{"reasoning_tokens": u.reasoning},
		"total_tokens": u.input + u.output}
}

// writer builds a Responses API answer from an upstream's answer: as
// server-sent events in the API's order when w is set (text and reasoning
// stream as deltas; tool calls are whole items at the end, since a custom
// tool's input and a tool search's arguments are known only once the
// upstream's call is complete), and as the response object in any case.
type writer struct {
	w       io.Writer
	flush   func()
	names   map[string]callKind
	id      string
	model   string
	created int64
	seq     int
	err     error // the first write error

	output []map[string]any
	// The open message and reasoning items.
	msg, reason         map[string]any
	msgText, reasonText strings.Builder
	calls               []pendingCall
}

// pendingCall is an upstream tool call waiting for the end of the answer.
type pendingCall struct{ id, name, args string }

// newWriter returns a writer of a response to model; w nil builds the
// response object only.
func newWriter(w io.Writer, flush func(), model string, names map[string]callKind) *writer {
	return &writer{w: w, flush: flush, names: names, id: newID("resp_"), model: model, created: now().Unix()}
}

// now is the clock of created_at; tests fix it.
var now = time.Now

// newID returns an id with prefix for an item or response; tests replace
// it with a counter.
var newID = func(prefix string) string { return prefix + randomHex(12) }

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// event writes one server-sent event (nothing without a stream).
func (w *writer) event(typ string, v map[string]any) {
	if w.w == nil || w.err != nil {
		return
	}
	v["type"] = typ
	v["sequence_number"] = w.seq
	w.seq++
	b, err := json.Marshal(v)
	if err == nil {
		_, err = fmt.Fprintf(w.w, "event: %s\ndata: %s\n\n", typ, b)
	}
	if err != nil {
		w.err = err
		return
	}
	if w.flush != nil {
		w.flush()
	}
}

// response is the response object with its status.
func (w *writer) response(status string) map[string]any {
	out := w.output
	if out == nil {
		out = []map[string]any{}
	}
	return map[string]any{"id": w.id, "object": "response", "created_at": w.created, "status": status, "model": w.model,
		"output": out, "error": nil, "incomplete_details": nil, "usage": nil}
}

// start opens the stream.
func (w *writer) start() {
	w.event("response.created", map[string]any{"response": w.response("in_progress")})
	w.event("response.in_progress", map[string]any{"response": w.response("in_progress")})
}

// text adds a delta of the answer's text.
func (w *writer) text(delta string) {
	if delta == "" {
		return
	}
	w.closeReasoning()
	if w.msg == nil {
		w.msg = map[string]any{"type": "message", "id": newID("msg_"), "role": "assistant", "status": "in_progress", "content": []any{}}
		w.event("response.output_item.added", map[string]any{"output_index": len(w.output), "item": w.msg})
		w.event("response.content_part.added", map[string]any{"item_id": w.msg["id"], "output_index": len(w.output), "content_index": 0,
			"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
	}
	w.msgText.WriteString(delta)
	w.event("response.output_text.delta", map[string]any{"item_id": w.msg["id"], "output_index": len(w.output), "content_index": 0, "delta": delta, "logprobs": []any{}})
}

// reasoning adds a delta of the model's reasoning, as a reasoning item's
// summary.
func (w *writer) reasoning(delta string) {
	if delta == "" {
		return
	}
	w.closeMessage()
	if w.reason == nil {
		w.reason = map[string]any{"type": "reasoning", "id": newID("rs_"), "summary": []any{}}
		w.event("response.output_item.added", map[string]any{"output_index": len(w.output), "item": w.reason})
		w.event("response.reasoning_summary_part.added", map[string]any{"item_id": w.reason["id"], "output_index": len(w.output), "summary_index": 0,
			"part": map[string]any{"type": "summary_text", "text": ""}})
	}
	w.reasonText.WriteString(delta)
	w.event("response.reasoning_summary_text.delta", map[string]any{"item_id": w.reason["id"], "output_index": len(w.output), "summary_index": 0, "delta": delta})
}

// closeMessage ends the open message item.
func (w *writer) closeMessage() {
	if w.msg == nil {
		return
	}
	text, i := w.msgText.String(), len(w.output)
	part := map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
	w.event("response.output_text.done", map[string]any{"item_id": w.msg["id"], "output_index": i, "content_index": 0, "text": text, "logprobs": []any{}})
	w.event("response.content_part.done", map[string]any{"item_id": w.msg["id"], "output_index": i, "content_index": 0, "part": part})
	w.msg["status"], w.msg["content"] = "completed", []any{part}
	w.event("response.output_item.done", map[string]any{"output_index": i, "item": w.msg})
	w.output = append(w.output, w.msg)
	w.msg = nil
	w.msgText.Reset()
}

// closeReasoning ends the open reasoning item.
func (w *writer) closeReasoning() {
	if w.reason == nil {
		return
	}
	text, i := w.reasonText.String(), len(w.output)
	part := map[string]any{"type": "summary_text", "text": text}
	w.event("response.reasoning_summary_text.done", map[string]any{"item_id": w.reason["id"], "output_index": i, "summary_index": 0, "text": text})
	w.event("response.reasoning_summary_part.done", map[string]any{"item_id": w.reason["id"], "output_index": i, "summary_index": 0, "part": part})
	w.reason["summary"] = []any{part}
	w.event("response.output_item.done", map[string]any{"output_index": i, "item": w.reason})
	w.output = append(w.output, w.reason)
	w.reason = nil
	w.reasonText.Reset()
}

// call records an upstream tool call; args is its JSON arguments.
func (w *writer) call(id, name, args string) {
	w.calls = append(w.calls, pendingCall{id: id, name: name, args: orEmptyObject(args)})
}

// item is the Responses item a pending call stands for: a function call
// (in its namespace), a custom tool call with the function's input, or a
// tool search call with its arguments.
func (w *writer) item(c pendingCall) map[string]any {
	k, ok := w.names[c.name]
	if !ok {
		// A tool the request did not offer: the CLI answers that it does
		// not know it.
		k = callKind{item: "function_call", name: c.name}
	}
	id := c.id
	if id == "" {
		id = newID("call_")
	}
	switch k.item {
	case "custom_tool_call":
		var in struct {
			Input string `json:"input"`
		}
		if err := json.Unmarshal([]byte(c.args), &in); err != nil {
			in.Input = c.args
		}
		return map[string]any{"type": "custom_tool_call", "id": newID("ctc_"), "status": "completed", "call_id": id, "name": k.name, "input": in.Input}
	case "tool_search_call":
		args := json.RawMessage(c.args)
		if !json.Valid(args) {
			args = json.RawMessage(`{}`)
		}
		return map[string]any{"type": "tool_search_call", "id": newID("ts_"), "status": "completed", "call_id": id, "execution": "client", "arguments": args}
	}
	it := map[string]any{"type": "function_call", "id": newID("fc_"), "status": "completed", "call_id": id, "name": k.name, "arguments": c.args}
	if k.namespace != "" {
		it["namespace"] = k.namespace
	}
	return it
}

// finish ends the answer: the open items, the tool calls, then
// response.completed (or response.incomplete, with reason, when the
// upstream stopped at its output limit or a content filter).
func (w *writer) finish(u usage, incomplete string) map[string]any {
	w.closeReasoning()
	w.closeMessage()
	for _, c := range w.calls {
		it := w.item(c)
		w.event("response.output_item.added", map[string]any{"output_index": len(w.output), "item": it})
		w.event("response.output_item.done", map[string]any{"output_index": len(w.output), "item": it})
		w.output = append(w.output, it)
	}
	w.calls = nil
	status, typ := "completed", "response.completed"
	if incomplete != "" {
		status, typ = "incomplete", "response.incomplete"
	}
	r := w.response(status)
	r["usage"] = u.object()
	if incomplete != "" {
		r["incomplete_details"] = map[string]any{"reason": incomplete}
	}
	w.event(typ, map[string]any{"response": r})
	return r
}

// fail ends the answer with response.failed: the upstream's stream
// reported an error. The CLI retries a failed response.
func (w *writer) fail(code, msg string) {
	r := w.response("failed")
	r["error"] = map[string]any{"code": code, "message": msg}
	w.event("response.failed", map[string]any{"response": r})
}
