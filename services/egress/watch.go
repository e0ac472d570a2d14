package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Bounds of the proxy's HTTP servers (the proxy's own and each
// intercepted tunnel's).
const (
	// DefaultHeaderTimeout bounds reading one request head.
	DefaultHeaderTimeout = 30 * time.Second
	// maxHeaderBytes bounds a request head: a proxy request needs a
	// request line and a few headers, and each connection being read may
	// hold this much.
	maxHeaderBytes = 64 << 10
	// idleTimeout closes a keep-alive connection with no next request.
	idleTimeout = time.Minute
	// clientsPerSlot times MaxConcurrent is the cap on client connections
	// the proxy reads at once (tunnels not counted: they hold a slot).
	clientsPerSlot = 4
	// maxRecorded is what a clientConn keeps of a request head, to say
	// what net/http refused.
	maxRecorded = 4 << 10
	// maxWroteRecorded is what it keeps of net/http's own answer.
	maxWroteRecorded = 256
	// maxLogged bounds the agent's bytes quoted in a log line.
	maxLogged = 200
)

// clientConn is a client connection of one of the proxy's HTTP servers
// as net/http reads it. net/http answers some requests itself, before
// any handler runs (a head it cannot parse, too large, an unknown
// transfer coding or expectation, a head that never completes), so the
// handler cannot log them. Between requests, from accept or the end of
// the last response until the handler receives the next request, a
// clientConn keeps the first bytes read and the first bytes written: if
// the connection closes in that span after bytes came in, net/http turned
// the request down (or the client gave up on it), and watch logs and
// counts that one attempt. Outside that span it only passes bytes on.
type clientConn struct {
	net.Conn
	between atomic.Bool // read and written bytes are recorded

	mu      sync.Mutex
	head    []byte // the first maxRecorded bytes read between requests
	read    int64  // bytes read between requests
	wrote   []byte // the start of what net/http wrote between requests
	readErr error  // the last read error between requests
	served  int    // requests the handler received
	done    bool   // closed or hijacked: counted out of the open clients
}

func newClientConn(c net.Conn) *clientConn {
	cc := &clientConn{Conn: c}
	cc.between.Store(true)
	return cc
}

func (c *clientConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.between.Load() {
		c.mu.Lock()
		if c.between.Load() {
			c.read += int64(n)
			if room := maxRecorded - len(c.head); room > 0 {
				c.head = append(c.head, b[:min(n, room)]...)
			}
			if err != nil {
				c.readErr = err
			}
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *clientConn) Write(b []byte) (int, error) {
	if c.between.Load() {
		c.mu.Lock()
		if c.between.Load() && c.wrote == nil {
			c.wrote = bytes.Clone(b[:min(len(b), maxWroteRecorded)])
		}
		c.mu.Unlock()
	}
	return c.Conn.Write(b)
}

// serve records that the handler received a request: what was recorded
// was that request.
func (c *clientConn) serve() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.between.Store(false)
	c.served++
	c.head, c.read, c.wrote, c.readErr = c.head[:0], 0, nil, nil
}

// idle records that the response is out: what comes is the next request.
func (c *clientConn) idle() { c.between.Store(true) }

// end marks the connection closed or hijacked, once; false the second
// time.
func (c *clientConn) end() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return false
	}
	c.done = true
	c.between.Store(false)
	return true
}

