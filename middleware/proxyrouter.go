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

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/helper"
	"github.com/agentbox/agentbox/executor/modelproxy"
	"github.com/hashicorp/go-hclog"
)

// ProxyRouterOptions configure a ProxyRouter.
type ProxyRouterOptions struct {
	// Budget bounds each request's model traffic; a zero MaxDuration takes
	// the sandbox's timeout.
	Budget modelproxy.Budget
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
// per-request token in place of the connector's key. It is safe for
// concurrent use.
type ProxyRouter struct {
	opts ProxyRouterOptions
	log  hclog.Logger
}

var _ ModelRouter = (*ProxyRouter)(nil)

// NewProxyRouter returns a ProxyRouter.
func NewProxyRouter(o ProxyRouterOptions) *ProxyRouter {
	p := &ProxyRouter{opts: o, log: o.Logger}
	if p.log == nil {
		p.log = hclog.NewNullLogger()
	}
	return p
}

// modelRelay is what a sandbox with the helper's model relay offers
// (executor/docker's Sandbox).
type modelRelay interface {
	ModelBaseURL() string
}

// Open implements ModelRouter.
func (p *ProxyRouter) Open(_ context.Context, sb executor.Sandbox, a *Assistant) (ModelRoute, error) {
	relay, _ := sb.(modelRelay)
	if relay == nil || relay.ModelBaseURL() == "" || sb.HostDir() == "" {
		return nil, errors.New("middleware: the sandbox has no model relay; run the executor with the helper (executor/docker Options.HelperBinary or UseImageHelper)")
	}
	uid, gid, err := sandboxUser(a.Sandbox.Spec.User)
	if err != nil {
		return nil, err
	}
	budget := p.opts.Budget
	if budget.MaxDuration == 0 {
		budget.MaxDuration = a.Sandbox.Spec.Timeout
	}
	tok, err := newToken()
	if err != nil {
		return nil, err
	}
	proxy, err := modelproxy.New(modelproxy.Options{
		Upstream: a.Sandbox.Connector.Upstream, APIKey: a.Sandbox.Connector.Key, Token: tok,
		MaxRequestBytes: p.opts.MaxRequestBytes, Budget: budget, Client: p.opts.Client,
		Logger: p.log.With("assistant", a.ID, "sandbox", sb.ID()),
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
