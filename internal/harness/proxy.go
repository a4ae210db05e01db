package harness

import (
	"encoding/binary"
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
	DirectTLS       int // connections that opened with a TLS record (direct TLS, PostgreSQL 17+)
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
	*loopbackServer        // Addr, Close
	target          string // guarded by mu

	mu    sync.Mutex
	stats ProxyStats
}

// NewProxy listens on 127.0.0.1 at a free port and forwards each connection
// it accepts to target ("host:port"). Call Close when done.
func NewProxy(target string) (*Proxy, error) {
	srv, err := listenLoopback("proxy")
	if err != nil {
		return nil, err
	}
	p := &Proxy{loopbackServer: srv, target: target}
	srv.start(p.serve)
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

// Stats returns a snapshot of the counters. Every packet is counted before it
// is forwarded, so the counts include everything a client's completed (or
// refused) connection attempt sent.
func (p *Proxy) Stats() ProxyStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

func (p *Proxy) count(f func(*ProxyStats)) {
	p.mu.Lock()
	f(&p.stats)
	p.mu.Unlock()
}

// SetTarget makes the connections accepted from now on go to target ("host:port"): a server
// replaced behind a stable address (a pooler put in front, a failover). Connections already
// proxied stay where they are.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// serve proxies one client connection.
func (p *Proxy) serve(client net.Conn) {
	var target string
	p.count(func(s *ProxyStats) { s.Connections++; target = p.target })
	server, err := net.DialTimeout("tcp", target, 10*time.Second)
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
		if hdr[0] == 0x16 && hdr[1] == 0x03 {
			// A TLS handshake record (RFC 8446 section 5.1: type 22, legacy version 3.x) as
			// the first bytes: direct TLS.
			p.count(func(s *ProxyStats) { s.DirectTLS++ })
		}
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
