package openai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/openai"
)

// doorEvents are the run of the doors' golden tests: lifecycle, thinking,
// a tool call and its result, text around it.
func doorEvents() ([]executor.Event, *middleware.Response) {
	events := []executor.Event{
		{Kind: executor.EventSandbox, Text: middleware.SandboxReady},
		{Kind: executor.EventInit, Init: &executor.InitInfo{Model: "claude-test", Tools: []string{"Write", "Bash"}}},
		{Kind: executor.EventThinking, Text: "I should write the file."},
		{Kind: executor.EventText, Text: "Writing it. "},
		{Kind: executor.EventToolUse, Tool: &executor.ToolUse{ID: "toolu_1", Name: "Write", Input: json.RawMessage(`{"file_path":"/workspace/hello.txt","content":"hi"}`)}},
		{Kind: executor.EventToolResult, ToolResult: &executor.ToolResult{ToolUseID: "toolu_1", Content: "File created"}},
		{Kind: executor.EventText, Text: "Done: "},
		{Kind: executor.EventText, Text: "hello.txt \"written\" ✓."},
		{Kind: executor.EventSandbox, Text: middleware.SandboxClosed},
	}
	resp := &middleware.Response{Content: "Writing it. Done: hello.txt \"written\" ✓.", FinishReason: executor.FinishStop,
		Usage:   executor.Usage{InputTokens: 10, OutputTokens: 5, CacheReadInputTokens: 100},
		Timings: middleware.Timings{Lease: time.Millisecond, Total: 3 * time.Second}}
	return events, resp
}

// doorIDRE matches the doors' random ids.
var doorIDRE = regexp.MustCompile(`\b(resp|msg|rs|mcp)_[0-9a-f]{24}\b`)

// normalizeIDs numbers the random ids of body in order of appearance.
func normalizeIDs(body string) string {
	seen := map[string]string{}
	return doorIDRE.ReplaceAllStringFunc(body, func(id string) string {
		if n, ok := seen[id]; ok {
			return n
		}
		n := id[:strings.IndexByte(id, '_')+1] + string(rune('A'+len(seen)))
		seen[id] = n
		return n
	})
}

// golden compares got with testdata/name (-update rewrites it).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create it")
	assert.Equal(t, string(want), got)
}

// TestDoorGoldens: the event sequence of each door for one run, as the
// adapter writes it (the official SDKs' reading of the same run is
// TestResponsesGoSDK and TestMessagesGoSDK).
func TestDoorGoldens(t *testing.T) {
	events, resp := doorEvents()
	srv := serve(t, scriptedHandler(events, resp, nil))
	for name, tc := range map[string]struct{ path, body, golden string }{
		"responses streamed": {"/v1/responses", `{"model":"coder","input":"write hello.txt","user":"alice:1","stream":true,"metadata":{"ticket":"T-1"}}`, "responses_stream.golden"},
		"responses whole":    {"/v1/responses", `{"model":"coder","input":"write hello.txt","user":"alice:1","instructions":"be brief"}`, "responses.golden"},
		"messages streamed":  {"/v1/messages", `{"model":"coder","max_tokens":1024,"messages":[{"role":"user","content":"write hello.txt"}],"metadata":{"user_id":"alice:1"},"stream":true}`, "messages_stream.golden"},
		"messages whole":     {"/v1/messages", `{"model":"coder","max_tokens":1024,"messages":[{"role":"user","content":"write hello.txt"}],"metadata":{"user_id":"alice:1"}}`, "messages.golden"},
	} {
		t.Run(name, func(t *testing.T) {
			r := postTo(t, srv, tc.path, tc.body)
			require.Equal(t, http.StatusOK, r.StatusCode, string(r.Body))
			if strings.Contains(tc.body, `"stream":true`) {
				assert.Equal(t, "text/event-stream", r.Header.Get("Content-Type"))
				for _, line := range strings.Split(string(r.Body), "\n") {
					assert.Less(t, len(line), openai.MaxLine)
				}
			}
			golden(t, tc.golden, normalizeIDs(string(r.Body)))
		})
	}
}

