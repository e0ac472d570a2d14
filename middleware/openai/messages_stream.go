package openai

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/middleware"
)

// pingEvent is the Messages API's keep-alive, which every SDK skips.
const pingEvent = "event: ping\ndata: {\"type\":\"ping\"}\n\n"

// Content blocks of an answer: text, thinking, and the agent's tool calls
// and results.
type (
	textBlock struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	thinkingBlock struct {
		Type      string `json:"type"`
		Thinking  string `json:"thinking"`
		Signature string `json:"signature"`
	}
	toolUseBlock struct {
		Type       string          `json:"type"`
		ID         string          `json:"id"`
		Name       string          `json:"name"`
		ServerName string          `json:"server_name"`
		Input      json.RawMessage `json:"input"`
	}
	toolResultBlock struct {
		Type      string      `json:"type"`
		ToolUseID string      `json:"tool_use_id"`
		IsError   bool        `json:"is_error"`
		Content   []textBlock `json:"content"`
	}
)

// anthropicMessage is a message of the API.
type anthropicMessage struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []any          `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        anthropicUsage `json:"usage"`
	// Agentbox is the extension's "done" (see the package documentation).
	Agentbox *extension `json:"agentbox,omitempty"`
}

// anthropicUsage is the API's usage: input_tokens are the uncached ones,
// as executor.Usage counts them.
type anthropicUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// messageRun builds one message from the handler's events, and writes the
// API's events when it streams (see messages.go for the sequence). Its
// methods are called by one goroutine at a time; a stream's writes hold
// the sseWriter's lock.
type messageRun struct {
	eventWriter
	s   *Server
	msg anthropicMessage

	// open is the index of the open text or thinking block, -1 for none;
	// calls maps tool use ids to the agent's calls that await a result.
	open     int
	calls    map[string]bool
	texts    []int
	streamed strings.Builder
}

func (s *Server) newMessageRun(id, model string) *messageRun {
	return &messageRun{s: s, open: -1, calls: map[string]bool{}, eventWriter: eventWriter{textMax: textMax(len(id) + len(model))},
		msg: anthropicMessage{ID: id, Type: "message", Role: "assistant", Model: model, Content: []any{}}}
}

// stream makes the run write its events to w as they happen.
func (m *messageRun) stream(w http.ResponseWriter) {
	m.out = m.s.newSSE(w, pingEvent)
	m.out.open = func() error {
		// The stream starts on the first event, whose block may be in the
		// content already: the started message has none.
		start := m.msg
		start.Content = []any{}
		return m.put("message_start", map[string]any{"message": start})
	}
}

// emit is the handler's middleware.Emit.
func (m *messageRun) emit(ev executor.Event) error {
	if m.out != nil {
		m.out.mu.Lock()
		defer m.out.mu.Unlock()
	}
	switch ev.Kind {
	case executor.EventText:
		return m.delta("text", ev.Text)
	case executor.EventThinking:
		return m.delta("thinking", ev.Text)
	case executor.EventToolUse:
		if ev.Tool != nil {
			return m.toolUse(ev.Tool)
		}
	case executor.EventToolResult:
		if r := ev.ToolResult; r != nil && m.calls[r.ToolUseID] {
			delete(m.calls, r.ToolUseID)
			content, _ := cut(r.Content, m.textMax/2)
			return m.block(&toolResultBlock{Type: "mcp_tool_result", ToolUseID: r.ToolUseID, IsError: r.IsError,
				Content: []textBlock{{Type: "text", Text: content}}})
		}
	}
	return m.extension("ping", ev)
}

// delta adds text to the open block of kind ("text" or "thinking"),
// opening one when needed.
func (m *messageRun) delta(kind, t string) error {
	if t == "" {
		return nil
	}
	if m.open < 0 || m.kindOf(m.open) != kind {
		if err := m.closeOpen(); err != nil {
			return err
		}
		var b any = &textBlock{Type: "text"}
		if kind == "thinking" {
			b = &thinkingBlock{Type: "thinking"}
		} else {
			m.texts = append(m.texts, len(m.msg.Content))
		}
		m.open = len(m.msg.Content)
		m.msg.Content = append(m.msg.Content, b)
		if err := m.send("content_block_start", map[string]any{"index": m.open, "content_block": b}); err != nil {
			return err
		}
	}
	for _, piece := range split(t, m.textMax) {
		d := map[string]any{"type": "text_delta", "text": piece}
		if kind == "thinking" {
			d = map[string]any{"type": "thinking_delta", "thinking": piece}
		}
		if err := m.send("content_block_delta", map[string]any{"index": m.open, "delta": d}); err != nil {
			return err
		}
		switch b := m.msg.Content[m.open].(type) {
		case *textBlock:
			b.Text += piece
			m.streamed.WriteString(piece)
		case *thinkingBlock:
			b.Thinking += piece
		}
	}
	return nil
}

func (m *messageRun) kindOf(i int) string {
	if _, ok := m.msg.Content[i].(*thinkingBlock); ok {
		return "thinking"
	}
	return "text"
}

// closeOpen stops the open text or thinking block.
func (m *messageRun) closeOpen() error {
	if m.open < 0 {
		return nil
	}
	i := m.open
	m.open = -1
	return m.send("content_block_stop", map[string]any{"index": i})
}

// toolUse adds the block of the agent's tool call.
func (m *messageRun) toolUse(tool *executor.ToolUse) error {
	input := tool.Input
	if len(input) == 0 || len(input) > m.textMax/2 || !json.Valid(input) {
		// A cut input is no JSON object: the block carries the start of
		// the JSON as a string, as the chat extension does.
		s, _ := cut(string(tool.Input), m.textMax/2)
		input, _ = json.Marshal(map[string]string{"truncated": s})
	}
	m.calls[tool.ID] = true
	return m.block(&toolUseBlock{Type: "mcp_tool_use", ID: tool.ID, Name: tool.Name, ServerName: mcpServerLabel, Input: input})
}

// block adds a whole block: its start and its stop.
func (m *messageRun) block(b any) error {
	if err := m.closeOpen(); err != nil {
		return err
	}
	i := len(m.msg.Content)
	m.msg.Content = append(m.msg.Content, b)
	if err := m.send("content_block_start", map[string]any{"index": i, "content_block": b}); err != nil {
		return err
	}
	return m.send("content_block_stop", map[string]any{"index": i})
}

// finish completes the message: the rest of the content, or, when a Next
// hook replaced what was streamed, a reset (in a ping) and the whole
// content in a new text block (the earlier text blocks are emptied in the
// message answered whole); then message_delta with the stop reason and
// the usage, and message_stop.
func (m *messageRun) finish(w http.ResponseWriter, resp *middleware.Response) {
	if m.out != nil {
		defer m.out.end()
		m.out.mu.Lock()
		defer m.out.mu.Unlock()
	}
	if err := m.finalText(resp.Content); err != nil || m.closeOpen() != nil {
		return
	}
	stop := "end_turn"
	if resp.FinishReason == executor.FinishMaxTurns {
		stop = "max_tokens"
	}
	u := resp.Usage
	m.msg.StopReason = &stop
	m.msg.Usage = anthropicUsage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheCreationInputTokens: u.CacheCreationInputTokens, CacheReadInputTokens: u.CacheReadInputTokens}
	if m.out == nil {
		m.msg.Agentbox = doneExtension(resp)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(m.msg)
		return
	}
	if m.send("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": m.msg.Usage, "agentbox": doneExtension(resp)}) != nil {
		return
	}
	_ = m.send("message_stop", map[string]any{})
}

// finalText makes the text blocks hold content.
func (m *messageRun) finalText(content string) error {
	if rest, ok := strings.CutPrefix(content, m.streamed.String()); ok {
		return m.delta("text", rest)
	}
	if err := m.closeOpen(); err != nil {
		return err
	}
	if m.out != nil {
		if err := m.put("ping", map[string]any{"agentbox": &extension{Kind: kindReset}}); err != nil {
			return err
		}
	}
	for _, i := range m.texts {
		m.msg.Content[i] = &textBlock{Type: "text"}
	}
	m.streamed.Reset()
	return m.delta("text", content)
}

// fail ends the run with e: its status when nothing was streamed, else an
// error event, which the SDKs raise.
func (m *messageRun) fail(w http.ResponseWriter, e *middleware.Error) {
	if m.out == nil {
		anthropicErrors{}.write(w, 0, e)
		return
	}
	defer m.out.end()
	m.out.mu.Lock()
	defer m.out.mu.Unlock()
	if m.out.refuse(anthropicErrors{}, e) {
		return
	}
	_, b := anthropicErrorOf(0, e)
	data, err := json.Marshal(b)
	if err == nil {
		_ = m.out.put("error", data)
	}
}
