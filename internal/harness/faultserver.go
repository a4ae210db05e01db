package harness

import (
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// FaultServerOptions configures a FaultServer. The zero value is a server without TLS and
// GSS that behaves.
type FaultServerOptions struct {
	// TLS makes the server answer 'S' to an SSLRequest and then do a real TLS handshake (TLS
	// 1.2 or 1.3, without session tickets, as PostgreSQL's OpenSSL setup) with a throwaway
	// ECDSA P-256 certificate for 127.0.0.1 and localhost, signed by a throwaway CA
	// (FaultServer.CAPEM). Without TLS the answer is 'N'.
	TLS bool
	// GSS makes the server answer 'G' to a GSSENCRequest. A fake cannot accept a Kerberos
	// context: after the client's first context token (its AP-REQ) the server does what a
	// fault at StepAPRep says, and without one closes the connection (FIN), as PostgreSQL
	// does when it cannot accept the context. Without GSS the answer is 'N'.
	GSS bool
	// Fault is the fault to inject; see FaultServer for the steps and kinds it supports.
	Fault Fault
}

// FaultServer is a scriptable PostgreSQL wire server on 127.0.0.1, for tests of how clients
// take a server that misbehaves at one step of a connection. It is written on pgx's
// pgproto3 and works for pgx, database/sql over pgx, and libpq (psql).
//
// Without a fault it behaves as a server that trusts everyone: it answers an SSLRequest with
// 'N' ('S' and a TLS handshake with Options.TLS) and a GSSENCRequest with 'N' ('G' with
// Options.GSS, see there), on the same socket as PostgreSQL; it answers every StartupMessage
// (protocol 3.x, any user and database) with AuthenticationOk, ParameterStatus
// server_version=15.0, client_encoding=UTF8, standard_conforming_strings=on,
// DateStyle="ISO, MDY" and integer_datetimes=on, BackendKeyData (a process ID of its own per
// connection) and ReadyForQuery, in one write; and it answers every statement, in the simple
// or the extended query protocol, as FakeServer does (one row, one int4 column "?column?"
// holding 1), so `select 1` works. A CancelRequest, or a first packet it does not know, is
// counted and the connection closed.
//
// One fault (FaultServerOptions.Fault) applies at one step, to every connection that reaches
// the step or to the first Fault.Count of them. The steps and kinds it supports (see
// FaultKind for what each kind sends, FaultStep for where each step is):
//
//	step              close reset stall garbage error extra trickle corrupt
//	SSLAnswer           x     x     x      x      x     x      x
//	GSSENCAnswer        x     x     x      x      x     x      x
//	TLSHandshake        x     x     x      x      x            x        (needs TLS)
//	APRep               x     x     x      x      x                     (needs GSS)
//	WrapToken                                                            (none)
//	Startup             x     x     x      x      x     x      x
//	AfterReady          x     x     x      x      x     x      x
//
// At StepTLSHandshake a terminal fault follows the client's first bytes after 'S' and is sent
// in the clear; trickle trickles the server's handshake writes. At StepStartup and
// StepAfterReady inside TLS, what a fault sends is sent inside TLS, and close, stall and reset
// act on the TCP connection (no TLS close_notify). At StepAfterReady extra bytes are appended
// to the server's next write, which for a Query, or an extended-protocol sequence ending in
// Sync, ends with ReadyForQuery; the first message is the first one other than a Terminate.
// StartFaultServer returns an error for any other combination.
//
// A FaultServer runs in the calling process; Stats counts what it saw.
type FaultServer struct {
	*loopbackServer // Addr, Close

	opts     FaultServerOptions
	tls      *tls.Config
	caPEM    []byte
	inj      injector
	counters faultCounters
	pids     atomic.Uint32
}

var faultServerMatrix = faultMatrix{
	StepSSLAnswer:    kinds(FaultExtraBytes, FaultTrickle),
	StepGSSENCAnswer: kinds(FaultExtraBytes, FaultTrickle),
	StepTLSHandshake: kinds(FaultTrickle),
	StepAPRep:        kinds(),
	StepStartup:      kinds(FaultExtraBytes, FaultTrickle),
	StepAfterReady:   kinds(FaultExtraBytes, FaultTrickle),
}

// StartFaultServer listens on 127.0.0.1 at a free port and serves each connection it accepts
// in its own goroutine. It returns an error for a fault it does not support (see
// FaultServer). Call Close when done: it closes every open connection, stalled ones too.
func StartFaultServer(opts FaultServerOptions) (*FaultServer, error) {
	if err := opts.Fault.check("fault server", faultServerMatrix); err != nil {
		return nil, err
	}
	switch {
	case opts.Fault.Kind != FaultNone && opts.Fault.Step == StepTLSHandshake && !opts.TLS:
		return nil, fmt.Errorf("harness: fault server: a fault at the %s needs TLS", StepTLSHandshake)
	case opts.Fault.Kind != FaultNone && opts.Fault.Step == StepAPRep && !opts.GSS:
		return nil, fmt.Errorf("harness: fault server: a fault at the %s needs GSS", StepAPRep)
	}
	s := &FaultServer{opts: opts}
	s.inj.f = opts.Fault
	if opts.TLS {
		cs, err := newCertSet()
		if err != nil {
			return nil, err
		}
		cert, err := tls.X509KeyPair(cs.certPEM, cs.keyPEM)
		if err != nil {
			return nil, fmt.Errorf("harness: fault server: %w", err)
		}
		s.tls = &tls.Config{
			Certificates:           []tls.Certificate{cert},
			MinVersion:             tls.VersionTLS12,
			SessionTicketsDisabled: true,
		}
		s.caPEM = cs.caPEM
	}
	srv, err := listenLoopback("fault server")
	if err != nil {
		return nil, err
	}
	s.loopbackServer = srv
	srv.start(s.serve)
	return s, nil
}

// FaultServerT starts a FaultServer for a test or benchmark, fails it if that does not work,
// and closes the server when it ends.
func FaultServerT(t testing.TB, opts FaultServerOptions) *FaultServer {
	t.Helper()
	s, err := StartFaultServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("harness: fault server: %v", err)
		}
	})
	return s
}

