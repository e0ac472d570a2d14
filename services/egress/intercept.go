package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// intercept answers a CONNECT to a host whose rule carries a credential
// when the proxy has a CA: it terminates the sandbox's TLS with a
// certificate for the host signed by the CA, then forwards each request
// inside as an absolute-form https:// request to the tunnel's host (never
// another: the authority is the CONNECT's, whatever the Host header says),
// over the proxy's own verified TLS, with the credential set. Each inner
// request counts as a connection toward MaxConnections and is logged on
// its own line; the CONNECT's line says how the tunnel ended.
func (p *Proxy) intercept(w http.ResponseWriter, r *http.Request, a *attempt, rule Rule, addrs []netip.Addr) {
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		a.fail(fmt.Errorf("egress: hijack: %w", err))
		return
	}
	client = unwrapClient(client)
	if !p.track(client) {
		_ = client.Close()
		a.fail(errors.New("egress: proxy closed"))
		return
	}
	defer p.untrack(client)
	defer func() { _ = client.Close() }()
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		a.fail(err)
		return
	}
	a.status = http.StatusOK
	raw := client
	if n := brw.Reader.Buffered(); n > 0 {
		raw = &prefixed{Conn: client, r: io.MultiReader(io.LimitReader(brw.Reader, int64(n)), client)}
	}
	host := a.host
	tc := tls.Server(raw, &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return p.o.CA.leaf(host) },
		NextProtos:     []string{"http/1.1"},
		MinVersion:     tls.VersionTLS12,
	})
	ctx, cancel := context.WithTimeout(r.Context(), p.o.DialTimeout)
	err = tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		a.fail(fmt.Errorf("egress: TLS with the sandbox for %s failed (its client must trust the gateway's egress CA, $HOME/%s): %w", host, CACertFile, err))
		return
	}
	authority := net.JoinHostPort(host, strconv.Itoa(a.port))
	srv := p.server(http.HandlerFunc(func(iw http.ResponseWriter, ir *http.Request) {
		served(ir)
		ia := &attempt{method: ir.Method, host: host, port: a.port, rule: a.rule, start: time.Now()}
		defer p.logAttempt(ia)
		err := p.countConnection()
		if err == nil && (ir.Method == http.MethodConnect || ir.Method == "PRI") {
			// A tunnel in the tunnel, or HTTP/2's preface (the
			// handshake offered http/1.1 only): neither is a request
			// to forward.
			p.conns.Add(-1)
			err = refusedFor(ReasonNotProxy, "%s inside the tunnel to %s; send the requests themselves (HTTP/1.1)", ir.Method, authority)
		}
		if err != nil {
			ia.fail(err)
			p.refuse(iw, ia, err)
			return
		}
		ir.URL.Scheme, ir.URL.Host, ir.Host = "https", authority, authority
		ictx, stop := context.WithCancel(context.WithoutCancel(ir.Context()))
		defer stop()
		defer context.AfterFunc(p.ctx, stop)()
		p.forward(iw, ir.WithContext(ictx), ia, rule, addrs)
	}))
	ln := newOneConn(newClientConn(tc))
	p.watch(srv, p.log.With("host", host, "port", a.port, "in_tunnel", true), func() { _ = ln.Close() })
	_ = srv.Serve(ln)
}

// prefixed is a connection whose first bytes were read already.
type prefixed struct {
	net.Conn
	r io.Reader
}

func (c *prefixed) Read(b []byte) (int, error) { return c.r.Read(b) }

// oneConn is a listener that accepts one connection, then blocks until
// it is closed.
type oneConn struct {
	c    net.Conn
	once sync.Once
	mu   sync.Mutex
	done chan struct{}
	took bool
}

func newOneConn(c net.Conn) *oneConn { return &oneConn{c: c, done: make(chan struct{})} }

func (l *oneConn) Accept() (net.Conn, error) {
	l.mu.Lock()
	if !l.took {
		l.took = true
		l.mu.Unlock()
		return l.c, nil
	}
	l.mu.Unlock()
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *oneConn) Addr() net.Addr { return l.c.LocalAddr() }
