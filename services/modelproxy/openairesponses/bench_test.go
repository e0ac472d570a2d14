package openairesponses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/scriptedopenai"
)

// benchRequest is a streamed Responses request of the Codex CLI grown to
// at least size bytes: the recorded codex_turn request, then earlier
// steps (a command, its output, a message) until it is that large.
func benchRequest(b *testing.B, size int) []byte {
	b.Helper()
	raw, err := os.ReadFile("testdata/request/codex_turn.json")
	if err != nil {
		b.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		b.Fatal(err)
	}
	m["stream"] = true
	input, _ := m["input"].([]any)
	for i := 0; ; i++ {
		out, err := json.Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		if len(out) >= size {
			return out
		}
		id := fmt.Sprintf("call_%03d", i)
		step := []any{
			map[string]any{"type": "function_call", "call_id": id, "name": "exec_command", "arguments": `{"cmd":"sed -n 1,40p main.go"}`},
			map[string]any{"type": "function_call_output", "call_id": id, "output": strings.Repeat("output line ✓ of the command\n", 30)},
			map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": "Next I'll read the tests."}}},
		}
		// Before the last user message, as earlier steps of the turn.
		input = append(input[:len(input)-1:len(input)-1], append(step, input[len(input)-1])...)
		m["input"] = input
	}
}

// canned is an upstream answering every call with one recorded answer,
// in memory: what is timed is the translation alone.
type canned struct {
	contentType string
	body        []byte
}

// RoundTrip implements http.RoundTripper.
func (c canned) RoundTrip(req *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, req.Body)
	_ = req.Body.Close()
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {c.contentType}},
		Body: io.NopCloser(bytes.NewReader(c.body)), Request: req}, nil
}

// chatStream records the scripted Chat Completions server's stream of a
// text and a tool call, with usage.
func chatStreamBody(b *testing.B) []byte {
	b.Helper()
	api := scriptedopenai.Start(scriptedopenai.WithScript(func(*scriptedopenai.Request) scriptedopenai.Turn {
		return scriptedopenai.Turn{Text: "I'll print the file now.", Calls: []scriptedopenai.Call{
			scriptedopenai.NewCall("exec_command", map[string]string{"cmd": "cat hello.txt"})}}
	}))
	defer api.Close()
	resp, err := http.Post(api.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("recording the stream: %v %d", err, resp.StatusCode)
	}
	return body
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTranslation is the translation's added cost per call: a
// streamed Codex CLI request of 64 KB translated and sent to an upstream
// that answers at once from memory (a text and a tool call), and its
// stream translated back and read to the end. Without the translation
// that call is a copy of the bytes, so the time per call is what the
// translation adds; p50-µs and p99-µs are the per-call percentiles of
// wall time, cpu-µs/call the CPU time per call.
func BenchmarkTranslation(b *testing.B) {
	body := benchRequest(b, 64<<10)
	msgs, err := os.ReadFile("testdata/messages/parallel_tools.sse")
	if err != nil {
		b.Fatal(err)
	}
	chat, err := NewChat(ChatOptions{BaseURL: "http://chat.invalid/v1", APIKey: "k", StreamUsage: true,
		Client: canned{"text/event-stream", chatStreamBody(b)}})
	if err != nil {
		b.Fatal(err)
	}
	messages, err := NewMessages(MessagesOptions{BaseURL: "http://anthropic.invalid", APIKey: "k",
		Client: canned{"text/event-stream", msgs}})
	if err != nil {
		b.Fatal(err)
	}
	for name, tr := range map[string]http.RoundTripper{"chat": chat, "messages": messages} {
		b.Run(name, func(b *testing.B) {
			var times []time.Duration
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			for b.Loop() {
				t0 := time.Now()
				req := httptest.NewRequest(http.MethodPost, "http://proxy.invalid/v1/responses", bytes.NewReader(body))
				resp, err := tr.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				out, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte("response.completed")) {
					b.Fatalf("status %d, err %v: %.300s", resp.StatusCode, err, out)
				}
				times = append(times, time.Since(t0))
			}
			// The process's CPU time per call (GC included) holds on a
			// loaded machine, where the wall-time percentiles do not.
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(len(times)), "cpu-µs/call")
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(times[len(times)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkDecodeRequest is the reading of a 64 KB request alone.
func BenchmarkDecodeRequest(b *testing.B) {
	body := benchRequest(b, 64<<10)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}