// recordingHandler answers with events and resp, recording the requests.
type recordingHandler struct {
	events []executor.Event
	resp   *middleware.Response
	err    error

	mu   sync.Mutex
	reqs []*middleware.Request
}

func (h *recordingHandler) Handle(_ context.Context, req *middleware.Request, emit middleware.Emit) (*middleware.Response, error) {
	h.mu.Lock()
	h.reqs = append(h.reqs, req)
	h.mu.Unlock()
	for _, ev := range h.events {
		if err := emit(ev); err != nil {
			return nil, err
		}
	}
	if h.err != nil {
		return nil, h.err
	}
	r := *h.resp
	return &r, nil
}

func (h *recordingHandler) last() *middleware.Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reqs[len(h.reqs)-1]
}

// TestResponsesGoSDK: openai-go reads the door's streamed and whole
// responses as OpenAI's, and continues a conversation by
// previous_response_id alone.
func TestResponsesGoSDK(t *testing.T) {
	events, resp := doorEvents()
	h := &recordingHandler{events: events, resp: resp}
	srv := serve(t, h)
	client := sdk.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("unused"), option.WithHeader(openai.HeaderUser, "alice"))
	ctx := context.Background()

	first, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "coder", Instructions: sdk.String("be brief"),
		Input:    responses.ResponseNewParamsInputUnion{OfString: sdk.String("write hello.txt")},
		Metadata: map[string]string{"ticket": "T-1"},
	})
	require.NoError(t, err)
	assert.Equal(t, resp.Content, first.OutputText())
	assert.Equal(t, responses.ResponseStatusCompleted, first.Status)
	assert.Equal(t, int64(110), first.Usage.InputTokens)
	assert.Equal(t, int64(100), first.Usage.InputTokensDetails.CachedTokens)
	var types []string
	for _, it := range first.Output {
		types = append(types, it.Type)
	}
	assert.Equal(t, []string{"reasoning", "message", "mcp_call", "message"}, types, "tool calls are mcp_call items, never function_call")
	assert.Equal(t, "Write", first.Output[2].Name)
	assert.Equal(t, "File created", first.Output[2].Output.OfString)
	req := h.last()
	assert.Equal(t, first.ID, req.ChatID, "a conversation's first response names its chat")
	assert.Equal(t, map[string]any{"ticket": "T-1"}, req.Options["metadata"], "metadata reaches the hooks")
	assert.Equal(t, []executor.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "write hello.txt"}}, req.Messages)

	got, err := client.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	require.NoError(t, err)
	assert.Equal(t, first.RawJSON(), got.RawJSON(), "GET answers the stored response")

	// The second turn, streamed, by previous_response_id only.
	stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: "coder", PreviousResponseID: sdk.String(first.ID), Instructions: sdk.String("be brief"),
		Input: responses.ResponseNewParamsInputUnion{OfString: sdk.String("now run it")},
	})
	var text strings.Builder
	var seq []int64
	var completed responses.Response
	kinds := map[string]int{}
	for stream.Next() {
		ev := stream.Current()
		seq = append(seq, ev.SequenceNumber)
		kinds[ev.Type]++
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed":
			completed = ev.Response
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, resp.Content, text.String())
	assert.Equal(t, resp.Content, completed.OutputText())
	for i, n := range seq {
		assert.Equal(t, int64(i), n, "sequence numbers count the events")
	}
	assert.Equal(t, 1, kinds["response.created"])
	assert.Equal(t, 3, kinds["agentbox"], "sandbox ready, init, sandbox closed travel in the extension")
	assert.Zero(t, kinds["response.function_call_arguments.delta"])
	req = h.last()
	assert.Equal(t, first.ID, req.ChatID, "the chat of the first response")
	assert.Equal(t, []executor.Message{
		{Role: "system", Content: "be brief"}, {Role: "user", Content: "write hello.txt"},
		{Role: "assistant", Content: resp.Content}, {Role: "user", Content: "now run it"},
	}, req.Messages, "the history of the chain, rebuilt")

	// Another user does not see alice's response, nor continue it.
	bob := sdk.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("unused"), option.WithHeader(openai.HeaderUser, "bob"))
	_, err = bob.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	var apiErr *sdk.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)
	_, err = bob.Responses.New(ctx, responses.ResponseNewParams{Model: "coder", PreviousResponseID: sdk.String(first.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: sdk.String("hi")}})
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)
	assert.Equal(t, "previous_response_not_found", apiErr.Code)
	unknown := strings.Replace(first.ID, first.ID[5:9], "0000", 1)
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{Model: "coder", PreviousResponseID: sdk.String(unknown),
		Input: responses.ResponseNewParamsInputUnion{OfString: sdk.String("hi")}})
	var unknownErr *sdk.Error
	require.ErrorAs(t, err, &unknownErr)
	assert.Equal(t, strings.ReplaceAll(apiErr.Message, first.ID, "X"), strings.ReplaceAll(unknownErr.Message, unknown, "X"),
		"another user's id reads as an unknown one")
}

