package pgconnector

import (
	"github.com/pgconnector/pgconnector/internal/connstring"
	"github.com/pgconnector/pgconnector/internal/keepalive"
)

// Settings is a parsed connection string (internal/connstring): Config is what pgx parsed,
// without the libpq keys in RuntimeParams; Hosts are the hosts in order, each with its sslmode,
// hostaddr and TLS configuration; GSSEncMode, GSSDelegation, TargetSessionAttrs,
// LoadBalanceHosts, RequirePeer and Keepalives are the libpq keys of those names (or their PG*
// environment variables). The password file is read at each connect, for each host apart.
type Settings = connstring.Settings

// Keepalives are libpq's TCP socket options (libpq-connect.html, keepalives to
// tcp_user_timeout): Off (keepalives=0), Idle and Interval (seconds in the string), Count, and
// UserTimeout (milliseconds in the string); a zero duration leaves the system's default.
type Keepalives = keepalive.Options

// ParseSettings parses a connection string as New does: the string, the PG* environment
// variables and the service file, with libpq's precedence. Every error is a [*ParseError]: it
// names the bad key (and the allowed values) and never holds the password or another secret.
func ParseSettings(dsn string) (*Settings, error) { return connstring.Parse(dsn) }

// ParseError is every error of [ParseSettings], and of [New] but for WithKerberos in a build
// with the pgconnector_nogss tag: a connection string, a PG* environment variable or a service
// file entry that cannot be used. Key is the key at fault as libpq names it ("sslmode", "port",
// ...; "" when the string is malformed where no key can be named), Env the environment variable
// the bad value came from, or "". The message names the allowed values when there is a fixed
// set. It never holds a secret: a value is shown only when it cannot be one. gssencmode=require
// in a build with that tag unwraps to [ErrNoGSS]; no other ParseError unwraps.
type ParseError = connstring.ParseError

// Keyword is one libpq connection keyword (libpq-connect.html, "Parameter Key Words"): Name,
// Env (its environment variable, or ""), Since (the libpq major version that added it), Status
// and Note (how, or why not).
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
