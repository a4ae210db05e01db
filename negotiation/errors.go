package negotiation

import (
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// HostError is why one host of a connection string could not be connected: the step of the
// last attempt that failed there and its cause. A method the server refused where the modes
// allowed doing without it ('N' to SSLRequest under sslmode=prefer, say) is not a failure and
// is not in it. It unwraps to the cause (a *pgconn.PgError for an error of the server, an
// ErrGSSRequired, a net.Error, ...).
type HostError struct {
	Host   string // as written in the connection string
	Port   uint16
	Addr   string // the address of the last attempt (ip:port, or the socket path); "" before one
	Method Method // the method of the last attempt; 0 before one
	Step   string // the step that failed: "TCP connect", "SSLRequest", "TLS handshake", "GSSENCRequest", "service ticket", "GSS context", "startup"; "GSS credentials" for a check of the Kerberos credentials that did not finish (before any socket); "" before a socket otherwise
	Err    error
}

func (e *HostError) Error() string {
	var b strings.Builder
	b.WriteString("host ")
	b.WriteString(e.Host)
	if !strings.HasPrefix(e.Host, "/") || e.Port != 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(int(e.Port)))
	}
	if e.Addr != "" && e.Addr != e.Host {
		b.WriteString(" (")
		b.WriteString(e.Addr)
		b.WriteString(")")
	}
	if e.Step != "" {
		b.WriteString(": ")
		b.WriteString(e.Step)
	}
	b.WriteString(": ")
	b.WriteString(cause(e.Err).Error())
	return b.String()
}

func (e *HostError) Unwrap() error { return e.Err }

// ConnectError is a connect that failed on every host tried, in order: one HostError each.
type ConnectError struct {
	Hosts []*HostError
}

func (e *ConnectError) Error() string {
	if len(e.Hosts) == 1 {
		return "pgconnector: " + e.Hosts[0].Error()
	}
	var b strings.Builder
	b.WriteString("pgconnector: no host could be connected: ")
	for i, h := range e.Hosts {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(h.Error())
	}
	return b.String()
}

// Unwrap returns each host's error, for errors.Is and errors.As.
func (e *ConnectError) Unwrap() []error {
	errs := make([]error, len(e.Hosts))
	for i, h := range e.Hosts {
		errs[i] = h
	}
	return errs
}

// cause strips what pgx puts around an error of one attempt ("failed to connect to `user=...
// database=...`: 127.0.0.1:5432 (host): dial error: ..."), which a HostError says once, better.
// A server's error is its *pgconn.PgError.
func cause(err error) error {
	var or *oauthRejectedError // the server's error with its OAuth status
	if errors.As(err, &or) {
		return or
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg
	}
	for {
		next := peel(err)
		if next == nil {
			break
		}
		err = next
	}
	// This package's own errors say it already.
	var (
		gr *GSSRequiredError
		lb *labeled
	)
	if errors.As(err, &gr) {
		return gr
	}
	if errors.As(err, &lb) {
		return lb
	}
	// A TLS alert of the server (a client certificate it refused, say), in libpq's words.
	if msg, ok := serverAlert(err); ok {
		return &labeled{err: err, msg: msg}
	}
	// Say what happened to the connection as libpq does, not as the system calls saw it.
	switch {
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return &labeled{err: err, msg: "the server reset the connection"}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &labeled{err: err, msg: "the server closed the connection unexpectedly"}
	}
	// The dial error's text repeats the address and the system call.
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" && oe.Err != nil {
		msg := oe.Err.Error()
		var se *os.SyscallError
		if errors.As(oe.Err, &se) {
			msg = se.Err.Error()
		}
		return &labeled{err: err, msg: msg}
	}
	return err
}

// pgxLabels are pgx's names for the step an attempt failed at (pgconn.go, connectOne); the
// HostError's Step says it instead.
var pgxLabels = []string{"dial error", "tls error", "AfterNetConnect failed", "failed to write startup message",
	"failed to receive message", "server error"}

