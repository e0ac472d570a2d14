package openairesponses

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/agentbox/agentbox/internal/testkit/scriptedopenai"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or writes it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run go test -run %s -update", t.Name())
	require.Equal(t, string(want), string(got), "differs from %s; if the change is intended run with -update and review the diff", path)
}

// goldenJSON compares the JSON got with testdata/name as JSON (names in
// any order, strings however escaped), or writes it under -update: an
// upstream body's field order and escapes are the encoder's, not the
// translation's.
func goldenJSON(t *testing.T, name string, got []byte) {
	t.Helper()
	if *update {
		golden(t, name, indent(t, got))
		return
	}
	want, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err, "missing golden file; run go test -run %s -update", t.Name())
	require.JSONEq(t, string(want), string(got), "differs from testdata/%s; if the change is intended run with -update and review the diff", name)
}

func indent(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, json.Indent(&out, b, "", "  "))
	out.WriteByte('\n')
	return out.Bytes()
}

// fixedIDs makes ids and timestamps deterministic for the test.
func fixedIDs(t *testing.T) {
	t.Helper()
	var n atomic.Int64
	oldID, oldNow := newID, now
	newID = func(prefix string) string { return fmt.Sprintf("%s%03d", prefix, n.Add(1)) }
	now = func() time.Time { return time.Unix(1_800_000_000, 0) }
	t.Cleanup(func() { newID, now = oldID, oldNow })
}

// readRequest reads testdata/request/name.json, with stream set.
func readRequest(t *testing.T, name string, stream bool) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "request", name+".json"))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	m["stream"] = stream
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

