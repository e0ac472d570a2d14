package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Defaults of Options.
const (
	// DefaultMaxBytes caps the bytes (up plus down) of one request's
	// egress, all connections together.
	DefaultMaxBytes int64 = 1 << 30
	// DefaultMaxConcurrent bounds the connections open at once.
	DefaultMaxConcurrent = 32
	// DefaultMaxConnections caps the connections of one request.
	DefaultMaxConnections = 4096
	// DefaultDialTimeout bounds resolving and dialling one destination.
	DefaultDialTimeout = 15 * time.Second
)

// ErrCapped is the outcome of a connection cut by a byte or connection cap.
var ErrCapped = errors.New("egress: cap reached")

// Resolver resolves host names on the host (net.DefaultResolver fits).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options configure a Proxy.
type Options struct {
	// Policy is the allowlist; nil refuses everything.
	Policy *Policy
	// Resolver resolves names (net.DefaultResolver when nil).
	Resolver Resolver
	// Dial opens a TCP connection to an address the proxy checked
	// ("ip:port"); a net.Dialer's DialContext when nil.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Secret returns the value of a credential's environment variable
	// (os.LookupEnv when nil).
	Secret func(name string) (string, bool)
	// MaxBytes caps the bytes up plus down of all connections
	// (DefaultMaxBytes when 0); past it connections are cut and new ones
	// refused.
	MaxBytes int64
	// MaxConcurrent bounds connections open at once (DefaultMaxConcurrent
	// when 0); more are refused with 503. Client connections being read
	// at once, tunnels aside, are capped at four times it.
	MaxConcurrent int
	// MaxConnections caps the connections over the proxy's life
	// (DefaultMaxConnections when 0).
	MaxConnections int
	// DialTimeout bounds resolving and dialling (DefaultDialTimeout when 0).
	DialTimeout time.Duration
	// HeaderTimeout bounds reading one request head, on the proxy's
	// connections and inside intercepted tunnels (DefaultHeaderTimeout
	// when 0); a client that takes longer is cut, logged and counted.
	HeaderTimeout time.Duration
	// UpstreamTLS is the TLS configuration of https:// requests the proxy
	// forwards itself (absolute-form, and inside intercepted tunnels); nil
	// verifies upstream certificates against the gateway's system roots.
	// It must verify them when a rule carries a Credential.
	UpstreamTLS *tls.Config
	// CA, when set, lets the proxy add credentials inside CONNECT tunnels
	// too: a tunnel to a host whose rule has a Credential is terminated
	// with a certificate the CA signs (see CA); the sandbox must trust
	// the CA. Without it such tunnels stay opaque and carry no credential.
	CA *CA
	// Logger gets one line per attempt, refused ones included at any
	// layer (net/http's own parser too); the caller adds the assistant,
	// sandbox, request id, user and chat with With. Secrets are never
	// logged.
	Logger hclog.Logger
	// OnRefuse, when set, is called once per refused attempt with its
	// reason, beside the attempt's log line (middleware/modelroute
	// counts them as agentbox.egress.refusals). It must not block.
	OnRefuse func(Reason)
}

// Stats are a proxy's counters so far.
type Stats struct {
	// Connections counts allowed connections (tunnels and plain requests).
	Connections int64
	// Refused counts refused attempts.
	Refused int64
	// BytesUp and BytesDown are the bytes sent to and received from
	// destinations.
	BytesUp, BytesDown int64
}

// Proxy is an HTTP forward proxy (absolute-form http:// and https://
// requests and CONNECT tunnels) that reaches only what its Policy allows. It is safe for
// concurrent use.
type Proxy struct {
	o     Options
	log   hclog.Logger
	srv   *http.Server
	plain *httputil.ReverseProxy
	slots chan struct{}

	conns, refused, up, down atomic.Int64

	// ctx ends at Close; requests run on it rather than on their client
	// connection's context, which net/http cancels when the client
	// half-closes after its request (busybox wget, nc).
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	closed  bool
	tunnels map[net.Conn]struct{}

	// live counts what may still log: each client connection until its
	// closing hook has run, and each handler until it returns. Close
	// waits for it, so that every attempt's line is out when Close
	// returns.
	live live
}

