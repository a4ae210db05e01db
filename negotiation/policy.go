package negotiation

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// What a failed attempt proves, what may be remembered of it, and what is tried next. The rules
// are libpq's (fe-connect.c, PQconnectPoll; libpq-connect.html) with one principle on top:
// nothing learned from load, timeouts, resets, cancellation or a failed check of the server may
// ever turn encryption off, for this connect or, through the cache, for later ones.

// step is where in an attempt a failure happened.
type step uint8

const (
	stepStartup       step = iota // StartupMessage, authentication, up to ReadyForQuery (the default)
	stepDial                      // DNS or TCP connect: no socket was opened
	stepSSLRequest                // the answer to SSLRequest
	stepTLS                       // the TLS handshake
	stepGSSENCRequest             // the answer to GSSENCRequest
	stepServiceTicket             // the KDC exchange for the service ticket
	stepGSSContext                // the GSS context establishment: AP-REQ out, AP-REP in
)

var stepNames = [...]string{"startup", "TCP connect", "SSLRequest", "TLS handshake", "GSSENCRequest", "service ticket", "GSS context"}

func (s step) String() string { return stepNames[s] }

// class is what an error says about the server and the network.
type class uint8

const (
	classOther         class = iota // anything else: treated as a failure of the step
	classCanceled                   // the caller's context ended
	classTimeout                    // a deadline: the context's or connect_timeout
	classClosed                     // the peer closed the socket (EOF)
	classReset                      // the connection was reset
	classProtocol                   // *ProtocolError
	classErrorResponse              // *ErrorResponseError: 'E' to SSLRequest or GSSENCRequest
	classRejected                   // ErrGSSRejected
	classUnverified                 // ErrGSSUnverified
	classServer                     // an ErrorResponse after the StartupMessage (a SQLSTATE)
	classClientRefused              // the client refused the server: requirepeer, require_auth, channel_binding, sslcertmode, min_protocol_version, no password
	classTLSRefused                 // *TLSRefusedError: the client refused the TLS server (trust anchor, certificate, ALPN)
)

// clientChecks are the messages with which pgx fails a connection whose server does not meet
// what the client requires (pgconn.go, connectOne); libpq stops at each of them.
var clientChecks = []string{"require_auth check failed: ", "channel binding check failed: ", "sslcertmode check failed: "}

// clientRefused reports whether err is the client's refusal of the server, or an error of the
// caller's code (AbortError).
func clientRefused(err error) bool {
	var rp *RequirePeerError
	var ab *AbortError
	var ae *AuthError
	var pv *ProtocolVersionError
	if errors.As(err, &rp) || errors.As(err, &ab) || errors.As(err, &ae) || errors.As(err, &pv) || errors.Is(err, ErrNoPassword) {
		return true
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		msg := e.Error()
		for _, c := range clientChecks {
			if strings.HasPrefix(msg, c) {
				return true
			}
		}
	}
	return false
}

// classify returns the class of err; ctx is the attempt's context.
func classify(ctx context.Context, err error) class {
	var (
		pe  *ProtocolError
		ere *ErrorResponseError
		pg  *pgconn.PgError
		ne  net.Error
		tr  *TLSRefusedError
		cv  *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &pg):
		return classServer
	case clientRefused(err):
		return classClientRefused
	case errors.As(err, &tr), errors.As(err, &cv):
		return classTLSRefused
	case errors.As(err, &pe):
		return classProtocol
	case errors.As(err, &ere):
		return classErrorResponse
	case errors.Is(err, ErrGSSUnverified):
		return classUnverified
	case errors.Is(err, ErrGSSRejected):
		return classRejected
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return classCanceled
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout(), ctx.Err() != nil:
		return classTimeout
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return classReset
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return classClosed
	}
	return classOther
}

// verdict is what follows a failed attempt.
type verdict struct {
	// next: try the plan's next method on this address, on a new socket.
	next bool
	// gss: what the failure teaches about GSS encryption on this host with these credentials.
	gss gssLesson
	// final: try no other address or host (the caller's context ended, a protocol violation,
	// libpq's rules for a broken negotiation, or pgx's for errors that another server would
	// repeat: pgconn.connectPreferred).
	final bool
	// leave: try no other address of this host (the server was reached and answered: another
	// address is the same server), go on with the next host.
	leave bool
	// stale: when the attempt followed a remembered answer, that answer may be wrong (the
	// server changed: TLS or hostgssenc turned on): forget it and negotiate the host again,
	// when a connect got in with it since it was learned (connectHost, Cache.GotIn).
	stale bool
}

// gssLesson is what a failure teaches about GSS encryption on a host.
type gssLesson uint8

const (
	gssNothing gssLesson = iota
	// gssStrike: a sign that GSS cannot succeed which one event on the path could also make (a
	// close after the AP-REQ, which is also what a restart or a middlebox does; a KRB-ERROR
	// token from the acceptor, which PostgreSQL never sends while setting up GSS encryption; an
	// ErrorResponse to GSSENCRequest, which a postmaster that cannot fork sends too):
	// remembered only when it comes twice in a row with the same credentials (Cache.StrikeGSS).
	gssStrike
	// gssNo: remembered at once: the KDC says the service principal cannot be had (unknown,
	// no common encryption type).
	gssNo
	// gssNoIfFallbackGetsIn: the server, over the GSS-encrypted channel it authenticated
	// (AP-REP), refused the connection with 28000 before AuthenticationOk. That is pg_hba
	// refusing GSS encryption (no hostgssenc line for it, a hostnogssenc one) or a failed
	// GSSAPI authentication (no pg_ident map for the principal, another krb_realm), which a
	// connection without GSS encryption gets too: the server sends the same SQLSTATE for both
	// (auth.c, ClientAuthentication and auth_failed). Remembered as gssNo only when the same
	// connect then gets in on this host without GSS encryption, which proves the refusal was
	// about the transport; when it does not, nothing.
	gssNoIfFallbackGetsIn
)

