package harness

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// The steps a NegotiationProxy records for a connection, in the words of PostgreSQL's
// src/interfaces/libpq/t/005_negotiate_encryption.pl (its EVENTS), plus the client's first
// message in the clear.
const (
	NegSSLAccept   = "sslaccept"   // SSLRequest (80877103) answered 'S'
	NegSSLReject   = "sslreject"   // SSLRequest answered 'N'
	NegSSLError    = "sslerror"    // SSLRequest answered otherwise (an ErrorResponse, a closed socket)
	NegGSSAccept   = "gssaccept"   // GSSENCRequest (80877104) answered 'G'
	NegGSSReject   = "gssreject"   // GSSENCRequest answered 'N'
	NegGSSError    = "gsserror"    // GSSENCRequest answered otherwise
	NegDirectSSL   = "directssl"   // the first bytes were a TLS handshake record (direct TLS, PostgreSQL 17+)
	NegStartup     = "startup"     // a StartupMessage sent in the clear
	NegCancel      = "cancel"      // a CancelRequest
	NegUnknownOpen = "unknownopen" // a first packet of no length PostgreSQL accepts
)

// A ProxiedConn is one client connection a NegotiationProxy forwarded.
type ProxiedConn struct {
	// ServerPort is the local port of the proxy's own connection to the server, the port the
	// server's log names for it ("connection received: host=127.0.0.1 port=N"): what ties the
	// server's log lines (by the backend's pid on that line) to this connection. 0 when the
	// proxy could not reach the server.
	ServerPort int
	// Steps are what the client opened the connection with and how the server answered, in
	// order (Neg* constants): at most one SSLRequest and one GSSENCRequest, then a
	// StartupMessage, or a direct TLS handshake, or an encrypted channel ('S', 'G').
	Steps []string
	// Done reports that both directions have ended: the client's and the server's sockets
	// are closed, so that everything the server logs for the connection before it closes its
	// socket is in its log.
	Done bool
}

// NegotiationProxy is a loopback TCP proxy in front of a PostgreSQL server that records, for
// each connection, the untyped packets the client opens it with (SSLRequest, GSSENCRequest,
// a direct TLS handshake, a StartupMessage in the clear) and the server's one-byte answers,
// as PostgreSQL's 005_negotiate_encryption.pl reads them from the server's log with
// trace_connection_negotiation (PostgreSQL 17+): on PostgreSQL 15, which has no such
// setting, the proxy is where those events are seen. It changes no byte.
//
// Unlike Proxy, which counts, it keeps one ProxiedConn per connection, with the port of its
// own connection to the server, so that a test can pick the server's log lines of exactly
// its connections while other tests connect to the same server.
type NegotiationProxy struct {
	*loopbackServer
	target string

	mu    sync.Mutex
	conns []*ProxiedConn
	done  chan struct{} // signalled (non-blocking) when a connection ends
}

// NewNegotiationProxy listens on 127.0.0.1 at a free port below 32768 and forwards each
// connection it accepts to target ("host:port"). Call Close when done.
func NewNegotiationProxy(target string) (*NegotiationProxy, error) {
	srv, err := listenLoopback("negotiation proxy")
	if err != nil {
		return nil, err
	}
	p := &NegotiationProxy{loopbackServer: srv, target: target, done: make(chan struct{}, 1)}
	srv.start(p.serve)
	return p, nil
}

// NegotiationProxyT starts a NegotiationProxy for a test, fails the test if that does not
// work, and closes it when the test ends.
func NegotiationProxyT(t testing.TB, target string) *NegotiationProxy {
	t.Helper()
	p, err := NewNegotiationProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("harness: %v", err)
		}
	})
	return p
}

// Port returns the port the proxy listens on (on 127.0.0.1).
func (p *NegotiationProxy) Port() int {
	_, port := p.Addr()
	return port
}

// Conns returns a copy of the connections accepted so far, in the order they were accepted.
func (p *NegotiationProxy) Conns() []ProxiedConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]ProxiedConn, len(p.conns))
	for i, c := range p.conns {
		out[i] = ProxiedConn{ServerPort: c.ServerPort, Steps: append([]string(nil), c.Steps...), Done: c.Done}
	}
	return out
}

// WaitDone waits until every connection accepted so far has ended on both sides, or returns
// an error naming how many had not when ctx ends.
func (p *NegotiationProxy) WaitDone(ctx context.Context) error {
	for {
		open := 0
		p.mu.Lock()
		for _, c := range p.conns {
			if !c.Done {
				open++
			}
		}
		p.mu.Unlock()
		if open == 0 {
			return nil
		}
		select {
		case <-p.done:
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("harness: negotiation proxy: %d connection(s) still open: %w", open, ctx.Err())
		}
	}
}

func (p *NegotiationProxy) step(c *ProxiedConn, s string) {
	p.mu.Lock()
	c.Steps = append(c.Steps, s)
	p.mu.Unlock()
}

// serve proxies one client connection.
func (p *NegotiationProxy) serve(client net.Conn) {
	c := &ProxiedConn{}
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		c.Done = true
		p.mu.Unlock()
		select {
		case p.done <- struct{}{}:
		default:
		}
	}()
	server, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	if a, ok := server.LocalAddr().(*net.TCPAddr); ok {
		p.mu.Lock()
		c.ServerPort = a.Port
		p.mu.Unlock()
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	defer client.Close()
	if !p.negotiate(c, client, server) {
		return
	}
	// Copy both ways. A direction that ends half-closes the other side's socket, so that the
	// peer sees the end and closes in turn: the connection is done when both copies are.
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(server, client)
		closeWrite(server)
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(client, server)
		closeWrite(client)
	}()
	wg.Wait()
}

// negotiate records the client's packets until the connection leaves the unencrypted
// negotiation phase, forwarding each. It reports whether to go on copying bytes.
func (p *NegotiationProxy) negotiate(c *ProxiedConn, client, server net.Conn) bool {
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(client, hdr[:]); err != nil {
			return false
		}
		if hdr[0] == 0x16 && hdr[1] == 0x03 {
			// A TLS handshake record (RFC 8446 section 5.1: type 22, legacy version 3.x).
			p.step(c, NegDirectSSL)
			_, err := server.Write(hdr[:])
			return err == nil
		}
		length := binary.BigEndian.Uint32(hdr[:])
		if length < 8 || length > maxStartupPacket {
			p.step(c, NegUnknownOpen)
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
			if _, err := server.Write(pkt); err != nil {
				return false
			}
			var answer [1]byte
			_, err := io.ReadFull(server, answer[:])
			ssl := code == codeSSLRequest
			switch {
			case err == nil && answer[0] == 'N' && ssl:
				p.step(c, NegSSLReject)
			case err == nil && answer[0] == 'N':
				p.step(c, NegGSSReject)
			case err == nil && answer[0] == 'S' && ssl:
				p.step(c, NegSSLAccept)
			case err == nil && answer[0] == 'G' && !ssl:
				p.step(c, NegGSSAccept)
			case ssl:
				p.step(c, NegSSLError)
			default:
				p.step(c, NegGSSError)
			}
			if err != nil {
				return false
			}
			if _, err := client.Write(answer[:]); err != nil {
				return false
			}
			if answer[0] != 'N' {
				return true // encryption starts, or an error report: copy from here
			}
		case code == codeCancelRequest && length >= 16 && length <= maxCancelRequest:
			p.step(c, NegCancel)
			_, err := server.Write(pkt)
			return err == nil
		default:
			p.step(c, NegStartup)
			_, err := server.Write(pkt)
			return err == nil
		}
	}
}
