package openai_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/openai"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// fixedNow is the clock of tests with golden output.
func fixedNow() time.Time { return time.Unix(1763730000, 0) }

// serve starts the adapter over h.
func serve(t testing.TB, h middleware.Handler, mod ...func(*openai.Options)) *httptest.Server {
	t.Helper()
	cat, err := middleware.NewCatalog(
		&middleware.Assistant{ID: "coder", Name: "Coder", Sandbox: &middleware.Sandbox{Runner: "scripted"}},
		&middleware.Assistant{ID: "qa", Name: "Q&A"})
	require.NoError(t, err)
	o := openai.Options{Handler: h, Catalog: cat, Now: fixedNow}
	for _, m := range mod {
		m(&o)
	}
	s, err := openai.New(o)
	require.NoError(t, err)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv
}

// reply is a read response.
type reply struct {
	StatusCode int
	Header     http.Header
	Body       []byte
}

// post sends a chat completion request body and reads the response.
func post(t testing.TB, srv *httptest.Server, body string, headers ...string) *reply {
	t.Helper()
	return postTo(t, srv, "/v1/chat/completions", body, headers...)
}

// postTo sends body to path with headers (name, value pairs, each added:
// a name given twice is sent twice) and reads the response.
func postTo(t testing.TB, srv *httptest.Server, path, body string, headers ...string) *reply {
	t.Helper()
	return sendTo(t, srv, http.MethodPost, path, body, append([]string{"Content-Type", "application/json"}, headers...)...)
}

// sendTo sends a request with method, body and headers (as postTo's) to
// path and reads the response.
func sendTo(t testing.TB, srv *httptest.Server, method, path, body string, headers ...string) *reply {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return &reply{StatusCode: resp.StatusCode, Header: resp.Header, Body: b}
}

// scriptedHandler emits events and then answers with resp or err.
func scriptedHandler(events []executor.Event, resp *middleware.Response, err error) middleware.Handler {
	return middleware.HandlerFunc(func(_ context.Context, _ *middleware.Request, emit middleware.Emit) (*middleware.Response, error) {
		for _, ev := range events {
			if e := emit(ev); e != nil {
				return nil, e
			}
		}
		return resp, err
	})
}

const body = `{"model":"coder","messages":[{"role":"user","content":"hi"}],"user":"alice:1"}`

func streamBody(includeUsage bool) string {
	if includeUsage {
		return `{"model":"coder","messages":[{"role":"user","content":"hi"}],"user":"alice:1","stream":true,"stream_options":{"include_usage":true}}`
	}
	return `{"model":"coder","messages":[{"role":"user","content":"hi"}],"user":"alice:1","stream":true}`
}

type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func TestStatusOfEachKind(t *testing.T) {
	for name, tc := range map[string]struct {
		kind          middleware.Kind
		status        int
		errType, code string
		retry         string
	}{
		"bad request":   {middleware.KindBadRequest, 400, "invalid_request_error", "invalid_request", "false"},
		"not found":     {middleware.KindNotFound, 404, "invalid_request_error", "model_not_found", "false"},
		"busy":          {middleware.KindBusy, 409, "conflict_error", "chat_busy", "true"},
		"overloaded":    {middleware.KindOverloaded, 429, "rate_limit_error", "sandbox_capacity", "true"},
		"hook rejected": {middleware.KindHookRejected, 422, "invalid_request_error", "rejected_by_hook", "false"},
		"config":        {middleware.KindConfig, 500, "server_error", "assistant_misconfigured", "false"},
		"sandbox start": {middleware.KindSandboxStart, 500, "server_error", "sandbox_start_failed", "false"},
		"internal":      {middleware.KindInternal, 500, "server_error", "internal_error", "false"},
		"agent":         {middleware.KindAgent, 502, "server_error", "agent_failed", "false"},
		"sandbox gone":  {middleware.KindSandboxGone, 502, "server_error", "sandbox_gone", "false"},
		"unavailable":   {middleware.KindUnavailable, 503, "server_error", "unavailable", "true"},
		"timeout":       {middleware.KindTimeout, 504, "server_error", "agent_timeout", "false"},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(name+map[bool]string{true: " streamed", false: ""}[stream], func(t *testing.T) {
				srv := serve(t, scriptedHandler(nil, nil, middleware.Errorf(tc.kind, errors.New("cause with /internal/path"), "what to do next")))
				b := body
				if stream {
					b = streamBody(false)
				}
				resp := post(t, srv, b)
				assert.Equal(t, tc.status, resp.StatusCode)
				assert.Equal(t, tc.retry, resp.Header.Get("x-should-retry"))
				assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
				var e apiError
				require.NoError(t, json.Unmarshal(resp.Body, &e))
				assert.Equal(t, "what to do next", e.Error.Message, "the client sees the message, not the cause")
				assert.Equal(t, tc.errType, e.Error.Type)
				require.NotNil(t, e.Error.Code)
				assert.Equal(t, tc.code, *e.Error.Code)
				assert.Empty(t, resp.Header.Get("Retry-After"), "no Retry-After without an estimate")
			})
		}
	}
}

