package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/internal/testkit/testenv"
)

// mapResolver is a test resolver: names map to fixed addresses, anything
// else does not exist. No test resolves a real name.
type mapResolver struct {
	mu    sync.Mutex
	names map[string][]string
	calls map[string]int
}

func (m *mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.calls == nil {
		m.calls = map[string]int{}
	}
	m.calls[host]++
	var out []netip.Addr
	for _, s := range m.names[host] {
		out = append(out, netip.MustParseAddr(s))
	}
	if len(out) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

// loopbackOnly dials loopback addresses and records every address asked
// for; anything else fails without a packet sent. redirect sends an
// address (a public one, or port 80 or 443) to a loopback test server.
type loopbackOnly struct {
	mu       sync.Mutex
	asked    []string
	redirect map[string]string
}

func (l *loopbackOnly) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	l.mu.Lock()
	l.asked = append(l.asked, addr)
	if to, ok := l.redirect[addr]; ok {
		addr = to
	}
	l.mu.Unlock()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().IsLoopback() {
		return nil, fmt.Errorf("test dialer: %s is not loopback; refusing to send traffic", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

type rig struct {
	proxy *Proxy
	url   *url.URL
	logs  *testenv.SyncBuffer
	res   *mapResolver
	dial  *loopbackOnly
	// counted are the reasons Options.OnRefuse was called with.
	countMu sync.Mutex
	counted []Reason
}

func newRig(t *testing.T, o Options, rules ...Rule) *rig {
	t.Helper()
	pol, err := NewPolicy(rules...)
	require.NoError(t, err)
	r := &rig{logs: &testenv.SyncBuffer{}, dial: &loopbackOnly{redirect: map[string]string{}}}
	if o.Resolver == nil {
		r.res = &mapResolver{names: map[string][]string{}}
		o.Resolver = r.res
	}
	o.Policy = pol
	o.Dial = r.dial.Dial
	o.OnRefuse = func(reason Reason) {
		r.countMu.Lock()
		defer r.countMu.Unlock()
		r.counted = append(r.counted, reason)
	}
	o.Logger = hclog.New(&hclog.LoggerOptions{Output: r.logs, JSONFormat: true, Level: hclog.Debug}).With("user", "u1", "chat", "c1")
	r.proxy, err = New(o)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = r.proxy.Serve(ln) }()
	t.Cleanup(func() { _ = r.proxy.Close() })
	r.url = &url.URL{Scheme: "http", Host: ln.Addr().String()}
	return r
}

func (r *rig) client(tlsConf *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(r.url), TLSClientConfig: tlsConf, DisableKeepAlives: true}, Timeout: 20 * time.Second}
}

// lines returns the proxy's log lines as maps.
func (r *rig) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(r.logs.String()), "\n") {
		if l == "" {
			continue
		}
		m := map[string]any{}
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		out = append(out, m)
	}
	return out
}

// refusals returns the reasons counted through Options.OnRefuse.
func (r *rig) refusals() []Reason {
	r.countMu.Lock()
	defer r.countMu.Unlock()
	return append([]Reason(nil), r.counted...)
}

// refusedLines returns the log lines of refused attempts.
func (r *rig) refusedLines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range r.lines(t) {
		if l["outcome"] == "refused" {
			out = append(out, l)
		}
	}
	return out
}

// waitRefused waits until n refused attempts were logged and counted and
// returns their lines; it fails when more than n were.
func (r *rig) waitRefused(t *testing.T, n int) []map[string]any {
	t.Helper()
	require.Eventually(t, func() bool { return len(r.refusedLines(t)) >= n && len(r.refusals()) >= n }, 10*time.Second, 5*time.Millisecond,
		"want %d refused lines and counts, have %d and %v:\n%s", n, len(r.refusedLines(t)), r.refusals(), r.logs.String())
	lines := r.refusedLines(t)
	require.Len(t, lines, n, r.logs.String())
	require.Len(t, r.refusals(), n)
	return lines
}