// unserved describes the request net/http turned down on c without the
// handler, or ok false when there was none: the connection closed between
// requests with nothing read (a client done with it), or idle after
// requests it served.
func (c *clientConn) unserved() (u unservedRequest, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.between.Load() {
		return u, false // the handler had the request
	}
	timedOut := isTimeout(c.readErr)
	u = unservedRequest{line: firstLine(c.head), bytes: c.read}
	switch {
	case len(c.wrote) > 0:
		u.status, u.detail = parseStatus(c.wrote)
		u.reason = reasonOfStatus(u.status)
		if u.status != http.StatusBadRequest || u.detail != "Bad Request" {
			break
		}
		// net/http says no more than that, for a head that ran out of
		// time or bytes too; else the same parser on the recorded head
		// says what it found.
		switch {
		case timedOut:
			u.reason, u.detail = ReasonTimeout, fmt.Sprintf("the request head was not complete within the header timeout after %d bytes", c.read)
		case c.readErr != nil:
			u.reason, u.detail = ReasonIncomplete, fmt.Sprintf("the client stopped sending inside a request head after %d bytes", c.read)
		default:
			if why := reparse(c.head); why != "" {
				u.detail += ": " + why
			}
		}
	case c.read > 0 && timedOut:
		u.reason, u.detail = ReasonTimeout, fmt.Sprintf("the request head was not complete within the header timeout after %d bytes", c.read)
	case c.read > 0:
		u.reason, u.detail = ReasonIncomplete, fmt.Sprintf("the client closed the connection inside a request head after %d bytes", c.read)
	case c.served == 0 && timedOut:
		u.reason, u.detail = ReasonTimeout, "no request within the header timeout"
	default:
		return u, false
	}
	return u, true
}

// unservedRequest is what a clientConn saw of a request net/http turned
// down.
type unservedRequest struct {
	reason Reason
	status int    // what net/http answered; 0 when it hung up
	detail string // why, in net/http's or the proxy's words
	line   string // the request line, as far as it came
	bytes  int64
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// firstLine is the first line of head, bounded and quoted: it is the
// agent's bytes.
func firstLine(head []byte) string {
	if i := bytes.IndexByte(head, '\n'); i >= 0 {
		head = head[:i]
	}
	head = bytes.TrimSuffix(head, []byte("\r"))
	if len(head) > maxLogged {
		return strconv.QuoteToASCII(string(head[:maxLogged])) + "..."
	}
	return strconv.QuoteToASCII(string(head))
}

// parseStatus reads the status code and text of the response net/http
// wrote on its own ("HTTP/1.1 400 Bad Request: malformed Host header").
func parseStatus(wrote []byte) (int, string) {
	line, _, _ := bytes.Cut(wrote, []byte("\r\n"))
	_, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok || len(rest) < 3 {
		return 0, strconv.QuoteToASCII(string(line))
	}
	code, err := strconv.Atoi(string(rest[:3]))
	if err != nil {
		return 0, strconv.QuoteToASCII(string(line))
	}
	return code, strings.TrimSpace(string(rest[3:]))
}

// reasonOfStatus maps the statuses net/http answers on its own.
func reasonOfStatus(code int) Reason {
	switch code {
	case http.StatusRequestHeaderFieldsTooLarge:
		return ReasonHeaderTooLarge
	case http.StatusNotImplemented, http.StatusHTTPVersionNotSupported, http.StatusExpectationFailed:
		return ReasonUnsupported
	}
	return ReasonMalformed
}

// reparse runs net/http's request parser on a recorded head and returns
// its error, or "" when the head is not all there or parses.
func reparse(head []byte) string {
	if !bytes.Contains(head, []byte("\n\r\n")) && !bytes.Contains(head, []byte("\n\n")) {
		return ""
	}
	_, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err == nil || errors.Is(err, io.ErrUnexpectedEOF) {
		return ""
	}
	s := err.Error()
	if len(s) > maxLogged {
		s = s[:maxLogged] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}

// clientConnKey carries a request's clientConn in its context.
type clientConnKey struct{}

// served tells r's clientConn, if any, that the handler received r.
func served(r *http.Request) {
	if c, _ := r.Context().Value(clientConnKey{}).(*clientConn); c != nil {
		c.serve()
	}
}

// unwrapClient is the connection under a hijacked clientConn: a tunnel's
// bytes need no watching.
func unwrapClient(c net.Conn) net.Conn {
	if cc, ok := c.(*clientConn); ok {
		return cc.Conn
	}
	return c
}

// watch sets srv up for clientConns (those its listener hands out): the
// handler marks each request it receives (served), and when a connection
// closes with a request net/http turned down on its own, log gets one
// line and the refusal is counted. ended runs once per connection when
// it closes or is hijacked.
func (p *Proxy) watch(srv *http.Server, log hclog.Logger, ended func()) {
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if cc, ok := c.(*clientConn); ok {
			return context.WithValue(ctx, clientConnKey{}, cc)
		}
		return ctx
	}
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		cc, ok := c.(*clientConn)
		if !ok {
			return
		}
		switch s {
		case http.StateIdle:
			cc.idle()
		case http.StateHijacked:
			if cc.end() && ended != nil {
				ended()
			}
		case http.StateClosed:
			u, refused := cc.unserved()
			if !cc.end() {
				return
			}
			// A head cut short by Close is the run ending, not a refusal;
			// one net/http answered was refused all the same. The line
			// goes out before ended, which lets Close return.
			if refused && (u.status != 0 || p.ctx.Err() == nil) {
				p.refuseUnserved(log, u)
			}
			if ended != nil {
				ended()
			}
		}
	}
}