// TestRequestGolden translates each Responses request of testdata/request
// (codex_turn is one the Codex CLI 0.171.0 sent, cut short) to Chat
// Completions and to Messages.
func TestRequestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/request/*.json")
	require.NoError(t, err)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		if strings.Contains(name, ".") {
			continue // a golden file
		}
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(f)
			require.NoError(t, err)
			r, err := decodeRequest(raw)
			require.NoError(t, err)
			chat, err := chatBody(r, ChatOptions{StreamUsage: true, ThinkingParam: ThinkingReasoningEffort, MaxTokensCeiling: 64000})
			require.NoError(t, err)
			goldenJSON(t, "request/"+name+".chat.json", chat)
			msgs, err := messagesBody(r, MessagesOptions{Model: "claude-sonnet-4-5"})
			require.NoError(t, err)
			goldenJSON(t, "request/"+name+".messages.json", msgs)
		})
	}
}

// call runs one Responses request through tr and returns the answer as
// "status\n\nbody".
func call(t *testing.T, tr *Transport, body []byte) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://proxy/v1/responses", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk-connector")
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		out = indent(t, out)
	}
	return append([]byte(fmt.Sprintf("%d %s\n\n", resp.StatusCode, resp.Header.Get("Content-Type"))), out...)
}

// chatCases are scripted Chat Completions answers, each with the request
// it answers.
var chatCases = map[string]struct {
	request string
	stream  bool
	turn    scriptedopenai.Turn
}{
	"text_cached_usage": {"string_input", true, scriptedopenai.Turn{Text: "Two, ✓ héllo", Pieces: 4,
		Usage: &scriptedopenai.Usage{PromptTokens: 1000, CompletionTokens: 7, CachedTokens: 800}}},
	"reasoning": {"string_input", true, scriptedopenai.Turn{Reasoning: "Sum of ones.", Text: "Two."}},
	"custom_and_function_calls": {"codex_turn", true, scriptedopenai.Turn{Text: "Doing both.", Pieces: 3, Calls: []scriptedopenai.Call{
		scriptedopenai.NewCall("exec_command", map[string]string{"cmd": "ls"}),
		scriptedopenai.NewCall("apply_patch", map[string]string{"input": "*** Begin Patch\n*** Add File: a.txt\n+a\n*** End Patch\n"})}}},
	"namespace_and_search_calls": {"tool_search", true, scriptedopenai.Turn{Calls: []scriptedopenai.Call{
		scriptedopenai.NewCall("mcp__gateway__whoami", map[string]string{}),
		scriptedopenai.NewCall("tool_search", map[string]any{"query": "files", "limit": 3})}}},
	"output_limit":     {"string_input", true, scriptedopenai.Turn{Text: "Two and", FinishReason: "length"}},
	"error_mid_stream": {"string_input", true, scriptedopenai.Turn{Text: "Two and more", MidStreamError: &scriptedopenai.APIError{Status: 500, Message: "upstream failed"}}},
	"cut":              {"string_input", true, scriptedopenai.Turn{Text: "Two and more", Cut: true}},
	"not_streamed":     {"codex_turn", false, scriptedopenai.Turn{Text: "Done.", Calls: []scriptedopenai.Call{scriptedopenai.NewCall("apply_patch", map[string]string{"input": "*** Begin Patch\n*** End Patch\n"})}}},
	"context_too_long": {"string_input", true, scriptedopenai.Fail(scriptedopenai.ContextTooLong())},
	"rate_limited":     {"string_input", true, scriptedopenai.Fail(&scriptedopenai.APIError{Status: 429, Message: "slow down", RetryAfter: "2"})},
}

// TestChatResponseGolden translates scripted Chat Completions answers.
func TestChatResponseGolden(t *testing.T) {
	for name, tc := range chatCases {
		t.Run(name, func(t *testing.T) {
			fixedIDs(t)
			api := scriptedopenai.Start(scriptedopenai.WithTurns(tc.turn))
			defer api.Close()
			tr, err := NewChat(ChatOptions{BaseURL: api.URL, StreamUsage: true})
			require.NoError(t, err)
			golden(t, "out/chat/"+name+".txt", call(t, tr, readRequest(t, tc.request, tc.stream)))
			got := api.Requests()[0]
			require.Equal(t, "sk-connector", got.APIKey, "the incoming bearer key goes on")
		})
	}
}

// TestMessagesResponseGolden translates the Messages answers of
// testdata/messages (event streams and whole messages).
func TestMessagesResponseGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/messages/*")
	require.NoError(t, err)
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			fixedIDs(t)
			raw, err := os.ReadFile(f)
			require.NoError(t, err)
			var key, version string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				key, version = r.Header.Get("X-Api-Key"), r.Header.Get("Anthropic-Version")
				if strings.HasSuffix(name, ".sse") {
					w.Header().Set("Content-Type", "text/event-stream")
				} else {
					w.Header().Set("Content-Type", "application/json")
				}
				_, _ = w.Write(raw)
			}))
			defer srv.Close()
			tr, err := NewMessages(MessagesOptions{BaseURL: srv.URL})
			require.NoError(t, err)
			golden(t, "out/messages/"+strings.TrimSuffix(name, filepath.Ext(name))+filepath.Ext(name)+".txt",
				call(t, tr, readRequest(t, "codex_turn", strings.HasSuffix(name, ".sse"))))
			require.Equal(t, "sk-connector", key)
			require.Equal(t, anthropicVersion, version)
		})
	}
}

// TestMessagesErrors translates the Messages API's error answers: the
// status stays, the code says what the CLI needs (a context overflow is
// not retried).
func TestMessagesErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		status   int
		body     string
		wantCode string
	}{
		"prompt too long": {400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 250000 tokens > 200000 maximum"}}`, contextExceeded},
		"rate limited":    {429, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, "rate_limit_exceeded"},
		"overloaded":      {529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, "server_error"},
		"bad key":         {401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`, "invalid_api_key"},
		"not json":        {502, `bad gateway`, "bad gateway"},
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			tr, err := NewMessages(MessagesOptions{BaseURL: srv.URL})
			require.NoError(t, err)
			out := call(t, tr, readRequest(t, "string_input", true))
			require.True(t, bytes.HasPrefix(out, []byte(fmt.Sprint(tc.status))), "%s", out)
			body := out[bytes.Index(out, []byte("\n\n"))+2:]
			if tc.wantCode == "bad gateway" {
				require.Equal(t, "server_error", gjson.GetBytes(body, "error.type").String())
				return
			}
			require.Equal(t, tc.wantCode, gjson.GetBytes(body, "error.code").String(), "%s", body)
		})
	}
}
