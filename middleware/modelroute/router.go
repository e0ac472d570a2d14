// Package modelroute is the middleware's ModelRouter for sandboxes with
// the in-container helper: a per-run model proxy (executor/modelproxy) on
// the sandbox's model socket that keeps the connector's key on the host,
// pins the model, caps and budgets the traffic, and traces each call.
package modelroute

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/helper"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/services/modelproxy"
)

// Defaults of the per-request model budget (Options.Budget,
// Sandbox.Budget): budgets are on unless an assistant overrides them.
const (
	// DefaultBudgetTokens caps one request's metered tokens.
	DefaultBudgetTokens = 2_000_000
	// defaultMaxTurns is the claude runner's default max_turns
	// (claude.DefaultMaxTurns), for assistants that set none.
	defaultMaxTurns = 50
)

// DefaultBudget is the model budget of one request of a: calls
// 4*max_turns+10 (an agent turn may take a few model calls: the main
// loop, retries, compaction), DefaultBudgetTokens tokens, and the
// sandbox's timeout as wall time.
func DefaultBudget(a *middleware.Assistant) modelproxy.Budget {
	turns := defaultMaxTurns
	if a.Sandbox != nil {
		if t, ok := a.Sandbox.Run.Arguments["max_turns"].(int); ok && t > 0 {
			turns = t
		}
	}
	b := modelproxy.Budget{MaxRequests: 4*turns + 10, MaxTokens: DefaultBudgetTokens}
	if a.Sandbox != nil {
		b.MaxDuration = a.Sandbox.Spec.Timeout
	}
	return b
}

// Options configure a Router.
type Options struct {
	// Budget is the gateway's budget for each request's model traffic;
	// each zero field takes DefaultBudget of the assistant. An assistant's
	// Sandbox.Budget overrides it field by field.
	Budget modelproxy.Budget
	// AllowedModels are models an agent may name besides its connector's
	// (which a call naming any other model is rewritten to).
	AllowedModels []string
	// MaxOutputTokens caps each call's max_tokens (modelproxy's
	// DefaultMaxOutputTokens when 0).
	MaxOutputTokens int64
	// MaxConcurrent bounds one sandbox's model calls in flight
	// (modelproxy's DefaultMaxConcurrent when 0).
	MaxConcurrent int
	// BodyBudget is the request-body bytes all the router's proxies may
	// hold at once (modelproxy.DefaultBodyBudget when 0).
	BodyBudget int64
	// MaxRequestBytes caps one model request body (modelproxy's default
	// when 0).
	MaxRequestBytes int64
	// Client supplies the transport for upstream calls (optional).
	Client *http.Client
	// Logger receives one line per model call (never keys or tokens).
	Logger hclog.Logger
}

// Router is the ModelRouter of sandboxes with the in-container helper
// (executor/docker with Options.HelperBinary or UseImageHelper): for each
// run it serves a modelproxy.Proxy on {HostDir}/model.sock, which the
// helper relays the agent's loopback connections to, with a fresh
// per-request token in place of the connector's key. The proxy forwards
// only the Messages endpoints, pins the connector's model, caps max_tokens
// and enforces the request's budget (DefaultBudget unless overridden); all
// the router's proxies share one body byte budget. Refusals are logged at
// WARN with the assistant, sandbox and request id (the run's own lines tie
// the request id to user and chat). It is safe for concurrent use.
type Router struct {
	opts   Options
	log    hclog.Logger
	bodies *modelproxy.BodyBudget
}

var _ middleware.ModelRouter = (*Router)(nil)

// New returns a Router.
func New(o Options) *Router {
	p := &Router{opts: o, log: o.Logger, bodies: modelproxy.NewBodyBudget(o.BodyBudget)}
	if p.log == nil {
		p.log = hclog.NewNullLogger()
	}
	return p
}

// Bodies is the request-body byte budget the router's proxies share.
func (p *Router) Bodies() *modelproxy.BodyBudget { return p.bodies }

