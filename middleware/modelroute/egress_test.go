package modelroute_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/config"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/executor/helper"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/internal/scripted"
	"github.com/agentbox/agentbox/middleware/modelroute"
	"github.com/agentbox/agentbox/services/egress"
)

// egressExecutor gives its fake sandboxes a host directory and, unless
// noRelay, an egress relay, as executor/docker's have with the helper.
type egressExecutor struct {
	*executortest.FakeExecutor
	dir     string
	noRelay bool
	specs   []executor.Spec
}

type egressSandbox struct {
	*executortest.FakeSandbox
	hostDir, proxy string
}

func (s *egressSandbox) HostDir() string        { return s.hostDir }
func (s *egressSandbox) EgressProxyURL() string { return s.proxy }

func (e *egressExecutor) Create(ctx context.Context, spec executor.Spec) (executor.Sandbox, error) {
	e.specs = append(e.specs, spec)
	sb, err := e.FakeExecutor.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	out := &egressSandbox{FakeSandbox: sb.(*executortest.FakeSandbox), hostDir: e.dir, proxy: "http://127.0.0.1:7001"}
	if e.noRelay {
		out.proxy = ""
	}
	return out, nil
}

// agentClient is the agent's HTTP client as the helper's relay makes it:
// every connection goes to {HostDir}/egress.sock.
func agentClient(hostDir string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "127.0.0.1:7001"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", helper.SocketPath(hostDir, helper.EgressSocket))
		},
		DisableKeepAlives: true,
	}}
}

// rawAgent sends raw on a connection to {hostDir}/egress.sock, as a
// client of the helper's relay would, and returns the status line of the
// answer and its last line.
func rawAgent(hostDir, raw string) string {
	c, err := net.Dial("unix", helper.SocketPath(hostDir, helper.EgressSocket))
	if err != nil {
		return "error: " + err.Error()
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		return "error: " + err.Error()
	}
	b, _ := io.ReadAll(c)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[0]) + " | " + lines[len(lines)-1]
}

