package pgconnector

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/ngrok/sqlmw"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/oauth2"

	"github.com/pgconnector/pgconnector/internal/connstring"
	"github.com/pgconnector/pgconnector/internal/intercept"
	"github.com/pgconnector/pgconnector/tracing"
)

// Option configures a Connector.
type Option func(*options)

type options struct {
	tracerProvider  trace.TracerProvider
	meterProvider   metric.MeterProvider
	cacheTTL        time.Duration
	noLearnedDirect bool
	kerberos        Kerberos
	statementSpans  bool
	queryText       bool
	spanName        func(ctx context.Context, operation, query string) string
	logger          *slog.Logger
	pingSpans       bool
	spanFilter      func(ctx context.Context, operation, query string) bool
	noRootSpans     bool
	spanAttributes  func(ctx context.Context, operation, query string) []attribute.KeyValue
	cancelNotError  bool
	sqlComment      tracing.SQLCommentMode
	interceptors    intercept.Chain

	beforeConnect func(context.Context, *pgx.ConnConfig) error
	afterConnect  func(context.Context, *pgx.Conn) error
	resetSession  func(context.Context, *pgx.Conn) error
	dialFunc      pgconn.DialFunc
	lookupFunc    pgconn.LookupFunc
	dnsTTL        time.Duration
	downTTL       time.Duration
	tlsConfigFunc TLSConfigFunc

	passwordFunc           func(ctx context.Context, r PasswordRequest) (string, time.Time, error)
	oauthTokenFunc         func(ctx context.Context, r OAuthRequest) (*oauth2.Token, error)
	oauthDevicePrompt      func(ctx context.Context, d *oauth2.DeviceAuthResponse) error
	oauthHTTPClient        *http.Client
	oauthUnverifiedChannel bool
}

// WithDialFunc sets the function that opens every connection of the connector, for a tunnel
// (SSH, a cloud provider's connector), a proxy or sockets of the application's own: the
// connections of database/sql ([Connector.Connect]) and of pgx ([Connector.ConnectPgx],
// [Connector.OpenPool]), those of the background refreshes of remembered answers, and the
// CancelRequests of their sessions (a query's context ended). Default (nil): the connector's
// own dialer, a net.Dialer (pgx's default, or one with the connection string's keepalive keys).
//
// f gets network "tcp" and the address the connector chose for the attempt, "ip:port":
// hostaddr when given, the host when it is an IP address, else each address of the host's DNS
// lookup (done by the connector, [WithLookupFunc], remembered for [WithDNSCacheTTL]; for a name
// that resolves only at the far end of a tunnel, write the name as host, for TLS and Kerberos,
// and the far end's address as hostaddr, or map addresses in f). For a Unix-domain socket it gets network "unix" and the
// socket's path, dir/.s.PGSQL.port, as pgx gives it; requirepeer then needs f to return a
// *net.UnixConn. A CancelRequest dials the network and address its session's connect dialed.
// Everything else runs over the connection f returns exactly as over a TCP socket: the
// GSSENCRequest, SSLRequest or direct TLS the connector decides on (and the cache of the
// server's answers, kept per host as written), TLS, authentication; connect_timeout and the
// context bound f too, and an error of f fails that address's attempt (the connect goes on
// with the next address or host, as after a refused TCP connection) and is wrapped in the
// connect's error.
//
// The connection string's keepalive keys (keepalives, keepalives_idle, keepalives_interval,
// keepalives_count, tcp_user_timeout) are set on what f returns when it is a *net.TCPConn (f
// dialed a TCP socket itself: to the server or to a forwarder in front of it), after f
// returns; on any other connection (an SSH channel, a net.Pipe) they are f's business. Without
// any of the keys, nothing is set: f's own settings stay. f may be called from several
// goroutines at once, and in the background, to dial an address remembered down again
// ([WithDownHostTTL]), under a context of its own bounded by connect_timeout (else 10 s) and
// Connector.Close, that holds none of the values of the connect that started it.
func WithDialFunc(f pgconn.DialFunc) Option {
	return func(o *options) { o.dialFunc = f }
}