// budget is a's effective model budget: the assistant's override, else
// the router's, else the default derived from the assistant.
func (p *Router) budget(a *middleware.Assistant) modelproxy.Budget {
	b, d := a.Sandbox.Budget, DefaultBudget(a)
	pick := func(own, gw, def int64) int64 {
		switch {
		case own > 0:
			return own
		case gw > 0:
			return gw
		}
		return def
	}
	return modelproxy.Budget{
		MaxRequests: int(pick(int64(b.MaxRequests), int64(p.opts.Budget.MaxRequests), int64(d.MaxRequests))),
		MaxTokens:   pick(b.MaxTokens, p.opts.Budget.MaxTokens, d.MaxTokens),
		MaxDuration: time.Duration(pick(int64(b.MaxDuration), int64(p.opts.Budget.MaxDuration), int64(d.MaxDuration))),
	}
}

// Validate implements middleware.ModelRouter: the routes are served
// through the sandboxes' model relay.
func (p *Router) Validate(_ *middleware.Assistant, caps executor.Capabilities) error {
	if !caps.ModelRelay {
		return fmt.Errorf("its model route needs the sandboxes' model relay, and the %s backend has none; run it with the helper (executor/docker Options.HelperBinary or UseImageHelper) and its ModelPort on: %w", caps.Backend, executor.ErrInvalid)
	}
	return nil
}

// Open implements middleware.ModelRouter.
func (p *Router) Open(ctx context.Context, sb executor.Sandbox, a *middleware.Assistant) (middleware.ModelRoute, error) {
	tok, err := middleware.NewRouteToken()
	if err != nil {
		return nil, err
	}
	return p.OpenToken(ctx, sb, a, tok)
}

// OpenToken implements middleware.ModelRouter: a route that accepts tok,
// chosen beforehand (a CLI started before its request, under the session
// policy, already has it).
func (p *Router) OpenToken(ctx context.Context, sb executor.Sandbox, a *middleware.Assistant, tok string) (middleware.ModelRoute, error) {
	base, uid, gid, err := relayOf(sb, a)
	if err != nil {
		return nil, err
	}
	budget := p.budget(a)
	// A refusal's warn line names who was refused.
	user, chat := middleware.IdentityFrom(ctx)
	log := p.log.With("assistant", a.ID, "user", user, "chat", chat, "sandbox", sb.ID(), "request", middleware.RequestID(ctx))
	log.Debug("model budget", "calls", budget.MaxRequests, "tokens", budget.MaxTokens, "wall", budget.MaxDuration, "model", a.Sandbox.Run.Model)
	client, err := p.client(a, log)
	if err != nil {
		return nil, fmt.Errorf("modelroute: model route of %q: %w", a.ID, err)
	}
	client = traced(ctx, client, attribute.String("agentbox.assistant", a.ID), attribute.String("agentbox.user", user),
		attribute.String("agentbox.chat", chat), attribute.String("agentbox.model", a.Sandbox.Run.Model))
	proxy, err := modelproxy.New(modelproxy.Options{
		Upstream: a.Sandbox.Connector.Upstream, APIKey: a.Sandbox.Connector.Key, Token: tok,
		MaxRequestBytes: p.opts.MaxRequestBytes, Budget: budget, Client: client,
		Model: a.Sandbox.Run.Model, AllowedModels: p.opts.AllowedModels, MaxOutputTokens: p.opts.MaxOutputTokens,
		MaxConcurrent: p.opts.MaxConcurrent, Bodies: p.bodies, Logger: log, API: apiOf(a),
	})
	if err != nil {
		return nil, fmt.Errorf("modelroute: model route of %q: %w", a.ID, err)
	}
	ln, err := helper.ListenSandbox(ctx, sb, helper.ModelSocket, uid, gid)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("modelroute: model route: %w", err), proxy.Close())
	}
	go func() { _ = proxy.Serve(ln) }()
	return &proxyRoute{proxy: proxy, ln: ln, base: base, token: tok}, nil
}

// relayOf is where sb's agent reaches its model relay (Validate checked
// that the backend declares one) and the user the relay's socket belongs
// to.
func relayOf(sb executor.Sandbox, a *middleware.Assistant) (base string, uid, gid int, err error) {
	relay, _ := sb.(executor.ModelRelay)
	if relay == nil || relay.ModelBaseURL() == "" {
		return "", 0, 0, errors.New("modelroute: the sandbox has no model relay; run the executor with the helper (executor/docker Options.HelperBinary or UseImageHelper)")
	}
	uid, gid, err = executor.ParseUser(a.Sandbox.Spec.User)
	return relay.ModelBaseURL(), uid, gid, err
}