// TestEgressRouteLivesForTheRequest: an assistant's sandbox.egress becomes
// Spec.Egress and a proxy on egress.sock for the run, which reaches an
// allowed name with the credential added over TLS it verifies
// (EgressOptions.UpstreamTLS), refuses plain HTTP to that name, another
// name and a malformed CONNECT, logs each attempt with the assistant,
// sandbox, request id, user and chat, counts each refusal in
// agentbox.egress.refusals by assistant and reason, and is gone when the
// request ends.
func TestEgressRouteLivesForTheRequest(t *testing.T) {
	var mu sync.Mutex
	var auth []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = io.WriteString(w, "pkg")
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())

	pol, err := agentbox.EgressPolicy([]config.EgressRule{{Host: "pkgs.test", Port: port, Private: true, Secret: &config.EgressSecret{Env: "PKG_TOKEN", Prefix: "Bearer "}}})
	require.NoError(t, err)
	hostDir := t.TempDir()
	ex := &egressExecutor{FakeExecutor: executortest.NewExecutor(t), dir: hostDir}
	var allowed, plain, refused, malformed string
	ex.OnCreate = func(sb *executortest.FakeSandbox) {
		sb.ExecFunc = func(ctx context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
			get := func(u string) string {
				resp, err := agentClient(hostDir).Get(u)
				if err != nil {
					return "error: " + err.Error()
				}
				defer func() { _ = resp.Body.Close() }()
				b, _ := io.ReadAll(resp.Body)
				return fmt.Sprintf("%d %s", resp.StatusCode, b)
			}
			// https:// sent to the proxy, as busybox wget does.
			allowed = rawAgent(hostDir, fmt.Sprintf("GET https://pkgs.test:%d/p.tgz HTTP/1.1\r\nHost: pkgs.test\r\nConnection: close\r\n\r\n", port))
			plain = get(fmt.Sprintf("http://pkgs.test:%d/p.tgz", port))
			refused = get(fmt.Sprintf("http://other.test:%d/", port))
			malformed = rawAgent(hostDir, "CONNECT pkgs.test@evil.test:443 HTTP/1.1\r\nHost: pkgs.test@evil.test:443\r\n\r\n")
			return scripted.Text(executor.Usage{}, "done").Exec(ctx, cmd)
		}
	}
	coder := &middleware.Assistant{ID: "coder", Sandbox: &middleware.Sandbox{
		Runner: "scripted",
		Spec:   executor.Spec{Image: "img", Timeout: time.Minute, User: fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid()), Egress: true},
		Run:    executor.RunRequest{Model: "m"},
		Egress: pol,
	}}
	cat, err := middleware.NewCatalog(coder)
	require.NoError(t, err)
	logs := &testenv.SyncBuffer{}
	reader := sdkmetric.NewManualReader()
	o, err := middleware.New(context.Background(), middleware.Options{
		Catalog:     cat,
		NewExecutor: func(context.Context, hclog.Logger) (executor.Executor, error) { return ex, nil },
		Runners:     []executor.Runner{&scripted.Runner{}},
		Logger:      hclog.New(&hclog.LoggerOptions{Output: logs, JSONFormat: true}),
		Egress: modelroute.NewEgress(modelroute.EgressOptions{
			Resolver:      testenv.Hosts{"pkgs.test": "127.0.0.1"},
			Secret:        func(n string) (string, bool) { return "tok-123", n == "PKG_TOKEN" },
			UpstreamTLS:   &tls.Config{RootCAs: roots, ServerName: "example.com"}, // httptest's certificate names example.com
			MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		}),
	})
	require.NoError(t, err)
	defer func() { _ = o.Close() }()
	ctx := middleware.WithRequestID(context.Background(), "req-42")
	resp, err := o.Wrap(middleware.UnknownAssistant).Handle(ctx, &middleware.Request{
		AssistantID: "coder", UserID: "alice", ChatID: "c1", Messages: []executor.Message{{Role: "user", Content: "install"}},
	}, func(executor.Event) error { return nil })
	require.NoError(t, err)
	assert.Equal(t, "done", resp.Content)
	assert.Equal(t, "HTTP/1.1 200 OK | pkg", allowed)
	assert.True(t, strings.HasPrefix(plain, "403 "), plain)
	assert.Contains(t, plain, "use https://")
	assert.True(t, strings.HasPrefix(refused, "403 "), refused)
	assert.Contains(t, refused, "sandbox.egress")
	assert.True(t, strings.HasPrefix(malformed, "HTTP/1.1 400 "), malformed)
	assert.Equal(t, []string{"Bearer tok-123"}, auth, "the credential went once, over TLS")
	require.Len(t, ex.specs, 1)
	assert.True(t, ex.specs[0].Egress)
	// The request ended and its teardown (after the response) ran: the
	// proxy, its socket and its lines are done.
	require.NoError(t, o.Settle(context.Background()))

	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		m := map[string]any{}
		require.NoError(t, json.Unmarshal([]byte(l), &m))
		if m["outcome"] != nil {
			lines = append(lines, m)
		}
	}
	require.Len(t, lines, 4, logs.String())
	reasons := map[any]int{}
	for _, l := range lines {
		assert.Equal(t, "coder", l["assistant"])
		assert.NotEmpty(t, l["sandbox"])
		assert.Equal(t, "req-42", l["request"])
		assert.Equal(t, "alice", l["user"])
		assert.Equal(t, "c1", l["chat"])
		reasons[l["reason"]]++
	}
	assert.Equal(t, map[any]int{nil: 1, "plain_http_credential": 1, "not_allowed": 1, "malformed": 1}, reasons, "one line per attempt")
	assert.NotContains(t, logs.String(), "tok-123")
	assert.Equal(t, map[string]int64{"coder/plain_http_credential": 1, "coder/not_allowed": 1, "coder/malformed": 1}, egressRefusals(t, reader))
	assert.NoFileExists(t, filepath.Join(hostDir, helper.EgressSocket))
}

