package tlspolicy

import (
	"bytes"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// The host name check of sslmode=verify-full is libpq's (15 to 18: fe-secure-common.c,
// pq_verify_peer_name_matches_certificate, pq_verify_peer_name_matches_certificate_name and
// _ip; fe-secure-openssl.c, pgtls_verify_peer_name_matches_certificate_guts), not crypto/x509's:
//   - the host is the name as written in the connection string (host, not hostaddr); it is an IP
//     address when glibc's inet_aton reads it (192.0.2.1, but also 192.000.002.001, 0xc0.2.1,
//     3221225985) or inet_pton reads it as IPv6 (no zone, no brackets, no prefix length);
//   - the subjectAltName entries are examined in their order: a dNSName matches when it equals
//     the host (ASCII letters in any case) or is a wildcard "*.rest" whose "*" stands for one
//     label (no dot) of the host, case-insensitive; an iPAddress matches when the host is an
//     address of the same length (4 or 16 bytes) equal to it. Both kinds are compared with every
//     host: an IP host matches a dNSName written as that address, a dNSName host never matches an
//     iPAddress;
//   - the subject's first Common Name is compared as a dNSName is, only when no subjectAltName of
//     the host's kind (dNSName for a name, iPAddress for an address) exists and none matched;
//   - a name with a NUL byte is an error ("SSL certificate's name contains embedded null"), as is
//     an iPAddress of another length than 4 or 16.
//
// A refusal names the first name examined and how many more there were, in libpq's words:
// `server certificate for "NAME" does not match host name "HOST"`, `server certificate for
// "NAME" (and N other names) does not match host name "HOST"`, or "could not get server's host
// name from server certificate" when there was none. An iPAddress is shown as libpq's
// pg_inet_net_ntop shows it.

// checkHostName checks host against the server's certificate cert as libpq does (see above).
func checkHostName(cert *x509.Certificate, host string) error {
	if host == "" {
		return errors.New("host name must be specified for a verified SSL connection")
	}
	rc, examined, first, err := matchHostName(cert, host)
	switch {
	case err != nil:
		return err
	case rc:
		return nil
	case examined > 1:
		other := "other names"
		if examined == 2 {
			other = "other name"
		}
		return fmt.Errorf("server certificate for %q (and %d %s) does not match host name %q", first, examined-1, other, host)
	case examined == 1:
		return fmt.Errorf("server certificate for %q does not match host name %q", first, host)
	}
	return errors.New("could not get server's host name from server certificate")
}

var (
	oidSAN        = asn1.ObjectIdentifier{2, 5, 29, 17}
	oidCommonName = asn1.ObjectIdentifier{2, 5, 4, 3}
)

// GeneralName tags (RFC 5280, 4.2.1.6).
const (
	tagDNSName   = 2
	tagIPAddress = 7
)

// matchHostName is pgtls_verify_peer_name_matches_certificate_guts: whether a name matched, how
// many names were examined, the first name examined (for the message), or an error.
func matchHostName(cert *x509.Certificate, host string) (match bool, examined int, first string, err error) {
	hostType := tagDNSName
	if isIPAddress(host) {
		hostType = tagIPAddress
	}
	checkCN := true
	note := func(name string) {
		if examined == 1 {
			first = name
		}
	}
	if san, ok := extension(cert, oidSAN); ok {
		names, err := parseSAN(san)
		if err != nil {
			return false, 0, "", fmt.Errorf("could not read the subjectAltName of the server certificate: %w", err)
		}
		for _, gn := range names {
			if gn.Tag == hostType {
				checkCN = false
			}
			switch gn.Tag {
			case tagDNSName:
				examined++
				name, ok, err := matchName(gn.Bytes, host)
				if err != nil {
					return false, examined, first, err
				}
				note(name)
				if ok {
					return true, examined, first, nil
				}
			case tagIPAddress:
				examined++
				name, ok, err := matchIP(gn.Bytes, host)
				if err != nil {
					return false, examined, first, err
				}
				note(name)
				if ok {
					return true, examined, first, nil
				}
			}
		}
	}
	if !checkCN {
		return false, examined, first, nil
	}
	cn, ok, err := firstCommonName(cert.RawSubject)
	if err != nil {
		return false, examined, first, fmt.Errorf("could not read the subject of the server certificate: %w", err)
	}
	if !ok {
		return false, examined, first, nil
	}
	examined++
	name, ok, err := matchName(cn, host)
	if err != nil {
		return false, examined, first, err
	}
	note(name)
	return ok, examined, first, nil
}

func extension(cert *x509.Certificate, oid asn1.ObjectIdentifier) ([]byte, bool) {
	for _, e := range cert.Extensions {
		if e.Id.Equal(oid) {
			return e.Value, true
		}
	}
	return nil, false
}

// parseSAN reads a subjectAltName's GeneralNames in order.
func parseSAN(der []byte) ([]asn1.RawValue, error) {
	var seq asn1.RawValue
	if rest, err := asn1.Unmarshal(der, &seq); err != nil || len(rest) > 0 || seq.Tag != asn1.TagSequence || !seq.IsCompound {
		return nil, errors.New("malformed extension")
	}
	var names []asn1.RawValue
	for b := seq.Bytes; len(b) > 0; {
		var gn asn1.RawValue
		var err error
		if b, err = asn1.Unmarshal(b, &gn); err != nil {
			return nil, errors.New("malformed extension")
		}
		if gn.Class == asn1.ClassContextSpecific {
			names = append(names, gn)
		}
	}
	return names, nil
}

// firstCommonName is the content of the first commonName attribute of the DER Name name, as
// X509_NAME_get_index_by_NID(name, NID_commonName, -1) finds it; ok is false when there is none.
func firstCommonName(name []byte) (cn []byte, ok bool, err error) {
	var seq asn1.RawValue
	if rest, err := asn1.Unmarshal(name, &seq); err != nil || len(rest) > 0 || seq.Tag != asn1.TagSequence {
		return nil, false, errors.New("malformed name")
	}
	for rdns := seq.Bytes; len(rdns) > 0; {
		var set asn1.RawValue
		var err error
		if rdns, err = asn1.Unmarshal(rdns, &set); err != nil || set.Tag != asn1.TagSet {
			return nil, false, errors.New("malformed name")
		}
		for b := set.Bytes; len(b) > 0; {
			var atv struct {
				Type  asn1.ObjectIdentifier
				Value asn1.RawValue
			}
			if b, err = asn1.Unmarshal(b, &atv); err != nil {
				return nil, false, errors.New("malformed name")
			}
			if atv.Type.Equal(oidCommonName) {
				return atv.Value.Bytes, true, nil
			}
		}
	}
	return nil, false, nil
}

// matchName is pq_verify_peer_name_matches_certificate_name: the certificate's name (its bytes
// as the certificate holds them) against host.
func matchName(raw []byte, host string) (name string, match bool, err error) {
	if bytes.IndexByte(raw, 0) >= 0 {
		return "", false, errors.New("SSL certificate's name contains embedded null")
	}
	name = string(raw)
	return name, asciiEqualFold(name, host) || wildcardMatch(name, host), nil
}

// wildcardMatch is libpq's wildcard_certificate_match: pattern is "*." and at least one more
// byte, host ends with pattern without its "*" (ASCII letters in any case), and no dot of host
// comes before the part the "*" stands for ends.
func wildcardMatch(pattern, host string) bool {
	lp, ls := len(pattern), len(host)
	if lp < 3 || pattern[0] != '*' || pattern[1] != '.' || lp > ls {
		return false
	}
	if !asciiEqualFold(pattern[1:], host[ls-lp+1:]) {
		return false
	}
	return strings.IndexByte(host, '.') >= ls-lp
}

// asciiEqualFold is pg_strcasecmp(a, b) == 0 for ASCII: A-Z equal a-z, other bytes as they are.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// matchIP is pq_verify_peer_name_matches_certificate_ip: the certificate's address ip (4 or 16
// bytes, network order) against host, read by inet_aton (4 bytes) or inet_pton (16).
func matchIP(ip []byte, host string) (name string, match bool, err error) {
	switch len(ip) {
	case 4:
		if a, ok := inetAton(host); ok {
			match = a == [4]byte(ip)
		}
		return netip.AddrFrom4([4]byte(ip)).String(), match, nil
	case 16:
		if a, ok := inetPton6(host); ok {
			match = a == [16]byte(ip)
		}
		return ntop6([16]byte(ip)), match, nil
	}
	return "", false, fmt.Errorf("certificate contains IP address with invalid length %d", len(ip))
}

// isIPAddress is libpq's is_ip_address (fe-secure-openssl.c): inet_aton or inet_pton(AF_INET6)
// reads host.
func isIPAddress(host string) bool {
	if _, ok := inetAton(host); ok {
		return true
	}
	_, ok := inetPton6(host)
	return ok
}

// inetAton is glibc's inet_aton (resolv/inet_addr.c): one to four parts separated by dots, each
// a C integer (0x or 0X and hex digits, 0 and octal digits, or decimal digits) starting with a
// digit; the last part fills the bytes left (a: 32 bits, a.b: 8.24, a.b.c: 8.8.16), the others
// one byte each. The address may be followed by white space and anything after it.
func inetAton(s string) (addr [4]byte, ok bool) {
	var parts [4]uint64
	n := 0
	i := 0
	for {
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return addr, false
		}
		v, next, ok := cInteger(s, i)
		if !ok {
			return addr, false
		}
		i = next
		if i < len(s) && s[i] == '.' {
			if n > 2 || v > 0xff {
				return addr, false
			}
			parts[n] = v
			n++
			i++
			continue
		}
		parts[n] = v
		break
	}
	if i < len(s) && !isCSpace(s[i]) {
		return addr, false
	}
	last := parts[n]
	if last > [4]uint64{0xffffffff, 0xffffff, 0xffff, 0xff}[n] {
		return addr, false
	}
	for k := 0; k < n; k++ {
		addr[k] = byte(parts[k])
	}
	for k := 3; k >= n; k-- {
		addr[k] = byte(last)
		last >>= 8
	}
	return addr, true
}

