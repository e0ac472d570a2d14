package anthropicopenai_test

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/internal/testkit/scriptedopenai"
	"github.com/agentbox/agentbox/services/modelproxy/anthropicopenai"
)

// anthropicHost is never dialled: the Transport answers every call.
const anthropicHost = "http://anthropic.invalid"

func transport(t *testing.T, s *scriptedopenai.Server, o anthropicopenai.Options) *anthropicopenai.Transport {
	t.Helper()
	o.BaseURL, o.APIKey = s.URL, "sk-provider"
	tr, err := anthropicopenai.New(o)
	require.NoError(t, err)
	return tr
}

// post sends body to path through tr and returns the response with its
// body read and closed.
func post(t *testing.T, tr http.RoundTripper, path, body string) (reply, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, anthropicHost+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return reply{StatusCode: resp.StatusCode, Header: resp.Header, ReadErr: err}, b
}

// reply is what a test reads of a response once its body is consumed.
type reply struct {
	StatusCode int
	Header     http.Header
	// ReadErr is how reading the body ended (nil for a clean end).
	ReadErr error
}

func goldenFile(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "response", name)
	if f := flag.Lookup("update"); f != nil && f.Value.String() == "true" {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run go test -run %s -update", t.Name())
	require.Equal(t, string(want), string(got), "differs from %s; if intended, rerun with -update and review", path)
}

func request(stream bool) string {
	return `{"model":"claude-sonnet-4-5","max_tokens":500,"stream":` + map[bool]string{true: "true", false: "false"}[stream] +
		`,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"Bash","input_schema":{"type":"object"}}]}`
}

var responseCases = []struct {
	name string
	turn scriptedopenai.Turn
	opts anthropicopenai.Options
	// check runs on the message the official SDK accumulated.
	check func(t *testing.T, m anthropic.Message)
}{
	{name: "text", turn: scriptedopenai.Turn{Text: "Hello there, general user.", Usage: &scriptedopenai.Usage{PromptTokens: 40, CompletionTokens: 6}},
		check: func(t *testing.T, m anthropic.Message) {
			require.Len(t, m.Content, 1)
			assert.Equal(t, "Hello there, general user.", m.Content[0].Text)
			assert.Equal(t, anthropic.StopReasonEndTurn, m.StopReason)
			assert.EqualValues(t, 40, m.Usage.InputTokens)
			assert.EqualValues(t, 6, m.Usage.OutputTokens)
		}},
	{name: "tool_many_chunks", turn: scriptedopenai.Turn{Pieces: 40, Calls: []scriptedopenai.Call{
		scriptedopenai.NewCall("Bash", map[string]string{"command": "echo 'héllo wörld ✓ 世界' > /tmp/ü.txt", "description": "write a file"})}},
		check: func(t *testing.T, m anthropic.Message) {
			require.Len(t, m.Content, 1)
			tu := m.Content[0]
			assert.Equal(t, "tool_use", tu.Type)
			assert.Equal(t, "Bash", tu.Name)
			var in map[string]string
			require.NoError(t, json.Unmarshal(tu.Input, &in))
			assert.Equal(t, "echo 'héllo wörld ✓ 世界' > /tmp/ü.txt", in["command"])
			assert.Equal(t, anthropic.StopReasonToolUse, m.StopReason)
		}},
	{name: "parallel_tools", turn: scriptedopenai.Turn{Text: "Two at once.", Calls: []scriptedopenai.Call{
		scriptedopenai.NewCall("Read", map[string]string{"file_path": "/a"}), scriptedopenai.NewCall("Read", map[string]string{"file_path": "/b"})}},
		check: func(t *testing.T, m anthropic.Message) {
			require.Len(t, m.Content, 3)
			assert.Equal(t, "Two at once.", m.Content[0].Text)
			assert.JSONEq(t, `{"file_path":"/a"}`, string(m.Content[1].Input))
			assert.JSONEq(t, `{"file_path":"/b"}`, string(m.Content[2].Input))
			assert.NotEqual(t, m.Content[1].ID, m.Content[2].ID)
		}},
	{name: "reasoning", turn: scriptedopenai.Turn{Reasoning: "The user greets; greet back.", Text: "Hi!"},
		check: func(t *testing.T, m anthropic.Message) {
			require.Len(t, m.Content, 2)
			assert.Equal(t, "thinking", m.Content[0].Type)
			assert.Equal(t, "The user greets; greet back.", m.Content[0].Thinking)
			assert.NotEmpty(t, m.Content[0].Signature)
			assert.Equal(t, "Hi!", m.Content[1].Text)
		}},
	{name: "empty", turn: scriptedopenai.Turn{},
		check: func(t *testing.T, m anthropic.Message) {
			assert.Empty(t, m.Content)
			assert.Equal(t, anthropic.StopReasonEndTurn, m.StopReason)
		}},
	{name: "cached_usage", turn: scriptedopenai.Turn{Text: "ok", FinishReason: "length", Usage: &scriptedopenai.Usage{PromptTokens: 1000, CompletionTokens: 3, CachedTokens: 800}},
		check: func(t *testing.T, m anthropic.Message) {
			assert.EqualValues(t, 200, m.Usage.InputTokens, "input excludes cache reads, as Anthropic counts")
			assert.EqualValues(t, 800, m.Usage.CacheReadInputTokens)
			assert.EqualValues(t, 3, m.Usage.OutputTokens)
			assert.Equal(t, anthropic.StopReasonMaxTokens, m.StopReason)
		}},
}

