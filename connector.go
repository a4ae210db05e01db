// Package pgconnector opens PostgreSQL connections for database/sql on top of pgx, deciding the
// transport of each host of a connection string once, from a cached capability probe, instead of
// re-learning it on every connection, and reporting every negotiation step as an OpenTelemetry span.
//
//	c, err := pgconnector.New("host=db.example user=app dbname=app")
//	if err != nil { ... }
//	db := sql.OpenDB(c)
//	defer db.Close()
//
// Connection strings are those of pgx (URL or keyword/value, PG* environment variables), plus the
// libpq keys pgx lacks: gssencmode (PGGSSENCMODE) and gssdelegation. See the README for what the
// connector does differently from pgx and libpq.
package pgconnector

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector/internal/gss"
	"github.com/pgconnector/pgconnector/negotiation"
	"github.com/pgconnector/pgconnector/tracing"
)

// DefaultCacheTTL is how long a server's answer is trusted when WithCacheTTL is not given.
const DefaultCacheTTL = 5 * time.Minute

// Connector opens connections for database/sql: use it with sql.OpenDB. It implements
// driver.Connector and io.Closer, and is safe for concurrent use.
type Connector struct {
	settings   *Settings
	negotiator *negotiation.Negotiator
	stdlib     driver.Connector
	gss        *gss.Client
	unregister func()
}

// Option configures a Connector.
type Option func(*options)

type options struct {
	tracerProvider trace.TracerProvider
	cacheTTL       time.Duration
	kerberos       Kerberos
}

// Kerberos says where the client's Kerberos configuration and credentials are. Empty fields take
// MIT's environment, read once by New: KRB5_CONFIG (else /etc/krb5.conf), KRB5CCNAME (a FILE
// credential cache, else /tmp/krb5cc_<uid>), KRB5_CLIENT_KTNAME.
type Kerberos struct {
	Krb5Conf     string // krb5.conf path
	CCache       string // FILE credential cache path, as written by kinit
	ClientKeytab string // keytab to obtain credentials from when the cache holds none
	Principal    string // client principal (user@REALM) in ClientKeytab; empty: its first entry
}

// WithKerberos sets where the Kerberos credentials for GSSAPI encryption and authentication are.
// Default: the environment, as libpq.
func WithKerberos(k Kerberos) Option {
	return func(o *options) { o.kerberos = k }
}

// WithTracerProvider sets where spans go. Default: otel.GetTracerProvider() at the time of New.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracerProvider = tp }
}

// WithCacheTTL sets how long a server's answer to SSLRequest (and, with Kerberos, to
// GSSENCRequest) is trusted. Zero or less disables remembering: every connection then negotiates
// as libpq does. Default: DefaultCacheTTL.
func WithCacheTTL(d time.Duration) Option {
	return func(o *options) { o.cacheTTL = d }
}

// New parses dsn and returns a Connector. It opens no connection.
//
// Errors name the bad key or value and never contain the password. Keys and values are those of
// pgx.ParseConfig, plus:
//   - gssencmode: disable, prefer (default) or require; PGGSSENCMODE when absent;
//   - gssdelegation: 0 (default) or 1.
//
// Neither is sent to the server as a run-time parameter.
func New(dsn string, opts ...Option) (*Connector, error) {
	o := options{cacheTTL: DefaultCacheTTL}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.tracerProvider == nil {
		o.tracerProvider = otel.GetTracerProvider()
	}
	s, err := ParseSettings(dsn)
	if err != nil {
		return nil, err
	}
	krb := gss.NewClient(gss.ClientConfig{
		Krb5Conf:     o.kerberos.Krb5Conf,
		CCache:       o.kerberos.CCache,
		ClientKeytab: o.kerberos.ClientKeytab,
		Principal:    o.kerberos.Principal,
		Service:      s.Config.KerberosSrvName,
		SPN:          s.Config.KerberosSpn,
	})
	neg, err := negotiation.NewNegotiator(negotiation.Config{
		Hosts:      s.Hosts,
		GSSEncMode: s.GSSEncMode,
		DirectSSL:  s.Config.SSLNegotiation == "direct",
		Database:   s.Config.Database,
		Cache:      negotiation.NewCache(o.cacheTTL),
		Trace:      tracing.NewTrace(o.tracerProvider),
		LookupFunc: s.Config.LookupFunc,
		DialFunc:   s.Config.DialFunc,
		GSS:        krb,
	})
	if err != nil {
		return nil, err
	}
	c := &Connector{settings: s, negotiator: neg, gss: krb, unregister: krb.Register()}
	c.stdlib = stdlib.GetConnector(*s.Config, stdlib.OptionBeforeConnect(func(ctx context.Context, cfg *pgx.ConnConfig) error {
		if err := neg.Configure(ctx, &cfg.Config); err != nil {
			return err
		}
		// GSS authentication (pg_hba method gss without GSS encryption) with this
		// connector's credentials: see internal/gss, pgxauth.go.
		cfg.KerberosSpn = krb.AuthToken(cfg.Host)
		return nil
	}))
	return c, nil
}

// Connect opens one connection: it decides, per host, which of GSSAPI encryption, TLS and
// plaintext to try from what the server answered before, and falls back as libpq does.
// The error of a failed connect says which host and step failed.
func (c *Connector) Connect(ctx context.Context) (driver.Conn, error) {
	var conn driver.Conn
	err := c.negotiator.Connect(ctx, func(ctx context.Context) error {
		var err error
		conn, err = c.stdlib.Connect(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// Driver returns a driver whose Open parses its argument with New; database/sql uses Connect.
func (c *Connector) Driver() driver.Driver { return Driver{} }

// Close releases what the connector holds. database/sql calls it from DB.Close.
func (c *Connector) Close() error {
	c.unregister()
	return nil
}

// Settings returns what New parsed. The result must not be modified.
func (c *Connector) Settings() *Settings { return c.settings }

// Driver is a database/sql driver registered as "pgconnector": sql.Open("pgconnector", dsn)
// works like sql.OpenDB(New(dsn)) without options.
type Driver struct{}

// Open opens one connection from a DSN (database/sql uses OpenConnector instead).
func (Driver) Open(dsn string) (driver.Conn, error) {
	c, err := New(dsn)
	if err != nil {
		return nil, err
	}
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
