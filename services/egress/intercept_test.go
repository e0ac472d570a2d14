package egress

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInterceptAddsCredentialInsideConnect: with a CA, a CONNECT to a host
// whose rule has a credential is terminated by the proxy, and the request
// inside reaches the real server over verified TLS with the credential in
// place of what the agent sent and the tunnel's host as its authority; a
// client that does not trust the CA gets nothing through; a host without a
// credential stays an opaque tunnel with the server's own certificate.
func TestInterceptAddsCredentialInsideConnect(t *testing.T) {
	type seen struct{ auth, host, path string }
	var mu sync.Mutex
	var got []seen
	srv, tc := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, seen{r.Header.Get("Authorization"), r.Host, r.URL.Path})
		mu.Unlock()
		_, _ = io.WriteString(w, "registry says hi")
	}))
	port := portOf(t, srv.URL)
	ca, err := NewCA()
	require.NoError(t, err)
	r := newRig(t, Options{CA: ca, UpstreamTLS: tc, Secret: func(name string) (string, bool) { return "s3cret-token", name == "REG_TOKEN" }},
		Rule{Host: "registry.test", Port: port, Private: true, Credential: &Credential{Env: "REG_TOKEN", Prefix: "Bearer "}},
		Rule{Host: "plain.test", Port: port, Private: true})
	r.res.names["registry.test"] = []string{"127.0.0.1"}
	r.res.names["plain.test"] = []string{"127.0.0.1"}
	trustCA := x509.NewCertPool()
	require.True(t, trustCA.AppendCertsFromPEM(ca.CertPEM()))

	for i := range 2 {
		req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("https://registry.test:%d/v1/pkg/%d", port, i), nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer forged-by-the-agent")
		req.Host = "elsewhere.test" // the authority inside is the tunnel's
		resp, err := r.client(&tls.Config{RootCAs: trustCA}).Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		assert.Equal(t, "registry says hi", string(body))
		require.NotNil(t, resp.TLS)
		assert.Equal(t, "agentbox egress interception CA", resp.TLS.PeerCertificates[0].Issuer.CommonName)
		assert.Equal(t, []string{"registry.test"}, resp.TLS.PeerCertificates[0].DNSNames)
	}
	mu.Lock()
	require.Len(t, got, 2)
	for i, s := range got {
		assert.Equal(t, "Bearer s3cret-token", s.auth, "the credential replaced the agent's header")
		assert.Equal(t, fmt.Sprintf("registry.test:%d", port), s.host)
		assert.Equal(t, fmt.Sprintf("/v1/pkg/%d", i), s.path)
	}
	got = nil
	mu.Unlock()
	assert.NotContains(t, r.logs.String(), "s3cret-token", "secrets are never logged")

	// A client that does not trust the CA: the handshake fails, nothing
	// reaches the server.
	resp, err := r.client(&tls.Config{RootCAs: x509.NewCertPool()}).Get(fmt.Sprintf("https://registry.test:%d/x", port))
	if err == nil {
		_ = resp.Body.Close()
	}
	require.Error(t, err)
	assert.Contains(t, err.Error(), "certificate")
	require.Eventually(t, func() bool { return strings.Contains(r.logs.String(), "must trust the gateway's egress CA") }, 10*time.Second, 10*time.Millisecond)

	// No credential: an opaque tunnel, the server's own certificate.
	resp, err = r.client(tc).Get(fmt.Sprintf("https://plain.test:%d/y", port))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	assert.NotEqual(t, "agentbox egress interception CA", resp.TLS.PeerCertificates[0].Issuer.CommonName)
	mu.Lock()
	require.Len(t, got, 1)
	assert.Empty(t, got[0].auth)
	mu.Unlock()
}

// TestCALeaves: host certificates chain to the CA, for names and
// addresses, and are cached.
func TestCALeaves(t *testing.T) {
	ca, err := NewCA()
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(ca.CertPEM()))
	for _, host := range []string{"registry.test", "10.1.2.3"} {
		l, err := ca.leaf(host)
		require.NoError(t, err)
		_, err = l.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host})
		require.NoError(t, err, host)
		again, err := ca.leaf(host)
		require.NoError(t, err)
		assert.Same(t, l, again)
	}
	other, err := NewCA()
	require.NoError(t, err)
	l, err := other.leaf("registry.test")
	require.NoError(t, err)
	_, err = l.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "registry.test"})
	assert.Error(t, err, "each gateway's CA is its own")
}
