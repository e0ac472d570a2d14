package modelproxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// seen is one request the recording upstream received.
type seen struct {
	Method, URI string
	Header      http.Header
	Body        string
}

// recorder is an upstream that records every request and answers a
// Messages API JSON response with headers the proxy must filter.
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seen
}

func newRecorder(t *testing.T) *recorder {
	rec := &recorder{}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, seen{Method: r.Method, URI: r.RequestURI, Header: r.Header.Clone(), Body: string(b)})
		rec.mu.Unlock()
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Request-Id", "req_1")
		h.Set("Anthropic-Ratelimit-Requests-Remaining", "99")
		h.Set("Anthropic-Organization-Id", "org-secret")
		h.Set("Set-Cookie", "session=upstream")
		h.Set("X-Forwarded-For", "10.0.0.1")
		h.Set("Via", "1.1 upstream")
		_, _ = io.WriteString(w, `{"type":"message","usage":{"input_tokens":7,"output_tokens":3}}`)
	}))
	t.Cleanup(rec.Close)
	return rec
}

func (r *recorder) take() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reqs
	r.reqs = nil
	return out
}

// rawDo writes one raw HTTP/1.1 request to the proxy's socket, so request
// targets no Go client would send (//x, %2e%2e, absolute form, CONNECT)
// reach the proxy as the agent's curl would send them.
func rawDo(t *testing.T, sock, method, target string, hdr map[string]string, body string) (rawResp, string) {
	conn, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:4000\r\n", method, target)
	for k, v := range hdr {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	if _, chunked := hdr["Transfer-Encoding"]; chunked {
		fmt.Fprintf(&b, "\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	} else {
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	}
	_, err = io.WriteString(conn, b.String())
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	require.NoError(t, err)
	out, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return rawResp{StatusCode: resp.StatusCode, Header: resp.Header}, string(out)
}

// rawResp is what rawDo read of a response besides its body.
type rawResp struct {
	StatusCode int
	Header     http.Header
}

func serveSock(t *testing.T, p *Proxy) string { return serveSockB(t, p) }

// serveSockB serves p on a unix socket in a temporary directory until the
// test or benchmark ends.
func serveSockB(t testing.TB, p *Proxy) string {
	sock := filepath.Join(t.TempDir(), "model.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, p.Close())
		require.NoError(t, <-done)
	})
	return sock
}

const pinned = "claude-sonnet-4-6"

// TestEndpointTable sends what a hostile agent sends from the container
// (methods, paths, encodings, headers) and checks what reached the
// upstream: only POST /v1/messages and /v1/messages/count_tokens, with the
// allowlisted headers. The table is logged (go test -v).
func TestEndpointTable(t *testing.T) {
	rec := newRecorder(t)
	p := newProxy(t, rec.URL, func(o *Options) { o.Model = pinned })
	sock := serveSock(t, p)
	body := `{"model":"` + pinned + `","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	auth := map[string]string{"X-Api-Key": testToken, "Content-Type": "application/json"}
	type attempt struct {
		method, target string
		hdr            map[string]string
		status         int
		reachesAs      string // the upstream request URI, "" when nothing may reach it
	}
	with := func(extra map[string]string) map[string]string {
		h := map[string]string{}
		for k, v := range auth {
			h[k] = v
		}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}
	attempts := []attempt{
		{"POST", "/v1/messages", auth, 200, "/v1/messages"},
		{"POST", "/v1/messages?beta=true", auth, 200, "/v1/messages?beta=true"},
		{"POST", "/v1/messages/count_tokens", auth, 200, "/v1/messages/count_tokens"},
		{"POST", "/v1/messages/count_tokens?beta=true", auth, 200, "/v1/messages/count_tokens?beta=true"},
		{"GET", "/v1/files", auth, 403, ""},
		{"GET", "/v1/files/file_011/content", auth, 403, ""},
		{"DELETE", "/v1/files/file_011", auth, 403, ""},
		{"POST", "/v1/files", auth, 403, ""},
		{"POST", "/v1/messages/batches", auth, 403, ""},
		{"GET", "/v1/messages/batches/msgbatch_1/results", auth, 403, ""},
		{"GET", "/v1/organizations/me", auth, 403, ""},
		{"GET", "/v1/models", auth, 403, ""},
		{"CONNECT", "api.anthropic.com:443", auth, 403, ""},
		{"GET", "/v1/messages", auth, 403, ""},
		{"PUT", "/v1/messages", auth, 403, ""},
		{"DELETE", "/v1/messages", auth, 403, ""},
		{"PATCH", "/v1/messages/count_tokens", auth, 403, ""},
		{"OPTIONS", "*", auth, 403, ""},
		{"POST", "/v1/messages/../files", auth, 403, ""},
		{"POST", "/v1/messages/%2e%2e/files", auth, 403, ""},
		{"POST", "/v1/messages/%2E%2E/batches", auth, 403, ""},
		{"POST", "/v1/messages/count_tokens/../../files", auth, 403, ""},
		{"POST", "//v1/messages", auth, 403, ""},
		{"POST", "/v1//messages", auth, 403, ""},
		{"POST", "/v1%2Fmessages", auth, 403, ""},
		{"POST", "/v1/messages%2Fbatches", auth, 403, ""},
		{"POST", "/%761/messages", auth, 403, ""},
		{"POST", "/v1/messages/", auth, 403, ""},
		{"POST", "/v1/messages;batches", auth, 403, ""},
		{"POST", "/V1/MESSAGES", auth, 403, ""},
		{"POST", "/v1/messages?beta=true&limit=1000", auth, 403, ""},
		{"POST", "/v1/messages?beta=false", auth, 403, ""},
		{"POST", "/v1/messages?/../files", auth, 403, ""},
		{"POST", "http://api.anthropic.com/v1/files", auth, 403, ""},
		{"POST", "http://127.0.0.1:4000/v1/messages", auth, 403, ""},
		{"POST", "/v1/messages", with(map[string]string{"Transfer-Encoding": "chunked"}), 411, ""},
		{"GET", "/v1/files", map[string]string{"X-Api-Key": testKey}, 401, ""},
		{"POST", "/v1/messages", map[string]string{"Authorization": "Bearer " + testKey}, 401, ""},
		{"HEAD", "/", nil, 401, ""}, // Claude Code's probe
		{"POST", "/v1/messages", with(map[string]string{
			"X-Forwarded-For": "1.2.3.4", "X-Forwarded-Host": "evil", "Forwarded": "for=1.2.3.4", "X-Real-Ip": "1.2.3.4",
			"Cookie": "a=b", "Proxy-Authorization": "Basic eA==", "Connection": "keep-alive, X-Custom", "X-Custom": "1",
			"Authorization": "Bearer " + testToken, "Anthropic-Beta": "prompt-caching-2024-07-31", "Anthropic-Version": "2023-06-01",
			"X-Stainless-Retry-Count": "0", "User-Agent": "claude-cli/2.1.197", "Accept-Encoding": "br", "Te": "trailers",
			"Upgrade": "websocket", "Keep-Alive": "timeout=5", "Via": "1.1 agent", "X-Amz-Target": "x",
		}), 200, "/v1/messages"},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-8s %-45s %-6s %s\n", "method", "target", "status", "reached upstream as")
	for _, a := range attempts {
		resp, got := rawDo(t, sock, a.method, a.target, a.hdr, body)
		reached := rec.take()
		var as []string
		for _, s := range reached {
			as = append(as, s.Method+" "+s.URI)
		}
		fmt.Fprintf(&table, "%-8s %-45s %-6d %s\n", a.method, clip(a.target), resp.StatusCode, strings.Join(as, ", "))
		assert.Equal(t, a.status, resp.StatusCode, "%s %s: %s", a.method, a.target, got)
		if a.reachesAs == "" {
			assert.Empty(t, reached, "%s %s reached the upstream", a.method, a.target)
			if a.method == "HEAD" {
				continue // no body
			}
			assert.Equal(t, "error", gjson.Get(got, "type").String(), "Anthropic error shape: %s", got)
			assert.Contains(t, gjson.Get(got, "error.message").String(), "agentbox")
			continue
		}
		require.Len(t, reached, 1, "%s %s", a.method, a.target)
		s := reached[0]
		assert.Equal(t, "POST", s.Method)
		assert.Equal(t, a.reachesAs, s.URI)
		assert.Equal(t, testKey, s.Header.Get("X-Api-Key"))
		for k := range s.Header {
			assert.True(t, k == "X-Api-Key" || k == "Content-Length" || k == "Accept-Encoding" || isAllowed(k, requestHeaders, requestHeaderPrefixes),
				"header %s reached the upstream", k)
		}
		assert.NotEqual(t, "br", s.Header.Get("Accept-Encoding"), "the agent's Accept-Encoding is not forwarded")
		for k := range resp.Header {
			assert.True(t, k == "Content-Length" || k == "Date" || isAllowed(k, responseHeaders, responseHeaderPrefixes), "response header %s reached the agent", k)
		}
		assert.Equal(t, "req_1", resp.Header.Get("Request-Id"))
		assert.Equal(t, "99", resp.Header.Get("Anthropic-Ratelimit-Requests-Remaining"))
	}
	t.Log(table.String())
	last := attempts[len(attempts)-1]
	require.Equal(t, 200, last.status)
}

func isAllowed(k string, names, prefixes []string) bool {
	h := http.Header{}
	copyAllowed(h, http.Header{k: {"x"}}, names, prefixes)
	return len(h) == 1
}

// TestHeadersForwarded: the headers the CLI needs do reach the upstream,
// the ones an agent could abuse do not.
func TestHeadersForwarded(t *testing.T) {
	rec := newRecorder(t)
	p := newProxy(t, rec.URL, nil)
	sock := serveSock(t, p)
	resp, _ := rawDo(t, sock, "POST", "/v1/messages?beta=true", map[string]string{
		"X-Api-Key": testToken, "Anthropic-Beta": "b1", "Anthropic-Version": "2023-06-01", "Content-Type": "application/json",
		"X-App": "cli", "X-Stainless-Lang": "js", "X-Forwarded-For": "1.2.3.4", "Forwarded": "for=x", "X-Evil": "1",
	}, `{"model":"m","max_tokens":1,"messages":[]}`)
	require.Equal(t, 200, resp.StatusCode)
	got := rec.take()
	require.Len(t, got, 1)
	h := got[0].Header
	var names []string
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	t.Logf("upstream received headers: %s", strings.Join(names, ", "))
	for _, k := range []string{"Anthropic-Beta", "Anthropic-Version", "Content-Type", "X-App", "X-Stainless-Lang"} {
		assert.NotEmpty(t, h.Get(k), k)
	}
	for _, k := range []string{"X-Forwarded-For", "Forwarded", "X-Evil", "Authorization"} {
		assert.Empty(t, h.Get(k), k)
	}
	assert.Empty(t, resp.Header.Get("Anthropic-Organization-Id"))
	assert.Empty(t, resp.Header.Get("Set-Cookie"))
	assert.Empty(t, resp.Header.Get("X-Forwarded-For"))
	assert.Empty(t, resp.Header.Get("Via"))
}

// TestBodyPolicy: the model is pinned to the connector's (or an allowed
// one), max_tokens capped, and bodies the proxy and the upstream could read
// differently are refused before anything reaches the upstream.
func TestBodyPolicy(t *testing.T) {
	for name, tc := range map[string]struct {
		path          string
		body          string
		status        int
		model         string // what the upstream must see
		maxTokens     string // raw; "" = absent
		wantInMessage string
	}{
		"pinned model kept":       {body: `{"model":"` + pinned + `","max_tokens":100,"messages":[]}`, status: 200, model: pinned, maxTokens: "100"},
		"other model rewritten":   {body: `{"model":"claude-opus-4-1","max_tokens":100,"messages":[]}`, status: 200, model: pinned, maxTokens: "100"},
		"allowlisted model kept":  {body: `{"model":"claude-haiku-4-5","max_tokens":100,"messages":[]}`, status: 200, model: "claude-haiku-4-5", maxTokens: "100"},
		"model not a string":      {body: `{"model":{"x":1},"max_tokens":1,"messages":[]}`, status: 200, model: pinned, maxTokens: "1"},
		"model missing":           {body: `{"max_tokens":1,"messages":[]}`, status: 200, model: pinned, maxTokens: "1"},
		"empty object":            {body: ` { } `, status: 200, model: pinned, maxTokens: "777"},
		"max_tokens over cap":     {body: `{"model":"x","max_tokens":64000,"messages":[]}`, status: 200, model: pinned, maxTokens: "777"},
		"max_tokens as exponent":  {body: `{"model":"x","max_tokens":1e9,"messages":[]}`, status: 200, model: pinned, maxTokens: "777"},
		"max_tokens as string":    {body: `{"model":"x","max_tokens":"64000","messages":[]}`, status: 200, model: pinned, maxTokens: "777"},
		"max_tokens missing":      {body: `{"model":"x","messages":[]}`, status: 200, model: pinned, maxTokens: "777"},
		"count_tokens not capped": {path: PathCountTokens, body: `{"model":"x","messages":[]}`, status: 200, model: pinned},
		"duplicate model":         {body: `{"model":"` + pinned + `","model":"claude-opus-4-1","messages":[]}`, status: 400, wantInMessage: `"model" twice`},
		"duplicate escaped model": {body: `{"model":"` + pinned + `","mod\u0065l":"claude-opus-4-1","messages":[]}`, status: 400, wantInMessage: "twice"},
		"duplicate max_tokens":    {body: `{"max_tokens":1,"max_tokens":64000,"messages":[]}`, status: 400, wantInMessage: "twice"},
		"mcp_servers":             {body: `{"model":"x","messages":[],"mcp_servers":[{"type":"url","url":"https://evil"}]}`, status: 400, wantInMessage: "mcp_servers"},
		"container":               {body: `{"model":"x","messages":[],"container":"c"}`, status: 400, wantInMessage: "container"},
		"web_fetch server tool":   {body: `{"model":"x","messages":[],"tools":[{"type":"web_fetch_20250910","name":"web_fetch"}]}`, status: 400, wantInMessage: "web_fetch"},
		"invalid JSON":            {body: `{"model":"x",`, status: 400, wantInMessage: "not valid JSON"},
		"trailing garbage":        {body: `{"model":"x"} {"model":"y"}`, status: 400, wantInMessage: "not valid JSON"},
		"nested too deep":         {body: `{"model":"x","messages":` + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + `}`, status: 400, wantInMessage: "nests deeper than 512"},
		"deep inside a string":    {body: `{"model":"x","max_tokens":1,"messages":[{"role":"user","content":"` + strings.Repeat("[{", 5000) + `\" ]"}]}`, status: 200, model: pinned, maxTokens: "1"},
		"array body":              {body: `[{"model":"x"}]`, status: 400, wantInMessage: "not a JSON object"},
		// A server tool hidden behind a duplicate name: a reader that keeps
		// the first "type" (gjson) sees a client tool, one that keeps the
		// last sees web_fetch. Refused at any depth.
		"duplicate tool type":       {body: `{"model":"x","messages":[],"tools":[{"type":"custom","type":"web_fetch_20250910","name":"f"}]}`, status: 400, wantInMessage: `"type" twice`},
		"escaped tool type":         {body: `{"model":"x","messages":[],"tools":[{"typ\u0065":"web_fetch_20250910","name":"f"}]}`, status: 400, wantInMessage: "web_fetch"},
		"duplicate nested":          {body: `{"model":"x","messages":[{"role":"user","content":"a","content":"b"}]}`, status: 400, wantInMessage: `"content" twice`},
		"invalid utf-8":             {body: "{\"model\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}", status: 400, wantInMessage: "UTF-8"},
		"case variant of a field":   {body: `{"model":"x","Max_Tokens":64000,"messages":[]}`, status: 400, wantInMessage: "max_tokens"},
		"client tools pass through": {body: `{"model":"x","max_tokens":5,"messages":[],"tools":[{"name":"Bash","input_schema":{}}]}`, status: 200, model: pinned, maxTokens: "5"},
	} {
		t.Run(name, func(t *testing.T) {
			rec := newRecorder(t)
			p := newProxy(t, rec.URL, func(o *Options) {
				o.Model, o.AllowedModels, o.MaxOutputTokens = pinned, []string{"claude-haiku-4-5"}, 777
			})
			sock := serveSock(t, p)
			path := tc.path
			if path == "" {
				path = PathMessages
			}
			resp, got := rawDo(t, sock, "POST", path, map[string]string{"X-Api-Key": testToken}, tc.body)
			require.Equal(t, tc.status, resp.StatusCode, got)
			reached := rec.take()
			if tc.status != 200 {
				assert.Empty(t, reached)
				assert.Equal(t, "invalid_request_error", gjson.Get(got, "error.type").String())
				assert.Contains(t, gjson.Get(got, "error.message").String(), tc.wantInMessage)
				return
			}
			require.Len(t, reached, 1)
			up := reached[0].Body
			require.True(t, gjson.Valid(up), "upstream got invalid JSON: %s", up)
			assert.Equal(t, tc.model, gjson.Get(up, "model").String(), up)
			assert.Equal(t, tc.maxTokens, gjson.Get(up, "max_tokens").Raw, up)
			assert.Equal(t, fmt.Sprint(len(up)), reached[0].Header.Get("Content-Length"))
			calls := p.Calls()
			require.Len(t, calls, 1)
			assert.Equal(t, tc.model, calls[0].Model, "the call is recorded with the model sent upstream")
		})
	}
}

// TestAllowlistWithoutPin: with no connector model, a model outside
// AllowedModels is refused.
func TestAllowlistWithoutPin(t *testing.T) {
	rec := newRecorder(t)
	p := newProxy(t, rec.URL, func(o *Options) { o.AllowedModels = []string{"a"} })
	sock := serveSock(t, p)
	resp, got := rawDo(t, sock, "POST", PathMessages, map[string]string{"X-Api-Key": testToken}, `{"model":"b","max_tokens":1}`)
	assert.Equal(t, 400, resp.StatusCode)
	assert.Contains(t, got, `model \"b\" is not allowed`)
	assert.Empty(t, rec.take())
	resp, _ = rawDo(t, sock, "POST", PathMessages, map[string]string{"X-Api-Key": testToken}, `{"model":"a","max_tokens":1}`)
	assert.Equal(t, 200, resp.StatusCode)
}

// TestDeepNestingDoesNotCrash: a 30 MiB body nesting "[" 15 million deep
// (which overflows the stack of gjson's recursive validator, a fatal error
// for the whole process) is refused by the depth scan first.
func TestDeepNestingDoesNotCrash(t *testing.T) {
	rec := newRecorder(t)
	p := newProxy(t, rec.URL, nil)
	sock := serveSock(t, p)
	const n = 15 << 20
	body := `{"messages":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`
	resp, got := rawDo(t, sock, "POST", PathMessages, map[string]string{"X-Api-Key": testToken}, body)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, got, "nests deeper")
	assert.Empty(t, rec.take())
}

// TestSmuggledRequestsAreCheckedToo: a second request hidden after the
// declared body on the same connection, and a request with both
// Content-Length and Transfer-Encoding, meet the same checks.
func TestSmuggledRequestsAreCheckedToo(t *testing.T) {
	rec := newRecorder(t)
	p := newProxy(t, rec.URL, nil)
	sock := serveSock(t, p)
	body := `{"model":"m","max_tokens":1}`
	conn, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	_, err = fmt.Fprintf(conn, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: %s\r\nContent-Length: %d\r\n\r\n%s"+
		"GET /v1/files HTTP/1.1\r\nHost: x\r\nX-Api-Key: %s\r\n\r\n", testToken, len(body), body, testToken)
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	first, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, first.Body)
	_ = first.Body.Close()
	second, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_ = second.Body.Close()
	assert.Equal(t, http.StatusOK, first.StatusCode)
	assert.Equal(t, http.StatusForbidden, second.StatusCode)
	reached := rec.take()
	require.Len(t, reached, 1)
	assert.Equal(t, "POST /v1/messages", reached[0].Method+" "+reached[0].URI)

	conn2, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer func() { _ = conn2.Close() }()
	_, err = fmt.Fprintf(conn2, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: %s\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", testToken, len(body), body)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn2), nil)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.NotEqual(t, http.StatusOK, resp.StatusCode, "both framings: refused (net/http or the proxy)")
	t.Logf("Content-Length with Transfer-Encoding: %d", resp.StatusCode)
	assert.Empty(t, rec.take())
}
