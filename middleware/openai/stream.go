package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/middleware"
)

// MaxLine is the longest SSE line the adapter writes, newline included:
// clients that read SSE with a bufio.Scanner (openai-go among them) fail on
// a line of 64 KiB or more.
const MaxLine = 64<<10 - 1

// stream writes one chat completion's events as SSE chunks (see sseWriter
// for when the status goes out).
type stream struct {
	*sseWriter
	id  string
	mdl string
	ts  int64
	// textMax is the most raw bytes of text one chunk carries, so that the
	// JSON-escaped line (at most 6 bytes per input byte) stays under
	// MaxLine.
	textMax int

	streamed strings.Builder
}

func (s *Server) newStream(w http.ResponseWriter, id, mdl string) *stream {
	st := &stream{sseWriter: s.newSSE(w, keepAlive), id: id, mdl: mdl, ts: s.now().Unix(), textMax: textMax(len(mdl) + len(id))}
	st.open = st.roleChunk
	return st
}

// textMax is the most raw bytes of text an event carries when overhead
// bytes of it are not text: JSON escapes a byte into at most 6, and the
// line stays under MaxLine.
func textMax(overhead int) int { return (MaxLine - overhead - 512) / 6 }

// emit is the request's middleware.Emit: text goes to delta.content, every
// other event to the agentbox extension.
func (st *stream) emit(ev executor.Event) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if ev.Kind == executor.EventText {
		return st.sendText(ev.Text)
	}
	return st.sendEvent(ev)
}

// sendText sends text as delta.content chunks split at rune boundaries.
func (st *stream) sendText(text string) error {
	for _, piece := range split(text, st.textMax) {
		c := st.chunk()
		c.Choices[0].Delta.Content = &piece
		if err := st.write(c); err != nil {
			return err
		}
		st.streamed.WriteString(piece)
	}
	return nil
}

// sendEvent sends a non-text event in the extension: texts (thinking,
// retry, sandbox) split across chunks, large payloads truncated.
func (st *stream) sendEvent(ev executor.Event) error {
	if plainText(ev) {
		for _, piece := range split(ev.Text, st.textMax) {
			c := st.chunk()
			c.Agentbox = &extension{Kind: string(ev.Kind), Text: piece}
			if err := st.write(c); err != nil {
				return err
			}
		}
		return nil
	}
	b, err := fitLine(ev, st.textMax, func(ext *extension) any {
		c := st.chunk()
		c.Agentbox = ext
		return c
	})
	if err != nil {
		return err
	}
	return st.send("", b)
}

// plainText reports that ev is a text of the extension (thinking, retry,
// a sandbox phase) and nothing else: it is split across events, not cut.
func plainText(ev executor.Event) bool {
	return ev.Text != "" && ev.Tool == nil && ev.ToolResult == nil && ev.UI == nil && ev.Init == nil && ev.Queue == nil && ev.Sandbox == nil
}

// fitLine encodes the event that wrap makes of ev's extension, cutting its
// large payloads (then keeping only its identifiers) until its line fits
// under MaxLine.
func fitLine(ev executor.Event, max int, wrap func(*extension) any) ([]byte, error) {
	for _, ext := range []func() *extension{
		func() *extension { return extensionOf(ev) },
		func() *extension { return truncate(ev, max) },
		func() *extension { return bare(ev) },
	} {
		b, err := json.Marshal(wrap(ext()))
		if err != nil {
			return nil, fmt.Errorf("openai: encode %s event: %w", ev.Kind, err)
		}
		if len(b)+len("event: agentbox\ndata: \n") <= MaxLine {
			return b, nil
		}
	}
	return nil, fmt.Errorf("openai: the %s event does not fit in one line", ev.Kind)
}

// chunk is an empty chunk of this stream.
func (st *stream) chunk() *chunk {
	return &chunk{ID: st.id, Object: "chat.completion.chunk", Created: st.ts, Model: st.mdl,
		Choices: []chunkChoice{{Delta: delta{}}}}
}

func (st *stream) write(c *chunk) error {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("openai: encode chunk: %w", err)
	}
	return st.send("", b)
}

// roleChunk is the stream's first chunk: the assistant role. Held: mu.
func (st *stream) roleChunk() error {
	c := st.chunk()
	c.Choices[0].Delta.Role = "assistant"
	empty := ""
	c.Choices[0].Delta.Content = &empty
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("openai: encode chunk: %w", err)
	}
	return st.put("", b)
}