// peel returns what err wraps when err is one of pgx's wrappers, else nil.
func peel(err error) error {
	switch e := err.(type) {
	case *pgconn.ConnectError:
		return e.Unwrap()
	case interface{ Unwrap() []error }:
		if errs := e.Unwrap(); len(errs) == 1 {
			return errs[0]
		}
		return nil
	case interface{ Unwrap() error }:
		inner := e.Unwrap()
		if inner == nil {
			return nil
		}
		prefix, ok := strings.CutSuffix(err.Error(), ": "+inner.Error())
		if !ok {
			return nil
		}
		// "ip:port (host)", pgx's perDialConnectError, or a step label.
		if strings.HasSuffix(prefix, ")") && strings.Contains(prefix, " (") {
			return inner
		}
		for _, l := range pgxLabels {
			if prefix == l {
				return inner
			}
		}
	}
	return nil
}

// labeled keeps an error for errors.Is and errors.As while saying it in other words.
type labeled struct {
	err error
	msg string
}

func (e *labeled) Error() string { return e.msg }
func (e *labeled) Unwrap() error { return e.err }

// RequirePeerError is a server whose Unix-domain socket belongs to another operating-system user
// than requirepeer names (libpq: "requirepeer specifies ..., but actual peer user name is ...").
// It fails the connect: no other host is tried.
type RequirePeerError struct {
	Want, Got string
}

func (e *RequirePeerError) Error() string {
	return "requirepeer specifies " + strconv.Quote(e.Want) + ", but actual peer user name is " + strconv.Quote(e.Got)
}

// checkPeer checks a Unix-domain socket's peer against requirepeer.
func checkPeer(c net.Conn, want string) error {
	got, err := peerUser(c)
	if err != nil {
		return &RequirePeerError{Want: want, Got: "(unknown: " + err.Error() + ")"}
	}
	if got != want {
		return &RequirePeerError{Want: want, Got: got}
	}
	return nil
}

// ErrNoPassword is the client's refusal to answer a password request (AuthenticationCleartextPassword,
// AuthenticationMD5Password or AuthenticationSASL) when the attempt has no password: none in the
// connection string or PGPASSWORD, and no entry of the password file for the attempt's host.
// libpq refuses in the same place with "fe_sendauth: no password supplied" (fe-auth.c,
// pg_fe_sendauth, pg_SASL_init) and tries no other host; so does the connector. Nothing is sent
// to the server.
var ErrNoPassword = errors.New("no password supplied")

// AbortError is an error of the caller's own code during an attempt (a connection hook, say): it
// says nothing about the server, and another host or method would meet it again, so the connect
// stops there. It unwraps to the cause.
type AbortError struct {
	Err error
}

func (e *AbortError) Error() string { return e.Err.Error() }
func (e *AbortError) Unwrap() error { return e.Err }

// alpnProtocol is the ALPN protocol name of PostgreSQL (protocol-flow.html, "SSL Session
// Encryption"; libpq's PG_ALPN_PROTOCOL).
const alpnProtocol = "postgresql"

// ErrDirectTLSNoALPN: with sslnegotiation=direct the server completed the TLS handshake without
// selecting the ALPN protocol "postgresql" (libpq 17's words, fe-secure-openssl.c,
// open_client_SSL). Nothing is sent on such a connection.
var ErrDirectTLSNoALPN = errors.New("direct SSL connection was established without ALPN protocol negotiation extension")

// TLSRefusedError is the client's refusal, before or during the TLS handshake, of a server it
// cannot trust: no root certificate file where sslmode needs one, a root file that cannot be
// read, a certificate that does not verify, direct TLS without ALPN. It is the client's verdict,
// not an answer of the server: nothing of it is remembered (the server's 'S' stays), and it never
// turns encryption off for a later connect. As libpq, sslmode=prefer (and allow, after its
// plaintext try) then goes on in plaintext on a new connection; with no method left the connect
// fails, no other host tried. It unwraps to the cause.
type TLSRefusedError struct {
	Err error
}

func (e *TLSRefusedError) Error() string { return e.Err.Error() }
func (e *TLSRefusedError) Unwrap() error { return e.Err }

// refusedTLS returns err as a *TLSRefusedError (err itself when it is one already).
func refusedTLS(err error) error {
	var tr *TLSRefusedError
	if errors.As(err, &tr) {
		return err
	}
	return &TLSRefusedError{Err: err}
}