// cInteger reads the unsigned integer at s[i:] as strtoul(s, &end, 0) does, s[i] being a digit;
// ok is false when it is over 0xffffffff.
func cInteger(s string, i int) (v uint64, next int, ok bool) {
	base := uint64(10)
	if s[i] == '0' {
		base = 8
		if i+2 < len(s) && (s[i+1] == 'x' || s[i+1] == 'X') && hexDigit(s[i+2]) >= 0 {
			base = 16
			i += 2
		}
	}
	for ; i < len(s); i++ {
		d := hexDigit(s[i])
		if d < 0 || uint64(d) >= base {
			break
		}
		v = v*base + uint64(d)
		if v > 0xffffffff {
			return 0, i, false
		}
	}
	return v, i, true
}

func hexDigit(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// isCSpace is isspace() in the C locale.
func isCSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// inetPton6 is inet_pton(AF_INET6, s): eight groups of one to four hex digits, "::" once for a
// run of zero groups, the last 32 bits possibly as a dotted-decimal IPv4 address; no zone.
func inetPton6(s string) (addr [16]byte, ok bool) {
	if !strings.Contains(s, ":") || strings.Contains(s, "%") {
		return addr, false
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() {
		return addr, false
	}
	return a.As16(), true
}

// ntop6 is PostgreSQL's pg_inet_net_ntop(AF_INET6, ip, 128) (src/port/inet_net_ntop.c): the
// longest run of two or more zero groups as "::", groups in lower-case hex without leading
// zeros, and the last 32 bits in dotted decimal after six zero groups (::a.b.c.d, except ::1 and
// ::), after seven with the last group not 1, or after five zero groups and ffff.
func ntop6(ip [16]byte) string {
	var words [8]uint16
	for i := range words {
		words[i] = uint16(ip[2*i])<<8 | uint16(ip[2*i+1])
	}
	bestBase, bestLen, curBase, curLen := -1, 0, -1, 0
	for i, w := range words {
		if w == 0 {
			if curBase == -1 {
				curBase, curLen = i, 1
			} else {
				curLen++
			}
			continue
		}
		if curBase != -1 {
			if bestBase == -1 || curLen > bestLen {
				bestBase, bestLen = curBase, curLen
			}
			curBase = -1
		}
	}
	if curBase != -1 && (bestBase == -1 || curLen > bestLen) {
		bestBase, bestLen = curBase, curLen
	}
	if bestBase != -1 && bestLen < 2 {
		bestBase = -1
	}
	var b strings.Builder
	for i := 0; i < len(words); i++ {
		if bestBase != -1 && i >= bestBase && i < bestBase+bestLen {
			if i == bestBase {
				b.WriteByte(':')
			}
			continue
		}
		if i != 0 {
			b.WriteByte(':')
		}
		if i == 6 && bestBase == 0 && (bestLen == 6 || bestLen == 7 && words[7] != 1 || bestLen == 5 && words[5] == 0xffff) {
			fmt.Fprintf(&b, "%d.%d.%d.%d", ip[12], ip[13], ip[14], ip[15])
			return b.String()
		}
		b.WriteString(strconv.FormatUint(uint64(words[i]), 16))
	}
	if bestBase != -1 && bestBase+bestLen == len(words) {
		b.WriteByte(':')
	}
	return b.String()
}
