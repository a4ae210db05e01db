package pgconnector_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/internal/testpki"
)

// sslSuiteCase is one connection of PostgreSQL 18's SSL suite (src/test/ssl/t/001_ssltests.pl,
// 002_scram.pl and 003_sslinfo.pl; a name without a line number is a case whose line is not
// pinned):
// the server set-up it runs against, the connection string (paths "ssl/..." are the suite's
// files, written to a directory of the test's), and what the suite expects: a connection, or
// a refusal whose message matches stderr (the suite's expected_stderr).
type sslSuiteCase struct {
	name     string // "001:<line> <the suite's test name>"
	server   harness.SSLSuiteCert
	conninfo string
	ok       bool
	stderr   string // regexp, for a refusal
	// reason is the class (sslReasons) the connector's refusal must name, when libpq's
	// message is too general to say it: a revoked certificate is "certificate verify
	// failed" in libpq's words. Empty: the class of libpq's message.
	reason string
	// query is what the connection runs (psql -At, fields joined by "|"), "SELECT 1" when
	// empty; result is a regexp (anchored) that the output of libpq's and the connector's
	// run must each match: the suite's expected result. The placeholder {client_serial} is
	// client.crt's serial in decimal, as pg_stat_ssl shows it.
	query, result string
	// queryFails: the connection succeeds and the query fails (003_sslinfo.pl's psql
	// returning 3), for libpq and the connector alike.
	queryFails bool
	// scram: the server's pg_hba.conf and passwords are 002_scram.pl's (scram-sha-256, the
	// password "pass" in PGPASSWORD) rather than 001_ssltests.pl's (trust).
	scram bool
}

// The suite's common strings (001_ssltests.pl's $default_ssl_connstr and $common_connstr).
const (
	sslDefaults     = "sslkey=invalid sslcert=invalid sslrootcert=invalid sslcrl=invalid sslcrldir=invalid "
	sslClient       = sslDefaults + "user=ssltestuser dbname=trustdb hostaddr=127.0.0.1 host=common-name.pg-ssltest.test "
	sslNames        = sslDefaults + "user=ssltestuser dbname=trustdb sslrootcert=ssl/root+server_ca.crt hostaddr=127.0.0.1 "
	sslFull         = sslNames + "sslmode=verify-full "
	sslSystem       = sslDefaults + "user=ssltestuser dbname=trustdb sslrootcert=system hostaddr=127.0.0.1 "
	sslCertdb       = sslDefaults + "sslrootcert=ssl/root+server_ca.crt sslmode=require dbname=certdb hostaddr=127.0.0.1 host=localhost "
	sslVerifydb     = sslDefaults + "sslrootcert=ssl/root+server_ca.crt sslmode=require dbname=verifydb hostaddr=127.0.0.1 host=localhost "
	sslInterm       = sslDefaults + "user=ssltestuser dbname=certdb sslkey=ssl/client.key sslrootcert=ssl/root+server_ca.crt hostaddr=127.0.0.1 host=localhost "
	sslScram        = "dbname=trustdb sslmode=require sslcert=invalid sslrootcert=invalid hostaddr=127.0.0.1 host=localhost "
	sslVerifyFailed = `SSL error: certificate verify failed`
	sslUnknownCA    = `SSL error: tlsv1 alert unknown ca`
	sslRevokedAlert = `SSL error: ssl[a-z0-9/]* alert certificate revoked`
)

