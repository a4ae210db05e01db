package tlspolicy

import (
	"crypto/tls"
	"fmt"
	"slices"
	"strings"
)

// Rules are the fields of a client TLS configuration that carry libpq's rules (the name checked
// under verify-full, ssl_min_protocol_version and ssl_max_protocol_version) and that an
// application's change (the connector's WithTLSConfigFunc) may weaken.
type Rules struct {
	serverName             string
	minVersion, maxVersion uint16
}

// RulesOf returns c's Rules.
func RulesOf(c *tls.Config) Rules {
	return Rules{serverName: c.ServerName, minVersion: c.MinVersion, maxVersion: c.MaxVersion}
}

// WeakenedBy says how tc, an application's change of a configuration the connector built (r,
// before the change), weakens or undoes libpq's rules, "" when it does not: the connector's
// VerifyConnection removed, InsecureSkipVerify turned off (the connector verifies the server
// itself), ServerName changed when verifyName (the certificate is checked against host:
// verify-full, or sslrootcert=system), MinVersion lowered, MaxVersion raised above a bound, ALPN
// "postgresql" removed (libpq 17 offers it on every TLS connection; direct TLS needs it).
func (r Rules) WeakenedBy(tc *tls.Config, host string, verifyName bool) string {
	switch {
	case tc.VerifyConnection == nil:
		return "it removed VerifyConnection, the connector's check of the server certificate (libpq's rules for sslmode, " +
			"sslrootcert and sslcrl): wrap it, or set a function of your own, to add a check"
	case !tc.InsecureSkipVerify:
		return "it turned InsecureSkipVerify off: the connector verifies the server certificate itself, as libpq does " +
			"(crypto/tls's verification is not used); give trust anchors in RootCAs"
	case verifyName && tc.ServerName != r.serverName && !strings.EqualFold(tc.ServerName, host):
		return fmt.Sprintf("it changed ServerName to %q: under verify-full the server certificate is checked against the host %q; "+
			"write the name to check as the host (with hostaddr for the address to connect to)", tc.ServerName, host)
	case effectiveMinTLS(tc.MinVersion) < effectiveMinTLS(r.minVersion):
		return fmt.Sprintf("it lowered MinVersion to %s, below the connector's %s (ssl_min_protocol_version)",
			tlsVersionName(tc.MinVersion), tlsVersionName(effectiveMinTLS(r.minVersion)))
	case r.maxVersion != 0 && (tc.MaxVersion == 0 || tc.MaxVersion > r.maxVersion):
		return fmt.Sprintf("it raised MaxVersion to %s, above ssl_max_protocol_version %s",
			tlsVersionName(tc.MaxVersion), tlsVersionName(r.maxVersion))
	case !slices.Contains(tc.NextProtos, "postgresql"):
		return `it removed ALPN "postgresql" from NextProtos, which libpq 17 offers on every TLS connection and direct TLS needs`
	}
	return ""
}

// effectiveMinTLS is the least version a client configuration offers: crypto/tls's client
// minimum, TLS 1.2, when MinVersion is 0.
func effectiveMinTLS(v uint16) uint16 {
	if v == 0 {
		return tls.VersionTLS12
	}
	return v
}

func tlsVersionName(v uint16) string {
	if v == 0 {
		return "no bound"
	}
	return tls.VersionName(v)
}
