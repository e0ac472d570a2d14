package docker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/helper"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/services/egress"
)

func TestEgressPlan(t *testing.T) {
	withHelper, err := Options{DataDir: "/data", Image: "img", HelperBinary: "/bin/sh"}.withDefaults()
	require.NoError(t, err)
	spec := executor.Spec{UserID: "u", ChatID: "c", Timeout: time.Hour, Egress: true}
	p, err := newPlan(spec, withHelper, time.Now())
	require.NoError(t, err)
	cfg, hc := p.containerConfig(withHelper, "sb1", "/w", "/h")
	proxy := fmt.Sprintf("http://127.0.0.1:%d", DefaultEgressPort)
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		assert.Contains(t, cfg.Env, k+"="+proxy)
	}
	assert.Contains(t, cfg.Env, "NO_PROXY=localhost,127.0.0.1,::1", "the model relay on loopback is not proxied")
	assert.True(t, cfg.NetworkDisabled, "egress keeps network none")
	assert.Equal(t, "none", string(hc.NetworkMode))
	assert.Contains(t, strings.Join(p.helperCommand(withHelper, ContainerHelperPath), " "), fmt.Sprintf("--egress-port %d", DefaultEgressPort))

	// Without Spec.Egress: no proxy variables, no relay.
	spec.Egress = false
	p, err = newPlan(spec, withHelper, time.Now())
	require.NoError(t, err)
	cfg, _ = p.containerConfig(withHelper, "sb1", "/w", "/h")
	assert.NotContains(t, strings.Join(cfg.Env, " "), "PROXY")
	assert.NotContains(t, strings.Join(p.helperCommand(withHelper, ContainerHelperPath), " "), "--egress-port")

	// Egress without the helper, or with the relay off, is refused.
	spec.Egress = true
	noHelper, err := Options{DataDir: "/data", Image: "img"}.withDefaults()
	require.NoError(t, err)
	_, err = newPlan(spec, noHelper, time.Now())
	assert.ErrorIs(t, err, executor.ErrInvalid)
	assert.ErrorContains(t, err, "HelperBinary")
	off, err := Options{DataDir: "/data", Image: "img", HelperBinary: "/bin/sh", EgressPort: -1}.withDefaults()
	require.NoError(t, err)
	_, err = newPlan(spec, off, time.Now())
	assert.ErrorContains(t, err, "EgressPort")
	_, err = Options{DataDir: "/data", ModelPort: 7100, EgressPort: 7100}.withDefaults()
	assert.ErrorIs(t, err, executor.ErrInvalid)
}

