package harness

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// FaultProxy is a loopback TCP proxy in front of a real server (a harness cluster, with TLS
// or GSS or neither) that injects one fault at one step of the connections it forwards, to
// every connection that reaches the step or to the first Fault.Count of them, and counts
// what clients send as Proxy does.
//
// It forwards bytes both ways and follows the negotiation framing far enough to find the
// steps (see FaultStep; the protocol is in the PostgreSQL documentation, protocol-flow.html):
// the client's first packet (SSLRequest, GSSENCRequest, StartupMessage, CancelRequest); the
// server's one-byte answer, after which an 'N' lets the client go on in the clear on the same
// socket; after 'S' the TLS handshake, opaque but for the record types the client sends;
// after 'G' the GSS packets (Int32 length, then a token; src/backend/libpq/be-secure-gssapi.c),
// client first, the server's first being its context token (the AP-REP) and the first whose
// token starts 0x05 0x04 its first wrap token; and in the clear the backend messages of the
// startup and of the first query. Inside TLS and GSS encryption it sees no messages, so StepStartup and StepAfterReady
// apply only to connections in the clear. Faults act on what the server sends; the client's
// bytes are forwarded unchanged (except those a terminal fault at StepAfterReady swallows).
//
// The steps and kinds it supports (see FaultKind for what each kind sends):
//
//	step              close reset stall garbage error extra trickle corrupt
//	SSLAnswer           x     x     x      x      x     x      x
//	GSSENCAnswer        x     x     x      x      x     x      x
//	TLSHandshake        x     x     x      x      x            x
//	APRep               x     x     x      x      x     x      x       x
//	WrapToken           x     x     x      x      x     x      x       x
//	Startup             x     x     x      x      x     x      x
//	AfterReady          x     x     x      x      x     x      x
//
// A terminal fault (close, reset, stall, garbage, error response) closes the connection to
// the server and then treats the client as FaultKind says. At an answer step (SSLAnswer,
// GSSENCAnswer) the server's answer is read first. At StepTLSHandshake a terminal fault
// replaces the server's first TLS bytes, which it sends once the whole ClientHello has
// arrived, and trickle covers the server's bytes until the client's first application_data
// record (see StepTLSHandshake). At StepAfterReady a terminal fault takes the place of
// forwarding the client's first message after the startup's ReadyForQuery (other than a
// Terminate), trickle covers every byte the server sends after that message, and extra bytes
// follow the next ReadyForQuery. NewFaultProxy returns an error for any other combination.
//
// When one side closes its sending direction, the proxy closes the same direction towards
// the other side (a FIN for a FIN), so that what one side sent last still arrives.
type FaultProxy struct {
	*loopbackServer // Addr, Close
	target          string
	inj             injector
	counters        faultCounters

	// pick, when set (NewRandomFaultProxy), draws each connection's fault at accept.
	pick func() Fault
}

var faultProxyMatrix = faultMatrix{
	StepSSLAnswer:    kinds(FaultExtraBytes, FaultTrickle),
	StepGSSENCAnswer: kinds(FaultExtraBytes, FaultTrickle),
	StepTLSHandshake: kinds(FaultTrickle),
	StepAPRep:        kinds(FaultExtraBytes, FaultTrickle, FaultCorrupt),
	StepWrapToken:    kinds(FaultExtraBytes, FaultTrickle, FaultCorrupt),
	StepStartup:      kinds(FaultExtraBytes, FaultTrickle),
	StepAfterReady:   kinds(FaultExtraBytes, FaultTrickle),
}

// NewFaultProxy listens on 127.0.0.1 at a free port and forwards each connection it accepts
// to target ("host:port"), with fault f. It returns an error for a fault it does not support
// (see FaultProxy). Call Close when done: it closes every open connection, stalled ones too.
func NewFaultProxy(target string, f Fault) (*FaultProxy, error) {
	if err := f.check("fault proxy", faultProxyMatrix); err != nil {
		return nil, err
	}
	srv, err := listenLoopback("fault proxy")
	if err != nil {
		return nil, err
	}
	p := &FaultProxy{loopbackServer: srv, target: target}
	p.inj.f = f
	srv.start(p.serve)
	return p, nil
}