// keepAlive is the heartbeat of the OpenAI doors: one SSE comment line
// with no blank line after it. A blank line ends an event, and parsers
// that dispatch on it whatever the event holds (openai-go's ssestream in
// v1; v3 skips empty events) hand their caller an event with empty data,
// which fails as JSON. Without the blank line the comment belongs to the
// next event, and every parser ignores comment lines (openai-go, the
// openai npm package's SSEDecoder, eventsource-parser under the Vercel AI
// SDK, curl).
const keepAlive = ": keep-alive\n"

// finish ends a successful stream: the rest of the content when the
// response's content extends what was streamed, or a reset and the whole
// content when it does not; the finish chunk with the done extension; the
// usage chunk when asked; [DONE].
func (st *stream) finish(resp *middleware.Response, includeUsage bool) {
	defer st.end()
	st.mu.Lock()
	defer st.mu.Unlock()
	streamed := st.streamed.String()
	if rest, ok := strings.CutPrefix(resp.Content, streamed); ok {
		if st.sendText(rest) != nil {
			return
		}
	} else {
		c := st.chunk()
		c.Agentbox = &extension{Kind: kindReset}
		if st.write(c) != nil || st.sendText(resp.Content) != nil {
			return
		}
	}
	c := st.chunk()
	reason := finishReason(resp.FinishReason)
	c.Choices[0].FinishReason = &reason
	c.Agentbox = doneExtension(resp)
	if st.write(c) != nil {
		return
	}
	if includeUsage {
		c := st.chunk()
		c.Choices = []chunkChoice{}
		c.Usage = usageOf(resp.Usage)
		if st.write(c) != nil {
			return
		}
	}
	_ = st.send("", []byte("[DONE]"))
}

// fail ends the stream with an error: its status when nothing was sent
// yet, else an {"error": ...} event (which OpenAI's SDKs raise).
func (st *stream) fail(e *middleware.Error) {
	defer st.end()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.refuse(openaiErrors{}, e) {
		return
	}
	b, err := json.Marshal(bodyOf(e))
	if err != nil {
		return
	}
	_ = st.put("", b)
}

// split cuts s into pieces of at most max bytes at rune boundaries; "" has
// no pieces.
func split(s string, max int) []string {
	var out []string
	for len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		if cut == 0 {
			cut = max
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// truncateMarker ends a truncated string.
const truncateMarker = "…[truncated by agentbox: %d bytes in all]"

// cut returns s cut to at most max bytes at a rune boundary, with the
// marker, and whether it cut.
func cut(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	p := split(s, max)[0]
	return p + fmt.Sprintf(truncateMarker, len(s)), true
}

// truncate shortens ev's large payloads (tool input, tool result, UI
// props, text) to about max bytes each, marking the cut.
func truncate(ev executor.Event, max int) *extension {
	ext := extensionOf(ev)
	var cutAny bool
	if ev.Text != "" {
		var did bool
		ext.Text, did = cut(ev.Text, max)
		cutAny = cutAny || did
	}
	if ev.Tool != nil && len(ev.Tool.Input) > max {
		tool := *ev.Tool
		s, _ := cut(string(ev.Tool.Input), max)
		// The input becomes a JSON string holding the start of the JSON.
		tool.Input, _ = json.Marshal(s)
		ext.Tool, cutAny = &tool, true
	}
	if ev.ToolResult != nil && len(ev.ToolResult.Content) > max {
		tr := *ev.ToolResult
		tr.Content, _ = cut(tr.Content, max)
		ext.ToolResult, cutAny = &tr, true
	}
	if ev.UI != nil {
		if b, err := json.Marshal(ev.UI.Props); err == nil && len(b) > max {
			ui := *ev.UI
			s, _ := cut(string(b), max)
			ui.Props = map[string]any{"truncated": s}
			ext.UI, cutAny = &ui, true
		}
	}
	ext.Truncated = cutAny
	return ext
}

// bare keeps only ev's kind and identifiers: the last resort when a
// truncated event is still too long.
func bare(ev executor.Event) *extension {
	ext := &extension{Kind: string(ev.Kind), Truncated: true}
	if ev.Tool != nil {
		ext.Tool = &executor.ToolUse{ID: ev.Tool.ID, Name: ev.Tool.Name}
	}
	if ev.ToolResult != nil {
		ext.ToolResult = &executor.ToolResult{ToolUseID: ev.ToolResult.ToolUseID, IsError: ev.ToolResult.IsError}
	}
	if ev.UI != nil {
		ext.UI = &executor.UIMessage{ID: ev.UI.ID, Action: ev.UI.Action, Type: ev.UI.Type}
	}
	return ext
}

// finishReason maps the middleware's finish reasons to OpenAI's.
func finishReason(r string) string {
	switch r {
	case executor.FinishMaxTurns:
		return "length"
	case "", executor.FinishStop, executor.FinishError:
		return "stop"
	}
	return r
}
