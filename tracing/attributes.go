package tracing

import "go.opentelemetry.io/otel/attribute"

// ScopeName is the instrumentation scope name of the tracer: the import path of this package.
const ScopeName = "github.com/pgconnector/pgconnector/tracing"

// Version is the instrumentation scope version of the tracer.
const Version = "0.1.0"

// Span names.
const (
	SpanConnect        = "postgresql.connect"
	SpanProbeWait      = "postgresql.probe_wait"
	SpanGSSCredentials = "postgresql.gss_credentials"
	SpanDNSLookup      = "postgresql.dns_lookup"
	SpanTCPConnect     = "postgresql.tcp_connect"
	SpanGSSEncRequest  = "postgresql.gssenc_request"
	SpanServiceTicket  = "postgresql.service_ticket"
	SpanGSSContext     = "postgresql.gss_context"
	SpanSSLRequest     = "postgresql.ssl_request"
	SpanTLSHandshake   = "postgresql.tls_handshake"
	SpanStartup        = "postgresql.startup"
	SpanFallback       = "postgresql.fallback"
)

// EventDecision is the name of the event added to the connect span for each host's plan, with
// the host (server.address, server.port) and the plan's attributes: pgconnector.plan,
// pgconnector.plan.skipped, pgconnector.cache.hit, pgconnector.probe.waited,
// pgconnector.gss.credentials. A host decided twice (a remembered answer that proved wrong) has
// two.
const EventDecision = "decision"

