package connstring

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pgconnector/pgconnector/internal/testpki"
	"github.com/pgconnector/pgconnector/negotiation"
)

func TestParseSettingsHosts(t *testing.T) {
	for _, tt := range []struct {
		dsn  string
		want []string // host:port/sslmode
	}{
		{"host=a", []string{"a:5432/prefer"}},
		{"host=a sslmode=disable", []string{"a:5432/disable"}},
		{"host=a sslmode=allow", []string{"a:5432/allow"}},
		{"host=a sslmode=require", []string{"a:5432/require"}},
		{"host=a sslmode=verify-ca", []string{"a:5432/verify-ca"}},
		{"host=a sslmode=verify-full", []string{"a:5432/verify-full"}},
		{"host=a,b port=1,2", []string{"a:1/prefer", "b:2/prefer"}},
		{"host=a,a sslmode=disable", []string{"a:5432/disable", "a:5432/disable"}},
		{"host=a,a sslmode=require", []string{"a:5432/require", "a:5432/require"}},
		{"host=a,a", []string{"a:5432/prefer", "a:5432/prefer"}},
		{"postgres://u@a:7,b:8/db?sslmode=allow", []string{"a:7/allow", "b:8/allow"}},
		{"host=/tmp,a sslmode=require", []string{"/tmp:5432/disable", "a:5432/require"}},
		// An empty port after ":" is the default, as in libpq (fe-connect.c: an empty port is
		// DEF_PGPORT), not an error.
		{"postgres://u:pw@a:/db", []string{"a:5432/prefer"}},
		{"postgres://a:,b:5433/db", []string{"a:5432/prefer", "b:5433/prefer"}},
	} {
		t.Run(tt.dsn, func(t *testing.T) {
			unsetEnv(t, "PGSSLMODE")
			s, err := Parse(tt.dsn)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range s.Hosts {
				got = append(got, h.Host+":"+strconv.Itoa(int(h.Port))+"/"+h.SSLMode.String())
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("hosts = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseSettingsLibpqKeys(t *testing.T) {
	unsetEnv(t, "PGGSSENCMODE")
	s, err := Parse("host=a gssencmode=disable gssdelegation=1 application_name=x")
	if err != nil {
		t.Fatal(err)
	}
	if s.GSSEncMode != negotiation.GSSEncModeDisable || !s.GSSDelegation {
		t.Errorf("gssencmode %v, gssdelegation %v", s.GSSEncMode, s.GSSDelegation)
	}
	for _, k := range []string{"gssencmode", "gssdelegation"} {
		if _, ok := s.Config.RuntimeParams[k]; ok {
			t.Errorf("%s would be sent to the server", k)
		}
	}
	if s.Config.RuntimeParams["application_name"] != "x" {
		t.Error("application_name lost")
	}

	t.Setenv("PGGSSENCMODE", "require")
	if s, err = Parse("host=a"); err != nil || s.GSSEncMode != negotiation.GSSEncModeRequire {
		t.Errorf("PGGSSENCMODE=require: %v, %v", s.GSSEncMode, err)
	}
	if s, err = Parse("host=a gssencmode=disable"); err != nil || s.GSSEncMode != negotiation.GSSEncModeDisable {
		t.Errorf("the DSN must win over PGGSSENCMODE: %v, %v", s.GSSEncMode, err)
	}
	t.Setenv("PGGSSENCMODE", "bogus")
	if _, err = Parse("host=a"); err == nil || !strings.Contains(err.Error(), "gssencmode") {
		t.Errorf("bad PGGSSENCMODE: %v", err)
	}
}

// pgEnv lists the environment variables pgx and the connector read; the error tests clear them.
var pgEnv = []string{"PGHOST", "PGPORT", "PGSSLMODE", "PGGSSENCMODE", "PGSSLNEGOTIATION", "PGSERVICE", "PGSERVICEFILE",
	"PGTARGETSESSIONATTRS", "PGCHANNELBINDING", "PGREQUIREAUTH", "PGCONNECT_TIMEOUT", "PGSSLCERTMODE",
	"PGSSLROOTCERT", "PGSSLCERT", "PGSSLKEY", "PGSSLPASSWORD", "PGMINPROTOCOLVERSION", "PGMAXPROTOCOLVERSION", "PGSYSCONFDIR"}

func clearPGEnv(t *testing.T) {
	t.Helper()
	unsetEnv(t, pgEnv...)
}

// unsetEnv unsets the environment variables keys until the test ends: set to "", each is a
// value, as in libpq (an empty PGSSLMODE is refused).
func unsetEnv(t *testing.T, keys ...string) {
	t.Helper()
	for _, k := range keys {
		t.Setenv(k, "") // restored when the test ends
		os.Unsetenv(k)
	}
}

// Every error of ParseSettings is a *ParseError naming the key; it never holds a secret. One case
// per message of pgx that the connector translates (a pgx that changes one fails here), and per
// key the connector parses itself.
func TestParseErrors(t *testing.T) {
	const secret = "s3cr3t-pw"
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	services := write("pg_service.conf", "[known]\nhost=a\n[bad]\nhost=a\nsslmode=sometimes\n")
	badServices := write("bad_service.conf", "host=a\n")
	noEquals := write("no_equals.conf", "[known]\nhost=a\n"+secret+"\n")
	unknownKey := write("unknown_key.conf", "[known]\nsslmdoe=disable\n")
	nested := write("nested.conf", "[known]\nservice=other\n")

	for _, tt := range []struct {
		name, dsn string
		env       map[string]string
		key       string
		want      []string // substrings of the message
	}{
		// Keys the connector parses itself.
		{"gssencmode unknown", "host=a gssencmode=always", nil, "gssencmode", []string{`"always"`, "disable, prefer, require"}},
		{"gssencmode empty before the password", "host=a gssencmode= password=" + secret, nil, "gssencmode", []string{"value not shown"}},
		{"gssencmode empty before a quoted password", "host=a gssencmode= password='" + secret + "'", nil, "gssencmode", []string{"value not shown"}},
		{"gssencmode escaped space", `host=a gssencmode=\ password=` + secret, nil, "gssencmode", []string{"value not shown"}},
		{"gssencmode in a URL", "postgres://u:" + secret + "@a/db?gssencmode=a%20b", nil, "gssencmode", []string{"value not shown"}},
		{"PGGSSENCMODE", "host=a", map[string]string{"PGGSSENCMODE": "bogus"}, "gssencmode", []string{`"bogus"`, "PGGSSENCMODE"}},
		{"sslnegotiation empty before the password", "host=a sslnegotiation= password=" + secret, nil, "sslnegotiation", []string{"postgres, direct"}},
		{"sslnegotiation long", "host=a sslnegotiation=" + strings.Repeat("x", 65), nil, "sslnegotiation", []string{"value not shown"}},
		// Keys pgx checks.
		{"sslmode unknown", "host=a sslmode=sometimes password=" + secret, nil, "sslmode", []string{"disable, allow, prefer, require, verify-ca, verify-full"}},
		{"sslmode empty before the password", "host=a sslmode= password=" + secret, nil, "sslmode", nil},
		{"PGSSLMODE", "host=a", map[string]string{"PGSSLMODE": "on"}, "sslmode", []string{"verify-full"}},
		// pgx checks sslmode only for TCP hosts; libpq whatever the host.
		{"sslmode, a Unix socket", "host=/tmp sslmode=on", nil, "sslmode", []string{`"on"`, "verify-full"}},
		{"sslmode, no host", "sslmode=on", nil, "sslmode", []string{`"on"`, "verify-full"}},
		{"target_session_attrs", "host=a target_session_attrs=writable", nil, "target_session_attrs", []string{`"writable"`, "prefer-standby"}},
		{"target_session_attrs empty before the password", "host=a target_session_attrs= password=" + secret, nil, "target_session_attrs", []string{"value not shown"}},
		{"channel_binding", "host=a channel_binding= password=" + secret, nil, "channel_binding", []string{"disable, prefer, require"}},
		{"min_protocol_version", "host=a min_protocol_version=4", nil, "min_protocol_version", []string{`"4"`, "3.0, 3.2, latest"}},
		{"max_protocol_version", "host=a max_protocol_version= password=" + secret, nil, "max_protocol_version", []string{"value not shown"}},
		{"min above max", "host=a min_protocol_version=latest max_protocol_version=3.0", nil, "min_protocol_version", []string{"greater"}},
		{"require_auth", "host=a require_auth= password=" + secret, nil, "require_auth", []string{"invalid require_auth value: (value not shown)", "scram-sha-256"}},
		// libpq's reasons (fe-connect.c, pqConnectOptions2).
		{"require_auth unknown", "host=a require_auth=none,abcdefg", nil, "require_auth", []string{`invalid require_auth value: "abcdefg"`}},
		{"require_auth mixed", "host=a require_auth=scram-sha-256,!md5", nil, "require_auth", []string{`negative require_auth method "!md5" cannot be mixed with non-negative methods`}},
		{"require_auth mixed, negative first", "host=a require_auth=!password,!none,scram-sha-256", nil, "require_auth", []string{`require_auth method "scram-sha-256" cannot be mixed with negative methods`}},
		{"require_auth twice", "host=a require_auth=!none,!md5,!none", nil, "require_auth", []string{`require_auth method "!none" is specified more than once`}},
		{"PGREQUIREAUTH twice", "host=a", map[string]string{"PGREQUIREAUTH": "md5,md5"}, "require_auth", []string{`require_auth method "md5" is specified more than once (from PGREQUIREAUTH)`}},
		{"port", "host=a port=5432x password=" + secret, nil, "port", []string{`"5432x"`, "1 to 65535"}},
		{"PGPORT", "host=a password=" + secret, map[string]string{"PGPORT": "x"}, "port", []string{`"x"`, "PGPORT"}},
		{"port in a URL", "postgres://u:" + secret + "@a:x/db", nil, "port", []string{`invalid port "x"`, "1 to 65535"}},
		{"port in a URL, one of two", "postgres://u:" + secret + "@a:5432,b:99999/db", nil, "port", []string{`invalid port "5432,99999"`}},
		{"port in a URL, after IPv6", "postgres://u:" + secret + "@[::1]:x,a/db", nil, "port", []string{`invalid port "x,"`}},
		{"port in a URL's query", "postgres://u:" + secret + "@a:5432/db?port=x", nil, "port", []string{`invalid port "x"`}},
		{"port in a URL, percent-encoded", "postgres://u:" + secret + "@a:%41/db", nil, "port", []string{`invalid port "A"`}},
		{"PGPORT under a URL", "postgres://u:" + secret + "@a/db", map[string]string{"PGPORT": "x"}, "port", []string{`"x"`, "PGPORT"}},
		// A password with an unencoded "/": libpq and pgx read "u" as the host and the password
		// as its port.
		{"port in a URL that may be a password", "postgres://u:" + secret + "/x@a/db", nil, "port", []string{"not shown", "percent-encode"}},
		{"connect_timeout from the string, not PGCONNECT_TIMEOUT", "host=a connect_timeout=soon", map[string]string{"PGCONNECT_TIMEOUT": "5"}, "connect_timeout", []string{`"soon"`}},
		{"sslmode in a URL", "postgres://u:" + secret + "@a/db?sslmode=maybe", map[string]string{"PGSSLMODE": "require"}, "sslmode", []string{`"maybe"`}},
		{"sslmode from a service file", "service=bad servicefile=" + services, map[string]string{"PGSSLMODE": "require"}, "sslmode", []string{"must be one of"}},
		{"port count, one host", "host=a port=1,2", nil, "port", []string{"2 ports for 1 host:"}},
		{"port count", "host=a,b port=1,2,3", nil, "port", []string{"3 ports for 2 hosts"}},
		{"connect_timeout", "host=a connect_timeout= password=" + secret, nil, "connect_timeout", []string{"seconds"}},
		{"sslcertmode", "host=a sslcertmode=sometimes", nil, "sslcertmode", []string{"disable, allow, require"}},
		{"service unknown", "service=nosuch servicefile=" + services + " password=" + secret, nil, "service",
			[]string{`definition of service "nosuch" not found in ` + strconv.Quote(services)}},
		{"service file missing", "service=known servicefile=" + filepath.Join(dir, "missing.conf") + " password=" + secret, nil, "service",
			[]string{"service file " + strconv.Quote(filepath.Join(dir, "missing.conf")) + ` not found (for service "known": no such file or directory)`}},
		// libpq reads no line outside the service's section: this one is not looked at.
		{"a line outside any section", "service=known servicefile=" + badServices, nil, "service",
			[]string{`definition of service "known" not found in ` + strconv.Quote(badServices)}},
		{"a line without = in the section", "service=known servicefile=" + noEquals + " password=" + secret, nil, "service",
			[]string{"syntax error in service file " + strconv.Quote(noEquals) + `, line 3: no "="`}},
		{"an unknown key in the section", "service=known servicefile=" + unknownKey, nil, "service",
			[]string{"syntax error in service file " + strconv.Quote(unknownKey) + `, line 2: invalid connection option "sslmdoe"`}},
		{"a nested service", "service=known servicefile=" + nested, nil, "service",
			[]string{"nested service specifications not supported in service file " + strconv.Quote(nested) + ", line 2"}},
		{"service from PGSERVICE, file missing", "host=a", map[string]string{"PGSERVICE": "known", "PGSERVICEFILE": filepath.Join(dir, "missing.conf")}, "service",
			[]string{`for service "known" (from PGSERVICE): no such file or directory`}},
		// Malformed strings: no key to blame, nothing quoted.
		{"unclosed quote", "host=a password='" + secret, nil, "password", []string{"quoted value of password is not closed"}},
		{"unclosed quote after escapes", `host='a b' options='-c x=\'y\'' application_name='` + secret + `\'`, nil, "application_name", []string{"not closed"}},
		{"unclosed quote of no key name", "host=a " + secret + "='x", nil, "", []string{"not closed"}},
		{"word without =", "host=a " + secret + " user=u", nil, "", []string{`without "="`}},
		{"NUL byte", "host=a password=" + secret + "\x00", nil, "", []string{"NUL"}},
		{"URL bad percent-encoding", "postgres://u:" + secret + "%zz@a/db", nil, "password", []string{"percent-encoding"}},
		{"URL NUL", "postgres://u:" + secret + "%00@a/db", nil, "password", []string{"NUL"}},
		{"URL bad percent-encoding in a parameter", "postgres://u:" + secret + "@a/db?application_name=%zz", nil, "application_name", []string{"percent-encoding"}},
		{"URL spaces inside the password", "postgres://u:" + secret + " x@a/db", nil, "password", []string{"white space inside"}},
		{"URL bad percent-encoding in a key", "postgres://u:" + secret + "@a/db?application%zzname=a", nil, "", []string{"percent-encoding"}},
		{"URL IPv6", "postgres://u:" + secret + "@[::1/db", nil, "host", []string{"IPv6"}},
		{"URL character after host", "postgres://u:" + secret + "@[::1]x/db", nil, "host", []string{"after a host"}},
		{"URL query without =", "postgres://u:" + secret + "@a/db?sslmode", nil, "", []string{`without "="`}},
		{"URL query with two =", "postgres://u:" + secret + "@a/db?options=a=b", nil, "", []string{`more than one "="`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clearPGEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			_, err := Parse(tt.dsn)
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T) is not a *ParseError", err, err)
			}
			if pe.Key != tt.key {
				t.Errorf("Key %q, want %q (%v)", pe.Key, tt.key, err)
			}
			msg := err.Error()
			t.Log(msg)
			for _, w := range append(tt.want, tt.key) {
				if !strings.Contains(msg, w) {
					t.Errorf("%q does not contain %q", msg, w)
				}
			}
			for _, leak := range []string{secret, "cannot parse"} {
				if strings.Contains(msg, leak) {
					t.Errorf("%q contains %q", msg, leak)
				}
			}
			if (pe.Env != "") != strings.Contains(msg, "(from "+pe.Env+")") {
				t.Errorf("Env %q, message %q", pe.Env, msg)
			}
			if !strings.HasPrefix(msg, "pgconnector: ") {
				t.Errorf("%q does not start with pgconnector: ", msg)
			}
		})
	}
}

// sslcert, sslkey and sslpassword are read at each connection, before the ClientHello, as libpq
// reads them (tlspolicy.ClientCert): Parse accepts what only a connection can tell (a key
// missing, not a key, of another certificate, encrypted without or with a wrong sslpassword),
// and every host's BeforeTLS refuses it with libpq's message, which holds no password. An empty
// sslkey is libpq's default key file, not an error; pgx gets neither file.
func TestClientCertKeysAtConnect(t *testing.T) {
	clearPGEnv(t)
	const secret = "s3cr3t-pw"
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notPEM := write("not.pem", "not a certificate\n")
	certPEM, keyPEM, encKeyPEM := testCertAndKeys(t, secret)
	cert := write("client.crt", certPEM)
	_, otherKeyPEM, _ := testCertAndKeys(t, secret)
	key := write("client.key", keyPEM)
	wrongKey := write("other.key", otherKeyPEM)
	encKey := write("enc.key", encKeyPEM)
	defaultKey := filepath.Join(dir, ".postgresql", "postgresql.key")
	for _, tc := range []struct{ name, dsn, want string }{
		{"sslkey empty: the default key file", "host=a,b sslcert=" + cert + " sslkey=''", `certificate present, but not private key file "` + defaultKey + `"`},
		{"sslkey missing", "host=a,b sslcert=" + cert + " sslkey=" + filepath.Join(dir, "missing.key"), "certificate present, but not private key file"},
		{"sslkey not a key", "host=a,b sslcert=" + cert + " sslkey=" + notPEM, `could not load private key file "` + notPEM + `": no PEM private key found`},
		{"sslkey of another certificate", "host=a,b sslcert=" + cert + " sslkey=" + wrongKey, "certificate does not match private key file"},
		{"sslkey encrypted without sslpassword", "host=a,b sslcert=" + cert + " sslkey=" + encKey, "the key is encrypted and sslpassword is empty"},
		{"sslkey encrypted, wrong sslpassword", "host=a,b sslcert=" + cert + " sslkey=" + encKey + " sslpassword=not-" + secret, "bad decrypt"},
		{"sslcert not a certificate", "host=a,b sslcert=" + notPEM + " sslkey=" + key, `could not read certificate file "` + notPEM + `": no PEM certificate found`},
		{"right sslpassword", "host=a,b sslcert=" + cert + " sslkey=" + encKey + " sslpassword=" + secret, ""},
		{"no sslcert file: sslkey unread", "host=a,b sslcert=" + filepath.Join(dir, "none.crt") + " sslkey=" + notPEM, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(tc.dsn + " sslmode=require")
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if pgx := s.Config.TLSConfig; pgx == nil || pgx.GetClientCertificate == nil || pgx.Certificates != nil {
				t.Fatal("the host's TLS configuration has no GetClientCertificate of the connector's")
			}
			for i, h := range s.Hosts {
				err := h.BeforeTLS()
				if tc.want == "" {
					if err != nil {
						t.Errorf("host %d: %v", i, err)
					}
					continue
				}
				var tr *negotiation.TLSRefusedError
				if !errors.As(err, &tr) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("host %d: %v, want a TLSRefusedError with %q", i, err, tc.want)
				}
				if err != nil && strings.Contains(err.Error(), secret) {
					t.Errorf("%q holds the password", err)
				}
			}
		})
	}
	// sslcertmode=disable: nothing read, nothing sent.
	s, err := Parse("host=a sslmode=require sslcertmode=disable sslcert=" + cert + " sslkey=" + notPEM)
	if err != nil || s.Hosts[0].BeforeTLS() != nil || ClientCertCheck(s) != nil {
		t.Errorf("sslcertmode=disable: %v", err)
	}
}

// testCertAndKeys makes a self-signed certificate and its key as PEM, and the key encrypted with
// password (legacy PEM encryption, which pgx reads).
func testCertAndKeys(t *testing.T, password string) (cert, key, encKey string) {
	t.Helper()
	priv := testpki.NewKey(t)
	c := testpki.Issue(t, &x509.Certificate{}, nil, priv)
	keyDER, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1019 pgx reads legacy encrypted PEM keys; this is how one is made.
	enc, err := x509.EncryptPEMBlock(rand.Reader, "EC PRIVATE KEY", keyDER, []byte(password), x509.PEMCipherAES256) //nolint:staticcheck
	if err != nil {
		t.Fatal(err)
	}
	return string(testpki.PEMCert(c.Cert)),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})),
		string(pem.EncodeToMemory(enc))
}

