package modelproxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

const (
	testKey   = "sk-ant-real-connector-key"
	testToken = "abx-per-request-token"
)

// upstream is a scripted Messages API on loopback: JSON or SSE by the
// request's "stream" field; it records the keys it saw.
type upstream struct {
	*httptest.Server
	hits    atomic.Int64
	keys    chan string
	release chan struct{} // when non-nil, SSE waits on it after message_start
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{keys: make(chan string, 100)}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		u.keys <- r.Header.Get("X-Api-Key") + "|" + r.Header.Get("Authorization")
		body, _ := io.ReadAll(r.Body)
		if !gjson.GetBytes(body, "stream").Bool() {
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprint(w, `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":11,"output_tokens":5,"cache_creation_input_tokens":3,"cache_read_input_tokens":2}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		_, _ = fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_2\",\"usage\":{\"input_tokens\":100,\"output_tokens\":1,\"cache_read_input_tokens\":40}}}\n\n")
		fl.Flush()
		if u.release != nil {
			select {
			case <-u.release:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = fmt.Fprint(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\""+strings.Repeat("x", 100)+"\"}}\n\n")
		_, _ = fmt.Fprint(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":42}}\n\n")
		_, _ = fmt.Fprint(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	}))
	t.Cleanup(u.Close)
	return u
}

// serveUnix serves p on a unix socket like {hostDir}/model.sock and returns
// an HTTP client dialling it.
func serveUnix(t *testing.T, p *Proxy) *http.Client {
	sock := filepath.Join(t.TempDir(), "model.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, p.Close())
		require.NoError(t, <-done)
	})
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

func newProxy(t *testing.T, up string, mod func(*Options)) *Proxy {
	o := Options{Upstream: up, APIKey: testKey, Token: testToken}
	if mod != nil {
		mod(&o)
	}
	p, err := New(o)
	require.NoError(t, err)
	return p
}

// post sends body with hdr and returns the status and the response body.
func post(t *testing.T, c *http.Client, hdr map[string]string, body string) (int, string) {
	req, err := http.NewRequest(http.MethodPost, "http://sandbox/v1/messages", strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

const jsonReq = `{"model":"claude-sonnet-4-6","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`

func TestAuth(t *testing.T) {
	up := newUpstream(t)
	p := newProxy(t, up.URL, nil)
	c := serveUnix(t, p)
	tests := map[string]struct {
		hdr    map[string]string
		status int
	}{
		"no key":             {hdr: nil, status: http.StatusUnauthorized},
		"wrong x-api-key":    {hdr: map[string]string{"X-Api-Key": "abx-wrong"}, status: http.StatusUnauthorized},
		"real key refused":   {hdr: map[string]string{"X-Api-Key": testKey}, status: http.StatusUnauthorized},
		"token prefix":       {hdr: map[string]string{"X-Api-Key": testToken[:5]}, status: http.StatusUnauthorized},
		"wrong bearer":       {hdr: map[string]string{"Authorization": "Bearer nope"}, status: http.StatusUnauthorized},
		"token as x-api-key": {hdr: map[string]string{"X-Api-Key": testToken}, status: http.StatusOK},
		"token as bearer":    {hdr: map[string]string{"Authorization": "Bearer " + testToken}, status: http.StatusOK},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			before := up.hits.Load()
			status, body := post(t, c, tc.hdr, jsonReq)
			require.Equal(t, tc.status, status, body)
			if tc.status == http.StatusUnauthorized {
				assert.Equal(t, "error", gjson.Get(body, "type").String())
				assert.Equal(t, "authentication_error", gjson.Get(body, "error.type").String())
				assert.Equal(t, before, up.hits.Load(), "a refused call must not reach upstream")
				return
			}
			assert.Equal(t, testKey+"|", <-up.keys, "upstream gets the real key only, never the token")
		})
	}
}

func TestMeteringJSONAndSSE(t *testing.T) {
	up := newUpstream(t)
	p := newProxy(t, up.URL, nil)
	c := serveUnix(t, p)
	hdr := map[string]string{"X-Api-Key": testToken}
	status, body := post(t, c, hdr, jsonReq)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "hi", gjson.Get(body, "content.0.text").String())
	status, body = post(t, c, hdr, `{"model":"claude-haiku-4-5","stream":true,"messages":[]}`)
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, "message_stop")

	calls := p.Calls()
	require.Len(t, calls, 2)
	assert.Equal(t, Call{Status: 200, Model: "claude-sonnet-4-6", Usage: executor.Usage{InputTokens: 11, OutputTokens: 5, CacheCreationInputTokens: 3, CacheReadInputTokens: 2}}, zeroDuration(calls[0]))
	assert.Equal(t, Call{Status: 200, Model: "claude-haiku-4-5", Stream: true, Usage: executor.Usage{InputTokens: 100, OutputTokens: 42, CacheReadInputTokens: 40}}, zeroDuration(calls[1]))
	assert.Equal(t, executor.Usage{InputTokens: 111, OutputTokens: 47, CacheCreationInputTokens: 3, CacheReadInputTokens: 42}, p.Usage())
}

