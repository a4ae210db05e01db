package connstring

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/internal/testpki"
	"github.com/pgconnector/pgconnector/internal/tlspolicy"
)

// tlsKeyNames are the keys of tlsKeys: pgx does not know them and would send them to the server.
var tlsKeyNames = []string{"ssl_min_protocol_version", "ssl_max_protocol_version", "sslcrl", "sslcrldir", "sslkeylogfile"}

// getFrom is the get of parseTLSKeys for a keyword/value string: the last value of the key in
// dsn, else the environment variable env when it is set (even empty, as libpq).
func getFrom(dsn string) func(key, env string) (string, source, bool) {
	pairs, _, _ := scanKeywordValue(dsn)
	return func(key, env string) (string, source, bool) {
		for i := len(pairs) - 1; i >= 0; i-- {
			if pairs[i][0] == key {
				return pairs[i][1], source{value: pairs[i][1], known: true}, true
			}
		}
		if env != "" {
			if v, ok := os.LookupEnv(env); ok {
				return v, source{value: v, env: env, known: true}, true
			}
		}
		return "", source{}, false
	}
}

// apply is applyCheck with the check's BeforeTLS (nil for no TLS), as Parse gives them to a host.
func (k tlsKeys) apply(c *tls.Config, host string) (*tls.Config, func() error) {
	c, s := k.applyCheck(c, host)
	if s == nil {
		return c, nil
	}
	return c, s.BeforeTLS
}

// pgxConfigWithTLSKeys parses dsn with pgx without the keys of tlsKeys, and applies them to the
// TLS configurations pgx built, as Parse does.
func pgxConfigWithTLSKeys(t *testing.T, dsn string) (*pgx.ConnConfig, error) {
	t.Helper()
	keys, err := parseTLSKeys(getFrom(dsn))
	if err != nil {
		return nil, err
	}
	pairs, _, _ := scanKeywordValue(dsn)
	var rest []string
	for _, p := range pairs {
		if !slices.Contains(tlsKeyNames, p[0]) {
			rest = append(rest, p[0]+"='"+strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(p[1])+"'")
		}
	}
	cfg, err := pgx.ParseConfig(strings.Join(rest, " "))
	if err != nil {
		t.Fatalf("pgx.ParseConfig: %v", err)
	}
	cfg.TLSConfig, _ = keys.apply(cfg.TLSConfig, cfg.Host)
	for _, fb := range cfg.Fallbacks {
		fb.TLSConfig, _ = keys.apply(fb.TLSConfig, fb.Host)
	}
	return cfg, nil
}