// NewRandomFaultProxy is NewFaultProxy with a fault drawn for each connection, at accept, from
// faults (one with Kind FaultNone, or the zero Fault, lets a connection through untouched), by a
// generator seeded with seed: for soak tests. Count is ignored; Stats().Faults counts the
// connections a fault was applied to.
func NewRandomFaultProxy(target string, faults []Fault, seed uint64) (*FaultProxy, error) {
	if len(faults) == 0 {
		return nil, errors.New("harness: fault proxy: no faults to draw from")
	}
	for _, f := range faults {
		if err := f.check("fault proxy", faultProxyMatrix); err != nil {
			return nil, err
		}
	}
	srv, err := listenLoopback("fault proxy")
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	p := &FaultProxy{loopbackServer: srv, target: target, pick: func() Fault {
		mu.Lock()
		defer mu.Unlock()
		return faults[rng.IntN(len(faults))]
	}}
	srv.start(p.serve)
	return p, nil
}

// FaultProxyT starts a FaultProxy for a test or benchmark, fails it if that does not work, and
// closes the proxy when it ends.
func FaultProxyT(t testing.TB, target string, f Fault) *FaultProxy {
	t.Helper()
	p, err := NewFaultProxy(target, f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("harness: fault proxy: %v", err)
		}
	})
	return p
}

// Stats returns a snapshot of the counters (see FaultStats; Queries stays 0).
func (p *FaultProxy) Stats() FaultStats { return p.counters.snapshot(p.inj.applied.Load()) }

// phase is what the proxy follows once the negotiation in the clear is over.
type phase int

const (
	phaseOpaque phase = iota // CancelRequest, an unknown packet or answer: bytes only
	phaseTLS                 // after 'S'
	phaseGSS                 // after 'G'
	phasePlain               // after a StartupMessage in the clear
)

// How the answer to the client's first message after the startup is altered (StepAfterReady).
const (
	afterUndecided int32 = iota
	afterNone
	afterTrickle
	afterExtra
)

// proxyConn is one client connection and its connection to the server.
type proxyConn struct {
	p              *FaultProxy
	client, server net.Conn
	own            *Fault // this connection's fault, drawn by p.pick; nil: p.inj decides

	// ended is set when a terminal fault has taken over the client socket: the proxy then
	// only discards what the client sends and no longer touches the socket otherwise.
	ended atomic.Bool

	// phaseTLS: the server has sent its first bytes; the client has sent an
	// application_data record after that (the handshake is over for the server's side).
	serverSpoke, clientAgain atomic.Bool
	// phasePlain: the startup's ReadyForQuery is on its way to the client; what a fault at
	// StepAfterReady does to the answer (afterUndecided, ...), decided by upstream.
	ready atomic.Bool
	after atomic.Int32
}

// serve proxies one client connection.
func (p *FaultProxy) serve(client net.Conn) {
	id := p.counters.connection()
	server, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	c := &proxyConn{p: p, client: client, server: server}
	if p.pick != nil {
		f := p.pick()
		c.own = &f
	}
	for {
		kind, pkt, err := readFirstPacket(client)
		if err != nil {
			return
		}
		p.counters.packet(id, kind)
		if _, err := server.Write(pkt); err != nil {
			return
		}
		switch kind {
		case PacketSSLRequest, PacketGSSENCRequest:
			step := StepSSLAnswer
			if kind == PacketGSSENCRequest {
				step = StepGSSENCAnswer
			}
			var answer [1]byte
			if _, err := io.ReadFull(server, answer[:]); err != nil {
				return
			}
			if !c.deliver(step, answer[:]) {
				return
			}
			switch answer[0] {
			case 'N':
				continue // the client may go on in the clear on this socket
			case 'S':
				c.relay(phaseTLS)
			case 'G':
				c.relay(phaseGSS)
			default:
				c.relay(phaseOpaque) // an ErrorResponse of a server that cannot fork, say
			}
		case PacketStartupMessage:
			c.relay(phasePlain)
		default:
			c.relay(phaseOpaque)
		}
		return
	}
}