func TestOverloadedSaysWhenToRetry(t *testing.T) {
	e := middleware.Errorf(middleware.KindOverloaded, nil, "the gateway is at its sandbox capacity")
	e.RetryAfter = 2500 * time.Millisecond
	srv := serve(t, scriptedHandler(nil, nil, e))
	resp := post(t, srv, body)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "true", resp.Header.Get("x-should-retry"))
	assert.Equal(t, "3", resp.Header.Get("Retry-After"), "whole seconds, rounded up")
	assert.Equal(t, "2500", resp.Header.Get("retry-after-ms"))
}

func TestNonStreamedCompletion(t *testing.T) {
	resp := &middleware.Response{
		Content: "Hello", FinishReason: executor.FinishMaxTurns,
		Usage:      executor.Usage{InputTokens: 10, OutputTokens: 5, CacheCreationInputTokens: 100, CacheReadInputTokens: 1000},
		Completion: &executor.Completion{Usage: executor.Usage{InputTokens: 9}},
		Timings:    middleware.Timings{ContainerStart: 500 * time.Millisecond, Agent: 2 * time.Second, Total: 3 * time.Second},
	}
	srv := serve(t, scriptedHandler([]executor.Event{{Kind: executor.EventText, Text: "Hello"}}, resp, nil))
	r := post(t, srv, body)
	require.Equal(t, 200, r.StatusCode)
	var got map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &got))
	assert.Regexp(t, `^chatcmpl-[0-9a-f]{24}$`, got["id"])
	assert.Equal(t, got["id"], r.Header.Get("x-request-id"))
	assert.Equal(t, "chat.completion", got["object"])
	assert.Equal(t, "coder", got["model"])
	choice := got["choices"].([]any)[0].(map[string]any)
	assert.Equal(t, "length", choice["finish_reason"])
	assert.Equal(t, map[string]any{"role": "assistant", "content": "Hello", "refusal": nil}, choice["message"])
	assert.Equal(t, map[string]any{"prompt_tokens": 1110.0, "completion_tokens": 5.0, "total_tokens": 1115.0,
		"prompt_tokens_details": map[string]any{"cached_tokens": 1000.0}}, got["usage"])
	ext := got["agentbox"].(map[string]any)
	assert.Equal(t, "done", ext["kind"])
	assert.Equal(t, 500.0, ext["timings"].(map[string]any)["container_start_ms"])
	assert.Equal(t, 9.0, ext["usage"].(map[string]any)["input_tokens"])
}

// sse reads an SSE body into its data payloads, checking every line's
// length.
func sse(t testing.TB, r io.Reader) []string {
	t.Helper()
	br := bufio.NewReaderSize(r, 1<<20)
	var data []string
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			require.Less(t, len(line), 64<<10, "an SSE line of %d bytes breaks bufio.Scanner clients", len(line))
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				data = append(data, strings.TrimSuffix(d, "\n"))
			}
		}
		if errors.Is(err, io.EOF) {
			return data
		}
		require.NoError(t, err)
	}
}

var idRE = regexp.MustCompile(`chatcmpl-[0-9a-f]{24}`)

