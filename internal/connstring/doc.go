// Package connstring reads a libpq connection string once, as libpq reads it: the string itself
// (keyword/value or a postgres:// URL), the PG* environment variables, the service file and, at
// each connect, the password file, with libpq's precedence (fe-connect.c, conninfo_add_defaults:
// the string, then the service file's section, then the environment). What is read is one
// ordered set of (key, value, where it came from); the validation, the error messages (a
// [ParseError] never shows a secret), the libpq keyword table ([Keywords]), the pgx
// configuration and the negotiation's per-host settings ([Settings].Hosts) all read that set:
// pgx is given a keyword/value string built from it (pgxString), never the string itself. A key
// that libpq does not know is refused unless it is pgx's or a server parameter (keys.go).
//
// It is the connector's package: the root package pgconnector re-exports [Parse] as
// ParseSettings and the types a user meets (Settings, ParseError, Keyword).
package connstring

import "errors"

// ErrNoGSS is wrapped by the errors of a build with the pgconnector_nogss tag, which leaves out
// Kerberos as libpq built without GSSAPI leaves it out (libpq-connect.html, gssencmode): here,
// the ParseError of gssencmode=require. pgconnector.ErrNoGSS is this error.
var ErrNoGSS = errors.New("GSSAPI support is not compiled in (built with the pgconnector_nogss tag)")
