package negotiation

import (
	"context"
	"crypto/md5"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgconnector/pgconnector/internal/scram"
)

// The authentication exchange, from the first message after the StartupMessage to
// AuthenticationOk, is the negotiator's: pgx sends the StartupMessage and reads the server
// through an [authExchange], which answers every authentication request itself (cleartext,
// MD5, SASL SCRAM-SHA-256 and -PLUS, OAUTHBEARER with pgx's OAuthTokenProvider, GSSAPI) and
// lets through only what pgx must see: NegotiateProtocolVersion, AuthenticationOk and what
// follows it, or the ErrorResponse that ends the attempt. pgx's authentication code, and its
// process-wide GSS provider, are never reached. Sources: protocol-flow.html ("Start-up"),
// protocol-message-formats.html, sasl-authentication.html; libpq's fe-auth.c (pg_fe_sendauth,
// check_expected_areq, pg_SASL_init) for what the client refuses.

// authSettings is what an attempt authenticates with, taken from its pgx configuration after
// every hook ran ([Negotiator.ConfigureAuth]).
type authSettings struct {
	user, password string
	requireAuth    requireAuth
	channelBinding string // "disable", "prefer" (the default) or "require"
	oauth          func(context.Context) (string, error)
	minMinor       uint32 // the minor protocol version min_protocol_version asks for: 0 or 2
	// passwordFunc gives the password when password is "" and the server asks for one
	// ([Negotiator.SetPasswordFunc]); it runs at most once.
	passwordFunc func() (string, error)
}

// ProtocolVersionError is the client's refusal of a server whose NegotiateProtocolVersion
// offers a protocol older than min_protocol_version (protocol-message-formats.html,
// "NegotiateProtocolVersion"; libpq 18 fe-protocol3.c, pqGetNegotiateProtocolVersion3). As in
// libpq, no other host is tried after it. Server and Min are minor versions of protocol 3.
type ProtocolVersionError struct {
	Server, Min uint32
}

func (e *ProtocolVersionError) Error() string {
	return fmt.Sprintf(`server only supports protocol version 3.%d, but "min_protocol_version" was set to 3.%d`, e.Server, e.Min)
}

// AuthError is the client's failure of the authentication exchange: the client refused what the
// server asked (require_auth, channel_binding, a method it does not support), or the server's
// part of the exchange did not pass the client's checks (a SCRAM server signature that does not
// verify: the server does not know the password; an iteration count over the limit; a message out
// of order). As libpq, no other method or host is tried after it (libpq-connect.html, "once a
// server is reached and authentication fails"). It names no secret.
type AuthError struct {
	Problem string
	Err     error // the cause, if any
}

func (e *AuthError) Error() string {
	if e.Err != nil {
		return e.Problem + ": " + e.Err.Error()
	}
	return e.Problem
}

func (e *AuthError) Unwrap() error { return e.Err }

// AuthenticationRequest codes (protocol-message-formats.html, AuthenticationOk and following).
const (
	authOk           = 0
	authKerberosV5   = 2
	authCleartext    = 3
	authMD5          = 5
	authGSS          = 7
	authGSSContinue  = 8
	authSSPI         = 9
	authSASL         = 10
	authSASLContinue = 11
	authSASLFinal    = 12
)

// The exchange's phases.
const (
	phaseAuth = iota // before AuthenticationOk: messages read whole and answered here
	phaseOK          // after AuthenticationOk: passed through, bounded (authObserver)
	phaseDone        // after an ErrorResponse: passed through as it is
)

// authExchange is the reader of the server's messages that pgx's frontend is built on.
type authExchange struct {
	r   io.Reader // the server, as pgx reads it
	w   io.Writer // the connection, as pgx writes it
	at  *attempt
	s   authSettings
	ctx context.Context // the attempt's: bounds a SCRAM key derivation and the KDC exchange

	phase int
	out   []byte // bytes for pgx, from the messages it must see
	err   error  // the exchange's failure, returned from then on
	after authObserver
	// The server's bytes are read into rb, as many as one read gives (the server sends its
	// answer and what follows AuthenticationOk in one segment: one read system call, as pgx's
	// own buffered reads), and parsed there: rb[lo:hi] is what is not consumed yet. What
	// follows AuthenticationOk (or an ErrorResponse) goes to pgx from rest, then from r.
	rb     []byte
	lo, hi int
	rest   prefixReader
	rbuf   [512]byte

	finished     bool // the client completed an exchange (libpq's client_finished_auth)
	channelBound bool
	sasl         *scram.Exchange
	saslState    int // 0: none, 1: client-first sent, 2: client-final sent, 3: verified
	oauth        bool
	ob           *oauthExchange // the OAUTHBEARER exchange (oauth.go)
	// pwCred is the password Config.Credentials gave (needPassword), pwReq its request.
	pwCred  *Credential
	pwReq   CredentialRequest
	gss     GSSAuthExchange
	gssDone bool
}