// refuseUnserved logs and counts a request net/http turned down.
func (p *Proxy) refuseUnserved(log hclog.Logger, u unservedRequest) {
	p.refused.Add(1)
	p.onRefuse(u.reason)
	args := []any{"outcome", "refused", "reason", u.reason, "error", u.detail, "request_line", u.line, "bytes_read", u.bytes}
	if u.status != 0 {
		args = append(args, "status", u.status)
	}
	log.Warn("egress refused", args...)
}

// clientListener hands out clientConns and refuses connections past the
// cap on those open at once, each with a 503, a log line and a count: an
// agent opening connections it never finishes (slowloris) holds at most
// the cap, each for HeaderTimeout at most.
type clientListener struct {
	net.Listener
	p    *Proxy
	open atomic.Int64
}

func (l *clientListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.p.live.admit() {
			_ = c.Close() // the proxy is closing
			continue
		}
		if n := l.open.Add(1); n > int64(l.p.maxClients()) {
			l.open.Add(-1)
			l.p.refuseClient(c)
			l.p.live.leave()
			continue
		}
		return newClientConn(c), nil
	}
}

// ended counts a client connection out, after its hooks logged.
func (l *clientListener) ended() {
	l.open.Add(-1)
	l.p.live.leave()
}

// closeWait bounds how long Close waits for connections' hooks and
// handlers to finish once it has cut them.
const closeWait = 10 * time.Second

// live counts a proxy's connections and handlers that may still log.
type live struct {
	mu     sync.Mutex
	n      int
	closed bool
	zero   chan struct{} // closed when n reaches 0 after wait began
}

// admit counts one more connection, or returns false once wait began.
func (l *live) admit() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.n++
	return true
}

// enter counts one more handler. A handler runs on an admitted
// connection, so n is above zero already.
func (l *live) enter() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
}

// leave counts a connection or handler out.
func (l *live) leave() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n--
	if l.n == 0 && l.zero != nil {
		close(l.zero)
		l.zero = nil
	}
}

// wait refuses further connections and waits up to d for the count to
// reach zero; it returns what is still counted.
func (l *live) wait(d time.Duration) int {
	l.mu.Lock()
	l.closed = true
	if l.n == 0 {
		l.mu.Unlock()
		return 0
	}
	if l.zero == nil {
		l.zero = make(chan struct{})
	}
	zero := l.zero
	l.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-zero:
		return 0
	case <-t.C:
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.n
	}
}

func (p *Proxy) maxClients() int { return clientsPerSlot * p.o.MaxConcurrent }

// refuseClient answers a connection past the cap and closes it; the
// write runs on its own goroutine so that a client that reads nothing
// does not hold up Accept.
func (p *Proxy) refuseClient(c net.Conn) {
	msg := fmt.Sprintf("%d client connections are open already (%d×egress.Options.MaxConcurrent); close some and retry", p.maxClients(), clientsPerSlot)
	p.refused.Add(1)
	p.onRefuse(ReasonTooManyClients)
	p.log.Warn("egress refused", "outcome", "refused", "reason", ReasonTooManyClients, "status", http.StatusServiceUnavailable, "error", msg)
	go func() {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		body := "agentbox egress proxy: " + msg + "\n"
		_, _ = fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nX-Agentbox-Egress: refused\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		_ = c.Close()
	}()
}

// onRefuse reports one refusal to Options.OnRefuse.
func (p *Proxy) onRefuse(r Reason) {
	if p.o.OnRefuse != nil {
		p.o.OnRefuse(r)
	}
}