// deliver forwards the server's answer at an answer step, altered by the fault if it applies.
// It runs before the relay starts, so a terminal fault drains the client itself. It reports
// whether the connection goes on.
func (c *proxyConn) deliver(step FaultStep, answer []byte) bool {
	f, ok := c.claim(step)
	switch {
	case !ok:
		_, err := c.client.Write(answer)
		return err == nil
	case f.Kind == FaultExtraBytes:
		_, err := c.client.Write(append(append([]byte(nil), answer...), f.extra()...))
		return err == nil
	case f.Kind == FaultTrickle:
		return trickle(c.client, answer, f.delay()) == nil
	}
	c.fail(f)
	if f.Kind != FaultReset {
		drain(c.client)
	}
	return false
}

func (c *proxyConn) claim(step FaultStep) (Fault, bool) {
	if c.own != nil {
		if c.own.Kind == FaultNone || c.own.Step != step {
			return Fault{}, false
		}
		c.p.inj.applied.Add(1)
		return *c.own, true
	}
	if c.p.inj.claim(step) {
		return c.p.inj.f, true
	}
	return Fault{}, false
}

// fault is the fault this connection is subject to.
func (c *proxyConn) fault() Fault {
	if c.own != nil {
		return *c.own
	}
	return c.p.inj.f
}

// fail carries out terminal fault f: the connection to the server is closed, and the client
// is sent, closed, reset or left as f says. Once the relay runs, upstream drains the client.
func (c *proxyConn) fail(f Fault) {
	c.ended.Store(true)
	_ = c.server.Close()
	inflict(f, c.client, c.client)
}

// relay forwards both ways until both directions have ended.
func (c *proxyConn) relay(ph phase) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.upstream(ph)
	}()
	c.downstream(ph)
	wg.Wait()
}

// upstream forwards the client's bytes to the server. It ends when the client closes its side
// (then the server's side is shut down too) or the connection fails. After a terminal fault it
// discards what the client sends.
func (c *proxyConn) upstream(ph phase) {
	buf := make([]byte, 32*1024)
	serverGone := false
	decided := false       // phasePlain: StepAfterReady decided
	var records tlsRecords // phaseTLS: the client's records until its first application data
	for {
		n, err := c.client.Read(buf)
		if n > 0 && !c.ended.Load() && !serverGone {
			data := buf[:n]
			switch {
			case ph == phaseTLS && !c.clientAgain.Load():
				records.scan(data, func(typ byte) {
					if typ == tlsApplicationData && c.serverSpoke.Load() {
						c.clientAgain.Store(true)
					}
				})
			case ph == phasePlain && !decided && c.ready.Load():
				decided = true
				if !isTerminate(data) {
					if f, ok := c.claim(StepAfterReady); ok {
						switch f.Kind {
						case FaultTrickle:
							c.after.Store(afterTrickle)
						case FaultExtraBytes:
							c.after.Store(afterExtra)
						default:
							c.after.Store(afterNone)
							c.fail(f)
							continue
						}
					} else {
						c.after.Store(afterNone)
					}
				}
			}
			if _, werr := c.server.Write(data); werr != nil {
				// The server is gone; its end reaches the client through downstream.
				serverGone = true
			}
		}
		if err != nil {
			if !c.ended.Load() {
				if err == io.EOF {
					closeWrite(c.server)
				} else {
					_ = c.server.Close()
				}
			}
			return
		}
	}
}

// tlsApplicationData is the content type of a TLS application_data record (RFC 8446, section
// 5.1). In TLS 1.3 every encrypted record has it, so the client's first one carries its
// Finished; in TLS 1.2 it is the client's first data after the handshake.
const tlsApplicationData = 23

// tlsRecords follows TLS record framing (a 5-byte header: content type, version, Int16
// length; then the fragment) across reads.
type tlsRecords struct {
	hdr  [5]byte
	nhdr int // header bytes read of the next record
	left int // fragment bytes of the current record still to come
}