// TestMessagesGoSDK: anthropic-sdk-go reads the door's streamed and whole
// messages as Anthropic's.
func TestMessagesGoSDK(t *testing.T) {
	events, resp := doorEvents()
	h := &recordingHandler{events: events, resp: resp}
	srv := serve(t, h)
	client := anthropic.NewClient(aoption.WithBaseURL(srv.URL), aoption.WithAPIKey("unused"))
	ctx := context.Background()
	p := anthropic.MessageNewParams{
		Model: "coder", MaxTokens: 1024,
		System:   []anthropic.TextBlockParam{{Text: "be brief"}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("write hello.txt"))},
		Metadata: anthropic.MetadataParam{UserID: anthropic.String("alice:1")},
	}
	msg, err := client.Messages.New(ctx, p)
	require.NoError(t, err)
	var text strings.Builder
	var types []string
	for _, b := range msg.Content {
		types = append(types, b.Type)
		text.WriteString(b.Text)
	}
	assert.Equal(t, resp.Content, text.String())
	assert.Equal(t, []string{"thinking", "text", "mcp_tool_use", "mcp_tool_result", "text"}, types, "tool calls are mcp_tool_use blocks, never tool_use")
	assert.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason)
	assert.Equal(t, int64(10), msg.Usage.InputTokens)
	assert.Equal(t, int64(100), msg.Usage.CacheReadInputTokens)
	req := h.last()
	assert.Equal(t, "alice", req.UserID)
	assert.Equal(t, "1", req.ChatID)
	assert.Equal(t, []executor.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "write hello.txt"}}, req.Messages)

	// The answer sent back as history, as the SDK's users do: the blocks
	// of the agent's tools are skipped, the text is the answer.
	p.Messages = append(p.Messages, msg.ToParam(), anthropic.NewUserMessage(anthropic.NewTextBlock("now run it")))
	stream := client.Messages.NewStreaming(ctx, p)
	var acc anthropic.Message
	for stream.Next() {
		require.NoError(t, acc.Accumulate(stream.Current()))
	}
	require.NoError(t, stream.Err())
	text.Reset()
	for _, b := range acc.Content {
		text.WriteString(b.Text)
	}
	assert.Equal(t, resp.Content, text.String())
	assert.Equal(t, int64(5), acc.Usage.OutputTokens)
	assert.Equal(t, int64(10), acc.Usage.InputTokens)
	assert.Equal(t, []executor.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "write hello.txt"},
		{Role: "assistant", Content: resp.Content}, {Role: "user", Content: "now run it"}}, h.last().Messages)
}

