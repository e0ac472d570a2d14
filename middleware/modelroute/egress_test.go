package modelroute_test

import (
	"context"
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

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/config"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/egress"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/executor/helper"
	"github.com/agentbox/agentbox/internal/testenv"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/internal/scripted"
	"github.com/agentbox/agentbox/middleware/modelroute"
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

// TestEgressRouteLivesForTheRequest: an assistant's sandbox.egress becomes
// Spec.Egress and a proxy on egress.sock for the run, which reaches an
// allowed name with the credential added, refuses another with 403, logs
// both with user and chat, and is gone when the request ends.
func TestEgressRouteLivesForTheRequest(t *testing.T) {
	var mu sync.Mutex
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = io.WriteString(w, "pkg")
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port

	pol, err := agentbox.EgressPolicy([]config.EgressRule{{Host: "pkgs.test", Port: port, Private: true, Secret: &config.EgressSecret{Env: "PKG_TOKEN", Prefix: "Bearer "}}})
	require.NoError(t, err)
	hostDir := t.TempDir()
	ex := &egressExecutor{FakeExecutor: executortest.NewExecutor(t), dir: hostDir}
	var allowed, refused string
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
			allowed = get(fmt.Sprintf("http://pkgs.test:%d/p.tgz", port))
			refused = get(fmt.Sprintf("http://other.test:%d/", port))
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
	o, err := middleware.New(context.Background(), middleware.Options{
		Catalog:     cat,
		NewExecutor: func(context.Context, hclog.Logger) (executor.Executor, error) { return ex, nil },
		Runners:     []executor.Runner{&scripted.Runner{}},
		Logger:      hclog.New(&hclog.LoggerOptions{Output: logs, JSONFormat: true}),
		Egress: modelroute.NewEgress(modelroute.EgressOptions{
			Resolver: testenv.Hosts{"pkgs.test": "127.0.0.1"},
			Secret:   func(n string) (string, bool) { return "tok-123", n == "PKG_TOKEN" },
		}),
	})
	require.NoError(t, err)
	defer func() { _ = o.Close() }()
	resp, err := o.Wrap(middleware.UnknownAssistant).Handle(context.Background(), &middleware.Request{
		AssistantID: "coder", UserID: "alice", ChatID: "c1", Messages: []executor.Message{{Role: "user", Content: "install"}},
	}, func(executor.Event) error { return nil })
	require.NoError(t, err)
	assert.Equal(t, "done", resp.Content)
	assert.Equal(t, "200 pkg", allowed)
	assert.True(t, strings.HasPrefix(refused, "403 "), refused)
	assert.Contains(t, refused, "sandbox.egress")
	assert.Equal(t, []string{"Bearer tok-123"}, auth)
	require.Len(t, ex.specs, 1)
	assert.True(t, ex.specs[0].Egress)

	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		m := map[string]any{}
		require.NoError(t, json.Unmarshal([]byte(l), &m))
		if m["method"] != nil {
			lines = append(lines, m)
		}
	}
	require.Len(t, lines, 2, logs.String())
	for _, l := range lines {
		assert.Equal(t, "alice", l["user"])
		assert.Equal(t, "c1", l["chat"])
		assert.Contains(t, l, "bytes_down")
	}
	assert.NotContains(t, logs.String(), "tok-123")
	// The request ended and its teardown (after the response) ran: the
	// proxy and its socket are gone.
	require.NoError(t, o.Settle(context.Background()))
	assert.NoFileExists(t, filepath.Join(hostDir, helper.EgressSocket))
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
