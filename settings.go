package pgconnector

import (
	"github.com/pgconnector/pgconnector/internal/connstring"
	"github.com/pgconnector/pgconnector/internal/keepalive"
)

// Settings is a parsed connection string (made in internal/connstring). Its fields:
//
//	Config             *pgx.ConnConfig                // what pgx parsed, no libpq key in RuntimeParams
//	Hosts              []negotiation.Host             // in order: host, port, sslmode, hostaddr, TLS configuration
//	GSSEncMode         negotiation.GSSEncMode         // gssencmode, or PGGSSENCMODE
//	GSSDelegation      bool                           // gssdelegation=1
//	TargetSessionAttrs negotiation.TargetSessionAttrs // target_session_attrs, or PGTARGETSESSIONATTRS
//	LoadBalanceHosts   bool                           // load_balance_hosts=random
//	RequirePeer        string                         // requirepeer, or PGREQUIREPEER
//	Keepalives         *Keepalives                    // nil when no keepalive key is given
//	OAuth              OAuthKeys                      // oauth_issuer, oauth_client_id, oauth_client_secret, oauth_scope
//
// Config.Password is the string's or PGPASSWORD's only: the password file is read at each
// connect, for each host apart.
type Settings = connstring.Settings

// Keepalives are libpq's TCP socket options (libpq-connect.html, keepalives to
// tcp_user_timeout); a zero value leaves the system's default. Its fields:
//
//	Off         bool          // keepalives=0
//	Idle        time.Duration // keepalives_idle (seconds in the string): TCP_KEEPIDLE
//	Interval    time.Duration // keepalives_interval (seconds): TCP_KEEPINTVL
//	Count       int           // keepalives_count: TCP_KEEPCNT
//	UserTimeout time.Duration // tcp_user_timeout (milliseconds): TCP_USER_TIMEOUT, Linux
type Keepalives = keepalive.Options

// OAuthKeys are libpq 18's OAuth keys (libpq-connect.html, oauth_issuer to oauth_scope), from
// the string, a URL or a service file (libpq reads no environment variable for them); an empty
// value is not given. None is sent to the server. Its String shows no secret. Its fields:
//
//	Issuer       string // oauth_issuer: an issuer identifier, or its .well-known URI
//	ClientID     string // oauth_client_id
//	ClientSecret string // oauth_client_secret: never shown
//	Scope        string // oauth_scope: replaces the scope the server asks for
type OAuthKeys = connstring.OAuth

// ParseSettings parses a connection string as New does: the string, the PG* environment
// variables and the service file, with libpq's precedence. Every error is a [*ParseError]: it
// names the bad key (and the allowed values) and never holds the password or another secret.
func ParseSettings(dsn string) (*Settings, error) { return connstring.Parse(dsn) }

// ParseError is every error of [ParseSettings], and of [New] but for WithKerberos in a build
// with the pgconnector_nogss tag: a connection string, a PG* environment variable or a service
// file entry that cannot be used. Its fields:
//
//	Key string // the key at fault as libpq names it ("sslmode", "port", ...); "" when a malformed string names none
//	Env string // the environment variable the bad value came from, or ""
//
// Error's message names the allowed values when there is a fixed set. It never holds a secret: a
// value is shown only when it cannot be one (64 bytes at most, printable, without "=", a quote, a
// backslash or white space). Unwrap gives [ErrNoGSS] for gssencmode=require in a build with that
// tag, else nil.
type ParseError = connstring.ParseError

// Keyword is one libpq connection keyword (libpq-connect.html, "Parameter Key Words"). Its fields:
//
//	Name   string // the key, as in a connection string or a URL query
//	Env    string // the environment variable libpq reads for it, or ""
//	Since  string // the libpq major version that added it: "15" for every key of 15 and before
//	Status Status // Honoured, NoEffect or Rejected
//	Note   string // how, or why not
type Keyword = connstring.Keyword

// Status says what the connector does with a libpq connection keyword.
type Status = connstring.Status

// The statuses of a [Keyword].
const (
	Honoured = connstring.Honoured // the key has libpq's meaning
	NoEffect = connstring.NoEffect // accepted, does nothing, for the reason its note gives
	Rejected = connstring.Rejected // a connection string with the key is an error of New
)

// Keywords lists every keyword of libpq 15 to 18 and what the connector does with it. None of
// them is sent to the server as a run-time parameter unless libpq sends it too
// (application_name, client_encoding, options and replication).
func Keywords() []Keyword { return connstring.Keywords() }