// CAPEM returns the PEM certificate of the CA that signed the server's certificate (for
// sslrootcert, or a tls.Config's RootCAs), or nil without TLS.
func (s *FaultServer) CAPEM() []byte { return s.caPEM }

// Stats returns a snapshot of the counters (see FaultStats).
func (s *FaultServer) Stats() FaultStats { return s.counters.snapshot(s.inj.applied.Load()) }

// serve handles one connection until the client terminates, a fault ends it, the connection
// fails or the server is closed.
func (s *FaultServer) serve(raw net.Conn) {
	id := s.counters.connection()
	conn := raw // the protocol's stream: raw, or TLS over it
	for {
		kind, _, err := readFirstPacket(conn)
		if err != nil {
			return
		}
		s.counters.packet(id, kind)
		switch kind {
		case PacketSSLRequest:
			if conn != raw {
				endWith(raw, raw, Fault{Kind: FaultClose}) // an SSLRequest inside TLS
				return
			}
			answer := byte('N')
			if s.tls != nil {
				answer = 'S'
			}
			if !s.deliver(raw, raw, StepSSLAnswer, []byte{answer}) {
				return
			}
			if answer == 'S' {
				if conn = s.handshake(raw); conn == nil {
					return
				}
			}
		case PacketGSSENCRequest:
			if conn != raw {
				endWith(raw, raw, Fault{Kind: FaultClose})
				return
			}
			answer := byte('N')
			if s.opts.GSS {
				answer = 'G'
			}
			if !s.deliver(raw, raw, StepGSSENCAnswer, []byte{answer}) {
				return
			}
			if answer == 'G' {
				s.gssContext(raw)
				return
			}
		case PacketStartupMessage:
			s.session(raw, conn)
			return
		default:
			// A CancelRequest (there is nothing to cancel) or not PostgreSQL: close, without
			// an RST for what the client may still be sending.
			endWith(raw, raw, Fault{Kind: FaultClose})
			return
		}
	}
}

