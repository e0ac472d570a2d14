package scriptedapi

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sseEvent is one parsed server-sent event.
type sseEvent struct {
	Name string
	Data map[string]any
}

func post(t *testing.T, url string, body any, header map[string]string) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, url+"/v1/messages", strings.NewReader(string(b)))
	require.NoError(t, err)
	req.Header.Set("content-type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp
}

func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	var name string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d map[string]any
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d))
			require.Equal(t, name, d["type"], "the event name matches the data's type")
			out = append(out, sseEvent{Name: name, Data: d})
		}
	}
	require.NoError(t, sc.Err())
	return out
}

func names(evs []sseEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Name)
	}
	return out
}

var streamBody = map[string]any{
	"model": "claude-test", "max_tokens": 100, "stream": true,
	"system":   []map[string]string{{"type": "text", "text": "be nice"}},
	"messages": []map[string]any{{"role": "user", "content": "hi"}},
	"tools":    []map[string]any{{"name": "Bash", "input_schema": map[string]any{"type": "object"}}},
}

func TestStreamShape(t *testing.T) {
	s := Start(WithTurns(Turn{
		Blocks: []Block{Thinking("let me think about it"), Text("héllo wörld, how are you"), ToolUse("mcp__srv__tool", map[string]int{"n": 1})},
		Usage:  &Usage{InputTokens: 7, OutputTokens: 9, CacheCreationInputTokens: 3, CacheReadInputTokens: 5},
	}))
	defer s.Close()
	resp := post(t, s.URL, streamBody, map[string]string{"x-api-key": "sk-abc"})
	defer func() { _ = resp.Body.Close() }()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream; charset=utf-8", resp.Header.Get("Content-Type"))
	assert.NotEmpty(t, resp.Header.Get("request-id"))
	evs := readSSE(t, resp.Body)
	got := names(evs)
	assert.Equal(t, []string{"message_start", "ping"}, got[:2])
	assert.Equal(t, []string{"message_delta", "message_stop"}, got[len(got)-2:])

	// Each block: start, deltas, stop, in index order; deltas concatenate.
	text := map[int]string{}
	var sig string
	starts := 0
	for _, e := range evs {
		switch e.Name {
		case "content_block_start":
			assert.EqualValues(t, starts, e.Data["index"])
			starts++
		case "content_block_delta":
			d := e.Data["delta"].(map[string]any)
			i := int(e.Data["index"].(float64))
			switch d["type"] {
			case "text_delta":
				text[i] += d["text"].(string)
			case "thinking_delta":
				text[i] += d["thinking"].(string)
			case "input_json_delta":
				text[i] += d["partial_json"].(string)
			case "signature_delta":
				sig = d["signature"].(string)
			}
		}
	}
	assert.Equal(t, 3, starts)
	assert.Equal(t, "let me think about it", text[0])
	assert.NotEmpty(t, sig, "thinking blocks end with a signature")
	assert.Equal(t, "héllo wörld, how are you", text[1])
	assert.JSONEq(t, `{"n":1}`, text[2])

	start := evs[0].Data["message"].(map[string]any)
	assert.Nil(t, start["stop_reason"])
	assert.Equal(t, "claude-test", start["model"])
	u := start["usage"].(map[string]any)
	assert.EqualValues(t, 7, u["input_tokens"])
	assert.EqualValues(t, 3, u["cache_creation_input_tokens"])
	assert.EqualValues(t, 5, u["cache_read_input_tokens"])
	delta := evs[len(evs)-2].Data
	assert.Equal(t, "tool_use", delta["delta"].(map[string]any)["stop_reason"])
	assert.EqualValues(t, 9, delta["usage"].(map[string]any)["output_tokens"])

	reqs := s.MessageRequests()
	require.Len(t, reqs, 1)
	r := reqs[0]
	assert.Equal(t, "sk-abc", r.APIKey)
	assert.Equal(t, "claude-test", r.Body.Model)
	assert.Equal(t, "be nice", r.Body.System.Text())
	assert.Equal(t, "hi", r.LastUserText())
	assert.Equal(t, []string{"Bash"}, r.ToolNames())
	assert.True(t, r.Body.Stream)
}

