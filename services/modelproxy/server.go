package modelproxy

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// socketServer is the HTTP server of a handler on a sandbox's model socket
// (a Proxy's or a WarmUp's): serve and close may come in either order, and
// close may come more than once.
type socketServer struct {
	mu     sync.Mutex
	srv    *http.Server
	closed bool
}

// serve answers h on ln until close. It returns nil after close.
func (s *socketServer) serve(ln net.Listener, h http.Handler) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("modelproxy: serve after close")
	}
	// "OPTIONS *" would otherwise be answered by net/http itself.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second, DisableGeneralOptionsHandler: true}
	s.srv = srv
	s.mu.Unlock()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// close stops serving and cuts calls in flight.
func (s *socketServer) close() error {
	s.mu.Lock()
	s.closed = true
	srv := s.srv
	s.mu.Unlock()
	if srv != nil {
		return srv.Close()
	}
	return nil
}