func zeroDuration(c Call) Call {
	c.Duration = 0
	return c
}

// TestSSEFlushedPerEvent: the client reads message_start while the upstream
// still holds the rest of the stream.
func TestSSEFlushedPerEvent(t *testing.T) {
	up := newUpstream(t)
	up.release = make(chan struct{})
	p := newProxy(t, up.URL, nil)
	br := bufio.NewReader(startStream(t, serveUnix(t, p)))
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "event: message_start\n", line)
	close(up.release)
	rest, err := io.ReadAll(br)
	require.NoError(t, err)
	assert.Contains(t, string(rest), "message_stop")
}

func TestRefusals(t *testing.T) {
	tests := map[string]struct {
		opts    func(*Options)
		calls   int // successful calls before the checked one
		body    string
		status  int
		errType string
		hits    int64 // upstream hits expected in total
	}{
		"request too large": {opts: func(o *Options) { o.MaxRequestBytes = 100 }, body: `{"pad":"` + strings.Repeat("a", 200) + `"}`, status: 413, errType: "request_too_large"},
		"max requests":      {opts: func(o *Options) { o.Budget.MaxRequests = 2 }, calls: 2, status: 403, errType: "permission_error", hits: 2},
		"max tokens":        {opts: func(o *Options) { o.Budget.MaxTokens = 21 }, calls: 1, status: 403, errType: "permission_error", hits: 1},
		"wall time":         {opts: func(o *Options) { o.Budget.MaxDuration = time.Nanosecond }, status: 403, errType: "permission_error"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			up := newUpstream(t)
			p := newProxy(t, up.URL, tc.opts)
			c := serveUnix(t, p)
			hdr := map[string]string{"X-Api-Key": testToken}
			for range tc.calls {
				status, body := post(t, c, hdr, jsonReq)
				require.Equal(t, http.StatusOK, status, body)
			}
			body := tc.body
			if body == "" {
				body = jsonReq
			}
			status, got := post(t, c, hdr, body)
			assert.Equal(t, tc.status, status, got)
			assert.Equal(t, tc.errType, gjson.Get(got, "error.type").String(), got)
			assert.Contains(t, gjson.Get(got, "error.message").String(), "agentbox")
			assert.Equal(t, tc.hits, up.hits.Load())
		})
	}
}

// TestWallTimeCutsStream: a stream in flight ends when the wall-time budget
// passes.
func TestWallTimeCutsStream(t *testing.T) {
	up := newUpstream(t)
	up.release = make(chan struct{}) // never released
	p := newProxy(t, up.URL, func(o *Options) { o.Budget.MaxDuration = 300 * time.Millisecond })
	c := serveUnix(t, p)
	start := time.Now()
	_, body := post(t, c, map[string]string{"X-Api-Key": testToken}, `{"stream":true}`)
	assert.Less(t, time.Since(start), 3*time.Second)
	assert.Contains(t, body, "message_start")
	assert.NotContains(t, body, "message_stop")
}

func TestUpstreamDownFailsFast(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var accepted atomic.Int64
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = conn.Close() // a host that hangs up at once
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	p := newProxy(t, "http://"+ln.Addr().String(), nil)
	c := serveUnix(t, p)
	status, body := post(t, c, map[string]string{"X-Api-Key": testToken}, jsonReq)
	assert.Equal(t, http.StatusBadGateway, status)
	assert.Equal(t, "api_error", gjson.Get(body, "error.type").String())
	assert.NotContains(t, body, testKey)
	assert.LessOrEqual(t, accepted.Load(), int64(2), "the proxy does not retry (the transport may retry one dead idle connection)")
	require.Len(t, p.Calls(), 1)
	assert.Equal(t, http.StatusBadGateway, p.Calls()[0].Status)
}

