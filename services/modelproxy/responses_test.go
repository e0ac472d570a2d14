package modelproxy

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/agentbox/agentbox/executor"
	sr "github.com/agentbox/agentbox/internal/testkit/scriptedresponses"
)

// codexBody is a Responses request as the Codex CLI 0.171.0 sends it, cut
// short.
const codexBody = `{"model":"gpt-5.5","instructions":"be brief","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}],` +
	`"tools":[{"type":"function","name":"exec_command","parameters":{"type":"object"}},{"type":"custom","name":"apply_patch","format":{"type":"grammar"}}],` +
	`"tool_choice":"auto","parallel_tool_calls":true,"reasoning":{"summary":"auto"},"store":false,"stream":true,` +
	`"include":["reasoning.encrypted_content"],"prompt_cache_key":"k","client_metadata":{"session_id":"s"}}`

// responsesProxy is a Responses proxy in front of a scripted Responses
// API, and a client on its socket.
func responsesProxy(t *testing.T, mod func(*Options), turns ...sr.Turn) (*Proxy, *http.Client, *sr.Server) {
	api := sr.Start(sr.WithTurns(turns...))
	t.Cleanup(api.Close)
	// The connector's host is the API base URL, /v1 included.
	p := newProxy(t, api.URL, func(o *Options) {
		o.API = APIResponses
		o.Model = "gpt-5.5"
		if mod != nil {
			mod(o)
		}
	})
	return p, serveUnix(t, p), api
}