// Attribute keys of this project. The keys of the OpenTelemetry semantic conventions
// (db.system.name, db.namespace, server.address, error.type, ...) come from the semconv package.
const (
	// SSLModeKey is the requested sslmode ("disable" ... "verify-full"). Span: connect.
	SSLModeKey = attribute.Key("pgconnector.sslmode")
	// GSSEncModeKey is the requested gssencmode ("disable", "prefer", "require"). Span: connect.
	GSSEncModeKey = attribute.Key("pgconnector.gssencmode")
	// TransportKey is the protection of the established connection: "plain", "tls" or "gss".
	// Span: connect, on success.
	TransportKey = attribute.Key("pgconnector.transport")
	// CacheHitKey, on the decision event, is true when a remembered server answer changed the
	// host's plan (a method left out) or confirmed it (the server is remembered to accept the
	// request the plan sends first), false when the plan sends GSSENCRequest or SSLRequest first
	// otherwise, and absent when no remembered answer could matter ([negotiation.Plan.CacheUse];
	// the decision cache metrics count the same). On the connect span it is that of the decision
	// of the host connected to (absent on failure). On the ssl_request and gssenc_request spans it
	// is true when that request's answer was already remembered.
	CacheHitKey = attribute.Key("pgconnector.cache.hit")
	// AttemptsKey is the number of sockets the connect opened. Span: connect.
	AttemptsKey = attribute.Key("pgconnector.attempts")
	// RowsAffectedKey is the row count of a statement that changes or copies rows: the count in
	// PostgreSQL's command tag (INSERT 0 n, UPDATE n, DELETE n, MERGE n, COPY n; PostgreSQL
	// documentation, protocol-message-formats.html, CommandComplete), as pgx's
	// CommandTag.RowsAffected reads it, and database/sql's Result.RowsAffected of an exec.
	// db.response.returned_rows (semantic conventions) is the count of a statement that returns
	// rows. Span: a statement's, on success.
	RowsAffectedKey = attribute.Key("pgconnector.rows_affected")
	// PlanKey is the ordered methods decided for a host, for example "ssl,plain".
	// Event: decision (of that host).
	PlanKey = attribute.Key("pgconnector.plan")
	// PlanSkippedKey is the methods the cache let the plan leave out, for example "ssl"; set only
	// when there are some. Event: decision (of that host).
	PlanSkippedKey = attribute.Key("pgconnector.plan.skipped")
	// RoleFirstKey is true when the host was tried before hosts written before it because the
	// role its server showed last is the one target_session_attrs wants. Absent otherwise.
	// Event: decision.
	RoleFirstKey = attribute.Key("pgconnector.host.role_first")
	// ProbeWaitedKey is true when the plan was made after waiting for another connect's probe.
	// Event: decision (of that host).
	ProbeWaitedKey = attribute.Key("pgconnector.probe.waited")
	// GSSCredentialsKey is true when the client holds Kerberos credentials usable for GSSAPI
	// encryption, as the plan saw them; set only when gssencmode is not disable and the host is
	// not a Unix socket (the cases where GSS is allowed and the credentials are checked).
	// Event: decision (of that host).
	GSSCredentialsKey = attribute.Key("pgconnector.gss.credentials")
	// GSSCredentialsValidKey is true when the credentials check found usable credentials (a
	// ticket-granting ticket or a client keytab). The principal is never recorded.
	// Span: gss_credentials.
	GSSCredentialsValidKey = attribute.Key("pgconnector.gss.credentials.valid")
	// GSSCredentialsReusedKey is true when the check was answered from the previous one, without
	// reading the credential cache. Span: gss_credentials.
	GSSCredentialsReusedKey = attribute.Key("pgconnector.gss.credentials.reused")
	// GSSCredentialsSourceKey is where the credentials are kept: the credential cache type
	// ("FILE", "DIR", "KEYRING", "KCM") or "keytab"; never a path or principal.
	// Span: gss_credentials.
	GSSCredentialsSourceKey = attribute.Key("pgconnector.gss.credentials.source")
	// GSSDelegatedKey is present when gssdelegation=1 asked for the client's credentials to be
	// forwarded: true when the context carried them. Span: gss_context.
	GSSDelegatedKey = attribute.Key("pgconnector.gss.delegated")
	// GSSDelegationSkippedKey says why credentials that were asked for were not forwarded:
	// "not-forwardable" (the ticket-granting ticket lacks the flag: kinit -f) or "failed" (the
	// KDC refused or did not answer). Span: gss_context.
	GSSDelegationSkippedKey = attribute.Key("pgconnector.gss.delegation.skipped")
	// AddressRememberedDownKey is true when the address dialed was remembered not to answer
	// (its TCP connect timed out, was refused or found no route within WithDownHostTTL): it was
	// tried after the addresses and hosts not remembered so. Absent otherwise. Span: tcp_connect.
	AddressRememberedDownKey = attribute.Key("pgconnector.address.remembered_down")
	// AddressAgeKey is how long ago, in seconds, the host name was resolved to the address
	// dialed, when the connect used a remembered answer (WithDNSCacheTTL) instead of a lookup of
	// its own. Absent otherwise. Span: tcp_connect.
	AddressAgeKey = attribute.Key("pgconnector.dns.age")
	// DNSAddressesKey is the IP addresses a host name resolved to. Span: dns_lookup.
	DNSAddressesKey = attribute.Key("pgconnector.dns.addresses")
	// MethodKey is the method a socket is opened for or a startup runs under: "gss", "ssl",
	// "direct-ssl" or "plain". Spans: tcp_connect, startup.
	MethodKey = attribute.Key("pgconnector.method")
	// SSLAnswerKey is the server's answer to SSLRequest: "S", "N", or "" when none was read.
	// Span: ssl_request.
	SSLAnswerKey = attribute.Key("pgconnector.ssl.answer")
	// GSSAnswerKey is the server's answer to GSSENCRequest: "G", "N", or "" when none was read.
	// Span: gssenc_request.
	GSSAnswerKey = attribute.Key("pgconnector.gss.answer")
	// GSSTicketFromCacheKey is true when the service ticket came from the credential cache, with
	// no KDC exchange. Span: service_ticket.
	GSSTicketFromCacheKey = attribute.Key("pgconnector.gss.ticket.from_cache")
	// GSSEnctypeKey is the encryption type of the session key, for example
	// "aes256-cts-hmac-sha1-96"; absent when unknown. Spans: service_ticket, gss_context.
	GSSEnctypeKey = attribute.Key("pgconnector.gss.enctype")
	// TLSDirectKey is true for a direct TLS handshake (a ClientHello without SSLRequest).
	// Span: tls_handshake.
	TLSDirectKey = attribute.Key("pgconnector.tls.direct")
	// TLSDirectSourceKey says why a handshake was direct: "sslnegotiation" (written in the
	// connection string) or "learned" (the host is remembered to take direct TLS). Set only on
	// direct handshakes. Span: tls_handshake.
	TLSDirectSourceKey = attribute.Key("pgconnector.tls.direct.source")
	// PlanDirectLearnedKey is true when the plan opens TLS with a direct ClientHello because the
	// host is remembered to take it, SSLRequest following only if that fails; set only then.
	// Event: decision (of that host).
	PlanDirectLearnedKey = attribute.Key("pgconnector.plan.direct_learned")
	// AuthMethodKey is the authentication the server asked for: "password", "md5",
	// "scram-sha-256", "gss", "sspi"; for an AuthenticationOk with no exchange before it, "trust"
	// on a plaintext or TLS connection and "gss-or-trust" on a GSS-encrypted one, where pg_hba gss
	// (the encrypted channel authenticated the client) and trust send the same bytes. Span: startup.
	AuthMethodKey = attribute.Key("pgconnector.auth.method")
	// AuthSASLMechanismKey is the SASL mechanism the client chose: "SCRAM-SHA-256",
	// "SCRAM-SHA-256-PLUS" (channel binding) or "OAUTHBEARER". Span: startup.
	AuthSASLMechanismKey = attribute.Key("pgconnector.auth.sasl_mechanism")
	// AuthKeyCachedKey is true when SCRAM's ClientKey and ServerKey came from the connector's
	// cache (no PBKDF2 run or waited for: RFC 7677 section 4), false when they were derived.
	// Present with a SCRAM mechanism only; never a key, salt or iteration count. Span: startup.
	AuthKeyCachedKey = attribute.Key("pgconnector.auth.key_cached")
	// FallbackFromKey is the method given up. Span: fallback.
	FallbackFromKey = attribute.Key("pgconnector.fallback.from")
	// FallbackToKey is the method tried next; absent when the host has none left. Span: fallback.
	FallbackToKey = attribute.Key("pgconnector.fallback.to")
	// FallbackReasonKey is why the method was given up, for example "server refused SSLRequest".
	// Span: fallback.
	FallbackReasonKey = attribute.Key("pgconnector.fallback.reason")
	// FallbackNewConnectionKey is true when the next method needs a new socket (and a new server
	// backend). Span: fallback.
	FallbackNewConnectionKey = attribute.Key("pgconnector.fallback.new_connection")
)

