package tlspolicy

import (
	"crypto/tls"
	"slices"
	"strings"
)

// protocolVersions are the values of ssl_min_protocol_version and ssl_max_protocol_version, in
// order (libpq-connect.html, "Parameter Key Words"), with their crypto/tls versions.
var (
	protocolVersions   = []string{"TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"}
	protocolVersionIDs = []uint16{tls.VersionTLS10, tls.VersionTLS11, tls.VersionTLS12, tls.VersionTLS13}
)

// DefaultMinProtocolVersion is libpq's default ssl_min_protocol_version (since PostgreSQL 13).
const DefaultMinProtocolVersion = "TLSv1.2"

// ProtocolVersions returns the values of ssl_min_protocol_version and ssl_max_protocol_version,
// lowest first: "TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3" (a new slice each call).
func ProtocolVersions() []string { return slices.Clone(protocolVersions) }

// ParseProtocolVersion reads a value of ssl_min_protocol_version or ssl_max_protocol_version
// in any letter case, as libpq does (sslVerifyProtocolVersion, pg_strcasecmp): name is the
// value as ProtocolVersions spells it, id its crypto/tls version (tls.VersionTLS10 ...); ok is
// false for any other value, the empty one (no bound) included.
func ParseProtocolVersion(v string) (name string, id uint16, ok bool) {
	for i, name := range protocolVersions {
		if strings.EqualFold(v, name) {
			return name, protocolVersionIDs[i], true
		}
	}
	return "", 0, false
}

// ProtocolRangeValid is libpq's check of the range (fe-connect.c, sslVerifyProtocolRange): false
// when both bounds are given (as ProtocolVersions spells them; "" for no bound) and the minimum
// is above the maximum.
func ProtocolRangeValid(minName, maxName string) bool {
	return minName == "" || maxName == "" || slices.Index(protocolVersions, minName) <= slices.Index(protocolVersions, maxName)
}
