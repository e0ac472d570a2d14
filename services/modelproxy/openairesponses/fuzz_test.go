package openairesponses

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// FuzzRequest: no request body makes the translation panic, and what it
// writes for either upstream is JSON.
func FuzzRequest(f *testing.F) {
	files, _ := filepath.Glob("testdata/request/*.json")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil && !strings.Contains(filepath.Base(file), ".") {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"input":[{"type":"function_call","namespace":"a","name":"b"}],"tools":[{"type":"namespace","name":"a","tools":[{"type":"namespace"}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeRequest(data)
		if err != nil {
			return
		}
		if b, err := chatBody(r, ChatOptions{StreamUsage: true}); err == nil && !json.Valid(b) {
			t.Fatalf("chat body is not JSON: %s", b)
		}
		if b, err := messagesBody(r, MessagesOptions{}); err == nil {
			if !json.Valid(b) {
				t.Fatalf("messages body is not JSON: %s", b)
			}
			// The Messages API takes a tool use's input as an object only.
			for _, m := range gjson.GetBytes(b, "messages").Array() {
				for _, c := range m.Get("content").Array() {
					if c.Get("type").String() == "tool_use" && !c.Get("input").IsObject() {
						t.Fatalf("a tool use's input is not an object: %s", c.Raw)
					}
				}
			}
		}
	})
}

// checkEvents holds for every translated stream: each event is one JSON
// object whose type is its event name, numbered from 0 without gaps, and
// nothing follows the terminal event.
func checkEvents(t *testing.T, out []byte) {
	t.Helper()
	seq := int64(0)
	terminal := false
	for _, block := range strings.Split(string(out), "\n\n") {
		if block == "" {
			continue
		}
		if terminal {
			t.Fatalf("an event after the terminal one: %q", block)
		}
		name, data, ok := strings.Cut(block, "\ndata: ")
		name = strings.TrimPrefix(name, "event: ")
		if !ok || !gjson.Valid(data) {
			t.Fatalf("not an SSE event of JSON: %q", block)
		}
		v := gjson.Parse(data)
		if v.Get("type").String() != name || v.Get("sequence_number").Int() != seq {
			t.Fatalf("event %q: type %q, sequence %d, want %d", name, v.Get("type").String(), v.Get("sequence_number").Int(), seq)
		}
		seq++
		switch name {
		case "response.completed", "response.incomplete", "response.failed":
			terminal = true
		}
	}
}

// seedStreams adds the upstream streams of testdata/messages and some Chat
// Completions chunks.
func seedStreams(f *testing.F, chat bool) {
	if chat {
		f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\",\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3}}\n\ndata: [DONE]\n\n"))
		f.Add([]byte("data: {\"error\":{\"message\":\"x\"}}\n\n"))
		return
	}
	files, _ := filepath.Glob("testdata/messages/*.sse")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
}

// FuzzChatStream: any Chat Completions stream translates to well-formed
// Responses events.
func FuzzChatStream(f *testing.F) {
	seedStreams(f, true)
	f.Fuzz(func(t *testing.T, data []byte) {
		var out bytes.Buffer
		w := newWriter(&out, nil, "m", map[string]callKind{"f": {item: "custom_tool_call", name: "f"}})
		_ = chatStream(bytes.NewReader(data), w, ChatOptions{})
		checkEvents(t, out.Bytes())
	})
}

// FuzzMessagesStream: any Messages stream translates to well-formed
// Responses events.
func FuzzMessagesStream(f *testing.F) {
	seedStreams(f, false)
	f.Fuzz(func(t *testing.T, data []byte) {
		var out bytes.Buffer
		w := newWriter(&out, nil, "m", map[string]callKind{})
		_ = messagesStream(bytes.NewReader(data), w)
		checkEvents(t, out.Bytes())
	})
}