// WithLookupFunc sets the function that resolves the host names of the connection string to IP
// addresses (a resolver of the application's, a service registry, a test's fixed answer), for
// every connection of the connector and its background refreshes. It is called with the host
// as written and a context bounded by the connect's context and connect_timeout, or, for a
// lookup in the background ([WithDNSCacheTTL]), by connect_timeout (10 s without it) and
// Connector.Close, a context of its own that holds none of the values of the connect that
// started it (that connect may have returned); it may be called from several goroutines at once. An error, or no address, fails that host (the connect
// goes on with the next one). hostaddr, IP addresses and Unix socket directories are not looked
// up. Default (nil): net.DefaultResolver.LookupHost.
func WithLookupFunc(f pgconn.LookupFunc) Option {
	return func(o *options) { o.lookupFunc = f }
}

// WithDNSCacheTTL sets how long the addresses of a host name are remembered: connects within it
// share one lookup; in its last fifth, the first connect that uses the answer looks the name up
// again in the background and goes on with it; when every remembered address of a host fails
// before a server answers (refused, unreachable, timed out), the connect looks the name up again
// at once and tries the new addresses. A failed lookup is not remembered. Zero or less: every
// connect looks every host name up, as libpq and pgx do. Default: DefaultDNSCacheTTL, 15 s
// (pgbouncer's dns_max_ttl). DNS time-to-live values are not read: the resolver does not give
// them; a shorter bound than a record's TTL is the application's choice here. A forged answer is
// used by every connect until it is looked up again (after 12 s by default): under
// sslmode=prefer each of them goes to the forged address, where libpq's connects after the first
// would not. sslmode=verify-full closes that (the connects fail instead); zero brings the
// connects that reach the forged address to one, as libpq, but under sslmode=prefer the forged
// server's "N" is still remembered for the host ([WithCacheTTL]): with both at zero every
// connect asks again, as libpq (docs/cache-and-faults.md, "An attacker who answers once").
func WithDNSCacheTTL(d time.Duration) Option {
	return func(o *options) { o.dnsTTL = d }
}

// WithDownHostTTL sets how long an address (IP and port) whose TCP connect timed out
// (connect_timeout, not the caller's deadline), was refused or found no route is tried after the
// others. The next connects try the addresses and hosts not remembered down first, in the
// connection string's order, then the remembered ones: none is skipped, and with every host down
// all are tried in the string's order. An address remembered down for half of d is dialed again
// in the background (a TCP connect, closed at once) when a connect puts it last, which renews the
// memory while it stays down; any socket opened to it forgets it. It changes the order only,
// never a method or an encryption decision; Unix-domain sockets are not remembered. The
// tcp_connect span of a remembered address says pgconnector.address.remembered_down. At most
// negotiation.MaxDownAddrs addresses are remembered (the oldest forgotten first), and the
// expired ones are dropped when a connect next looks at the memory, so that a resolver naming
// new addresses at every lookup grows it for d at most. Zero or less: every connect tries the
// hosts in order, as libpq and pgx do. Default: DefaultDownHostTTL, 10 s.
func WithDownHostTTL(d time.Duration) Option {
	return func(o *options) { o.downTTL = d }
}

// WithTLSConfigFunc sets a function called for each connection attempt that uses TLS (after
// the connector chose the host, address and method, before the socket is opened; background
// refreshes included), with a clone of the TLS configuration the connector built for that host
// from sslmode, sslrootcert, sslcert, sslkey, sslcrl, sslcrldir, sslsni,
// ssl_min_protocol_version and ssl_max_protocol_version; host is the host as written in the
// connection string. f may change the clone for this attempt (a CancelRequest of the session
// uses the session's):
//   - Certificates or GetClientCertificate: the client certificate, in place of sslcert and
//     sslkey (which the connector loads at each connection when both are left as they are): a certificate rotated without
//     reconnecting the pool, or one held in memory;
//   - RootCAs: the trust anchors, in place of sslrootcert's file (or the system's roots); the
//     connector checks the server's certificate against them as libpq checks it against the
//     file (internal/tlspolicy): the chain under every sslmode, the host name under verify-full, the
//     CRLs of sslcrl and sslcrldir;
//   - VerifyConnection: to add a check of the server (a pinned key, say), wrap the function it
//     holds or set one of your own: the connector's check runs first in either case, and an
//     error of yours refuses the server as a failed certificate check does; setting it nil is
//     refused;
//   - VerifyPeerCertificate (a further check; crypto/tls gives it no verified chains, as the
//     connector verifies them itself), ServerName under sslmode other than verify-full (it is
//     then only the SNI), MinVersion upwards, MaxVersion downwards, CipherSuites,
//     CurvePreferences, ClientSessionCache, KeyLogWriter and the other fields crypto/tls
//     reads for a client.
//
// After f returns, libpq's rules are enforced again: the connect fails (no other host, method
// or plaintext tried) with an error that names WithTLSConfigFunc, the host and what was
// refused when f removed VerifyConnection, turned InsecureSkipVerify off (the clone comes with
// it on because the connector verifies the certificate itself in VerifyConnection, as pgx
// does; leave it on, also when copying a template over the clone), changed ServerName
// away from the host under verify-full (the name the certificate is checked against),
// lowered MinVersion below the connector's (ssl_min_protocol_version, else TLS 1.2), raised
// MaxVersion above ssl_max_protocol_version, or removed ALPN "postgresql" from NextProtos. An
// error of f fails the connect the same way, wrapped in one that names WithTLSConfigFunc. What f
// changes, refused or not, is the attempt's clone's alone (its slices too: NextProtos,
// CipherSuites, Certificates... are copies). It runs before [WithBeforeConnect], which may not
// change TLS settings. f may be called from several goroutines at once (concurrent connects, a
// background refresh). Default (nil): the connector's configuration is used as built.
func WithTLSConfigFunc(f TLSConfigFunc) Option {
	return func(o *options) { o.tlsConfigFunc = f }
}