func (x *authExchange) Read(b []byte) (int, error) {
	for len(x.out) == 0 {
		switch {
		case x.err != nil:
			return 0, x.err
		case x.phase == phaseOK:
			return x.after.Read(b)
		case x.phase == phaseDone:
			return x.rest.Read(b)
		}
		if err := x.step(); err != nil {
			x.err = err
			if x.sasl != nil && x.saslState < 3 {
				x.sasl.Abandon()
			}
			return 0, err
		}
	}
	n := copy(b, x.out)
	x.out = x.out[n:]
	return n, nil
}

// need reads until rb[lo:hi] holds n bytes (n <= 2005: a header and a body of at most 2000).
func (x *authExchange) need(n int) error {
	if x.hi-x.lo >= n {
		return nil
	}
	if x.rb == nil {
		x.rb = x.rbuf[:]
	}
	if x.lo > 0 {
		x.hi = copy(x.rb, x.rb[x.lo:x.hi])
		x.lo = 0
	}
	if n > len(x.rb) {
		x.rb = append(x.rb[:x.hi], make([]byte, n-x.hi)...)
	}
	for x.hi < n {
		k, err := x.r.Read(x.rb[x.hi:])
		x.hi += k
		if err != nil && x.hi < n {
			return unexpectedEOF(err)
		}
	}
	return nil
}

