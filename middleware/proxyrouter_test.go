package middleware_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/executor/helper"
	"github.com/agentbox/agentbox/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// relaySandbox is a fake sandbox with a helper directory and a model relay
// address, as executor/docker's Sandbox has with the helper.
type relaySandbox struct {
	*executortest.FakeSandbox
	hostDir, base string
}

func (s *relaySandbox) HostDir() string      { return s.hostDir }
func (s *relaySandbox) ModelBaseURL() string { return s.base }

func TestProxyRouter(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("x-api-key") != "sk-real" {
			http.Error(w, `{"type":"error","error":{"type":"authentication_error","message":"bad key"}}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],`+
			`"stop_reason":"end_turn","usage":{"input_tokens":11,"output_tokens":2}}`)
	}))
	defer upstream.Close()
	me := fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	assistant := func(user, up string) *middleware.Assistant {
		return &middleware.Assistant{ID: "coder", Sandbox: &middleware.Sandbox{
			Spec: executor.Spec{User: user}, Connector: middleware.Connector{Upstream: up, Key: "sk-real"}}}
	}
	for name, tc := range map[string]struct {
		sb      func(t *testing.T) executor.Sandbox
		a       *middleware.Assistant
		wantErr string
	}{
		"no relay": {sb: func(t *testing.T) executor.Sandbox { return executortest.NewSandbox(t) },
			a: assistant(me, upstream.URL), wantErr: "no model relay"},
		"bad sandbox user": {sb: func(t *testing.T) executor.Sandbox {
			return &relaySandbox{executortest.NewSandbox(t), t.TempDir(), "http://127.0.0.1:7000"}
		}, a: assistant("agent", upstream.URL), wantErr: `sandbox user "agent" is not uid:gid`},
		"no upstream": {sb: func(t *testing.T) executor.Sandbox {
			return &relaySandbox{executortest.NewSandbox(t), t.TempDir(), "http://127.0.0.1:7000"}
		}, a: assistant(me, ""), wantErr: "is not an http(s) URL"},
		"serves the proxy": {sb: func(t *testing.T) executor.Sandbox {
			return &relaySandbox{executortest.NewSandbox(t), t.TempDir(), "http://127.0.0.1:7000"}
		}, a: assistant(me, upstream.URL)},
	} {
		t.Run(name, func(t *testing.T) {
			sb := tc.sb(t)
			route, err := middleware.NewProxyRouter(middleware.ProxyRouterOptions{}).Open(context.Background(), sb, tc.a)
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			defer func() { assert.NoError(t, route.Close()) }()
			assert.Equal(t, "http://127.0.0.1:7000", route.BaseURL())
			assert.True(t, strings.HasPrefix(route.Token(), "abx-"), route.Token())
			assert.NotContains(t, route.Token(), "sk-real")

			// What the helper does: dial {HostDir}/model.sock and send the
			// agent's request with the per-request token.
			c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", helper.SocketPath(sb.HostDir(), helper.ModelSocket))
			}}}
			for key, status := range map[string]int{route.Token(): 200, "sk-real": 401, "": 401} {
				req, err := http.NewRequest(http.MethodPost, "http://model/v1/messages", strings.NewReader(`{"model":"m","max_tokens":5,"messages":[]}`))
				require.NoError(t, err)
				req.Header.Set("x-api-key", key)
				resp, err := c.Do(req)
				require.NoError(t, err)
				_ = resp.Body.Close()
				assert.Equal(t, status, resp.StatusCode, "key %q", key)
			}
			assert.Equal(t, executor.Usage{InputTokens: 11, OutputTokens: 2}, route.Usage(), "only the accepted call is metered")
		})
	}
}
