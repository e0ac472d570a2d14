package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testHeaderTimeout is the rigs' HeaderTimeout where a test waits for it.
const testHeaderTimeout = time.Second

// sendRaw writes raw on a new connection to the proxy (half-closing
// after it when hangUp), then reads until the proxy closes, and returns
// what it answered.
func sendRaw(t *testing.T, proxyAddr, raw string, hangUp bool) string {
	t.Helper()
	c, err := net.Dial("tcp", proxyAddr)
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	go func() {
		_, _ = io.WriteString(c, raw)
		if hangUp {
			_ = c.(*net.TCPConn).CloseWrite()
		}
	}()
	b, _ := io.ReadAll(c)
	return string(b)
}

// TestMalformedAttemptsLoggedAndCounted (issue 32 §4): requests net/http
// turns down before the proxy's handler runs (and a few the handler
// refuses as malformed) each get exactly one log line, with the logger's
// context, the reason, the status and the request line, and one count
// by reason through Options.OnRefuse. Nothing is dialled.
func TestMalformedAttemptsLoggedAndCounted(t *testing.T) {
	tests := map[string]struct {
		raw    string
		hangUp bool
		status int // 0: the proxy answers nothing
		reason Reason
		detail string // in the line's error
	}{
		"userinfo in the CONNECT authority": {raw: "CONNECT pkgs.test@evil.test:443 HTTP/1.1\r\nHost: pkgs.test@evil.test:443\r\n\r\n",
			status: 400, reason: ReasonMalformed, detail: "malformed Host header"},
		"userinfo in the CONNECT authority, no Host": {raw: "CONNECT pkgs.test@evil.test:443 HTTP/1.1\r\n\r\n",
			status: 400, reason: ReasonMalformed, detail: "has no user@ part"},
		"userinfo in an absolute URL": {raw: "GET http://pkgs.test@evil.test/ HTTP/1.1\r\nHost: pkgs.test\r\n\r\n",
			status: 400, reason: ReasonMalformed, detail: "has no user@ part"},
		"# in the CONNECT authority": {raw: "CONNECT pkgs.test#x:443 HTTP/1.1\r\nHost: pkgs.test:443\r\n\r\n",
			status: 400, reason: ReasonMalformed, detail: `invalid character "#" in host name`},
		"# in an absolute URL's host": {raw: "GET http://pkgs.test#x/ HTTP/1.1\r\nHost: pkgs.test\r\n\r\n",
			status: 400, reason: ReasonMalformed, detail: `invalid character "#" in host name`},
		"%2e host in CONNECT": {raw: "CONNECT %2e%2e:443 HTTP/1.1\r\nHost: x:443\r\n\r\n",
			status: 400, reason: ReasonMalformed, detail: `invalid URL escape "%2e"`},
		"%2e in an absolute URL's host": {raw: "GET http://pkgs%2etest/ HTTP/1.1\r\nHost: x\r\n\r\n",
			status: 400, reason: ReasonMalformed, detail: `invalid URL escape "%2e"`},
		"2 MB CONNECT line": {raw: "CONNECT " + strings.Repeat("a", 2<<20) + ".test:443 HTTP/1.1\r\n\r\n",
			status: 431, reason: ReasonHeaderTooLarge},
		"64 KiB of headers": {raw: "GET http://pkgs.test/ HTTP/1.1\r\nHost: pkgs.test\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("p", 1000)+"\r\n", 70) + "\r\n",
			status: 431, reason: ReasonHeaderTooLarge},
		"HTTP/1.1 without Host": {raw: "GET http://pkgs.test/ HTTP/1.1\r\n\r\n",
			status: 400, reason: ReasonMalformed, detail: "missing required Host header"},
		"two Host headers": {raw: "GET http://pkgs.test/ HTTP/1.1\r\nHost: pkgs.test\r\nHost: evil.test\r\n\r\n",
			status: 400, reason: ReasonMalformed},
		"space in a header name": {raw: "GET http://pkgs.test/ HTTP/1.1\r\nHost: pkgs.test\r\nBad Header: x\r\n\r\n",
			status: 400, reason: ReasonMalformed},
		"control byte in a header value": {raw: "GET http://pkgs.test/ HTTP/1.1\r\nHost: pkgs.test\r\nX-A: a\x01b\r\n\r\n",
			status: 400, reason: ReasonMalformed, detail: "malformed MIME header line"},
		"NUL in the request line": {raw: "GET\x00 http://pkgs.test/ HTTP/1.1\r\nHost: pkgs.test\r\n\r\n",
			status: 400, reason: ReasonMalformed},
		"HTTP/0.9 request line": {raw: "GET http://pkgs.test/\r\n\r\n",
			status: 400, reason: ReasonMalformed, detail: "malformed HTTP request"},
		"HTTP/2.0 request line": {raw: "GET http://pkgs.test/ HTTP/2.0\r\nHost: pkgs.test\r\n\r\n",
			status: 505, reason: ReasonUnsupported, detail: "unsupported protocol version"},
		"unknown transfer coding": {raw: "POST http://pkgs.test/ HTTP/1.1\r\nHost: pkgs.test\r\nTransfer-Encoding: gzip\r\n\r\n",
			status: 501, reason: ReasonUnsupported},
		"unknown expectation": {raw: "GET http://pkgs.test/ HTTP/1.1\r\nHost: pkgs.test\r\nExpect: the-unexpected\r\n\r\n",
			status: 417, reason: ReasonUnsupported},
		"OPTIONS *": {raw: "OPTIONS * HTTP/1.1\r\nHost: pkgs.test\r\n\r\n",
			status: 403, reason: ReasonNotProxy},
		"head cut short by the client": {raw: "GET http://pkgs.test/ HTTP/1.1\r\nHost: pk", hangUp: true,
			status: 400, reason: ReasonIncomplete},
		"slowloris head never finished": {raw: "GET http://pkgs.test/ HTTP/1.1\r\nHost: pkgs.test\r\n",
			reason: ReasonTimeout},
		"TLS ClientHello to the proxy port": {raw: "\x16\x03\x01\x00\xf4\x01\x00\x00\xf0\x03\x03",
			status: 400, reason: ReasonTimeout},
		"a connection that sends nothing": {reason: ReasonTimeout, detail: "no request within the header timeout"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, Options{HeaderTimeout: testHeaderTimeout}, Rule{Host: "pkgs.test"}, Rule{Host: "evil.test"})
			got := sendRaw(t, r.url.Host, tc.raw, tc.hangUp)
			if tc.status == 0 {
				assert.Empty(t, got)
			} else {
				assert.True(t, strings.HasPrefix(got, fmt.Sprintf("HTTP/1.1 %d ", tc.status)), got)
			}
			l := r.waitRefused(t, 1)[0]
			assert.Equal(t, string(tc.reason), l["reason"], l)
			assert.Equal(t, []Reason{tc.reason}, r.refusals())
			assert.Equal(t, "u1", l["user"], "the line carries the logger's context")
			assert.Equal(t, "c1", l["chat"])
			assert.Equal(t, "egress refused", l["@message"])
			if tc.status != 0 {
				assert.Equal(t, float64(tc.status), l["status"], l)
			}
			if tc.detail != "" {
				assert.Contains(t, l["error"], tc.detail)
			}
			if line, ok := l["request_line"].(string); ok {
				// net/http refused it: the line quotes what came.
				assert.True(t, tc.raw == "" || len(line) > 2, "the request line when bytes came: %q", line)
				assert.LessOrEqual(t, len(line), 2*maxLogged, "the agent's bytes are bounded in the log")
			} else {
				assert.NotEmpty(t, l["method"], "the handler refused it: the line names the method")
			}
			assert.Equal(t, int64(1), r.proxy.Stats().Refused)
			r.dial.mu.Lock()
			assert.Empty(t, r.dial.asked)
			r.dial.mu.Unlock()
		})
	}
}

