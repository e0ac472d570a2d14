package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wire is a destination that records what reaches it in clear. A
// connection whose first byte opens a TLS handshake is relayed unread to
// a TLS server; any other is read as plain HTTP, recorded and answered
// 200 "in clear". A credential in clear() went over the network readable.
type wire struct {
	ln     net.Listener
	tlsTo  string
	mu     sync.Mutex
	plain  bytes.Buffer
	nPlain int
}

func newWire(t *testing.T, tlsTo string) *wire {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	w := &wire{ln: ln, tlsTo: tlsTo}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go w.handle(c)
		}
	}()
	return w
}

func (w *wire) addr() string { return w.ln.Addr().String() }

func (w *wire) handle(c net.Conn) {
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	if first[0] == 0x16 { // a TLS handshake record
		up, err := net.Dial("tcp", w.tlsTo)
		if err != nil {
			return
		}
		defer func() { _ = up.Close() }()
		go func() { _, _ = io.Copy(up, br) }()
		_, _ = io.Copy(c, up)
		return
	}
	var seen bytes.Buffer
	req, err := http.ReadRequest(bufio.NewReader(io.TeeReader(br, &seen)))
	if err == nil {
		_, _ = io.Copy(io.Discard, req.Body)
	}
	w.mu.Lock()
	w.plain.Write(seen.Bytes())
	w.nPlain++
	w.mu.Unlock()
	_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nin clear")
}

// clear is every plain-text byte that reached the wire, and how many
// plain connections brought them.
func (w *wire) clear() (string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.plain.String(), w.nPlain
}

// credRig is a proxy whose rules carry a credential for a name, a
// wildcard and an IP address (all on ports 80 and 443, which the dialler
// sends to one wire), plus other.test without one; the wire's TLS side
// is a server that records the Authorization it receives.
type credRig struct {
	*rig
	wire    *wire
	mu      sync.Mutex
	tlsAuth []string // Authorization headers that arrived over TLS
	ca      *CA
	trustCA *x509.CertPool
}

const credSecret = "s3cret-in-the-gateway"

func newCredRig(t *testing.T) *credRig {
	t.Helper()
	cr := &credRig{}
	srv, tc := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cr.mu.Lock()
		cr.tlsAuth = append(cr.tlsAuth, r.Header.Get("Authorization"))
		cr.mu.Unlock()
		switch r.URL.Path {
		case "/to-plain":
			http.Redirect(w, r, "http://cred.test:443/landed", http.StatusFound)
		case "/to-plain-port-80":
			http.Redirect(w, r, "http://CRED.test./landed", http.StatusFound)
		case "/to-other":
			http.Redirect(w, r, "http://other.test/landed", http.StatusFound)
		default:
			_, _ = io.WriteString(w, "over tls")
		}
	}))
	cr.wire = newWire(t, srv.Listener.Addr().String())
	var err error
	cr.ca, err = NewCA()
	require.NoError(t, err)
	cr.trustCA = x509.NewCertPool()
	require.True(t, cr.trustCA.AppendCertsFromPEM(cr.ca.CertPEM()))
	cred := &Credential{Env: "CRED", Prefix: "Bearer "}
	cr.rig = newRig(t, Options{CA: cr.ca, UpstreamTLS: tc, Secret: func(n string) (string, bool) { return credSecret, n == "CRED" }},
		Rule{Host: "cred.test", Private: true, Credential: cred},
		Rule{Host: "*.wild.test", Credential: cred},
		Rule{Host: "127.0.0.1", Credential: cred},
		Rule{Host: "other.test", Private: true})
	cr.res.names["cred.test"] = []string{"127.0.0.1"}
	cr.res.names["other.test"] = []string{"127.0.0.2"}
	cr.res.names["a.wild.test"] = []string{"93.184.216.34"}
	for _, ip := range []string{"127.0.0.1", "127.0.0.2", "93.184.216.34"} {
		for _, port := range []string{"80", "443"} {
			cr.dial.redirect[ip+":"+port] = cr.wire.addr()
		}
	}
	return cr
}

func (cr *credRig) authOverTLS() []string {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	return append([]string(nil), cr.tlsAuth...)
}

