package anthropicopenai

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/go-hclog"
	"github.com/openai/openai-go/v3"
)

// MaxLineBytes caps one line of the provider's event stream; a longer line
// fails the stream with ErrLineTooLong instead of ending it silently.
const MaxLineBytes = 32 << 20

// ErrLineTooLong is returned when a provider stream line exceeds
// MaxLineBytes.
var ErrLineTooLong = errors.New("anthropicopenai: provider stream line over 32 MiB")

// ErrInterleavedToolCalls is reported when a provider streams arguments to
// a tool call after another one started; Anthropic's stream cannot reopen
// a closed block.
var ErrInterleavedToolCalls = errors.New("anthropicopenai: the provider interleaved the arguments of parallel tool calls")

// readLine reads one line without its end of line, up to MaxLineBytes.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		if len(line)+len(frag) > MaxLineBytes {
			return nil, ErrLineTooLong
		}
		line = append(line, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && len(line) == 0 {
			return nil, err
		}
		return bytes.TrimRight(line, "\r\n"), nil
	}
}

// events writes Anthropic's server-sent events; after a write error (the
// reader went away) it does nothing and keeps the error.
type events struct {
	w   io.Writer
	err error
}

func (e *events) send(name string, data any) {
	if e.err != nil {
		return
	}
	b, err := json.Marshal(data)
	if err != nil {
		e.err = err
		return
	}
	_, e.err = fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", name, b)
}

type toolState struct {
	id     string
	block  int
	closed bool
	args   int // bytes of arguments sent
}

// streamState follows one provider stream and the Anthropic one it makes.
type streamState struct {
	ev             *events
	model          string
	reasoningField string
	log            hclog.Logger

	started  bool
	next     int    // index of the next Anthropic block
	open     string // type of the open block, "" when none
	openTool *toolState
	tools    map[int64]*toolState
	called   bool
	finish   string
	usage    *usage
	chars    int
}

func (s *streamState) start(id string) {
	if s.started {
		return
	}
	s.started = true
	s.ev.send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_" + id, "type": "message", "role": "assistant", "model": s.model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": usage{}}})
	s.ev.send("ping", map[string]string{"type": "ping"})
}

func (s *streamState) closeBlock() {
	switch s.open {
	case "":
		return
	case "thinking":
		s.delta(map[string]string{"type": "signature_delta", "signature": placeholderSignature})
	case "tool_use":
		if s.openTool.args == 0 {
			s.delta(map[string]string{"type": "input_json_delta", "partial_json": "{}"})
		}
		s.openTool.closed = true
		s.openTool = nil
	}
	s.ev.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": s.next - 1})
	s.open = ""
}

func (s *streamState) openBlock(typ string, cb map[string]any) {
	s.closeBlock()
	s.ev.send("content_block_start", map[string]any{"type": "content_block_start", "index": s.next, "content_block": cb})
	s.next++
	s.open = typ
}

func (s *streamState) delta(d map[string]string) {
	s.ev.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": s.next - 1, "delta": d})
}

func (s *streamState) text(t string) {
	if s.open != "text" {
		s.openBlock("text", map[string]any{"type": "text", "text": ""})
	}
	s.chars += len(t)
	s.delta(map[string]string{"type": "text_delta", "text": t})
}

func (s *streamState) thinking(t string) {
	if s.open != "thinking" {
		s.openBlock("thinking", map[string]any{"type": "thinking", "thinking": "", "signature": ""})
	}
	s.chars += len(t)
	s.delta(map[string]string{"type": "thinking_delta", "thinking": t})
}

func (s *streamState) toolCall(chunkID string, tc openai.ChatCompletionChunkChoiceDeltaToolCall) error {
	st := s.tools[tc.Index]
	if st == nil || (tc.ID != "" && tc.ID != st.id) {
		// A new call; some providers reuse index 0 for every call and tell
		// them apart by id only.
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("toolu_%s_%d", chunkID, s.next)
		}
		s.closeBlock()
		st = &toolState{id: id, block: s.next}
		s.tools[tc.Index] = st
		s.openBlock("tool_use", map[string]any{"type": "tool_use", "id": id, "name": tc.Function.Name, "input": map[string]any{}})
		s.openTool = st
		s.called = true
	} else if st != s.openTool {
		return ErrInterleavedToolCalls
	}
	if a := tc.Function.Arguments; a != "" {
		st.args += len(a)
		s.chars += len(a)
		s.delta(map[string]string{"type": "input_json_delta", "partial_json": a})
	}
	return nil
}