func TestStreamGolden(t *testing.T) {
	events := []executor.Event{
		{Kind: executor.EventSandbox, Text: middleware.SandboxReady},
		{Kind: executor.EventInit, Init: &executor.InitInfo{Model: "claude-test", Tools: []string{"Write", "Bash"}}},
		{Kind: executor.EventUI, UI: &executor.UIMessage{ID: "1", Action: "send", Type: "loading", Props: map[string]any{"message": "Preparing"}}},
		{Kind: executor.EventThinking, Text: "I should write the file."},
		{Kind: executor.EventToolUse, Tool: &executor.ToolUse{ID: "toolu_1", Name: "Write", Input: json.RawMessage(`{"file_path":"/workspace/hello.txt","content":"hi"}`)}},
		{Kind: executor.EventToolResult, ToolResult: &executor.ToolResult{ToolUseID: "toolu_1", Content: "File created"}},
		{Kind: executor.EventText, Text: "Done: "},
		{Kind: executor.EventText, Text: "hello.txt \"written\"."},
		{Kind: executor.EventSandbox, Text: middleware.SandboxClosed},
	}
	resp := &middleware.Response{Content: "Done: hello.txt \"written\".", FinishReason: executor.FinishStop,
		Usage:   executor.Usage{InputTokens: 10, OutputTokens: 5},
		Timings: middleware.Timings{Lease: time.Millisecond, Total: 3 * time.Second}}
	srv := serve(t, scriptedHandler(events, resp, nil))
	r := post(t, srv, streamBody(true))
	require.Equal(t, 200, r.StatusCode)
	assert.Equal(t, "text/event-stream", r.Header.Get("Content-Type"))
	raw := r.Body
	got := idRE.ReplaceAllString(string(raw), "chatcmpl-ID")
	golden := filepath.Join("testdata", "stream.golden")
	if *update {
		require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run go test -update to create it")
	assert.Equal(t, string(want), got)
}

// decoded is a chunk as a client sees it.
type decoded struct {
	Choices []struct {
		Delta struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage    *map[string]any `json:"usage"`
	Agentbox *struct {
		Kind       string               `json:"kind"`
		Text       string               `json:"text"`
		Tool       *executor.ToolUse    `json:"tool"`
		ToolResult *executor.ToolResult `json:"tool_result"`
		UI         *executor.UIMessage  `json:"ui"`
		Truncated  bool                 `json:"truncated"`
	} `json:"agentbox"`
}

func decodeAll(t testing.TB, data []string) (chunks []decoded, done bool) {
	t.Helper()
	for _, d := range data {
		if d == "[DONE]" {
			done = true
			continue
		}
		var c decoded
		require.NoError(t, json.Unmarshal([]byte(d), &c), d)
		chunks = append(chunks, c)
	}
	return chunks, done
}

// contentOf concatenates delta.content after the last reset.
func contentOf(chunks []decoded) string {
	var b strings.Builder
	for _, c := range chunks {
		if c.Agentbox != nil && c.Agentbox.Kind == "reset" {
			b.Reset()
		}
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != nil {
			b.WriteString(*c.Choices[0].Delta.Content)
		}
	}
	return b.String()
}

func TestStreamLinesStayUnder64KiB(t *testing.T) {
	huge := strings.Repeat("ü\x01\"<>&\u2028 plain text ", 20000) // ~440 KiB, worst-case escaping
	hugeJSON, err := json.Marshal(map[string]string{"content": huge})
	require.NoError(t, err)
	events := []executor.Event{
		{Kind: executor.EventThinking, Text: huge},
		{Kind: executor.EventToolUse, Tool: &executor.ToolUse{ID: "toolu_1", Name: "Write", Input: hugeJSON}},
		{Kind: executor.EventToolResult, ToolResult: &executor.ToolResult{ToolUseID: "toolu_1", Content: huge}},
		{Kind: executor.EventUI, UI: &executor.UIMessage{ID: "1", Action: "send", Props: map[string]any{"content": huge}}},
		{Kind: executor.EventText, Text: huge},
	}
	srv := serve(t, scriptedHandler(events, &middleware.Response{Content: huge, FinishReason: "stop"}, nil))
	r := post(t, srv, streamBody(false))
	chunks, done := decodeAll(t, sse(t, bytes.NewReader(r.Body)))
	assert.True(t, done)
	assert.Equal(t, huge, contentOf(chunks), "split text reassembles exactly")

	var thinking strings.Builder
	truncated := map[string]bool{}
	for _, c := range chunks {
		if c.Agentbox == nil {
			continue
		}
		switch c.Agentbox.Kind {
		case "thinking":
			thinking.WriteString(c.Agentbox.Text)
			assert.False(t, c.Agentbox.Truncated)
		case "tool_use":
			truncated["tool_use"] = c.Agentbox.Truncated
			assert.Equal(t, "toolu_1", c.Agentbox.Tool.ID)
			var s string
			require.NoError(t, json.Unmarshal(c.Agentbox.Tool.Input, &s), "a cut input is a JSON string")
			assert.Contains(t, s, "…[truncated by agentbox: ")
		case "tool_result":
			truncated["tool_result"] = c.Agentbox.Truncated
			assert.True(t, strings.HasSuffix(c.Agentbox.ToolResult.Content, fmt.Sprintf("…[truncated by agentbox: %d bytes in all]", len(huge))))
			assert.True(t, strings.HasPrefix(huge, strings.SplitN(c.Agentbox.ToolResult.Content, "…[truncated", 2)[0]))
		case "ui":
			truncated["ui"] = c.Agentbox.Truncated
		}
	}
	assert.Equal(t, huge, thinking.String(), "thinking is split, not cut")
	assert.Equal(t, map[string]bool{"tool_use": true, "tool_result": true, "ui": true}, truncated)
}

func TestStreamReconcilesTheFinalContent(t *testing.T) {
	for name, tc := range map[string]struct {
		streamed, final string
		reset           bool
	}{
		"same":                 {streamed: "abc", final: "abc"},
		"handler emitted none": {streamed: "", final: "plain answer"},
		"final extends it":     {streamed: "abc", final: "abc + footer"},
		"replaced":             {streamed: "abc", final: "xyz", reset: true},
	} {
		t.Run(name, func(t *testing.T) {
			var events []executor.Event
			if tc.streamed != "" {
				events = append(events, executor.Event{Kind: executor.EventText, Text: tc.streamed})
			}
			srv := serve(t, scriptedHandler(events, &middleware.Response{Content: tc.final, Replaced: tc.reset}, nil))
			chunks, done := decodeAll(t, sse(t, bytes.NewReader(post(t, srv, streamBody(false)).Body)))
			require.True(t, done)
			assert.Equal(t, tc.final, contentOf(chunks))
			resets := 0
			for _, c := range chunks {
				if c.Agentbox != nil && c.Agentbox.Kind == "reset" {
					resets++
				}
			}
			assert.Equal(t, map[bool]int{true: 1, false: 0}[tc.reset], resets)
		})
	}
}

func TestStreamErrorAfterStart(t *testing.T) {
	srv := serve(t, scriptedHandler([]executor.Event{{Kind: executor.EventSandbox, Text: "ready"}}, nil,
		middleware.Errorf(middleware.KindHookRejected, nil, "Node.js is required")))
	r := post(t, srv, streamBody(false))
	assert.Equal(t, 200, r.StatusCode, "the stream had started")
	data := sse(t, bytes.NewReader(r.Body))
	require.NotEmpty(t, data)
	last := data[len(data)-1]
	var e apiError
	require.NoError(t, json.Unmarshal([]byte(last), &e))
	assert.Equal(t, "Node.js is required", e.Error.Message)
	assert.Equal(t, "rejected_by_hook", *e.Error.Code)
	assert.NotContains(t, data, "[DONE]")
}

func TestRequestDecoding(t *testing.T) {
	for name, tc := range map[string]struct {
		body    string
		headers []string
		// want checks the request the handler got; status is 400 when
		// param is set.
		want  func(*testing.T, *middleware.Request)
		param string
		msg   string
	}{
		"ids from the user field": {body: body, want: func(t *testing.T, r *middleware.Request) {
			assert.Equal(t, [2]string{"alice", "1"}, [2]string{r.UserID, r.ChatID})
		}},
		"headers win over the field": {body: body, headers: []string{"X-Agentbox-User", "bob", "X-Agentbox-Chat", "7"},
			want: func(t *testing.T, r *middleware.Request) {
				assert.Equal(t, [2]string{"bob", "7"}, [2]string{r.UserID, r.ChatID})
			}},
		"chat header with user field": {body: `{"model":"coder","messages":[{"role":"user","content":"x"}],"user":"carol"}`,
			headers: []string{"X-Agentbox-Chat", "c-9"}, want: func(t *testing.T, r *middleware.Request) {
				assert.Equal(t, [2]string{"carol", "c-9"}, [2]string{r.UserID, r.ChatID})
			}},
		"bad chat header": {body: body, headers: []string{"X-Agentbox-Chat", "../etc"}, param: "X-Agentbox-Chat", msg: `chat "../etc" starts with`},
		"bad user field":  {body: `{"model":"coder","messages":[{"role":"user","content":"x"}],"user":"a/b:1"}`, param: "user", msg: "only [A-Za-z0-9_.-]"},
		"parts, developer role and options": {
			body: `{"model":"coder","temperature":0.2,"messages":[{"role":"developer","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`,
			want: func(t *testing.T, r *middleware.Request) {
				assert.Equal(t, []executor.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "ab"}}, r.Messages)
				assert.Equal(t, map[string]any{"temperature": 0.2}, r.Options)
				assert.Equal(t, "coder", r.AssistantID)
				assert.Equal(t, "coder", r.Model)
			}},
		"image part":       {body: `{"model":"coder","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, param: "messages[0].content[0].type", msg: "only text parts"},
		"tool message":     {body: `{"model":"coder","messages":[{"role":"tool","content":"x"}]}`, param: "messages[0].role", msg: "tools run inside the sandbox"},
		"n above one":      {body: `{"model":"coder","n":2,"messages":[{"role":"user","content":"x"}]}`, param: "n"},
		"no model":         {body: `{"messages":[{"role":"user","content":"x"}]}`, param: "model"},
		"no messages":      {body: `{"model":"coder","messages":[]}`, param: "messages"},
		"not JSON":         {body: `{"model":`, msg: "not a valid chat completion request"},
		"content a number": {body: `{"model":"coder","messages":[{"role":"user","content":5}]}`, param: "messages[0].content", msg: "must be a string"},
		"stream a string":  {body: `{"model":"coder","stream":"true","messages":[{"role":"user","content":"x"}]}`, param: "stream", msg: "stream is a string; send a boolean (true or false)"},
		"n a string":       {body: `{"model":"coder","n":"1","messages":[{"role":"user","content":"x"}]}`, param: "n", msg: "n is a string; send a number (an integer)"},
		"role a number":    {body: `{"model":"coder","messages":[{"role":7,"content":"x"}]}`, param: "messages[0].role", msg: "messages[0].role is a number; send a string"},
		"n a fraction":     {body: `{"model":"coder","n":1.5,"messages":[{"role":"user","content":"x"}]}`, msg: "not a valid chat completion request"},
	} {
		t.Run(name, func(t *testing.T) {
			var got *middleware.Request
			srv := serve(t, middleware.HandlerFunc(func(_ context.Context, r *middleware.Request, _ middleware.Emit) (*middleware.Response, error) {
				got = r
				return &middleware.Response{Content: "ok"}, nil
			}))
			resp := post(t, srv, tc.body, tc.headers...)
			if tc.want != nil {
				require.Equal(t, 200, resp.StatusCode)
				require.NotNil(t, got)
				tc.want(t, got)
				return
			}
			assert.Equal(t, 400, resp.StatusCode)
			assert.Nil(t, got, "the handler never sees a bad request")
			var e apiError
			require.NoError(t, json.Unmarshal(resp.Body, &e))
			if tc.param != "" {
				require.NotNil(t, e.Error.Param)
				assert.Equal(t, tc.param, *e.Error.Param)
			}
			assert.Contains(t, e.Error.Message, tc.msg)
		})
	}
}

func TestBodyCap(t *testing.T) {
	srv := serve(t, scriptedHandler(nil, &middleware.Response{}, nil), func(o *openai.Options) { o.MaxBodyBytes = 1024 })
	big := `{"model":"coder","messages":[{"role":"user","content":"` + strings.Repeat("x", 2048) + `"}]}`
	resp := post(t, srv, big)
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	var e apiError
	require.NoError(t, json.Unmarshal(resp.Body, &e))
	assert.Equal(t, "request_too_large", *e.Error.Code)
	assert.Contains(t, e.Error.Message, "larger than 1024 bytes")
}

func TestModels(t *testing.T) {
	srv := serve(t, middleware.UnknownAssistant)
	resp, err := srv.Client().Get(srv.URL + "/v1/models")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	var list struct {
		Object string           `json:"object"`
		Data   []map[string]any `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	assert.Equal(t, "list", list.Object)
	assert.Equal(t, []map[string]any{
		{"id": "coder", "object": "model", "created": 0.0, "owned_by": "agentbox", "name": "Coder", "sandbox": true},
		{"id": "qa", "object": "model", "created": 0.0, "owned_by": "agentbox", "name": "Q&A", "sandbox": false},
	}, list.Data)

	for path, status := range map[string]int{"/v1/models/qa": 200, "/v1/models/nope": 404, "/v1/nothing": 404} {
		resp, err := srv.Client().Get(srv.URL + path)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, status, resp.StatusCode, path)
		if path == "/v1/nothing" {
			assert.Contains(t, string(b), "this endpoint serves POST /v1/chat/completions, /v1/responses and /v1/messages, GET /v1/models",
				"the 404 names every door")
		}
	}
	resp2, err := srv.Client().Get(srv.URL + "/v1/chat/completions")
	require.NoError(t, err)
	_ = resp2.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp2.StatusCode)
	assert.Equal(t, "POST", resp2.Header.Get("Allow"))

	// An unknown model on the chat endpoint is a 404 about "model".
	r := post(t, srv, `{"model":"nope","messages":[{"role":"user","content":"x"}]}`)
	assert.Equal(t, 404, r.StatusCode)
	var e apiError
	require.NoError(t, json.Unmarshal(r.Body, &e))
	assert.Equal(t, "model", *e.Error.Param)
}

func TestClientDisconnectCancelsTheHandler(t *testing.T) {
	canceled := make(chan error, 1)
	started := make(chan struct{})
	srv := serve(t, middleware.HandlerFunc(func(ctx context.Context, _ *middleware.Request, emit middleware.Emit) (*middleware.Response, error) {
		_ = emit(executor.Event{Kind: executor.EventSandbox, Text: "ready"})
		close(started)
		<-ctx.Done()
		canceled <- ctx.Err()
		return nil, ctx.Err()
	}))
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(streamBody(false)))
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	<-started
	cancel()
	_ = resp.Body.Close()
	select {
	case err := <-canceled:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context was not canceled when the client went away")
	}
}

