// Package pgconnector opens PostgreSQL connections for database/sql on top of pgx, deciding the
// transport of each host of a connection string once, from a cached capability probe, instead of
// re-learning it on every connection, and reporting every negotiation step as an OpenTelemetry span.
// Statements are spans too, and connects, statements, the decision cache and the pool are
// measured through the OpenTelemetry metric API (package tracing).
//
//	c, err := pgconnector.New("host=db.example user=app dbname=app")
//	if err != nil { ... }
//	db := c.OpenDB() // sql.OpenDB(c), plus the pool metrics
//	defer db.Close()
//
// sql.Open("pgconnector", dsn) works too (see [Driver]), once the package is imported, blank if
// nothing else of it is used: import _ "github.com/pgconnector/pgconnector".
//
// Connection strings are libpq's (URL or keyword/value, PG* environment variables, service files),
// parsed by pgx and completed by the connector: [Keywords] says what it does with each libpq
// keyword, and several hosts are tried by libpq's rules. See docs/connection-strings.md in the
// repository for what the connector does differently from pgx and libpq.
package pgconnector

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector/internal/connstring"
	"github.com/pgconnector/pgconnector/internal/intercept"
	"github.com/pgconnector/pgconnector/internal/keepalive"
	"github.com/pgconnector/pgconnector/internal/pgxconfig"
	"github.com/pgconnector/pgconnector/negotiation"
	"github.com/pgconnector/pgconnector/tracing"
)

// DefaultCacheTTL is how long a server's answer is trusted when WithCacheTTL is not given.
const DefaultCacheTTL = 5 * time.Minute

// DefaultDNSCacheTTL is how long a host name's addresses are remembered when WithDNSCacheTTL is
// not given: pgbouncer's default dns_max_ttl.
const DefaultDNSCacheTTL = 15 * time.Second

// DefaultDownHostTTL is how long an address that did not answer is tried after the others when
// WithDownHostTTL is not given (pgjdbc's hostRecheckSeconds is 10 s too).
const DefaultDownHostTTL = 10 * time.Second

// Connector opens connections for database/sql: use it with sql.OpenDB, or [Connector.OpenDB]
// for the pool metrics too. It implements driver.Connector and io.Closer, and is safe for
// concurrent use.
type Connector struct {
	settings   *Settings
	negotiator *negotiation.Negotiator
	stdlib     driver.Connector
	closeGSS   func() error        // releases the Kerberos client (gss_on.go, gss_off.go)
	statements *tracing.Statements // nil: WithStatementSpans(false)
	pgxTracer  *tracing.PgxTracer  // of PgxConfig and PgxPoolConfig; nil: WithStatementSpans(false)
	metrics    *tracing.Metrics
	tp         trace.TracerProvider // of the pgxpool acquire spans (PgxPoolConfig)
	// beforeConnect is WithBeforeConnect's, run by configureAttempt for database/sql and pgx.
	beforeConnect func(context.Context, *pgx.ConnConfig) error
	// tlsConfigFunc is WithTLSConfigFunc's, run by attemptTLS.
	tlsConfigFunc TLSConfigFunc
	// interceptors are WithInterceptor's, around every driver call (internal/intercept).
	interceptors intercept.Chain
	// passwordFunc: WithPasswordFunc gives the passwords; the connection string's password,
	// PGPASSWORD and the password file are not used (configureAttempt).
	passwordFunc bool

	mu      sync.Mutex
	onClose []func() // unregister the DBStats callbacks of OpenDB
}

// hookError names the hook an error came from; it stops the connect (negotiation.AbortError).
func hookError(hook string, err error) error {
	if err == nil {
		return nil
	}
	return &negotiation.AbortError{Err: fmt.Errorf("%s: %w", hook, err)}
}

