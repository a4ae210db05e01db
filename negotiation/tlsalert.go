package negotiation

import (
	"errors"
	"net"
	"reflect"
)

// opensslAlerts are OpenSSL's reason strings for a TLS alert received from the peer
// (ssl/ssl_err.c, SSL_R_SSLV3_ALERT_* and SSL_R_TLSV1_ALERT_*), which libpq reports as
// "SSL error: REASON": the alert's code (RFC 8446, 6) to its words.
var opensslAlerts = map[uint8]string{
	10: "sslv3 alert unexpected message", 20: "sslv3 alert bad record mac", 21: "tlsv1 alert decryption failed",
	22: "tlsv1 alert record overflow", 30: "sslv3 alert decompression failure", 40: "sslv3 alert handshake failure",
	42: "sslv3 alert bad certificate", 43: "sslv3 alert unsupported certificate", 44: "sslv3 alert certificate revoked",
	45: "sslv3 alert certificate expired", 46: "sslv3 alert certificate unknown", 47: "sslv3 alert illegal parameter",
	48: "tlsv1 alert unknown ca", 49: "tlsv1 alert access denied", 50: "tlsv1 alert decode error",
	51: "tlsv1 alert decrypt error", 70: "tlsv1 alert protocol version", 71: "tlsv1 alert insufficient security",
	80: "tlsv1 alert internal error", 86: "tlsv1 alert inappropriate fallback", 90: "tlsv1 alert user cancelled",
	100: "tlsv1 alert no renegotiation", 116: "tlsv13 alert certificate required", 120: "tlsv1 alert no application protocol",
}

// serverAlert returns libpq's words for a TLS alert the server sent ("SSL error: sslv3 alert
// certificate revoked"), and whether err is one. crypto/tls returns a received alert as a
// *net.OpError of Op "remote error" whose Err is its own (unexported) alert type, a uint8.
func serverAlert(err error) (string, bool) {
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "remote error" || oe.Err == nil {
		return "", false
	}
	v := reflect.ValueOf(oe.Err)
	if v.Kind() != reflect.Uint8 || v.Type().PkgPath() != "crypto/tls" {
		return "", false
	}
	if s, ok := opensslAlerts[uint8(v.Uint())]; ok {
		return "SSL error: " + s, true
	}
	return "SSL error: " + oe.Err.Error(), true
}
