package openai

import (
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/middleware"
)

// A Responses run turns the handler's events into the API's output items
// and, when streamed, its events (the order of OpenAI's own streams):
//
//	response.created, response.in_progress            when the stream starts (its first event)
//	response.output_item.added {message}              the answer's text, in message items:
//	response.content_part.added {output_text}
//	response.output_text.delta ...
//	response.output_text.done, response.content_part.done, response.output_item.done
//	response.output_item.added {reasoning}            the agent's thinking, as a reasoning summary:
//	response.reasoning_summary_part.added, response.reasoning_summary_text.delta ...
//	response.reasoning_summary_text.done, response.reasoning_summary_part.done, response.output_item.done
//	response.output_item.added {mcp_call}             each tool call of the agent, run by the server:
//	response.mcp_call.in_progress
//	response.mcp_call.completed | .failed, response.output_item.done   when its result arrives
//	agentbox                                          everything else: the agentbox extension
//	response.completed | response.incomplete          the whole response, with its usage
//
// A run that fails after the stream started ends with response.failed
// and an error event. The agent's tool calls are mcp_call items (server
// label "agentbox"): calls the server made and answered itself, which
// clients render or skip (the Vercel AI SDK shows them as provider-executed
// tool calls) and never answer, unlike function_call items. The extension
// is an event of type "agentbox" that SDKs pass by (openai-go and
// openai-node hand it over as an event of that type, the Vercel AI SDK
// skips unknown types).

// mcpServerLabel is the server label of the agent's tool calls.
const mcpServerLabel = "agentbox"

// Output items: a message, a reasoning summary, a server's tool call.
type (
	messageItem struct {
		ID      string       `json:"id"`
		Type    string       `json:"type"`
		Status  string       `json:"status"`
		Role    string       `json:"role"`
		Content []outputText `json:"content"`
	}
	outputText struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		Annotations []any  `json:"annotations"`
		Logprobs    []any  `json:"logprobs"`
	}
	reasoningItem struct {
		ID      string        `json:"id"`
		Type    string        `json:"type"`
		Summary []summaryText `json:"summary"`
	}
	summaryText struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	mcpItem struct {
		ID          string  `json:"id"`
		Type        string  `json:"type"`
		Status      string  `json:"status"`
		ServerLabel string  `json:"server_label"`
		Name        string  `json:"name"`
		Arguments   string  `json:"arguments"`
		Output      *string `json:"output"`
		Error       *string `json:"error"`
	}
)