// WithBeforeConnect sets a function called for each connection attempt, after the connector
// chose its host, address and method and after [WithTLSConfigFunc], before pgx opens the socket.
// cfg is the attempt's own: its RuntimeParams map and its TLS configuration (with its slices)
// are copies made for the attempt, so what f changes, whether the connector takes the change or
// refuses it, applies to this attempt only and never reaches another connect, a retry, a pool's
// other connections or the connector's settings.
//
// f may change the user, password and database (a password or token valid for this
// connection), RuntimeParams, RequireAuth, ChannelBinding, OAuthTokenProvider,
// MinProtocolVersion, MaxProtocolVersion and SSLCertMode (the negotiation reads them after f),
// the client certificate (TLSConfig's Certificates or GetClientCertificate), ConnectTimeout (a
// bound of this attempt, besides connect_timeout), and pgx's OnNotice, OnPgError,
// OnNotification, AfterConnect, BuildContextWatcherHandler, Tracer and statement settings. For
// database/sql these are the connection's; for [Connector.ConnectPgx] and pools the attempt is
// pgconn's and the connection pgx returns has the configuration's own hooks, Tracer and
// statement settings ([Connector.PgxConfig]).
//
// What the connector sets for the attempt is its own; a change to it fails the connect (no
// other host, method or plaintext tried, nothing sent) with an error that names
// WithBeforeConnect, the field and what to use instead:
//   - Host, Port and Fallbacks: the hosts of the connection string;
//   - DialFunc: [WithDialFunc]; LookupFunc: hostaddr, or addresses mapped in WithDialFunc;
//   - TLSConfig, and the fields of it that carry libpq's rules (InsecureSkipVerify,
//     VerifyConnection, RootCAs, ServerName, MinVersion, MaxVersion, NextProtos): WithTLSConfigFunc;
//   - BuildFrontend (the authentication exchange, which enforces require_auth and
//     channel_binding): Password, RequireAuth and ChannelBinding;
//   - AfterNetConnect (the TLS handshake, the direct-TLS ALPN check, requirepeer): a connection
//     wrapped by WithDialFunc;
//   - ValidateConnect (target_session_attrs): target_session_attrs in the connection string, or
//     a check in [WithAfterConnect];
//   - SSLNegotiation: sslnegotiation; KerberosSrvName and KerberosSpn: krbsrvname.
//
// The connector's functions are recognised by their code: one of another attempt's put back
// (kept from an earlier call) is not refused, and the attempt runs with its own. Its time is
// inside the connect span. An error of f fails the connect, no other host or method tried, with
// an error that names WithBeforeConnect. As pgx's stdlib.OptionBeforeConnect. Default: none.
func WithBeforeConnect(f func(ctx context.Context, cfg *pgx.ConnConfig) error) Option {
	return func(o *options) { o.beforeConnect = f }
}