// scan consumes b and calls header with the content type of each record that starts in it.
func (r *tlsRecords) scan(b []byte, header func(typ byte)) {
	for len(b) > 0 {
		if r.left > 0 {
			n := min(r.left, len(b))
			r.left -= n
			b = b[n:]
			continue
		}
		n := copy(r.hdr[r.nhdr:], b)
		r.nhdr += n
		b = b[n:]
		if r.nhdr == len(r.hdr) {
			r.nhdr = 0
			r.left = int(binary.BigEndian.Uint16(r.hdr[3:]))
			header(r.hdr[0])
		}
	}
}

// isTerminate reports whether b is exactly a Terminate message.
func isTerminate(b []byte) bool {
	return len(b) == 5 && b[0] == 'X' && binary.BigEndian.Uint32(b[1:]) == 4
}

// downstream forwards the server's bytes to the client, following the phase's framing to find
// the fault's step. When the server ends, the client's side is shut down too, unless a fault
// has taken the client over.
func (c *proxyConn) downstream(ph phase) {
	var src io.Reader = c.server
	switch ph {
	case phaseTLS:
		src = c.downTLS()
	case phaseGSS:
		src = c.downGSS()
	case phasePlain:
		src = c.downPlain()
	}
	if src != nil {
		if _, err := io.Copy(c.client, src); err != nil && !c.ended.Load() {
			// The client is gone: let the server know.
			_ = c.server.Close()
		}
	}
	if !c.ended.Load() {
		closeWrite(c.client)
	}
}

// downTLS forwards the server's first TLS flight, altered by a fault at StepTLSHandshake, and
// returns what to copy from then on (nil when the connection is over).
func (c *proxyConn) downTLS() io.Reader {
	buf := make([]byte, 32*1024)
	n, err := c.server.Read(buf)
	if n == 0 {
		return nil
	}
	c.serverSpoke.Store(true)
	f, ok := c.claim(StepTLSHandshake)
	if !ok {
		if !c.write(buf[:n]) {
			return nil
		}
		return c.server
	}
	if f.terminal() {
		c.fail(f)
		return nil
	}
	// Trickle until the client's first application data: it cannot come before the client
	// has all the server's handshake, and the server sends nothing more before it has the
	// client's answer.
	for {
		if trickle(c.client, buf[:n], f.delay()) != nil {
			_ = c.server.Close()
			return nil
		}
		if err != nil {
			return nil
		}
		n, err = c.server.Read(buf)
		if c.clientAgain.Load() {
			if n > 0 && !c.write(buf[:n]) || err != nil {
				return nil
			}
			return c.server
		}
	}
}

// write writes b to the client; on failure it closes the server connection and reports false.
func (c *proxyConn) write(b []byte) bool {
	if _, err := c.client.Write(b); err != nil {
		_ = c.server.Close()
		return false
	}
	return true
}

// deliverPacket writes a server packet (or message) at step, altered by the fault if it
// applies. It reports whether the connection goes on.
func (c *proxyConn) deliverPacket(step FaultStep, pkt []byte, tokenAt int) bool {
	f, ok := c.claim(step)
	switch {
	case !ok:
		return c.write(pkt)
	case f.Kind == FaultExtraBytes:
		return c.write(append(pkt, f.extra()...))
	case f.Kind == FaultTrickle:
		if trickle(c.client, pkt, f.delay()) != nil {
			_ = c.server.Close()
			return false
		}
		return true
	case f.Kind == FaultCorrupt:
		if len(pkt) > tokenAt {
			pkt[len(pkt)-1] ^= 0xff
		}
		return c.write(pkt)
	}
	c.fail(f)
	return false
}