// waitLine waits for a log line whose host is host (lines are written when a
// connection ends, which may be after the client saw its answer).
func (r *rig) waitLine(t *testing.T, host string) map[string]any {
	t.Helper()
	var found map[string]any
	require.Eventually(t, func() bool {
		for _, l := range r.lines(t) {
			if l["host"] == host {
				found = l
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "no log line for %s in:\n%s", host, r.logs.String())
	return found
}

func portOf(t *testing.T, u string) int {
	t.Helper()
	pu, err := url.Parse(u)
	require.NoError(t, err)
	p, err := strconv.Atoi(pu.Port())
	require.NoError(t, err)
	return p
}

// TestPlainHTTPForward: an absolute-form http:// request to a host
// without a credential is forwarded with hop-by-hop headers stripped and
// no forwarding headers added; the agent's own headers pass.
func TestPlainHTTPForward(t *testing.T) {
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		_, _ = io.WriteString(w, "package tarball")
	}))
	defer srv.Close()
	port := portOf(t, srv.URL)
	r := newRig(t, Options{}, Rule{Host: "pkgs.test", Port: port, Private: true})
	r.res.names["pkgs.test"] = []string{"127.0.0.1"}

	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://pkgs.test:%d/pkg.tgz", port), nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer the-agents-own")
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "must not pass")
	req.Header.Set("Proxy-Authorization", "Basic Zm9vOmJhcg==")
	resp, err := r.client(nil).Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, "package tarball", string(body))
	assert.Equal(t, "Bearer the-agents-own", got.Get("Authorization"), "no credential on this host: the agent's header passes")
	assert.Empty(t, got.Get("X-Hop"), "hop-by-hop headers are stripped")
	assert.Empty(t, got.Get("Proxy-Authorization"))
	assert.Empty(t, got.Get("X-Forwarded-For"))

	l := r.waitLine(t, "pkgs.test")
	assert.Equal(t, "u1", l["user"])
	assert.Equal(t, "c1", l["chat"])
	assert.Equal(t, "ok", l["outcome"])
	assert.Equal(t, "GET", l["method"])
	assert.Equal(t, "127.0.0.1:"+strconv.Itoa(port), l["addr"])
	assert.Greater(t, l["bytes_up"].(float64), float64(0))
	assert.Greater(t, l["bytes_down"].(float64), float64(len("package tarball")))
	st := r.proxy.Stats()
	assert.Equal(t, int64(1), st.Connections)
	assert.Equal(t, int64(l["bytes_down"].(float64)), st.BytesDown)
}

func TestRefusals(t *testing.T) {
	hit := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit <- r.Host }))
	defer srv.Close()
	port := portOf(t, srv.URL)
	r := newRig(t, Options{},
		Rule{Host: "pkgs.test", Port: port, Private: true},
		Rule{Host: "rebind.test", Port: port},
		Rule{Host: "*.example.test", Port: port},
		Rule{Host: "nxdomain.test", Port: port})
	r.res.names["pkgs.test"] = []string{"127.0.0.1"}
	r.res.names["rebind.test"] = []string{"127.0.0.1"}
	r.res.names["localhost"] = []string{"127.0.0.1"}
	r.res.names["evil-example.test"] = []string{"127.0.0.1"}
	r.res.names["a.example.test"] = []string{"169.254.169.254", "10.0.0.1"}

	tests := map[string]struct {
		host     string
		code     int
		contains []string
	}{
		"not listed":             {"other.test", 403, []string{"other.test", "not on the sandbox's egress allowlist", ConfigKey}},
		"ip literal":             {"127.0.0.1", 403, []string{"IP address", ConfigKey}},
		"localhost":              {"localhost", 403, []string{"localhost", ConfigKey}},
		"metadata":               {"169.254.169.254", 403, []string{"169.254.169.254", ConfigKey}},
		"rebinding name":         {"rebind.test", 403, []string{"resolves to 127.0.0.1", `"private": true`}},
		"wildcard boundary":      {"evil-example.test", 403, []string{"not on the sandbox's egress allowlist"}},
		"wildcard to private":    {"a.example.test", 403, []string{"169.254.169.254, 10.0.0.1"}},
		"ipv6 loopback":          {"[::1]", 403, []string{"IP address"}},
		"uppercase wildcard":     {"A.EXAMPLE.TEST", 403, []string{"169.254.169.254, 10.0.0.1"}},
		"name that never exists": {"nxdomain.test", 502, []string{"resolve nxdomain.test"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			resp, err := r.client(nil).Get(fmt.Sprintf("http://%s:%d/", tc.host, port))
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			assert.Equal(t, tc.code, resp.StatusCode, string(body))
			assert.Equal(t, "refused", resp.Header.Get("X-Agentbox-Egress"))
			for _, c := range tc.contains {
				assert.Contains(t, string(body), c)
			}
			// The same over CONNECT.
			code, cbody := rawConnect(t, r.url.Host, net.JoinHostPort(strings.Trim(tc.host, "[]"), strconv.Itoa(port)))
			assert.Equal(t, tc.code, code, cbody)
			for _, c := range tc.contains {
				assert.Contains(t, cbody, c)
			}
		})
	}
	select {
	case h := <-hit:
		t.Fatalf("a refused request reached the server (Host %s)", h)
	default:
	}
	assert.Empty(t, r.dial.asked, "nothing refused was dialled")
	for _, l := range r.lines(t) {
		want := "refused"
		if l["host"] == "nxdomain.test" {
			want = "error"
		}
		assert.Equal(t, want, l["outcome"], l)
		assert.Equal(t, "u1", l["user"])
	}
	assert.Equal(t, int64(2*len(tests)), r.proxy.Stats().Refused)

	// Control: the listed private name works, so the refusals above are the
	// policy's and not a broken rig.
	resp, err := r.client(nil).Get(fmt.Sprintf("http://pkgs.test:%d/", port))
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// rawConnect sends a CONNECT for target and returns the status and body.
func rawConnect(t *testing.T, proxyAddr, target string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", proxyAddr)
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	_, err = fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode == http.StatusOK {
		return 200, ""
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func tlsServer(t *testing.T, h http.Handler) (*httptest.Server, *tls.Config) {
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return srv, &tls.Config{RootCAs: pool, ServerName: "example.com"}
}

func TestConnectTunnel(t *testing.T) {
	var gotAuth string
	srv, tc := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		_, _ = w.Write(bytes.Repeat([]byte("x"), 100_000))
	}))
	port := portOf(t, srv.URL)
	r := newRig(t, Options{Secret: func(string) (string, bool) { return "never-in-tls", true }},
		Rule{Host: "registry.test", Port: port, Private: true, Credential: &Credential{Env: "T"}})
	r.res.names["registry.test"] = []string{"127.0.0.1"}
	resp, err := r.client(tc).Get(fmt.Sprintf("https://registry.test:%d/index.json", port))
	require.NoError(t, err)
	n, _ := io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, int64(100_000), n)
	assert.Empty(t, gotAuth, "a TLS tunnel is opaque: no credential is added")
	l := r.waitLine(t, "registry.test")
	assert.Equal(t, "CONNECT", l["method"])
	assert.Equal(t, "ok", l["outcome"])
	assert.Greater(t, l["bytes_down"].(float64), float64(100_000))
	assert.Greater(t, l["bytes_up"].(float64), float64(100), "the TLS handshake and request went up")
	assert.Equal(t, float64(port), l["port"])
}

