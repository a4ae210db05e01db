package connstring

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/pgconnector/pgconnector/internal/tlspolicy"
)

// tlsKeys are the libpq TLS keys pgx does not apply (it passes them to the server as run-time
// parameters, which fails the connection): ssl_min_protocol_version, ssl_max_protocol_version,
// sslcrl, sslcrldir and sslkeylogfile (libpq-connect.html, "Parameter Key Words").
//
// What differs from libpq (15 to 18, with OpenSSL 3):
//   - TLS 1.0 and 1.1: crypto/tls offers them when ssl_min_protocol_version allows them (its
//     client minimum is TLS 1.2 otherwise); OpenSSL may still refuse them at its security level,
//     crypto/tls does not. An empty ssl_min_protocol_version means no bound: libpq then has
//     OpenSSL's own minimum, here crypto/tls's, TLS 1.2.
//   - sslcrl and the files of sslcrldir may be DER as well as PEM; libpq (OpenSSL's
//     X509_STORE_load_locations) reads PEM only and, given a DER sslcrl, checks no revocation
//     at all. A file that exists but cannot be read or holds a CRL that does not parse fails
//     the connection; libpq then silently checks nothing. Certificates in sslcrl count as
//     loaded (they turn the check on, as in libpq) but, unlike in libpq, are not trusted.
//     Version 1 and 2 CRLs are read, as OpenSSL reads them; a CRL of another version does not
//     parse (OpenSSL 3.0 reads it).
//   - Indirect CRLs and CRLs for some reasons only are never used, as by OpenSSL without
//     X509_V_FLAG_EXTENDED_CRL_SUPPORT. A delta CRL is taken for a complete one as OpenSSL 3.0
//     takes it (the newest CRL may be a delta, which then decides), and the chain must also pass
//     without delta CRLs, as current OpenSSL checks it: a delta alone, or a newer delta that does
//     not repeat its base's revocations, fails where OpenSSL 3.0 accepts. A certificate with a
//     distribution point of neither name nor cRLIssuer fails the CRL check; OpenSSL refuses such
//     a certificate with or without CRLs.
//   - CRLs are used, as by libpq, wherever the chain is verified: under every sslmode when the
//     root certificate file exists (internal/tlspolicy); never with sslrootcert=system.
//   - sslkeylogfile: a line that cannot be written is dropped; libpq adds a message to the
//     connection's error text (only seen if the connection fails) and goes on too.
type tlsKeys struct {
	minVersion, maxVersion uint16 // 0: not given, or given empty (no bound)

	// CRLs, read at each handshake (as libpq reads them for each connection).
	crlFile     string   // sslcrl, else ~/.postgresql/root.crl when sslcrldir is not given either
	crlDirs     []string // sslcrldir, split at os.PathListSeparator as OpenSSL splits it
	crlDirGiven bool     // sslcrldir is not empty (then checks are on even when crlDirs is empty)
	systemRoots bool     // sslrootcert=system: libpq loads no CRL

	// The server check (internal/tlspolicy).
	rootFile string // sslrootcert (not "system"), else ~/.postgresql/root.crt; "" without a home
	sslmode  string // as given; "" for the default, prefer
	sni      bool   // sslsni=1 (the default)

	keyLogFile string // sslkeylogfile

	// client is the client certificate of sslcert, sslkey and sslpassword, read at each
	// connection (internal/tlspolicy, ClientCert); nil under sslcertmode=disable.
	client *tlspolicy.ClientCert
}

