package negotiation

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
)

// The bytes of the negotiation, and what each proves (protocol-flow.html "SSL Session
// Encryption" and "GSSAPI Session Encryption"; fe-connect.c, PQconnectPoll, states
// CONNECTION_SSL_STARTUP and CONNECTION_GSS_STARTUP). Before authentication the server and
// the network are untrusted; these are the only bytes read from them before a StartupMessage,
// a TLS handshake or a GSS context establishment, and every other byte is a protocol error:
//
//   - The answer to SSLRequest or GSSENCRequest is exactly one byte: 'S' (SSLRequest) or 'G'
//     (GSSENCRequest) for yes, 'N' for no. Only these are remembered.
//   - 'E' starts an ErrorResponse: a server that cannot serve the request (an old server, a
//     failed fork). Its text is never read (CVE-2024-10977: it is unauthenticated).
//   - After the answer byte, nothing may arrive before the client speaks again (the TLS
//     ClientHello, the first GSS token, the StartupMessage or the next request on the same
//     socket): bytes that came with the answer, or after it, would be taken as the server's
//     reply to a message not sent yet (CVE-2021-23222 for 'S'). They are a protocol error naming
//     the request, and none of them is processed.
//
// The answer is read with a buffer larger than one byte, so that bytes sent with it are seen
// as libpq sees them (they land in its input buffer); quiet checks, just before the client
// speaks, that nothing arrived since.

// request is SSLRequest or GSSENCRequest.
type request uint8

const (
	sslRequest request = iota + 1
	gssencRequest
)

func (r request) String() string {
	if r == gssencRequest {
		return "GSSENCRequest"
	}
	return "SSLRequest"
}

// yes is the byte with which the server accepts r.
func (r request) yes() byte {
	if r == gssencRequest {
		return 'G'
	}
	return 'S'
}

var (
	sslRequestPacket    = [8]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f} // Int32(8) Int32(80877103)
	gssencRequestPacket = [8]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30} // Int32(8) Int32(80877104)
)

// ProtocolError is a server (or anything on the path) breaking the negotiation's byte rules:
// an answer that is not one of the request's, or bytes where none may be. It is never
// remembered, and the socket it came on is closed without reading further.
type ProtocolError struct {
	Request string // "SSLRequest" or "GSSENCRequest"
	Problem string // what was wrong, e.g. "12 bytes arrived with the answer 'N'"
}

func (e *ProtocolError) Error() string {
	return "protocol violation in the answer to " + e.Request + ": " + e.Problem
}

// ErrorResponseError is an ErrorResponse ('E') received as the answer to SSLRequest or
// GSSENCRequest. Its text is not read.
type ErrorResponseError struct {
	Request string
}

func (e *ErrorResponseError) Error() string {
	if e.Request == gssencRequest.String() {
		return "server sent an error response during GSS encryption exchange" // libpq's words
	}
	return "server sent an error response during SSL exchange" // libpq's words
}

// answerBuf is larger than any legitimate answer, so that one read shows what came with it.
const answerBuf = 64

// parseAnswer interprets the first read after r was sent: n bytes of buf. It returns the answer
// ('N' is AnswerNo) or, for anything else than one yes or no byte, an error.
func parseAnswer(r request, buf []byte) (Answer, error) {
	if len(buf) == 0 {
		return AnswerUnknown, nil
	}
	var a Answer
	switch buf[0] {
	case r.yes():
		a = AnswerYes
	case 'N':
		a = AnswerNo
	case 'E':
		// What follows is the ErrorResponse's body, not read any further.
		return AnswerUnknown, &ErrorResponseError{Request: r.String()}
	default:
		return AnswerUnknown, &ProtocolError{Request: r.String(), Problem: fmt.Sprintf("unexpected answer byte 0x%02x", buf[0])}
	}
	if len(buf) > 1 {
		return AnswerUnknown, &ProtocolError{Request: r.String(),
			Problem: fmt.Sprintf("%d bytes arrived with the answer %q, before the client spoke", len(buf)-1, buf[0])}
	}
	return a, nil
}