// TestServedConnectionsLogNothingMore: a client that is served and closes,
// or idles, or half-closes after its request (busybox wget, nc) gets
// exactly its attempt's line; a port probe that connects and leaves gets
// none.
func TestServedConnectionsLogNothingMore(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer srv.Close()
	port := portOf(t, srv.URL)
	r := newRig(t, Options{HeaderTimeout: testHeaderTimeout}, Rule{Host: "pkgs.test", Port: port, Private: true})
	r.res.names["pkgs.test"] = []string{"127.0.0.1"}
	target := "pkgs.test:" + strconv.Itoa(port)
	got := sendRaw(t, r.url.Host, "GET http://"+target+"/ HTTP/1.0\r\n\r\n", true)
	assert.Contains(t, got, "200 OK")
	// Keep-alive: two requests, then the client lets the connection idle
	// past the header timeout.
	c, err := net.Dial("tcp", r.url.Host)
	require.NoError(t, err)
	br := bufio.NewReader(c)
	for range 2 {
		_, err = fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		require.NoError(t, err)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, 200, resp.StatusCode)
	}
	time.Sleep(testHeaderTimeout + 100*time.Millisecond)
	_ = c.Close()
	probe, err := net.Dial("tcp", r.url.Host)
	require.NoError(t, err)
	_ = probe.Close()
	require.Eventually(t, func() bool { return len(r.lines(t)) == 3 }, 10*time.Second, 10*time.Millisecond, r.logs.String())
	time.Sleep(testHeaderTimeout + 100*time.Millisecond)
	assert.Len(t, r.lines(t), 3, r.logs.String())
	assert.Empty(t, r.refusedLines(t))
	assert.Empty(t, r.refusals())
}

// slowWriter holds each write for a while before it lands, as a loaded
// machine or a slow log sink does.
type slowWriter struct {
	testenv.SyncBuffer
	delay time.Duration
}

func (w *slowWriter) Write(b []byte) (int, error) {
	time.Sleep(w.delay)
	return w.SyncBuffer.Write(b)
}

// TestCloseWaitsForTheLastLine: net/http answers a malformed request and
// closes the connection before the proxy's hook logs it, so a run that
// ends right after its agent saw the answer would lose the line unless
// Close waits for it (a CI run lost one this way under load).
func TestCloseWaitsForTheLastLine(t *testing.T) {
	logs := &slowWriter{delay: 300 * time.Millisecond}
	p, err := New(Options{Logger: hclog.New(&hclog.LoggerOptions{Output: logs, JSONFormat: true})})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = p.Serve(ln) }()
	got := sendRaw(t, ln.Addr().String(), "CONNECT pkgs.test@evil.test:443 HTTP/1.1\r\nHost: pkgs.test@evil.test:443\r\n\r\n", false)
	require.True(t, strings.HasPrefix(got, "HTTP/1.1 400 "), got)
	require.NoError(t, p.Close())
	assert.Contains(t, logs.String(), `"reason":"malformed"`, "the line is out when Close returns")
	assert.Equal(t, int64(1), p.Stats().Refused)
}