// step reads one message of the authentication phase and answers it, or queues it for pgx.
func (x *authExchange) step() error {
	if err := x.need(5); err != nil {
		return err
	}
	hdr := x.rb[x.lo : x.lo+5]
	typ := hdr[0]
	length := int(binary.BigEndian.Uint32(hdr[1:]))
	if length < 4 {
		return errStartup(fmt.Sprintf("a message %q with length %d", typ, length))
	}
	// The bounds of authObserver: libpq's for the messages before AuthenticationOk.
	switch typ {
	case 'E':
		if length > 30000 {
			return errStartup(fmt.Sprintf("an ErrorResponse of %d bytes during startup (libpq allows 30000)", length))
		}
		// pgx reports it. The server ended the exchange (28P01: a wrong password): keys
		// derived for it were not proven, and are not kept.
		if x.sasl != nil && x.saslState < 3 {
			x.sasl.Abandon()
		}
		if (x.ob != nil && x.ob.state == oauthErrorSent) || x.pwCred != nil {
			if err := x.need(1 + length); err != nil {
				return err
			}
			msg := x.rb[x.lo : x.lo+1+length]
			if err := x.oauthErrorResponse(msg); err != nil {
				return err
			}
			x.passwordRefused(msg)
		}
		x.rest = prefixReader{p: x.rb[x.lo:x.hi], r: x.r}
		x.lo = x.hi
		x.phase = phaseDone
		return nil
	case 'R', 'v':
		if length < 8 || length > 2000 {
			return errStartup(fmt.Sprintf("a message %q of %d bytes during authentication (libpq allows 8 to 2000)", typ, length))
		}
	default:
		return errStartup(fmt.Sprintf("message type 0x%02x where an authentication request was expected", typ))
	}
	if err := x.need(1 + length); err != nil {
		return err
	}
	msg := x.rb[x.lo : x.lo+1+length]
	x.lo += 1 + length
	if typ == 'v' {
		// The newest protocol version the server supports: PostgreSQL sends the whole
		// number (3 << 16 | minor, backend_startup.c, SendNegotiateProtocolVersion), pgx reads
		// the low 16 bits as the minor; so do we. Refused below min_protocol_version with
		// libpq's words (pgx would say "server protocol version too low" and let the next
		// host be tried).
		newest := binary.BigEndian.Uint32(msg[5:])
		if minor := newest & 0xFFFF; minor < x.s.minMinor {
			return &ProtocolVersionError{Server: minor, Min: x.s.minMinor}
		}
		x.out = msg
		return nil
	}
	body := msg[5:]
	code := binary.BigEndian.Uint32(body)
	if x.at.authMethod == "" {
		x.at.authMethod = authMethodName(code)
		if code == authOk && x.at.method == MethodGSS {
			x.at.authMethod = authGSSOrTrust
		}
	}
	if code == authOk {
		if err := x.checkOK(); err != nil {
			return err
		}
		x.at.authOK.Store(true)
		x.out = msg
		x.phase = phaseOK
		x.rest = prefixReader{p: x.rb[x.lo:x.hi], r: x.r}
		x.lo = x.hi
		x.after = authObserver{r: &x.rest}
		return nil
	}
	if err := x.checkRequest(code); err != nil {
		return err
	}
	data := body[4:]
	switch code {
	case authCleartext:
		if err := x.needPassword(); err != nil {
			return err
		}
		x.finished = true
		return x.send(&pgproto3.PasswordMessage{Password: x.s.password})
	case authMD5:
		if err := x.needPassword(); err != nil {
			return err
		}
		if len(data) != 4 {
			return errStartup(fmt.Sprintf("an AuthenticationMD5Password with a salt of %d bytes", len(data)))
		}
		x.finished = true
		return x.send(&pgproto3.PasswordMessage{Password: md5Password(x.s.user, x.s.password, data)})
	case authGSS, authSSPI:
		return x.startGSS()
	case authGSSContinue:
		if x.gss == nil || x.gssDone {
			return x.outOfOrder("AuthenticationGSSContinue")
		}
		return x.continueGSS(data)
	case authSASL:
		if x.sasl != nil || x.oauth {
			return x.outOfOrder("AuthenticationSASL")
		}
		return x.startSASL(data)
	case authSASLContinue:
		if x.oauth {
			return x.continueOAuth(data)
		}
		if x.sasl == nil || x.saslState != 1 {
			return x.outOfOrder("AuthenticationSASLContinue")
		}
		final, err := x.sasl.ServerFirst(x.ctx, data)
		if err != nil {
			if x.ctx.Err() != nil {
				return err // the deadline or the caller: the wait, not the server, failed
			}
			return &AuthError{Problem: "SCRAM authentication failed", Err: err}
		}
		x.saslState = 2
		return x.send(&pgproto3.SASLResponse{Data: final})
	case authSASLFinal:
		if x.oauth {
			// OAUTHBEARER has no additional data on success (RFC 7628 section 3.2.1; libpq:
			// oauth_exchange).
			if len(data) > 0 || x.ob == nil || x.ob.state != oauthSent || !x.finished {
				return &AuthError{Problem: "server sent unexpected additional OAuth data"}
			}
			return nil
		}
		if x.sasl == nil || x.saslState != 2 {
			return x.outOfOrder("AuthenticationSASLFinal")
		}
		if err := x.sasl.ServerFinal(data); err != nil {
			return &AuthError{Problem: "SCRAM authentication failed", Err: err}
		}
		x.saslState = 3
		x.finished = true
		x.at.keyCached = x.sasl.Cached()
		return nil
	}
	// libpq: "authentication method %u not supported" (fe-auth.c, pg_fe_sendauth).
	return &AuthError{Problem: fmt.Sprintf("authentication method %d not supported", code)}
}

func (x *authExchange) outOfOrder(what string) error {
	return errStartup(what + " out of order")
}

// checkOK holds AuthenticationOk to the client's requirements (fe-auth.c, check_expected_areq,
// AUTH_REQ_OK), and to mutual authentication: an exchange the client started must have ended
// with the server's proof (pgx and libpq refuse an AuthenticationOk in the middle of SCRAM).
func (x *authExchange) checkOK() error {
	if x.sasl != nil && x.saslState != 3 {
		return &AuthError{Problem: "the server sent AuthenticationOk before completing the SCRAM exchange: it did not prove that it knows the password"}
	}
	if x.oauth && (!x.finished || x.ob == nil || x.ob.state != oauthSent) {
		// After a discovery message, or after the server refused the token.
		return &AuthError{Problem: "server sent AuthenticationOk after an OAuth error or without an OAuth bearer token"}
	}
	if x.gss != nil && !x.gssDone {
		return &AuthError{Problem: "the server sent AuthenticationOk before completing the GSSAPI exchange: it was not authenticated"}
	}
	if x.s.channelBinding == "require" && !x.channelBound {
		return &AuthError{Problem: "channel binding required, but server authenticated client without channel binding"}
	}
	ra := &x.s.requireAuth
	if ra.text != "" && ra.authRequired && !x.finished {
		// A GSS-encrypted channel counts as gss: the server then skips the exchange.
		if !(ra.allows(authGSS) && x.at.method == MethodGSS) {
			return ra.failure("server did not complete authentication")
		}
	}
	return nil
}