// deliver sends step's correct answer through w, altered by the fault if it applies to this
// connection. raw is the TCP connection under w. It reports whether the connection goes on.
func (s *FaultServer) deliver(raw net.Conn, w io.Writer, step FaultStep, correct []byte) bool {
	if !s.inj.claim(step) {
		_, err := w.Write(correct)
		return err == nil
	}
	f := s.inj.f
	switch f.Kind {
	case FaultExtraBytes:
		_, err := w.Write(append(append([]byte(nil), correct...), f.extra()...))
		return err == nil
	case FaultTrickle:
		return trickle(w, correct, f.delay()) == nil
	}
	endWith(raw, w, f)
	return false
}

// endWith carries out a terminal fault and, unless it reset the connection, waits for the client
// to close it (or the server to be closed).
func endWith(raw net.Conn, w io.Writer, f Fault) {
	inflict(f, raw, w)
	if f.Kind != FaultReset {
		drain(raw)
	}
}

// handshake does the TLS handshake after 'S' and returns the TLS connection, or nil when the
// handshake failed or a fault ended the connection.
func (s *FaultServer) handshake(raw net.Conn) net.Conn {
	under := &trickleConn{Conn: raw}
	if s.inj.claim(StepTLSHandshake) {
		f := s.inj.f
		if f.Kind != FaultTrickle {
			// The fault answers the client's first bytes (its ClientHello).
			buf := make([]byte, 1024)
			if _, err := raw.Read(buf); err != nil {
				return nil
			}
			endWith(raw, raw, f)
			return nil
		}
		under.delay = f.delay()
	}
	tc := tls.Server(under, s.tls)
	if err := tc.Handshake(); err != nil {
		return nil
	}
	under.delay = 0 // only this goroutine writes through tc
	return tc
}

// trickleConn trickles its writes while delay > 0.
type trickleConn struct {
	net.Conn
	delay time.Duration
}

func (c *trickleConn) Write(p []byte) (int, error) {
	if c.delay <= 0 {
		return c.Conn.Write(p)
	}
	if err := trickle(c.Conn, p, c.delay); err != nil {
		return 0, err
	}
	return len(p), nil
}

// maxGSSPacket is the largest GSS packet (after its Int32 length) libpq and the server accept:
// PQ_GSS_RECV_BUFFER_SIZE (16384) of src/interfaces/libpq/fe-secure-gssapi.c and
// PQ_GSS_SEND_BUFFER_SIZE of src/backend/libpq/be-secure-gssapi.c, PostgreSQL 15.
const maxGSSPacket = 16384

// gssContext reads the client's first context token (Int32 length, then the token) after 'G'
// and, as a fake cannot accept it, closes the connection or does what the fault at StepAPRep
// says.
func (s *FaultServer) gssContext(raw net.Conn) {
	var hdr [4]byte
	if _, err := io.ReadFull(raw, hdr[:]); err != nil {
		return
	}
	if n := binary.BigEndian.Uint32(hdr[:]); n <= maxGSSPacket {
		if _, err := io.ReadFull(raw, make([]byte, n)); err != nil {
			return
		}
	}
	f := Fault{Kind: FaultClose}
	if s.inj.claim(StepAPRep) {
		f = s.inj.f
	}
	endWith(raw, raw, f)
}

// session answers a StartupMessage and then serves statements. conn is raw or a TLS
// connection over it.
func (s *FaultServer) session(raw, conn net.Conn) {
	pid := s.pids.Add(1)
	key := binary.BigEndian.AppendUint32(nil, pid*2654435761) // any value; distinct per connection
	if !s.deliver(raw, conn, StepStartup, startupAnswer(pid, key)) {
		return
	}
	fw := &faultWriter{w: conn}
	be := pgproto3.NewBackend(conn, fw)
	first := true
	serveQueries(be, func(msg pgproto3.FrontendMessage) bool {
		switch msg.(type) {
		case *pgproto3.Query, *pgproto3.Execute:
			s.counters.query()
		case *pgproto3.Terminate:
			return true
		}
		if !first {
			return true
		}
		first = false
		if !s.inj.claim(StepAfterReady) {
			return true
		}
		switch f := s.inj.f; f.Kind {
		case FaultExtraBytes:
			fw.extra = f.extra()
		case FaultTrickle:
			fw.delay = f.delay()
		default:
			endWith(raw, conn, f)
			return false
		}
		return true
	})
}
