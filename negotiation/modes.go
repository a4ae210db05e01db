// Package negotiation decides, per host of a connection string, how a PostgreSQL connection is
// negotiated (GSSAPI encryption, TLS or plaintext, in which order, on which socket), remembers what
// each server answered, and carries the decision out over pgx.
//
// The decision ([Decide]) is a pure function of the requested modes and of what is known; it has no
// network code and is tested row by row against libpq's rules (src/interfaces/libpq/fe-connect.c,
// init_allowed_encryption_methods and select_next_encryption_method). The wire code ([Negotiator])
// executes the decision and reports every step to a [Trace].
package negotiation

import (
	"errors"
	"fmt"
)

// SSLMode is libpq's sslmode (https://www.postgresql.org/docs/current/libpq-ssl.html#LIBPQ-SSL-PROTECTION).
// The zero value is invalid; pgx's default, like libpq's, is SSLModePrefer.
type SSLMode uint8

const (
	SSLModeDisable    SSLMode = iota + 1 // plaintext only
	SSLModeAllow                         // plaintext first, TLS on a new connection if plaintext fails
	SSLModePrefer                        // TLS if the server accepts SSLRequest, plaintext otherwise (default)
	SSLModeRequire                       // TLS, no certificate verification
	SSLModeVerifyCA                      // TLS, the server certificate is signed by a trusted CA
	SSLModeVerifyFull                    // TLS, verify-ca and the host name matches the certificate
)

var sslModeNames = [...]string{"", "disable", "allow", "prefer", "require", "verify-ca", "verify-full"}

func (m SSLMode) String() string {
	if int(m) < len(sslModeNames) && m != 0 {
		return sslModeNames[m]
	}
	return fmt.Sprintf("SSLMode(%d)", uint8(m))
}

// requiresTLS reports whether the mode never accepts an unencrypted-by-TLS connection
// (a GSS-encrypted one is still accepted, as libpq does).
func (m SSLMode) requiresTLS() bool { return m >= SSLModeRequire }

// GSSEncMode is libpq's gssencmode (https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-CONNECT-GSSENCMODE).
// The zero value is invalid; the default, as in libpq built with GSSAPI, is GSSEncModePrefer.
type GSSEncMode uint8

const (
	GSSEncModeDisable GSSEncMode = iota + 1 // never send GSSENCRequest
	GSSEncModePrefer                        // try GSSAPI encryption when client credentials exist (default)
	GSSEncModeRequire                       // GSSAPI encryption or an error
)

var gssEncModeNames = [...]string{"", "disable", "prefer", "require"}

func (m GSSEncMode) String() string {
	if int(m) < len(gssEncModeNames) && m != 0 {
		return gssEncModeNames[m]
	}
	return fmt.Sprintf("GSSEncMode(%d)", uint8(m))
}

// ParseGSSEncMode parses a gssencmode value. An empty string is the default, prefer.
// The error names the key and the allowed values; it does not quote the value, which may hold
// anything (a key left empty takes the next word of a connection string, password=... included).
func ParseGSSEncMode(s string) (GSSEncMode, error) {
	switch s {
	case "", "prefer":
		return GSSEncModePrefer, nil
	case "disable":
		return GSSEncModeDisable, nil
	case "require":
		return GSSEncModeRequire, nil
	}
	return 0, errors.New("invalid gssencmode: must be one of disable, prefer, require")
}

// ParseGSSDelegation reads gssdelegation as libpq 16 does: on when the value starts with '1'
// (fe-auth.c, fe-secure-gssapi.c: conn->gssdelegation[0] == '1'), off otherwise, with no
// value ever rejected ("true" is off, as in libpq).
func ParseGSSDelegation(s string) bool {
	return len(s) > 0 && s[0] == '1'
}