// TestEgressEndToEnd: the agent's wget in a network-none container reaches
// a loopback server on the host through the helper's relay and the egress
// proxy, by a name only the proxy resolves; the proxy adds a credential the
// container never holds, only over TLS it verifies (https:// sent to the
// proxy, as busybox wget does); refused destinations get the proxy's 403;
// the connection log names user, chat, host and bytes.
func TestEgressEndToEnd(t *testing.T) {
	e := newTestExecutor(t, func(o *Options) { o.HelperBinary = testenv.HelperBinary(t) })
	reg := newRegistry("registry-index-v1\n")
	token := reg.token
	srv := httptest.NewTLSServer(reg)
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port

	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "tls-index-v1\n")
	}))
	defer tlsSrv.Close()
	tlsPort := tlsSrv.Listener.Addr().(*net.TCPAddr).Port
	pool := x509.NewCertPool()
	pool.AddCert(tlsSrv.Certificate())
	pool.AddCert(srv.Certificate())

	spec := testSpec("egress")
	spec.Egress = true
	sb := create(t, e, spec)
	require.NotEmpty(t, sb.EgressProxyURL())

	pol, err := egress.NewPolicy(egress.Rule{Host: "pkgs.test", Port: port, Private: true,
		Credential: &egress.Credential{Env: "PKG_TOKEN", Prefix: "Bearer "}},
		egress.Rule{Host: "rebind.test", Port: port},
		egress.Rule{Host: "tls.test", Port: tlsPort, Private: true})
	require.NoError(t, err)
	logs := &testenv.SyncBuffer{}
	var mu sync.Mutex
	counted := map[egress.Reason]int{}
	proxy, err := egress.New(egress.Options{
		Policy:   pol,
		Resolver: testenv.Hosts{"pkgs.test": "127.0.0.1", "tls.test": "127.0.0.1", "rebind.test": "127.0.0.1", "localhost": "127.0.0.1"},
		Secret: func(name string) (string, bool) {
			return token, name == "PKG_TOKEN"
		},
		Logger:      hclog.New(&hclog.LoggerOptions{Output: logs, JSONFormat: true}).With("user", spec.UserID, "chat", spec.ChatID),
		UpstreamTLS: &tls.Config{RootCAs: pool, ServerName: "example.com"}, // httptest's certificate names example.com
		OnRefuse: func(r egress.Reason) {
			mu.Lock()
			defer mu.Unlock()
			counted[r]++
		},
	})
	require.NoError(t, err)
	ln, err := helper.ListenHostSocket(sb.HostDir(), helper.EgressSocket, executor.DefaultUID, executor.DefaultGID)
	require.NoError(t, err)
	go func() { _ = proxy.Serve(ln) }()
	defer func() { _ = proxy.Close() }()

	// HTTPS: busybox wget sends the https:// URL to the proxy, which speaks
	// TLS upstream itself, checks the server's certificate and adds the
	// credential inside it.
	out, stderr, res, err := run(t, sb, fmt.Sprintf("wget -q -O - https://pkgs.test:%d/index.json", port))
	require.NoError(t, err)
	if res.ExitCode != 0 {
		dbg, _, _, _ := run(t, sb, fmt.Sprintf(`printf 'GET https://pkgs.test:%d/ HTTP/1.0\r\n\r\n' | nc 127.0.0.1 %d`, port, DefaultEgressPort))
		t.Fatalf("stderr %s; proxy says %s", stderr, dbg)
	}
	assert.Equal(t, "registry-index-v1", strings.TrimSpace(out))
	assert.Equal(t, []string{fmt.Sprintf("pkgs.test:%d Bearer %s", port, token)}, reg.requests(), "the credential reached the registry")
	out = mustRun(t, sb, fmt.Sprintf("wget -q -O - https://tls.test:%d/", tlsPort))
	assert.Equal(t, "tls-index-v1", out)

	for name, u := range map[string]string{
		"not listed": fmt.Sprintf("http://other.test:%d/", port),
		"metadata":   "http://169.254.169.254/latest/meta-data/",
		"localhost":  fmt.Sprintf("http://localhost.:%d/", port), // the trailing dot defeats NO_PROXY's exemption
		"rebinding":  fmt.Sprintf("http://rebind.test:%d/", port),
		// Issue 32 §3: plain HTTP to the credential host would carry the
		// secret unencrypted, at any port, in any case.
		"plain HTTP to the credential host": fmt.Sprintf("http://PKGS.test.:%d/index.json", port),
	} {
		t.Run(name, func(t *testing.T) {
			_, stderr, res, err := run(t, sb, "wget -q -O - "+u)
			require.NoError(t, err)
			assert.NotEqual(t, 0, res.ExitCode)
			assert.Contains(t, stderr, "403", "the proxy refused it")
		})
	}
	// The same refusals as the agent reads them, body included.
	body := mustRun(t, sb, fmt.Sprintf(`printf 'GET http://other.test:%d/ HTTP/1.0\r\n\r\n' | nc 127.0.0.1 %d`, port, DefaultEgressPort))
	assert.Contains(t, body, "403 Forbidden")
	assert.Contains(t, body, "other.test:"+fmt.Sprint(port)+" is not on the sandbox's egress allowlist")
	assert.Contains(t, body, egress.ConfigKey)
	body = mustRun(t, sb, fmt.Sprintf(`printf 'GET http://pkgs.test:%d/index.json HTTP/1.0\r\n\r\n' | nc 127.0.0.1 %d`, port, DefaultEgressPort))
	assert.Contains(t, body, "403 Forbidden")
	assert.Contains(t, body, "which the proxy sends only over TLS; use https://")

	// Issue 32 §4: what net/http turns down before the proxy's handler,
	// sent from the container's shell, is answered, logged and counted.
	for name, c := range map[string]struct{ script, answer string }{
		"userinfo in the CONNECT target": {`printf 'CONNECT pkgs.test@evil.test:443 HTTP/1.1\r\nHost: pkgs.test@evil.test:443\r\n\r\n'`, "HTTP/1.1 400"},
		"# in the CONNECT target":        {`printf 'CONNECT pkgs.test#x:443 HTTP/1.1\r\nHost: pkgs.test:443\r\n\r\n'`, "HTTP/1.1 400"},
		"%2e host":                       {`printf 'CONNECT %%2e%%2e:443 HTTP/1.1\r\nHost: x:443\r\n\r\n'`, "HTTP/1.1 400"},
		"2 MB CONNECT line":              {`{ printf 'CONNECT '; head -c 2097152 /dev/zero | tr '\0' a; printf '.test:443 HTTP/1.1\r\n\r\n'; }`, "HTTP/1.1 431"},
	} {
		t.Run(name, func(t *testing.T) {
			out, _, _, err := run(t, sb, c.script+fmt.Sprintf(" | nc 127.0.0.1 %d", DefaultEgressPort))
			require.NoError(t, err)
			assert.True(t, strings.HasPrefix(out, c.answer), "the agent read %q", out)
		})
	}
	assert.Len(t, reg.requests(), 1, "no refused request reached the server")

	assertSecretNowhere(t, e, sb, token, "HTTP_PROXY=http://127.0.0.1:")

	// The log: one line per attempt with user, chat and bytes or the
	// request line; one count per refusal, by reason.
	const refusedWant = 5 + 2 + 4
	var ok int
	reasons := map[any]int{}
	require.Eventually(t, func() bool { return strings.Count(logs.String(), `"outcome":"refused"`) >= refusedWant }, 10*time.Second, 10*time.Millisecond, logs.String())
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		m := map[string]any{}
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		assert.Equal(t, spec.UserID, m["user"])
		assert.Equal(t, spec.ChatID, m["chat"])
		switch m["outcome"] {
		case "ok":
			ok++
			assert.Contains(t, []any{"pkgs.test", "tls.test"}, m["host"])
			assert.Greater(t, m["bytes_down"].(float64), float64(len("registry-index-v1")))
			assert.Equal(t, "GET", m["method"])
		case "refused":
			reasons[m["reason"]]++
			if m["reason"] == string(egress.ReasonPlainCredential) {
				assert.NotContains(t, m, "addr", "refused before anything was dialled")
			}
		}
	}
	assert.Equal(t, 2, ok)
	assert.Equal(t, map[any]int{"not_allowed": 4, "private_address": 1, "plain_http_credential": 2, "malformed": 3, "header_too_large": 1}, reasons, logs.String())
	mu.Lock()
	assert.Equal(t, map[egress.Reason]int{"not_allowed": 4, "private_address": 1, "plain_http_credential": 2, "malformed": 3, "header_too_large": 1}, counted)
	mu.Unlock()
	assert.NotContains(t, logs.String(), token)
}