// responseObject is a Response of the API.
type responseObject struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"`
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"`
	Error              *responseError     `json:"error"`
	IncompleteDetails  *incompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	Metadata           map[string]any     `json:"metadata"`
	Model              string             `json:"model"`
	Output             []any              `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Store              bool               `json:"store"`
	Text               responseText       `json:"text"`
	ToolChoice         string             `json:"tool_choice"`
	Tools              []any              `json:"tools"`
	Truncation         string             `json:"truncation"`
	Usage              *responseUsage     `json:"usage"`
	// Agentbox is the extension's "done" (see the package documentation).
	Agentbox *extension `json:"agentbox,omitempty"`
}

type (
	responseError struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	incompleteDetails struct {
		Reason string `json:"reason"`
	}
	responseText struct {
		Format struct {
			Type string `json:"type"`
		} `json:"format"`
	}
	// responseUsage is the API's usage: input_tokens counts every input
	// token, the cached share in input_tokens_details.
	responseUsage struct {
		InputTokens        int64 `json:"input_tokens"`
		InputTokensDetails struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		OutputTokens        int64 `json:"output_tokens"`
		OutputTokensDetails struct {
			ReasoningTokens int64 `json:"reasoning_tokens"`
		} `json:"output_tokens_details"`
		TotalTokens int64 `json:"total_tokens"`
	}
)

// responseRun builds one response from the handler's events. Its methods
// are called by one goroutine at a time (the handler's emit, then finish
// or fail); a stream's writes hold the sseWriter's lock.
type responseRun struct {
	eventWriter
	s    *Server
	turn *responseTurn
	obj  responseObject

	msg       *messageItem // the open message item, if any
	reasoning *reasoningItem
	// calls are the open tool calls' items by tool use id.
	calls map[string]*mcpItem
	// index is each item's output_index.
	index    map[any]int
	messages []*messageItem
	streamed strings.Builder
}

func (s *Server) newResponseRun(id string, t *responseTurn) *responseRun {
	md := t.metadata
	if md == nil {
		md = map[string]any{}
	}
	run := &responseRun{s: s, turn: t, calls: map[string]*mcpItem{}, index: map[any]int{},
		eventWriter: eventWriter{textMax: textMax(len(id) + len(t.req.Model)), numbered: true},
		obj: responseObject{ID: id, Object: "response", CreatedAt: s.now().Unix(), Status: "in_progress",
			Instructions: t.instructions, Metadata: md, Model: t.req.Model, Output: []any{}, ParallelToolCalls: true,
			PreviousResponseID: t.previous, Store: t.store, ToolChoice: "auto", Tools: []any{}, Truncation: "disabled"}}
	run.obj.Text.Format.Type = "text"
	return run
}

// stream makes the run write its events to w as they happen.
func (run *responseRun) stream(w http.ResponseWriter) {
	run.out = run.s.newSSE(w, keepAlive)
	run.out.open = func() error {
		// The stream starts on the first event, whose item may be in the
		// output already: the created response has none.
		snap := run.obj
		snap.Output = []any{}
		if err := run.put("response.created", map[string]any{"response": snap}); err != nil {
			return err
		}
		return run.put("response.in_progress", map[string]any{"response": snap})
	}
}

// emit is the handler's middleware.Emit.
func (run *responseRun) emit(ev executor.Event) error {
	if run.out != nil {
		run.out.mu.Lock()
		defer run.out.mu.Unlock()
	}
	switch ev.Kind {
	case executor.EventText:
		return run.text(ev.Text)
	case executor.EventThinking:
		return run.think(ev.Text)
	case executor.EventToolUse:
		if ev.Tool != nil {
			return run.call(ev.Tool)
		}
	case executor.EventToolResult:
		if ev.ToolResult != nil && run.calls[ev.ToolResult.ToolUseID] != nil {
			return run.result(ev.ToolResult)
		}
	}
	return run.extension("agentbox", ev)
}

// add appends item to the output and announces it.
func (run *responseRun) add(item any) error {
	run.index[item] = len(run.obj.Output)
	run.obj.Output = append(run.obj.Output, item)
	return run.send("response.output_item.added", map[string]any{"output_index": run.index[item], "item": item})
}

// itemDone announces that item is complete.
func (run *responseRun) itemDone(item any) error {
	return run.send("response.output_item.done", map[string]any{"output_index": run.index[item], "item": item})
}

// text adds answer text to the open message item, opening one when needed.
func (run *responseRun) text(t string) error {
	if t == "" {
		return nil
	}
	if run.msg == nil {
		if err := run.closeOpen(false); err != nil {
			return err
		}
		run.msg = &messageItem{ID: newID("msg_"), Type: "message", Status: "in_progress", Role: "assistant", Content: []outputText{}}
		run.messages = append(run.messages, run.msg)
		if err := run.add(run.msg); err != nil {
			return err
		}
		run.msg.Content = append(run.msg.Content, outputText{Type: "output_text", Annotations: []any{}, Logprobs: []any{}})
		if err := run.send("response.content_part.added", run.partFields(run.msg)); err != nil {
			return err
		}
	}
	for _, piece := range split(t, run.textMax) {
		if err := run.send("response.output_text.delta", map[string]any{"item_id": run.msg.ID, "output_index": run.index[run.msg],
			"content_index": 0, "delta": piece, "logprobs": []any{}}); err != nil {
			return err
		}
		run.msg.Content[0].Text += piece
		run.streamed.WriteString(piece)
	}
	return nil
}

func (run *responseRun) partFields(m *messageItem) map[string]any {
	return map[string]any{"item_id": m.ID, "output_index": run.index[m], "content_index": 0, "part": m.Content[0]}
}

// think adds the agent's thinking to the open reasoning item's summary.
func (run *responseRun) think(t string) error {
	if t == "" {
		return nil
	}
	if run.reasoning == nil {
		if err := run.closeOpen(false); err != nil {
			return err
		}
		run.reasoning = &reasoningItem{ID: newID("rs_"), Type: "reasoning", Summary: []summaryText{}}
		if err := run.add(run.reasoning); err != nil {
			return err
		}
		run.reasoning.Summary = append(run.reasoning.Summary, summaryText{Type: "summary_text"})
		if err := run.send("response.reasoning_summary_part.added", run.summaryFields(run.reasoning)); err != nil {
			return err
		}
	}
	for _, piece := range split(t, run.textMax) {
		if err := run.send("response.reasoning_summary_text.delta", map[string]any{"item_id": run.reasoning.ID,
			"output_index": run.index[run.reasoning], "summary_index": 0, "delta": piece}); err != nil {
			return err
		}
		run.reasoning.Summary[0].Text += piece
	}
	return nil
}

func (run *responseRun) summaryFields(r *reasoningItem) map[string]any {
	return map[string]any{"item_id": r.ID, "output_index": run.index[r], "summary_index": 0, "part": r.Summary[0]}
}

// call opens the item of the agent's tool call.
func (run *responseRun) call(tool *executor.ToolUse) error {
	if err := run.closeOpen(false); err != nil {
		return err
	}
	args := string(tool.Input)
	if args == "" {
		args = "{}"
	}
	args, _ = cut(args, run.textMax/2)
	item := &mcpItem{ID: newID("mcp_"), Type: "mcp_call", Status: "in_progress", ServerLabel: mcpServerLabel, Name: tool.Name, Arguments: args}
	run.calls[tool.ID] = item
	if err := run.add(item); err != nil {
		return err
	}
	return run.send("response.mcp_call.in_progress", map[string]any{"item_id": item.ID, "output_index": run.index[item]})
}

// result completes the item of the call res answers.
func (run *responseRun) result(res *executor.ToolResult) error {
	item := run.calls[res.ToolUseID]
	delete(run.calls, res.ToolUseID)
	content, _ := cut(res.Content, run.textMax/2)
	typ := "response.mcp_call.completed"
	if res.IsError {
		item.Status, item.Error, typ = "failed", &content, "response.mcp_call.failed"
	} else {
		item.Status, item.Output = "completed", &content
	}
	if err := run.send(typ, map[string]any{"item_id": item.ID, "output_index": run.index[item]}); err != nil {
		return err
	}
	return run.itemDone(item)
}

// closeOpen completes the open message and reasoning items, and with
// calls the tool calls that got no result (incomplete).
func (run *responseRun) closeOpen(calls bool) error {
	if m := run.msg; m != nil {
		run.msg = nil
		m.Status = "completed"
		f := run.partFields(m)
		f["text"] = m.Content[0].Text
		delete(f, "part")
		if err := run.send("response.output_text.done", f); err != nil {
			return err
		}
		if err := run.send("response.content_part.done", run.partFields(m)); err != nil {
			return err
		}
		if err := run.itemDone(m); err != nil {
			return err
		}
	}
	if r := run.reasoning; r != nil {
		run.reasoning = nil
		f := run.summaryFields(r)
		f["text"] = r.Summary[0].Text
		delete(f, "part")
		if err := run.send("response.reasoning_summary_text.done", f); err != nil {
			return err
		}
		if err := run.send("response.reasoning_summary_part.done", run.summaryFields(r)); err != nil {
			return err
		}
		if err := run.itemDone(r); err != nil {
			return err
		}
	}
	if !calls {
		return nil
	}
	for id, item := range run.calls {
		delete(run.calls, id)
		item.Status = "incomplete"
		if err := run.itemDone(item); err != nil {
			return err
		}
	}
	return nil
}

// finish completes the response: the rest of the content, or, when a
// Next hook replaced what was streamed, a reset and the whole content in
// a new message item (the earlier ones are emptied in the response
// object); the items closed; the response stored when asked; then
// response.completed (response.incomplete when the agent ran out of
// turns), or the response object for a request answered whole.
func (run *responseRun) finish(w http.ResponseWriter, resp *middleware.Response) {
	if run.out != nil {
		defer run.out.end()
		run.out.mu.Lock()
		defer run.out.mu.Unlock()
	}
	err := run.finalText(resp.Content)
	if err == nil {
		err = run.closeOpen(true)
	}
	if err != nil {
		return
	}
	run.obj.Status, run.obj.Usage, run.obj.Agentbox = "completed", responseUsageOf(resp.Usage), doneExtension(resp)
	typ := "response.completed"
	if resp.FinishReason == executor.FinishMaxTurns {
		run.obj.Status, run.obj.IncompleteDetails, typ = "incomplete", &incompleteDetails{Reason: "max_output_tokens"}, "response.incomplete"
	}
	body := encode(run.obj)
	if run.turn.store {
		run.s.store.put(&storedResponse{id: run.obj.ID, user: run.turn.req.UserID, chat: run.turn.req.ChatID,
			history: run.turn.history, answer: resp.Content, body: body, created: run.s.now(), size: run.turn.input})
	}
	if run.out == nil {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(body, '\n'))
		return
	}
	_ = run.send(typ, map[string]any{"response": run.obj})
}

// finalText makes the message items hold content: the rest of it after
// what was streamed, or all of it in a new item after a reset.
func (run *responseRun) finalText(content string) error {
	if rest, ok := strings.CutPrefix(content, run.streamed.String()); ok {
		return run.text(rest)
	}
	if err := run.closeOpen(false); err != nil {
		return err
	}
	if err := run.send("agentbox", map[string]any{"agentbox": &extension{Kind: kindReset}}); err != nil {
		return err
	}
	for _, m := range run.messages {
		m.Status, m.Content = "incomplete", []outputText{}
	}
	run.streamed.Reset()
	return run.text(content)
}

// fail ends the run with e: its status when nothing was streamed, else
// response.failed (the response with its error) and an error event,
// which the SDKs raise (openai-go and openai-node on its "error" member).
func (run *responseRun) fail(w http.ResponseWriter, e *middleware.Error) {
	if run.out == nil {
		writeError(w, e)
		return
	}
	defer run.out.end()
	run.out.mu.Lock()
	defer run.out.mu.Unlock()
	if run.out.refuse(openaiErrors{}, e) {
		return
	}
	b := bodyOf(e)
	run.obj.Status, run.obj.Error = "failed", &responseError{Code: *b.Error.Code, Message: e.Message}
	if run.send("response.failed", map[string]any{"response": run.obj}) != nil {
		return
	}
	_ = run.send("error", map[string]any{"code": b.Error.Code, "message": e.Message, "param": b.Error.Param, "error": b.Error})
}

func responseUsageOf(u executor.Usage) *responseUsage {
	prompt := u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
	r := &responseUsage{InputTokens: prompt, OutputTokens: u.OutputTokens, TotalTokens: prompt + u.OutputTokens}
	r.InputTokensDetails.CachedTokens = u.CacheReadInputTokens
	return r
}