// New returns a proxy; Serve starts it.
func New(o Options) (*Proxy, error) {
	if o.MaxBytes < 0 || o.MaxConcurrent < 0 || o.MaxConnections < 0 || o.DialTimeout < 0 || o.HeaderTimeout < 0 {
		return nil, errors.New("egress: negative cap in Options; caps are never unlimited, use 0 for the default")
	}
	if o.UpstreamTLS != nil && o.UpstreamTLS.InsecureSkipVerify && o.Policy.Intercepts() {
		return nil, errors.New("egress: Options.UpstreamTLS skips certificate verification and a rule carries a credential, which would go to any server; verify upstream certificates (set RootCAs instead)")
	}
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	if o.Secret == nil {
		o.Secret = os.LookupEnv
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxConcurrent == 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.HeaderTimeout == 0 {
		o.HeaderTimeout = DefaultHeaderTimeout
	}
	if o.Dial == nil {
		d := &net.Dialer{Timeout: o.DialTimeout}
		o.Dial = d.DialContext
	}
	p := &Proxy{o: o, log: o.Logger, slots: make(chan struct{}, o.MaxConcurrent), tunnels: map[net.Conn]struct{}{}}
	if p.log == nil {
		p.log = hclog.NewNullLogger()
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.plain = &httputil.ReverseProxy{
		Rewrite: p.rewrite,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           p.dialPlanned,
			DisableKeepAlives:     true, // one connection per request: its bytes are the request's
			TLSClientConfig:       o.UpstreamTLS.Clone(),
			ForceAttemptHTTP2:     false,
			ResponseHeaderTimeout: 5 * time.Minute,
		},
		ErrorHandler: p.plainError,
		ErrorLog:     log.New(io.Discard, "", 0),
	}
	p.srv = p.server(p)
	return p, nil
}

// server is one of the proxy's HTTP servers: the proxy's own, or an
// intercepted tunnel's. Its handler sees OPTIONS * too, which net/http
// would answer itself.
func (p *Proxy) server(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: p.o.HeaderTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes,
		DisableGeneralOptionsHandler: true, ErrorLog: log.New(io.Discard, "", 0)}
}