// checkRequest holds an authentication request to channel_binding and require_auth
// (check_expected_areq), before anything is sent.
func (x *authExchange) checkRequest(code uint32) error {
	if x.s.channelBinding == "require" {
		switch code {
		case authSASL, authSASLContinue, authSASLFinal:
		default:
			return &AuthError{Problem: "channel binding required but not supported by server's authentication request"}
		}
	}
	ra := &x.s.requireAuth
	if ra.text == "" {
		return nil
	}
	switch code {
	case authCleartext, authMD5, authGSS, authSSPI, authSASL:
		if !ra.allows(code) {
			return ra.failure(authRequestDescription(code))
		}
	}
	return nil
}

// startSASL picks the mechanism among the server's and sends SASLInitialResponse, with libpq's
// checks in libpq's order (fe-auth.c, pg_SASL_init): channel_binding=require without TLS; a
// SCRAM-SHA-256-PLUS offered over a connection without TLS (a server offers it only over TLS:
// something in between stripped TLS, or the server is not what it seems), refused whatever
// channel_binding says; no mechanism this client supports; the chosen mechanism not allowed by
// require_auth (named by its SASL name); channel_binding=require without -PLUS.
func (x *authExchange) startSASL(data []byte) error {
	mechs, err := saslMechanisms(data)
	if err != nil {
		return err
	}
	if x.s.channelBinding == "require" && !x.tlsInUse() {
		return &AuthError{Problem: "channel binding required, but SSL not in use"}
	}
	plus := slices.Contains(mechs, scram.MechanismSHA256Plus)
	if plus && !x.tlsInUse() {
		return &AuthError{Problem: "server offered SCRAM-SHA-256-PLUS authentication over a non-SSL connection"}
	}
	ra := &x.s.requireAuth
	// OAUTHBEARER with pgx's provider whatever else is offered (pgx's choice), else when no
	// SCRAM mechanism is (libpq's: pg_SASL_init picks it only then; a PostgreSQL server never
	// offers both).
	if slices.Contains(mechs, "OAUTHBEARER") && (x.s.oauth != nil || !slices.Contains(mechs, scram.MechanismSHA256) && !plus) {
		if ra.text != "" && !ra.allowsMechanism("OAUTHBEARER") {
			return ra.failure("server requested OAUTHBEARER authentication")
		}
		if x.s.channelBinding == "require" {
			return &AuthError{Problem: "channel binding is required, but server did not offer an authentication method that supports channel binding"}
		}
		return x.startOAuth()
	}
	state, tlsOK := x.tlsState()
	var (
		mech      string
		cb        []byte
		advertise bool
	)
	switch {
	case tlsOK && plus && x.s.channelBinding != "disable":
		mech = scram.MechanismSHA256Plus
	case slices.Contains(mechs, scram.MechanismSHA256):
		mech = scram.MechanismSHA256
		advertise = tlsOK && x.s.channelBinding != "disable"
	case x.s.channelBinding == "require" && plus:
		return &AuthError{Problem: "channel binding required, but the TLS connection is hidden by the connection AfterNetConnect returned"}
	default:
		return &AuthError{Problem: "none of the server's SASL authentication mechanisms are supported"}
	}
	if ra.text != "" && !ra.allowsMechanism(mech) {
		// libpq names the mechanism it chose: "server requested SCRAM-SHA-256 authentication".
		return ra.failure("server requested " + mech + " authentication")
	}
	if x.s.channelBinding == "require" && mech != scram.MechanismSHA256Plus {
		if plus {
			return &AuthError{Problem: "channel binding required, but the TLS connection is hidden by the connection AfterNetConnect returned"}
		}
		return &AuthError{Problem: "channel binding is required, but server did not offer an authentication method that supports channel binding"}
	}
	if err := x.needPassword(); err != nil {
		return err
	}
	if mech == scram.MechanismSHA256Plus {
		b, err := scram.EndPointBinding(state)
		if err != nil {
			return &AuthError{Problem: "channel binding data could not be computed from the server certificate", Err: err}
		}
		cb = b
	}
	ex, err := x.at.n.scram.Start(x.at.scramServer(), mech, x.s.user, x.s.password, cb, advertise)
	if err != nil {
		return &AuthError{Problem: "SCRAM authentication could not start", Err: err}
	}
	x.sasl = ex
	x.saslState = 1
	x.channelBound = cb != nil
	x.at.saslMechanism = mech
	return x.send(&pgproto3.SASLInitialResponse{AuthMechanism: mech, Data: ex.ClientFirst()})
}

