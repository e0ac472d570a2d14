package helper

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/agentbox/agentbox/executor"
)

// Reverse mode, for sandboxes that share no directory with the host (a
// Kubernetes pod reached through the API server's port forward): the host
// cannot put model.sock, egress.sock and mcp.sock where the helper dials
// them, and the helper cannot dial out. Instead the host parks connections
// in the helper: it dials the helper's exec port and sends a framePark
// naming the host socket the connection stands for. When a process in the
// sandbox connects to the relay of that name (the model or egress port, or
// mcp.sock, which the helper itself listens on in reverse mode), the helper
// takes a parked connection, writes a frameGo on it and relays bytes both
// ways: the host end then serves it as if the helper had dialled its
// socket. ListenReverse is the host end, a net.Listener that keeps a few
// connections parked.
const (
	framePark byte = 'P' // host→helper: JSON parkRequest, then wait
	frameGo   byte = 'G' // helper→host on a parked connection: relaying from now
)

// parkRequest names the host socket a parked connection stands for.
type parkRequest struct {
	Name string `json:"name"`
}

// reverseNames are the host sockets a connection may be parked for.
var reverseNames = []string{ModelSocket, EgressSocket, MCPSocket}

// parkedPerName caps the connections parked for one name; more are closed.
const parkedPerName = 16

// reverseWait bounds how long a relayed connection waits for a parked
// host connection when none is parked.
const reverseWait = 10 * time.Second

// parking holds the parked host connections of a reverse-mode helper.
type parking struct {
	mu    sync.Mutex
	conns map[string][]*parkedConn
	added chan struct{} // closed and replaced when a connection is parked
}

// parkedConn is a parked host connection and its watcher, which peeks at
// it while it waits: the host sends nothing before frameGo, so whatever
// the peek returns (end of stream, an error, bytes) means the host's end
// is gone or broken, and the connection leaves the pool at once. Without
// it, a route the host closed (the previous turn's, in a kept pod) would
// leave connections that take hands out dead.
type parkedConn struct {
	c       *bufferedConn
	watched chan struct{} // closed when the watcher's peek returned
	err     error         // the peek's error, read after watched
	taken   bool          // under parking.mu: take owns it
}

func newParking() *parking {
	return &parking{conns: map[string][]*parkedConn{}, added: make(chan struct{})}
}

// park keeps c for name; it reports false (c is to be closed) for an
// unknown name or a full pool.
func (p *parking) park(name string, c *bufferedConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !slices.Contains(reverseNames, name) || len(p.conns[name]) >= parkedPerName {
		return false
	}
	pc := &parkedConn{c: c, watched: make(chan struct{})}
	p.conns[name] = append(p.conns[name], pc)
	close(p.added)
	p.added = make(chan struct{})
	go p.watch(name, pc)
	return true
}

// watch peeks at a parked connection until take stops it (a read deadline
// in the past) or the host's end ends it, which drops it from the pool.
func (p *parking) watch(name string, pc *parkedConn) {
	_, pc.err = pc.c.r.Peek(1)
	p.mu.Lock()
	taken := pc.taken
	if !taken {
		p.conns[name] = slices.DeleteFunc(p.conns[name], func(q *parkedConn) bool { return q == pc })
	}
	p.mu.Unlock()
	close(pc.watched)
	if !taken {
		_ = pc.c.Close()
	}
}

// take returns a parked connection for name, waiting up to reverseWait for
// one, already told to relay (frameGo written).
func (p *parking) take(ctx context.Context, name string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, reverseWait)
	defer cancel()
	for {
		p.mu.Lock()
		var pc *parkedConn
		if q := p.conns[name]; len(q) > 0 {
			pc, p.conns[name] = q[0], q[1:]
			pc.taken = true
		}
		added := p.added
		p.mu.Unlock()
		if pc != nil {
			// Stop the watcher; a peek that ended for another reason than
			// the deadline found the host's end gone.
			c := pc.c
			_ = c.SetReadDeadline(time.Now())
			<-pc.watched
			_ = c.SetReadDeadline(time.Time{})
			if !errors.Is(pc.err, os.ErrDeadlineExceeded) {
				_ = c.Close()
				continue
			}
			_ = c.SetWriteDeadline(time.Now().Add(dialTimeout))
			err := writeFrame(c, frameGo, nil)
			_ = c.SetWriteDeadline(time.Time{})
			if err == nil {
				return c, nil
			}
			_ = c.Close() // the host went away; try the next one
			continue
		}
		select {
		case <-added:
		case <-ctx.Done():
			return nil, fmt.Errorf("no host connection parked for %s within %v: %w", name, reverseWait, ctx.Err())
		}
	}
}