// searchContainerMemory reads every readable mapping of every process of
// the container through the host's /proc (the test runs as root) and
// reports whether needle and control occur.
// registry is a loopback stand-in for a package registry: it answers its
// body only to requests that carry "Bearer " and its random token, and
// records every request's host and Authorization.
type registry struct {
	token, body string
	mu          sync.Mutex
	seen        []string
}

func newRegistry(body string) *registry {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return &registry{token: "egress-secret-" + hex.EncodeToString(b[:]), body: body}
}

func (g *registry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	g.seen = append(g.seen, r.Host+" "+r.Header.Get("Authorization"))
	g.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+g.token {
		http.Error(w, "no credential", http.StatusUnauthorized)
		return
	}
	_, _ = io.WriteString(w, g.body)
}

// requests returns the requests seen so far.
func (g *registry) requests() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.seen)
}

// assertSecretNowhere checks that token is nowhere the agent can look: no
// process environment or command line, no file in the writable places
// (the dump must contain envMarker, proof that it covers the environment),
// no process memory read from the host, no docker inspect. The search runs
// on the host over what the container prints, so the test never puts the
// token in the container itself.
func assertSecretNowhere(t *testing.T, e *Executor, sb *Sandbox, token, envMarker string) {
	t.Helper()
	dump := mustRun(t, sb, `cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n'; `+
		`find /workspace /tmp "$HOME" /run/agentbox -type f 2>/dev/null | while read -r f; do cat "$f"; done 2>/dev/null; env`)
	assert.Contains(t, dump, envMarker, "the dump covers the environment")
	assert.NotContains(t, dump, token)
	assert.NotContains(t, dump, token[len(token)/2:], "not even in part")
	assert.NotContains(t, dump, "PRIVATE KEY", "no key of the gateway's either")
	// The helper's own argument is the control that the memory read works.
	found, control := searchContainerMemory(t, sb.ID(), []byte(token), []byte("--egress-port"))
	assert.False(t, found, "the secret is in a container process's memory")
	assert.True(t, control, "the memory search found the helper's own argument")
	inspect, err := e.api.ContainerInspect(context.Background(), sb.ID())
	require.NoError(t, err)
	ib, _ := json.Marshal(inspect)
	assert.NotContains(t, string(ib), token, "docker inspect does not show it either")
}

func searchContainerMemory(t *testing.T, id string, needle, control []byte) (foundNeedle, foundControl bool) {
	t.Helper()
	out, err := exec.Command("docker", "top", id, "-eo", "pid").Output()
	require.NoError(t, err)
	var pids []int
	for _, f := range strings.Fields(string(out))[1:] {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	require.NotEmpty(t, pids)
	for _, pid := range pids {
		maps, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
		if err != nil {
			continue // exited meanwhile
		}
		mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
		if err != nil {
			_ = maps.Close()
			continue
		}
		sc := bufio.NewScanner(maps)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 2 || f[1][0] != 'r' || strings.HasSuffix(sc.Text(), "[vvar]") {
				continue
			}
			lo, hi, ok := strings.Cut(f[0], "-")
			if !ok {
				continue
			}
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 != nil || err2 != nil || end-start > 1<<30 {
				continue
			}
			buf := make([]byte, end-start)
			n, _ := mem.ReadAt(buf, int64(start))
			foundNeedle = foundNeedle || bytes.Contains(buf[:n], needle)
			foundControl = foundControl || bytes.Contains(buf[:n], control)
		}
		_ = mem.Close()
		_ = maps.Close()
	}
	return foundNeedle, foundControl
}
