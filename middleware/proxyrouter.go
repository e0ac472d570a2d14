package middleware

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/helper"
	"github.com/agentbox/agentbox/executor/modelproxy"
	"github.com/agentbox/agentbox/executor/modelproxy/anthropicopenai"
	"github.com/hashicorp/go-hclog"
)

// Defaults of the per-request model budget (ProxyRouterOptions.Budget,
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
func DefaultBudget(a *Assistant) modelproxy.Budget {
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

// ProxyRouterOptions configure a ProxyRouter.
type ProxyRouterOptions struct {
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

// ProxyRouter is the ModelRouter of sandboxes with the in-container helper
// (executor/docker with Options.HelperBinary or UseImageHelper): for each
// run it serves a modelproxy.Proxy on {HostDir}/model.sock, which the
// helper relays the agent's loopback connections to, with a fresh
// per-request token in place of the connector's key. The proxy forwards
// only the Messages endpoints, pins the connector's model, caps max_tokens
// and enforces the request's budget (DefaultBudget unless overridden); all
// the router's proxies share one body byte budget. Refusals are logged at
// WARN with the assistant, sandbox and request id (the run's own lines tie
// the request id to user and chat). It is safe for concurrent use.
type ProxyRouter struct {
	opts   ProxyRouterOptions
	log    hclog.Logger
	bodies *modelproxy.BodyBudget
}

var _ ModelRouter = (*ProxyRouter)(nil)

// NewProxyRouter returns a ProxyRouter.
func NewProxyRouter(o ProxyRouterOptions) *ProxyRouter {
	p := &ProxyRouter{opts: o, log: o.Logger, bodies: modelproxy.NewBodyBudget(o.BodyBudget)}
	if p.log == nil {
		p.log = hclog.NewNullLogger()
	}
	return p
}

// Bodies is the request-body byte budget the router's proxies share.
func (p *ProxyRouter) Bodies() *modelproxy.BodyBudget { return p.bodies }

// budget is a's effective model budget: the assistant's override, else
// the router's, else the default derived from the assistant.
func (p *ProxyRouter) budget(a *Assistant) modelproxy.Budget {
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

// modelRelay is what a sandbox with the helper's model relay offers
// (executor/docker's Sandbox).
type modelRelay interface {
	ModelBaseURL() string
}

// Open implements ModelRouter.
func (p *ProxyRouter) Open(ctx context.Context, sb executor.Sandbox, a *Assistant) (ModelRoute, error) {
	tok, err := newToken()
	if err != nil {
		return nil, err
	}
	return p.openToken(ctx, sb, a, tok)
}

// openToken opens a route that accepts tok, chosen beforehand: a CLI
// started before its request (session policy) already has it.
func (p *ProxyRouter) openToken(ctx context.Context, sb executor.Sandbox, a *Assistant, tok string) (ModelRoute, error) {
	relay, _ := sb.(modelRelay)
	if relay == nil || relay.ModelBaseURL() == "" || sb.HostDir() == "" {
		return nil, errors.New("middleware: the sandbox has no model relay; run the executor with the helper (executor/docker Options.HelperBinary or UseImageHelper)")
	}
	uid, gid, err := sandboxUser(a.Sandbox.Spec.User)
	if err != nil {
		return nil, err
	}
	budget := p.budget(a)
	// A refusal's warn line names who was refused.
	user, chat := IdentityFrom(ctx)
	log := p.log.With("assistant", a.ID, "user", user, "chat", chat, "sandbox", sb.ID(), "request", RequestID(ctx))
	log.Debug("model budget", "calls", budget.MaxRequests, "tokens", budget.MaxTokens, "wall", budget.MaxDuration, "model", a.Sandbox.Run.Model)
	client, err := p.client(a, log)
	if err != nil {
		return nil, fmt.Errorf("middleware: model route of %q: %w", a.ID, err)
	}
	proxy, err := modelproxy.New(modelproxy.Options{
		Upstream: a.Sandbox.Connector.Upstream, APIKey: a.Sandbox.Connector.Key, Token: tok,
		MaxRequestBytes: p.opts.MaxRequestBytes, Budget: budget, Client: client,
		Model: a.Sandbox.Run.Model, AllowedModels: p.opts.AllowedModels, MaxOutputTokens: p.opts.MaxOutputTokens,
		MaxConcurrent: p.opts.MaxConcurrent, Bodies: p.bodies, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("middleware: model route of %q: %w", a.ID, err)
	}
	ln, err := helper.ListenHostSocket(sb.HostDir(), helper.ModelSocket, uid, gid)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("middleware: model route: %w", err), proxy.Close())
	}
	go func() { _ = proxy.Serve(ln) }()
	return &proxyRoute{proxy: proxy, ln: ln, base: relay.ModelBaseURL(), token: tok}, nil
}

// client is the upstream client of a's proxy: the router's own, or for an
// OpenAI-compatible connector one whose transport translates the CLI's
// Anthropic calls to Chat Completions over the router's transport.
func (p *ProxyRouter) client(a *Assistant, log hclog.Logger) (*http.Client, error) {
	c := a.Sandbox.Connector
	if c.OpenAI == nil {
		return p.opts.Client, nil
	}
	o := *c.OpenAI
	o.BaseURL, o.APIKey, o.Model, o.Logger = c.Upstream, c.Key, a.Sandbox.Run.Model, log.Named("openai")
	out := &http.Client{}
	if p.opts.Client != nil {
		o.Client, out.Timeout = p.opts.Client.Transport, p.opts.Client.Timeout
	}
	t, err := anthropicopenai.New(o)
	if err != nil {
		return nil, err
	}
	out.Transport = t
	return out, nil
}

// sandboxUser parses Spec.User ("uid:gid"; "" is 100000:100000, the
// executor's default, which is no host account), the owner the model
// socket is given to.
func sandboxUser(user string) (uid, gid int, err error) {
	if user == "" {
		return 100000, 100000, nil
	}
	u, g, _ := strings.Cut(user, ":")
	if uid, err = strconv.Atoi(u); err == nil {
		gid = uid
		if g != "" {
			gid, err = strconv.Atoi(g)
		}
	}
	if err != nil {
		return 0, 0, fmt.Errorf("middleware: sandbox user %q is not uid:gid; set sandbox.user to numbers, e.g. \"1000:1000\"", user)
	}
	return uid, gid, nil
}

// newToken returns a per-request key for the container.
func newToken() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("middleware: per-request token: %w", err)
	}
	return "abx-" + hex.EncodeToString(b[:]), nil
}

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

// Close stops the proxy and its listener (Serve may not have taken it yet).
func (r *proxyRoute) Close() error {
	err := r.proxy.Close()
	if cerr := r.ln.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		err = errors.Join(err, cerr)
	}
	return err
}