// Serve serves the proxy on ln until Close. It returns nil after Close.
// Connections past 4×MaxConcurrent open at once (tunnels aside) are
// refused; requests net/http turns down on its own are logged and counted
// as the handler's refusals are.
func (p *Proxy) Serve(ln net.Listener) error {
	cl := &clientListener{Listener: ln, p: p}
	p.watch(p.srv, p.log, cl.ended)
	err := p.srv.Serve(cl)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops the proxy and cuts every connection, tunnels included, and
// returns once each attempt's line is logged and counted: a request
// net/http turned down is logged after its client saw the connection
// close. It is safe to call more than once.
func (p *Proxy) Close() error {
	p.cancel()
	p.mu.Lock()
	p.closed = true
	for c := range p.tunnels {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.srv.Close()
	if n := p.live.wait(closeWait); n > 0 {
		err = errors.Join(err, fmt.Errorf("egress: %d connections or handlers still running %v after Close; their lines may come later", n, closeWait))
	}
	return err
}

// Stats returns the counters so far.
func (p *Proxy) Stats() Stats {
	return Stats{Connections: p.conns.Load(), Refused: p.refused.Load(), BytesUp: p.up.Load(), BytesDown: p.down.Load()}
}

// attempt is one connection's record, logged when it ends.
type attempt struct {
	method, host string
	port         int
	rule         string
	start        time.Time
	up, down     atomic.Int64
	status       int
	reason       Reason // set when refused

	mu      sync.Mutex // outcome and addr are set by relay and dial goroutines
	outcome error
	addr    string
}

// fail records the first error of the attempt.
func (a *attempt) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.outcome == nil {
		a.outcome = err
	}
}

func (a *attempt) setAddr(addr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.addr = addr
}

func (p *Proxy) logAttempt(a *attempt) {
	a.mu.Lock()
	defer a.mu.Unlock()
	args := []any{"method", a.method, "host", a.host, "port", a.port, "bytes_up", a.up.Load(), "bytes_down", a.down.Load(),
		"duration", time.Since(a.start).Round(time.Millisecond)}
	if a.addr != "" {
		args = append(args, "addr", a.addr)
	}
	if a.rule != "" {
		args = append(args, "rule", a.rule)
	}
	if a.status != 0 {
		args = append(args, "status", a.status)
	}
	if a.reason != "" {
		args = append(args, "reason", a.reason)
	}
	switch {
	case a.outcome == nil:
		p.log.Info("egress", append(args, "outcome", "ok")...)
	case errors.Is(a.outcome, ErrRefused):
		p.log.Warn("egress refused", append(args, "outcome", "refused", "error", a.outcome.Error())...)
	case errors.Is(a.outcome, ErrCapped):
		p.log.Warn("egress capped", append(args, "outcome", "capped", "error", a.outcome.Error())...)
	default:
		p.log.Info("egress", append(args, "outcome", "error", "error", a.outcome.Error())...)
	}
}

// ServeHTTP implements http.Handler: CONNECT opens a tunnel, an
// absolute-form http:// or https:// request is forwarded, anything else is
// refused.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.live.enter()
	defer p.live.leave() // after the attempt's line
	served(r)
	a := &attempt{method: r.Method, start: time.Now()}
	defer p.logAttempt(a)
	var host string
	var port int
	var err error
	switch {
	case r.URL.User != nil:
		// "CONNECT allowed@evil:443" would reach evil; no client sends
		// userinfo to a proxy, so it is an error, not a guess.
		err = refusedFor(ReasonMalformed, "%s %s: a proxy request target has no user@ part; send credentials in a header", r.Method, strconv.QuoteToASCII(r.RequestURI))
	case r.Method == http.MethodConnect:
		host, port, err = splitAuthority(r.Host, 0)
	default:
		switch {
		case r.URL.Scheme == "http" && r.URL.Host != "":
			host, port, err = splitAuthority(r.URL.Host, 80)
		case r.URL.Scheme == "https" && r.URL.Host != "":
			// Clients such as busybox wget send https:// URLs to the
			// proxy instead of CONNECT: the proxy speaks TLS upstream.
			host, port, err = splitAuthority(r.URL.Host, 443)
		case r.URL.Host == "":
			err = refusedFor(ReasonNotProxy, "%s %s is not a proxy request; this is the sandbox's egress proxy (HTTP_PROXY), send requests with an absolute URL", r.Method, r.URL.RequestURI())
		default:
			err = refusedFor(ReasonNotProxy, "scheme %q; the proxy forwards http:// and https:// requests and tunnels with CONNECT", r.URL.Scheme)
		}
	}
	a.host, a.port = host, port
	ctx, stop := context.WithCancel(context.WithoutCancel(r.Context()))
	defer stop()
	defer context.AfterFunc(p.ctx, stop)()
	r = r.WithContext(ctx)
	var rule Rule
	var addrs []netip.Addr
	if err == nil {
		rule, err = p.o.Policy.Check(host, port)
	}
	if err == nil && r.Method != http.MethodConnect && r.URL.Scheme == "http" && rule.Credential != nil {
		// Plain HTTP would carry the credential in clear, whatever the
		// port: it goes only inside TLS to a server the proxy verified.
		err = refusedFor(ReasonPlainCredential, "http://%s is plain HTTP to a host whose %s rule %q carries a credential, which the proxy sends only over TLS; use https:// for this host",
			net.JoinHostPort(host, strconv.Itoa(port)), ConfigKey, rule.String())
	}
	if err == nil {
		addrs, err = p.admit(r.Context(), rule, host)
	}
	if err != nil {
		a.fail(err)
		p.refuse(w, a, err)
		return
	}
	a.rule = rule.String()
	defer func() { <-p.slots }()
	if r.Method == http.MethodConnect {
		if p.o.CA != nil && rule.Credential != nil {
			p.intercept(w, r, a, rule, addrs)
			return
		}
		p.tunnel(w, r, a, addrs)
		return
	}
	p.forward(w, r, a, rule, addrs)
}

// countConnection checks the byte cap and counts one more connection
// against MaxConnections; a capped one is not counted.
func (p *Proxy) countConnection() error {
	if p.up.Load()+p.down.Load() >= p.o.MaxBytes {
		return fmt.Errorf("%w: this request's egress used its %d bytes (egress.Options.MaxBytes); nothing more can be fetched in this request", ErrCapped, p.o.MaxBytes)
	}
	if n := p.conns.Add(1); n > int64(p.o.MaxConnections) {
		p.conns.Add(-1)
		return fmt.Errorf("%w: this request opened its %d connections (egress.Options.MaxConnections)", ErrCapped, p.o.MaxConnections)
	}
	return nil
}

// admit checks the caps and the addresses of host, which rule allows,
// and takes a connection slot (the caller releases it).
func (p *Proxy) admit(ctx context.Context, rule Rule, host string) ([]netip.Addr, error) {
	if err := p.countConnection(); err != nil {
		return nil, err
	}
	select {
	case p.slots <- struct{}{}:
	default:
		p.conns.Add(-1)
		return nil, fmt.Errorf("%w: %d connections are open already (egress.Options.MaxConcurrent); close some and retry", ErrCapped, p.o.MaxConcurrent)
	}
	addrs, err := p.resolve(ctx, rule, host)
	if err != nil {
		<-p.slots
		p.conns.Add(-1)
		return nil, err
	}
	return addrs, nil
}

