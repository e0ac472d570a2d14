package egress

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The agent's attacks on the egress proxy, each with what held. The
// proxy's client is the agent: it can write any bytes.

// recorder is a plain HTTP destination that records each request's
// method, URI and Host.
type recorder struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	rec := &recorder{}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.seen = append(rec.seen, fmt.Sprintf("%s %s %s %q", r.Method, r.RequestURI, r.Host, b))
		rec.mu.Unlock()
		_, _ = io.WriteString(w, "fine")
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

// newPkgsRig is a rig allowing pkgs.test, a recorder, on its port.
func newPkgsRig(t *testing.T, o Options) (*recorder, *rig, int) {
	t.Helper()
	rec := newRecorder(t)
	port := portOf(t, rec.srv.URL)
	r := newRig(t, o, Rule{Host: "pkgs.test", Port: port, Private: true})
	r.res.names["pkgs.test"] = []string{"127.0.0.1"}
	return rec, r, port
}

func (rec *recorder) requests() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.seen...)
}

// connectStatus reads the answer to a CONNECT sent on c. It reads no
// byte past the answer's head when that is 200 (the tunnel follows).
func connectStatus(t *testing.T, c net.Conn) int {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(&oneByte{c}), &http.Request{Method: http.MethodConnect})
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// oneByte reads one byte at a time, so a bufio.Reader on it takes no
// more than it needs.
type oneByte struct{ r io.Reader }

func (o *oneByte) Read(b []byte) (int, error) { return o.r.Read(b[:min(len(b), 1)]) }

// readResponses reads responses from c until it closes or n were read.
func readResponses(t *testing.T, c net.Conn, n int) []int {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	var codes []int
	for len(codes) < n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	return codes
}

// TestHostilePipelining: the agent pipelines requests on one connection,
// the second to a host not on the list, or in plain HTTP to a credential
// host, or malformed. Held: each request is checked on its own (the
// second is refused with its own line and count), a refusal closes the
// connection so nothing behind it is read, and the upstream sees only
// the allowed request.
func TestHostilePipelining(t *testing.T) {
	rec := newRecorder(t)
	port := portOf(t, rec.srv.URL)
	ok := fmt.Sprintf("GET http://pkgs.test:%d/1 HTTP/1.1\r\nHost: pkgs.test:%d\r\n\r\n", port, port)
	third := fmt.Sprintf("GET http://pkgs.test:%d/3 HTTP/1.1\r\nHost: pkgs.test:%d\r\n\r\n", port, port)
	tests := map[string]struct {
		second string
		reason Reason
		code   int
	}{
		"second to another host": {"GET http://evil.test/2 HTTP/1.1\r\nHost: evil.test\r\n\r\n", ReasonNotAllowed, 403},
		"second in plain HTTP to the credential host": {fmt.Sprintf("GET http://cred.test:%d/2 HTTP/1.1\r\nHost: cred.test\r\n\r\n", port),
			ReasonPlainCredential, 403},
		"second is CONNECT elsewhere": {"CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n", ReasonNotAllowed, 403},
		"second is malformed":         {"GET http://evil.test#/2 HTTP/1.1\r\nHost: evil.test\r\n\r\n", ReasonMalformed, 400},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, Options{Secret: func(string) (string, bool) { return "pipelined-secret", true }},
				Rule{Host: "pkgs.test", Port: port, Private: true},
				Rule{Host: "cred.test", Port: port, Private: true, Credential: &Credential{Env: "C"}})
			r.res.names["pkgs.test"] = []string{"127.0.0.1"}
			r.res.names["cred.test"] = []string{"127.0.0.1"}
			before := len(rec.requests())
			c, err := net.Dial("tcp", r.url.Host)
			require.NoError(t, err)
			defer func() { _ = c.Close() }()
			_, err = io.WriteString(c, ok+tc.second+third)
			require.NoError(t, err)
			codes := readResponses(t, c, 3)
			assert.Equal(t, []int{200, tc.code}, codes, "the third request, behind a refusal, is never read")
			assert.Equal(t, []string{fmt.Sprintf(`GET /1 pkgs.test:%d ""`, port)}, rec.requests()[before:])
			l := r.waitRefused(t, 1)[0]
			assert.Equal(t, string(tc.reason), l["reason"])
		})
	}
}