// judge returns the verdict on an attempt of method m that failed at st with an error of class
// c (code: its SQLSTATE, for classServer; authOK: the server had sent AuthenticationOk).
// Refusals ('N') are not failures and do not come here. The libpq column is libpq 17
// (fe-connect.c, PQconnectPoll), checked against psql 15.18 where a fake server could show it;
// "fails" means libpq tries nothing else, no other host either (libpq-connect.html, "Specifying
// Multiple Hosts": once a server is reached and authentication fails, no other host is tried).
//
//	failure                                   next method   remembered      libpq
//	caller's context ended                    no (final)    nothing
//	timeout (connect_timeout, context)        no            nothing         next address, then host
//	no socket (DNS, TCP connect)              no            nothing         next address, then host
//	requirepeer, require_auth, channel_binding, sslcertmode, min_protocol_version refuse the server
//	                                          no (final)    nothing         fails
//	'N' to SSLRequest under sslmode=require+  no (final)    'N'             fails ("server does not support SSL, but SSL was required")
//	'E' to SSLRequest                         no (final)    nothing         fails ("error response during SSL exchange")
//	'E' to GSSENCRequest                      yes (new)     GSS: strike     next method, new connection
//	SSLRequest/GSSENCRequest: closed, reset   no (final)    nothing         fails ("server closed the connection")
//	protocol violation (bad byte, extra data) no (final)    nothing         fails (libpq accepts data after 'N')
//	TLS handshake failed, closed, reset       yes (new)     nothing         sslmode=prefer: plaintext, new connection;
//	                                                                        nothing left: fails, no other host
//	client refuses the TLS server (no root certificate file under verify-*, a certificate that
//	does not verify, direct TLS without ALPN)
//	                                          yes (new)     nothing         same; nothing left: fails, no other host
//	service ticket: KDC rejects the principal yes (new)     GSS: no         next method, new connection
//	service ticket: KDC unreachable, other    yes (new)     nothing         same
//	GSS context: KRB-ERROR, server closes     yes (new)     GSS: strike     same
//	GSS context: server fails a check         yes (new)     nothing         same (tampering: never remembered)
//	GSS context: reset, other                 yes (new)     nothing         same
//	startup 57P03 (starting, in recovery)     no (host)     nothing         next host
//	startup 28000 (pg_hba; a failed GSSAPI authentication: no pg_ident map, another krb_realm),
//	before AuthOk                             yes (new)     GSS: no, only   next method, new connection; then fails
//	                                                        if a method
//	                                                        without it then
//	                                                        gets in
//	startup other SQLSTATE, before AuthOk     yes (new)     nothing         same
//	startup 28P01, 3D000, 42501, 53300        no (final)    nothing         28P01, 53300 before AuthenticationOk: next method, then fails
//	startup, after AuthenticationOk           no (final)    nothing         fails
//	server rejected by target_session_attrs   no (host)     nothing         next host (handled before judge)
//	startup: closed, reset, wrap token check  no (final)    nothing         fails
//
// A strike is remembered when it comes twice in a row (gssLesson). A 28000 over GSS encryption
// teaches "no GSS encryption" only when the connect then gets in without it: a failed GSSAPI
// authentication (a missing pg_ident map, a wrong krb_realm) is refused over every transport
// and teaches nothing about any (gssNoIfFallbackGetsIn). An error response, a failed
// TLS handshake or the client's refusal of a TLS server, with no method left to try, fails the
// connect (tryAddr), as in libpq 17 and 18 (a failed TLS open goes to error_return; checked with
// psql 15.18: sslmode=verify-ca, two hosts, the first one's certificate not verifying: the second
// is not tried; with libpq 18: sslnegotiation=direct, the first host a PostgreSQL 16 server). A refusal of
// the TLS server is the client's verdict, not the server's answer: it never teaches that the
// server has no TLS.
func judge(m Method, st step, c class, code string, authOK bool) verdict {
	switch c {
	case classCanceled, classProtocol, classClientRefused:
		return verdict{final: true}
	case classTimeout:
		return verdict{}
	case classTLSRefused:
		return verdict{next: true}
	case classServer:
		switch {
		case code == "57P03":
			return verdict{leave: true}
		case authOK, code == "28P01", code == "3D000", code == "42501", code == "53300":
			// A wrong password is not sent again in another transport, and a server that is
			// full is not asked again for a second backend (pgx stops on the first three too).
			return verdict{final: true}
		case code == "28000":
			v := verdict{next: true, stale: true}
			if m == MethodGSS {
				v.gss = gssNoIfFallbackGetsIn
			}
			return v
		}
		return verdict{next: true}
	}
	switch st {
	case stepDial:
		return verdict{}
	case stepStartup:
		if c == classClosed || c == classReset || c == classUnverified {
			// libpq: "server closed the connection unexpectedly", no other host.
			return verdict{final: true}
		}
		return verdict{}
	case stepSSLRequest:
		return verdict{final: true}
	case stepGSSENCRequest:
		if c == classErrorResponse {
			return verdict{next: true, gss: gssStrike}
		}
		return verdict{final: true}
	case stepServiceTicket:
		if c == classRejected {
			return verdict{next: true, gss: gssNo}
		}
		return verdict{next: true}
	case stepGSSContext:
		if c == classRejected || c == classClosed {
			return verdict{next: true, gss: gssStrike}
		}
		return verdict{next: true}
	}
	return verdict{next: true} // stepTLS
}