func sslSuiteCases() []sslSuiteCase {
	cn := harness.SSLSuiteCert{CertFile: "server-cn-only"}
	srv := func(cert string) harness.SSLSuiteCert { return harness.SSLSuiteCert{CertFile: cert} }
	ok := func(name string, s harness.SSLSuiteCert, conninfo string) sslSuiteCase {
		return sslSuiteCase{name: name, server: s, conninfo: conninfo, ok: true}
	}
	fails := func(name string, s harness.SSLSuiteCert, conninfo, stderr string, reason ...string) sslSuiteCase {
		return sslSuiteCase{name: name, server: s, conninfo: conninfo, stderr: stderr, reason: strings.Join(reason, "")}
	}
	mismatch := func(cert, host string) string {
		return regexp.QuoteMeta(`server certificate for "` + cert + `" does not match host name "` + host + `"`)
	}
	ipAlt, cnIPAlt, ipCNAlt, ipCNDNS := srv("server-ip-alt-names"), srv("server-cn-and-ip-alt-names"), srv("server-ip-cn-and-alt-names"), srv("server-ip-cn-and-dns-alt-names")
	system := harness.SSLSuiteCert{CertFile: "server-cn-only+server_ca", KeyFile: "server-cn-only", CAFile: "root_ca"}
	revoked := srv("server-revoked")
	interm := harness.SSLSuiteCert{CertFile: "server-cn-only", CAFile: "root_ca"}
	untrusted := harness.SSLSuiteCert{CertFile: "server-cn-only", CAFile: "server-cn-only"}
	crldir := harness.SSLSuiteCert{CertFile: "server-cn-only", CRLDir: "root+client-crldir"}
	cases := []sslSuiteCase{
		// Client side: sslmode, the root file and CRLs against server-cn-only.
		fails("001:186 server doesn't accept non-SSL connections", cn, sslClient+"sslmode=disable", `no pg_hba\.conf entry`),
		ok("001:193 connect without server root cert sslmode=require", cn, sslClient+"sslrootcert=invalid sslmode=require"),
		fails("001:196 connect without server root cert sslmode=verify-ca", cn, sslClient+"sslrootcert=invalid sslmode=verify-ca", `root certificate file "invalid" does not exist`),
		fails("001:200 connect without server root cert sslmode=verify-full", cn, sslClient+"sslrootcert=invalid sslmode=verify-full", `root certificate file "invalid" does not exist`),
		fails("001:207 connect with wrong server root cert sslmode=require", cn, sslClient+"sslrootcert=ssl/client_ca.crt sslmode=require", sslVerifyFailed),
		fails("001:211 connect with wrong server root cert sslmode=verify-ca", cn, sslClient+"sslrootcert=ssl/client_ca.crt sslmode=verify-ca", sslVerifyFailed),
		fails("001:215 connect with wrong server root cert sslmode=verify-full", cn, sslClient+"sslrootcert=ssl/client_ca.crt sslmode=verify-full", sslVerifyFailed),
		fails("001:222 connect with server CA cert, without root CA", cn, sslClient+"sslrootcert=ssl/server_ca.crt sslmode=verify-ca", sslVerifyFailed),
		ok("001:228 connect with correct server CA cert file sslmode=require", cn, sslClient+"sslrootcert=ssl/root+server_ca.crt sslmode=require"),
		ok("001:231 connect with correct server CA cert file sslmode=verify-ca", cn, sslClient+"sslrootcert=ssl/root+server_ca.crt sslmode=verify-ca"),
		ok("001:234 connect with correct server CA cert file sslmode=verify-full", cn, sslClient+"sslrootcert=ssl/root+server_ca.crt sslmode=verify-full"),
		ok("001:240 cert root file that contains two certificates, order 1", cn, sslClient+"sslrootcert=ssl/both-cas-1.crt sslmode=verify-ca"),
		ok("001:243 cert root file that contains two certificates, order 2", cn, sslClient+"sslrootcert=ssl/both-cas-2.crt sslmode=verify-ca"),
		ok("001:248 connect with sslcertmode=disable", cn, sslClient+"sslrootcert=ssl/root+server_ca.crt sslmode=require sslcertmode=disable"),
		ok("001:251 connect with sslcertmode=allow", cn, sslClient+"sslrootcert=ssl/root+server_ca.crt sslmode=require sslcertmode=allow"),
		fails("001:256 connect with sslcertmode=require fails without a client certificate", cn, sslClient+"sslrootcert=ssl/root+server_ca.crt sslmode=require sslcertmode=require", `server accepted connection without a valid SSL certificate`),
		ok("001:266 sslcrl option with invalid file name", cn, sslClient+"sslrootcert=ssl/root+server_ca.crt sslmode=verify-ca sslcrl=invalid"),
		fails("001:271 CRL belonging to a different CA", cn, sslClient+"sslrootcert=ssl/root+server_ca.crt sslmode=verify-ca sslcrl=ssl/client.crl", sslVerifyFailed),
		fails("001:278 directory CRL belonging to a different CA", cn, sslClient+"sslcrl='' sslrootcert=ssl/root+server_ca.crt sslmode=verify-ca sslcrldir=ssl/client-crldir", sslVerifyFailed),
		ok("001:284 CRL with a non-revoked cert", cn, sslClient+"sslrootcert=ssl/root+server_ca.crt sslmode=verify-ca sslcrl=ssl/root+server.crl"),
		ok("001:289 directory CRL with a non-revoked cert", cn, sslClient+"sslrootcert=ssl/root+server_ca.crt sslmode=verify-ca sslcrldir=ssl/root+server-crldir"),

		query(ok("001 pg_stat_ssl view without client certificate", cn, sslClient+"sslrootcert=invalid"),
			"SELECT * FROM pg_stat_ssl WHERE pid = pg_backend_pid()", `\d+\|t\|TLSv[\d.]+\|[\w-]+\|\d+\|\|\|`),

		// Host names against the certificate's CN and SANs.
		ok("001:298 mismatch between host name and server certificate sslmode=require", cn, sslNames+"sslmode=require host=wronghost.test"),
		ok("001:300 mismatch between host name and server certificate sslmode=verify-ca", cn, sslNames+"sslmode=verify-ca host=wronghost.test"),
		fails("001:303 mismatch between host name and server certificate sslmode=verify-full", cn, sslNames+"sslmode=verify-full host=wronghost.test", mismatch("common-name.pg-ssltest.test", "wronghost.test")),
		ok("001:317 IP address in the Common Name", srv("server-ip-cn-only"), sslFull+"host=192.0.2.1"),
		fails("001:320 mismatch between host name and server certificate IP address", srv("server-ip-cn-only"), sslFull+"host=192.000.002.001", mismatch("192.0.2.1", "192.000.002.001")),
		ok("001:331 IP address in a dNSName", srv("server-ip-in-dnsname"), sslFull+"host=192.0.2.1"),
		ok("001:340 host name matching with X.509 Subject Alternative Names 1", srv("server-multiple-alt-names"), sslFull+"host=dns1.alt-name.pg-ssltest.test"),
		ok("001:343 host name matching with X.509 Subject Alternative Names 2", srv("server-multiple-alt-names"), sslFull+"host=dns2.alt-name.pg-ssltest.test"),
		ok("001:346 host name matching with X.509 Subject Alternative Names wildcard", srv("server-multiple-alt-names"), sslFull+"host=foo.wildcard.pg-ssltest.test"),
		fails("001:349 host name not matching with X.509 Subject Alternative Names", srv("server-multiple-alt-names"), sslFull+"host=wronghost.alt-name.pg-ssltest.test",
			regexp.QuoteMeta(`server certificate for "dns1.alt-name.pg-ssltest.test" (and 2 other names) does not match host name "wronghost.alt-name.pg-ssltest.test"`)),
		fails("001:355 host name not matching with X.509 Subject Alternative Names wildcard", srv("server-multiple-alt-names"), sslFull+"host=deep.subdomain.wildcard.pg-ssltest.test",
			regexp.QuoteMeta(`server certificate for "dns1.alt-name.pg-ssltest.test" (and 2 other names) does not match host name "deep.subdomain.wildcard.pg-ssltest.test"`)),
		ok("001:369 host name matching with a single X.509 Subject Alternative Name", srv("server-single-alt-name"), sslFull+"host=single.alt-name.pg-ssltest.test"),
		fails("001:373 host name not matching with a single X.509 Subject Alternative Name", srv("server-single-alt-name"), sslFull+"host=wronghost.alt-name.pg-ssltest.test", mismatch("single.alt-name.pg-ssltest.test", "wronghost.alt-name.pg-ssltest.test")),
		fails("001:379 host name not matching with a single X.509 Subject Alternative Name wildcard", srv("server-single-alt-name"), sslFull+"host=deep.subdomain.wildcard.pg-ssltest.test", mismatch("single.alt-name.pg-ssltest.test", "deep.subdomain.wildcard.pg-ssltest.test")),
		ok("001:394 host matching an IPv4 address (Subject Alternative Name 1)", ipAlt, sslFull+"host=192.0.2.1"),
		ok("001:397 host matching an IPv4 address in alternate form (Subject Alternative Name 1)", ipAlt, sslFull+"host=192.000.002.001"),
		fails("001:402 host not matching an IPv4 address (Subject Alternative Name 1)", ipAlt, sslFull+"host=192.0.2.2",
			regexp.QuoteMeta(`server certificate for "192.0.2.1" (and 1 other name) does not match host name "192.0.2.2"`)),
		ok("001:409 host matching an IPv6 address (Subject Alternative Name 2)", ipAlt, sslFull+"host=2001:DB8::1"),
		ok("001:412 host matching an IPv6 address in alternate form (Subject Alternative Name 2)", ipAlt, sslFull+"host=2001:db8:0:0:0:0:0:1"),
		ok("001:417 host matching an IPv6 address in mixed form (Subject Alternative Name 2)", ipAlt, sslFull+"host=2001:db8::0.0.0.1"),
		fails("001:422 host not matching an IPv6 address (Subject Alternative Name 2)", ipAlt, sslFull+"host=::1",
			regexp.QuoteMeta(`server certificate for "192.0.2.1" (and 1 other name) does not match host name "::1"`)),
		fails("001:429 IPv6 host with CIDR mask does not match", ipAlt, sslFull+"host=2001:DB8::1/128",
			regexp.QuoteMeta(`server certificate for "192.0.2.1" (and 1 other name) does not match host name "2001:DB8::1/128"`)),
		ok("001:444 certificate with both a CN and SANs 1", srv("server-cn-and-alt-names"), sslFull+"host=dns1.alt-name.pg-ssltest.test"),
		ok("001:446 certificate with both a CN and SANs 2", srv("server-cn-and-alt-names"), sslFull+"host=dns2.alt-name.pg-ssltest.test"),
		fails("001:448 certificate with both a CN and SANs ignores CN", srv("server-cn-and-alt-names"), sslFull+"host=common-name.pg-ssltest.test",
			regexp.QuoteMeta(`server certificate for "dns1.alt-name.pg-ssltest.test" (and 1 other name) does not match host name "common-name.pg-ssltest.test"`)),
		ok("001:463 certificate with both a CN and IP SANs matches CN", cnIPAlt, sslFull+"host=common-name.pg-ssltest.test"),
		ok("001:466 certificate with both a CN and IP SANs matches SAN 1", cnIPAlt, sslFull+"host=192.0.2.1"),
		ok("001:468 certificate with both a CN and IP SANs matches SAN 2", cnIPAlt, sslFull+"host=2001:db8::1"),
		ok("001:474 certificate with both an IP CN and IP SANs 1", ipCNAlt, sslFull+"host=192.0.2.2"),
		ok("001:476 certificate with both an IP CN and IP SANs 2", ipCNAlt, sslFull+"host=2001:db8::1"),
		fails("001:478 certificate with both an IP CN and IP SANs ignores CN", ipCNAlt, sslFull+"host=192.0.2.1",
			regexp.QuoteMeta(`server certificate for "192.0.2.2" (and 1 other name) does not match host name "192.0.2.1"`)),
		ok("001:488 certificate with both an IP CN and DNS SANs matches CN", ipCNDNS, sslFull+"host=192.0.2.1"),
		ok("001:490 certificate with both an IP CN and DNS SANs matches SAN 1", ipCNDNS, sslFull+"host=dns1.alt-name.pg-ssltest.test"),
		ok("001:493 certificate with both an IP CN and DNS SANs matches SAN 2", ipCNDNS, sslFull+"host=dns2.alt-name.pg-ssltest.test"),
		ok("001:503 server certificate without CN or SANs sslmode=verify-ca", srv("server-no-names"), sslNames+"sslmode=verify-ca host=common-name.pg-ssltest.test"),
		fails("001:506 server certificate without CN or SANs sslmode=verify-full", srv("server-no-names"), sslNames+"sslmode=verify-full host=common-name.pg-ssltest.test", `could not get server's host name from server certificate`),

		// sslrootcert=system (the cases with SSL_CERT_FILE, 001:543 and 549, are left out: Go
		// reads the system roots once per process).
		fails("001:525 sslrootcert=system does not connect with private CA", system, sslSystem+"sslmode=verify-full host=common-name.pg-ssltest.test", `SSL error: (certificate verify failed|unregistered scheme)`),
		fails("001:532 sslrootcert=system only accepts sslmode=verify-full", system, sslSystem+"sslmode=verify-ca host=common-name.pg-ssltest.test", `weak sslmode "verify-ca" may not be used with sslrootcert=system`),

		// A revoked server certificate.
		ok("001:564 connects without client-side CRL", revoked, sslClient+"sslrootcert=ssl/root+server_ca.crt sslmode=verify-ca"),
		fails("001:567 does not connect with client-side CRL file", revoked, sslClient+"sslrootcert=ssl/root+server_ca.crt sslmode=verify-ca sslcrl=ssl/root+server.crl", sslVerifyFailed, "revoked"),
		fails("001:573 does not connect with client-side CRL directory", revoked, sslClient+"sslcrl='' sslrootcert=ssl/root+server_ca.crt sslmode=verify-ca sslcrldir=ssl/root+server-crldir", sslVerifyFailed, "revoked"),

		// TLS protocol bounds.
		ok("001:593 connection success with correct range of TLS protocol versions", revoked, sslClient+"sslrootcert=ssl/root+server_ca.crt sslmode=require ssl_min_protocol_version=TLSv1.2 ssl_max_protocol_version=TLSv1.2"),
		fails("001:596 connection failure with incorrect range of TLS protocol versions", revoked, sslClient+"sslrootcert=ssl/root+server_ca.crt sslmode=require ssl_min_protocol_version=TLSv1.2 ssl_max_protocol_version=TLSv1.1", `invalid SSL protocol version range`),
		fails("001:600 connection failure with an incorrect SSL protocol minimum bound", revoked, sslClient+"sslrootcert=ssl/root+server_ca.crt sslmode=require ssl_min_protocol_version=incorrect_tls", `invalid "?ssl_min_protocol_version"? value`),
		fails("001:604 connection failure with an incorrect SSL protocol maximum bound", revoked, sslClient+"sslrootcert=ssl/root+server_ca.crt sslmode=require ssl_max_protocol_version=incorrect_tls", `invalid "?ssl_max_protocol_version"? value`),

		// Server side: certificate authentication (certdb), clientcert (verifydb).
		fails("001:621 certificate authorization fails without client cert", revoked, sslCertdb+"user=ssltestuser sslcert=invalid", `connection requires a valid client certificate`),
		ok("001:627 certificate authorization succeeds with correct client cert in PEM format", revoked, sslCertdb+"user=ssltestuser sslcert=ssl/client.crt sslkey=ssl/client.key"),
		ok("001:634 certificate authorization succeeds with correct client cert in DER format", revoked, sslCertdb+"user=ssltestuser sslcert=ssl/client.crt sslkey=ssl/client-der.key"),
		ok("001:641 certificate authorization succeeds with correct client cert in encrypted PEM format", revoked, sslCertdb+"user=ssltestuser sslcert=ssl/client.crt sslkey=ssl/client-encrypted-pem.key sslpassword='dUmmyP^#+'"),
		ok("001:649 certificate authorization succeeds with correct client cert in encrypted DER format", revoked, sslCertdb+"user=ssltestuser sslcert=ssl/client.crt sslkey=ssl/client-encrypted-der.key sslpassword='dUmmyP^#+'"),
		ok("001:659 certificate authorization succeeds with correct client cert and sslcertmode=require", revoked, sslCertdb+"user=ssltestuser sslcertmode=require sslcert=ssl/client.crt sslkey=ssl/client.key"),
		ok("001:666 certificate authorization succeeds with correct client cert and sslcertmode=allow", revoked, sslCertdb+"user=ssltestuser sslcertmode=allow sslcert=ssl/client.crt sslkey=ssl/client.key"),
		fails("001:673 certificate authorization fails with correct client cert and sslcertmode=disable", revoked, sslCertdb+"user=ssltestuser sslcertmode=disable sslcert=ssl/client.crt sslkey=ssl/client.key", `connection requires a valid client certificate`),
		fails("001:679 certificate authorization fails with correct client cert and wrong password in encrypted PEM format", revoked, sslCertdb+"user=ssltestuser sslcert=ssl/client.crt sslkey=ssl/client-encrypted-pem.key sslpassword='wrong'", `private key file ".*client-encrypted-pem\.key": bad decrypt`),
		// libpq's "processing error" is OpenSSL's word for a key it could not decrypt without a
		// pass phrase; the connector says that sslpassword is empty.
		ok("001 certificate authorization succeeds with correct client cert in PEM format with empty password", revoked, sslCertdb+"user=ssltestuser sslcert=ssl/client.crt sslkey=ssl/client.key sslpassword=''"),
		ok("001 certificate authorization succeeds with correct client cert in DER format with empty password", revoked, sslCertdb+"user=ssltestuser sslcert=ssl/client.crt sslkey=ssl/client-der.key sslpassword=''"),
		fails("001 certificate authorization fails with correct client cert and empty password in encrypted PEM format", revoked, sslCertdb+"user=ssltestuser sslcert=ssl/client.crt sslkey=ssl/client-encrypted-pem.key sslpassword=''",
			`private key file ".*client-encrypted-pem\.key": processing error`, "bad decrypt"),
		ok("001 certificate authorization succeeds with DN mapping", revoked, sslCertdb+"dbname=certdb_dn user=ssltestuser sslcert=ssl/client-dn.crt sslkey=ssl/client-dn.key"),
		ok("001 certificate authorization succeeds with DN regex mapping", revoked, sslCertdb+"dbname=certdb_dn_re user=ssltestuser sslcert=ssl/client-dn.crt sslkey=ssl/client-dn.key"),
		ok("001 certificate authorization succeeds with CN mapping", revoked, sslCertdb+"dbname=certdb_cn user=ssltestuser sslcert=ssl/client-dn.crt sslkey=ssl/client-dn.key"),
		query(ok("001 pg_stat_ssl with client certificate", revoked, sslCertdb+"user=ssltestuser sslcert=ssl/client.crt sslkey=ssl/client.key"),
			"SELECT * FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
			`\d+\|t\|TLSv[\d.]+\|[\w-]+\|\d+\|/?CN=ssltestuser\|{client_serial}\|/?CN=Test CA for PostgreSQL SSL regression test client certs`),
		fails("001:801 certificate authorization fails because of file permissions", revoked, sslCertdb+"user=ssltestuser sslcert=ssl/client.crt sslkey=ssl/client_wrongperms.key", `private key file ".*client_wrongperms\.key" has group or world access`),
		fails("001:810 certificate authorization fails with client cert belonging to another user", revoked, sslCertdb+"user=anotheruser sslcert=ssl/client.crt sslkey=ssl/client.key", `certificate authentication failed for user "anotheruser"`),
		fails("001:822 certificate authorization fails with revoked client cert", revoked, sslCertdb+"user=ssltestuser sslcert=ssl/client-revoked.crt sslkey=ssl/client-revoked.key", sslRevokedAlert),
		ok("001:840 auth_option clientcert=verify-full succeeds with matching username and Common Name", revoked, sslVerifydb+"user=ssltestuser sslcert=ssl/client.crt sslkey=ssl/client.key"),
		fails("001:847 auth_option clientcert=verify-full fails with mismatching username and Common Name", revoked, sslVerifydb+"user=anotheruser sslcert=ssl/client.crt sslkey=ssl/client.key", `FATAL: .* "trust" authentication failed for user "anotheruser"`),
		ok("001:858 auth_option clientcert=verify-ca succeeds with mismatching username and Common Name", revoked, sslVerifydb+"user=yetanotheruser sslcert=ssl/client.crt sslkey=ssl/client.key"),

		// The client's intermediate CA, and a server-side CRL directory.
		ok("001:872 intermediate client certificate is provided by client", interm, sslInterm+"sslmode=require sslcert=ssl/client+client_ca.crt"),
		fails("001:876 intermediate client certificate is missing", interm, sslInterm+"sslmode=require sslcert=ssl/client.crt", sslUnknownCA),
		fails("001:885 intermediate client certificate is missing, with a long subject", interm, sslInterm+"sslmode=require sslcert=ssl/client-long.crt sslkey=ssl/client-long.key", sslUnknownCA),
		fails("001:904 intermediate client certificate is untrusted", untrusted, sslInterm+"sslmode=require sslcert=ssl/client+client_ca.crt", sslUnknownCA),
		fails("001:924 certificate authorization fails with revoked client cert with server-side CRL directory", crldir, sslInterm+"user=ssltestuser sslcert=ssl/client-revoked.crt sslkey=ssl/client-revoked.key", sslRevokedAlert),
		fails("001:935 certificate authorization fails with revoked UTF-8 client cert with server-side CRL directory", crldir, sslInterm+"user=ssltestuser sslcert=ssl/client-revoked-utf8.crt sslkey=ssl/client-revoked-utf8.key", sslRevokedAlert),
	}
	// 002_scram.pl: SCRAM and channel binding over TLS, against server-cn-only.
	scram := []sslSuiteCase{
		ok("002:82 Basic SCRAM authentication with SSL", cn, sslScram+"user=ssltestuser"),
		fails("002:87 SCRAM with SSL and channel_binding=invalid_value", cn, sslScram+"user=ssltestuser channel_binding=invalid_value", `invalid channel_binding value: "invalid_value"`),
		ok("002:91 SCRAM with SSL and channel_binding=disable", cn, sslScram+"user=ssltestuser channel_binding=disable"),
		ok("002:95 SCRAM with SSL and channel_binding=require", cn, sslScram+"user=ssltestuser channel_binding=require"),
		fails("002:110 MD5 with SSL and channel_binding=require", cn, sslScram+"user=md5testuser channel_binding=require", `channel binding required but not supported by server's authentication request`),
		fails("002:128 Cert authentication and channel_binding=require", cn, "sslcert=ssl/client.crt sslkey=ssl/client.key sslrootcert=invalid hostaddr=127.0.0.1 host=localhost dbname=certdb user=ssltestuser channel_binding=require",
			`channel binding required, but server authenticated client without channel binding`),
		ok("002:136 SCRAM with clientcert=verify-full", cn, "sslcert=ssl/client.crt sslkey=ssl/client.key sslrootcert=invalid hostaddr=127.0.0.1 host=localhost dbname=verifydb user=ssltestuser"),
		ok("002:144 SCRAM with SSL, channel_binding=disable, and require_auth=scram-sha-256", cn, sslScram+"user=ssltestuser channel_binding=disable require_auth=scram-sha-256"),
		fails("002:148 channel_binding can fail even when require_auth succeeds", cn, sslScram+"user=md5testuser require_auth=md5 channel_binding=require", `channel binding required but not supported by server's authentication request`),
		ok("002:156 SCRAM with SSL, channel_binding=require, and require_auth=scram-sha-256", cn, sslScram+"user=ssltestuser channel_binding=require require_auth=scram-sha-256"),
		ok("002:177 SCRAM with SSL and channel_binding=require, server certificate uses 'rsassaPss'", srv("server-rsapss"), sslScram+"user=ssltestuser channel_binding=require"),
	}
	for _, c := range scram {
		c.scram = true
		cases = append(cases, c)
	}
	// 003_sslinfo.pl: the sslinfo extension's functions and pg_stat_ssl, against
	// server-revoked, with client_ext's certificate, in the suite's order (its names without
	// line numbers: they move between releases). The sslcertmode cases are those PostgreSQL
	// 16 added.
	const (
		infoConn = sslCertdb + "user=ssltestuser sslcert=ssl/client_ext.crt sslkey=ssl/client_ext.key "
		infoNone = sslDefaults + "sslrootcert=ssl/root+server_ca.crt sslmode=require dbname=trustdb hostaddr=127.0.0.1 user=ssltestuser host=localhost"
	)
	q := func(name, conninfo, sql, result string) sslSuiteCase {
		return query(ok("003 "+name, revoked, conninfo), sql, regexp.QuoteMeta(result))
	}
	cases = append(cases,
		q("certificate authorization succeeds with correct client cert in PEM format", infoConn, "", "1"),
		q("ssl_is_used() for TLS connection", infoConn, "SELECT ssl_is_used();", "t"),
		q("ssl_version() correctly returning TLS protocol", infoConn+" ssl_min_protocol_version=TLSv1.2 ssl_max_protocol_version=TLSv1.2", "SELECT ssl_version();", "TLSv1.2"),
		q("ssl_cipher() compared with pg_stat_ssl", infoConn, "SELECT ssl_cipher() = cipher FROM pg_stat_ssl WHERE pid = pg_backend_pid();", "t"),
		q("ssl_client_cert_present() for connection with cert", infoConn, "SELECT ssl_client_cert_present();", "t"),
		q("ssl_client_cert_present() for connection without cert", infoNone, "SELECT ssl_client_cert_present();", "f"),
		q("ssl_client_serial() compared with pg_stat_ssl", infoConn, "SELECT ssl_client_serial() = client_serial FROM pg_stat_ssl WHERE pid = pg_backend_pid();", "t"),
		queryFailing(q("ssl_client_dn_field() for an invalid field", infoConn, "SELECT ssl_client_dn_field('invalid');", "")),
		q("ssl_client_dn_field() for connection without cert", infoNone, "SELECT ssl_client_dn_field('commonName');", ""),
		q("ssl_client_dn_field() for commonName", infoConn, "SELECT '/CN=' || ssl_client_dn_field('commonName') = client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid();", "t"),
		q("ssl_issuer_dn() for connection with cert", infoConn, "SELECT ssl_issuer_dn() = issuer_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid();", "t"),
		q("ssl_issuer_field() for commonName", infoConn, "SELECT '/CN=' || ssl_issuer_field('commonName') = issuer_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid();", "t"),
		q("extract extension from cert", infoConn, "SELECT value, critical FROM ssl_extension_info() WHERE name = 'basicConstraints';", "CA:FALSE|t"),
		q("ssl_client_cert_present() for sslcertmode=allow", infoConn+" dbname=trustdb sslcertmode=allow", "SELECT ssl_client_cert_present();", "t"),
		q("ssl_client_cert_present() for sslcertmode=allow sslcert=invalid", infoConn+" dbname=trustdb sslcertmode=allow sslcert=invalid", "SELECT ssl_client_cert_present();", "f"),
		q("ssl_client_cert_present() for sslcertmode=disable", infoConn+" dbname=trustdb sslcertmode=disable", "SELECT ssl_client_cert_present();", "f"),
		q("ssl_client_cert_present() for sslcertmode=require", infoConn+" dbname=trustdb sslcertmode=require", "SELECT ssl_client_cert_present();", "t"),
	)
	return cases
}

