package modelroute

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/egress"
	"github.com/agentbox/agentbox/executor/helper"
	"github.com/agentbox/agentbox/middleware"
)

// EgressOptions configure an Egress. Zero fields take egress's defaults.
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
	// CA, when set, adds credentials inside CONNECT tunnels too
	// (egress.Options.CA): Open installs its certificate in the sandbox's
	// HOME (egress.CAInstallScript) for assistants whose policy has a
	// credential, whose Spec.Env must carry egress.CAEnv (the agentbox
	// package sets both).
	CA *egress.CA
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

// Egress is the middleware's EgressRouter for sandboxes with the helper's
// egress relay: each run whose assistant has an egress policy
// (Sandbox.Egress) gets an executor/egress proxy on {HostDir}/egress.sock,
// logging each connection with the run's user and chat.
type Egress struct{ opts EgressOptions }

var _ middleware.EgressRouter = (*Egress)(nil)

// NewEgress returns an Egress.
func NewEgress(o EgressOptions) *Egress { return &Egress{opts: o} }

// Open implements middleware.EgressRouter.
func (e *Egress) Open(ctx context.Context, sb executor.Sandbox, a *middleware.Assistant, log hclog.Logger) (io.Closer, error) {
	pol := a.Sandbox.Egress
	if pol == nil {
		return nil, nil
	}
	relay, _ := sb.(egressRelay)
	if relay == nil || relay.EgressProxyURL() == "" {
		return nil, errors.New("modelroute: the assistant has sandbox.egress but the sandbox has no egress relay; run the executor with the helper and Spec.Egress")
	}
	uid, gid, err := executor.ParseUser(a.Sandbox.Spec.User)
	if err != nil {
		return nil, err
	}
	o := e.opts
	ca := o.CA
	if !pol.Intercepts() {
		ca = nil
	}
	if ca != nil {
		var stderr bytes.Buffer
		res, err := sb.Exec(ctx, &executor.Cmd{Args: []string{"sh", "-c", egress.CAInstallScript}, Stdin: bytes.NewReader(ca.CertPEM()),
			Stderr: &stderr, Timeout: 30 * time.Second})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, bytes.TrimSpace(stderr.Bytes()))
		}
		if err != nil {
			return nil, fmt.Errorf("modelroute: installing the egress CA in the sandbox: %w", err)
		}
	}
	p, err := egress.New(egress.Options{Policy: pol, Resolver: o.Resolver, Secret: o.Secret, MaxBytes: o.MaxBytes, CA: ca,
		MaxConcurrent: o.MaxConcurrent, MaxConnections: o.MaxConnections, Logger: log.Named("egress").With("sandbox", sb.ID())})
	if err != nil {
		return nil, fmt.Errorf("modelroute: egress of %q: %w", a.ID, err)
	}
	ln, err := helper.ListenSandbox(ctx, sb, helper.EgressSocket, uid, gid)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("modelroute: egress route: %w", err), p.Close())
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