// chunk handles one data line; done is set by [DONE].
func (s *streamState) chunk(data []byte) (done bool, err error) {
	if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
		return true, nil
	}
	var c openai.ChatCompletionChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return false, fmt.Errorf("anthropicopenai: provider stream chunk is not JSON: %w", err)
	}
	if e, ok := c.JSON.ExtraFields["error"]; ok && present(e) {
		s.start(c.ID)
		s.closeBlock()
		s.ev.send("error", streamError(json.RawMessage(e.Raw())))
		return true, errProviderStreamError
	}
	s.start(c.ID)
	if c.JSON.Usage.Valid() && c.Usage.PromptTokens+c.Usage.CompletionTokens > 0 {
		u := mapUsage(c.Usage)
		s.usage = &u
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue // only the first choice; the CLI never asks for n > 1
		}
		if r := reasoning(ch.Delta.JSON.ExtraFields, s.reasoningField); r != "" {
			s.thinking(r)
		}
		if ch.Delta.Content != "" {
			s.text(ch.Delta.Content)
		}
		for _, tc := range ch.Delta.ToolCalls {
			if err := s.toolCall(c.ID, tc); err != nil {
				return false, err
			}
		}
		if ch.FinishReason != "" {
			s.finish = ch.FinishReason
		}
	}
	return false, nil
}

// errProviderStreamError marks a stream that ended with the provider's
// error, already forwarded as an Anthropic error event.
var errProviderStreamError = errors.New("provider error in stream")

// translateStream reads a Chat Completions event stream from r and writes
// the Anthropic event stream to w. It returns the error that cut the
// stream, if any, after telling the client with an error event.
func translateStream(r io.Reader, w io.Writer, model, reasoningField string, log hclog.Logger) error {
	s := &streamState{ev: &events{w: w}, model: model, reasoningField: reasoningField, log: log, tools: map[int64]*toolState{}}
	br := bufio.NewReaderSize(r, 64<<10)
	done := false
	var rerr error
	for !done {
		line, err := readLine(br)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				rerr = err
			}
			break
		}
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			if len(line) > 0 && line[0] != ':' && !bytes.HasPrefix(line, []byte("event:")) && !bytes.HasPrefix(line, []byte("id:")) && !bytes.HasPrefix(line, []byte("retry:")) {
				log.Debug("unknown provider stream line skipped", "bytes", len(line))
			}
			continue
		}
		done, err = s.chunk(bytes.TrimPrefix(data, []byte(" ")))
		if errors.Is(err, errProviderStreamError) {
			return s.ev.err
		}
		if err != nil {
			rerr = err
			break
		}
		if s.ev.err != nil {
			return s.ev.err
		}
	}
	s.start("stream")
	if rerr != nil || (!done && s.finish == "") {
		msg := "the provider's stream ended before it finished"
		if rerr != nil {
			msg = "the provider's stream broke: " + rerr.Error()
		}
		s.closeBlock()
		s.ev.send("error", errorBody{Type: "error", Error: errorDetail{Type: "api_error", Message: "agentbox: " + msg}})
		if rerr == nil {
			rerr = io.ErrUnexpectedEOF
		}
		return errors.Join(rerr, s.ev.err)
	}
	s.closeBlock()
	u := usage{OutputTokens: int64(max(1, s.chars/4))}
	if s.usage != nil {
		u = *s.usage
	} else {
		log.Debug("provider sent no usage; output tokens estimated", "output_tokens", u.OutputTokens)
	}
	s.ev.send("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stopReason(s.finish, s.called), "stop_sequence": nil}, "usage": u})
	s.ev.send("message_stop", map[string]string{"type": "message_stop"})
	return s.ev.err
}

// writeMessageAsStream writes a complete message as Anthropic's events.
func writeMessageAsStream(w io.Writer, m *message) {
	s := &streamState{ev: &events{w: w}, model: m.Model, tools: map[int64]*toolState{}}
	s.start(m.ID[len("msg_"):])
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			s.text(*b.Text)
		case "thinking":
			s.thinking(*b.Thinking)
		case "tool_use":
			s.openBlock("tool_use", map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}})
			s.openTool = &toolState{id: b.ID, args: len(b.Input)}
			s.delta(map[string]string{"type": "input_json_delta", "partial_json": string(b.Input)})
		}
	}
	s.closeBlock()
	s.ev.send("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": m.StopReason, "stop_sequence": nil}, "usage": m.Usage})
	s.ev.send("message_stop", map[string]string{"type": "message_stop"})
}