// resolve returns the addresses of host the rule may reach: the literal
// itself for an IP, else what the resolver says, filtered by checkAddrs.
// The proxy then dials exactly these, so a name cannot change its answer
// between the check and the dial.
func (p *Proxy) resolve(ctx context.Context, rule Rule, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return checkAddrs(rule, host, []netip.Addr{a})
	}
	ctx, cancel := context.WithTimeout(ctx, p.o.DialTimeout)
	defer cancel()
	name, _ := normalName(host)
	addrs, err := p.o.Resolver.LookupNetIP(ctx, "ip", name)
	if err != nil {
		return nil, &refusal{reason: ReasonUnresolvable, err: fmt.Errorf("egress: resolve %s: %w", name, err)}
	}
	return checkAddrs(rule, name, addrs)
}

// refuse answers a refusal the agent can read: 403 for the policy, 503 for
// caps, 502 when the name does not resolve; it counts it by reason.
func (p *Proxy) refuse(w http.ResponseWriter, a *attempt, err error) {
	p.refused.Add(1)
	a.reason = reasonOf(err)
	p.onRefuse(a.reason)
	code := http.StatusBadGateway
	switch {
	case a.reason == ReasonMalformed:
		code = http.StatusBadRequest
	case errors.Is(err, ErrRefused):
		code = http.StatusForbidden
	case errors.Is(err, ErrCapped):
		code = http.StatusServiceUnavailable
	}
	a.status = code
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Agentbox-Egress", "refused")
	w.Header().Set("Connection", "close")
	w.WriteHeader(code)
	_, _ = fmt.Fprintf(w, "agentbox egress proxy: %v\n", err)
}

// splitAuthority splits "host:port" (port def when absent and def > 0).
func splitAuthority(hp string, def int) (string, int, error) {
	host, ps, err := net.SplitHostPort(hp)
	if err != nil {
		if def == 0 {
			return "", 0, refusedFor(ReasonMalformed, "%s is not host:port", strconv.QuoteToASCII(hp))
		}
		host, ps = hp, strconv.Itoa(def)
		if len(host) > 1 && host[0] == '[' && host[len(host)-1] == ']' {
			host = host[1 : len(host)-1]
		}
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, refusedFor(ReasonMalformed, "%s has no valid port", strconv.QuoteToASCII(hp))
	}
	return host, port, nil
}

// dialAny dials the checked addresses in order.
func (p *Proxy) dialAny(ctx context.Context, addrs []netip.Addr, port int) (net.Conn, string, error) {
	ctx, cancel := context.WithTimeout(ctx, p.o.DialTimeout)
	defer cancel()
	var errs []error
	for _, ip := range addrs {
		addr := netip.AddrPortFrom(ip, uint16(port)).String()
		c, err := p.o.Dial(ctx, "tcp", addr)
		if err == nil {
			return c, addr, nil
		}
		errs = append(errs, err)
	}
	return nil, "", fmt.Errorf("egress: dial: %w", errors.Join(errs...))
}

// counted counts a destination connection's bytes into the attempt and the
// proxy, and cuts it past the byte cap.
type counted struct {
	net.Conn
	p *Proxy
	a *attempt
}

func (c *counted) over() bool { return c.p.up.Load()+c.p.down.Load() > c.p.o.MaxBytes }

func (c *counted) capErr() error {
	err := fmt.Errorf("%w: this request's egress passed %d bytes (egress.Options.MaxBytes)", ErrCapped, c.p.o.MaxBytes)
	c.a.fail(err)
	_ = c.Close()
	return err
}

func (c *counted) Read(b []byte) (int, error) {
	if c.over() {
		return 0, c.capErr()
	}
	n, err := c.Conn.Read(b)
	c.a.down.Add(int64(n))
	c.p.down.Add(int64(n))
	return n, err
}

func (c *counted) Write(b []byte) (int, error) {
	if c.over() {
		return 0, c.capErr()
	}
	// Counted before the write: the transport writes from its own
	// goroutine and the answer may be read and logged before this one runs
	// again; what was not written is taken back.
	c.a.up.Add(int64(len(b)))
	c.p.up.Add(int64(len(b)))
	n, err := c.Conn.Write(b)
	if n < len(b) {
		c.a.up.Add(int64(n - len(b)))
		c.p.up.Add(int64(n - len(b)))
	}
	return n, err
}

func (c *counted) CloseWrite() error {
	if hc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return hc.CloseWrite()
	}
	return nil
}

// track registers a tunnel's connections so Close cuts them; false when the
// proxy is closed already.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.tunnels[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.tunnels, c)
	}
}

