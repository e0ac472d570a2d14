package modelroute

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/agentbox/agentbox/executor"
	"github.com/agentbox/agentbox/executor/helper"
	"github.com/agentbox/agentbox/middleware"
	"github.com/agentbox/agentbox/services/egress"
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
	// UpstreamTLS verifies the servers of https:// requests the proxy
	// makes itself, those that carry credentials among them
	// (egress.Options.UpstreamTLS): nil trusts the gateway's system
	// roots; set RootCAs for an internal registry's own CA.
	UpstreamTLS *tls.Config
	// MeterProvider receives agentbox.egress.refusals (OpenTelemetry's
	// global provider when nil).
	MeterProvider metric.MeterProvider
}

// instrumentation is the OpenTelemetry scope of the egress metric.
const instrumentation = "github.com/agentbox/agentbox/middleware/modelroute"

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
// logging each attempt with the run's assistant, sandbox, request id,
// user and chat, and counting each refused one in the counter
// agentbox.egress.refusals by agentbox.assistant and agentbox.reason (one
// of egress.Reasons, never a host).
type Egress struct {
	opts     EgressOptions
	refusals metric.Int64Counter
	err      error // from making the counter; Open reports it
}

var _ middleware.EgressRouter = (*Egress)(nil)

// NewEgress returns an Egress.
func NewEgress(o EgressOptions) *Egress {
	mp := o.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	reasons := make([]string, len(egress.Reasons))
	for i, r := range egress.Reasons {
		reasons[i] = string(r)
	}
	c, err := mp.Meter(instrumentation).Int64Counter("agentbox.egress.refusals",
		metric.WithDescription("Egress attempts the sandboxes' egress proxies refused, by assistant and reason ("+strings.Join(reasons, ", ")+")."))
	if err != nil {
		err = fmt.Errorf("modelroute: the egress refusals counter: %w", err)
	}
	return &Egress{opts: o, refusals: c, err: err}
}

// Open implements middleware.EgressRouter.
func (e *Egress) Open(ctx context.Context, sb executor.Sandbox, a *middleware.Assistant, log hclog.Logger) (io.Closer, error) {
	pol := a.Sandbox.Egress
	if pol == nil {
		return nil, nil
	}
	if e.err != nil {
		return nil, e.err
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
	// Each line names who was refused: log carries the run's user and
	// chat; these make sure of the rest.
	log = log.Named("egress").With("assistant", a.ID, "sandbox", sb.ID(), "request", middleware.RequestID(ctx))
	assistant := attribute.String("agentbox.assistant", a.ID)
	p, err := egress.New(egress.Options{Policy: pol, Resolver: o.Resolver, Secret: o.Secret, MaxBytes: o.MaxBytes, CA: ca,
		MaxConcurrent: o.MaxConcurrent, MaxConnections: o.MaxConnections, UpstreamTLS: o.UpstreamTLS, Logger: log,
		OnRefuse: func(r egress.Reason) {
			e.refusals.Add(context.Background(), 1, metric.WithAttributes(assistant, attribute.String("agentbox.reason", string(r))))
		}})
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