// query gives c a query and the regexp its result must match.
func query(c sslSuiteCase, sql, result string) sslSuiteCase {
	c.query, c.result = sql, result
	return c
}

// queryFailing marks c as a connection whose query fails.
func queryFailing(c sslSuiteCase) sslSuiteCase {
	c.queryFails = true
	return c
}

// sslSuiteDifferences are the suite's cases where the connector's outcome, or the reason its
// refusal names, differs from libpq 18's, by case name, with the reason. A listed case that no
// longer differs fails, so the list stays true.
var sslSuiteDifferences = map[string]string{
	"002:177 SCRAM with SSL and channel_binding=require, server certificate uses 'rsassaPss'": "Go's crypto/tls cannot use a certificate whose key is RSASSA-PSS (rsassaPss): the handshake fails",
}

// sslSuiteStricter are the suite's cases where the connector refuses on purpose where libpq
// connects, before sending anything (docs/connection-strings.md, "What is refused, and why").
var sslSuiteStricter = map[string]string{}

// sslReasons classify a refusal by what it names, libpq's wording first, then the connector's.
// The first class whose pattern matches the message is its class.
var sslReasons = []struct{ class, pattern string }{
	{"no hba entry", `no pg_hba\.conf entry`},
	{"no root file", `root certificate file .* does not exist|sslrootcert`},
	{"key permissions", `group or world access`},
	{"bad decrypt", `bad decrypt|sslpassword|decrypt`},
	{"protocol bounds", `protocol version|ssl_m(in|ax)_protocol_version`},
	{"weak sslmode", `weak sslmode`},
	{"server sent no certificate request", `server accepted connection without a valid SSL certificate|sslcertmode`},
	{"channel binding", `channel binding|channel_binding`},
	{"client certificate required", `connection requires a valid client certificate`},
	{"certificate authentication", `certificate authentication failed|"trust" authentication failed`},
	{"revoked", `revoked`},
	{"unknown ca", `unknown ca|unknown certificate authority`},
	{"host name", `does not match host name|host name from server certificate|certificate is valid for|not valid for any names|doesn't contain any IP SANs|legacy Common Name`},
	{"CRL unreadable", `revocation list does not parse`},
	{"verify failed", `certificate verify failed|unregistered scheme|unknown authority|unable to get`},
}

