package modelroute_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/executortest"
	"github.com/agentbox/agentbox/executor/helper"
	"github.com/agentbox/agentbox/internal/testkit/testenv"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/modelroute"
	"github.com/agentbox/agentbox/services/modelproxy"
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
			route, err := modelroute.New(modelroute.Options{}).Open(context.Background(), sb, tc.a)
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

// routeClient is what the helper does: dial {HostDir}/model.sock.
func routeClient(sb executor.Sandbox) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", helper.SocketPath(sb.HostDir(), helper.ModelSocket))
	}}}
}

// budgetUpstream answers every call with 11 input and 2 output tokens and
// records the models it was asked for.
func budgetUpstream(t *testing.T) (*httptest.Server, *[]string, *sync.Mutex) {
	var mu sync.Mutex
	var models []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		models = append(models, gjson.GetBytes(b, "model").String()+"/"+gjson.GetBytes(b, "max_tokens").Raw)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"type":"message","usage":{"input_tokens":11,"output_tokens":2}}`)
	}))
	t.Cleanup(up.Close)
	return up, &models, &mu
}

// TestProxyRouterBudgetLoop is finding 2 of issue 14: an agent that loops
// model calls (asking for another model and 64000 output tokens) is
// stopped at the default budget derived from its max_turns, every
// forwarded call is pinned to the connector's model with max_tokens
// capped, and the usage the route reports is what was metered.
func TestProxyRouterBudgetLoop(t *testing.T) {
	up, models, mu := budgetUpstream(t)
	me := fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	for name, tc := range map[string]struct {
		router   modelroute.Options
		budget   modelproxy.Budget // the assistant's override
		maxTurns any
		want     int    // calls that must get through
		naming   string // what the refusal names
		stop     string // the budget the route reports
	}{
		"default from max_turns 2":    {maxTurns: 2, want: 4*2 + 10, naming: "model calls", stop: modelproxy.BudgetCalls},
		"default from runner default": {want: 4*50 + 10, naming: "model calls", stop: modelproxy.BudgetCalls},
		"gateway calls":               {router: modelroute.Options{Budget: modelproxy.Budget{MaxRequests: 5}}, maxTurns: 2, want: 5, naming: "model calls", stop: modelproxy.BudgetCalls},
		"assistant calls beat gateway": {router: modelroute.Options{Budget: modelproxy.Budget{MaxRequests: 5}},
			budget: modelproxy.Budget{MaxRequests: 3}, want: 3, naming: "model calls", stop: modelproxy.BudgetCalls},
		"assistant tokens":    {budget: modelproxy.Budget{MaxTokens: 30}, want: 3, naming: "tokens used", stop: modelproxy.BudgetTokens},
		"assistant wall time": {budget: modelproxy.Budget{MaxDuration: time.Nanosecond}, want: 0, naming: "wall time", stop: modelproxy.BudgetWall},
		"gateway tokens":      {router: modelroute.Options{Budget: modelproxy.Budget{MaxTokens: 14}}, want: 2, naming: "tokens used", stop: modelproxy.BudgetTokens},
	} {
		t.Run(name, func(t *testing.T) {
			mu.Lock()
			*models = nil
			mu.Unlock()
			args := map[string]any{}
			if tc.maxTurns != nil {
				args["max_turns"] = tc.maxTurns
			}
			a := &middleware.Assistant{ID: "coder", Sandbox: &middleware.Sandbox{
				Spec: executor.Spec{User: me, Timeout: time.Minute}, Budget: tc.budget,
				Run:       executor.RunRequest{Model: "claude-sonnet-4-6", Arguments: args},
				Connector: middleware.Connector{Upstream: up.URL, Key: "sk-real"}}}
			sb := &relaySandbox{executortest.NewSandbox(t), t.TempDir(), "http://127.0.0.1:7000"}
			route, err := modelroute.New(tc.router).Open(context.Background(), sb, a)
			require.NoError(t, err)
			defer func() { assert.NoError(t, route.Close()) }()
			c := routeClient(sb)
			ok, status, msg := 0, 0, ""
			for range 1000 { // a hostile loop; the budget must end it
				req, err := http.NewRequest(http.MethodPost, "http://model/v1/messages?beta=true",
					strings.NewReader(`{"model":"claude-opus-4-1","max_tokens":64000,"messages":[{"role":"user","content":"again"}]}`))
				require.NoError(t, err)
				req.Header.Set("x-api-key", route.Token())
				resp, err := c.Do(req)
				require.NoError(t, err)
				b, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					status, msg = resp.StatusCode, gjson.GetBytes(b, "error.message").String()
					break
				}
				ok++
			}
			assert.Equal(t, tc.want, ok, "calls that got through")
			assert.Equal(t, http.StatusForbidden, status)
			assert.Contains(t, msg, "budget exceeded")
			assert.Contains(t, msg, tc.naming)
			assert.Equal(t, tc.stop, route.(interface{ BudgetStop() string }).BudgetStop(), "the route names the budget that stopped it")
			assert.Equal(t, executor.Usage{InputTokens: int64(11 * ok), OutputTokens: int64(2 * ok)}, route.Usage(), "usage is what was metered")
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, *models, ok, "only calls within the budget reached the upstream")
			for _, m := range *models {
				assert.Equal(t, "claude-sonnet-4-6/32000", m, "model pinned, max_tokens capped")
			}
		})
	}
}

// TestProxyRouterRefusalIsLogged: a refused endpoint is a WARN line with
// what was refused and the fields that tie it to the run.
func TestProxyRouterRefusalIsLogged(t *testing.T) {
	up, models, mu := budgetUpstream(t)
	var logs testenv.SyncBuffer
	lg := hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &logs})
	me := fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	a := &middleware.Assistant{ID: "coder", Sandbox: &middleware.Sandbox{Spec: executor.Spec{User: me, Timeout: time.Minute},
		Connector: middleware.Connector{Upstream: up.URL, Key: "sk-real"}}}
	sb := &relaySandbox{executortest.NewSandbox(t), t.TempDir(), "http://127.0.0.1:7000"}
	r := modelroute.New(modelroute.Options{Logger: lg})
	route, err := r.Open(middleware.WithRequestID(context.Background(), "chatcmpl-42"), sb, a)
	require.NoError(t, err)
	defer func() { assert.NoError(t, route.Close()) }()
	req, err := http.NewRequest(http.MethodGet, "http://model/v1/files", nil)
	require.NoError(t, err)
	req.Header.Set("x-api-key", route.Token())
	resp, err := routeClient(sb).Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	out := logs.String()
	t.Log(out)
	assert.Contains(t, out, "[WARN]  model call refused")
	for _, want := range []string{"method=GET", "uri=/v1/files", "assistant=coder", "request=chatcmpl-42", "sandbox=" + sb.ID()} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, route.Token())
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, *models)
}

// TestProxyRouterModelCallSpans: each upstream model call is a span
// agentbox.model_call, a child of the request's span with the assistant
// and model, and no trace context reaches the upstream.
func TestProxyRouterModelCallSpans(t *testing.T) {
	var mu sync.Mutex
	var traceHeaders []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		traceHeaders = append(traceHeaders, r.Header.Get("Traceparent")+r.Header.Get("Tracestate")+r.Header.Get("Baggage"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"type":"message","usage":{"input_tokens":11,"output_tokens":2}}`)
	}))
	t.Cleanup(up.Close)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, parent := tp.Tracer("test").Start(context.Background(), "agentbox.request")

	a := &middleware.Assistant{ID: "coder", Sandbox: &middleware.Sandbox{
		Spec: executor.Spec{User: fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid()), Timeout: time.Minute},
		Run:  executor.RunRequest{Model: "claude-sonnet-4-6"}, Connector: middleware.Connector{Upstream: up.URL, Key: "sk-real"}}}
	sb := &relaySandbox{executortest.NewSandbox(t), t.TempDir(), "http://127.0.0.1:7000"}
	route, err := modelroute.New(modelroute.Options{}).Open(ctx, sb, a)
	require.NoError(t, err)
	c := routeClient(sb)
	for range 2 {
		req, err := http.NewRequest(http.MethodPost, "http://model/v1/messages", strings.NewReader(`{"model":"m","max_tokens":5,"messages":[]}`))
		require.NoError(t, err)
		req.Header.Set("x-api-key", route.Token())
		resp, err := c.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	require.NoError(t, route.Close())
	parent.End()

	var calls []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "agentbox.model_call" {
			calls = append(calls, s)
		}
	}
	require.Len(t, calls, 2, "one span per upstream call")
	for _, s := range calls {
		assert.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID(), "a child of the request's span")
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		assert.Equal(t, "coder", attrs["agentbox.assistant"])
		assert.Equal(t, "claude-sonnet-4-6", attrs["agentbox.model"])
		assert.Equal(t, "200", attrs["http.response.status_code"])
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"", ""}, traceHeaders, "no trace context is sent upstream")
}