// Connection-string handling never panics; every error is a *ParseError that holds neither the
// password nor pgx's text. The failing inputs found so far are in testdata/fuzz/FuzzParseSettings.
func FuzzParseSettings(f *testing.F) {
	for _, s := range []string{
		"host=a user=u password=pw gssencmode=prefer",
		"postgres://u:pw@a:5432,b/db?sslmode=require&gssencmode=require",
		"host=a,b port=1,2 gssdelegation=1 password='p w'",
		"host=/tmp sslmode=verify-full gssencmode=disable",
		"postgres://u:pw@[::1]:x/db",
		"host=a password=pw sslmode=allow target_session_attrs=read-write",
		// A key left empty takes the next word, here the password, as its value: one seed per key
		// whose value a message may show.
		"host=a gssencmode=",
		"host=a gssdelegation=",
		"host=a sslnegotiation=",
		"host=a sslmode=",
		"host=a target_session_attrs=",
		"host=a channel_binding=",
		"host=a min_protocol_version=",
		"host=a max_protocol_version=",
		"host=a require_auth=",
		"host=a sslcertmode=",
		"host=a connect_timeout=",
		"host=a port=",
		"host=a sslrootcert=",
		"host=a servicefile=/nonexistent service=",
		"host=a gssencmode=\\",
		"a/db?gssencmode=",
		"host=a hostaddr=",
		"hostaddr=",
		"host=a,b hostaddr=1.2.3.4,",
		"postgres:///db?hostaddr=1.2.3.4&requiressl=1",
		"host=a requiressl=1 sslmode=disable",
		"host=a keepalives=",
		"host=a keepalives_idle=",
		"host=a tcp_user_timeout=",
		"host=a gsslib=",
		"host=a load_balance_hosts=",
		"host=a requirepeer= client_encoding=auto fallback_application_name=x",
		"host=a scram_client_key=",
		"host=a oauth_client_secret=",
		"host=a ssl_min_protocol_version=",
		"host=a ssl_max_protocol_version=",
		"host=a sslcert=/nonexistent sslkey=",
		"postgres://u:pa?ss@a/db?sslmode=verify-full",
		"postgres://a/db?ssl%6Dode=require&sslrootcert=/x+y&",
		"postgres://a/db?",
		"host=a search_path=x myapp.tenant=1 sslmdoe=require",
		// Empty values: refused as libpq refuses them (empty.go), or taken.
		"host=a sslmode='' requiressl=1 application_name='' options=''",
		"postgres://a/db?gssencmode=&oauth_scope=&replication=",
	} {
		f.Add(s, "s3cr3t")
	}
	f.Fuzz(func(t *testing.T, dsn, password string) {
		// The password must be one the string cannot hold elsewhere (a value the user wrote is
		// not a secret): else one derived from the input.
		if len(password) < 6 || strings.ContainsAny(password, "'\\ =&%@:/?#[]") || holds(dsn, password) {
			sum := sha256.Sum256([]byte(dsn + "\x00" + password))
			password = "pw" + hex.EncodeToString(sum[:10])
		}
		for _, d := range []string{dsn + " password=" + password, "postgres://u:" + password + "@" + dsn} {
			s, err := Parse(d)
			if err != nil {
				var pe *ParseError
				if !errors.As(err, &pe) {
					t.Fatalf("error %v (%T) is not a *ParseError", err, err)
				}
				if strings.Contains(err.Error(), password) {
					t.Fatalf("error %q contains the password", err)
				}
				if strings.Contains(err.Error(), "cannot parse") {
					t.Fatalf("error %q holds pgx's message", err)
				}
				continue
			}
			if len(s.Hosts) == 0 {
				t.Fatal("no host and no error")
			}
			// pgx's configuration is built from the connector's reading: they agree.
			v, err := read(d)
			if err != nil {
				t.Fatalf("Parse succeeded, read failed: %v", err)
			}
			for key, got := range map[string]string{"password": s.Config.Password, "user": s.Config.User, "dbname": s.Config.Database} {
				if src, ok := v.inString(key); ok && src.value != "" && src.value != got { // "": pgx takes its default
					t.Fatalf("%s read as %q, pgx has %q", key, src.value, got)
				}
			}
			for _, h := range s.Hosts {
				if h.SSLMode == 0 {
					t.Fatalf("host %q has no sslmode", h.Host)
				}
			}
			for _, k := range keywords {
				if _, ok := s.Config.RuntimeParams[k.Name]; ok && !sentToServer[k.Name] {
					t.Fatalf("%s left in the run-time parameters", k.Name)
				}
			}
		}
	})
}

// holds reports whether s holds sub as written or with its valid %XX escapes decoded.
func holds(s, sub string) bool {
	if strings.Contains(s, sub) {
		return true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return strings.Contains(b.String(), sub)
}