// New parses dsn and returns a Connector. It opens no connection.
//
// Every error is a [*ParseError]: it names the bad key (and the allowed values) and never holds
// the password or another secret; the one exception is WithKerberos in a build with the
// pgconnector_nogss tag (see [ErrNoGSS]). Keys and values are libpq's: [Keywords] lists each with what
// the connector does with it (pgx parses most; gssencmode, hostaddr, keepalives, requirepeer,
// target_session_attrs, load_balance_hosts and the other keys pgx does not know are the
// connector's). No libpq key is sent to the server as a run-time parameter unless libpq sends it
// too. A key libpq does not know is refused, naming the nearest keyword, unless it is one of
// pgx's keys or a server parameter a client may set at connection start (search_path=... sets
// search_path, as with pgx), or a dotted custom one (docs/connection-strings.md, "Keys libpq does
// not know"). A URL is read as libpq reads it ("?" may stand in a password, "+" is a plus sign).
func New(dsn string, opts ...Option) (*Connector, error) {
	o := options{cacheTTL: DefaultCacheTTL, dnsTTL: DefaultDNSCacheTTL, downTTL: DefaultDownHostTTL, statementSpans: true, queryText: true}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.tracerProvider == nil {
		o.tracerProvider = otel.GetTracerProvider()
	}
	if o.meterProvider == nil {
		o.meterProvider = otel.GetMeterProvider()
	}
	s, err := ParseSettings(dsn)
	if err != nil {
		return nil, err
	}
	krb, closeGSS, err := newGSS(s, o.kerberos)
	if err != nil {
		return nil, err
	}
	var noGSS error // why a server's request for GSSAPI authentication cannot be answered
	if !gssBuilt {
		noGSS = ErrNoGSS
	}
	dial := s.Config.DialFunc
	switch {
	case o.dialFunc != nil:
		dial = keepalive.Wrap(o.dialFunc, s.Keepalives)
	case s.Keepalives != nil:
		dial = keepalive.Dialer(s.Keepalives).DialContext
	}
	lookup := s.Config.LookupFunc
	if o.lookupFunc != nil {
		lookup = o.lookupFunc
	}
	// pgx's ConnString() of the configurations made from s.Config (PgxConfig, the connections):
	// the string given to New, not the one built for pgx's parse. SetConnString fails only with
	// a pgx that renamed its field (pgxconfig's test).
	_ = pgxconfig.SetConnString(s.Config, dsn)
	metrics := tracing.NewMetrics(o.meterProvider, tracing.Pool{Host: s.Hosts[0].Host, Port: s.Hosts[0].Port, Database: s.Config.Database})
	var creds negotiation.Credentials // nil unless an option asks for credentials
	clientID, clientSecret := oauthClientOf(s)
	if cr := newCredentials(&o, clientID, clientSecret); cr != nil {
		creds = cr
	}
	var c *Connector
	neg, err := negotiation.NewNegotiator(negotiation.Config{
		Hosts:      s.Hosts,
		GSSEncMode: s.GSSEncMode,
		DirectSSL:  s.Config.SSLNegotiation == "direct",
		Database:   s.Config.Database,

		NoLearnedDirect: o.noLearnedDirect,
		Cache:           negotiation.NewCache(o.cacheTTL),
		// The background refresh's own open (connector_refresh.go), not Connect's closure.
		Open: func(ctx context.Context) (io.Closer, error) { return c.openForRefresh(ctx) },
		// The metric and log hooks first: the span hooks' Done hooks end the span that is current.
		Trace:      tracing.Compose(tracing.Compose(metrics.Trace(), tracing.NewLogTrace(o.logger)), tracing.NewTrace(o.tracerProvider)),
		LookupFunc: lookup,
		DNSTTL:     o.dnsTTL,
		DownTTL:    o.downTTL,
		DialFunc:   connectDialer(dial),
		GSS:        krb,
		NoGSS:      noGSS,

		ConnectTimeout:     s.Config.ConnectTimeout,
		TargetSessionAttrs: s.TargetSessionAttrs,
		LoadBalanceHosts:   s.LoadBalanceHosts,
		RequirePeer:        s.RequirePeer,

		Credentials: creds,
		OAuth: negotiation.OAuthConfig{Issuer: s.OAuth.Issuer, Scope: s.OAuth.Scope, ClientID: s.OAuth.ClientID,
			AllowUnverifiedChannel: o.oauthUnverifiedChannel},
	})
	if err != nil {
		closeGSS()
		return nil, err
	}
	c = &Connector{settings: s, negotiator: neg, closeGSS: closeGSS, metrics: metrics, beforeConnect: o.beforeConnect,
		tlsConfigFunc: o.tlsConfigFunc, passwordFunc: o.passwordFunc != nil, interceptors: o.interceptors}
	if o.statementSpans {
		c.tp = o.tracerProvider
		c.statements = tracing.NewStatements(o.statementConfig(s.Config))
		// The pgx configurations' statement spans: each connection's own database and user
		// are its db.namespace and user.name (PgxConfig's may be changed).
		pcfg := o.statementConfig(s.Config)
		pcfg.Database, pcfg.User = "", ""
		c.pgxTracer = tracing.NewPgxTracer(pcfg)
	}
	stdOpts := []stdlib.OptionOpenDB{stdlib.OptionBeforeConnect(c.configureAttempt)}
	if o.afterConnect != nil {
		stdOpts = append(stdOpts, stdlib.OptionAfterConnect(func(ctx context.Context, conn *pgx.Conn) error {
			return hookError("WithAfterConnect", o.afterConnect(ctx, conn))
		}))
	}
	if o.resetSession != nil {
		stdOpts = append(stdOpts, stdlib.OptionResetSession(o.resetSession))
	}
	c.stdlib = stdlib.GetConnector(*s.Config, stdOpts...)
	return c, nil
}