func TestParseTLSKeys(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, env := range []string{"PGSSLMINPROTOCOLVERSION", "PGSSLMAXPROTOCOLVERSION", "PGSSLCRL", "PGSSLCRLDIR", "PGSSLROOTCERT"} {
		t.Setenv(env, "")
		os.Unsetenv(env)
	}
	defaultCRL := filepath.Join(home, ".postgresql", "root.crl")
	for _, tt := range []struct {
		dsn     string
		env     map[string]string
		want    tlsKeys
		wantErr string // substring; "" for none
	}{
		{dsn: "", want: tlsKeys{crlFile: defaultCRL}},
		{dsn: "ssl_min_protocol_version=tlsv1.3", want: tlsKeys{minVersion: tls.VersionTLS13, crlFile: defaultCRL}},
		{dsn: "ssl_max_protocol_version=TLSv1.2", want: tlsKeys{maxVersion: tls.VersionTLS12, crlFile: defaultCRL}},
		{dsn: "ssl_min_protocol_version=TLSv1 ssl_max_protocol_version=tlsV1",
			want: tlsKeys{minVersion: tls.VersionTLS10, maxVersion: tls.VersionTLS10, crlFile: defaultCRL}},
		{dsn: "ssl_min_protocol_version=TLSv1.1 ssl_max_protocol_version=TLSv1.3",
			want: tlsKeys{minVersion: tls.VersionTLS11, maxVersion: tls.VersionTLS13, crlFile: defaultCRL}},
		// An empty minimum is no bound: the range check passes (libpq: sslVerifyProtocolRange).
		{dsn: "ssl_min_protocol_version='' ssl_max_protocol_version=TLSv1.1", want: tlsKeys{maxVersion: tls.VersionTLS11, crlFile: defaultCRL}},
		{dsn: "ssl_max_protocol_version=TLSv1.1",
			wantErr: "invalid SSL protocol version range: ssl_min_protocol_version TLSv1.2 (the default) is above ssl_max_protocol_version TLSv1.1"},
		{dsn: "ssl_max_protocol_version=TLSv1", wantErr: "invalid SSL protocol version range"},
		{dsn: "ssl_min_protocol_version=TLSv1.3 ssl_max_protocol_version=TLSv1.2",
			wantErr: "invalid SSL protocol version range: ssl_min_protocol_version TLSv1.3 is above ssl_max_protocol_version TLSv1.2"},
		{dsn: "ssl_min_protocol_version=TLSv1.4",
			wantErr: `invalid ssl_min_protocol_version "TLSv1.4": must be one of TLSv1, TLSv1.1, TLSv1.2, TLSv1.3 (in any letter case), or empty for no bound`},
		{dsn: "ssl_max_protocol_version=SSLv3", wantErr: `invalid ssl_max_protocol_version "SSLv3": must be one of TLSv1`},
		{env: map[string]string{"PGSSLMINPROTOCOLVERSION": "tls1.2"},
			wantErr: `invalid ssl_min_protocol_version "tls1.2" (from PGSSLMINPROTOCOLVERSION): must be`},
		{env: map[string]string{"PGSSLMAXPROTOCOLVERSION": "TLSv1.1"},
			wantErr: "ssl_min_protocol_version TLSv1.2 (the default) is above ssl_max_protocol_version TLSv1.1 (from PGSSLMAXPROTOCOLVERSION)"},
		{env: map[string]string{"PGSSLMINPROTOCOLVERSION": "", "PGSSLMAXPROTOCOLVERSION": "TLSv1.1"},
			want: tlsKeys{maxVersion: tls.VersionTLS11, crlFile: defaultCRL}},
		{dsn: "ssl_max_protocol_version=TLSv1.3", env: map[string]string{"PGSSLMAXPROTOCOLVERSION": "TLSv1.1"},
			want: tlsKeys{maxVersion: tls.VersionTLS13, crlFile: defaultCRL}},
		{dsn: "sslcrl=/c.pem", want: tlsKeys{crlFile: "/c.pem"}},
		{env: map[string]string{"PGSSLCRL": "/e.pem"}, want: tlsKeys{crlFile: "/e.pem"}},
		{dsn: "sslcrl=''", want: tlsKeys{crlFile: defaultCRL}},
		{dsn: "sslcrldir=/a::/b", want: tlsKeys{crlDirs: []string{"/a", "/b"}, crlDirGiven: true}},
		{dsn: "sslcrldir=:", want: tlsKeys{crlDirGiven: true}},
		{dsn: "sslcrl=/c.pem sslcrldir=/d", want: tlsKeys{crlFile: "/c.pem", crlDirs: []string{"/d"}, crlDirGiven: true}},
		{env: map[string]string{"PGSSLCRLDIR": "/d"}, want: tlsKeys{crlDirs: []string{"/d"}, crlDirGiven: true}},
		{dsn: "sslcrldir=''", want: tlsKeys{crlFile: defaultCRL}},
		{dsn: "sslrootcert=system", want: tlsKeys{crlFile: defaultCRL, systemRoots: true}},
		{env: map[string]string{"PGSSLROOTCERT": "system"}, want: tlsKeys{crlFile: defaultCRL, systemRoots: true}},
		{dsn: "sslkeylogfile=/k.log", want: tlsKeys{crlFile: defaultCRL, keyLogFile: "/k.log"}},
	} {
		t.Run(tt.dsn+envString(tt.env), func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			got, err := parseTLSKeys(getFrom(tt.dsn))
			if tt.wantErr != "" {
				var pe *ParseError
				if !errors.As(err, &pe) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want a *ParseError with %q", err, tt.wantErr)
				}
				if !strings.HasPrefix(pe.Key, "ssl_") {
					t.Errorf("Key = %q", pe.Key)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !equalTLSKeys(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func envString(env map[string]string) string {
	var s []string
	for k, v := range env {
		s = append(s, k+"="+v)
	}
	return strings.Join(s, ",")
}

func equalTLSKeys(a, b tlsKeys) bool {
	return a.minVersion == b.minVersion && a.maxVersion == b.maxVersion && a.crlFile == b.crlFile &&
		strings.Join(a.crlDirs, "\x00") == strings.Join(b.crlDirs, "\x00") && a.crlDirGiven == b.crlDirGiven &&
		a.systemRoots == b.systemRoots && a.keyLogFile == b.keyLogFile
}

// A value that could be a secret is not shown.
func TestParseTLSKeysDoesNotShowSecrets(t *testing.T) {
	for _, dsn := range []string{
		"ssl_min_protocol_version='hunter2 secret'",
		"ssl_max_protocol_version=pass=word",
		"ssl_min_protocol_version= password=hunter2",
	} {
		_, err := parseTLSKeys(getFrom(dsn))
		if err == nil {
			t.Fatalf("%s: no error", dsn)
		}
		if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "word") {
			t.Errorf("%s: %v", dsn, err)
		}
	}
}

func TestCheckWeakSSLMode(t *testing.T) {
	for _, tt := range []struct {
		sslmode        string
		given          bool
		sslnegotiation string
		sslrootcert    string
		want           string
	}{
		{"prefer", false, "", "", ""},
		{"disable", true, "postgres", "/ca.crt", ""},
		{"require", true, "direct", "", ""},
		{"verify-ca", true, "direct", "", ""},
		{"verify-full", true, "direct", "system", ""},
		{"", false, "direct", "", `weak sslmode "prefer" may not be used with sslnegotiation=direct (use "require", "verify-ca", or "verify-full")`},
		{"prefer", true, "direct", "", `weak sslmode "prefer" may not be used with sslnegotiation=direct (use "require", "verify-ca", or "verify-full")`},
		{"allow", true, "direct", "", `weak sslmode "allow" may not be used with sslnegotiation=direct`},
		{"disable", true, "direct", "", `weak sslmode "disable" may not be used with sslnegotiation=direct`},
		// Without sslmode, sslrootcert=system makes the default verify-full (libpq 16).
		{"prefer", false, "", "system", ""},
		{"", false, "direct", "system", ""},
		{"require", true, "", "system", `weak sslmode "require" may not be used with sslrootcert=system (use "verify-full")`},
		{"verify-ca", true, "", "system", `weak sslmode "verify-ca" may not be used with sslrootcert=system (use "verify-full")`},
		{"prefer", true, "", "system", `weak sslmode "prefer" may not be used with sslrootcert=system`},
		// Both: libpq 17 checks sslnegotiation first.
		{"prefer", true, "direct", "system", `sslnegotiation=direct`},
	} {
		err := checkWeakSSLMode(tt.sslmode, tt.given, tt.sslnegotiation, tt.sslrootcert)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: %v", tt, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%+v: %v, want %q", tt, err, tt.want)
		case err != nil:
			if pe, ok := err.(*ParseError); !ok || pe.Key != "sslmode" {
				t.Errorf("%+v: %#v, want a *ParseError for sslmode", tt, err)
			}
		}
	}
}

func TestTLSKeysApply(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("PGSSLSNI", "")
	os.Unsetenv("PGSSLSNI")
	ca := writeSelfSignedCA(t)
	keys, err := parseTLSKeys(getFrom("ssl_min_protocol_version=TLSv1.3 ssl_max_protocol_version=TLSv1.3 sslkeylogfile=/dev/null sslcrl=/nonexistent"))
	if err != nil {
		t.Fatal(err)
	}
	if c, check := keys.apply(nil, "a"); c != nil || check != nil {
		t.Error("apply(nil) is not nil")
	}
	defaultRoot := filepath.Join(home, ".postgresql", "root.crt")
	for _, tt := range []struct {
		dsn      string
		want     tlspolicy.ServerCheck // CRL: whether one is set
		sni      string
		crlCheck bool
	}{
		{"host=a sslmode=require", tlspolicy.ServerCheck{RootFile: defaultRoot}, "a", true},
		{"host=a sslmode=prefer sslrootcert=" + ca, tlspolicy.ServerCheck{RootFile: ca}, "a", true},
		{"host=a sslmode=require sslrootcert=" + ca, tlspolicy.ServerCheck{RootFile: ca}, "a", true},
		{"host=a sslmode=verify-ca sslrootcert=" + ca, tlspolicy.ServerCheck{RootFile: ca, Verify: true}, "a", true},
		{"host=a sslmode=verify-full sslrootcert=" + ca, tlspolicy.ServerCheck{RootFile: ca, Verify: true, Host: "a"}, "a", true},
		{"host=a sslmode=verify-full", tlspolicy.ServerCheck{RootFile: defaultRoot, Verify: true, Host: "a"}, "a", true},
		{"host=a sslmode=verify-full sslsni=0", tlspolicy.ServerCheck{RootFile: defaultRoot, Verify: true, Host: "a"}, "", true},
		{"host=127.0.0.1 sslmode=verify-full", tlspolicy.ServerCheck{RootFile: defaultRoot, Verify: true, Host: "127.0.0.1"}, "", true},
		{"host=::1 sslmode=require", tlspolicy.ServerCheck{RootFile: defaultRoot}, "", true},
		{"host=a sslmode=verify-full sslrootcert=system", tlspolicy.ServerCheck{System: true, Verify: true, Host: "a"}, "a", false},
	} {
		k, err := parseTLSKeys(getFrom(tt.dsn))
		if err != nil {
			t.Fatal(err)
		}
		k.minVersion, k.maxVersion, k.keyLogFile = keys.minVersion, keys.maxVersion, keys.keyLogFile
		cfg, err := pgx.ParseConfig(tt.dsn)
		if err != nil {
			t.Fatal(err)
		}
		c := cfg.TLSConfig
		got, check := k.apply(c, cfg.Host)
		if got != c {
			t.Errorf("%s: apply returned another *tls.Config: pgx's sslcert loader is keyed by the pointer", tt.dsn)
		}
		if check == nil {
			t.Errorf("%s: no check before the handshake", tt.dsn)
		}
		if c.MinVersion != tls.VersionTLS13 || c.MaxVersion != tls.VersionTLS13 || c.KeyLogWriter == nil {
			t.Errorf("%s: MinVersion %x, MaxVersion %x, KeyLogWriter %v", tt.dsn, c.MinVersion, c.MaxVersion, c.KeyLogWriter)
		}
		// crypto/tls verifies nothing itself (its nil RootCAs would be the system's): the
		// connector's check does it all.
		if !c.InsecureSkipVerify || c.RootCAs != nil || c.VerifyPeerCertificate != nil || c.VerifyConnection == nil {
			t.Errorf("%s: InsecureSkipVerify %v, RootCAs %v, VerifyPeerCertificate set %v, VerifyConnection set %v", tt.dsn,
				c.InsecureSkipVerify, c.RootCAs != nil, c.VerifyPeerCertificate != nil, c.VerifyConnection != nil)
		}
		if c.ServerName != tt.sni {
			t.Errorf("%s: SNI %q, want %q", tt.dsn, c.ServerName, tt.sni)
		}
		s := k.serverCheck(cfg.Host)
		if (s.CRL != nil) != tt.crlCheck {
			t.Errorf("%s: CRL check %v, want %v", tt.dsn, s.CRL != nil, tt.crlCheck)
		}
		if s.Cache == nil {
			t.Errorf("%s: no cache of the root file", tt.dsn)
		}
		s.CRL, s.Cache = nil, nil
		if *s != tt.want {
			t.Errorf("%s: check %+v, want %+v", tt.dsn, *s, tt.want)
		}
	}
}

// writeSelfSignedCA writes a CA certificate (PEM) to a temporary file and returns its path.
func writeSelfSignedCA(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(path, testpki.PEMCert(testpki.NewCA(t).Cert), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// opensslVerify runs "openssl verify -crl_check_all" with the root certificate and crls in one
// -CAfile, as libpq loads sslrootcert and sslcrl into one X509_STORE, and crldir as -CApath (the
// hashed lookup of sslcrldir). It returns "" when the chain passes, else OpenSSL's reason.
func opensslVerify(t *testing.T, p *testpki.PKI, crls [][]byte, crldir string) string {
	t.Helper()
	dir := t.TempDir()
	ca := testpki.PEMCert(p.Root.Cert)
	for _, c := range crls {
		ca = append(ca, testpki.PEMCRL(c)...)
	}
	write := func(name string, b []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	args := []string{"verify", "-crl_check_all", "-CAfile", write("ca.pem", ca),
		"-untrusted", write("inter.pem", testpki.PEMCert(p.Inter.Cert))}
	if crldir != "" {
		args = append(args, "-CApath", crldir)
	}
	out, err := exec.Command("openssl", append(args, write("leaf.pem", testpki.PEMCert(p.Leaf.Cert)))...).CombinedOutput()
	if err == nil {
		return ""
	}
	// "error 23 at 0 depth lookup: certificate revoked"
	for line := range strings.Lines(string(out)) {
		if _, reason, ok := strings.Cut(line, " depth lookup: "); ok {
			var depth int
			f := strings.Fields(line)
			if len(f) > 3 {
				depth, _ = strconv.Atoi(f[3])
			}
			return strings.TrimSpace(reason) + " @" + strconv.Itoa(depth)
		}
	}
	return strings.TrimSpace(string(out))
}

// ourVerify checks the chain with crlCheck, the CRLs in a file (sslcrl) and crldir (sslcrldir).
func ourVerify(t *testing.T, p *testpki.PKI, crls [][]byte, crldir string) string {
	t.Helper()
	chk := &crlCheck{}
	if len(crls) > 0 || crldir == "" {
		var b []byte
		for _, c := range crls {
			b = append(b, testpki.PEMCRL(c)...)
		}
		chk.file = filepath.Join(t.TempDir(), "crl.pem")
		if err := os.WriteFile(chk.file, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if crldir != "" {
		chk.dirs, chk.dirGiven = []string{crldir}, true
	}
	cs := tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{p.Leaf.Cert, p.Inter.Cert, p.Root.Cert}}}
	err := chk.Check(cs.VerifiedChains, time.Now())
	if err == nil {
		return ""
	}
	// "certificate verify failed: REASON (certificate at depth N, ...)"
	msg := strings.TrimPrefix(err.Error(), "certificate verify failed: ")
	reason, rest, _ := strings.Cut(msg, " (certificate at depth ")
	depth, _, _ := strings.Cut(rest, ",")
	return reason + " @" + depth
}

// The CRL checks give OpenSSL's verdict (OpenSSL 3 with libpq's X509_V_FLAG_CRL_CHECK |
// X509_V_FLAG_CRL_CHECK_ALL, "openssl verify -crl_check_all") on a chain root -> intermediate ->
// leaf: pass, or the same reason at the same depth.
func TestCRLChecksMatchOpenSSL(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("openssl is not in $PATH: scripts/install-deps.sh installs it")
	}
	p := testpki.New(t)
	leafSN, interSN, rootSN := p.Leaf.Cert.SerialNumber, p.Inter.Cert.SerialNumber, p.Root.Cert.SerialNumber
	crit := func(oid asn1.ObjectIdentifier, v []byte) []pkix.Extension {
		return []pkix.Extension{{Id: oid, Critical: true, Value: v}}
	}
	// A root whose key usage does not allow CRL signing.
	noCRLSign := testpki.NewRootUsage(t, x509.KeyUsageCertSign)
	// Leaves with CRL distribution points (RFC 5280, 4.2.1.13), whose scope OpenSSL checks against
	// the CRL's issuingDistributionPoint (crl_crldp_check).
	otherDER, _ := asn1.Marshal(pkix.Name{CommonName: "Other CRL Issuer", Organization: []string{"pgconnector"}}.ToRDNSequence())
	const otherURI = "http://crl.example/other.crl"
	keyCompromise, otherReasons := []byte{6, 0x40}, []byte{7, 0x3f, 0x80}
	uriDP := testpki.DPFullName(testpki.URIName(testpki.DPURI))
	relDP := testpki.DPRelative(pkix.AttributeTypeAndValue{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: "CRL 1"})
	dpPlain := testpki.NewLeafDP(t, testpki.DP(uriDP, nil))
	dpCRLIssuer := testpki.NewLeafDP(t, testpki.DP(uriDP, nil, testpki.DirName(otherDER)))
	dpIssuerOnly := testpki.NewLeafDP(t, testpki.DP(nil, nil, testpki.DirName(otherDER)))
	dpTwo := testpki.NewLeafDP(t, testpki.DP(uriDP, nil, testpki.DirName(otherDER)), testpki.DP(uriDP, nil))
	dpSelfIssuer := testpki.New(t)
	dpSelfIssuer = testpki.WithLeafDP(t, dpSelfIssuer, testpki.DP(uriDP, nil, testpki.DirName(dpSelfIssuer.Inter.Cert.RawSubject)))
	dpKeyCompromise := testpki.NewLeafDP(t, testpki.DP(uriDP, keyCompromise))
	dpUnusedReason := testpki.NewLeafDP(t, testpki.DP(uriDP, []byte{7, 0x80}))
	dpAllReasons := testpki.NewLeafDP(t, testpki.DP(uriDP, []byte{7, 0x7f, 0x80}))
	dpSplit := testpki.NewLeafDP(t, testpki.DP(uriDP, keyCompromise), testpki.DP(testpki.DPFullName(testpki.URIName(otherURI)), otherReasons))
	dpDNS := testpki.NewLeafDP(t, testpki.DP(testpki.DPFullName(testpki.DNSName(testpki.DPURI)), nil))
	dpEmpty := testpki.NewLeafDP(t, testpki.DP(nil, nil))
	// A leaf whose distribution point is the directoryName relDP completes to (crypto/x509 does not
	// parse a certificate whose distribution point is itself a relative name).
	var interRDNs pkix.RDNSequence
	if _, err := asn1.Unmarshal(p.Inter.Cert.RawSubject, &interRDNs); err != nil {
		t.Fatal(err)
	}
	relFull, _ := asn1.Marshal(append(interRDNs, pkix.RelativeDistinguishedNameSET{{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: "CRL 1"}}))
	dpDir := testpki.NewLeafDP(t, testpki.DP(testpki.DPFullName(testpki.DirName(relFull)), nil))
	idp := func(name []byte) []pkix.Extension { return crit(testpki.OIDIDP, testpki.IDP(name)) }
	delta := crit(testpki.OIDDeltaCRL, []byte{2, 1, 1})
	otherKey := testpki.CA{Cert: p.Inter.Cert, Key: testpki.NewKey(t)}
	// Where pgconnector's verdict differs from OpenSSL 3.0's on purpose: it refuses where OpenSSL
	// accepts, or refuses for another reason.
	differs := map[string]string{
		// OpenSSL 3.0 takes a delta CRL for a complete one (get_crl_score tests base_crl_number
		// only with X509_V_FLAG_EXTENDED_CRL_SUPPORT, and check_crl skips the key usage and scope
		// checks of a delta). The chain must also pass without deltas, as once OpenSSL refuses
		// them: a delta alone is not enough, and a newer delta does not hide its base's
		// revocations.
		"delta CRL only":                          "unable to get certificate CRL @0",
		"delta only, issuer without CRLSign":      "unable to get certificate CRL @0",
		"delta not revoking over a revoking base": "certificate revoked @0",
		// OpenSSL refuses this leaf with or without CRLs (setup_dp fails, the certificate is
		// invalid and no issuer is found for it); crypto/x509 takes it, the CRL check refuses it.
		"DP without name or cRLIssuer": "invalid or inconsistent certificate extension: cRLDistributionPoints @0",
		// RFC 5280 knows versions v1 and v2 of a CRL; OpenSSL 3.0 reads any version number.
		"version v3 written": "a certificate revocation list does not parse: x509: unsupported crl version: 2",
	}
	for _, tt := range []struct {
		name string
		pki  *testpki.PKI // p when nil
		crls []testpki.CRLSpec
	}{
		{"no CRL of the root's", nil, []testpki.CRLSpec{{By: &p.Inter}}},
		{"none revoked", nil, []testpki.CRLSpec{{By: &p.Inter}, {By: &p.Root}}},
		{"leaf revoked", nil, []testpki.CRLSpec{{By: &p.Inter, Revoke: []*big.Int{leafSN}}, {By: &p.Root}}},
		{"intermediate revoked", nil, []testpki.CRLSpec{{By: &p.Inter}, {By: &p.Root, Revoke: []*big.Int{interSN}}}},
		{"root revokes itself", nil, []testpki.CRLSpec{{By: &p.Inter}, {By: &p.Root, Revoke: []*big.Int{rootSN}}}},
		{"removeFromCRL", nil, []testpki.CRLSpec{{By: &p.Inter, Revoke: []*big.Int{leafSN}, Reason: 8}, {By: &p.Root}}},
		{"expired", nil, []testpki.CRLSpec{{By: &p.Inter, This: -2 * time.Hour, Next: -time.Hour}, {By: &p.Root}}},
		{"not yet valid", nil, []testpki.CRLSpec{{By: &p.Inter, This: time.Hour, Next: 2 * time.Hour}, {By: &p.Root}}},
		{"expired revoking, valid not", nil, []testpki.CRLSpec{{By: &p.Inter, Revoke: []*big.Int{leafSN}, This: -3 * time.Hour, Next: -time.Hour},
			{By: &p.Inter}, {By: &p.Root}}},
		{"older revoking, newer not", nil, []testpki.CRLSpec{{By: &p.Inter, Revoke: []*big.Int{leafSN}, This: -3 * time.Hour},
			{By: &p.Inter, This: -time.Hour}, {By: &p.Root}}},
		{"older not, newer revoking", nil, []testpki.CRLSpec{{By: &p.Inter, This: -3 * time.Hour},
			{By: &p.Inter, Revoke: []*big.Int{leafSN}, This: -time.Hour}, {By: &p.Root}}},
		{"signed with another key", nil, []testpki.CRLSpec{{By: &p.Inter, Signer: &otherKey}, {By: &p.Root}}},
		{"issuer without CRLSign", noCRLSign, []testpki.CRLSpec{{By: &noCRLSign.Inter}, {By: &noCRLSign.Root}}},
		{"unhandled critical extension", nil, []testpki.CRLSpec{{By: &p.Inter, Ext: crit(asn1.ObjectIdentifier{1, 2, 3, 4}, []byte{5, 0})}, {By: &p.Root}}},
		{"unhandled critical extension, revoking", nil, []testpki.CRLSpec{{By: &p.Inter, Revoke: []*big.Int{leafSN},
			Ext: crit(asn1.ObjectIdentifier{1, 2, 3, 4}, []byte{5, 0})}, {By: &p.Root}}},
		{"delta CRL only", nil, []testpki.CRLSpec{{By: &p.Inter, Ext: crit(testpki.OIDDeltaCRL, []byte{2, 1, 1})}, {By: &p.Root}}},
		{"IDP onlyContainsCACerts", nil, []testpki.CRLSpec{{By: &p.Inter, Ext: crit(testpki.OIDIDP, []byte{0x30, 3, 0x82, 1, 0xff})}, {By: &p.Root}}},
		{"IDP onlyContainsUserCerts", nil, []testpki.CRLSpec{{By: &p.Inter, Ext: crit(testpki.OIDIDP, []byte{0x30, 3, 0x81, 1, 0xff})}, {By: &p.Root}}},
		{"IDP onlyContainsUserCerts for the intermediate", nil, []testpki.CRLSpec{{By: &p.Inter},
			{By: &p.Root, Ext: crit(testpki.OIDIDP, []byte{0x30, 3, 0x81, 1, 0xff})}}},
		{"IDP indirectCRL", nil, []testpki.CRLSpec{{By: &p.Inter, Ext: crit(testpki.OIDIDP, []byte{0x30, 3, 0x84, 1, 0xff})}, {By: &p.Root}}},
		{"IDP with a distribution point, leaf without", nil, []testpki.CRLSpec{{By: &p.Inter,
			Ext: crit(testpki.OIDIDP, testpki.IDP(testpki.DPFullName(testpki.URIName("http://crl.example/i.crl"))))}, {By: &p.Root}}},
		// Delta CRLs (deltaCRLIndicator, RFC 5280 5.2.4): OpenSSL 3.0 scores them as complete CRLs,
		// the newest of equal score wins.
		{"delta revoking over a base", nil, []testpki.CRLSpec{{By: &p.Inter, This: -2 * time.Hour},
			{By: &p.Inter, Revoke: []*big.Int{leafSN}, Ext: delta}, {By: &p.Root}}},
		{"older delta revoking under a base", nil, []testpki.CRLSpec{{By: &p.Inter},
			{By: &p.Inter, Revoke: []*big.Int{leafSN}, This: -2 * time.Hour, Ext: delta}, {By: &p.Root}}},
		{"delta not revoking over a revoking base", nil, []testpki.CRLSpec{{By: &p.Inter, Revoke: []*big.Int{leafSN}, This: -2 * time.Hour},
			{By: &p.Inter, Ext: delta}, {By: &p.Root}}},
		{"delta only, revoking", nil, []testpki.CRLSpec{{By: &p.Inter, Revoke: []*big.Int{leafSN}, Ext: delta}, {By: &p.Root}}},
		{"delta only, out of scope", nil, []testpki.CRLSpec{{By: &p.Inter, Ext: append(crit(testpki.OIDIDP, []byte{0x30, 3, 0x82, 1, 0xff}), delta...)},
			{By: &p.Root}}},
		{"delta only, issuer without CRLSign", noCRLSign, []testpki.CRLSpec{{By: &noCRLSign.Inter, Ext: delta}, {By: &noCRLSign.Root, Ext: delta}}},
		{"delta over a base, out of scope", nil, []testpki.CRLSpec{{By: &p.Inter, This: -2 * time.Hour},
			{By: &p.Inter, Revoke: []*big.Int{leafSN}, Ext: append(crit(testpki.OIDIDP, []byte{0x30, 3, 0x82, 1, 0xff}), delta...)}, {By: &p.Root}}},
		// The CRL's authorityKeyIdentifier against the issuer's certificate (X509_check_akid).
		{"AKID of the issuer's key, serial and issuer", nil, []testpki.CRLSpec{{By: &p.Inter,
			AKID: testpki.AKID(p.Inter.Cert.SubjectKeyId, p.Root.Cert.RawSubject, interSN)}, {By: &p.Root}}},
		{"AKID of another serial", nil, []testpki.CRLSpec{{By: &p.Inter,
			AKID: testpki.AKID(p.Inter.Cert.SubjectKeyId, nil, new(big.Int).Add(interSN, big.NewInt(1)))}, {By: &p.Root}}},
		{"AKID of another issuer", nil, []testpki.CRLSpec{{By: &p.Inter, AKID: testpki.AKID(p.Inter.Cert.SubjectKeyId, p.Inter.Cert.RawSubject, nil)},
			{By: &p.Root}}},
		{"AKID of another key", nil, []testpki.CRLSpec{{By: &p.Inter, AKID: testpki.AKID([]byte{1, 2, 3, 4}, nil, nil)}, {By: &p.Root}}},
		{"AKID of another serial, revoking, with a good CRL", nil, []testpki.CRLSpec{{By: &p.Inter, Revoke: []*big.Int{leafSN},
			AKID: testpki.AKID(nil, nil, big.NewInt(7))}, {By: &p.Inter, This: -2 * time.Hour}, {By: &p.Root}}},
		// The leaf's distribution points against the CRL's IDP.
		{"DP of a URI, IDP of it", dpPlain, []testpki.CRLSpec{{By: &dpPlain.Inter, Ext: idp(uriDP)}, {By: &dpPlain.Root}}},
		{"DP of a URI, IDP of another", dpPlain, []testpki.CRLSpec{{By: &dpPlain.Inter, Ext: idp(testpki.DPFullName(testpki.URIName(otherURI)))}, {By: &dpPlain.Root}}},
		{"DP with another cRLIssuer, IDP of its URI", dpCRLIssuer, []testpki.CRLSpec{{By: &dpCRLIssuer.Inter, Ext: idp(uriDP)}, {By: &dpCRLIssuer.Root}}},
		{"DP with another cRLIssuer, no IDP", dpCRLIssuer, []testpki.CRLSpec{{By: &dpCRLIssuer.Inter}, {By: &dpCRLIssuer.Root}}},
		{"DP with the issuer as cRLIssuer, IDP of its URI", dpSelfIssuer, []testpki.CRLSpec{{By: &dpSelfIssuer.Inter, Ext: idp(uriDP)}, {By: &dpSelfIssuer.Root}}},
		{"DP of a cRLIssuer only, IDP of a URI", dpIssuerOnly, []testpki.CRLSpec{{By: &dpIssuerOnly.Inter, Ext: idp(uriDP)}, {By: &dpIssuerOnly.Root}}},
		{"DP with another cRLIssuer, then a DP of the URI", dpTwo, []testpki.CRLSpec{{By: &dpTwo.Inter, Ext: idp(uriDP)}, {By: &dpTwo.Root}}},
		{"DP for keyCompromise, IDP of its URI", dpKeyCompromise, []testpki.CRLSpec{{By: &dpKeyCompromise.Inter, Ext: idp(uriDP)}, {By: &dpKeyCompromise.Root}}},
		{"DP for keyCompromise, no IDP", dpKeyCompromise, []testpki.CRLSpec{{By: &dpKeyCompromise.Inter}, {By: &dpKeyCompromise.Root}}},
		{"DP for keyCompromise, revoking", dpKeyCompromise, []testpki.CRLSpec{{By: &dpKeyCompromise.Inter, Revoke: []*big.Int{dpKeyCompromise.Leaf.Cert.SerialNumber},
			Ext: idp(uriDP)}, {By: &dpKeyCompromise.Root}}},
		{"DP for keyCompromise, then a CRL out of scope", dpKeyCompromise, []testpki.CRLSpec{{By: &dpKeyCompromise.Inter, Ext: idp(uriDP)},
			{By: &dpKeyCompromise.Inter, Ext: crit(testpki.OIDIDP, []byte{0x30, 3, 0x82, 1, 0xff}), This: -2 * time.Hour}, {By: &dpKeyCompromise.Root}}},
		{"DP for the unused reason bit only", dpUnusedReason, []testpki.CRLSpec{{By: &dpUnusedReason.Inter, Ext: idp(uriDP)}, {By: &dpUnusedReason.Root}}},
		{"DP for all reasons", dpAllReasons, []testpki.CRLSpec{{By: &dpAllReasons.Inter, Ext: idp(uriDP)}, {By: &dpAllReasons.Root}}},
		{"DPs for some reasons each, a CRL for each", dpSplit, []testpki.CRLSpec{{By: &dpSplit.Inter, Ext: idp(uriDP)},
			{By: &dpSplit.Inter, Ext: idp(testpki.DPFullName(testpki.URIName(otherURI)))}, {By: &dpSplit.Root}}},
		{"DPs for some reasons each, the second CRL revoking", dpSplit, []testpki.CRLSpec{{By: &dpSplit.Inter, Ext: idp(uriDP), This: -2 * time.Hour},
			{By: &dpSplit.Inter, Ext: idp(testpki.DPFullName(testpki.URIName(otherURI))), Revoke: []*big.Int{dpSplit.Leaf.Cert.SerialNumber}}, {By: &dpSplit.Root}}},
		{"DPs for some reasons each, a CRL for one", dpSplit, []testpki.CRLSpec{{By: &dpSplit.Inter, Ext: idp(uriDP)}, {By: &dpSplit.Root}}},
		{"DP of a directoryName, IDP of it", dpDir, []testpki.CRLSpec{{By: &dpDir.Inter, Ext: idp(testpki.DPFullName(testpki.DirName(relFull)))}, {By: &dpDir.Root}}},
		{"DP of a directoryName, IDP of it relative to the issuer", dpDir, []testpki.CRLSpec{{By: &dpDir.Inter, Ext: idp(relDP)}, {By: &dpDir.Root}}},
		{"DP of a directoryName, IDP of another relative name", dpDir, []testpki.CRLSpec{{By: &dpDir.Inter,
			Ext: idp(testpki.DPRelative(pkix.AttributeTypeAndValue{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: "CRL 2"}))}, {By: &dpDir.Root}}},
		{"DP of a dNSName, IDP of a URI of the same text", dpDNS, []testpki.CRLSpec{{By: &dpDNS.Inter, Ext: idp(uriDP)}, {By: &dpDNS.Root}}},
		{"DP without name or cRLIssuer", dpEmpty, []testpki.CRLSpec{{By: &dpEmpty.Inter}, {By: &dpEmpty.Root}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var crls [][]byte
			for _, s := range tt.crls {
				crls = append(crls, testpki.MakeCRL(t, s))
			}
			p := p
			if tt.pki != nil {
				p = tt.pki
			}
			want := opensslVerify(t, p, crls, "")
			got := ourVerify(t, p, crls, "")
			t.Logf("OpenSSL: %q", want)
			if ours, ok := differs[tt.name]; ok {
				if got != ours {
					t.Errorf("got %q, want %q", got, ours)
				}
				return
			}
			if !strings.EqualFold(got, want) {
				t.Errorf("got %q, OpenSSL %q", got, want)
			}
		})
	}

	// Version 1 CRLs (RFC 5280, 5.1.2.1: no version field, no extensions), as "openssl ca
	// -gencrl" writes them without crl_extensions (PostgreSQL's src/test/ssl), beside version 2
	// ones; and the version v1 written out, which OpenSSL reads too.
	v1 := func(s testpki.CRLSpec) []byte { return testpki.MakeCRLv1(t, s) }
	v2 := func(s testpki.CRLSpec) []byte { return testpki.MakeCRL(t, s) }
	explicitV1 := func(s testpki.CRLSpec) []byte { return testpki.MakeCRLVersion(t, s, 0) }
	for _, tt := range []struct {
		name string
		pki  *testpki.PKI // p when nil
		crls [][]byte
	}{
		{"v1: none revoked", nil, [][]byte{v1(testpki.CRLSpec{By: &p.Inter}), v1(testpki.CRLSpec{By: &p.Root})}},
		{"v1: leaf revoked", nil, [][]byte{v1(testpki.CRLSpec{By: &p.Inter, Revoke: []*big.Int{leafSN}}), v1(testpki.CRLSpec{By: &p.Root})}},
		{"v1: intermediate revoked", nil, [][]byte{v1(testpki.CRLSpec{By: &p.Inter}), v1(testpki.CRLSpec{By: &p.Root, Revoke: []*big.Int{interSN}})}},
		{"v1: root revokes itself", nil, [][]byte{v1(testpki.CRLSpec{By: &p.Inter}), v1(testpki.CRLSpec{By: &p.Root, Revoke: []*big.Int{rootSN}})}},
		{"v1: no CRL of the root's", nil, [][]byte{v1(testpki.CRLSpec{By: &p.Inter})}},
		{"v1: expired", nil, [][]byte{v1(testpki.CRLSpec{By: &p.Inter, This: -2 * time.Hour, Next: -time.Hour}), v1(testpki.CRLSpec{By: &p.Root})}},
		{"v1: not yet valid", nil, [][]byte{v1(testpki.CRLSpec{By: &p.Inter, This: time.Hour, Next: 2 * time.Hour}), v1(testpki.CRLSpec{By: &p.Root})}},
		{"v1: signed with another key", nil, [][]byte{v1(testpki.CRLSpec{By: &p.Inter, Signer: &otherKey}), v1(testpki.CRLSpec{By: &p.Root})}},
		{"v1: issuer without CRLSign", noCRLSign, [][]byte{v1(testpki.CRLSpec{By: &noCRLSign.Inter}), v1(testpki.CRLSpec{By: &noCRLSign.Root})}},
		{"v1: older revoking, newer not", nil, [][]byte{v1(testpki.CRLSpec{By: &p.Inter, Revoke: []*big.Int{leafSN}, This: -3 * time.Hour}),
			v1(testpki.CRLSpec{By: &p.Inter, This: -time.Hour}), v1(testpki.CRLSpec{By: &p.Root})}},
		{"v1 newer revoking over v2", nil, [][]byte{v2(testpki.CRLSpec{By: &p.Inter, This: -3 * time.Hour}),
			v1(testpki.CRLSpec{By: &p.Inter, Revoke: []*big.Int{leafSN}}), v2(testpki.CRLSpec{By: &p.Root})}},
		{"v2 newer not revoking over v1", nil, [][]byte{v1(testpki.CRLSpec{By: &p.Inter, Revoke: []*big.Int{leafSN}, This: -3 * time.Hour}),
			v2(testpki.CRLSpec{By: &p.Inter}), v1(testpki.CRLSpec{By: &p.Root})}},
		{"v1 for the intermediate, v2 for the root", nil, [][]byte{v1(testpki.CRLSpec{By: &p.Inter}), v2(testpki.CRLSpec{By: &p.Root})}},
		{"v1 DP of a URI, no IDP", dpPlain, [][]byte{v1(testpki.CRLSpec{By: &dpPlain.Inter}), v1(testpki.CRLSpec{By: &dpPlain.Root})}},
		{"v1 version written out: leaf revoked", nil, [][]byte{explicitV1(testpki.CRLSpec{By: &p.Inter, Revoke: []*big.Int{leafSN}}),
			explicitV1(testpki.CRLSpec{By: &p.Root})}},
		{"v1 version written out: none revoked", nil, [][]byte{explicitV1(testpki.CRLSpec{By: &p.Inter}), explicitV1(testpki.CRLSpec{By: &p.Root})}},
		// Extensions and entry extensions belong to version 2 (5.1.2.1); OpenSSL reads them in a
		// CRL without a version too.
		{"v1 with an unhandled critical extension", nil, [][]byte{v1(testpki.CRLSpec{By: &p.Inter, Ext: crit(asn1.ObjectIdentifier{1, 2, 3, 4}, []byte{5, 0})}),
			v1(testpki.CRLSpec{By: &p.Root})}},
		{"v1 with IDP onlyContainsCACerts", nil, [][]byte{v1(testpki.CRLSpec{By: &p.Inter, Ext: crit(testpki.OIDIDP, []byte{0x30, 3, 0x82, 1, 0xff})}),
			v1(testpki.CRLSpec{By: &p.Root})}},
		{"v1 with removeFromCRL", nil, [][]byte{v1(testpki.CRLSpec{By: &p.Inter, Revoke: []*big.Int{leafSN}, Reason: 8}), v1(testpki.CRLSpec{By: &p.Root})}},
		{"version v3 written", nil, [][]byte{testpki.MakeCRLVersion(t, testpki.CRLSpec{By: &p.Inter}, 2), v1(testpki.CRLSpec{By: &p.Root})}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := p
			if tt.pki != nil {
				p = tt.pki
			}
			want := opensslVerify(t, p, tt.crls, "")
			got := ourVerify(t, p, tt.crls, "")
			t.Logf("OpenSSL: %q", want)
			if ours, ok := differs[tt.name]; ok {
				if !strings.Contains(got, ours) {
					t.Errorf("got %q, want %q", got, ours)
				}
				return
			}
			if !strings.EqualFold(got, want) {
				t.Errorf("got %q, OpenSSL %q", got, want)
			}
		})
	}

	// sslcrldir: looked up by the hash of the issuer's name, .r0, .r1, ... until one is missing.
	t.Run("directory", func(t *testing.T) {
		rootCRL := testpki.MakeCRL(t, testpki.CRLSpec{By: &p.Root})
		interOK := testpki.MakeCRL(t, testpki.CRLSpec{By: &p.Inter, This: -2 * time.Hour})
		interRev := testpki.MakeCRL(t, testpki.CRLSpec{By: &p.Inter, Revoke: []*big.Int{leafSN}})
		interHash, _ := tlspolicy.NameHash(p.Inter.Cert.RawSubject)
		rootHash, _ := tlspolicy.NameHash(p.Root.Cert.RawSubject)
		for _, tt := range []struct {
			name  string
			files map[string][]byte
		}{
			{"hashed", map[string][]byte{interHash + ".r0": interOK, rootHash + ".r0": rootCRL}},
			{"hashed, revoking in .r1", map[string][]byte{interHash + ".r0": interOK,
				interHash + ".r1": interRev, rootHash + ".r0": rootCRL}},
			{"revoking in .r2 after a gap", map[string][]byte{interHash + ".r0": interOK,
				interHash + ".r2": interRev, rootHash + ".r0": rootCRL}},
			{"not hashed", map[string][]byte{"inter.pem": interRev, rootHash + ".r0": rootCRL}},
			{"v1, hashed", map[string][]byte{interHash + ".r0": testpki.MakeCRLv1(t, testpki.CRLSpec{By: &p.Inter}),
				rootHash + ".r0": testpki.MakeCRLv1(t, testpki.CRLSpec{By: &p.Root})}},
			{"v1, revoking in .r1", map[string][]byte{interHash + ".r0": testpki.MakeCRLv1(t, testpki.CRLSpec{By: &p.Inter, This: -2 * time.Hour}),
				interHash + ".r1": testpki.MakeCRLv1(t, testpki.CRLSpec{By: &p.Inter, Revoke: []*big.Int{leafSN}}),
				rootHash + ".r0":  testpki.MakeCRLv1(t, testpki.CRLSpec{By: &p.Root})}},
			{"empty", nil},
		} {
			t.Run(tt.name, func(t *testing.T) {
				dir := t.TempDir()
				for name, der := range tt.files {
					if err := os.WriteFile(filepath.Join(dir, name), testpki.PEMCRL(der), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want := opensslVerify(t, p, nil, dir)
				got := ourVerify(t, p, nil, dir)
				if !strings.EqualFold(got, want) {
					t.Errorf("got %q, OpenSSL %q", got, want)
				}
				t.Logf("OpenSSL: %q", want)
			})
		}
	})
}

// The sslcrl file as libpq reads it: missing, empty or without a CRL or certificate, nothing is
// checked; a certificate alone turns the checks on; DER is read (libpq would check nothing); a
// CRL that does not parse fails (libpq would check nothing).
func TestCRLFile(t *testing.T) {
	p := testpki.New(t)
	rev := testpki.MakeCRL(t, testpki.CRLSpec{By: &p.Inter, Revoke: []*big.Int{p.Leaf.Cert.SerialNumber}})
	rootCRL := testpki.MakeCRL(t, testpki.CRLSpec{By: &p.Root})
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cs := tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{p.Leaf.Cert, p.Inter.Cert, p.Root.Cert}}}
	for _, tt := range []struct {
		name, file string
		want       string // error substring, "" for a pass
	}{
		{"missing", filepath.Join(dir, "nonexistent.pem"), ""},
		{"empty", write("empty.pem", nil), ""},
		{"PEM without CRL or certificate", write("key.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}})), ""},
		{"a certificate only", write("cert.pem", testpki.PEMCert(p.Root.Cert)), "unable to get certificate CRL"},
		{"PEM revoking", write("rev.pem", append(testpki.PEMCRL(rev), testpki.PEMCRL(rootCRL)...)), "certificate revoked"},
		{"DER revoking", write("rev.der", rev), "certificate revoked"},
		{"corrupt", write("bad.pem", append(testpki.PEMCRL([]byte{0x30, 0}), testpki.PEMCRL(rootCRL)...)), "does not parse"},
		{"garbage", write("garbage", []byte("not a CRL")), "holds neither a PEM nor a DER certificate revocation list"},
		{"a directory", dir, "cannot read sslcrl"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := (&crlCheck{file: tt.file}).Check(cs.VerifiedChains, time.Now())
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

// The keys against a TLS server, each beside psql (libpq) with the same connection string: both
// connect, or both fail.
func TestTLSKeysAgainstServer(t *testing.T) {
	srv := harness.StartT(t, harness.Options{TLS: true})
	other := harness.StartT(t, harness.Options{TLS: true}) // another CA of the same name
	home := t.TempDir()
	t.Setenv("HOME", home) // ~/.postgresql/root.crl is read when neither sslcrl nor sslcrldir is given
	for _, env := range []string{"PGSSLMINPROTOCOLVERSION", "PGSSLMAXPROTOCOLVERSION", "PGSSLCRL", "PGSSLCRLDIR",
		"PGSSLROOTCERT", "PGSSLMODE", "PGSSLNEGOTIATION"} {
		t.Setenv(env, "")
		os.Unsetenv(env)
	}
	dir := t.TempDir()
	crl := func(s *harness.Postgres, revoke bool) string {
		t.Helper()
		path, err := s.WriteCRL(dir, revoke)
		if err != nil {
			t.Fatal(err)
		}
		return path
	}
	rev, notRev := crl(srv, true), crl(srv, false)
	otherNotRev := crl(other, false)
	now := time.Now()
	writeDER := func(name string, revoke bool, this, next time.Time) string {
		der, err := srv.CRL(revoke, this, next)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, testpki.PEMCRL(der), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	expired := writeDER("expired.pem", false, now.Add(-2*time.Hour), now.Add(-time.Hour))
	// A base CRL and a delta CRL (deltaCRLIndicator, base CRL number 1) an hour newer: OpenSSL
	// 3.0, which libpq links here, takes the delta for a complete CRL, the newest.
	baseAndDelta := func(name string, baseRevokes, deltaRevokes bool) string {
		t.Helper()
		base, err := srv.CRL(baseRevokes, now.Add(-2*time.Hour), now.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		delta, err := srv.CRL(deltaRevokes, now.Add(-time.Hour), now.Add(time.Hour),
			pkix.Extension{Id: testpki.OIDDeltaCRL, Critical: true, Value: []byte{2, 1, 1}})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, append(testpki.PEMCRL(base), testpki.PEMCRL(delta)...), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	deltaRevoking, deltaHiding := baseAndDelta("delta-revoking.pem", false, true), baseAndDelta("delta-hiding.pem", true, false)
	// A directory as "openssl rehash" (or c_rehash) leaves it: <hash>.r0.
	hashedDir := func(name, crlFile string) string {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(crlFile)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := exec.LookPath("openssl"); err == nil {
			if err := os.WriteFile(filepath.Join(d, "crl.pem"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("openssl", "rehash", d).CombinedOutput(); err != nil {
				t.Fatalf("openssl rehash: %v: %s", err, out)
			}
			return d
		}
		blk, _ := pem.Decode(b)
		rl, err := x509.ParseRevocationList(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		hash, err := tlspolicy.NameHash(rl.RawIssuer)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, hash+".r0"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	revDir, notRevDir := hashedDir("rev", rev), hashedDir("notrev", notRev)
	plainDir := filepath.Join(dir, "plain")
	if err := os.Mkdir(plainDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(rev); err != nil || os.WriteFile(filepath.Join(plainDir, "crl.pem"), b, 0o644) != nil {
		t.Fatal(err)
	}

	ca := "sslrootcert=" + srv.CAFile
	const query = "select coalesce((select version from pg_stat_ssl where pid = pg_backend_pid() and ssl), 'plain')"
	// run connects with psql and with pgx (the keys applied): the two results, "" for a failure.
	run := func(t *testing.T, extra ...string) (psql, ours string, psqlErr, ourErr error) {
		t.Helper()
		dsn := srv.DSN(extra...)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		psql, psqlErr = harness.Psql(ctx, []string{"HOME=" + home}, dsn, query)
		cfg, ourErr := pgxConfigWithTLSKeys(t, dsn)
		if ourErr == nil {
			var conn *pgx.Conn
			conn, ourErr = pgx.ConnectConfig(ctx, cfg)
			if ourErr == nil {
				ourErr = conn.QueryRow(ctx, query).Scan(&ours)
				conn.Close(ctx)
			}
		}
		for _, err := range []error{psqlErr, ourErr} {
			if err != nil && strings.Contains(err.Error(), srv.Password) {
				t.Errorf("an error shows the password: %v", err)
			}
		}
		return psql, ours, psqlErr, ourErr
	}
	same := func(t *testing.T, want string, extra ...string) {
		t.Helper()
		psql, ours, psqlErr, ourErr := run(t, extra...)
		t.Logf("psql: %q %v; pgconnector: %q %v", psql, psqlErr, ours, ourErr)
		if (psqlErr == nil) != (ourErr == nil) || psql != ours {
			t.Fatalf("psql %q (%v), pgconnector %q (%v)", psql, psqlErr, ours, ourErr)
		}
		if want == "fail" {
			if ourErr == nil {
				t.Fatal("both connected, want both to fail")
			}
		} else if ours != want {
			t.Fatalf("both got %q, want %q", ours, want)
		}
	}

	t.Run("ssl_max_protocol_version=TLSv1.2", func(t *testing.T) {
		same(t, "TLSv1.2", "sslmode=require", "ssl_max_protocol_version=TLSv1.2")
	})
	t.Run("ssl_min_protocol_version=TLSv1.3", func(t *testing.T) {
		same(t, "TLSv1.3", "sslmode=require", "ssl_min_protocol_version=tlsv1.3", "ssl_max_protocol_version=TLSv1.3")
	})
	t.Run("ssl_max_protocol_version=TLSv1.1 without a minimum", func(t *testing.T) {
		same(t, "fail", "sslmode=require", "ssl_max_protocol_version=TLSv1.1")
	})
	t.Run("TLSv1 to TLSv1.1, which the server refuses", func(t *testing.T) {
		same(t, "fail", "sslmode=require", "ssl_min_protocol_version=TLSv1", "ssl_max_protocol_version=TLSv1.1")
	})
	t.Run("invalid version, sslmode=disable", func(t *testing.T) {
		same(t, "fail", "sslmode=disable", "ssl_min_protocol_version=TLSv1.4")
	})

	for _, tt := range []struct {
		name  string
		want  string
		extra []string
	}{
		{"verify-ca without a CRL", "TLSv1.3", []string{"sslmode=verify-ca", ca}},
		{"sslcrl revoking, verify-ca", "fail", []string{"sslmode=verify-ca", ca, "sslcrl=" + rev}},
		{"sslcrl revoking, verify-full", "fail", []string{"sslmode=verify-full", ca, "sslcrl=" + rev}},
		{"sslcrl revoking, require with sslrootcert", "fail", []string{"sslmode=require", ca, "sslcrl=" + rev}},
		{"sslcrl revoking, require without sslrootcert", "TLSv1.3", []string{"sslmode=require", "sslcrl=" + rev}},
		{"sslcrl not revoking", "TLSv1.3", []string{"sslmode=verify-ca", ca, "sslcrl=" + notRev}},
		{"sslcrl missing", "TLSv1.3", []string{"sslmode=verify-ca", ca, "sslcrl=" + filepath.Join(dir, "nonexistent.pem")}},
		{"sslcrl expired", "fail", []string{"sslmode=verify-ca", ca, "sslcrl=" + expired}},
		{"sslcrl with a newer delta revoking over a base", "fail", []string{"sslmode=verify-ca", ca, "sslcrl=" + deltaRevoking}},
		{"sslcrl of another CA", "fail", []string{"sslmode=verify-ca", ca, "sslcrl=" + otherNotRev}},
		{"sslcrl with a certificate only", "fail", []string{"sslmode=verify-ca", ca, "sslcrl=" + srv.CAFile}},
		{"sslcrldir revoking", "fail", []string{"sslmode=verify-ca", ca, "sslcrldir=" + revDir}},
		{"sslcrldir not revoking", "TLSv1.3", []string{"sslmode=verify-ca", ca, "sslcrldir=" + notRevDir}},
		{"sslcrldir list", "TLSv1.3", []string{"sslmode=verify-ca", ca, "sslcrldir=" + filepath.Join(dir, "nonexistent") + ":" + notRevDir}},
		{"sslcrldir missing", "fail", []string{"sslmode=verify-ca", ca, "sslcrldir=" + filepath.Join(dir, "nonexistent")}},
		{"sslcrldir not hashed", "fail", []string{"sslmode=verify-ca", ca, "sslcrldir=" + plainDir}},
		{"sslcrl missing, sslcrldir revoking", "TLSv1.3", []string{"sslmode=verify-ca", ca,
			"sslcrl=" + filepath.Join(dir, "nonexistent.pem"), "sslcrldir=" + revDir}},
		{"sslcrl revoking, sslcrldir not", "fail", []string{"sslmode=verify-ca", ca, "sslcrl=" + rev, "sslcrldir=" + notRevDir}},
	} {
		t.Run(tt.name, func(t *testing.T) { same(t, tt.want, tt.extra...) })
	}

	t.Run("~/.postgresql/root.crl", func(t *testing.T) {
		b, err := os.ReadFile(rev)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(home, ".postgresql"), 0o700); err != nil {
			t.Fatal(err)
		}
		defCRL := filepath.Join(home, ".postgresql", "root.crl")
		if err := os.WriteFile(defCRL, b, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(defCRL)
		same(t, "fail", "sslmode=verify-ca", ca)
		same(t, "fail", "sslmode=verify-ca", ca, "sslcrl=''")
		same(t, "TLSv1.3", "sslmode=verify-ca", ca, "sslcrldir="+notRevDir) // sslcrldir: no default file
		same(t, "TLSv1.3", "sslmode=require")                               // no root certificate: no CRL
	})

	// Where pgconnector differs from libpq on purpose: a DER sslcrl is read (libpq reads PEM only
	// and, failing to, checks nothing), and a file that does not parse fails (libpq checks nothing).
	t.Run("differences", func(t *testing.T) {
		der, err := srv.CRL(true, now.Add(-time.Hour), now.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		derFile := filepath.Join(dir, "rev.der")
		corrupt := filepath.Join(dir, "corrupt.pem")
		revPEM, _ := os.ReadFile(rev)
		if os.WriteFile(derFile, der, 0o644) != nil || os.WriteFile(corrupt, append(revPEM, testpki.PEMCRL([]byte{0x30, 0})...), 0o644) != nil {
			t.Fatal("writing the CRLs")
		}
		for _, f := range []string{derFile, corrupt} {
			psql, _, psqlErr, ourErr := run(t, "sslmode=verify-ca", ca, "sslcrl="+f)
			if psqlErr != nil || psql != "TLSv1.3" || ourErr == nil {
				t.Errorf("%s: psql %q (%v), pgconnector %v; want psql to connect (it checks no CRL) and pgconnector to fail",
					filepath.Base(f), psql, psqlErr, ourErr)
			}
			t.Logf("%s: pgconnector: %v", filepath.Base(f), ourErr)
		}
		// A newer delta that does not repeat its base's revocation: OpenSSL 3.0 takes the delta
		// alone and connects; pgconnector also checks without deltas and finds the revocation.
		psql, _, psqlErr, ourErr := run(t, "sslmode=verify-ca", ca, "sslcrl="+deltaHiding)
		if psqlErr != nil || psql != "TLSv1.3" || ourErr == nil || !strings.Contains(ourErr.Error(), "certificate revoked") {
			t.Errorf("delta hiding a revocation: psql %q (%v), pgconnector %v; want psql to connect and pgconnector to fail (certificate revoked)",
				psql, psqlErr, ourErr)
		}
		t.Logf("delta hiding a revocation: pgconnector: %v", ourErr)
	})

	t.Run("sslkeylogfile", func(t *testing.T) {
		logFile := filepath.Join(t.TempDir(), "keys.log")
		for range 2 {
			cfg, err := pgxConfigWithTLSKeys(t, srv.DSN("sslmode=require", "sslkeylogfile="+logFile))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			conn.Close(ctx)
			cancel()
		}
		fi, err := os.Stat(logFile)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("mode %v, want 0600", fi.Mode().Perm())
		}
		f, err := os.Open(logFile)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		count := map[string]int{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) != 3 || len(fields[1]) != 64 {
				t.Errorf("not an NSS key log line: %q", sc.Text())
				continue
			}
			count[fields[0]]++
		}
		if count["CLIENT_TRAFFIC_SECRET_0"] != 2 || count["SERVER_TRAFFIC_SECRET_0"] != 2 || count["CLIENT_HANDSHAKE_TRAFFIC_SECRET"] != 2 {
			t.Errorf("labels %v, want each TLS 1.3 secret of the two connections", count)
		}
	})

	t.Run("sslkeylogfile that cannot be written", func(t *testing.T) {
		cfg, err := pgxConfigWithTLSKeys(t, srv.DSN("sslmode=require", "sslkeylogfile="+filepath.Join(dir, "nonexistent", "keys.log")))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatalf("the connection fails: %v (libpq goes on without the key log)", err)
		}
		conn.Close(ctx)
	})
}

// The scope of the server's CRL against the distribution points of the server's certificate
// (cRLDistributionPoints: cRLIssuer, reasons), on a real server whose certificate has them:
// psql (libpq on OpenSSL 3.0) and pgconnector connect, or both fail, pgconnector with OpenSSL's
// reason.
func TestCRLScopeAgainstServer(t *testing.T) {
	srv := harness.StartT(t, harness.Options{TLS: true})
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, env := range []string{"PGSSLCRL", "PGSSLCRLDIR", "PGSSLROOTCERT", "PGSSLMODE", "PGSSLNEGOTIATION"} {
		t.Setenv(env, "")
		os.Unsetenv(env)
	}
	otherDER, _ := asn1.Marshal(pkix.Name{CommonName: "Other CRL Issuer", Organization: []string{"pgconnector"}}.ToRDNSequence())
	uriDP := testpki.DPFullName(testpki.URIName(testpki.DPURI))
	idp := func(v []byte) pkix.Extension { return pkix.Extension{Id: testpki.OIDIDP, Critical: true, Value: v} }
	// The CA's own CRL: onlyContainsCACerts, so that it is out of scope for the server's certificate.
	now := time.Now()
	caCRL, err := srv.CRL(false, now.Add(-2*time.Hour), now.Add(time.Hour), idp([]byte{0x30, 3, 0x82, 1, 0xff}))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	const query = "select 'connected'"
	for _, tt := range []struct {
		name   string
		dp     []byte           // the server certificate's distribution point
		crlExt []pkix.Extension // of the CRL for the server's certificate
		want   string           // "" to connect, else pgconnector's reason
	}{
		{"a URI, IDP of it", testpki.DP(uriDP, nil), []pkix.Extension{idp(testpki.IDP(uriDP))}, ""},
		{"cRLIssuer of another CA, IDP of its URI", testpki.DP(uriDP, nil, testpki.DirName(otherDER)), []pkix.Extension{idp(testpki.IDP(uriDP))},
			"different CRL scope"},
		{"cRLIssuer of another CA, no IDP", testpki.DP(uriDP, nil, testpki.DirName(otherDER)), nil, ""},
		// Its CRL covers keyCompromise only; the next best CRL is the CA's, out of scope.
		{"for keyCompromise only", testpki.DP(uriDP, []byte{6, 0x40}), []pkix.Extension{idp(testpki.IDP(uriDP))}, "different CRL scope"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dps, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true, Bytes: tt.dp})
			if err := srv.ReissueServerCert(pkix.Extension{Id: testpki.OIDCRLDP, Value: dps}); err != nil {
				t.Fatal(err)
			}
			srvCRL, err := srv.CRL(false, now.Add(-time.Hour), now.Add(time.Hour), tt.crlExt...)
			if err != nil {
				t.Fatal(err)
			}
			crlFile := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_")+".pem")
			if err := os.WriteFile(crlFile, append(testpki.PEMCRL(srvCRL), testpki.PEMCRL(caCRL)...), 0o644); err != nil {
				t.Fatal(err)
			}
			dsn := srv.DSN("sslmode=verify-ca", "sslrootcert="+srv.CAFile, "sslcrl="+crlFile)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			psql, psqlErr := harness.Psql(ctx, []string{"HOME=" + home}, dsn, query)
			var ours string
			cfg, ourErr := pgxConfigWithTLSKeys(t, dsn)
			if ourErr == nil {
				var conn *pgx.Conn
				if conn, ourErr = pgx.ConnectConfig(ctx, cfg); ourErr == nil {
					ourErr = conn.QueryRow(ctx, query).Scan(&ours)
					conn.Close(ctx)
				}
			}
			t.Logf("psql: %q %v; pgconnector: %q %v", psql, psqlErr, ours, ourErr)
			if (psqlErr == nil) != (ourErr == nil) || psql != ours {
				t.Fatalf("psql %q (%v), pgconnector %q (%v)", psql, psqlErr, ours, ourErr)
			}
			switch {
			case tt.want == "" && ourErr != nil:
				t.Fatalf("both failed, want both to connect")
			case tt.want != "" && (ourErr == nil || !strings.Contains(ourErr.Error(), tt.want+" (certificate at depth 0")):
				t.Fatalf("pgconnector: %v, want %q at depth 0", ourErr, tt.want)
			}
		})
	}
}

// apply changes pgx's *tls.Config in place, so pgx still finds the client certificate of sslcert
// and sslkey, which it keys by that pointer: a server that asks for a certificate gets it.
func TestTLSKeysKeepClientCertificate(t *testing.T) {
	p := testpki.New(t)
	dir := t.TempDir()
	keyDER, err := x509.MarshalPKCS8PrivateKey(p.Leaf.Key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	if os.WriteFile(certFile, testpki.PEMCert(p.Leaf.Cert), 0o600) != nil ||
		os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600) != nil {
		t.Fatal("writing the client certificate")
	}
	serverCert := tls.Certificate{Certificate: [][]byte{p.Leaf.Cert.Raw, p.Inter.Cert.Raw}, PrivateKey: p.Leaf.Key}

	ln, err := harness.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		var req [8]byte // SSLRequest
		if _, err := io.ReadFull(c, req[:]); err != nil {
			got <- -1
			return
		}
		c.Write([]byte{'S'})
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequestClientCert})
		if err := tc.Handshake(); err != nil {
			got <- -1
			return
		}
		got <- len(tc.ConnectionState().PeerCertificates)
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	cfg, err := pgxConfigWithTLSKeys(t, "host=127.0.0.1 port="+strconv.Itoa(port)+" user=u dbname=d sslmode=require "+
		"sslcert="+certFile+" sslkey="+keyFile+" ssl_min_protocol_version=TLSv1.3 connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TLSConfig.MinVersion != tls.VersionTLS13 {
		t.Fatal("the keys were not applied")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if conn, err := pgx.ConnectConfig(ctx, cfg); err == nil {
		conn.Close(ctx)
	}
	if n := <-got; n != 1 {
		t.Errorf("the server got %d client certificates, want 1", n)
	}
}