// exchange writes raw to the proxy and reads one response: its status,
// header and body.
func exchange(t *testing.T, proxyAddr, raw string) (int, http.Header, string) {
	t.Helper()
	c, err := net.Dial("tcp", proxyAddr)
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	go func() { _, _ = io.WriteString(c, raw) }()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err, "no answer to %q", raw)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, resp.Header, string(b)
}

// TestNoCredentialOverPlainHTTP (issue 32 §3): a credential goes only
// inside TLS to a server the proxy verified. Plain http:// to a host
// whose rule carries one is refused with 403 naming the fix, whatever
// form the host takes (case, trailing dot, port 80 or the TLS port 443,
// IP forms of an IP rule, a wildcard's name) and before anything is
// dialled; the wire never sees the secret in clear. https:// (the
// proxy's own TLS) and CONNECT (intercepted) still carry it, encrypted,
// even to port 80.
func TestNoCredentialOverPlainHTTP(t *testing.T) {
	cr := newCredRig(t)
	refused := map[string]string{
		"proxy-form http":                "GET http://cred.test/x HTTP/1.1\r\nHost: cred.test\r\n\r\n",
		"http to the TLS port":           "GET http://cred.test:443/x HTTP/1.1\r\nHost: cred.test:443\r\n\r\n",
		"explicit port 80":               "GET http://cred.test:80/x HTTP/1.1\r\nHost: cred.test\r\n\r\n",
		"upper case":                     "GET http://CRED.TEST/x HTTP/1.1\r\nHost: CRED.TEST\r\n\r\n",
		"mixed case, TLS port":           "GET http://Cred.Test:443/x HTTP/1.1\r\nHost: x\r\n\r\n",
		"trailing dot":                   "GET http://cred.test./x HTTP/1.1\r\nHost: cred.test.\r\n\r\n",
		"trailing dot, TLS port":         "GET http://cred.test.:443/x HTTP/1.1\r\nHost: cred.test.:443\r\n\r\n",
		"upper case scheme":              "GET HTTP://cred.test/x HTTP/1.1\r\nHost: cred.test\r\n\r\n",
		"HTTP/1.0 without Host":          "GET http://cred.test/x HTTP/1.0\r\n\r\n",
		"POST with a body":               "POST http://cred.test:443/upload HTTP/1.1\r\nHost: cred.test\r\nContent-Length: 4\r\n\r\nbody",
		"websocket upgrade":              "GET http://cred.test/ws HTTP/1.1\r\nHost: cred.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
		"Host header of another host":    "GET http://cred.test/x HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"wildcard rule":                  "GET http://a.wild.test/x HTTP/1.1\r\nHost: a.wild.test\r\n\r\n",
		"wildcard rule, TLS port, upper": "GET http://A.WILD.TEST.:443/x HTTP/1.1\r\nHost: a\r\n\r\n",
		"IP rule":                        "GET http://127.0.0.1/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
		"IP rule, TLS port":              "GET http://127.0.0.1:443/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
		"IP rule, v4-mapped IPv6":        "GET http://[::ffff:127.0.0.1]:443/x HTTP/1.1\r\nHost: x\r\n\r\n",
		"IP rule, v4-mapped hex":         "GET http://[::ffff:7f00:1]/x HTTP/1.1\r\nHost: x\r\n\r\n",
	}
	for name, raw := range refused {
		t.Run(name, func(t *testing.T) {
			code, header, body := exchange(t, cr.url.Host, raw)
			assert.Equal(t, http.StatusForbidden, code, body)
			assert.Equal(t, "refused", header.Get("X-Agentbox-Egress"))
			assert.Contains(t, body, "carries a credential, which the proxy sends only over TLS; use https://")
		})
	}
	lines := cr.waitRefused(t, len(refused))
	for _, l := range lines {
		assert.Equal(t, string(ReasonPlainCredential), l["reason"], l)
		assert.Equal(t, "u1", l["user"])
	}
	for _, r := range cr.refusals() {
		assert.Equal(t, ReasonPlainCredential, r)
	}
	cr.dial.mu.Lock()
	assert.Empty(t, cr.dial.asked, "a refused request dials nothing")
	cr.dial.mu.Unlock()

	// Forms the IP rule does not match are refused by the policy, with
	// no credential either.
	for _, host := range []string{"2130706433", "0x7f.0.0.1", "127.1"} {
		code, _, body := exchange(t, cr.url.Host, "GET http://"+host+"/x HTTP/1.1\r\nHost: x\r\n\r\n")
		assert.Equal(t, http.StatusForbidden, code, body)
		assert.NotContains(t, body, "credential")
	}

	// Controls: the credential still goes, encrypted. https:// sent to
	// the proxy (busybox wget), to the TLS port and to port 80, where
	// the upstream must speak TLS too.
	for _, target := range []string{"https://cred.test/y", "https://cred.test:80/y", "https://A.WILD.TEST./y"} {
		code, _, body := exchange(t, cr.url.Host, "GET "+target+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer forged\r\nConnection: close\r\n\r\n")
		assert.Equal(t, http.StatusOK, code, body)
		assert.Equal(t, "over tls", body, target)
	}
	// CONNECT, intercepted, to port 443 and to port 80.
	client := cr.client(&tls.Config{RootCAs: cr.trustCA})
	for _, u := range []string{"https://cred.test/z", "https://cred.test:80/z"} {
		resp, err := client.Get(u)
		require.NoError(t, err, u)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, "over tls", string(b), u)
	}
	assert.Equal(t, []string{"Bearer " + credSecret, "Bearer " + credSecret, "Bearer " + credSecret, "Bearer " + credSecret, "Bearer " + credSecret},
		cr.authOverTLS(), "the credential replaced the agent's and went over TLS")
	clear, n := cr.wire.clear()
	assert.NotContains(t, clear, credSecret, "the secret never crossed the wire in clear")
	assert.Zero(t, n, "nothing reached the wire in clear")
	assert.NotContains(t, cr.logs.String(), credSecret)
}

