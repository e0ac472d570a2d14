package cursor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/jsonl"
)

// benchTranscript is a long partial-output run: n token deltas per
// message, a consolidated message, and a tool call whose result carries a
// file of size bytes, repeated turns times.
func benchTranscript(turns, n, size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"type":"system","subtype":"init","session_id":"s","model":"Auto","permissionMode":"default"}` + "\n")
	file := strings.Repeat("x", size)
	var all strings.Builder
	for t := range turns {
		var msg strings.Builder
		for i := range n {
			tok := fmt.Sprintf(" tok%d", i)
			msg.WriteString(tok)
			fmt.Fprintf(&b, `{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":%q}]},"session_id":"s","timestamp_ms":%d}`+"\n", tok, i)
		}
		fmt.Fprintf(&b, `{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":%q}]},"session_id":"s","model_call_id":"m%d","timestamp_ms":1}`+"\n", msg.String(), t)
		all.WriteString(msg.String())
		fmt.Fprintf(&b, `{"type":"tool_call","subtype":"started","call_id":"c%d","tool_call":{"readToolCall":{"args":{"path":"f"}}},"session_id":"s"}`+"\n", t)
		fmt.Fprintf(&b, `{"type":"tool_call","subtype":"completed","call_id":"c%d","tool_call":{"readToolCall":{"args":{"path":"f"},"result":{"success":{"content":%q}}}},"session_id":"s"}`+"\n", t, file)
	}
	fmt.Fprintf(&b, `{"type":"result","subtype":"success","is_error":false,"duration_ms":1,"result":%q,"session_id":"s"}`+"\n", all.String())
	return b.Bytes()
}

// BenchmarkParse compares the full parse with the floor under it, reading
// the same bytes as lines with internal/jsonl and nothing else.
func BenchmarkParse(b *testing.B) {
	for _, c := range []struct {
		name            string
		turns, n, bytes int
	}{
		{"deltas", 20, 500, 1 << 10},
		{"big-results", 5, 10, 4 << 20},
	} {
		input := benchTranscript(c.turns, c.n, c.bytes)
		b.Run(c.name+"/lines-only", func(b *testing.B) {
			b.SetBytes(int64(len(input)))
			for b.Loop() {
				r := jsonl.NewReader(bytes.NewReader(input), 0)
				for {
					if _, err := r.ReadLine(); errors.Is(err, io.EOF) {
						break
					}
				}
			}
		})
		b.Run(c.name+"/parse", func(b *testing.B) {
			b.SetBytes(int64(len(input)))
			r := New()
			for b.Loop() {
				if _, err := r.Parse(context.Background(), bytes.NewReader(input), func(executor.Event) error { return nil }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