// egressRefusals reads agentbox.egress.refusals by assistant/reason.
func egressRefusals(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "agentbox.egress.refusals" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				a, _ := dp.Attributes.Value("agentbox.assistant")
				r, _ := dp.Attributes.Value("agentbox.reason")
				out[a.AsString()+"/"+r.AsString()] += dp.Value
			}
		}
	}
	return out
}

func TestEgressNeedsTheRelay(t *testing.T) {
	pol, err := agentbox.EgressPolicy([]config.EgressRule{{Host: "pkgs.test"}})
	require.NoError(t, err)
	ex := &egressExecutor{FakeExecutor: executortest.NewExecutor(t), dir: t.TempDir(), noRelay: true}
	coder := &middleware.Assistant{ID: "coder", Sandbox: &middleware.Sandbox{
		Runner: "scripted", Spec: executor.Spec{Image: "img", Timeout: time.Minute, Egress: true}, Egress: pol,
	}}
	cat, err := middleware.NewCatalog(coder)
	require.NoError(t, err)
	o, err := middleware.New(context.Background(), middleware.Options{
		Catalog:     cat,
		NewExecutor: func(context.Context, hclog.Logger) (executor.Executor, error) { return ex, nil },
		Runners:     []executor.Runner{&scripted.Runner{}},
		Egress:      modelroute.NewEgress(modelroute.EgressOptions{}),
	})
	require.NoError(t, err)
	defer func() { _ = o.Close() }()
	_, err = o.Wrap(middleware.UnknownAssistant).Handle(context.Background(), &middleware.Request{
		AssistantID: "coder", UserID: "alice", ChatID: "c1", Messages: []executor.Message{{Role: "user", Content: "x"}},
	}, func(executor.Event) error { return nil })
	var me *middleware.Error
	require.ErrorAs(t, err, &me)
	assert.Equal(t, middleware.KindSandboxStart, me.Kind)
	assert.ErrorContains(t, err, "no egress relay")

	none, err := agentbox.EgressPolicy(nil)
	require.NoError(t, err)
	assert.Nil(t, none, "no entries: no proxy")
}

// TestEgressInstallsTheCA: with a CA, a policy with a credential gets the
// CA's certificate installed in the sandbox's HOME before the proxy opens
// (the install script, the certificate on stdin); a policy without one
// gets nothing.
func TestEgressInstallsTheCA(t *testing.T) {
	ca, err := egress.NewCA()
	require.NoError(t, err)
	for name, secret := range map[string]*config.EgressSecret{"credential": {Env: "T"}, "no credential": nil} {
		t.Run(name, func(t *testing.T) {
			pol, err := agentbox.EgressPolicy([]config.EgressRule{{Host: "pkgs.test", Secret: secret}})
			require.NoError(t, err)
			hostDir := t.TempDir()
			ex := &egressExecutor{FakeExecutor: executortest.NewExecutor(t), dir: hostDir}
			var scripts []string
			var stdin []byte
			ex.OnCreate = func(sb *executortest.FakeSandbox) {
				sb.ExecFunc = func(_ context.Context, cmd *executor.Cmd) (executor.ExecResult, error) {
					scripts = append(scripts, strings.Join(cmd.Args, " "))
					if cmd.Stdin != nil {
						stdin, _ = io.ReadAll(cmd.Stdin)
					}
					return executor.ExecResult{}, nil
				}
			}
			sb, err := ex.Create(context.Background(), executor.Spec{UserID: "u", ChatID: "c"})
			require.NoError(t, err)
			a := &middleware.Assistant{ID: "coder", Sandbox: &middleware.Sandbox{Spec: executor.Spec{User: fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())}, Egress: pol}}
			route, err := modelroute.NewEgress(modelroute.EgressOptions{CA: ca}).Open(context.Background(), sb, a, hclog.NewNullLogger())
			require.NoError(t, err)
			defer func() { _ = route.Close() }()
			if secret == nil {
				assert.Empty(t, scripts)
				return
			}
			require.Len(t, scripts, 1)
			assert.Contains(t, scripts[0], egress.CABundleFile)
			assert.Equal(t, ca.CertPEM(), stdin)
		})
	}
}