// WithPasswordFunc sets a function that gives the password when a server asks for one
// (cleartext, MD5 or SCRAM-SHA-256): a cloud IAM token used as a password (RDS IAM, Cloud SQL
// IAM, Entra ID), or a password from a secret store. It is called on the goroutine of a connect
// (or, for a refresh, on one of the connector's, below), only once the server asks for a
// password, with a context bounded by the connect's (and connect_timeout), holding the values
// of the first connect that needed it; it may be called from several goroutines at once for
// different requests.
//
// What it returns is kept per host (as written in the connection string), port, user and
// database until expiry less 10 s (tokencache.Margin, golang.org/x/oauth2's own margin;
// a zero expiry: until a server refuses it), and given to every connect that needs it
// meanwhile: concurrent connects that find nothing kept wait for one call, each at most until
// its own context ends (the call is canceled when none waits any more). A connect that finds
// the password in the last fifth of its life starts one call in the background, bounded by
// connect_timeout (else 10 s) and Connector.Close, and goes on with the kept password; a
// failed background call leaves it until it expires. A password that lives less than 10 s is
// used by the connects that waited for it and not kept. A password the server refuses is
// dropped, and the function asked once more within the same connect. At most 1,024 requests'
// passwords are kept.
//
// Precedence: with f, the connection string's password (and PGPASSWORD) and the password file
// are not used; a password that [WithBeforeConnect] sets for an attempt wins over f (f is then
// not called for it). Without this option nothing changes: password, PGPASSWORD, then the
// password file, as libpq.
//
// An error of f fails the connect with an error that wraps it (errors.Is and errors.As find
// it), prefixed "WithPasswordFunc: "; an empty password is refused the same way. Nothing of a
// password is put in an error, span or log by the connector: f's own errors must not hold it.
// Default: none.
func WithPasswordFunc(f func(ctx context.Context, r PasswordRequest) (password string, expiry time.Time, err error)) Option {
	return func(o *options) { o.passwordFunc = f }
}

// WithOAuthTokenFunc sets a function that gives the bearer token of SASL OAUTHBEARER
// (PostgreSQL 18's pg_hba oauth method, RFC 7628), in place of libpq's device flow. It is
// called as WithPasswordFunc's function is, when a server asks for a token, with an
// [OAuthRequest]; the token's AccessToken is sent, its TokenType must be "Bearer" or empty,
// and its Expiry bounds how long it is kept (zero: until a server refuses it). Tokens are kept
// per issuer, scope and oauth_client_id, with the same margin, single call for concurrent
// connects and refresh in the background in the last fifth of their life. A token the server
// refuses (invalid_token) is dropped; when it came from the cache, f is asked once more within
// the connect, which tries again on a new connection; a token f has just given that the server
// refuses fails the connect (the next connect asks f again). oauth_client_id is not needed with
// f (libpq 18 insists on it even when its hook gives the token).
//
// An oauth2.TokenSource (golang.org/x/oauth2/clientcredentials, a cloud SDK's) plugs in with
// one line:
//
//	pgconnector.WithOAuthTokenFunc(func(context.Context, pgconnector.OAuthRequest) (*oauth2.Token, error) { return ts.Token() })
//
// An error of f fails the connect with an error that wraps it, prefixed "WithOAuthTokenFunc: ";
// a nil or empty token or another token type is refused the same way. The token is never put
// in an error, span or log. Default: none (the device flow when oauth_client_id is set).
func WithOAuthTokenFunc(f func(ctx context.Context, r OAuthRequest) (*oauth2.Token, error)) Option {
	return func(o *options) { o.oauthTokenFunc = f }
}

// WithOAuthDevicePrompt sets the function that shows a human where to approve the connector's
// access in the device flow (RFC 8628), which runs when oauth_client_id is set and there is no
// [WithOAuthTokenFunc]: d.VerificationURI (and VerificationURIComplete, when the issuer gives
// one) and d.UserCode, valid until d.Expiry. It is called on the goroutine that runs the flow,
// with the context of the connects that wait for the token (the wait for the human ends with
// the last of them); it should return at once, the flow then polls the issuer. An error stops
// the flow and fails the connects, wrapped ("OAuth device flow: device prompt failed: ...").
// The access and refresh tokens are kept for the connector's life: the next tokens come from a
// refresh, and a human is prompted again only when the issuer refuses the refresh token (or gave
// none), by a connect that waits for a token, never by a refresh ahead of expiry in the
// background; so a pool asks once (libpq asks for every connection). Default: libpq's message on standard error, "Visit
// <verification_uri> and enter the code: <user_code>".
func WithOAuthDevicePrompt(f func(ctx context.Context, d *oauth2.DeviceAuthResponse) error) Option {
	return func(o *options) { o.oauthDevicePrompt = f }
}