// scramServer names the server of the attempt's SCRAM exchange for scram.Keys.Start, whose
// derivations wait only for that server's: the network and address the attempt dialed ("tcp
// 192.0.2.1:5432", "unix /tmp/.s.PGSQL.5432"), or the address and port of its host if it dialed
// nothing.
func (at *attempt) scramServer() string {
	if at.dialAddress != "" {
		return at.dialNetwork + " " + at.dialAddress
	}
	return net.JoinHostPort(at.addr, strconv.Itoa(int(at.host.Port)))
}

// saslMechanisms parses AuthenticationSASL's list: names ending with a zero byte, then an empty
// one.
func saslMechanisms(data []byte) ([]string, error) {
	var mechs []string
	for len(data) > 0 {
		i := slices.Index(data, 0)
		if i < 0 {
			return nil, errStartup("an AuthenticationSASL whose mechanism list is not terminated")
		}
		if i == 0 {
			return mechs, nil
		}
		mechs = append(mechs, string(data[:i]))
		data = data[i+1:]
	}
	return nil, errStartup("an AuthenticationSASL whose mechanism list is not terminated")
}

// tlsInUse reports whether the attempt's method is TLS.
func (x *authExchange) tlsInUse() bool {
	return x.at.method == MethodSSL || x.at.method == MethodDirectSSL
}

// tlsState returns the TLS connection state of the connection pgx writes to, when the attempt
// is over TLS and it can be found (an AfterNetConnect of the application may have wrapped it in
// a type that hides it: then there is no channel binding, as with pgx).
func (x *authExchange) tlsState() (*tls.ConnectionState, bool) {
	if !x.tlsInUse() {
		return nil, false
	}
	var c any = x.w
	for range 8 {
		switch v := c.(type) {
		case interface{ ConnectionState() tls.ConnectionState }:
			st := v.ConnectionState()
			return &st, st.HandshakeComplete && len(st.PeerCertificates) > 0
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil, false
		}
	}
	return nil, false
}

// startGSS answers AuthenticationGSS (and SSPI, which libpq built with GSSAPI and without SSPI
// answers the same way: fe-auth.c, pg_fe_sendauth) with the first token of a GSSAPI context
// for the attempt's host.
func (x *authExchange) startGSS() error {
	if x.gss != nil {
		return x.outOfOrder("AuthenticationGSS")
	}
	ga, ok := x.at.n.cfg.GSS.(GSSAuthenticator)
	if !ok {
		return &AuthError{Problem: "the server requested GSSAPI authentication, but this client has no Kerberos support", Err: x.at.n.cfg.NoGSS}
	}
	ex, err := ga.Authenticate(x.ctx, x.at.host.Host)
	if err != nil {
		return fmt.Errorf("GSSAPI authentication failed: %w", err)
	}
	x.gss = ex
	return x.continueGSS(nil)
}

// continueGSS gives the server's token to the context and sends its answer in a GSSResponse.
func (x *authExchange) continueGSS(in []byte) error {
	out, done, err := x.gss.Step(in)
	if err != nil {
		return fmt.Errorf("GSSAPI authentication failed: %w", err)
	}
	if done {
		x.gssDone = true
		x.finished = true
	}
	if len(out) == 0 {
		return nil
	}
	return x.send(&pgproto3.GSSResponse{Data: out})
}

// send writes one message to the server.
func (x *authExchange) send(m pgproto3.FrontendMessage) error {
	b, err := m.Encode(nil)
	if err != nil {
		return err
	}
	_, err = x.w.Write(b)
	return err
}