// statementConfig is the configuration of the statement spans and measurements the options
// ask for, on connections of cfg: that of the database/sql interceptor (tracing.NewStatements)
// and of the pgx configurations' tracer (tracing.NewPgxTracer), so that both are shaped alike.
func (o *options) statementConfig(cfg *pgx.ConnConfig) tracing.StatementConfig {
	return tracing.StatementConfig{
		TracerProvider: o.tracerProvider,
		MeterProvider:  o.meterProvider,
		Database:       cfg.Database,
		User:           cfg.User,
		QueryText:      o.queryText,
		SpanName:       o.spanName,
		PingSpans:      o.pingSpans,
		SpanFilter:     o.spanFilter,
		OmitRootSpans:  o.noRootSpans,
		Attributes:     o.spanAttributes,
		CancelNotError: o.cancelNotError,
		SQLComment:     o.sqlComment,

		DefaultQueryExecMode: cfg.DefaultQueryExecMode,
	}
}

// Connect opens one connection: it decides, per host, which of GSSAPI encryption, TLS and
// plaintext to try from what the server answered before, and falls back as libpq does.
// The error of a failed connect says which host and step failed.
//
// The connection is pgx's (*stdlib.Conn) with WithStatementSpans(false) and no interceptor;
// otherwise it is that connection wrapped by the statement tracer (or the interceptors'
// wrappers alone, with statement spans off), which has the methods of *stdlib.Conn and no
// other, so that database/sql finds on it the optional interfaces it finds on pgx's (as of Go
// 1.27, driver.RowsColumnScanner on its rows). Its Conn method, like *stdlib.Conn's, returns the
// *pgx.Conn under it: [PgxConn] calls it.
//
// With [WithInterceptor], the connect runs inside the interceptors' ConnectorConnect, and the
// connection's calls pass through them, inside the statement tracer's.
func (c *Connector) Connect(ctx context.Context) (driver.Conn, error) {
	if len(c.interceptors) > 0 {
		return c.connectIntercepted(ctx)
	}
	conn, host, port, err := c.connect(ctx)
	if err != nil || c.statements == nil {
		return conn, err
	}
	return c.statements.WrapConn(conn, host, port), nil
}

// connect opens one connection of pgx's driver, and returns the host and port of the attempt
// that connected, as written in the DSN.
func (c *Connector) connect(ctx context.Context) (conn driver.Conn, host string, port uint16, err error) {
	ctx, note := connstring.WithPassfileNote(ctx)
	err = c.negotiator.Connect(ctx, func(ctx context.Context) error {
		var err error
		conn, err = c.stdlib.Connect(ctx)
		host, port, _ = negotiation.AttemptHost(ctx)
		return err
	})
	if err != nil {
		return nil, "", 0, note.Wrap(err)
	}
	return conn, host, port, nil
}

// connectIntercepted is Connect with interceptors: c.connect is the last step of their
// ConnectorConnect.
func (c *Connector) connectIntercepted(ctx context.Context) (driver.Conn, error) {
	last := &lastConnector{c: c}
	conn, err := c.interceptors.Connect(ctx, last)
	if err != nil || c.statements == nil {
		return conn, err
	}
	return c.statements.WrapConn(conn, last.host, last.port), nil
}

// lastConnector is the driver.Connector the last interceptor's ConnectorConnect gets: the
// connector's own connect, which remembers the host and port the connection went to.
type lastConnector struct {
	c    *Connector
	host string
	port uint16
}

func (l *lastConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, host, port, err := l.c.connect(ctx)
	if err == nil {
		l.host, l.port = host, port
	}
	return conn, err
}

func (l *lastConnector) Driver() driver.Driver { return l.c.Driver() }