// WithOAuthHTTPClient sets the HTTP client of the device flow's requests to the issuer (its
// discovery document, device authorization and token endpoints): a proxy, the issuer's CA, a
// timeout of its own. Its redirects are not followed, and every endpoint must be https, as in
// libpq. It is not used with [WithOAuthTokenFunc]. Default: http.DefaultClient.
func WithOAuthHTTPClient(c *http.Client) Option {
	return func(o *options) { o.oauthHTTPClient = c }
}

// WithOAuthUnverifiedChannel sets whether a bearer token may be sent over a channel that does
// not authenticate the server: TLS under sslmode other than verify-ca and verify-full, or
// plaintext TCP. Default: false, a token goes only over TLS with verify-ca or verify-full, GSS
// encryption or a Unix-domain socket, and a connect that would send one over another channel
// fails before the token is sent (pgjdbc's rule). libpq sends it over any channel, as true does.
func WithOAuthUnverifiedChannel(allow bool) Option {
	return func(o *options) { o.oauthUnverifiedChannel = allow }
}

// WithAfterConnect sets a function called once a connection is established (startup done,
// target_session_attrs checked), before database/sql gets it: to register types (a codec for
// this connection's type map), or set the session up. Its time is inside the connect span. An
// error closes the connection and fails the connect, no other host tried, with an error that
// names WithAfterConnect. As pgx's stdlib.OptionAfterConnect. Default: none.
func WithAfterConnect(f func(ctx context.Context, conn *pgx.Conn) error) Option {
	return func(o *options) { o.afterConnect = f }
}

// WithResetSession sets a function called when database/sql takes a pooled connection for reuse
// (driver.SessionResetter), after pgx's own check. An error discards the connection: return
// driver.ErrBadConn to have database/sql open another. As pgx's stdlib.OptionResetSession.
// Default: none (pgx's check alone).
func WithResetSession(f func(ctx context.Context, conn *pgx.Conn) error) Option {
	return func(o *options) { o.resetSession = f }
}

// Kerberos says where the client's Kerberos configuration and credentials are. Empty fields take
// MIT's environment, read once by New: KRB5_CONFIG (else /etc/krb5.conf), KRB5CCNAME (else
// krb5.conf's default_ccache_name, else FILE:/tmp/krb5cc_<uid>), KRB5_CLIENT_KTNAME.
//
// CCache is a credential cache name as MIT writes it: FILE:path (or a bare path), DIR:dir or
// DIR::dir/tktX, KEYRING:session|user|persistent|process|thread:name, KCM: or KCM:name. MEMORY:,
// API: and unknown types hold no credentials: GSS is then skipped (gssencmode=prefer) or the
// connect fails (require) with an error naming the type.
//
// Krb5Conf is read as MIT reads KRB5_CONFIG: a colon-separated list of files and directories
// (a directory is read like includedir), those that do not exist skipped, include and includedir
// followed, the first value of a setting winning (so earlier files win). A missing include is an
// error of the first connection that needs Kerberos.
//
// ClientKeytab is the path of a keytab in MIT's format (KRB5_CLIENT_KTNAME may say FILE:path),
// read only if it is a regular file of at most 16 MiB whose lengths all fit
// (internal/keytabfile); any other holds no credentials, as an unusable cache: GSS is skipped
// (gssencmode=prefer) or the connect fails (require) with an error naming the file and the
// problem.
type Kerberos struct {
	Krb5Conf     string // krb5.conf paths, colon-separated as KRB5_CONFIG
	CCache       string // credential cache name, as KRB5CCNAME
	ClientKeytab string // keytab to obtain credentials from when the cache holds none
	Principal    string // client principal (user@REALM) in ClientKeytab; empty: its first entry
}

// WithKerberos sets where the Kerberos credentials for GSSAPI encryption and authentication are.
// Default: the environment, as libpq. In a build with the pgconnector_nogss tag, a Kerberos with
// any field set makes New fail with an error wrapping [ErrNoGSS].
func WithKerberos(k Kerberos) Option {
	return func(o *options) { o.kerberos = k }
}