// parseTLSKeys reads ssl_min_protocol_version (env PGSSLMINPROTOCOLVERSION),
// ssl_max_protocol_version (PGSSLMAXPROTOCOLVERSION), sslcrl (PGSSLCRL), sslcrldir (PGSSLCRLDIR)
// and sslkeylogfile (libpq 18, no env), and for the server check sslrootcert (PGSSLROOTCERT),
// sslmode (PGSSLMODE) and sslsni (PGSSLSNI). get returns a key's value from the connection string (or service file) and, when
// absent there, from the environment variable; ok=false when neither has it. An empty value is
// a value: no bound for the versions, "not given" for the files, as in libpq.
//
// As libpq (connectOptions2), the versions are checked whatever the sslmode, even disable.
func parseTLSKeys(get func(key, env string) (value string, src source, ok bool)) (tlsKeys, error) {
	var k tlsKeys
	type version struct {
		name  string // as tlspolicy.ProtocolVersions spells it; "" for no bound
		id    uint16
		given bool
		env   string // the environment variable it came from, or ""
	}
	parse := func(key, env string) (version, error) {
		v, src, ok := get(key, env)
		if !ok || v == "" {
			return version{given: ok, env: src.env}, nil
		}
		if name, id, ok := tlspolicy.ParseProtocolVersion(v); ok {
			return version{name: name, id: id, given: true, env: src.env}, nil
		}
		return version{}, invalid(key, src, oneOf(tlspolicy.ProtocolVersions())+" (in any letter case), or empty for no bound")
	}
	minV, err := parse("ssl_min_protocol_version", "PGSSLMINPROTOCOLVERSION")
	if err != nil {
		return tlsKeys{}, err
	}
	maxV, err := parse("ssl_max_protocol_version", "PGSSLMAXPROTOCOLVERSION")
	if err != nil {
		return tlsKeys{}, err
	}
	k.minVersion, k.maxVersion = minV.id, maxV.id
	// libpq's check (sslVerifyProtocolRange), with its default minimum when none is given.
	minShown, key, env := minV.name, "ssl_min_protocol_version", minV.env
	if !minV.given {
		minV.name, minShown = tlspolicy.DefaultMinProtocolVersion, tlspolicy.DefaultMinProtocolVersion+" (the default)"
		key, env = "ssl_max_protocol_version", maxV.env
	}
	from := func(v version) string {
		if v.env != "" {
			return " (from " + v.env + ")"
		}
		return ""
	}
	if !tlspolicy.ProtocolRangeValid(minV.name, maxV.name) {
		return tlsKeys{}, &ParseError{Key: key, Env: env, msg: fmt.Sprintf(
			"invalid SSL protocol version range: ssl_min_protocol_version %s%s is above ssl_max_protocol_version %s%s",
			minShown, from(minV), maxV.name, from(maxV))}
	}

	switch v, _, _ := get("sslrootcert", "PGSSLROOTCERT"); v {
	case "system":
		k.systemRoots = true
	case "":
		k.rootFile = defaultRootFile()
	default:
		k.rootFile = v
	}
	k.sslmode, _, _ = get("sslmode", "PGSSLMODE")
	// libpq sends SNI when sslsni starts with '1'; its default is "1".
	v, _, ok := get("sslsni", "PGSSLSNI")
	k.sni = !ok || strings.HasPrefix(v, "1")
	if v, _, ok := get("sslcrl", "PGSSLCRL"); ok {
		k.crlFile = v
	}
	if v, _, ok := get("sslcrldir", "PGSSLCRLDIR"); ok && v != "" {
		k.crlDirGiven = true
		for d := range strings.SplitSeq(v, string(os.PathListSeparator)) {
			if d != "" {
				k.crlDirs = append(k.crlDirs, d)
			}
		}
	}
	if k.crlFile == "" && !k.crlDirGiven {
		k.crlFile = defaultCRLFile()
	}
	if v, _, ok := get("sslkeylogfile", ""); ok {
		k.keyLogFile = v
	}
	k.client = parseClientCert(get)
	return k, nil
}