func TestByteCap(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(bytes.Repeat([]byte("y"), 1<<20))
	}))
	defer srv.Close()
	port := portOf(t, srv.URL)
	const capBytes = 64 << 10
	r := newRig(t, Options{MaxBytes: capBytes}, Rule{Host: "big.test", Port: port, Private: true})
	r.res.names["big.test"] = []string{"127.0.0.1"}
	u := fmt.Sprintf("http://big.test:%d/", port)
	resp, err := r.client(nil).Get(u)
	var n int64
	if err == nil {
		n, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	assert.Less(t, n, int64(1<<20), "the download was cut")
	l := r.waitLine(t, "big.test")
	assert.Equal(t, "capped", l["outcome"], l)
	st := r.proxy.Stats()
	// A read may bring in at most one buffer past the cap.
	assert.LessOrEqual(t, st.BytesUp+st.BytesDown, int64(capBytes+64<<10))
	// The next request is refused outright.
	resp, err = r.client(nil).Get(u)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Contains(t, string(body), "MaxBytes")
}

func TestConnectionCaps(t *testing.T) {
	// A server that holds each connection open until the test ends.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); _ = c.Close() }()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	r := newRig(t, Options{MaxConcurrent: 1, MaxConnections: 2}, Rule{Host: "hold.test", Port: port, Private: true})
	r.res.names["hold.test"] = []string{"127.0.0.1"}
	target := net.JoinHostPort("hold.test", strconv.Itoa(port))

	open := func() (net.Conn, int, string) {
		c, err := net.Dial("tcp", r.url.Host)
		require.NoError(t, err)
		_, err = fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		b := ""
		if resp.StatusCode != 200 {
			bb, _ := io.ReadAll(resp.Body)
			b = string(bb)
		}
		return c, resp.StatusCode, b
	}
	c1, code, _ := open()
	require.Equal(t, 200, code)
	c2, code, body := open()
	_ = c2.Close()
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "MaxConcurrent")

	_ = c1.Close()
	require.Eventually(t, func() bool { return len(r.proxy.slots) == 0 }, 10*time.Second, 10*time.Millisecond)
	c3, code, _ := open()
	assert.Equal(t, 200, code, "a slot frees when a tunnel ends")
	_ = c3.Close()
	require.Eventually(t, func() bool { return len(r.proxy.slots) == 0 }, 10*time.Second, 10*time.Millisecond)
	c4, code, body := open()
	_ = c4.Close()
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "MaxConnections")
}