// ErrNoGSS is wrapped by the errors that come from a build with the pgconnector_nogss tag, which
// leaves out Kerberos (gokrb5 and this module's GSSAPI code) as libpq built without GSSAPI
// leaves it out (libpq-connect.html, gssencmode): gssencmode=require (a [*ParseError] of New and
// ParseSettings, as libpq's "gssencmode value "require" invalid when GSSAPI support is not
// compiled in"), WithKerberos with a field set (an error of New), and a server's request for
// GSSAPI authentication (a connect error, as libpq's "GSSAPI authentication not supported";
// fe-auth.c, pg_fe_sendauth). gssencmode=prefer, the default, then never tries GSSAPI
// encryption. Without the tag nothing returns it.
var ErrNoGSS = connstring.ErrNoGSS

// WithTracerProvider sets where spans go. Default: otel.GetTracerProvider() at the time of New.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracerProvider = tp }
}

// WithMeterProvider sets where metrics go: the duration of each statement
// (db.client.operation.duration), of each connect (db.client.connection.create_time), the
// decision cache's hits and misses, the round trips and backends the cache saved, and, for a pool
// opened with [Connector.OpenDB], its connections. Default: otel.GetMeterProvider() at the time
// of New.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.meterProvider = mp }
}

// WithStatementSpans sets whether the statements run on the connector's connections are traced:
// one span of kind CLIENT per exec, query (until its rows are closed), prepare, prepared
// statement exec or query, begin, commit, rollback and (WithPingSpans) ping, and one measurement of
// db.client.operation.duration each. With false the connector returns pgx's connections as they
// are, with neither (in the wrappers of [WithInterceptor] alone, when it has interceptors). It also turns on or off, for pgx's own API, the statement spans and
// measurements of the Tracer of [Connector.PgxConfig] (and so of [Connector.ConnectPgx]) and
// [Connector.PgxPoolConfig] (a tracing.PgxTracer), and the pgxpool.acquire spans of the pools of
// PgxPoolConfig and [Connector.OpenPool] (tracing.PoolTracer); their pool metrics stay.
// Default: true.
func WithStatementSpans(on bool) Option {
	return func(o *options) { o.statementSpans = on }
}

// WithQueryText sets whether statement spans record the statement's text (db.query.text): as
// written when the call is parameterized, that is when values among its arguments fill all the
// $n placeholders of the text, else with every literal replaced by "?". pgx's options are not
// values (pgx.QueryExecModeSimpleProtocol, pgx.QueryResultFormats, ...), and with pgx.NamedArgs
// the placeholders are those of its @name rewrite: see tracing.StatementConfig.QueryText for the
// whole rule. Parameter values are never recorded. Default: true.
func WithQueryText(on bool) Option {
	return func(o *options) { o.queryText = on }
}

// WithSpanNameFunc names statement spans: f receives the operation (db.operation.name: SELECT,
// INSERT, ..., BEGIN, COMMIT, ROLLBACK, PREPARE, PING, RESET_SESSION; "" when unknown) and the text as
// db.query.text would record it (whatever WithQueryText says; "" for the calls without one).
// An empty result keeps the default name: the statement's db.query.summary (operation and
// tables, as "SELECT orders"), else the operation, else "postgresql" (see tracing.Statements).
// Default: none, the default name.
func WithSpanNameFunc(f func(ctx context.Context, operation, query string) string) Option {
	return func(o *options) { o.spanName = f }
}

// WithLogger sets where the connector logs its own decisions: each host's plan and each step
// of an attempt (Debug), a fallback to the next method (GSS to TLS, direct TLS to SSLRequest, TLS
// to plaintext), a refresh that changed or confirmed a remembered server answer and a failed
// connect (Info: the caller has its error too), a server that broke the protocol, a failed
// background refresh and unreadable Kerberos credentials (Warn). The records carry the spans'
// attribute keys (server.address, server.port, pgconnector.*, error.type) and never a password,
// ticket, key or statement; each level is asked of l.Enabled first, so a level l drops costs
// nothing. tracing.NewLogTrace lists what each record holds. Statements are not logged.
// Default: nil, no logs.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// The options below choose which statements make a span and what it holds. None of them changes
// db.client.operation.duration: every call is measured as before. They do nothing with
// WithStatementSpans(false). They shape the statement spans of pgx's own API too (the Tracer of
// [Connector.PgxConfig] and [Connector.PgxPoolConfig]), except WithPingSpans: pgx runs no ping
// through its tracer. A tracing.NewPgxTracer of your own takes the same fields of
// tracing.StatementConfig.