// send posts body to target with the run's token as the Codex CLI does.
func send(t *testing.T, c *http.Client, method, target, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://sandbox"+target, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Originator", "codex_exec")
	req.Header.Set("X-Codex-Turn-Metadata", `{"installation_id":"i"}`)
	req.Header.Set("Cookie", "a=b")
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

// TestResponsesForwarded: the call reaches the upstream with the
// connector's key as a bearer token (never the run's), the allowlisted
// headers only, the model pinned and max_output_tokens set; the stream
// comes back whole and its usage is metered with cached tokens apart.
func TestResponsesForwarded(t *testing.T) {
	p, c, api := responsesProxy(t, nil, sr.Turn{Text: "hello", Usage: &sr.Usage{InputTokens: 100, CachedTokens: 30, OutputTokens: 7}})
	body := strings.Replace(codexBody, `"model":"gpt-5.5"`, `"model":"gpt-other"`, 1)
	// A resumed session's client-side tool search passes.
	body = strings.Replace(body, `"tools":[`, `"tools":[{"type":"tool_search","execution":"client","parameters":{"type":"object"}},`, 1)
	status, hdr, out := send(t, c, http.MethodPost, PathResponses, body)
	require.Equal(t, http.StatusOK, status, out)
	assert.Equal(t, "text/event-stream", hdr.Get("Content-Type"))
	assert.Contains(t, out, "event: response.completed")
	reqs := api.ResponseRequests()
	require.Len(t, reqs, 1)
	got := reqs[0]
	assert.Equal(t, "/v1/responses", got.Path, "the host's path and /responses")
	assert.Equal(t, testKey, got.APIKey, "the connector's key, as a bearer token")
	assert.Empty(t, got.Header.Get("X-Api-Key"))
	assert.Equal(t, "codex_exec", got.Header.Get("Originator"))
	assert.Empty(t, got.Header.Get("X-Codex-Turn-Metadata"), "unlisted headers stay in the sandbox")
	assert.Empty(t, got.Header.Get("Cookie"))
	assert.Equal(t, "gpt-5.5", got.Body.Model, "the model is pinned to the connector's")
	assert.EqualValues(t, DefaultMaxOutputTokens, gjson.GetBytes(got.Raw, "max_output_tokens").Int(), "the output cap is set")
	assert.Equal(t, executor.Usage{InputTokens: 70, CacheReadInputTokens: 30, OutputTokens: 7}, p.Usage())
	calls := p.Calls()
	require.Len(t, calls, 1)
	assert.True(t, calls[0].Stream)
}

// TestResponsesJSONMetered meters a response that is not streamed.
func TestResponsesJSONMetered(t *testing.T) {
	p, c, _ := responsesProxy(t, func(o *Options) { o.MaxOutputTokens = 500 }, sr.Turn{Text: "x", Usage: &sr.Usage{InputTokens: 9, OutputTokens: 2}})
	body := strings.Replace(codexBody, `"stream":true`, `"stream":false,"max_output_tokens":100000`, 1)
	status, _, out := send(t, c, http.MethodPost, PathResponses, body)
	require.Equal(t, http.StatusOK, status, out)
	assert.Equal(t, executor.Usage{InputTokens: 9, OutputTokens: 2}, p.Usage())
}

// TestResponsesRefusals holds the endpoint table and the body policy of
// the Responses API: what would reach the connector's account beyond one
// model call, or the network on the agent's behalf, is refused in
// OpenAI's error shape before anything goes upstream.
func TestResponsesRefusals(t *testing.T) {
	tests := map[string]struct {
		method, target, body string
		status               int
		says                 string
	}{
		"compaction endpoint":        {http.MethodPost, "/v1/responses/compact", codexBody, 403, "forwards only POST /v1/responses"},
		"retrieve a stored response": {http.MethodGet, "/v1/responses/resp_123", "", 403, "forwards only"},
		"path without v1":            {http.MethodPost, "/responses", codexBody, 403, "forwards only"},
		"chat completions":           {http.MethodPost, "/v1/chat/completions", codexBody, 403, "forwards only"},
		"messages":                   {http.MethodPost, "/v1/messages", codexBody, 403, "forwards only"},
		"a query":                    {http.MethodPost, "/v1/responses?beta=true", codexBody, 403, "query"},
		"dot segments":               {http.MethodPost, "/v1/responses/../files", codexBody, 403, "forwards only"},
		"another tenant's response":  {http.MethodPost, PathResponses, strings.Replace(codexBody, `"store":false`, `"store":false,"previous_response_id":"resp_1"`, 1), 400, "previous_response_id"},
		"a stored conversation":      {http.MethodPost, PathResponses, strings.Replace(codexBody, `"store":false`, `"store":false,"conversation":"conv_1"`, 1), 400, "conversation"},
		"a stored prompt":            {http.MethodPost, PathResponses, strings.Replace(codexBody, `"store":false`, `"store":false,"prompt":{"id":"p"}`, 1), 400, "prompt"},
		"storing the response":       {http.MethodPost, PathResponses, strings.Replace(codexBody, `"store":false`, `"store":true`, 1), 400, "store must be false"},
		"background run":             {http.MethodPost, PathResponses, strings.Replace(codexBody, `"store":false`, `"store":false,"background":true`, 1), 400, "background"},
		"hosted web search":          {http.MethodPost, PathResponses, strings.Replace(codexBody, `"tools":[`, `"tools":[{"type":"web_search"},`, 1), 400, `"web_search"`},
		"remote mcp":                 {http.MethodPost, PathResponses, strings.Replace(codexBody, `"tools":[`, `"tools":[{"type":"mcp","server_url":"http://10.0.0.1"},`, 1), 400, `"mcp"`},
		"file search":                {http.MethodPost, PathResponses, strings.Replace(codexBody, `"tools":[`, `"tools":[{"type":"file_search","vector_store_ids":["vs_1"]},`, 1), 400, "file_search"},
		"hosted tool in a namespace": {http.MethodPost, PathResponses, strings.Replace(codexBody, `"tools":[`, `"tools":[{"type":"namespace","name":"n","tools":[{"type":"code_interpreter"}]},`, 1), 400, "code_interpreter"},
		"hosted tool search":         {http.MethodPost, PathResponses, strings.Replace(codexBody, `"tools":[`, `"tools":[{"type":"tool_search","execution":"server"},`, 1), 400, "tool_search"},
		"duplicate tool type":        {http.MethodPost, PathResponses, strings.Replace(codexBody, `"tools":[{"type":"function"`, `"tools":[{"type":"function","type":"web_search"`, 1), 400, "not valid JSON"},
		"folded key":                 {http.MethodPost, PathResponses, strings.Replace(codexBody, `"store":false`, `"Store":true`, 1), 400, "not valid JSON"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, c, api := responsesProxy(t, nil, sr.Say("never"))
			status, _, out := send(t, c, tc.method, tc.target, tc.body)
			assert.Equal(t, tc.status, status, out)
			assert.Contains(t, gjson.Get(out, "error.message").String(), tc.says, out)
			assert.True(t, gjson.Get(out, "error.message").Exists(), "OpenAI's error shape: %s", out)
			assert.Empty(t, api.Requests(), "nothing reached the upstream")
			assert.Zero(t, p.Usage())
		})
	}
	t.Run("wrong token", func(t *testing.T) {
		_, c, api := responsesProxy(t, nil, sr.Say("never"))
		req, err := http.NewRequest(http.MethodPost, "http://sandbox"+PathResponses, strings.NewReader(codexBody))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+testKey)
		resp, err := c.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		assert.Empty(t, api.Requests())
	})
}

// TestResponsesBudget: the calls budget refuses the next call in OpenAI's
// error shape, which the Codex CLI reports as the turn's failure.
func TestResponsesBudget(t *testing.T) {
	p, c, api := responsesProxy(t, func(o *Options) { o.Budget.MaxRequests = 1 }, sr.Say("one"), sr.Say("two"))
	status, _, _ := send(t, c, http.MethodPost, PathResponses, codexBody)
	require.Equal(t, http.StatusOK, status)
	status, _, out := send(t, c, http.MethodPost, PathResponses, codexBody)
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, gjson.Get(out, "error.message").String(), "budget")
	assert.Len(t, api.ResponseRequests(), 1)
	assert.Equal(t, BudgetCalls, p.BudgetStop())
}

// TestNewRefusesUnknownAPI names the APIs it serves.
func TestNewRefusesUnknownAPI(t *testing.T) {
	_, err := New(Options{Upstream: "http://x", APIKey: "k", Token: "t", API: "chat"})
	assert.ErrorContains(t, err, `API "chat"`)
}