// TestHostileSmugglingThroughConnect: bytes behind a CONNECT head. Held:
// behind a refused CONNECT they are never parsed (the refusal closes the
// connection); behind an allowed one, Content-Length or Transfer-Encoding
// notwithstanding, they are tunnel payload for the allowed destination,
// which receives them as they are; and a forward with both
// Content-Length and Transfer-Encoding does not smuggle a second request.
func TestHostileSmugglingThroughConnect(t *testing.T) {
	rec := newRecorder(t)
	port := portOf(t, rec.srv.URL)
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = echo.Close() }()
	got := make(chan string, 4)
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				b, _ := io.ReadAll(c)
				got <- string(b)
			}()
		}
	}()
	echoPort := echo.Addr().(*net.TCPAddr).Port
	r := newRig(t, Options{}, Rule{Host: "pkgs.test", Port: port, Private: true}, Rule{Host: "echo.test", Port: echoPort, Private: true})
	r.res.names["pkgs.test"] = []string{"127.0.0.1"}
	r.res.names["echo.test"] = []string{"127.0.0.1"}
	smuggled := fmt.Sprintf("GET http://pkgs.test:%d/smuggled HTTP/1.1\r\nHost: pkgs.test:%d\r\n\r\n", port, port)

	// Behind a refused CONNECT.
	c, err := net.Dial("tcp", r.url.Host)
	require.NoError(t, err)
	_, err = io.WriteString(c, "CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\nContent-Length: "+strconv.Itoa(len(smuggled))+"\r\n\r\n"+smuggled)
	require.NoError(t, err)
	assert.Equal(t, []int{403}, readResponses(t, c, 2))
	_ = c.Close()

	// Behind an allowed CONNECT, with framing headers that claim a body.
	for _, framing := range []string{"Content-Length: " + strconv.Itoa(len(smuggled)), "Transfer-Encoding: chunked"} {
		c, err = net.Dial("tcp", r.url.Host)
		require.NoError(t, err)
		target := net.JoinHostPort("echo.test", strconv.Itoa(echoPort))
		_, err = io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n"+framing+"\r\n\r\n"+smuggled)
		require.NoError(t, err)
		assert.Equal(t, 200, connectStatus(t, c))
		require.NoError(t, c.(*net.TCPConn).CloseWrite())
		select {
		case payload := <-got:
			assert.Equal(t, smuggled, payload, "the tunnel carried the bytes to the allowed destination, unparsed")
		case <-time.After(10 * time.Second):
			t.Fatal("the tunnel carried nothing")
		}
		_ = c.Close()
	}

	// A forward with both framings: one request upstream, its body by
	// the chunked framing; what follows is a request of its own, checked.
	c, err = net.Dial("tcp", r.url.Host)
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	_, err = fmt.Fprintf(c, "POST http://pkgs.test:%d/post HTTP/1.1\r\nHost: pkgs.test:%d\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"+
		"GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n", port, port)
	require.NoError(t, err)
	codes := readResponses(t, c, 2)
	t.Logf("a forward with Content-Length and Transfer-Encoding, then a request: answers %v", codes)
	assert.Contains(t, [][]int{{400}, {200, 403}}, codes, "refused outright, or the second request checked on its own")
	for _, seen := range rec.requests() {
		assert.NotContains(t, seen, "smuggled")
		assert.NotContains(t, seen, "evil")
	}
	for _, l := range r.refusedLines(t) {
		assert.NotEqual(t, "pkgs.test", l["host"], l)
	}
	r.dial.mu.Lock()
	for _, a := range r.dial.asked {
		assert.Contains(t, []string{"127.0.0.1:" + strconv.Itoa(port), "127.0.0.1:" + strconv.Itoa(echoPort)}, a)
	}
	r.dial.mu.Unlock()
}

