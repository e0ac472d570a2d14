package docker

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/helper"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/services/egress"
)

// fetchSource is a static HTTPS client for the container, as curl, git,
// npm and pip behave: HTTPS_PROXY from the environment, CONNECT, the
// roots of SSL_CERT_FILE.
const fetchSource = `package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
)

func main() {
	req, _ := http.NewRequest("GET", os.Args[1], nil)
	req.Header.Set("Authorization", "Bearer agent-made-this-up")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s", resp.StatusCode, b)
}
`

// buildFetch compiles fetchSource for the container.
func buildFetch(t *testing.T) []byte { return buildStatic(t, "fetch", fetchSource) }

// TestEgressCredentialInsideCONNECT: an HTTPS client in a network-none
// container (CONNECT through the helper's relay, roots from
// SSL_CERT_FILE) reaches a loopback "registry" by a name only the proxy
// resolves; the proxy, holding the gateway's CA, terminates the tunnel and
// adds a credential the container never holds (not in its environment,
// files, process memory or docker inspect); the CA's private key is not in
// the container either, and a host without a credential stays an opaque
// tunnel.
func TestEgressCredentialInsideCONNECT(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) { o.HelperBinary = testenv.HelperBinary(t) })
	fetch := buildFetch(t)
	reg := newRegistry("private-index-v2")
	token := reg.token
	srv := httptest.NewUnstartedServer(reg)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the opaque tunnel's refused handshake
	srv.StartTLS()
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())

	ca, err := egress.NewCA()
	require.NoError(t, err)
	spec := testSpec("egress-ca")
	spec.Egress = true
	spec.Env = egress.CAEnv(DefaultHome)
	sb := create(t, e, spec)
	var stderr bytes.Buffer
	res, err := sb.Exec(context.Background(), &executor.Cmd{Args: []string{"sh", "-c", egress.CAInstallScript}, Stdin: bytes.NewReader(ca.CertPEM()), Stderr: &stderr})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, stderr.String())

	pol, err := egress.NewPolicy(
		egress.Rule{Host: "registry.test", Port: port, Private: true, Credential: &egress.Credential{Env: "REG_TOKEN", Prefix: "Bearer "}},
		egress.Rule{Host: "opaque.test", Port: port, Private: true})
	require.NoError(t, err)
	logs := &testenv.SyncBuffer{}
	proxy, err := egress.New(egress.Options{
		Policy:      pol,
		CA:          ca,
		Resolver:    testenv.Hosts{"registry.test": "127.0.0.1", "opaque.test": "127.0.0.1"},
		Secret:      func(name string) (string, bool) { return token, name == "REG_TOKEN" },
		Logger:      hclog.New(&hclog.LoggerOptions{Output: logs, JSONFormat: true}),
		UpstreamTLS: &tls.Config{RootCAs: pool, ServerName: "example.com"}, // httptest's certificate names example.com
	})
	require.NoError(t, err)
	ln, err := helper.ListenHostSocket(sb.HostDir(), helper.EgressSocket, executor.DefaultUID, executor.DefaultGID)
	require.NoError(t, err)
	go func() { _ = proxy.Serve(ln) }()
	defer func() { _ = proxy.Close() }()

	require.NoError(t, sb.WriteFile(context.Background(), "fetch", fetch))
	out := mustRun(t, sb, fmt.Sprintf("chmod 755 fetch && ./fetch https://registry.test:%d/index.json", port))
	assert.Equal(t, "200 private-index-v2", out, "the credential reached the registry inside the CONNECT tunnel")
	assert.Equal(t, []string{fmt.Sprintf("registry.test:%d Bearer %s", port, token)}, reg.requests(), "the agent's own Authorization was replaced")

	// A host without a credential: an opaque tunnel with the server's own
	// certificate, which the container does not trust.
	_, errOut, res2, err := run(t, sb, fmt.Sprintf("./fetch https://opaque.test:%d/", port))
	require.NoError(t, err)
	assert.NotEqual(t, 0, res2.ExitCode)
	assert.Contains(t, errOut, "certificate", "no interception for a host without a credential")

	assertSecretNowhere(t, e, sb, token, "SSL_CERT_FILE=")
	dump := mustRun(t, sb, `cat "$HOME/`+egress.CABundleFile+`"`)
	assert.Contains(t, dump, strings.TrimSpace(string(ca.CertPEM())), "the sandbox trusts the gateway's CA")
	assert.NotContains(t, logs.String(), token, "nor in the proxy's log")
	assert.True(t, strings.Contains(logs.String(), `"host":"registry.test"`), logs.String())
}
