package negotiation

import (
	"context"
	"time"
)

// Trace is a set of hooks called at each step of a logical connect, in the manner of
// net/http/httptrace.ClientTrace. Any hook may be nil. The negotiation code calls them with plain
// data and knows nothing of what they do; package tracing implements them with OpenTelemetry.
//
// Every XxxStart hook returns the context that the negotiation code passes to the matching
// XxxDone hook and uses for the steps nested in it; a hook that has nothing to attach returns
// its argument. Hooks run on the goroutine that connects, one step at a time; hooks of different
// connects run concurrently. Work that the negotiator does for later connects in the background
// (RefreshStart, BackgroundStart) calls its hooks on its own goroutine, under a context of its
// own that holds nothing of the connect that started it (Detach). No hook ever receives a
// password, a ticket, a key or the cancel key.
type Trace struct {
	// ConnectStart is called when a logical connect (one database/sql Connect) begins.
	ConnectStart func(ctx context.Context, info ConnectStartInfo) context.Context
	// ConnectDone is called when the logical connect ends, with its outcome.
	ConnectDone func(ctx context.Context, info ConnectDoneInfo)

	// Decision is called once per host tried, with the plan decided for it.
	Decision func(ctx context.Context, info DecisionInfo)

	// ProbeWaitStart is called when a connect waits for another one's probe of the same host
	// (single flight); ProbeWaitDone when the wait ends.
	ProbeWaitStart func(ctx context.Context, info HostInfo) context.Context
	ProbeWaitDone  func(ctx context.Context, err error)

	// GSSCredentialsStart and GSSCredentialsDone surround the check of the client's Kerberos
	// credentials (once per connect and host, when GSS is allowed).
	GSSCredentialsStart func(ctx context.Context) context.Context
	GSSCredentialsDone  func(ctx context.Context, info GSSCredentialsInfo)

	// DNSStart and DNSDone surround the resolution of a host name.
	DNSStart func(ctx context.Context, info HostInfo) context.Context
	DNSDone  func(ctx context.Context, info DNSDoneInfo)

	// TCPConnectStart and TCPConnectDone surround each new socket (TCP or Unix-domain).
	TCPConnectStart func(ctx context.Context, info DialInfo) context.Context
	TCPConnectDone  func(ctx context.Context, err error)

	// SSLRequestStart is called when SSLRequest is written; SSLRequestDone when its one-byte
	// answer is read ('S' or 'N') or the exchange fails.
	SSLRequestStart func(ctx context.Context, info DialInfo) context.Context
	SSLRequestDone  func(ctx context.Context, info RequestDoneInfo)

	// GSSEncRequestStart is called when GSSENCRequest is written; GSSEncRequestDone when its
	// one-byte answer is read ('G' or 'N') or the exchange fails.
	GSSEncRequestStart func(ctx context.Context, info DialInfo) context.Context
	GSSEncRequestDone  func(ctx context.Context, info RequestDoneInfo)

	// ServiceTicketStart and ServiceTicketDone surround obtaining the service ticket.
	ServiceTicketStart func(ctx context.Context, info HostInfo) context.Context
	ServiceTicketDone  func(ctx context.Context, info ServiceTicketDoneInfo)

	// GSSContextStart and GSSContextDone surround the GSSAPI context establishment (AP-REQ,
	// AP-REP, mutual authentication).
	GSSContextStart func(ctx context.Context, info DialInfo) context.Context
	GSSContextDone  func(ctx context.Context, info GSSContextDoneInfo)

	// TLSHandshakeStart and TLSHandshakeDone surround the TLS handshake.
	TLSHandshakeStart func(ctx context.Context, info TLSHandshakeStartInfo) context.Context
	TLSHandshakeDone  func(ctx context.Context, info TLSHandshakeDoneInfo)

	// StartupStart is called before the StartupMessage is sent; StartupDone after ReadyForQuery,
	// or when startup or authentication fails.
	StartupStart func(ctx context.Context, info DialInfo) context.Context
	StartupDone  func(ctx context.Context, info StartupDoneInfo)

	// SCRAMKeyDerived is called after each PBKDF2 derivation of SCRAM keys (once per user,
	// password, salt and iteration count while they stay cached), on the goroutine that derived
	// them, which may outlive the connect that asked: ctx is context.Background(), with no span.
	SCRAMKeyDerived func(ctx context.Context, info SCRAMKeyDerivedInfo)

	// Fallback is called when the connect gives up a method and goes on with the next one.
	Fallback func(ctx context.Context, info FallbackInfo)

	// RefreshStart is called when a background refresh asks again a question whose remembered
	// negative answer a connect's plan used (refresh.go), RefreshDone when it ends. A refresh
	// is not a logical connect: no ConnectStart, Decision or ConnectDone is called for it. Its
	// steps go through the hooks above under the context RefreshStart returns, on the
	// refresh's own goroutine.
	RefreshStart func(ctx context.Context, info RefreshStartInfo) context.Context
	RefreshDone  func(ctx context.Context, info RefreshDoneInfo)

	// BackgroundStart is called when a background lookup of a host name or recheck of an address
	// remembered down begins (background.go), BackgroundDone when it ends. Like a refresh it is
	// not a logical connect; its steps (DNSStart, DNSDone) go through the hooks above under the
	// context BackgroundStart returns, on the work's own goroutine.
	BackgroundStart func(ctx context.Context, info BackgroundStartInfo) context.Context
	BackgroundDone  func(ctx context.Context, info BackgroundDoneInfo)

	// CredentialStart and CredentialDone bracket an attempt's wait for a credential from
	// Config.Credentials (credentials.go): a password of the application's function, an OAuth
	// bearer token. OAuthDiscovery reports the server's OAUTHBEARER answer (the issuer's
	// discovery URI and scope), CredentialRetry an attempt made again on a new connection with
	// a fresh credential (after discovery, or after a refused credential).
	CredentialStart func(ctx context.Context, info CredentialStartInfo) context.Context
	CredentialDone  func(ctx context.Context, info CredentialDoneInfo)
	OAuthDiscovery  func(ctx context.Context, info OAuthDiscoveryInfo)
	CredentialRetry func(ctx context.Context, info CredentialRetryInfo)

	// Detach is called on a connect's goroutine when the connect starts background work that
	// may outlive it (a refresh, a lookup, a recheck): it returns ctx (context.Background(), or
	// what the Detach of a trace composed before this one returned) with what an observer needs
	// to link that work to the connect of connect, for example the connect span's identity,
	// and nothing of the connect's own state: the work runs beside the connect and the ones
	// after it. The work gets the result as its Trigger.
	Detach func(ctx context.Context, connect context.Context) context.Context
}

