package middleware

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbox/agentbox/executor"
)

// instrumentation is the OpenTelemetry scope of the middleware's metrics
// and spans.
const instrumentation = "github.com/agentbox/agentbox/middleware"

// telemetry holds the Orchestrator's instruments. The metric names and
// their attributes are listed in the package documentation.
type telemetry struct {
	tracer   trace.Tracer
	requests metric.Int64Counter
	refusals metric.Int64Counter
	phases   metric.Float64Histogram
	tokens   metric.Int64Counter
	tools    metric.Int64Counter
	budgets  metric.Int64Counter
	live     atomic.Int64 // sandboxes created and not yet removed
}

// Outcomes that refuse a request before any agent ran, counted as
// refusals besides their outcome.
var refusalKinds = map[Kind]bool{KindOverloaded: true, KindBusy: true, KindHookRejected: true, KindUnavailable: true}

func newTelemetry(o *Orchestrator) (*telemetry, error) {
	mp, tp := o.opts.MeterProvider, o.opts.TracerProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	m := mp.Meter(instrumentation)
	t := &telemetry{tracer: tp.Tracer(instrumentation)}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	t.requests, err = m.Int64Counter("agentbox.requests", metric.WithDescription("Sandboxed requests by assistant and outcome (ok or the error kind) and the phase they reached."))
	add(err)
	t.refusals, err = m.Int64Counter("agentbox.refusals", metric.WithDescription("Sandboxed requests refused before an agent ran, by reason (overloaded, busy, hook_rejected, unavailable)."))
	add(err)
	t.phases, err = m.Float64Histogram("agentbox.phase.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of each phase of a sandboxed request (lease, queue, container_start, workspace, create_hook, agent, next_hook, teardown, total)."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600))
	add(err)
	t.tokens, err = m.Int64Counter("agentbox.tokens", metric.WithDescription("Tokens metered for sandboxed requests, by assistant and kind (input, output, cache_read, cache_creation)."))
	add(err)
	t.tools, err = m.Int64Counter("agentbox.tool_calls", metric.WithDescription("Tool calls by the agents, by assistant and tool."))
	add(err)
	t.budgets, err = m.Int64Counter("agentbox.budget_stops", metric.WithDescription("Sandboxed requests whose model traffic a budget stopped, by assistant and budget (calls, tokens, wall)."))
	add(err)
	queue, err := m.Int64ObservableGauge("agentbox.queue.length", metric.WithDescription("Requests waiting for a run slot of the admission control."))
	add(err)
	live, err := m.Int64ObservableGauge("agentbox.sandboxes.live", metric.WithDescription("Sandboxes created by this gateway and not yet removed."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	_, err = m.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		obs.ObserveInt64(queue, int64(o.Admission().Waiting))
		obs.ObserveInt64(live, t.live.Load())
		return nil
	}, queue, live)
	return t, err
}

// budgetStopper is a ModelRoute that says which budget stopped its
// model traffic (middleware/modelroute's routes).
type budgetStopper interface{ BudgetStop() string }

// trace is a request's spans: the request's own, the current phase's and
// the tool calls in flight.
type runTrace struct {
	ctx   context.Context // carries the request span
	req   trace.Span
	phase trace.Span
	tools map[string]trace.Span // by tool use id
}

// startTrace starts the request's span.
func (r *run) startTrace(ctx context.Context) context.Context {
	ctx, span := r.o.tel.tracer.Start(ctx, "agentbox.request", trace.WithAttributes(r.attrs()...))
	r.tr = runTrace{ctx: ctx, req: span, tools: map[string]trace.Span{}}
	return ctx
}

func (r *run) attrs() []attribute.KeyValue {
	return []attribute.KeyValue{attribute.String("agentbox.assistant", r.a.ID),
		attribute.String("agentbox.user", r.req.UserID), attribute.String("agentbox.chat", r.req.ChatID)}
}

// enter records that the request entered phase: it ends the previous
// phase's span and starts the next one.
func (r *run) enter(phase string) {
	r.phase = phase
	r.endPhase()
	_, r.tr.phase = r.o.tel.tracer.Start(r.tr.ctx, "agentbox."+phase)
}