// readAnswer reads the answer to r on conn (r already sent).
func readAnswer(conn net.Conn, r request) (Answer, error) {
	var buf [answerBuf]byte
	n, err := readSome(conn, buf[:])
	if n == 0 {
		return AnswerUnknown, err
	}
	return parseAnswer(r, buf[:n])
}

// readSome reads once, retrying reads that return nothing and no error.
func readSome(conn net.Conn, buf []byte) (int, error) {
	for {
		n, err := conn.Read(buf)
		if n > 0 || err != nil {
			if n == 0 && err == io.EOF {
				err = io.ErrUnexpectedEOF // the server closed instead of answering
			}
			return n, err
		}
	}
}

// quiet checks, just before the client speaks after the answer to r, that nothing has arrived
// on conn since the answer. Connections that do not expose their file descriptor (a DialFunc's
// own type) are not checked here; what came with the answer still is (parseAnswer).
func quiet(conn net.Conn, r request) error {
	if n := pending(conn); n > 0 {
		return &ProtocolError{Request: r.String(), Problem: "bytes arrived after the answer, before the client spoke"}
	}
	return nil
}

// sslRequestConn is the socket under pgx for an attempt with SSLRequest. It watches pgx's
// SSLRequest (pgconn.startTLS writes it and reads one byte), reads the answer by the byte rules,
// reports it, and after 'N' keeps the socket open when pgx closes it, so that the next method
// goes on on the same socket as libpq does (pgx would dial again). After 'S' it checks, at the
// first write of the TLS handshake, that nothing arrived before the client spoke.
type sslRequestConn struct {
	net.Conn
	at    *attempt
	ctx   context.Context
	info  DialInfo
	state uint8 // 0: nothing sent, 1: SSLRequest sent, 2: answered 'S', 3: passing through
	rctx  context.Context
	keep  bool
	tls   bool  // the server answered 'S': TLS runs on this socket
	wrErr error // a write that failed under TLS before the attempt ended (see Write)
}

func (c *sslRequestConn) Write(b []byte) (int, error) {
	switch c.state {
	case 0:
		c.state = 3
		if len(b) == len(sslRequestPacket) && [8]byte(b) == sslRequestPacket {
			c.state = 1
			c.rctx = c.ctx
			if tr := &c.at.n.trace; tr.SSLRequestStart != nil {
				c.rctx = tr.SSLRequestStart(c.ctx, c.info)
			}
		}
	case 2:
		c.state, c.tls = 3, true
		if err := quiet(c.Conn, sslRequest); err != nil {
			c.at.fail(stepSSLRequest, err)
			return 0, err
		}
	}
	if c.wrErr != nil {
		return len(b), nil
	}
	n, err := c.Conn.Write(b)
	if err != nil && c.tls && !c.at.done.Load() && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		// As libpq (fe-misc.c, pqSendSome: write_failed), a write the server reset is not
		// reported at once: what the server sent before it closed is read first and is the
		// error. A server that refuses the client's certificate after a TLS 1.3 handshake sends
		// its alert (certificate revoked, unknown ca) and closes; the startup written meanwhile
		// meets the reset, and the alert, still in the socket, says why. Later writes are
		// dropped; a read that finds nothing returns this error.
		c.wrErr = err
		return len(b), nil
	}
	return n, err
}

func (c *sslRequestConn) Read(b []byte) (int, error) {
	if c.state != 1 || len(b) == 0 {
		n, err := c.Conn.Read(b)
		if n == 0 && err != nil && c.wrErr != nil {
			return 0, c.wrErr
		}
		return n, err
	}
	var buf [answerBuf]byte
	n, err := readSome(c.Conn, buf[:])
	a := AnswerUnknown
	if n > 0 {
		a, err = parseAnswer(sslRequest, buf[:n])
		b[0] = buf[0]
	}
	switch a {
	case AnswerYes:
		c.state = 2
	case AnswerNo:
		c.state = 3
		// Kept for the next method only where bytes arriving later can be seen (quiet), and
		// never for a CancelRequest.
		c.keep = !c.at.done.Load() && canPeek(c.Conn)
	default:
		c.state = 3
		c.at.fail(stepSSLRequest, err)
	}
	if a != AnswerUnknown {
		c.at.onSSLAnswer(a)
	}
	if tr := &c.at.n.trace; tr.SSLRequestDone != nil {
		tr.SSLRequestDone(c.rctx, RequestDoneInfo{Answer: a, CacheHit: c.at.known.SSL != AnswerUnknown, Err: err})
	}
	if err != nil {
		return 0, err
	}
	return 1, nil
}