// TestHostileInterceptedTunnel: inside a tunnel the proxy terminates (a
// host with a credential), the agent names another host in the request
// target, in Host, in the TLS server name, opens a tunnel in the tunnel,
// or sends a head net/http refuses. Held: every request goes to the
// tunnel's host with its authority, the credential only there; CONNECT
// and malformed heads inside are refused with a line and a count.
func TestHostileInterceptedTunnel(t *testing.T) {
	type seen struct{ host, auth, uri string }
	var mu sync.Mutex
	var got []seen
	srv, tc := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, seen{r.Host, r.Header.Get("Authorization"), r.RequestURI})
		mu.Unlock()
		_, _ = io.WriteString(w, "registry")
	}))
	port := portOf(t, srv.URL)
	ca, err := NewCA()
	require.NoError(t, err)
	r := newRig(t, Options{CA: ca, UpstreamTLS: tc, HeaderTimeout: testHeaderTimeout, Secret: func(string) (string, bool) { return "tunnel-secret", true }},
		Rule{Host: "registry.test", Port: port, Private: true, Credential: &Credential{Env: "T", Prefix: "Bearer "}})
	r.res.names["registry.test"] = []string{"127.0.0.1"}
	authority := net.JoinHostPort("registry.test", strconv.Itoa(port))

	// open a tunnel and a TLS session in it; sni is the server name the
	// agent offers (it ignores the certificate it gets).
	open := func(sni string) *tls.Conn {
		c, err := net.Dial("tcp", r.url.Host)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		_, err = fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
		require.NoError(t, err)
		require.Equal(t, 200, connectStatus(t, c))
		tc := tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: true}) //nolint:gosec // the agent ignores the certificate
		require.NoError(t, tc.Handshake())
		return tc
	}
	exchangeIn := func(tc *tls.Conn, raw string) []int {
		_, err := io.WriteString(tc, raw)
		require.NoError(t, err)
		return readResponses(t, tc, 1)
	}
	tun := open("evil.test")
	assert.Equal(t, []string{"registry.test"}, tun.ConnectionState().PeerCertificates[0].DNSNames, "the certificate is the tunnel's host's, whatever the SNI")
	assert.Equal(t, []int{200}, exchangeIn(tun, "GET http://evil.test/abs HTTP/1.1\r\nHost: evil.test\r\n\r\n"))
	assert.Equal(t, []int{200}, exchangeIn(tun, "GET /rel HTTP/1.1\r\nHost: evil.test:443\r\nAuthorization: Bearer forged\r\n\r\n"))
	assert.Equal(t, []int{403}, exchangeIn(tun, "CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n"))
	tun = open("registry.test")
	assert.Equal(t, []int{400}, exchangeIn(tun, "GET /bad HTTP/1.1\r\nHost: registry.test\r\nBad Header: x\r\n\r\n"))
	tun = open("registry.test")
	assert.Equal(t, []int{403}, exchangeIn(tun, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))

	mu.Lock()
	assert.Equal(t, []seen{{authority, "Bearer tunnel-secret", "/abs"}, {authority, "Bearer tunnel-secret", "/rel"}}, got)
	mu.Unlock()
	lines := r.waitRefused(t, 3)
	reasons := map[any]int{}
	for _, l := range lines {
		reasons[l["reason"]]++
		assert.Equal(t, "registry.test", l["host"], "a refusal in a tunnel names the tunnel's host")
	}
	assert.Equal(t, map[any]int{string(ReasonNotProxy): 2, string(ReasonMalformed): 1}, reasons)
	assert.Contains(t, r.logs.String(), `"in_tunnel":true`)
	r.res.mu.Lock()
	assert.Zero(t, r.res.calls["evil.test"], "the other name was never even resolved")
	r.res.mu.Unlock()
}