func TestHeartbeat(t *testing.T) {
	srv := serve(t, middleware.HandlerFunc(func(_ context.Context, _ *middleware.Request, emit middleware.Emit) (*middleware.Response, error) {
		_ = emit(executor.Event{Kind: executor.EventSandbox, Text: "ready"})
		time.Sleep(300 * time.Millisecond)
		return &middleware.Response{Content: "ok"}, nil
	}), func(o *openai.Options) { o.Heartbeat = 50 * time.Millisecond; o.Now = time.Now })
	raw := string(post(t, srv, streamBody(false)).Body)
	assert.Contains(t, raw, "\n: keep-alive\n")
	assert.NotContains(t, raw, ": keep-alive\n\n", "a blank line after the comment ends an empty event, which openai-go fails on")
}

// TestHeartbeatGoSDK streams a run with silent stretches of several
// heartbeats between its events through the official Go SDK, which failed
// with "unexpected end of JSON input" on the old keep-alive.
func TestHeartbeatGoSDK(t *testing.T) {
	srv := serve(t, middleware.HandlerFunc(func(_ context.Context, _ *middleware.Request, emit middleware.Emit) (*middleware.Response, error) {
		_ = emit(executor.Event{Kind: executor.EventSandbox, Text: "ready"})
		for _, part := range []string{"one ", "two ", "three"} {
			time.Sleep(250 * time.Millisecond)
			if err := emit(executor.Event{Kind: executor.EventText, Text: part}); err != nil {
				return nil, err
			}
		}
		time.Sleep(250 * time.Millisecond)
		return &middleware.Response{Content: "one two three"}, nil
	}), func(o *openai.Options) { o.Heartbeat = 40 * time.Millisecond; o.Now = time.Now })
	client := sdk.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("unused"))
	stream := client.Chat.Completions.NewStreaming(context.Background(), sdk.ChatCompletionNewParams{
		Model: "coder", Messages: []sdk.ChatCompletionMessageParamUnion{sdk.UserMessage("hi")}, User: sdk.String("alice:1"),
	})
	var text strings.Builder
	for stream.Next() {
		if c := stream.Current(); len(c.Choices) > 0 {
			text.WriteString(c.Choices[0].Delta.Content)
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, "one two three", text.String())
}