func (c *sslRequestConn) Close() error {
	if c.keep {
		c.keep = false
		c.at.reuse.Store(&connHolder{c.Conn})
		return nil
	}
	return c.Conn.Close()
}

// authObserver passes the backend's messages from AuthenticationOk to ReadyForQuery through to
// pgx, holding them to libpq's bound for that phase: no message may exceed 30000 bytes (libpq
// allows that for the message kinds that carry data, fe-protocol3.c, VALID_LONG_MESSAGE_TYPE,
// but none of them belongs before ReadyForQuery but a NoticeResponse). Without it a forged length
// makes pgx allocate up to a gigabyte for a server that has not finished the startup. It reads
// message types and lengths, never a body; after ReadyForQuery or an ErrorResponse it is a
// plain pass-through. What comes before AuthenticationOk is the authentication exchange's
// (auth.go).
type authObserver struct {
	r    io.Reader
	done bool
	err  error   // the rule broken, returned from then on
	hdr  [5]byte // type, length
	have int
	skip int  // body bytes of the current message still to pass
	last bool // the message being skipped ends the phase (ReadyForQuery)
}

func (o *authObserver) Read(b []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.r.Read(b)
	if !o.done {
		if perr := o.observe(b[:n]); perr != nil {
			o.err = perr
			return 0, perr
		}
	}
	return n, err
}

// errStartup is a message that breaks the rules of the authentication phase.
func errStartup(problem string) error {
	return &ProtocolError{Request: "StartupMessage", Problem: problem}
}

func (o *authObserver) observe(p []byte) error {
	for len(p) > 0 && !o.done {
		if o.skip > 0 {
			k := min(o.skip, len(p))
			o.skip -= k
			p = p[k:]
			if o.skip == 0 && o.last {
				o.done = true
			}
			continue
		}
		k := min(5-o.have, len(p))
		copy(o.hdr[o.have:], p[:k])
		o.have += k
		p = p[k:]
		if o.have < 5 {
			continue
		}
		typ := o.hdr[0]
		length := int(binary.BigEndian.Uint32(o.hdr[1:]))
		if length < 4 {
			return errStartup(fmt.Sprintf("a message %q with length %d", typ, length))
		}
		if typ == 'E' {
			if length > 30000 {
				return errStartup(fmt.Sprintf("an ErrorResponse of %d bytes during startup (libpq allows 30000)", length))
			}
			o.done = true // pgx reports it
			continue
		}
		if length > 30000 {
			return errStartup(fmt.Sprintf("a message %q of %d bytes during startup (at most 30000)", typ, length))
		}
		o.last = typ == 'Z'
		o.have = 0
		o.skip = length - 4
		if o.skip == 0 && o.last {
			o.done = true
		}
	}
	return nil
}

// authGSSOrTrust is the authentication of an AuthenticationOk sent at once over GSS encryption.
// pg_hba's method was gss, which needs no exchange there because establishing the encrypted
// channel authenticated the client (auth.c, ClientAuthentication: with GSS encryption in use it
// only checks the principal against the role), or trust, which checks nothing: the server sends
// the same bytes for both, and neither libpq nor this package can tell them apart.
const authGSSOrTrust = "gss-or-trust"

// authMethodName names an AuthenticationRequest code (protocol-message-formats.html).
func authMethodName(code uint32) string {
	switch code {
	case 0:
		return "trust"
	case 3:
		return "password"
	case 5:
		return "md5"
	case 7:
		return "gss"
	case 9:
		return "sspi"
	case 10:
		return "scram-sha-256"
	}
	return ""
}