func TestNonStreaming(t *testing.T) {
	s := Start(WithTurns(Say("four")))
	defer s.Close()
	body := map[string]any{"model": "m", "max_tokens": 10, "messages": []map[string]any{{"role": "user", "content": "2+2?"}}}
	resp := post(t, s.URL, body, map[string]string{"Authorization": "Bearer tok"})
	defer func() { _ = resp.Body.Close() }()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var m map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
	assert.Equal(t, "message", m["type"])
	assert.Equal(t, "end_turn", m["stop_reason"])
	assert.Equal(t, "four", m["content"].([]any)[0].(map[string]any)["text"])
	assert.Equal(t, "tok", s.Requests()[0].APIKey)
}

func TestErrors(t *testing.T) {
	tests := map[string]struct {
		err        *APIError
		status     int
		typ        string
		retryAfter string
	}{
		"prompt too long": {ErrPromptTooLong, 400, "invalid_request_error", ""},
		"unauthorized":    {ErrUnauthorized, 401, "authentication_error", ""},
		"not found":       {ErrModelNotFound, 404, "not_found_error", ""},
		"rate limited":    {ErrRateLimited, 429, "rate_limit_error", "1"},
		"internal":        {ErrInternal, 500, "api_error", ""},
		"overloaded":      {ErrOverloaded, 529, "overloaded_error", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := Start(WithTurns(Fail(tc.err)))
			defer s.Close()
			resp := post(t, s.URL, streamBody, nil)
			defer func() { _ = resp.Body.Close() }()
			assert.Equal(t, tc.status, resp.StatusCode)
			assert.Equal(t, tc.retryAfter, resp.Header.Get("retry-after"))
			var body struct {
				Type  string `json:"type"`
				Error struct{ Type, Message string }
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
			assert.Equal(t, "error", body.Type)
			assert.Equal(t, tc.typ, body.Error.Type)
			assert.Equal(t, tc.err.Message, body.Error.Message)
		})
	}
}

func TestMidStreamError(t *testing.T) {
	s := Start(WithTurns(Turn{Blocks: []Block{Text("partial"), Text("never")}, MidStreamError: ErrOverloaded}))
	defer s.Close()
	resp := post(t, s.URL, streamBody, nil)
	defer func() { _ = resp.Body.Close() }()
	evs := readSSE(t, resp.Body)
	got := names(evs)
	assert.Equal(t, "error", got[len(got)-1])
	assert.NotContains(t, got, "message_stop")
	assert.Equal(t, "overloaded_error", evs[len(evs)-1].Data["error"].(map[string]any)["type"])
}

func TestDisconnect(t *testing.T) {
	s := Start(WithTurns(Turn{Blocks: []Block{Text("partial"), Text("never")}, Disconnect: true}))
	defer s.Close()
	b, _ := json.Marshal(streamBody)
	resp, err := http.Post(s.URL+"/v1/messages", "application/json", strings.NewReader(string(b)))
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	got, err := io.ReadAll(resp.Body)
	assert.Error(t, err, "the stream ends without its terminating chunk")
	assert.Contains(t, string(got), "partial")
	assert.NotContains(t, string(got), "message_stop")
}

func TestStall(t *testing.T) {
	for name, point := range map[string]StallPoint{"before headers": StallBeforeHeaders, "after start": StallAfterStart} {
		t.Run(name, func(t *testing.T) {
			s := Start(WithTurns(Turn{Blocks: []Block{Text("x")}, Stall: point}))
			defer s.Close()
			t0 := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			b, _ := json.Marshal(streamBody)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/v1/messages", strings.NewReader(string(b)))
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				_ = resp.Body.Close()
			}
			assert.ErrorIs(t, err, context.DeadlineExceeded, "the server holds the connection")
			assert.GreaterOrEqual(t, time.Since(t0), 300*time.Millisecond)
		})
	}
}