// WithPingSpans sets whether the calls that only check a connection make spans: Ping (PING:
// DB.PingContext, Conn.PingContext) and ResetSession (RESET_SESSION: database/sql's check of a
// pooled connection before reuse, where pgx pings a connection idle for more than a second).
// Default: false, no span (a ping whose context holds no span, as an ORM's ping at start-up or a
// health check's, would otherwise be a trace of its own). IsValid is never traced (no I/O).
// PING is measured either way; RESET_SESSION never is.
// Like the other statement-span options it does nothing with WithStatementSpans(false).
// pgx runs no ping through its tracer: it concerns database/sql alone.
func WithPingSpans(on bool) Option {
	return func(o *options) { o.pingSpans = on }
}

// WithSpanFilter sets a function asked before each statement span: false makes no span for that
// call. It receives the operation and text as WithSpanNameFunc does. The call is still measured
// (db.client.operation.duration), as with otelsql's filter: the filter chooses spans, not
// measurements. Default: none, every statement makes a span.
// Like the other statement-span options it does nothing with WithStatementSpans(false).
// It applies to database/sql and to pgx's API through [Connector.PgxConfig] and
// [Connector.PgxPoolConfig].
func WithSpanFilter(f func(ctx context.Context, operation, query string) bool) Option {
	return func(o *options) { o.spanFilter = f }
}

// WithRootSpans sets whether a statement whose context holds no span (neither a local one nor a
// remote one from propagated headers) makes a span: it would be the root of a trace of its own.
// Default: true. With false such a statement is only measured. It concerns statement spans only:
// a connect whose context holds no span (a pool's, an ORM's start-up) is still the root
// postgresql.connect of its own trace, and a background refresh is always a root
// postgresql.refresh.
// Like the other statement-span options it does nothing with WithStatementSpans(false).
// It applies to database/sql and to pgx's API through [Connector.PgxConfig] and
// [Connector.PgxPoolConfig].
func WithRootSpans(on bool) Option {
	return func(o *options) { o.noRootSpans = !on }
}

// WithAttributesFunc sets a function whose attributes are added to each statement span at its
// start (a sampler sees them), after the connector's own; it receives the operation and text as
// WithSpanNameFunc does. The attributes are exported as they are: they must hold no secret (no
// password, token or parameter value). They are not added to the measurement. Default: none.
// Like the other statement-span options it does nothing with WithStatementSpans(false).
// It applies to database/sql and to pgx's API through [Connector.PgxConfig] and
// [Connector.PgxPoolConfig].
func WithAttributesFunc(f func(ctx context.Context, operation, query string) []attribute.KeyValue) Option {
	return func(o *options) { o.spanAttributes = f }
}

// WithCancelAsError sets whether a statement canceled by its context is an error span (status
// Error). With false, a call that failed with context.Canceled, or with the server's
// query_canceled (SQLSTATE 57014) while its context was canceled, leaves the status Unset; its
// error.type (canceled, 57014) and db.response.status_code are still recorded, and so is the
// measurement. A call whose deadline passed (context.DeadlineExceeded, error.type timeout) stays
// an error: a timeout is a failure, a cancel is the caller giving up. Default: true.
// Like the other statement-span options it does nothing with WithStatementSpans(false).
// It applies to database/sql and to pgx's API through [Connector.PgxConfig] and
// [Connector.PgxPoolConfig].
func WithCancelAsError(on bool) Option {
	return func(o *options) { o.cancelNotError = !on }
}

// WithSQLCommenter appends to the text of the execs and queries run through database/sql a
// sqlcommenter comment carrying the trace context of their span,
// /*traceparent='00-<trace id>-<span id>-01'*/, so that what the server shows of a statement
// (pg_stat_activity.query, the log, auto_explain) can be joined to its trace; only sampled spans,
// never inside a literal or a comment (see tracing.SQLCommentMode for where and when).
// tracing.SQLCommentUncached comments only the statements pgx sends as text at every call
// (simple protocol, exec mode, execs without values; the call's pgx.QueryExecMode, else the
// connection string's default_query_exec_mode, not one WithBeforeConnect sets), at no cost
// beyond the bytes; queries run
// from pgx's statement cache (the default mode) are sent as written. tracing.SQLCommentAll
// comments them too and runs them with pgx.QueryExecModeDescribeExec, so that the cache does not
// fill with texts used once: two round trips per such query instead of one, and a parse and
// plan on the server each time (measured on `select $1::int`: about twice the client's and three
// times the server's CPU time of the cached query; commenting every text without the switch
// costs as much, and keeps 512 prepared statements per connection on the server). Default:
// tracing.SQLCommentOff.
func WithSQLCommenter(mode tracing.SQLCommentMode) Option {
	return func(o *options) { o.sqlComment = mode }
}