// TestHostileRedirectToCredentialHost: the credential host (or the agent
// through it) answers a redirect to plain http:// on the same host, at
// its TLS port or port 80 and in another case, or to another allowed
// host. The client follows: the plain request to the credential host is
// refused, the one to the other host goes without the credential. Held:
// the proxy decides per request from its URL, and never follows
// redirects itself.
func TestHostileRedirectToCredentialHost(t *testing.T) {
	cr := newCredRig(t)
	client := cr.client(&tls.Config{RootCAs: cr.trustCA})
	for path, want := range map[string]int{"/to-plain": http.StatusForbidden, "/to-plain-port-80": http.StatusForbidden, "/to-other": http.StatusOK} {
		resp, err := client.Get("https://cred.test" + path)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, want, resp.StatusCode, "%s: %s", path, b)
	}
	assert.Len(t, cr.authOverTLS(), 3, "each first request went over TLS with the credential")
	clear, n := cr.wire.clear()
	assert.Equal(t, 1, n, "only the redirect to other.test reached the wire in clear")
	assert.Contains(t, clear, "Host: other.test")
	assert.NotContains(t, clear, credSecret)
	assert.NotContains(t, strings.ToLower(clear), "authorization")
	lines := cr.waitRefused(t, 2)
	for _, l := range lines {
		assert.Equal(t, string(ReasonPlainCredential), l["reason"])
	}
}

// TestNewRefusesUnverifiedUpstreamWithCredential: a credential never goes
// to an upstream whose certificate is not checked.
func TestNewRefusesUnverifiedUpstreamWithCredential(t *testing.T) {
	pol, err := NewPolicy(Rule{Host: "cred.test", Credential: &Credential{Env: "X"}})
	require.NoError(t, err)
	_, err = New(Options{Policy: pol, UpstreamTLS: &tls.Config{InsecureSkipVerify: true}}) //nolint:gosec // the configuration under test
	assert.ErrorContains(t, err, "skips certificate verification")
	plain, err := NewPolicy(Rule{Host: "plain.test"})
	require.NoError(t, err)
	_, err = New(Options{Policy: plain, UpstreamTLS: &tls.Config{InsecureSkipVerify: true}}) //nolint:gosec // allowed without a credential
	assert.NoError(t, err)
}
