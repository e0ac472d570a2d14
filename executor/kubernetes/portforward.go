package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/agentbox/agentbox/executor"
)

// portForward is one multiplexed connection to a pod's portforward
// subresource, made on first use and made again when it broke; each
// DialPort opens a pair of streams (data, error) on it.
type portForward struct {
	mu     sync.Mutex
	conn   httpstream.Connection
	nextID int
	// reached is set once a port-forward connection was made: the pod's
	// network namespace exists, its container is starting or runs.
	reached atomic.Bool
}

// DialPort opens a connection to 127.0.0.1:port inside the pod through the
// API server (the kubelet dials the port in the pod's network namespace, so
// it works with no pod network). The connection supports deadlines; Close
// ends it both ways.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("kubernetes executor: port %d: %w", port, executor.ErrInvalid)
	}
	if s.isClosed() {
		return nil, fmt.Errorf("kubernetes executor: port-forward: sandbox closed: %w", executor.ErrNotRunning)
	}
	conn, id, err := s.pfConn(ctx)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(port))
	h.Set(corev1.PortForwardRequestIDHeader, strconv.Itoa(id))
	errStream, err := conn.CreateStream(h)
	if err != nil {
		s.dropPF(conn)
		return nil, fmt.Errorf("kubernetes executor: port-forward to %s:%d: error stream: %w", s.name, port, err)
	}
	_ = errStream.Close() // nothing to send on it
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(h)
	if err != nil {
		conn.RemoveStreams(errStream)
		s.dropPF(conn)
		return nil, fmt.Errorf("kubernetes executor: port-forward to %s:%d: data stream: %w", s.name, port, err)
	}
	user, inner := net.Pipe()
	pc := &pfConn{Conn: user, inner: inner, data: data, errs: errStream, conn: conn, broken: func() { s.dropPF(conn) }, sent: make(chan struct{})}
	go pc.pump()
	return pc, nil
}

// pfConn is the caller's end of a net.Pipe whose other end is copied to and
// from the pod's data stream; the pipe gives deadlines the stream lacks.
type pfConn struct {
	net.Conn
	inner      net.Conn
	data, errs httpstream.Stream
	conn       httpstream.Connection
	broken     func()        // drops conn: the kubelet reported an error on it
	sent       chan struct{} // closed when the copy to the pod ended, its last bytes on the stream
	once       sync.Once
	mu         sync.Mutex
	remoteErr  error
}

func (c *pfConn) pump() {
	errDone := make(chan struct{})
	go func() {
		defer close(errDone)
		msg, _ := io.ReadAll(c.errs)
		if len(msg) > 0 {
			c.mu.Lock()
			c.remoteErr = errors.New(string(msg))
			c.mu.Unlock()
			_ = c.Close()
			// After an error (nothing listened on the port) the
			// multiplexed connection stops taking new streams a few
			// streams later (seen with containerd 1.6 behind the API
			// server's WebSocket tunnel; kubectl port-forward closes its
			// connection on any error too): the next DialPort dials anew.
			// Streams still open on it end with it.
			c.broken()
		}
	}()
	go func() {
		defer close(c.sent)
		_, _ = io.Copy(c.data, c.inner)
		_ = c.data.Close() // half-close: the pod's side sees EOF
	}()
	_, _ = io.Copy(c.inner, c.data)
	// The kubelet reports a failed dial on the error stream as the data
	// stream ends: learn it (and drop a broken connection) before the
	// caller sees EOF and dials again.
	select {
	case <-errDone:
	case <-time.After(pfErrorWait):
	}
	_ = c.inner.Close()
}

// pfErrorWait bounds how long an ended data stream waits for its error
// stream.
const pfErrorWait = 2 * time.Second

// pfCloseWait bounds how long a closed connection waits for the bytes the
// caller wrote before Close to reach the stream (a pod that stopped
// reading).
const pfCloseWait = 5 * time.Second

// Close ends the connection both ways and frees its streams, without
// waiting. What the caller wrote before Close still reaches the pod: the
// pipe hands it over before Write returns, but the copy may not have put
// it on the stream yet, and a reset stream drops it (an HTTP server that
// writes its response and closes, as the model relay's does for a client
// that asked for Connection: close, lost the response that way). So the
// stream is reset only once the copy to the pod has sent it and
// half-closed, or after pfCloseWait.
func (c *pfConn) Close() error {
	c.once.Do(func() {
		_ = c.Conn.Close() // the copy to the pod reads EOF after what it holds
		go func() {
			t := time.NewTimer(pfCloseWait)
			defer t.Stop()
			select {
			case <-c.sent:
			case <-t.C:
			}
			_ = c.inner.Close()
			_ = c.data.Reset()
			c.conn.RemoveStreams(c.data, c.errs)
		}()
	})
	return nil
}

// RemoteError is what the kubelet reported for this connection (e.g.
// nothing listens on the port), or nil.
func (c *pfConn) RemoteError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.remoteErr
}

// pfConn returns the pod's port-forward connection, dialling it when there
// is none or the last one closed.
func (s *Sandbox) pfConn(ctx context.Context) (httpstream.Connection, int, error) {
	s.pf.mu.Lock()
	defer s.pf.mu.Unlock()
	if s.pf.conn != nil {
		select {
		case <-s.pf.conn.CloseChan():
			s.pf.conn = nil
		default:
		}
	}
	if s.pf.conn == nil {
		conn, err := s.dialPF(ctx)
		if err != nil {
			return nil, 0, err
		}
		s.pf.conn = conn
		s.pf.reached.Store(true)
	}
	s.pf.nextID++
	return s.pf.conn, s.pf.nextID, nil
}

func (s *Sandbox) dropPF(conn httpstream.Connection) {
	s.pf.mu.Lock()
	if s.pf.conn == conn {
		s.pf.conn = nil
	}
	s.pf.mu.Unlock()
	_ = conn.Close()
}

// closePF closes the port-forward connection (Sandbox.Close).
func (s *Sandbox) closePF() {
	s.pf.mu.Lock()
	conn := s.pf.conn
	s.pf.conn = nil
	s.pf.mu.Unlock()
	if conn != nil {
		_ = conn.Close()
	}
}

// dialPF dials the portforward subresource: WebSocket tunnelling where the
// API server offers it, else SPDY.
func (s *Sandbox) dialPF(ctx context.Context) (httpstream.Connection, error) {
	e := s.e
	u := e.cs.CoreV1().RESTClient().Post().Namespace(e.o.Namespace).Resource("pods").Name(s.name).SubResource("portforward").URL()
	rt, upgrader, err := spdy.RoundTripperFor(e.cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes executor: port-forward: %w", err)
	}
	d := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	if ws, err := portforward.NewSPDYOverWebsocketDialer(u, e.cfg); err == nil {
		d = portforward.NewFallbackDialer(ws, d, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
	}
	type result struct {
		c   httpstream.Connection
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, proto, err := d.Dial(portforward.PortForwardProtocolV1Name)
		if err == nil && proto != portforward.PortForwardProtocolV1Name {
			_ = c.Close()
			err = fmt.Errorf("the API server speaks %q, not %q", proto, portforward.PortForwardProtocolV1Name)
		}
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, s.streamError(ctx, "port-forward", r.err)
		}
		return r.c, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.c != nil {
				_ = r.c.Close()
			}
		}()
		return nil, fmt.Errorf("kubernetes executor: port-forward to %s: %w", s.name, context.Cause(ctx))
	}
}