// downGSS forwards the GSS packets up to the server's first wrap token, altering the first
// context token (StepAPRep) or the first wrap token (StepWrapToken), and returns what to copy
// from then on (nil when the connection is over).
func (c *proxyConn) downGSS() io.Reader {
	for i := 0; ; i++ {
		var hdr [4]byte
		if _, err := io.ReadFull(c.server, hdr[:]); err != nil {
			return nil
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > maxGSSPacket {
			// Not a GSS packet (an ErrorResponse of an old server, say): bytes only.
			if !c.write(hdr[:]) {
				return nil
			}
			return c.server
		}
		pkt := make([]byte, 4+n)
		copy(pkt, hdr[:])
		if _, err := io.ReadFull(c.server, pkt[4:]); err != nil {
			return nil
		}
		wrap := n >= 2 && pkt[4] == 0x05 && pkt[5] == 0x04
		switch {
		case i == 0:
			if !c.deliverPacket(StepAPRep, pkt, 4) {
				return nil
			}
		case wrap:
			if !c.deliverPacket(StepWrapToken, pkt, 4) {
				return nil
			}
			return c.server
		default:
			if !c.write(pkt) {
				return nil
			}
		}
	}
}

// downPlain forwards the startup answer and the answer to the client's first message in the
// clear, altered by the fault at StepStartup or StepAfterReady, and returns what to copy from
// then on (nil when the connection is over).
func (c *proxyConn) downPlain() io.Reader {
	br := bufio.NewReader(c.server)
	// What the server sent in one go is forwarded in one write: batch the messages read
	// until the buffer is empty.
	var out []byte
	var startup Fault
	applies, first := false, true
	for {
		msg, err := readMessage(br)
		if err != nil {
			if msg != nil {
				// Not a message: pass the bytes on untouched.
				if c.write(append(out, msg...)) {
					return br
				}
				return nil
			}
			if len(out) > 0 {
				c.write(out)
			}
			return nil
		}
		if first {
			first = false
			startup, applies = c.claim(StepStartup)
			if applies && startup.terminal() {
				c.fail(startup)
				return nil
			}
		}
		out = append(out, msg...)
		ready := msg[0] == 'Z'
		if !ready && br.Buffered() > 0 {
			continue
		}
		if ready {
			if applies && startup.Kind == FaultExtraBytes {
				out = append(out, startup.extra()...)
			}
			c.ready.Store(true) // before the client can answer it
		}
		if applies && startup.Kind == FaultTrickle {
			if trickle(c.client, out, startup.delay()) != nil {
				_ = c.server.Close()
				return nil
			}
		} else if !c.write(out) {
			return nil
		}
		out = out[:0]
		if ready {
			break
		}
	}
	return c.downAfterReady(br)
}

// downAfterReady forwards the answer to the client's first message after the startup,
// altered as upstream decided for StepAfterReady, and returns what to copy from then on.
func (c *proxyConn) downAfterReady(br *bufio.Reader) io.Reader {
	var out []byte
	for {
		msg, err := readMessage(br)
		if err != nil {
			if msg != nil && c.write(append(out, msg...)) {
				return br
			}
			return nil
		}
		out = append(out, msg...)
		switch c.after.Load() {
		case afterTrickle:
			if trickle(c.client, out, c.fault().delay()) != nil {
				_ = c.server.Close()
				return nil
			}
			c.trickleRest(br, c.fault().delay())
			return nil
		case afterExtra:
			if msg[0] != 'Z' {
				if br.Buffered() == 0 {
					if !c.write(out) {
						return nil
					}
					out = out[:0]
				}
				continue
			}
			if !c.write(append(out, c.fault().extra()...)) {
				return nil
			}
			return br
		case afterNone:
			if !c.write(out) {
				return nil
			}
			return br
		default:
			// Undecided: the server spoke before the client's first message (a
			// NoticeResponse, a ParameterStatus); forward it as it is.
			if br.Buffered() == 0 {
				if !c.write(out) {
					return nil
				}
				out = out[:0]
			}
		}
	}
}

// trickleRest trickles everything r still gives to the client.
func (c *proxyConn) trickleRest(r io.Reader, delay time.Duration) {
	buf := make([]byte, 32*1024)
	for {
		n, err := r.Read(buf)
		if n > 0 && trickle(c.client, buf[:n], delay) != nil {
			_ = c.server.Close()
			return
		}
		if err != nil {
			return
		}
	}
}