// WithInterceptor adds i, a github.com/ngrok/sqlmw interceptor, to the driver calls database/sql
// makes through the connector: several calls compose in the order given, the first outermost,
// as nested sqlmw drivers would (sqlmw.Driver of sqlmw.Driver, the first given the outermost).
// Each hook of sqlmw.Interceptor runs as sqlmw runs it: ConnectorConnect around
// [Connector.Connect]; ConnBeginTx, ConnPrepareContext, ConnPing, ConnExecContext and
// ConnQueryContext on a connection; StmtExecContext, StmtQueryContext and StmtClose on a prepared
// statement (with the text it was prepared from); RowsNext and RowsClose on a query's rows;
// TxCommit and TxRollback; ResultLastInsertId and ResultRowsAffected on an exec's result. A
// context a hook returns is the one used after it, and the one that interceptor's later calls
// get: TxCommit and TxRollback that of its ConnBeginTx, StmtClose that of its
// ConnPrepareContext, RowsNext and RowsClose that of its query. Each hook must call the next
// step it is given (or answer for it), as with sqlmw.
//
// The interceptors run inside the statement's span and measurement (the span's time includes
// theirs; the context they get holds the span), after the connector has read the text: the span
// records the text as the application wrote it, and the text an interceptor passes on is the
// one sent. With [WithSQLCommenter] they get the text with its comment. The connector's own reads
// (the row count of an exec's span) do not pass through them. Close, ResetSession,
// CheckNamedValue and the column-type methods are the driver's, as in sqlmw. The connection,
// statements, rows and transactions keep the methods of pgx's driver types, and no other
// (sqlmw's own wrappers hide some): [PgxConn] still reaches the *pgx.Conn, and on Go 1.27 the
// rows are a driver.RowsColumnScanner, so that arrays scan into slices and ranges into pgtype
// values. database/sql then reads a row with NextRow and ScanColumn instead of Next: RowsNext
// still runs once per row, with a dest of one nil per column, and the row is not decoded to
// driver values for it (what an interceptor writes to dest is not used; sqlmw has no ScanColumn
// hook). With [WithStatementSpans](false) the interceptors run without spans. pgx's own API
// ([Connector.PgxConfig], [Connector.OpenPool]) does not go through database/sql: the
// interceptors do not see it. Default: none, and no cost.
func WithInterceptor(i sqlmw.Interceptor) Option {
	return func(o *options) {
		if i != nil {
			o.interceptors = append(o.interceptors, i)
		}
	}
}

// WithCacheTTL sets how long a server's answer to SSLRequest (and, with Kerberos, to
// GSSENCRequest) is trusted. Zero or less disables remembering: every connection then negotiates
// as libpq does. Default: DefaultCacheTTL. Under sslmode=prefer an 'N' makes the next connects
// to the host skip SSLRequest and go in the clear until it is asked again in the background
// (min(TTL/2, 1 minute) after it was learned), also when the 'N' came from an attacker on the
// path rather than from the server; under sslmode=require and above an 'N' takes no connect to
// plaintext: each one sends SSLRequest (docs/cache-and-faults.md, "An attacker who answers
// once").
func WithCacheTTL(d time.Duration) Option {
	return func(o *options) { o.cacheTTL = d }
}

// WithLearnedDirectTLS turns on or off (default on) direct TLS for hosts known to take it.
// A host whose server selected ALPN "postgresql" on a TLS connection and reported
// server_version 17 or later takes a TLS ClientHello as its first bytes
// (protocol-flow.html, "SSL Session Encryption"): later connections to it then skip the
// SSLRequest round trip under every sslmode that uses TLS, including the default prefer. If a
// direct handshake fails (a pooler put in front, a server downgraded or restarted without
// TLS), the same connect goes on with SSLRequest on a new connection, and the host is
// remembered as not taking direct TLS for the cache TTL; plaintext still comes only after the
// server's 'N' to SSLRequest. Off, every TLS connection starts with SSLRequest unless
// sslnegotiation=direct is written, as in libpq. It changes nothing when remembering is off
// (WithCacheTTL of zero). Default: true.
func WithLearnedDirectTLS(on bool) Option {
	return func(o *options) { o.noLearnedDirect = !on }
}