// tunnel answers CONNECT: dial, 200, then relay bytes both ways.
func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request, a *attempt, addrs []netip.Addr) {
	up, addr, err := p.dialAny(r.Context(), addrs, a.port)
	if err != nil {
		a.fail(err)
		a.status = http.StatusBadGateway
		http.Error(w, "agentbox egress proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	a.setAddr(addr)
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = up.Close()
		a.fail(fmt.Errorf("egress: hijack: %w", err))
		return
	}
	client = unwrapClient(client)
	a.status = http.StatusOK
	cu := &counted{Conn: up, p: p, a: a}
	if !p.track(client, up) {
		_ = client.Close()
		_ = up.Close()
		a.fail(errors.New("egress: proxy closed"))
		return
	}
	defer p.untrack(client, up)
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		_ = client.Close()
		_ = up.Close()
		a.fail(err)
		return
	}
	// Bytes the client sent after its CONNECT head are in brw's buffer.
	var fromClient io.Reader = client
	if n := brw.Reader.Buffered(); n > 0 {
		fromClient = io.MultiReader(io.LimitReader(brw.Reader, int64(n)), client)
	}
	relay(client, fromClient, cu)
}

// relay copies client→up and up→client until both directions ended,
// propagating half-closes, then closes both.
func relay(client net.Conn, fromClient io.Reader, up *counted) {
	var wg sync.WaitGroup
	closeWrite := func(c net.Conn) {
		if hc, ok := c.(interface{ CloseWrite() error }); ok {
			_ = hc.CloseWrite()
		}
	}
	wg.Go(func() {
		_, err := io.Copy(up, fromClient)
		if err != nil {
			_ = client.Close()
			_ = up.Close()
			return
		}
		closeWrite(up)
	})
	wg.Go(func() {
		_, err := io.Copy(client, up)
		if err != nil {
			_ = client.Close()
			_ = up.Close()
			return
		}
		closeWrite(client)
	})
	wg.Wait()
	_ = client.Close()
	_ = up.Close()
}

// planKey carries a plain request's checked destination to dialPlanned.
type planKey struct{}

type plan struct {
	a     *attempt
	addrs []netip.Addr
	rule  Rule
}

// forward sends a plain-HTTP request on its way with hop-by-hop headers
// stripped (httputil.ReverseProxy) and the rule's credential added.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, a *attempt, rule Rule, addrs []netip.Addr) {
	ctx := context.WithValue(r.Context(), planKey{}, &plan{a: a, addrs: addrs, rule: rule})
	rec := &statusRecorder{ResponseWriter: w}
	p.plain.ServeHTTP(rec, r.WithContext(ctx))
	if a.status == 0 {
		a.status = rec.code
	}
}

// rewrite builds the outgoing request: the URL's host is the Host header,
// no forwarding headers are added, and the credential replaces any header
// of its name the agent sent.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	pr.Out.Host = ""
	pr.Out.Header.Del("Proxy-Authorization")
	pl, _ := pr.In.Context().Value(planKey{}).(*plan)
	if pl == nil || pl.rule.Credential == nil {
		return
	}
	c := pl.rule.Credential
	h := c.Header
	if h == "" {
		h = "Authorization"
	}
	pr.Out.Header.Del(h)
	if v, ok := p.o.Secret(c.Env); ok && v != "" {
		pr.Out.Header.Set(h, c.Prefix+v)
	} else {
		p.log.Warn("egress credential missing; the request goes without it", "host", pl.a.host, "env", c.Env,
			"fix", "set the environment variable "+c.Env+" for the gateway")
	}
}

// dialPlanned dials the checked addresses of the request's plan, never the
// name the transport was given.
func (p *Proxy) dialPlanned(ctx context.Context, _, _ string) (net.Conn, error) {
	pl, _ := ctx.Value(planKey{}).(*plan)
	if pl == nil {
		return nil, fmt.Errorf("%w: no checked destination", ErrRefused)
	}
	c, addr, err := p.dialAny(ctx, pl.addrs, pl.a.port)
	if err != nil {
		return nil, err
	}
	pl.a.setAddr(addr)
	return &counted{Conn: c, p: p, a: pl.a}, nil
}

func (p *Proxy) plainError(w http.ResponseWriter, r *http.Request, err error) {
	if pl, _ := r.Context().Value(planKey{}).(*plan); pl != nil {
		pl.a.fail(err)
		pl.a.status = http.StatusBadGateway
	}
	w.Header().Set("X-Agentbox-Egress", "error")
	http.Error(w, "agentbox egress proxy: "+err.Error(), http.StatusBadGateway)
}

// statusRecorder remembers the status written.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the real writer (flushes and
// the hijack of an upgraded connection).
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
