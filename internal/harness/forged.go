package harness

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// What an attacker who answers once runs: a server that a forged DNS answer sends clients to
// (PasswordTrap), and a peer on the path that answers one SSLRequest itself (SSLStripProxy).

// PasswordTrap is a server an attacker runs at an address of their choosing (a forged DNS
// answer's): it answers SSLRequest and GSSENCRequest with 'N', so that sslmode=prefer and allow
// go on in the clear (verify-ca, verify-full and require refuse), asks each StartupMessage for a
// cleartext password (AuthenticationCleartextPassword, which libpq and pgx send unless
// require_auth or channel_binding forbids it), records the password, lets the client in
// (AuthenticationOk ... ReadyForQuery) and answers statements as FakeServer does.
type PasswordTrap struct {
	*loopbackServer // Addr, Close

	sslRequests atomic.Int64
	mu          sync.Mutex
	passwords   []string
}

// PasswordTrapT starts a PasswordTrap listening on address ("ip:port", a loopback address: the
// attacker's port must be the one of the connection string) for a test, and closes it when the
// test ends.
func PasswordTrapT(t testing.TB, address string) *PasswordTrap {
	t.Helper()
	ln, err := net.Listen("tcp", address)
	if err != nil {
		t.Fatalf("harness: password trap: %v", err)
	}
	p := &PasswordTrap{loopbackServer: &loopbackServer{name: "password trap", ln: ln, conns: map[net.Conn]struct{}{}}}
	p.start(p.serve)
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("harness: password trap: %v", err)
		}
	})
	return p
}

// Passwords returns the passwords received, in order.
func (p *PasswordTrap) Passwords() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.passwords...)
}

// SSLRequests returns the number of SSLRequests answered 'N'.
func (p *PasswordTrap) SSLRequests() int { return int(p.sslRequests.Load()) }

func (p *PasswordTrap) serve(c net.Conn) {
	c.SetDeadline(time.Now().Add(30 * time.Second))
	be := pgproto3.NewBackend(c, c)
	for {
		msg, err := be.ReceiveStartupMessage()
		if err != nil {
			return
		}
		switch msg.(type) {
		case *pgproto3.SSLRequest:
			p.sslRequests.Add(1)
			if _, err := c.Write([]byte{'N'}); err != nil {
				return
			}
		case *pgproto3.GSSEncRequest:
			if _, err := c.Write([]byte{'N'}); err != nil {
				return
			}
		case *pgproto3.StartupMessage:
			be.Send(&pgproto3.AuthenticationCleartextPassword{})
			if be.Flush() != nil || be.SetAuthType(pgproto3.AuthTypeCleartextPassword) != nil {
				return
			}
			msg, err := be.Receive()
			pw, ok := msg.(*pgproto3.PasswordMessage)
			if err != nil || !ok {
				return
			}
			p.mu.Lock()
			p.passwords = append(p.passwords, pw.Password)
			p.mu.Unlock()
			if _, err := c.Write(startupAnswer(forgedPID, []byte{0xDE, 0xAD, 0xBE, 0xEF})); err != nil {
				return
			}
			c.SetDeadline(time.Time{})
			serveQueries(be, nil)
			return
		default:
			return
		}
	}
}

// SSLStripProxy is a peer on the path to a server (target, "host:port") that answers the first
// n SSLRequests with 'N' itself, as a server without TLS would: the server never sees them, and
// the client's next packets go to it in the clear (a server that takes connections in the
// clear, pg_hba host rather than hostssl, lets the client in). Every other connection is
// forwarded untouched.
type SSLStripProxy struct {
	*loopbackServer // Addr, Close
	target          string
	left            atomic.Int64

	stripped, sslRequests, clearStartups atomic.Int64
}

// SSLStripStats counts what an SSLStripProxy saw.
type SSLStripStats struct {
	Stripped    int // SSLRequests answered 'N' by the proxy
	SSLRequests int // SSLRequests forwarded to the server (TLS followed, if the server said 'S')
	// ClearStartups counts the StartupMessages forwarded in the clear: after an injected 'N',
	// or as a connection's first packet (a client that remembered plaintext).
	ClearStartups int
}

// SSLStripProxyT starts an SSLStripProxy on 127.0.0.1 at a free port below 32768 for a test,
// and closes it when the test ends.
func SSLStripProxyT(t testing.TB, target string, n int) *SSLStripProxy {
	t.Helper()
	srv, err := listenLoopback("SSL strip proxy")
	if err != nil {
		t.Fatal(err)
	}
	p := &SSLStripProxy{loopbackServer: srv, target: target}
	p.left.Store(int64(n))
	srv.start(p.serve)
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("harness: SSL strip proxy: %v", err)
		}
	})
	return p
}

// Stats returns a snapshot of the counters.
func (p *SSLStripProxy) Stats() SSLStripStats {
	return SSLStripStats{Stripped: int(p.stripped.Load()), SSLRequests: int(p.sslRequests.Load()), ClearStartups: int(p.clearStartups.Load())}
}

func (p *SSLStripProxy) serve(c net.Conn) {
	kind, pkt, err := readFirstPacket(c)
	if err != nil {
		return
	}
	if kind == PacketSSLRequest && p.left.Add(-1) >= 0 {
		p.stripped.Add(1)
		if _, err := c.Write([]byte{'N'}); err != nil {
			return
		}
		if kind, pkt, err = readFirstPacket(c); err != nil {
			return
		}
	}
	switch kind {
	case PacketSSLRequest:
		p.sslRequests.Add(1)
	case PacketStartupMessage:
		p.clearStartups.Add(1)
	}
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	if _, err := up.Write(pkt); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(up, c)
		up.Close()
	}()
	io.Copy(c, up)
	c.Close()
	<-done
}
