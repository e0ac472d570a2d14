package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// telemetry is the gateway's OpenTelemetry SDK: metrics read by a
// Prometheus registry of its own (served on /metrics) and, when an OTLP
// endpoint is set, traces exported over OTLP/HTTP.
type telemetry struct {
	meters   *sdkmetric.MeterProvider
	tracers  *sdktrace.TracerProvider
	registry *prometheus.Registry
}

// newTelemetry sets up the providers. otlpEndpoint is a URL such as
// http://127.0.0.1:4318 (empty: no traces are exported).
func newTelemetry(otlpEndpoint string) (*telemetry, error) {
	t := &telemetry{registry: prometheus.NewRegistry()}
	exp, err := otelprom.New(otelprom.WithRegisterer(t.registry))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	t.meters = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	opts := []sdktrace.TracerProviderOption{}
	if otlpEndpoint != "" {
		te, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(otlpEndpoint+"/v1/traces"))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("OTLP trace exporter for %s: %w", otlpEndpoint, err), t.meters.Shutdown(context.Background()))
		}
		opts = append(opts, sdktrace.WithBatcher(te))
	}
	t.tracers = sdktrace.NewTracerProvider(opts...)
	return t, nil
}

// metrics serves the Prometheus text format.
func (t *telemetry) metrics() http.Handler {
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{})
}

// close flushes the spans not yet exported and stops both providers.
func (t *telemetry) close(ctx context.Context) error {
	return errors.Join(t.tracers.Shutdown(ctx), t.meters.Shutdown(ctx))
}