// parseClientCert reads sslcert (PGSSLCERT), sslkey (PGSSLKEY), sslpassword (no environment
// variable in libpq) and sslcertmode (PGSSLCERTMODE): the files of the client certificate, read
// at each connection (tlspolicy.ClientCert); nil under sslcertmode=disable, where libpq reads
// neither. An empty sslcert or sslkey is libpq's default, ~/.postgresql/postgresql.crt and
// ~/.postgresql/postgresql.key (fe-secure-openssl.c, initialize_SSL).
func parseClientCert(get func(key, env string) (string, source, bool)) *tlspolicy.ClientCert {
	if v, _, _ := get("sslcertmode", "PGSSLCERTMODE"); v == "disable" {
		return nil
	}
	c := &tlspolicy.ClientCert{}
	if c.CertFile, _, _ = get("sslcert", "PGSSLCERT"); c.CertFile == "" {
		c.CertFile = homeFile("postgresql.crt")
	}
	if c.KeyFile, _, _ = get("sslkey", "PGSSLKEY"); c.KeyFile == "" {
		c.KeyFile = homeFile("postgresql.key")
	}
	c.Password, _, _ = get("sslpassword", "")
	return c
}

// defaultCRLFile is libpq's default sslcrl: ~/.postgresql/root.crl (%APPDATA%\postgresql\root.crl
// on Windows); "" when there is no home directory.
// defaultRootFile is libpq's default sslrootcert: ~/.postgresql/root.crt
// (%APPDATA%\postgresql\root.crt on Windows); "" when there is no home directory.
func defaultRootFile() string { return homeFile("root.crt") }

func defaultCRLFile() string { return homeFile("root.crl") }

// homeFile is name in libpq's directory of defaults, ~/.postgresql (%APPDATA%\postgresql on
// Windows), in homeDir; "" when there is none.
func homeFile(name string) string {
	if runtime.GOOS == "windows" {
		if d := os.Getenv("APPDATA"); d != "" {
			return filepath.Join(d, "postgresql", name)
		}
		return ""
	}
	home := homeDir()
	if home == "" {
		return ""
	}
	return filepath.Join(home, ".postgresql", name)
}

// homeDir is the home directory libpq finds its default files in off Windows (fe-connect.c,
// pqGetHomeDirectory): $HOME, else the user database's entry for the user (os/user); "" when
// there is neither.
func homeDir() string {
	home := os.Getenv("HOME")
	if home == "" {
		if u, err := user.Current(); err == nil {
			home = u.HomeDir
		}
	}
	return home
}

// applyCheck applies the keys to c, a TLS configuration pgx built (pgconn.Config.TLSConfig or a
// fallback's) for host (as written in the connection string), and returns c and the server check
// it installed, whose BeforeTLS runs before each handshake (negotiation.Host.BeforeTLS); nil (no
// TLS) gives nil, nil.
//
// The server's certificate is then checked by the connector, as libpq checks it, whatever pgx
// set: crypto/tls's own verification is off (InsecureSkipVerify, no RootCAs, no
// VerifyPeerCertificate), ServerName is only the SNI, and VerifyConnection runs
// tlspolicy.ServerCheck: the chain against the root certificate file read for this connection,
// the host name under verify-full, and the CRLs by the rules internal/tlspolicy's doc states.
//
// The client certificate of sslcert and sslkey is the connector's too (pgx is given neither):
// GetClientCertificate is tlspolicy.ClientCert's, which reads the files at each handshake and
// sends the certificate whatever CAs the server lists; the clones a connect uses (the
// negotiator's, which offer ALPN "postgresql", and WithTLSConfigFunc's) keep it, and a
// GetClientCertificate that WithTLSConfigFunc sets replaces it. c is changed in place.
func (k tlsKeys) applyCheck(c *tls.Config, host string) (*tls.Config, *tlspolicy.ServerCheck) {
	if c == nil {
		return nil, nil
	}
	if k.minVersion != 0 {
		c.MinVersion = k.minVersion
	}
	if k.maxVersion != 0 {
		c.MaxVersion = k.maxVersion
	}
	if k.keyLogFile != "" {
		c.KeyLogWriter = tlspolicy.KeyLogFile(k.keyLogFile)
	}
	s := k.serverCheck(host)
	c.InsecureSkipVerify = true
	c.RootCAs = nil
	c.VerifyPeerCertificate = nil
	c.ServerName = tlspolicy.SNIName(host, k.sni)
	c.VerifyConnection = s.VerifyConnection
	if k.client != nil {
		c.GetClientCertificate = k.client.GetClientCertificate
	}
	return c, s
}