// TestResponseGolden runs each turn through the Transport, streamed and
// not, compares the bytes with golden files and decodes them with the
// official Anthropic SDK.
func TestResponseGolden(t *testing.T) {
	for _, tc := range responseCases {
		for _, stream := range []bool{true, false} {
			name := tc.name + map[bool]string{true: ".sse", false: ".json"}[stream]
			t.Run(name, func(t *testing.T) {
				o := tc.opts
				o.StreamUsage = true
				s := scriptedopenai.Start(scriptedopenai.WithTurns(tc.turn, tc.turn))
				defer s.Close()
				tr := transport(t, s, o)
				resp, b := post(t, tr, "/v1/messages", request(stream))
				require.NoError(t, resp.ReadErr)
				require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
				goldenFile(t, name, b)
				assert.Equal(t, "Bearer sk-provider", s.Requests()[0].Header.Get("Authorization"))

				c := anthropic.NewClient(aoption.WithBaseURL(anthropicHost), aoption.WithAPIKey("x"),
					aoption.WithHTTPClient(&http.Client{Transport: tr}), aoption.WithMaxRetries(0))
				params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 500,
					Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
				var m anthropic.Message
				if stream {
					st := c.Messages.NewStreaming(context.Background(), params)
					for st.Next() {
						require.NoError(t, m.Accumulate(st.Current()))
					}
					require.NoError(t, st.Err())
				} else {
					got, err := c.Messages.New(context.Background(), params)
					require.NoError(t, err)
					m = *got
				}
				assert.Equal(t, "claude-sonnet-4-5", m.Model)
				tc.check(t, m)
			})
		}
	}
}

func TestStreamFailures(t *testing.T) {
	cases := []struct {
		name, wantType, wantMsg string
		turn                    scriptedopenai.Turn
	}{
		{name: "provider_error_mid_stream", turn: scriptedopenai.Turn{Text: "partial answer that breaks", MidStreamError: &scriptedopenai.APIError{Message: "model overloaded, try later"}},
			wantType: "api_error", wantMsg: "provider said: model overloaded, try later"},
		{name: "context_error_mid_stream", turn: scriptedopenai.Turn{Text: "partial answer that breaks", MidStreamError: scriptedopenai.ContextTooLong()},
			wantType: "invalid_request_error", wantMsg: "prompt is too long"},
		{name: "cut", turn: scriptedopenai.Turn{Text: "partial answer that is cut", Cut: true},
			wantType: "api_error", wantMsg: "ended before it finished"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := scriptedopenai.Start(scriptedopenai.WithTurns(tc.turn, tc.turn))
			defer s.Close()
			tr := transport(t, s, anthropicopenai.Options{})
			resp, b := post(t, tr, "/v1/messages", request(true))
			if tc.name == "cut" {
				assert.ErrorIs(t, resp.ReadErr, io.ErrUnexpectedEOF, "a cut stream also ends the body with an error, which the proxy records")
			} else {
				assert.NoError(t, resp.ReadErr, "a provider error is an Anthropic error event, then a clean end")
			}
			goldenFile(t, tc.name+".sse", b)
			assert.Contains(t, string(b), "event: error\n")
			assert.NotContains(t, string(b), "message_stop", "a failed stream does not end like a finished one")

			c := anthropic.NewClient(aoption.WithBaseURL(anthropicHost), aoption.WithAPIKey("x"),
				aoption.WithHTTPClient(&http.Client{Transport: tr}), aoption.WithMaxRetries(0))
			st := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{Model: "m", MaxTokens: 5,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
			for st.Next() {
			}
			require.Error(t, st.Err())
			assert.Contains(t, st.Err().Error(), tc.wantType)
			assert.Contains(t, st.Err().Error(), tc.wantMsg)
		})
	}
}

