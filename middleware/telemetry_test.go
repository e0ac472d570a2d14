package middleware_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/middleware/internal/scripted"
)

// TestTelemetryBudgetStops: a run whose model route reports a budget
// stop is counted in agentbox.budget_stops by assistant and budget; a run
// without one is not.
func TestTelemetryBudgetStops(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	e := newEnv(t, withRouter(), withOptions(func(o *middleware.Options) {
		o.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	}))
	e.setScript(scripted.Text(executor.Usage{InputTokens: 10, OutputTokens: 5}, "done"))

	stops := func() map[string]int64 {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(context.Background(), &rm))
		out := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != "agentbox.budget_stops" {
					continue
				}
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					a, _ := dp.Attributes.Value("agentbox.assistant")
					b, _ := dp.Attributes.Value("agentbox.budget")
					out[a.AsString()+"/"+b.AsString()] += dp.Value
				}
			}
		}
		return out
	}
	_, err := e.h.Handle(context.Background(), request("1"), func(executor.Event) error { return nil })
	require.NoError(t, err)
	assert.Empty(t, stops(), "no budget stopped the first run")

	e.router.stop = "tokens"
	_, err = e.h.Handle(context.Background(), request("2"), func(executor.Event) error { return nil })
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"coder/tokens": 1}, stops())
}