// endPhase ends the current phase's span, if any.
func (r *run) endPhase() {
	if r.tr.phase != nil {
		r.tr.phase.End()
		r.tr.phase = nil
	}
}

// traceEvent follows the agent's tool calls: a span from each tool use to
// its result.
func (r *run) traceEvent(ev executor.Event) {
	switch {
	case ev.Kind == executor.EventToolUse && ev.Tool != nil:
		r.o.tel.tools.Add(context.Background(), 1, metric.WithAttributes(attribute.String("agentbox.assistant", r.a.ID), attribute.String("agentbox.tool", ev.Tool.Name)))
		_, span := r.o.tel.tracer.Start(r.tr.ctx, "agentbox.tool_call", trace.WithAttributes(attribute.String("agentbox.tool", ev.Tool.Name), attribute.String("agentbox.tool_use_id", ev.Tool.ID)))
		if old := r.tr.tools[ev.Tool.ID]; old != nil {
			old.End()
		}
		r.tr.tools[ev.Tool.ID] = span
	case ev.Kind == executor.EventToolResult && ev.ToolResult != nil:
		if span := r.tr.tools[ev.ToolResult.ToolUseID]; span != nil {
			if ev.ToolResult.IsError {
				span.SetStatus(codes.Error, "the tool reported an error")
			}
			span.End()
			delete(r.tr.tools, ev.ToolResult.ToolUseID)
		}
	}
}

// record ends the request's spans and records its metrics.
func (r *run) record(resp *Response, err error) {
	ctx := context.Background()
	outcome := "ok"
	if err != nil {
		outcome = string(AsError(err).Kind)
	}
	base := attribute.String("agentbox.assistant", r.a.ID)
	r.o.tel.requests.Add(ctx, 1, metric.WithAttributes(base, attribute.String("agentbox.outcome", outcome), attribute.String("agentbox.phase", r.phase)))
	if err != nil && refusalKinds[AsError(err).Kind] {
		r.o.tel.refusals.Add(ctx, 1, metric.WithAttributes(base, attribute.String("agentbox.reason", outcome)))
	}
	for _, p := range []struct {
		name string
		d    time.Duration
	}{{"lease", r.t.Lease}, {"queue", r.t.Queue}, {"container_start", r.t.ContainerStart}, {"workspace", r.t.Workspace},
		{"create_hook", r.t.CreateHook}, {"agent", r.t.Agent}, {"next_hook", r.t.NextHook}, {"teardown", r.t.Teardown}, {"total", r.t.Total}} {
		if p.d > 0 {
			r.o.tel.phases.Record(ctx, p.d.Seconds(), metric.WithAttributes(base, attribute.String("agentbox.phase", p.name)))
		}
	}
	if resp != nil {
		u := resp.Usage
		for kind, n := range map[string]int64{"input": u.InputTokens, "output": u.OutputTokens, "cache_read": u.CacheReadInputTokens, "cache_creation": u.CacheCreationInputTokens} {
			if n > 0 {
				r.o.tel.tokens.Add(ctx, n, metric.WithAttributes(base, attribute.String("agentbox.kind", kind)))
			}
		}
	}
	b := r.budgetStop
	if bs, ok := r.route.(budgetStopper); ok { // the route is still open
		b = bs.BudgetStop()
	}
	if b != "" {
		r.o.tel.budgets.Add(ctx, 1, metric.WithAttributes(base, attribute.String("agentbox.budget", b)))
		r.tr.req.SetAttributes(attribute.String("agentbox.budget_stop", b))
	}
	r.emitMu.Lock()
	for id, span := range r.tr.tools {
		span.SetStatus(codes.Error, "the run ended before the tool answered")
		span.End()
		delete(r.tr.tools, id)
	}
	r.emitMu.Unlock()
	r.endPhase()
	r.tr.req.SetAttributes(attribute.String("agentbox.outcome", outcome), attribute.String("agentbox.phase", r.phase))
	if err != nil {
		r.tr.req.SetStatus(codes.Error, AsError(err).Message)
	}
	r.tr.req.End()
}