// closeAll closes every parked connection (the helper is stopping).
func (p *parking) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, q := range p.conns {
		for _, pc := range q {
			_ = pc.c.Close()
		}
		delete(p.conns, name)
	}
}

// ListenReverse returns the host end of a reverse-mode helper's relay for
// the host socket name (ModelSocket, EgressSocket, MCPSocket): it keeps
// idle connections parked through dial (a port forward to the helper's
// exec port) and Accept returns each once the helper relays a connection
// from inside the sandbox on it. Parking is retried with a backoff while
// the helper cannot be reached; Close stops it and closes what is parked.
func ListenReverse(dial func(context.Context) (net.Conn, error), name string, idle int) (net.Listener, error) {
	if !slices.Contains(reverseNames, name) {
		return nil, fmt.Errorf("helper: reverse listener for %q: not a host socket (%v): %w", name, reverseNames, executor.ErrInvalid)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &reverseListener{name: name, dial: dial, ctx: ctx, cancel: cancel, accepted: make(chan net.Conn)}
	for range max(idle, 1) {
		l.wg.Go(l.keepParked)
	}
	return l, nil
}

type reverseListener struct {
	name     string
	dial     func(context.Context) (net.Conn, error)
	ctx      context.Context
	cancel   context.CancelFunc
	accepted chan net.Conn
	wg       sync.WaitGroup
}

// keepParked parks one connection at a time until the listener closes.
func (l *reverseListener) keepParked() {
	backoff := 10 * time.Millisecond
	for l.ctx.Err() == nil {
		c, err := l.parkOne()
		if err != nil {
			t := time.NewTimer(backoff)
			select {
			case <-l.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(backoff*2, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		select {
		case l.accepted <- c:
		case <-l.ctx.Done():
			_ = c.Close()
			return
		}
	}
}

// parkOne parks a connection and waits until the helper relays on it.
// Closing the listener closes a connection still parked, whenever it was
// dialled.
func (l *reverseListener) parkOne() (net.Conn, error) {
	dctx, cancel := context.WithTimeout(l.ctx, dialTimeout)
	c, err := l.dial(dctx)
	cancel()
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(l.ctx, func() { _ = c.Close() })
	b, _ := json.Marshal(parkRequest{Name: l.name})
	br := bufio.NewReaderSize(c, 64)
	err = writeFrame(c, framePark, b)
	if err == nil {
		fr := &frameReader{r: br}
		var typ byte
		typ, _, err = fr.next()
		fr.release()
		if err == nil && typ != frameGo {
			err = fmt.Errorf("helper: unexpected frame %q on a parked connection", typ)
		}
	}
	if !stop() && err == nil {
		err = net.ErrClosed // the listener closed as the go frame came
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	if br.Buffered() > 0 {
		// Bytes the sandbox sent right after the go frame.
		return &bufferedConn{Conn: c, r: br}, nil
	}
	return c, nil
}

// bufferedConn reads what a bufio.Reader already holds first.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite half-closes when the connection can, else closes it.
func (c *bufferedConn) CloseWrite() error {
	if hc, ok := c.Conn.(halfCloser); ok {
		return hc.CloseWrite()
	}
	return c.Close()
}

// Accept returns the next connection the helper relays.
func (l *reverseListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.accepted:
		return c, nil
	case <-l.ctx.Done():
		return nil, net.ErrClosed
	}
}

// Close stops parking and closes the connections still parked.
func (l *reverseListener) Close() error {
	l.cancel()
	l.wg.Wait()
	return nil
}

// Addr names the relay.
func (l *reverseListener) Addr() net.Addr { return reverseAddr(l.name) }

type reverseAddr string

func (a reverseAddr) Network() string { return "agentbox-reverse" }
func (a reverseAddr) String() string  { return string(a) }

// ListenSandbox listens for sb's helper on the host socket name: in the
// sandbox's host directory (ListenHostSocket, owned by uid:gid), or, for a
// sandbox without one, through its executor (executor.HostListener, e.g.
// the Kubernetes backend's reverse relay).
func ListenSandbox(ctx context.Context, sb executor.Sandbox, name string, uid, gid int) (net.Listener, error) {
	if dir := sb.HostDir(); dir != "" {
		return ListenHostSocket(dir, name, uid, gid)
	}
	if hl, ok := sb.(executor.HostListener); ok {
		return hl.ListenHost(ctx, name)
	}
	return nil, fmt.Errorf("helper: sandbox %s has neither a host directory nor a host listener for %s: %w", sb.ID(), name, errors.ErrUnsupported)
}
