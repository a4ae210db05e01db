package harness

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// loopbackServer is what the harness's in-process servers (Proxy, FakeServer) share: a
// listener on 127.0.0.1 at a free port, one goroutine per accepted connection, and a Close
// that closes every open connection and waits for those goroutines.
type loopbackServer struct {
	name string // in errors: "proxy", "fake server"
	ln   net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool

	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// listenLoopback listens on 127.0.0.1 at a free port. Nothing is accepted before start.
func listenLoopback(name string) (*loopbackServer, error) {
	ln, err := listenLow()
	if err != nil {
		return nil, fmt.Errorf("harness: %s: %w", name, err)
	}
	return &loopbackServer{name: name, ln: ln, conns: map[net.Conn]struct{}{}}, nil
}

// start calls handle, in a goroutine of its own, for each connection accepted from now on;
// the connection is closed when handle returns.
func (s *loopbackServer) start(handle func(net.Conn)) {
	s.wg.Add(1)
	go s.acceptLoop(handle)
}

// Addr returns the host and port clients should connect to.
func (s *loopbackServer) Addr() (host string, port int) {
	a := s.ln.Addr().(*net.TCPAddr)
	return a.IP.String(), a.Port
}

// Close stops accepting, closes every open connection and waits for the server's goroutines
// to finish. It is safe to call more than once.
func (s *loopbackServer) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		for c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		if err := s.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			s.closeErr = fmt.Errorf("harness: %s: %w", s.name, err)
		}
		s.wg.Wait()
	})
	return s.closeErr
}

// track registers c so that Close can close it; it reports false (and closes c) when the
// server is already closed.
func (s *loopbackServer) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.Close()
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *loopbackServer) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	_ = c.Close()
}

func (s *loopbackServer) acceptLoop(handle func(net.Conn)) {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// Temporary trouble such as running out of file descriptors: back off briefly
			// rather than spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if !s.track(c) {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.untrack(c)
			handle(c)
		}()
	}
}