func TestNewValidates(t *testing.T) {
	tests := map[string]struct {
		o    Options
		want string
	}{
		"bad upstream": {o: Options{Upstream: "ftp://x", APIKey: "k", Token: "t"}, want: "not an http(s) URL"},
		"no key":       {o: Options{Upstream: "http://127.0.0.1:1", Token: "t"}, want: "no API key"},
		"no token":     {o: Options{Upstream: "http://127.0.0.1:1", APIKey: "k"}, want: "token"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := New(tc.o)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// zeros is an endless-ish body that counts what was read from it.
type zeros struct {
	left int64
	read atomic.Int64
}

func (z *zeros) Read(p []byte) (int, error) {
	if z.left <= 0 {
		return 0, io.EOF
	}
	n := int64(len(p))
	n = min(n, z.left)
	clear(p[:n])
	z.left -= n
	z.read.Add(n)
	return int(n), nil
}

// TestOversizedBodyRefusedAtCap: a 300 MB body sent to model.sock, chunked
// (no length) or with its length declared, is refused (411, 413) before
// the proxy reads it: the sender cannot push it all, nothing reaches
// upstream and no body byte is held.
func TestOversizedBodyRefusedAtCap(t *testing.T) {
	for name, tc := range map[string]struct {
		length  int64
		status  int
		errType string
	}{
		"chunked":         {length: -1, status: http.StatusLengthRequired, errType: "invalid_request_error"},
		"declared length": {length: 300_000_000, status: http.StatusRequestEntityTooLarge, errType: "request_too_large"},
	} {
		t.Run(name, func(t *testing.T) {
			up := newUpstream(t)
			const capBytes = 1 << 20
			bodies := NewBodyBudget(0)
			p := newProxy(t, up.URL, func(o *Options) { o.MaxRequestBytes = capBytes; o.Bodies = bodies })
			c := serveUnix(t, p)
			body := &zeros{left: 300_000_000}
			req, err := http.NewRequest(http.MethodPost, "http://sandbox/v1/messages", io.NopCloser(body))
			require.NoError(t, err)
			req.ContentLength = tc.length
			req.Header.Set("X-Api-Key", testToken)
			resp, err := c.Do(req)
			if err == nil {
				defer func() { _ = resp.Body.Close() }()
				b, _ := io.ReadAll(resp.Body)
				assert.Equal(t, tc.status, resp.StatusCode)
				assert.Equal(t, tc.errType, gjson.GetBytes(b, "error.type").String())
			} else {
				t.Logf("client saw the connection close instead of the refusal: %v", err)
			}
			assert.Less(t, body.read.Load(), int64(16<<20), "the client could not push the whole 300 MB")
			assert.Zero(t, up.hits.Load())
			assert.Zero(t, bodies.Peak(), "no body byte was held")
			t.Logf("sender pushed %d bytes before the refusal", body.read.Load())
		})
	}
}

// TestLogsHoldNoSecrets: at trace level, through accepted, refused and
// failed calls, neither the connector key nor the token is logged.
func TestLogsHoldNoSecrets(t *testing.T) {
	up := newUpstream(t)
	var logs testenv.SyncBuffer
	lg := hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: &logs})
	p := newProxy(t, up.URL, func(o *Options) { o.Logger = lg; o.Budget.MaxRequests = 1 })
	c := serveUnix(t, p)
	post(t, c, map[string]string{"X-Api-Key": testToken}, jsonReq)
	post(t, c, map[string]string{"X-Api-Key": testToken}, jsonReq) // over budget
	post(t, c, map[string]string{"X-Api-Key": "abx-wrong"}, jsonReq)
	post(t, c, map[string]string{"Authorization": "Bearer " + testKey}, jsonReq)
	out := logs.String()
	require.NotEmpty(t, out)
	assert.NotContains(t, out, testKey)
	assert.NotContains(t, out, testToken)
}

// TestIdleWaitsForTheCallInFlight: Idle returns once the call in flight is
// metered, not before; a context that ends first ends the wait.
func TestIdleWaitsForTheCallInFlight(t *testing.T) {
	up := newUpstream(t)
	up.release = make(chan struct{})
	p := newProxy(t, up.URL, nil)
	c := serveUnix(t, p)
	require.NoError(t, p.Idle(t.Context()), "idle before any call")
	body := startStream(t, c)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, p.Idle(ctx), context.Canceled, "a call is in flight")
	idle := make(chan error, 1)
	go func() { idle <- p.Idle(t.Context()) }()
	select {
	case err := <-idle:
		t.Fatalf("Idle returned (%v) with the call still in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(up.release)
	_, err := io.ReadAll(body)
	require.NoError(t, err)
	require.NoError(t, <-idle)
	assert.Equal(t, executor.Usage{InputTokens: 100, OutputTokens: 42, CacheReadInputTokens: 40}, p.Usage(), "the call is metered once Idle returns")
}

// startStream starts a streamed call through c and returns its response
// body, closed at the test's end.
func startStream(t *testing.T, c *http.Client) io.Reader {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://sandbox/v1/messages", strings.NewReader(`{"stream":true}`))
	require.NoError(t, err)
	req.Header.Set("X-Api-Key", testToken)
	resp, err := c.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp.Body
}
