package helper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// dialTimeout bounds a dial of a host socket from inside the container.
const dialTimeout = 5 * time.Second

// acceptRelay relays each loopback TCP connection to the host socket name
// (ModelSocket, EgressSocket), dialled per connection so a restarted host
// listener is picked up.
func (s *Server) acceptRelay(ln net.Listener, name string) error {
	host := SocketPath(s.opts.Dir, name)
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("helper: accept on the port relayed to %s: %w", name, err)
		}
		go func() {
			var up net.Conn
			var err error
			if s.opts.Reverse {
				up, err = s.parking.take(context.Background(), name)
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
				up, err = dialSock(ctx, s.opts.Dir, name)
				cancel()
			}
			if err != nil {
				s.log.Warn("host socket unreachable", "socket", host, "reverse", s.opts.Reverse, "err", err)
				_ = c.Close()
				return
			}
			relay(c, up)
		}()
	}
}

// halfCloser is a connection whose write side can be closed alone.
type halfCloser interface {
	net.Conn
	CloseWrite() error
}

// relay copies both ways until both directions ended, propagating
// half-closes, then closes both connections.
func relay(a, b net.Conn) {
	var wg sync.WaitGroup
	cp := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if hc, ok := dst.(halfCloser); ok && err == nil {
			_ = hc.CloseWrite()
		} else {
			// An error one way ends the exchange both ways.
			_ = a.Close()
			_ = b.Close()
		}
	}
	wg.Go(func() { cp(b, a) })
	wg.Go(func() { cp(a, b) })
	wg.Wait()
	_ = a.Close()
	_ = b.Close()
}
