package tlspolicy

import "strings"

// SNIName is the SNI (tls.Config ServerName, "" for none) to send for host: libpq's rule
// (fe-secure-openssl.c, initialize_SSL): only with sslsni=1, and not for an IP address (a host of
// digits and dots only, or with a colon).
func SNIName(host string, sni bool) string {
	if !sni || host == "" || strings.Trim(host, "0123456789.") == "" || strings.Contains(host, ":") {
		return ""
	}
	return host
}