// md5Password is AuthenticationMD5Password's answer: "md5" + md5(md5(password + user) + salt),
// in hex (protocol-flow.html, "MD5 password").
func md5Password(user, password string, salt []byte) string {
	inner := md5.Sum([]byte(password + user))
	h := md5.New()
	var hx [32]byte
	hex.Encode(hx[:], inner[:])
	h.Write(hx[:])
	h.Write(salt)
	return "md5" + hex.EncodeToString(h.Sum(nil))
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// authRequestDescription is libpq's reason for a refused request (fe-auth.c,
// auth_method_description).
func authRequestDescription(code uint32) string {
	switch code {
	case authCleartext:
		return "server requested a cleartext password"
	case authMD5:
		return "server requested a hashed password"
	case authGSS, authGSSContinue:
		return "server requested GSSAPI authentication"
	case authSSPI:
		return "server requested SSPI authentication"
	case authSASL, authSASLContinue, authSASLFinal:
		return "server requested SASL authentication"
	}
	return "server requested an unknown authentication type"
}

// requireAuth is require_auth parsed as libpq 18 parses it (fe-connect.c, pqConnectOptions2): a
// list of methods the server may ask for, or, with every element prefixed by '!', of methods it
// may not; "none" (or "!none") says whether the server may skip authentication. Like libpq, it
// keeps a set of authentication request codes and, apart, a set of SASL mechanisms
// (scram-sha-256, oauth): a SASL request is allowed while any mechanism is, and the mechanism the
// client picks is checked when it picks it (fe-auth.c, pg_SASL_init).
type requireAuth struct {
	text         string // as given; "" means no requirement
	negated      bool
	codes        uint32 // 1<<code for each authentication request code allowed
	scram, oauth bool   // the SASL mechanisms allowed
	authRequired bool
}

// The request codes each require_auth method stands for (fe-connect.c, pqConnectOptions2): GSS and
// SSPI share AuthenticationGSSContinue.
const (
	saslCodes = 1<<authSASL | 1<<authSASLContinue | 1<<authSASLFinal
	allCodes  = ^uint32(0)
)

// RequireAuthError is a require_auth value that libpq refuses, with libpq's reason
// (fe-connect.c, pqConnectOptions2): negative and positive methods mixed, a method named twice,
// or a method libpq does not know. Method is the element at fault as libpq quotes it (with its
// '!' where libpq keeps it).
type RequireAuthError struct {
	Kind   RequireAuthProblem
	Method string
}

// RequireAuthProblem is what is wrong with a require_auth value.
type RequireAuthProblem uint8

const (
	RequireAuthNegativeAfterPositive RequireAuthProblem = iota + 1 // "!md5" after "scram-sha-256"
	RequireAuthPositiveAfterNegative                               // "scram-sha-256" after "!password"
	RequireAuthDuplicate                                           // a method named twice
	RequireAuthUnknown                                             // not a method libpq knows
)

// Error is libpq's message. The method is shown only when it cannot be part of a secret (a
// require_auth left empty before password=... in a connection string takes the rest as its
// value): short, printable, without '=', quotes, a backslash or white space.
func (e *RequireAuthError) Error() string {
	m := quoteMethod(e.Method)
	switch e.Kind {
	case RequireAuthNegativeAfterPositive:
		return "negative require_auth method " + m + " cannot be mixed with non-negative methods"
	case RequireAuthPositiveAfterNegative:
		return "require_auth method " + m + " cannot be mixed with negative methods"
	case RequireAuthDuplicate:
		return "require_auth method " + m + " is specified more than once"
	default:
		return "invalid require_auth value: " + m
	}
}

func quoteMethod(s string) string {
	if len(s) > 64 {
		return "(value not shown)"
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '=' || c == '"' || c == '\'' || c == '`' || c == '\\' {
			return "(value not shown)"
		}
	}
	return `"` + s + `"`
}

// ParseRequireAuth checks require_auth s as libpq 18 does when it connects (fe-connect.c,
// pqConnectOptions2): elements separated by commas, taken as they are (no white space is
// trimmed), each one of password, md5, gss, sspi, scram-sha-256, oauth and none, all or none of
// them prefixed by '!', none twice. The error is a *RequireAuthError.
func ParseRequireAuth(s string) error {
	_, err := parseRequireAuth(s)
	return err
}

// parseRequireAuth parses s; the connection string's reading checked it (ParseRequireAuth),
// but a hook may have changed it since.
func parseRequireAuth(s string) (requireAuth, error) {
	ra := requireAuth{text: s}
	if s == "" {
		return ra, nil
	}
	ra.authRequired = true
	for i, part := range strings.Split(s, ",") {
		m := part
		if strings.HasPrefix(m, "!") {
			if i == 0 {
				// Everything allowed, nothing required, and the methods named taken away.
				ra.negated, ra.authRequired = true, false
				ra.codes, ra.scram, ra.oauth = allCodes, true, true
			} else if !ra.negated {
				return ra, &RequireAuthError{Kind: RequireAuthNegativeAfterPositive, Method: m}
			}
			m = m[1:]
		} else if ra.negated {
			return ra, &RequireAuthError{Kind: RequireAuthPositiveAfterNegative, Method: m}
		}
		var bits uint32
		var mech *bool
		switch m {
		case "password":
			bits = 1 << authCleartext
		case "md5":
			bits = 1 << authMD5
		case "gss":
			bits = 1<<authGSS | 1<<authGSSContinue
		case "sspi":
			bits = 1<<authSSPI | 1<<authGSSContinue
		case "scram-sha-256":
			mech = &ra.scram
		case "oauth":
			mech = &ra.oauth
		case "none":
			// !none: the server must ask for something; none: it may ask for nothing.
			if ra.authRequired == ra.negated {
				return ra, &RequireAuthError{Kind: RequireAuthDuplicate, Method: part}
			}
			ra.authRequired = ra.negated
			continue
		default:
			return ra, &RequireAuthError{Kind: RequireAuthUnknown, Method: m}
		}
		dup := false
		switch {
		case mech != nil:
			dup = *mech != ra.negated
			*mech = !ra.negated
		case ra.negated:
			dup = ra.codes&bits == 0
			ra.codes &^= bits
		default:
			dup = ra.codes&bits == bits
			ra.codes |= bits
		}
		if dup {
			return ra, &RequireAuthError{Kind: RequireAuthDuplicate, Method: part}
		}
	}
	// SASL requests are allowed when (and only when) a SASL mechanism is.
	if ra.scram || ra.oauth {
		ra.codes |= saslCodes
	} else {
		ra.codes &^= saslCodes
	}
	return ra, nil
}

// requireAuthOf returns require_auth s parsed, from the last parse when s is the same: a
// connector's require_auth seldom changes from one connect to the next, so the connect path does
// not parse it again.
func (n *Negotiator) requireAuthOf(s string) (requireAuth, error) {
	if s == "" {
		return requireAuth{}, nil
	}
	if p := n.requireAuth.Load(); p != nil && p.text == s {
		return *p, nil
	}
	ra, err := parseRequireAuth(s)
	if err == nil {
		n.requireAuth.Store(&ra)
	}
	return ra, err
}

// allows reports whether the request code is allowed (fe-auth.c, check_expected_areq).
func (ra *requireAuth) allows(code uint32) bool {
	return code < 32 && ra.codes&(1<<code) != 0
}

// allowsMechanism reports whether the SASL mechanism the client picked is allowed (fe-auth.c,
// pg_SASL_init): scram-sha-256 covers SCRAM-SHA-256 and -PLUS, oauth OAUTHBEARER.
func (ra *requireAuth) allowsMechanism(mech string) bool {
	switch mech {
	case scram.MechanismSHA256, scram.MechanismSHA256Plus:
		return ra.scram
	case "OAUTHBEARER":
		return ra.oauth
	}
	return false
}

// failure is libpq's error for a refused method: `authentication method requirement "..."
// failed: <reason>`.
func (ra *requireAuth) failure(reason string) error {
	return &AuthError{Problem: fmt.Sprintf("authentication method requirement %q failed: %s", ra.text, reason)}
}

// ConfigureAuth takes the authentication settings of an attempt's configuration (user, password,
// require_auth, channel_binding, OAuthTokenProvider) into the attempt, whose exchange the
// negotiator runs, and leaves pgx a configuration that expects none: no password, no
// require_auth, no channel_binding, no GSS provider. Call it after [Negotiator.Configure] and
// after every hook that may change these (a BeforeConnect setting the password per connection).
// Without it the attempt authenticates with cfg as it is when pgx connects, and pgx's own
// require_auth and channel_binding checks would refuse the AuthenticationOk it is shown.
func (n *Negotiator) ConfigureAuth(ctx context.Context, cfg *pgconn.Config) error {
	at, _ := ctx.Value(attemptKey{}).(*attempt)
	if at == nil || at.n != n {
		return errors.New("pgconnector: connection attempt did not come through the negotiator")
	}
	s, err := n.authSettingsOf(cfg)
	if err != nil {
		return &AbortError{Err: err}
	}
	at.auth, at.authSet = s, true
	cfg.Password = ""
	cfg.RequireAuth = ""
	cfg.ChannelBinding = "disable"
	cfg.OAuthTokenProvider = nil
	return nil
}

// needPassword makes sure the exchange has a password for the server's request: the
// configuration's, else what the attempt's password function gives (looked up now, when a
// server asks, not before: a server that trusts the client costs no lookup). ErrNoPassword when
// there is none; the function's error is the caller's own (AbortError).
func (x *authExchange) needPassword() error {
	if creds := x.at.n.cfg.Credentials; x.s.password == "" && x.pwCred == nil && creds != nil && creds.Has(CredentialPassword) {
		x.pwReq = x.credentialRequest(CredentialPassword)
		var c Credential
		if st := x.at.creds; st != nil && st.next != nil && st.req.Kind == CredentialPassword {
			c, st.next = *st.next, nil // fetched for this attempt, after the one before it
		} else {
			var err error
			if c, err = x.at.getCredential(x.ctx, &x.pwReq); err != nil {
				return err
			}
		}
		x.pwCred = &c
		x.s.password = c.Secret
	}
	if x.s.password == "" && x.s.passwordFunc != nil {
		f := x.s.passwordFunc
		x.s.passwordFunc = nil
		pw, err := f()
		if err != nil {
			return &AbortError{Err: err}
		}
		x.s.password = pw
	}
	if x.s.password == "" {
		return ErrNoPassword
	}
	return nil
}

// passwordRefused reads the server's ErrorResponse msg (a whole message) after a password of
// Config.Credentials was sent: 28P01 (invalid_password), or 28000 (what a server answers whose
// PAM checks the password, as cloud IAM servers do), drops the password (Credentials.Refused)
// and asks for the attempt to be made again once with a fresh one (credRetry).
func (x *authExchange) passwordRefused(msg []byte) {
	if x.pwCred == nil {
		return
	}
	var er pgproto3.ErrorResponse
	if er.Decode(msg[5:]) != nil || er.Code != "28P01" && er.Code != "28000" {
		return
	}
	x.at.n.cfg.Credentials.Refused(&x.pwReq, *x.pwCred)
	x.at.retryState().want(retryPasswordRefused, x.pwReq)
}

// SetPasswordFunc gives the attempt ctx carries a password looked up only when the server asks
// for one (AuthenticationCleartextPassword, AuthenticationMD5Password or a SCRAM mechanism) and
// the configuration taken by [Negotiator.ConfigureAuth] has none: f runs at most once per
// attempt, during its authentication exchange, on the connect's goroutine. Its error fails the
// connect as an [AbortError] (no other host or method). Call it after ConfigureAuth; it fails
// when ctx carries no attempt of this negotiator.
func (n *Negotiator) SetPasswordFunc(ctx context.Context, f func() (string, error)) error {
	at, _ := ctx.Value(attemptKey{}).(*attempt)
	if at == nil || at.n != n || !at.authSet {
		return errors.New("pgconnector: connection attempt did not come through the negotiator")
	}
	at.auth.passwordFunc = f
	return nil
}

func (n *Negotiator) authSettingsOf(cfg *pgconn.Config) (authSettings, error) {
	ra, err := n.requireAuthOf(cfg.RequireAuth)
	if err != nil {
		return authSettings{}, err
	}
	cb := cfg.ChannelBinding
	if cb == "" {
		cb = "prefer"
	}
	var minMinor uint32
	switch cfg.MinProtocolVersion {
	case "3.2", "latest": // pgconn.parseProtocolVersion
		minMinor = 2
	}
	return authSettings{user: cfg.User, password: cfg.Password, requireAuth: ra, channelBinding: cb, oauth: cfg.OAuthTokenProvider, minMinor: minMinor}, nil
}

// prefixReader reads p, then r.
type prefixReader struct {
	p []byte
	r io.Reader
}

func (pr *prefixReader) Read(b []byte) (int, error) {
	if len(pr.p) > 0 {
		n := copy(b, pr.p)
		pr.p = pr.p[n:]
		return n, nil
	}
	return pr.r.Read(b)
}