// ConnectStartInfo describes a logical connect, from the connection string.
type ConnectStartInfo struct {
	Host       string // first host of the connection string, as written
	Port       uint16
	Database   string
	SSLMode    SSLMode
	GSSEncMode GSSEncMode
}

// ConnectDoneInfo is the outcome of a logical connect.
type ConnectDoneInfo struct {
	Host     string // host connected to (or last tried), as written in the connection string
	Port     uint16
	Method   Method   // method of the established connection; 0 on failure
	Cache    CacheUse // what the cache did for the plan of the host connected to; CacheUseNone on failure
	Attempts int      // sockets opened
	Err      error
	Duration time.Duration
}

// HostInfo names one host of the connection string.
type HostInfo struct {
	Host string
	Port uint16
}

// DecisionInfo is the plan for one host and what it was made from.
type DecisionInfo struct {
	Host   string
	Port   uint16
	Input  Input
	Plan   Plan
	Waited bool // the plan was made after waiting for another connect's probe
	// RoleFirst: the host is tried before hosts written before it, because the role its server
	// showed last is what target_session_attrs wants (Config.TargetSessionAttrs).
	RoleFirst bool
}

// DNSDoneInfo is the outcome of a host name resolution.
type DNSDoneInfo struct {
	Addrs []string // resolved IP addresses
	Err   error
}

// DialInfo names the socket a step happens on.
type DialInfo struct {
	Host    string // as written in the connection string
	Address string // ip:port, or the Unix socket path
	Method  Method // the method being tried
	// RememberedDown: the address was remembered not to answer (Config.DownTTL), so it was
	// tried after the others.
	RememberedDown bool
	// AddressAge is how long ago the host name was resolved to this address, when the answer
	// was remembered (Config.DNSTTL); zero when this connect looked it up, or for hostaddr, an
	// IP address or a Unix socket.
	AddressAge time.Duration
}