func TestCloseReleasesStalledRequests(t *testing.T) {
	s := Start(WithTurns(Turn{Stall: StallBeforeHeaders}))
	done := make(chan error, 1)
	go func() {
		b, _ := json.Marshal(streamBody)
		resp, err := http.Post(s.URL+"/v1/messages", "application/json", strings.NewReader(string(b)))
		if err == nil {
			_ = resp.Body.Close()
		}
		done <- err
	}()
	require.Eventually(t, func() bool { return len(s.Requests()) == 1 }, 5*time.Second, 5*time.Millisecond)
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close blocked on a stalled request")
	}
	if err := <-done; err != nil {
		t.Logf("the stalled client saw %v", err)
	}
}

func TestNoTurnLeft(t *testing.T) {
	s := Start()
	defer s.Close()
	resp := post(t, s.URL, streamBody, nil)
	defer func() { _ = resp.Body.Close() }()
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	b, _ := io.ReadAll(resp.Body)
	assert.Contains(t, string(b), "no scripted turn left for request 1")
}

func TestProbesAndCountTokens(t *testing.T) {
	s := Start()
	defer s.Close()
	resp, err := http.Head(s.URL + "/")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	b, _ := json.Marshal(streamBody)
	resp, err = http.Post(s.URL+"/v1/messages/count_tokens", "application/json", strings.NewReader(string(b)))
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	var n struct {
		InputTokens int `json:"input_tokens"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&n))
	assert.Positive(t, n.InputTokens)
	assert.Equal(t, 0, s.Pending())
}

func TestDemoScript(t *testing.T) {
	demo := Demo("/workspace")
	req := func(msgs ...Message) *Request { return &Request{Body: Body{Messages: msgs}} }
	user := func(blocks ...ContentBlock) Message { return Message{Role: "user", Content: blocks} }
	asst := func(blocks ...ContentBlock) Message { return Message{Role: "assistant", Content: blocks} }

	first := demo(req(user(ContentBlock{Type: "text", Text: "go"})))
	require.Len(t, first.Blocks, 2)
	assert.Equal(t, "Write", first.Blocks[1].Name)
	assert.JSONEq(t, `{"file_path":"/workspace/hello.txt","content":"hello from the sandbox\n"}`, string(first.Blocks[1].Input))

	afterWrite := demo(req(
		user(ContentBlock{Type: "text", Text: "go"}),
		asst(ContentBlock{Type: "tool_use", ID: "t1", Name: "Write"}),
		user(ContentBlock{Type: "tool_result", ToolUseID: "t1", Content: Content{{Type: "text", Text: "File created"}}}),
		Message{Role: "system", Content: Content{{Type: "text", Text: "agents list"}}},
	))
	require.Len(t, afterWrite.Blocks, 1)
	assert.Equal(t, "Bash", afterWrite.Blocks[0].Name)

	afterBash := demo(req(
		asst(ContentBlock{Type: "tool_use", ID: "t2", Name: "Bash"}),
		user(ContentBlock{Type: "tool_result", ToolUseID: "t2", Content: Content{{Type: "text", Text: "hello from the sandbox\n\n<system-reminder>\n<total_tokens>14999897 tokens left</total_tokens>\n</system-reminder>"}}}),
	))
	assert.Equal(t, "Done. `cat hello.txt` printed: hello from the sandbox", afterBash.Blocks[0].Text,
		"the CLI's <system-reminder> notes are not the tool's output and are not quoted")

	failed := demo(req(
		asst(ContentBlock{Type: "tool_use", ID: "t3", Name: "Bash"}),
		user(ContentBlock{Type: "tool_result", ToolUseID: "t3", IsError: true, Content: Content{{Type: "text", Text: "denied"}}}),
	))
	assert.Equal(t, "The Bash tool failed: denied", failed.Blocks[0].Text)
}

func TestContentDecoding(t *testing.T) {
	var m Message
	require.NoError(t, json.Unmarshal([]byte(`{"role":"user","content":"plain"}`), &m))
	assert.Equal(t, "plain", m.Content.Text())
	require.NoError(t, json.Unmarshal([]byte(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"out"}]}`), &m))
	assert.Equal(t, "out", m.Content[0].Content.Text())
	assert.Error(t, json.Unmarshal([]byte(`{"role":"user","content":5}`), &m))
}