// TestHostileSlowloris: the agent opens many connections to the proxy and
// never finishes a request head. Held: past 4×MaxConcurrent open at once
// each is refused at once with a 503, a line and a count; the rest are
// cut at HeaderTimeout, each with a line and a count; then the proxy
// serves again.
func TestHostileSlowloris(t *testing.T) {
	rec, r, port := newPkgsRig(t, Options{MaxConcurrent: 2, HeaderTimeout: 2 * time.Second})
	const n = 20
	capOpen := clientsPerSlot * 2
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", r.url.Host)
		require.NoError(t, err)
		conns = append(conns, c)
		_, _ = io.WriteString(c, "GET http://pkgs.test/ HTTP/1.1\r\nHost: pk")
	}
	var busy, cut int
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(c)
		switch {
		case strings.HasPrefix(string(b), "HTTP/1.1 503"):
			busy++
			assert.Contains(t, string(b), "MaxConcurrent")
		default:
			cut++
		}
		_ = c.Close()
	}
	assert.Equal(t, n-capOpen, busy, "past the cap, refused at once")
	assert.Equal(t, capOpen, cut, "within the cap, cut at the header timeout")
	lines := r.waitRefused(t, n)
	reasons := map[any]int{}
	for _, l := range lines {
		reasons[l["reason"]]++
	}
	assert.Equal(t, map[any]int{string(ReasonTooManyClients): n - capOpen, string(ReasonTimeout): capOpen}, reasons)
	resp, err := r.client(nil).Get(fmt.Sprintf("http://pkgs.test:%d/after", port))
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode, "the proxy serves again")
	assert.Equal(t, []string{`GET /after pkgs.test:` + strconv.Itoa(port) + ` ""`}, rec.requests(), "no unfinished head went anywhere")
}

// TestHostileHTTP10WithoutHost: HTTP/1.0 needs no Host header. Held: an
// absolute-form request still goes only where its URL says, once the
// policy allowed it; an origin-form one is not a proxy request; CONNECT
// works as with HTTP/1.1.
func TestHostileHTTP10WithoutHost(t *testing.T) {
	rec, r, port := newPkgsRig(t, Options{})
	target := net.JoinHostPort("pkgs.test", strconv.Itoa(port))
	assert.Contains(t, sendRaw(t, r.url.Host, "GET http://"+target+"/ten HTTP/1.0\r\n\r\n", true), "HTTP/1.0 200 OK")
	assert.Contains(t, sendRaw(t, r.url.Host, "GET /ten HTTP/1.0\r\n\r\n", true), "not a proxy request")
	assert.Contains(t, sendRaw(t, r.url.Host, "GET http://evil.test/ten HTTP/1.0\r\n\r\n", true), "403 Forbidden")
	c, err := net.Dial("tcp", r.url.Host)
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	_, err = io.WriteString(c, "CONNECT "+target+" HTTP/1.0\r\n\r\n")
	require.NoError(t, err)
	assert.Equal(t, 200, connectStatus(t, c))
	assert.Equal(t, []string{`GET /ten ` + target + ` ""`}, rec.requests())
	lines := r.waitRefused(t, 2)
	assert.Equal(t, string(ReasonNotProxy), lines[0]["reason"])
	assert.Equal(t, string(ReasonNotAllowed), lines[1]["reason"])
}

// TestHostileLongHeaders: a head just under the proxy's 64 KiB passes;
// one over it, as one huge header or thousands of small ones, is answered
// 431 with a line and a count, and the upstream sees nothing of it.
func TestHostileLongHeaders(t *testing.T) {
	rec, r, port := newPkgsRig(t, Options{})
	target := net.JoinHostPort("pkgs.test", strconv.Itoa(port))
	head := "GET http://" + target + "/%s HTTP/1.1\r\nHost: " + target + "\r\nConnection: close\r\n"
	under := fmt.Sprintf(head, "under") + "X-Big: " + strings.Repeat("b", 60<<10) + "\r\n\r\n"
	assert.Contains(t, sendRaw(t, r.url.Host, under, false), "200 OK")
	oneHuge := fmt.Sprintf(head, "huge") + "X-Big: " + strings.Repeat("b", 1<<20) + "\r\n\r\n"
	assert.Contains(t, sendRaw(t, r.url.Host, oneHuge, false), "431 Request Header Fields Too Large")
	many := fmt.Sprintf(head, "many") + strings.Repeat("A: b\r\n", 20000) + "\r\n"
	assert.Contains(t, sendRaw(t, r.url.Host, many, false), "431 Request Header Fields Too Large")
	assert.Len(t, rec.requests(), 1)
	for _, l := range r.waitRefused(t, 2) {
		assert.Equal(t, string(ReasonHeaderTooLarge), l["reason"])
		assert.Contains(t, l["request_line"], "GET http://"+target)
	}
}