func sslReason(msg string) string {
	for _, r := range sslReasons {
		if regexp.MustCompile(r.pattern).MatchString(msg) {
			return r.class
		}
	}
	return "other"
}

// TestSSLSuiteMatchesLibpq18 replays the connections of PostgreSQL 18's SSL suite
// (src/test/ssl/t/001_ssltests.pl, 002_scram.pl, 003_sslinfo.pl) against a PostgreSQL 18 set
// up as its SSL/Server.pm does, with the suite's certificates (internal/testpki), and runs
// each connection string, and the case's query, through psql on libpq 18 and through the
// connector. libpq must do what the suite expects (else the
// set-up is wrong); the connector must reach libpq's outcome, and a refusal must name the
// same reason, and a query the same result, unless the case is listed in sslSuiteDifferences or sslSuiteStricter.
func TestSSLSuiteMatchesLibpq18(t *testing.T) {
	env, err := harness.Libpq18Env()
	if err != nil {
		t.Fatal(err)
	}
	files := testpki.SSLSuiteFiles(t)
	testpki.SSLSuiteRSAPSS(t, files)
	cases := sslSuiteCases()
	srv := harness.StartT(t, harness.Options{Major: 18, TLS: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := srv.InstallSSLSuite(ctx, files, cases[0].server); err != nil {
		t.Fatal(err)
	}
	// The client's copies: keys 0600 as the suite sets them, and one 0644.
	dir := t.TempDir()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	wrong := filepath.Join(dir, "client_wrongperms.key")
	if err := os.WriteFile(wrong, files["client.key"], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(wrong, 0o644); err != nil {
		t.Fatal(err)
	}
	for name := range sslSuiteDifferences {
		if !sslSuiteHas(cases, name) {
			t.Errorf("sslSuiteDifferences lists %q, which is no case", name)
		}
	}
	serial := ""
	if b, _ := pem.Decode(files["client.crt"]); b != nil {
		if cert, err := x509.ParseCertificate(b.Bytes); err == nil {
			serial = cert.SerialNumber.String()
		}
	}
	if serial == "" {
		t.Fatal("client.crt does not parse")
	}
	counts := map[string]int{}
	current, scram := cases[0].server, false
	for _, c := range cases {
		if c.scram && !scram {
			if err := srv.SetSSLSuiteAuth(ctx, "scram-sha-256", "pass"); err != nil {
				t.Fatal(err)
			}
			scram = true
		}
		if !c.scram && scram {
			// 003_sslinfo.pl's server is set up for "trust" again.
			if err := srv.SetSSLSuiteAuth(ctx, "trust", ""); err != nil {
				t.Fatal(err)
			}
			scram = false
		}
		if c.server != current {
			if err := srv.SwitchServerCert(c.server); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			current = c.server
		}
		// The suite passes the port in PGPORT.
		conninfo := "port=" + strconv.Itoa(srv.Port) + " " + strings.ReplaceAll(c.conninfo, "ssl/", dir+"/")
		t.Run(c.name, func(t *testing.T) {
			env := env
			if c.scram {
				t.Setenv("PGPASSWORD", "pass")
				env = append(env[:len(env):len(env)], "PGPASSWORD=pass")
			}
			sql := c.query
			if sql == "" {
				sql = "SELECT 1"
			}
			pout, perr := harness.Psql(ctx, env, conninfo, sql)
			if c.queryFails {
				// Connected, and the query refused: psql's error is the server's ERROR.
				if perr == nil || !strings.Contains(perr.Error(), "ERROR:") {
					t.Fatalf("libpq 18 gives %v where the suite expects a failing query", perr)
				}
				cout, cerr, qerr := sslSuiteRun(ctx, conninfo, sql)
				t.Logf("libpq 18: %v; connector: %v, %v (%q)", perr, cerr, qerr, cout)
				if cerr != nil || qerr == nil {
					t.Errorf("connector differs: connect %v, query %v; libpq 18 connects and the query fails: %v", cerr, qerr, perr)
				}
				counts["connects"]++
				return
			}
			if c.ok && perr != nil {
				t.Fatalf("libpq 18 refuses where the suite connects (the set-up is wrong): %v", perr)
			}
			if !c.ok && (perr == nil || !regexp.MustCompile(c.stderr).MatchString(perr.Error())) {
				t.Fatalf("libpq 18 gives %v where the suite expects a refusal matching %q (the set-up is wrong)", perr, c.stderr)
			}
			result := regexp.MustCompile("^(?:" + strings.ReplaceAll(c.result, "{client_serial}", serial) + ")$")
			if c.ok && c.query != "" && !result.MatchString(pout) {
				t.Fatalf("libpq 18's result %q does not match the suite's %q (the set-up is wrong)", pout, result)
			}
			cout, cerr, qerr := sslSuiteRun(ctx, conninfo, sql)
			if cerr == nil {
				cerr = qerr
			}
			t.Logf("libpq 18: %v (%q); connector: %v (%q)", perr, pout, cerr, cout)
			want := c.reason
			if want == "" && perr != nil {
				want = sslReason(perr.Error())
			}
			differs := ""
			switch {
			case (cerr == nil) != (perr == nil):
				differs = "outcome"
			case cerr != nil && sslReason(cerr.Error()) != want:
				differs = "reason " + sslReason(cerr.Error()) + ", want " + want
			case cerr == nil && c.query != "" && !result.MatchString(cout):
				differs = "result " + strconv.Quote(cout) + ", want " + strconv.Quote(pout)
			}
			if c.ok {
				counts["connects"]++
			} else {
				counts["refused"]++
			}
			reason, listed := sslSuiteDifferences[c.name]
			if strict, ok := sslSuiteStricter[c.name]; ok {
				reason, listed = strict, true
			}
			switch {
			case differs != "" && !listed:
				t.Errorf("connector differs (%s): connector %v; libpq 18 %v", differs, cerr, perr)
			case differs == "" && listed:
				t.Errorf("listed as a difference (%s), but the connector now gives libpq's outcome (%v)", reason, cerr)
			case differs != "":
				counts["listed differences"]++
				t.Logf("listed difference (%s): connector %v", differs, cerr)
			}
		})
	}
	t.Logf("%d cases: %v", len(cases), counts)
}

func sslSuiteHas(cases []sslSuiteCase, name string) bool {
	for _, c := range cases {
		if c.name == name {
			return true
		}
	}
	return false
}

// sslSuiteRun opens one connection with a new connector for conninfo and runs sql with the
// simple query protocol, returning its rows as psql -At prints them (text values, fields
// joined by "|", rows by newlines), the connection's error and the query's.
func sslSuiteRun(ctx context.Context, conninfo, sql string) (string, error, error) {
	c, err := pgconnector.New(conninfo)
	if err != nil {
		return "", err, nil
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	dc, err := c.Connect(ctx)
	if err != nil {
		return "", err, nil
	}
	defer dc.Close()
	results, err := pgconnector.PgxConnOf(dc).PgConn().Exec(ctx, sql).ReadAll()
	if err != nil {
		return "", nil, err
	}
	var rows []string
	for _, r := range results {
		for _, row := range r.Rows {
			fields := make([]string, len(row))
			for i, f := range row {
				fields[i] = string(f)
			}
			rows = append(rows, strings.Join(fields, "|"))
		}
	}
	return strings.Join(rows, "\n"), nil, nil
}