// RequestDoneInfo is the outcome of an SSLRequest or GSSENCRequest.
type RequestDoneInfo struct {
	Answer Answer // AnswerYes ('S'/'G'), AnswerNo ('N'), or AnswerUnknown on error
	// CacheHit: the answer was remembered when the request was sent, for GSSENCRequest with the
	// same credentials (the request was sent anyway: the method needs it, or sslmode or
	// gssencmode require it).
	CacheHit bool
	Err      error
}

// TLSHandshakeStartInfo describes a TLS handshake.
type TLSHandshakeStartInfo struct {
	ServerName string
	Direct     bool // a ClientHello without SSLRequest: sslnegotiation=direct, or Learned
	// Learned: direct because the host is remembered to take direct TLS (Known.Direct), not
	// because of sslnegotiation=direct.
	Learned bool
}

// TLSHandshakeDoneInfo is the outcome of a TLS handshake.
type TLSHandshakeDoneInfo struct {
	Version     uint16 // crypto/tls version constant
	CipherSuite uint16
	ALPN        string // the protocol the server selected (RFC 7301), "" for none
	Err         error
}

// StartupDoneInfo is the outcome of startup and authentication.
type StartupDoneInfo struct {
	// AuthMethod is the authentication the server asked for: "password", "md5",
	// "scram-sha-256", "gss", "sspi"; for an AuthenticationOk at once, "trust" on a plaintext or
	// TLS connection and "gss-or-trust" on a GSS-encrypted one (pg_hba gss needs no exchange
	// there, the encrypted channel having authenticated the client, and the server sends the same
	// bytes for trust); "" when unknown.
	AuthMethod string
	// SASLMechanism is the SASL mechanism the client chose: "SCRAM-SHA-256",
	// "SCRAM-SHA-256-PLUS" (channel binding, tls-server-end-point) or "OAUTHBEARER"; "" when
	// the server asked for none.
	SASLMechanism string
	// KeyCached: with SCRAM, ClientKey and ServerKey came from the connector's cache, no PBKDF2
	// was run or waited for (RFC 7677 section 4). Never a key, a salt or an iteration count.
	KeyCached bool
	// SQLState is the SQLSTATE of a server error, if any.
	SQLState string
	// Err is why the startup failed, with pgx's wrappers peeled off (its "failed to connect to
	// `user=... database=...`: addr (host): step: " prefix says again what the connect's own
	// attributes say); errors.Is and errors.As see what pgx's error wrapped.
	Err error
}

// FallbackInfo is why a connect went on with the next method.
type FallbackInfo struct {
	Host          string
	From, To      Method // To is 0 when the host has no method left
	Reason        string // for example "server refused SSLRequest", "TLS handshake failed"
	NewConnection bool   // the next method needs a new socket (and a new server backend)
}

// GSSCredentialsInfo is the outcome of a credentials check. It never holds the principal.
type GSSCredentialsInfo struct {
	Valid  bool   // usable credentials exist
	Reused bool   // answered from the previous check, without reading the credential cache
	Source string // GSSCredentials.Source: "FILE", "DIR", "KEYRING", "KCM", "keytab" or ""
	Err    error
}

// ServiceTicketDoneInfo is the outcome of obtaining a service ticket.
type ServiceTicketDoneInfo struct {
	FromCache bool   // no KDC exchange was needed
	Enctype   string // encryption type of the session key
	Err       error
}

// GSSContextDoneInfo is the outcome of a GSSAPI context establishment.
type GSSContextDoneInfo struct {
	Enctype string
	// Delegated: the client's credentials were forwarded (gssdelegation=1). DelegationErr: they
	// were asked for and not sent, and why. Both zero when delegation was not asked for.
	Delegated     bool
	DelegationErr error
	Err           error
}

// SCRAMKeyDerivedInfo is one derivation of SCRAM keys (PBKDF2, RFC 5802 section 3).
type SCRAMKeyDerivedInfo struct {
	Duration time.Duration
}
