package harness

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Request codes of the PostgreSQL protocol's untyped first packets.
const (
	codeCancelRequest = 80877102
	codeSSLRequest    = 80877103
	codeGSSENCRequest = 80877104
	// maxStartupPacket mirrors the server's limit on a startup packet.
	maxStartupPacket = 10000
	// maxCancelRequest: protocol 3.0 cancel keys are 4 bytes (16-byte
	// packet); protocol 3.2 (PostgreSQL 18) allows keys of up to 256 bytes.
	maxCancelRequest = 12 + 256
)

// ProxyStats counts what clients sent through a Proxy, as seen before any TLS
// or GSSAPI encryption starts.
type ProxyStats struct {
	Connections     int // TCP connections accepted
	SSLRequests     int // SSLRequest packets
	GSSENCRequests  int // GSSENCRequest packets
	StartupMessages int // startup packets (protocol 3.x) sent in the clear
	CancelRequests  int // CancelRequest packets
}

// Proxy is a loopback TCP proxy that forwards every accepted connection to a
// target address and counts the PostgreSQL packets clients open them with.
//
// For each connection it reads the client's first packet: an SSLRequest,
// GSSENCRequest, CancelRequest or otherwise a StartupMessage. When the server
// answers an SSLRequest or GSSENCRequest with 'N', the client may go on in
// the clear on the same socket, so the next packet is classified too. From a
// StartupMessage, a CancelRequest, or a server's 'S' or 'G' on, the proxy only
// copies bytes. A first packet with an impossible length (for example a TLS
// ClientHello sent directly) is counted as a connection only.
type Proxy struct {
	target string
	ln     net.Listener

	mu     sync.Mutex
	stats  ProxyStats
	conns  map[net.Conn]struct{}
	closed bool

	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// NewProxy listens on 127.0.0.1 at a free port and forwards each connection
// it accepts to target ("host:port"). Call Close when done.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("harness: proxy: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// ProxyT starts a Proxy for a test, fails the test if that does not work, and
// closes the proxy when the test ends.
func ProxyT(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := NewProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("harness: proxy: %v", err)
		}
	})
	return p
}

// Addr returns the host and port clients should connect to.
func (p *Proxy) Addr() (host string, port int) {
	a := p.ln.Addr().(*net.TCPAddr)
	return a.IP.String(), a.Port
}

// Stats returns a snapshot of the counters. Every packet is counted before it
// is forwarded, so the counts include everything a client's completed (or
// refused) connection attempt sent.
func (p *Proxy) Stats() ProxyStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Close stops accepting, closes every proxied connection and waits for the
// proxy's goroutines to finish. It is safe to call more than once.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		for c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		if err := p.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			p.closeErr = fmt.Errorf("harness: proxy: %w", err)
		}
		p.wg.Wait()
	})
	return p.closeErr
}

func (p *Proxy) count(f func(*ProxyStats)) {
	p.mu.Lock()
	f(&p.stats)
	p.mu.Unlock()
}

// track registers c so that Close can close it; it reports false (and closes
// c) when the proxy is already closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// Temporary trouble such as running out of file descriptors:
			// back off briefly rather than spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.count(func(s *ProxyStats) { s.Connections++ })
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			p.serve(c)
		}()
	}
}

// serve proxies one client connection.
func (p *Proxy) serve(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)

	if !p.negotiate(client, server) {
		return
	}
	// Copy both ways; when either direction ends, close both sockets so the
	// other copy ends too.
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			_ = client.Close()
			_ = server.Close()
		})
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(server, client)
		closeBoth()
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(client, server)
		closeBoth()
	}()
	wg.Wait()
}

// negotiate classifies the client's packets until the connection leaves the
// unencrypted negotiation phase. It reports whether to go on copying bytes.
func (p *Proxy) negotiate(client, server net.Conn) bool {
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(client, hdr[:]); err != nil {
			return false
		}
		length := binary.BigEndian.Uint32(hdr[:])
		if length < 8 || length > maxStartupPacket {
			// Not a PostgreSQL negotiation packet: pass it on untouched.
			_, err := server.Write(hdr[:])
			return err == nil
		}
		pkt := make([]byte, length)
		copy(pkt, hdr[:])
		if _, err := io.ReadFull(client, pkt[4:]); err != nil {
			return false
		}
		code := binary.BigEndian.Uint32(pkt[4:8])
		switch {
		case length == 8 && (code == codeSSLRequest || code == codeGSSENCRequest):
			if code == codeSSLRequest {
				p.count(func(s *ProxyStats) { s.SSLRequests++ })
			} else {
				p.count(func(s *ProxyStats) { s.GSSENCRequests++ })
			}
			if _, err := server.Write(pkt); err != nil {
				return false
			}
			var answer [1]byte
			if _, err := io.ReadFull(server, answer[:]); err != nil {
				return false
			}
			if _, err := client.Write(answer[:]); err != nil {
				return false
			}
			if answer[0] != 'N' {
				// 'S' or 'G': encryption starts (anything else is an error
				// report from the server). Either way, just copy from here.
				return true
			}
			// 'N': the client may continue in the clear on this socket.
		case code == codeCancelRequest && length >= 16 && length <= maxCancelRequest:
			p.count(func(s *ProxyStats) { s.CancelRequests++ })
			_, err := server.Write(pkt)
			return err == nil
		default:
			p.count(func(s *ProxyStats) { s.StartupMessages++ })
			_, err := server.Write(pkt)
			return err == nil
		}
	}
}