// configureAttempt configures one connection attempt of a negotiation, for database/sql (the
// stdlib connector's BeforeConnect) and for pgx (negotiatePgx) alike: cfg must be a copy of the
// configuration's struct (the stdlib connector's is shallow). Before any hook runs, cfg gets its
// own run-time parameters (when there is a WithBeforeConnect hook to change them) and TLS
// configuration (Negotiator.Configure gives it no Fallbacks), so that what the hooks change,
// accepted or refused, stays in this attempt.
func (c *Connector) configureAttempt(ctx context.Context, cfg *pgx.ConnConfig) error {
	if err := c.negotiator.Configure(ctx, &cfg.Config); err != nil {
		return err
	}
	// The map is shared with the configuration (the stdlib connector's copy is shallow); only
	// WithBeforeConnect may change it, and pgx reads it.
	if c.beforeConnect != nil {
		if cfg.RuntimeParams = maps.Clone(cfg.RuntimeParams); cfg.RuntimeParams == nil {
			cfg.RuntimeParams = map[string]string{}
		}
	}
	if err := c.attemptTLS(ctx, &cfg.Config); err != nil {
		return err
	}
	// With WithPasswordFunc, the function gives the password (negotiation.Credentials) unless
	// WithBeforeConnect sets one: the connection string's, PGPASSWORD's and the password file's
	// are not used.
	if c.passwordFunc {
		cfg.Password = ""
	}
	// The password file's entry for this attempt's host, read at each connect as libpq reads it
	// (internal/connstring): only when no password was given, in the connection string,
	// PGPASSWORD or the pgx configuration (PgxConfig). With WithBeforeConnect, which sees it and
	// may still set one, it is read now; without, only once the server asks for a password
	// (Negotiator.SetPasswordFunc), so that a server that asks none costs no file lookup.
	lazyPassfile := cfg.Password == "" && c.beforeConnect == nil && !c.passwordFunc
	if cfg.Password == "" && !lazyPassfile && !c.passwordFunc {
		pw, err := connstring.PasswordFromFile(ctx, c.settings, cfg.Database, cfg.User)
		if err != nil {
			return &negotiation.AbortError{Err: err}
		}
		cfg.Password = pw
	}
	if c.beforeConnect != nil {
		fields := pgxconfig.FieldsOf(cfg)
		if err := hookError("WithBeforeConnect", c.beforeConnect(ctx, cfg)); err != nil {
			return err
		}
		if what := fields.ChangedBy(cfg); what != "" {
			return hookError("WithBeforeConnect", errors.New("it changed "+what+", which the connector sets for each attempt"))
		}
		fields.Restore(cfg)
	}
	// Last: the authentication exchange is the negotiator's, with what the hooks left.
	if err := c.negotiator.ConfigureAuth(ctx, &cfg.Config); err != nil || !lazyPassfile {
		return err
	}
	if !connstring.HasPassfile(c.settings) {
		return nil
	}
	db, user := cfg.Database, cfg.User
	return c.negotiator.SetPasswordFunc(ctx, func() (string, error) {
		return connstring.PasswordFromFile(ctx, c.settings, db, user)
	})
}

// OpenDB returns sql.OpenDB(c) with the pool metrics of the returned sql.DB reported to the
// meter provider: db.client.connection.count (idle, used), db.client.connection.max (when
// SetMaxOpenConns set one), pgconnector.connection.waits and pgconnector.connection.wait_time,
// read from DBStats at each collection. They stop with DB.Close, which closes the connector.
// A pool opened with sql.OpenDB(c) has every other metric and span, but not these: the
// connector does not own it.
func (c *Connector) OpenDB() *sql.DB {
	db := sql.OpenDB(c)
	unregister := c.metrics.ObserveDBStats(db.Stats)
	c.mu.Lock()
	c.onClose = append(c.onClose, unregister)
	c.mu.Unlock()
	return db
}

// Driver returns a driver whose Open parses its argument with New; database/sql uses Connect.
func (c *Connector) Driver() driver.Driver { return Driver{} }

// Close releases what the connector holds and stops the pool metrics of [Connector.OpenDB] and
// [Connector.OpenPool] (a pgxpool.Pool has no hook of its own to stop them at its Close). It
// cancels a background refresh of a remembered answer and waits for it to end, and closes the
// credential cache (a KCM cache's connection to its daemon), so that no goroutine or socket of
// the connector outlives it; connections already open stay open. A connect after Close that
// needs Kerberos finds no credentials. database/sql calls it from DB.Close.
func (c *Connector) Close() error {
	c.negotiator.Close() // first: a refresh may still authenticate with the credentials below
	c.mu.Lock()
	onClose := c.onClose
	c.onClose = nil
	c.mu.Unlock()
	for _, f := range onClose {
		f()
	}
	return c.closeGSS()
}

// Settings returns what New parsed. The result must not be modified.
func (c *Connector) Settings() *Settings { return c.settings }

// Driver is a database/sql driver registered as "pgconnector" by this package's init:
// sql.Open("pgconnector", dsn) works like sql.OpenDB(New(dsn)) without options, in a program
// that imports this package, blank if it uses nothing else of it:
//
//	import _ "github.com/pgconnector/pgconnector"
//
// Without the import, sql.Open fails with `sql: unknown driver "pgconnector" (forgotten import?)`.
type Driver struct{}

// Open opens one connection from a DSN (database/sql uses OpenConnector instead), with a
// Connector of its own that it closes once the connect is over: nothing of it (a KCM
// connection, a background refresh) outlives the connect.
func (Driver) Open(dsn string) (driver.Conn, error) {
	c, err := New(dsn)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Connect(context.Background())
}

// OpenConnector parses dsn with New.
func (Driver) OpenConnector(dsn string) (driver.Connector, error) { return New(dsn) }

func init() { sql.Register("pgconnector", Driver{}) }

var _ interface {
	driver.Connector
	Close() error
} = (*Connector)(nil)

var _ driver.DriverContext = Driver{}