// serverCheck returns the check of host's TLS server (tlspolicy.ServerCheck).
func (k tlsKeys) serverCheck(host string) *tlspolicy.ServerCheck {
	s := &tlspolicy.ServerCheck{RootFile: k.rootFile, System: k.systemRoots, Cache: &tlspolicy.RootCache{}}
	switch k.sslmode {
	case "verify-full":
		s.Verify, s.Host = true, host
	case "verify-ca":
		s.Verify = true
	}
	if k.systemRoots { // libpq 16 forces verify-full (checkWeakSSLMode refuses less)
		s.Verify, s.Host = true, host
	}
	if !k.systemRoots && (k.crlFile != "" || k.crlDirGiven) {
		s.CRL = &crlCheck{file: k.crlFile, dirs: k.crlDirs, dirGiven: k.crlDirGiven}
	}
	return s
}

// checkWeakSSLMode refuses what libpq 16 to 18 refuse (connectOptions2): sslnegotiation=direct
// with an sslmode that allows plaintext (libpq 17), and sslrootcert=system with an sslmode
// weaker than verify-full (libpq 16). sslmodeGiven tells whether sslmode was set (in the
// connection string, a service file or PGSSLMODE): when it was not, libpq's default applies,
// verify-full with sslrootcert=system and prefer otherwise. pgx upgrades the first combination to
// require and the second to verify-full without a word.
func checkWeakSSLMode(sslmode string, sslmodeGiven bool, sslnegotiation, sslrootcert string) error {
	if !sslmodeGiven || sslmode == "" {
		sslmode = "prefer"
		if sslrootcert == "system" {
			sslmode = "verify-full"
		}
	}
	weak := sslmode == "disable" || sslmode == "allow" || sslmode == "prefer"
	switch {
	case sslnegotiation == "direct" && weak:
		return &ParseError{Key: "sslmode", msg: fmt.Sprintf(
			`weak sslmode %s may not be used with sslnegotiation=direct (use "require", "verify-ca", or "verify-full")`,
			shown(sslmode))}
	case sslrootcert == "system" && sslmode != "verify-full":
		return &ParseError{Key: "sslmode", msg: fmt.Sprintf(
			`weak sslmode %s may not be used with sslrootcert=system (use "verify-full")`, shown(sslmode))}
	}
	return nil
}

// crlCheck checks the server's chain against CRLs (see tlsKeys.apply), with the CRL files read
// through tlspolicy.ReadLocalFile; the CRL rules are internal/tlspolicy's.
type crlCheck struct {
	file     string
	dirs     []string
	dirGiven bool
}

// Check (tlspolicy.CRLChecker) checks the verified chains of the server's certificate against the CRLs.
func (k *crlCheck) Check(chains [][]*x509.Certificate, now time.Time) error {
	store, err := k.load()
	if err != nil || store == nil {
		return err
	}
	return store.Check(chains, now)
}

// load reads the CRL file. It returns nil when libpq would check no CRL: no file and no
// directory, or a file that does not exist or holds neither CRL nor certificate.
func (k *crlCheck) load() (*tlspolicy.CRLStore, error) {
	var data []byte
	if k.file != "" {
		var err error
		data, err = tlspolicy.ReadLocalFile(k.file, tlspolicy.MaxCRLFile)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("pgconnector: cannot read sslcrl%s", fileProblem(err))
		}
	} else if !k.dirGiven {
		return nil, nil
	}
	s, objects, err := tlspolicy.NewCRLStore(data, k.dirs, tlspolicy.ReadLocalFile)
	if err != nil {
		return nil, fmt.Errorf("pgconnector: sslcrl %s: %w", shownPath(k.file), err)
	}
	if k.file != "" && objects == 0 {
		return nil, nil
	}
	return s, nil
}

func shownPath(p string) string {
	if s := shown(p); s != "(value not shown)" {
		return s
	}
	return "(path not shown)"
}