func TestAuthenticate(t *testing.T) {
	var got *middleware.Request
	srv := serve(t, middleware.HandlerFunc(func(_ context.Context, r *middleware.Request, _ middleware.Emit) (*middleware.Response, error) {
		got = r
		return &middleware.Response{Content: "ok"}, nil
	}), func(o *openai.Options) {
		o.Authenticate = func(r *http.Request) (string, error) {
			switch r.Header.Get("Authorization") {
			case "Bearer key-alice":
				return "alice", nil
			case "Bearer key-broken":
				return "../x", nil
			}
			return "", errors.New("unknown key")
		}
	})
	for name, tc := range map[string]struct {
		headers []string
		status  int
		user    string
	}{
		"authenticated user wins over header and field": {headers: []string{"Authorization", "Bearer key-alice", "X-Agentbox-User", "mallory"}, status: 200, user: "alice"},
		"unknown key":            {headers: []string{"Authorization", "Bearer nope", "X-Agentbox-User", "alice"}, status: 401},
		"no key":                 {status: 401},
		"authenticator's bad id": {headers: []string{"Authorization", "Bearer key-broken"}, status: 401},
	} {
		t.Run(name, func(t *testing.T) {
			got = nil
			resp := post(t, srv, `{"model":"coder","messages":[{"role":"user","content":"x"}],"user":"mallory:1"}`, tc.headers...)
			assert.Equal(t, tc.status, resp.StatusCode)
			if tc.status != 200 {
				assert.Nil(t, got)
				var e apiError
				require.NoError(t, json.Unmarshal(resp.Body, &e))
				assert.Equal(t, "authentication_error", e.Error.Type)
				assert.Equal(t, "false", resp.Header.Get("x-should-retry"))
				return
			}
			require.NotNil(t, got)
			assert.Equal(t, tc.user, got.UserID)
			assert.Equal(t, "1", got.ChatID, "the chat still comes from the field")
		})
	}
	for key, status := range map[string]int{"Bearer key-alice": 200, "Bearer nope": 401} {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/models", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", key)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, status, resp.StatusCode, "GET /v1/models with %s", key)
	}
}

// TestSlowBodyTimesOut: a client that sends its body a byte at a time is
// answered 408 once the body timeout passes, and its connection is let
// go; a request whose body arrived in time keeps its connection for the
// whole run, however long the run is.
func TestSlowBodyTimesOut(t *testing.T) {
	slowRun := middleware.HandlerFunc(func(ctx context.Context, _ *middleware.Request, emit middleware.Emit) (*middleware.Response, error) {
		select {
		case <-time.After(500 * time.Millisecond): // five body timeouts
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &middleware.Response{Content: "late but whole", FinishReason: executor.FinishStop}, nil
	})
	srv := serve(t, slowRun, func(o *openai.Options) { o.BodyTimeout = 100 * time.Millisecond })

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	_, err = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", len(body))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second))) // a backstop, not the assertion
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "the server answers while the body is still owed")
	defer func() { _ = resp.Body.Close() }()
	assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode)

	got := post(t, srv, body)
	require.Equal(t, http.StatusOK, got.StatusCode, "%s", got.Body)
	assert.Contains(t, string(got.Body), "late but whole", "the body deadline does not cut the run")
}