func TestErrorMapping(t *testing.T) {
	cases := []struct {
		name       string
		err        *scriptedopenai.APIError
		wantStatus int
		wantType   string
		wantMsg    string
	}{
		{name: "rate_limit", err: &scriptedopenai.APIError{Status: 429, Message: "Rate limit reached for requests", RetryAfter: "7"}, wantStatus: 429, wantType: "rate_limit_error", wantMsg: "Rate limit reached"},
		{name: "server_error", err: &scriptedopenai.APIError{Status: 500, Message: "internal failure xyz"}, wantStatus: 500, wantType: "api_error", wantMsg: "internal failure xyz"},
		{name: "unavailable", err: &scriptedopenai.APIError{Status: 503, Message: "busy"}, wantStatus: 529, wantType: "overloaded_error", wantMsg: "busy"},
		{name: "context_too_long", err: scriptedopenai.ContextTooLong(), wantStatus: 400, wantType: "invalid_request_error", wantMsg: "prompt is too long: provider said: This model's maximum context length"},
		{name: "invalid", err: &scriptedopenai.APIError{Status: 400, Message: "tools[0].function.name is invalid"}, wantStatus: 400, wantType: "invalid_request_error", wantMsg: "provider said: tools[0].function.name is invalid"},
		{name: "auth", err: &scriptedopenai.APIError{Status: 401, Message: "Incorrect API key provided"}, wantStatus: 401, wantType: "authentication_error", wantMsg: "Incorrect API key"},
	}
	for _, tc := range cases {
		for _, stream := range []bool{true, false} {
			t.Run(tc.name+map[bool]string{true: "/stream", false: "/json"}[stream], func(t *testing.T) {
				s := scriptedopenai.Start(scriptedopenai.WithTurns(scriptedopenai.Fail(tc.err)))
				defer s.Close()
				resp, b := post(t, transport(t, s, anthropicopenai.Options{}), "/v1/messages", request(stream))
				assert.Equal(t, tc.wantStatus, resp.StatusCode)
				assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
				assert.Equal(t, tc.err.RetryAfter, resp.Header.Get("Retry-After"))
				var e struct {
					Type  string
					Error struct{ Type, Message string }
				}
				require.NoError(t, json.Unmarshal(b, &e), string(b))
				assert.Equal(t, "error", e.Type)
				assert.Equal(t, tc.wantType, e.Error.Type)
				assert.Contains(t, e.Error.Message, tc.wantMsg)
			})
		}
	}
}

func TestCountTokensAndProbes(t *testing.T) {
	s := scriptedopenai.Start()
	defer s.Close()
	tr := transport(t, s, anthropicopenai.Options{})
	small := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("word ", 4000) + `"}]}`
	count := func(body string) int {
		resp, b := post(t, tr, "/v1/messages/count_tokens", body)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var c struct {
			InputTokens int `json:"input_tokens"`
		}
		require.NoError(t, json.Unmarshal(b, &c))
		return c.InputTokens
	}
	n, m := count(small), count(big)
	assert.Positive(t, n)
	assert.Greater(t, m, 100*n, "the estimate grows with the prompt")
	assert.Empty(t, s.Requests(), "count_tokens never reaches the provider")

	resp, _ := post(t, tr, "/v1/messages/count_tokens", `{`)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, _ = post(t, tr, "/v1/models", `{}`)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	req, _ := http.NewRequest(http.MethodHead, anthropicHost+"/", nil)
	hr, err := tr.RoundTrip(req)
	require.NoError(t, err)
	_ = hr.Body.Close()
	assert.Equal(t, http.StatusOK, hr.StatusCode)
}