// OpenWarmUp implements middleware.ModelRouter: between requests, it
// answers the warm-up call of a CLI started with tok on the sandbox's model
// socket itself (modelproxy.WarmUp), never reaching the upstream.
func (p *Router) OpenWarmUp(ctx context.Context, sb executor.Sandbox, a *middleware.Assistant, tok string) (io.Closer, error) {
	_, uid, gid, err := relayOf(sb, a)
	if err != nil {
		return nil, err
	}
	wu, err := modelproxy.NewWarmUp(tok, p.opts.MaxRequestBytes)
	if err != nil {
		return nil, err
	}
	ln, err := helper.ListenSandbox(ctx, sb, helper.ModelSocket, uid, gid)
	if err != nil {
		return nil, fmt.Errorf("modelroute: warm-up route: %w", err)
	}
	go func() { _ = wu.Serve(ln) }()
	return &warmUpRoute{wu: wu, ln: ln}, nil
}

// warmUpRoute is a WarmUp on its listener.
type warmUpRoute struct {
	wu *modelproxy.WarmUp
	ln net.Listener
}

// Close stops the warm-up and its listener (Serve may not have taken it
// yet).
func (r *warmUpRoute) Close() error { return closeServed(r.wu, r.ln) }

// closeServed stops a server and then its listener, which Serve may not
// have taken yet.
func closeServed(srv io.Closer, ln net.Listener) error {
	err := srv.Close()
	if cerr := ln.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		err = errors.Join(err, cerr)
	}
	return err
}

// client is the upstream client of a's proxy: the router's own, or for a
// connector with a Translate one whose transport translates over the
// router's (e.g. the CLI's Anthropic calls to Chat Completions).
func (p *Router) client(a *middleware.Assistant, log hclog.Logger) (*http.Client, error) {
	c := a.Sandbox.Connector
	if c.Translate == nil {
		return p.opts.Client, nil
	}
	out := &http.Client{}
	var base http.RoundTripper
	if p.opts.Client != nil {
		base, out.Timeout = p.opts.Client.Transport, p.opts.Client.Timeout
	}
	t, err := c.Translate(c, a.Sandbox.Run.Model, base, log)
	if err != nil {
		return nil, err
	}
	out.Transport = t
	return out, nil
}

// traced returns c with a span per upstream model call
// ("agentbox.model_call", from the call's start to the end of its
// response body), a child of the span in ctx (the request's) with attrs.
// otelhttp does the HTTP side; no trace context is sent upstream and no
// HTTP metrics are recorded (the gateway's own metrics cover the calls).
// Without a span in ctx, c is returned as it is.
func traced(ctx context.Context, c *http.Client, attrs ...attribute.KeyValue) *http.Client {
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsValid() {
		return c
	}
	out, base := &http.Client{}, http.DefaultTransport
	if c != nil {
		*out = *c
		if c.Transport != nil {
			base = c.Transport
		}
	}
	t := otelhttp.NewTransport(base,
		otelhttp.WithTracerProvider(parent.TracerProvider()),
		otelhttp.WithMeterProvider(noop.NewMeterProvider()),
		otelhttp.WithPropagators(propagation.NewCompositeTextMapPropagator()),
		otelhttp.WithSpanNameFormatter(func(string, *http.Request) string { return "agentbox.model_call" }),
		otelhttp.WithSpanOptions(trace.WithAttributes(attrs...)))
	out.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return t.RoundTrip(r.WithContext(trace.ContextWithSpan(r.Context(), parent)))
	})
	return out
}

// roundTripFunc is an http.RoundTripper in a func.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// proxyRoute is one run's model proxy.
type proxyRoute struct {
	proxy *modelproxy.Proxy
	ln    net.Listener
	base  string
	token string
}

func (r *proxyRoute) BaseURL() string       { return r.base }
func (r *proxyRoute) Token() string         { return r.token }
func (r *proxyRoute) Usage() executor.Usage { return r.proxy.Usage() }

// Settle waits until the route has no call in flight (modelproxy.Proxy.Idle).
func (r *proxyRoute) Settle(ctx context.Context) error { return r.proxy.Idle(ctx) }

// BudgetStop names the budget that stopped a model call of the run
// (modelproxy.BudgetCalls, BudgetTokens or BudgetWall), or "".
func (r *proxyRoute) BudgetStop() string { return r.proxy.BudgetStop() }

// Close stops the proxy and its listener (Serve may not have taken it yet).
func (r *proxyRoute) Close() error { return closeServed(r.proxy, r.ln) }
