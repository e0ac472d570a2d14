package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is an in-process OTLP/HTTP trace collector.
type collector struct {
	mu    sync.Mutex
	spans map[string][]map[string]string // span name -> attributes of each
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
		http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				attrs := map[string]string{}
				for _, kv := range sp.Attributes {
					attrs[kv.Key] = kv.Value.GetStringValue()
				}
				c.spans[sp.Name] = append(c.spans[sp.Name], attrs)
			}
		}
	}
	resp, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(resp)
}

// metricValue sums the samples of name whose labels match all of labels
// in a Prometheus text exposition.
func metricValue(t *testing.T, text, name string, labels ...string) float64 {
	t.Helper()
	sum := 0.0
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? ([0-9.e+-]+)$`)
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		ok := true
		for _, l := range labels {
			if !regexp.MustCompile(`[{,]` + regexp.QuoteMeta(l) + `[,}]`).MatchString(m[1]) {
				ok = false
			}
		}
		if ok {
			v, err := strconv.ParseFloat(m[2], 64)
			require.NoError(t, err)
			sum += v
		}
	}
	return sum
}

// TestTelemetry: after a demo request, /metrics shows the request, its
// phases, tokens and tool calls, and the trace reaches an OTLP collector
// with a span per phase, hook, tool call and model call carrying user,
// chat and assistant.
func TestTelemetry(t *testing.T) {
	col := &collector{spans: map[string][]map[string]string{}}
	cs := httptest.NewServer(col)
	defer cs.Close()
	g, _ := startGateway(t, func(o *Options) { o.OTLPEndpoint = cs.URL })

	_, err := demoRequest(context.Background(), g.URL, "telemetry", demoPrompt, func(extension, string) {})
	require.NoError(t, err)

	require.NoError(t, g.orch.Settle(context.Background()), "the request is recorded after its teardown")
	resp, err := http.Get(g.URL + "/metrics")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	text := string(b)
	assert.Equal(t, 1.0, metricValue(t, text, "agentbox_requests_total", `agentbox_assistant="coder"`, `agentbox_outcome="ok"`), text)
	assert.Equal(t, 1.0, metricValue(t, text, "agentbox_phase_duration_seconds_count", `agentbox_phase="agent"`))
	assert.Positive(t, metricValue(t, text, "agentbox_phase_duration_seconds_sum", `agentbox_phase="container_start"`))
	assert.Positive(t, metricValue(t, text, "agentbox_tokens_total", `agentbox_kind="input"`))
	assert.Positive(t, metricValue(t, text, "agentbox_tokens_total", `agentbox_kind="output"`))
	assert.Equal(t, 1.0, metricValue(t, text, "agentbox_tool_calls_total", `agentbox_tool="Write"`))
	assert.Equal(t, 1.0, metricValue(t, text, "agentbox_tool_calls_total", `agentbox_tool="Bash"`))
	assert.Equal(t, 0.0, metricValue(t, text, "agentbox_sandboxes_live"), "the sandbox is gone")
	assert.Contains(t, text, "agentbox_queue_length")

	require.NoError(t, g.Close(), "closing flushes the spans")
	col.mu.Lock()
	defer col.mu.Unlock()
	for _, name := range []string{"agentbox.request", "agentbox.lease", "agentbox.queue", "agentbox.container_start", "agentbox.workspace",
		"agentbox.create_hook", "agentbox.agent", "agentbox.next_hook", "agentbox.teardown", "agentbox.tool_call"} {
		assert.NotEmpty(t, col.spans[name], "span %s", name)
	}
	require.Len(t, col.spans["agentbox.request"], 1)
	req := col.spans["agentbox.request"][0]
	assert.Equal(t, "coder", req["agentbox.assistant"])
	assert.Equal(t, demoUser, req["agentbox.user"])
	assert.Equal(t, "telemetry", req["agentbox.chat"])
	assert.Equal(t, "ok", req["agentbox.outcome"])
	assert.Len(t, col.spans["agentbox.tool_call"], 2, "Write and Bash")
	calls := col.spans["agentbox.model_call"]
	assert.Len(t, calls, len(g.Model.Requests()), "a span per call the upstream saw")
	for _, c := range calls {
		assert.Equal(t, "coder", c["agentbox.assistant"])
		assert.Equal(t, demoUser, c["agentbox.user"])
		assert.Equal(t, "telemetry", c["agentbox.chat"])
	}
}