func TestCloseCutsTunnels(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c) }()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	r := newRig(t, Options{}, Rule{Host: "echo.test", Port: port, Private: true})
	r.res.names["echo.test"] = []string{"127.0.0.1"}
	c, err := net.Dial("tcp", r.url.Host)
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	target := net.JoinHostPort("echo.test", strconv.Itoa(port))
	// The head and the first tunnel bytes in one write: bytes buffered
	// behind the CONNECT head must reach the destination.
	_, err = fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nping", target, target)
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	require.NoError(t, err)
	_ = resp.Body.Close() // a 200 to CONNECT has no body: the tunnel follows
	require.Equal(t, 200, resp.StatusCode)
	buf := make([]byte, 4)
	_, err = io.ReadFull(br, buf)
	require.NoError(t, err)
	assert.Equal(t, "ping", string(buf))

	require.NoError(t, r.proxy.Close())
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = br.ReadByte()
	assert.Error(t, err)
	var ne net.Error
	assert.False(t, errors.As(err, &ne) && ne.Timeout(), "Close cut the tunnel (not the read deadline)")
}

func TestRebindingDialsOnlyCheckedAddresses(t *testing.T) {
	// The resolver answers a public address, then loopback: the proxy
	// resolves once and dials what it checked, never the second answer.
	res := &flipResolver{answers: [][]string{{"93.184.216.34"}, {"127.0.0.1"}}}
	r := newRig(t, Options{Resolver: res, DialTimeout: 2 * time.Second}, Rule{Host: "flip.test", Port: 8080})
	resp, err := r.client(nil).Get("http://flip.test:8080/")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "the test dialer refuses the public address")
	assert.Equal(t, []string{"93.184.216.34:8080"}, r.dial.asked)
	assert.Equal(t, 1, res.n)
}

type flipResolver struct {
	mu      sync.Mutex
	answers [][]string
	n       int
}

func (f *flipResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.answers[min(f.n, len(f.answers)-1)]
	f.n++
	var out []netip.Addr
	for _, s := range a {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

func TestNotAProxyRequest(t *testing.T) {
	r := newRig(t, Options{})
	resp, err := http.Get(r.url.String() + "/some/path")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Contains(t, string(body), "not a proxy request")
}

func TestNewRejectsNegativeCaps(t *testing.T) {
	_, err := New(Options{MaxBytes: -1})
	assert.ErrorContains(t, err, "never unlimited")
}

// TestAbsoluteHTTPS: a client that sends an https:// URL to the proxy (not
// CONNECT) gets the proxy's own TLS upstream, verified, with the
// credential added; an upstream certificate that does not verify fails.
func TestAbsoluteHTTPS(t *testing.T) {
	var gotAuth string
	srv, tc := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		_, _ = io.WriteString(w, "secure")
	}))
	port := portOf(t, srv.URL)
	for name, trust := range map[string]bool{"verified": true, "untrusted certificate": false} {
		t.Run(name, func(t *testing.T) {
			gotAuth = ""
			o := Options{Secret: func(string) (string, bool) { return "tls-secret", true }}
			if trust {
				o.UpstreamTLS = tc
			}
			r := newRig(t, o, Rule{Host: "secure.test", Port: port, Private: true, Credential: &Credential{Env: "T", Prefix: "Bearer "}})
			r.res.names["secure.test"] = []string{"127.0.0.1"}
			// What busybox wget sends for https:// through a proxy.
			c, err := net.Dial("tcp", r.url.Host)
			require.NoError(t, err)
			defer func() { _ = c.Close() }()
			_, err = fmt.Fprintf(c, "GET https://secure.test:%d/x HTTP/1.1\r\nHost: secure.test:%d\r\nAuthorization: Bearer forged\r\nConnection: close\r\n\r\n", port, port)
			require.NoError(t, err)
			// And half-closes, as busybox wget and nc do: net/http then
			// cancels the request's context, which must not stop it.
			require.NoError(t, c.(*net.TCPConn).CloseWrite())
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			require.NoError(t, err)
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			if !trust {
				assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
				assert.Contains(t, string(body), "certificate")
				assert.Empty(t, gotAuth, "nothing reached a server that did not verify")
				return
			}
			assert.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			assert.Equal(t, "secure", string(body))
			assert.Equal(t, "Bearer tls-secret", gotAuth, "the credential replaces what the agent sent")
			assert.NotContains(t, r.logs.String(), "tls-secret", "secrets are never logged")
			l := r.waitLine(t, "secure.test")
			assert.Equal(t, "ok", l["outcome"])
			assert.Greater(t, l["bytes_up"].(float64), float64(200), "the TLS handshake went up through the counted connection")
		})
	}
}