// Values of error.type other than a SQLSTATE. A failed span whose error wraps a
// *pgconn.PgError has its SQLSTATE as error.type (and as db.response.status_code); otherwise
// error.type is one of these classes, chosen from the Go error, or the default of the step.
const (
	ErrorTypeCanceled       = "canceled"           // the caller's context was canceled
	ErrorTypeTimeout        = "timeout"            // a deadline or a network timeout
	ErrorTypeGSSEncRequire  = "gssencmode_require" // gssencmode=require cannot be met
	ErrorTypeNoMethod       = "no_method"          // sslmode and gssencmode allow no method
	ErrorTypeDNS            = "dns_error"          // host name resolution failed
	ErrorTypeTLS            = "tls_error"          // TLS handshake or certificate failure
	ErrorTypeGSS            = "gss_error"          // default of the gss_*, gssenc_request and service_ticket spans
	ErrorTypeDial           = "dial_error"         // the socket could not be opened
	ErrorTypeNetwork        = "network_error"      // I/O on an open socket failed
	ErrorTypeProtocol       = "protocol_error"     // the server broke the negotiation's byte rules
	ErrorTypeErrorResponse  = "error_response"     // an ErrorResponse to SSLRequest or GSSENCRequest (its text unread)
	ErrorTypeGSSRejected    = "gss_rejected"       // Kerberos refused: KDC or acceptor KRB-ERROR
	ErrorTypeGSSUnverified  = "gss_unverified"     // the server failed a Kerberos check (AP-REP, wrap token)
	ErrorTypeStartup        = "startup_failed"     // default of the startup span
	ErrorTypeConnectFailed  = "connect_failed"     // default of the connect and probe_wait spans
	errorTypeRequestDefault = ErrorTypeNetwork     // default of the ssl_request span
)
