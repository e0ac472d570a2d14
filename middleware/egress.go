package middleware

import (
	"errors"
	"fmt"
	"net"

	"github.com/agentbox/agentbox/config"
	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/egress"
	"github.com/agentbox/agentbox/executor/helper"
)

// EgressOptions configure the egress proxy of every run whose assistant has
// an egress policy (Sandbox.Egress). Zero fields take egress's defaults.
type EgressOptions struct {
	// MaxBytes caps one request's egress, up plus down, all connections.
	MaxBytes int64
	// MaxConcurrent bounds one request's connections open at once.
	MaxConcurrent int
	// MaxConnections caps one request's connections.
	MaxConnections int
	// Resolver resolves names on the gateway (net.DefaultResolver when
	// nil); tests map names to loopback with it.
	Resolver egress.Resolver
	// Secret reads a credential's environment variable (os.LookupEnv when
	// nil).
	Secret func(name string) (string, bool)
}

// egressRelay is what a sandbox with the helper's egress relay offers
// (executor/docker's Sandbox).
type egressRelay interface {
	EgressProxyURL() string
}

// egressRoute is one run's egress proxy on {HostDir}/egress.sock.
type egressRoute struct {
	proxy *egress.Proxy
	ln    net.Listener
}

// openEgress serves the assistant's egress policy to sb's helper relay,
// logging each connection with the run's user and chat. It returns nil for
// an assistant without a policy.
func (r *run) openEgress(sb executor.Sandbox) (*egressRoute, error) {
	pol := r.a.Sandbox.Egress
	if pol == nil {
		return nil, nil
	}
	relay, _ := sb.(egressRelay)
	if relay == nil || relay.EgressProxyURL() == "" || sb.HostDir() == "" {
		return nil, errors.New("middleware: the assistant has sandbox.egress but the sandbox has no egress relay; run the executor with the helper and Spec.Egress")
	}
	uid, gid, err := sandboxUser(r.a.Sandbox.Spec.User)
	if err != nil {
		return nil, err
	}
	o := r.o.opts.Egress
	p, err := egress.New(egress.Options{Policy: pol, Resolver: o.Resolver, Secret: o.Secret, MaxBytes: o.MaxBytes,
		MaxConcurrent: o.MaxConcurrent, MaxConnections: o.MaxConnections, Logger: r.log.Named("egress").With("sandbox", sb.ID())})
	if err != nil {
		return nil, fmt.Errorf("middleware: egress of %q: %w", r.a.ID, err)
	}
	ln, err := helper.ListenHostSocket(sb.HostDir(), helper.EgressSocket, uid, gid)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("middleware: egress route: %w", err), p.Close())
	}
	go func() { _ = p.Serve(ln) }()
	return &egressRoute{proxy: p, ln: ln}, nil
}

// Close stops the proxy, its tunnels and its listener.
func (e *egressRoute) Close() error {
	err := e.proxy.Close()
	if cerr := e.ln.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		err = errors.Join(err, cerr)
	}
	return err
}

// EgressPolicy converts an assistant's sandbox.egress to the proxy's
// policy; nil when the list is empty.
func EgressPolicy(rules []config.EgressRule) (*egress.Policy, error) {
	if len(rules) == 0 {
		return nil, nil
	}
	out := make([]egress.Rule, len(rules))
	for i, r := range rules {
		out[i] = egress.Rule{Host: r.Host, Port: r.Port, Private: r.Private}
		if s := r.Secret; s != nil {
			out[i].Credential = &egress.Credential{Env: s.Env, Header: s.Header, Prefix: s.Prefix}
		}
	}
	return egress.NewPolicy(out...)
}