// TestDoorBadInput: each door refuses what it cannot take with a 4xx in
// its API's error shape that says what to fix, and runs nothing.
func TestDoorBadInput(t *testing.T) {
	events, resp := doorEvents()
	h := &recordingHandler{events: events, resp: resp}
	srv := serve(t, h, func(o *openai.Options) { o.MaxBodyBytes = 4 << 10 })
	big := strings.Repeat("x", 5<<10)
	for name, tc := range map[string]struct {
		path, body string
		status     int
		want       string
	}{
		"responses: no input":              {"/v1/responses", `{"model":"coder","user":"alice:1"}`, 400, "input is missing"},
		"responses: input not a list":      {"/v1/responses", `{"model":"coder","user":"alice:1","input":{"role":"user"}}`, 400, "input is an object; send the user's message as a string or an array"},
		"responses: input a number":        {"/v1/responses", `{"model":"coder","user":"alice:1","input":5}`, 400, "input is a number; send"},
		"responses: item role a number":    {"/v1/responses", `{"model":"coder","user":"alice:1","input":[{"role":7,"content":"x"}]}`, 400, `input[0].role is a number; send a string","type":"invalid_request_error","param":"input[0].role"`},
		"responses: function output":       {"/v1/responses", `{"model":"coder","user":"alice:1","input":[{"type":"function_call_output","call_id":"c","output":"x"}]}`, 400, "tools run inside the sandbox"},
		"responses: image":                 {"/v1/responses", `{"model":"coder","user":"alice:1","input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`, 400, "only text parts"},
		"responses: bad role":              {"/v1/responses", `{"model":"coder","user":"alice:1","input":[{"role":"tool","content":"x"}]}`, 400, "has role"},
		"responses: background":            {"/v1/responses", `{"model":"coder","user":"alice:1","input":"hi","background":true}`, 400, "background is true"},
		"responses: conversation":          {"/v1/responses", `{"model":"coder","user":"alice:1","input":"hi","conversation":"conv_1"}`, 400, "previous_response_id"},
		"responses: unknown previous":      {"/v1/responses", `{"model":"coder","user":"alice:1","input":"hi","previous_response_id":"resp_nope"}`, 404, "previous_response_not_found"},
		"responses: previous without user": {"/v1/responses", `{"model":"coder","input":"hi","previous_response_id":"resp_nope"}`, 400, "needs the user id"},
		"responses: too large":             {"/v1/responses", `{"model":"coder","user":"alice:1","input":"` + big + `"}`, 413, "request_too_large"},
		"responses: not json":              {"/v1/responses", `{"model":"coder",`, 400, "not a valid responses request"},
		"messages: no messages":            {"/v1/messages", `{"model":"coder","metadata":{"user_id":"alice:1"},"messages":[]}`, 400, "messages is empty"},
		"messages: tool_result":            {"/v1/messages", `{"model":"coder","metadata":{"user_id":"alice:1"},"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}]}`, 400, "tools run inside the sandbox"},
		"messages: image":                  {"/v1/messages", `{"model":"coder","metadata":{"user_id":"alice:1"},"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, 400, "only text blocks"},
		"messages: system role":            {"/v1/messages", `{"model":"coder","metadata":{"user_id":"alice:1"},"messages":[{"role":"system","content":"x"}]}`, 400, "the system member"},
		"messages: user member":            {"/v1/messages", `{"model":"coder","user":"alice:1","messages":[{"role":"user","content":"x"}]}`, 400, "metadata"},
		"messages: bad user_id":            {"/v1/messages", `{"model":"coder","metadata":{"user_id":"../alice:1"},"messages":[{"role":"user","content":"x"}]}`, 400, "metadata.user_id"},
		"messages: user_id not a string":   {"/v1/messages", `{"model":"coder","metadata":{"user_id":7},"messages":[{"role":"user","content":"x"}]}`, 400, "must be a string"},
		"messages: too large":              {"/v1/messages", `{"model":"coder","metadata":{"user_id":"alice:1"},"messages":[{"role":"user","content":"` + big + `"}]}`, 413, `"type":"request_too_large"`},
		"messages: not json":               {"/v1/messages", `{"model":"coder",`, 400, "not a valid messages request"},
	} {
		t.Run(name, func(t *testing.T) {
			h.mu.Lock()
			before := len(h.reqs)
			h.mu.Unlock()
			r := postTo(t, srv, tc.path, tc.body)
			assert.Equal(t, tc.status, r.StatusCode, string(r.Body))
			assert.Contains(t, string(r.Body), tc.want)
			assert.Equal(t, "false", r.Header.Get("x-should-retry"))
			if strings.HasPrefix(tc.path, "/v1/messages") {
				var e struct {
					Type  string
					Error struct{ Type, Message string }
				}
				require.NoError(t, json.Unmarshal(r.Body, &e), string(r.Body))
				assert.Equal(t, "error", e.Type, "Anthropic's error shape")
				assert.NotEmpty(t, e.Error.Type)
			} else {
				var e apiError
				require.NoError(t, json.Unmarshal(r.Body, &e), string(r.Body))
				assert.NotEmpty(t, e.Error.Message, "OpenAI's error shape")
			}
			h.mu.Lock()
			assert.Len(t, h.reqs, before, "nothing ran")
			h.mu.Unlock()
		})
	}
}

// TestDoorErrors: a failure before the stream starts has the door's
// status for its Kind; after, it is the API's own failure events, which
// the official SDKs raise.
func TestDoorErrors(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		kind               middleware.Kind
		openaiStatus, anth int
		anthType           string
		retry              bool
	}{
		"overloaded": {middleware.KindOverloaded, 429, 529, "overloaded_error", true},
		"busy":       {middleware.KindBusy, 409, 409, "conflict_error", true},
		"agent":      {middleware.KindAgent, 502, 502, "api_error", false},
		"not found":  {middleware.KindNotFound, 404, 404, "not_found_error", false},
		"timeout":    {middleware.KindTimeout, 504, 504, "timeout_error", false},
	} {
		t.Run(name, func(t *testing.T) {
			h := &recordingHandler{err: middleware.Errorf(tc.kind, nil, "it failed")}
			srv := serve(t, h)
			r := postTo(t, srv, "/v1/responses", `{"model":"coder","input":"hi","user":"alice:1","stream":true}`)
			assert.Equal(t, tc.openaiStatus, r.StatusCode)
			assert.Equal(t, fmt.Sprint(tc.retry), r.Header.Get("x-should-retry"))
			r = postTo(t, srv, "/v1/messages", `{"model":"coder","metadata":{"user_id":"alice:1"},"messages":[{"role":"user","content":"hi"}]}`)
			assert.Equal(t, tc.anth, r.StatusCode)
			assert.Contains(t, string(r.Body), `"type":"`+tc.anthType+`"`)
			assert.Equal(t, fmt.Sprint(tc.retry), r.Header.Get("x-should-retry"))
		})
	}

	// After the stream started.
	h := &recordingHandler{events: []executor.Event{{Kind: executor.EventSandbox, Text: middleware.SandboxReady}},
		err: middleware.Errorf(middleware.KindAgent, nil, "the agent exited with exit code 1")}
	srv := serve(t, h)
	oc := sdk.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(2))
	st := oc.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "coder", User: sdk.String("alice:1"),
		Input: responses.ResponseNewParamsInputUnion{OfString: sdk.String("hi")}})
	var failed bool
	for st.Next() {
		if ev := st.Current(); ev.Type == "response.failed" {
			failed = true
			assert.Equal(t, "agent_failed", string(ev.Response.Error.Code))
		}
	}
	assert.True(t, failed, "response.failed carries the error")
	require.Error(t, st.Err(), "openai-go raises the error event")
	assert.Contains(t, st.Err().Error(), "exit code 1")

	ac := anthropic.NewClient(aoption.WithBaseURL(srv.URL), aoption.WithAPIKey("unused"), aoption.WithMaxRetries(2))
	ms := ac.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "coder", MaxTokens: 9,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
		Metadata: anthropic.MetadataParam{UserID: anthropic.String("alice:2")}})
	for ms.Next() {
	}
	var aerr *anthropic.Error
	require.ErrorAs(t, ms.Err(), &aerr, "anthropic-sdk-go raises the error event as an API error")
	assert.Contains(t, aerr.Error(), "exit code 1")
	h.mu.Lock()
	assert.Len(t, h.reqs, 2, "no SDK re-ran the failed agent")
	h.mu.Unlock()
}
