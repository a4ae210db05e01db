package connstring

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/negotiation"
)

// TestNoLibpqKeyIsSentToTheServer gives every keyword a value that parses and checks that none
// of them lands in the run-time parameters, but those libpq itself sends.
func TestNoLibpqKeyIsSentToTheServer(t *testing.T) {
	values := map[string]string{
		"host": "db.example", "hostaddr": "192.0.2.1", "port": "5433", "connect_timeout": "3",
		"sslmode": "prefer", "requiressl": "0", "gssencmode": "prefer", "gssdelegation": "0",
		"target_session_attrs": "any", "load_balance_hosts": "disable", "gsslib": "gssapi",
		"keepalives": "1", "keepalives_idle": "1", "keepalives_interval": "1", "keepalives_count": "1",
		"tcp_user_timeout": "1", "channel_binding": "prefer", "require_auth": "none", "sslcertmode": "allow",
		"sslnegotiation": "postgres", "min_protocol_version": "3.0", "max_protocol_version": "3.0",
		"ssl_min_protocol_version": "TLSv1.2", "ssl_max_protocol_version": "TLSv1.3", "sslsni": "1",
		"replication": "false", "client_encoding": "UTF8",
	}
	for _, k := range keywords {
		if k.Status == Rejected || k.Name == "service" || k.Name == "passfile" {
			continue
		}
		v, ok := values[k.Name]
		if !ok {
			v = "x"
		}
		if strings.HasPrefix(k.Name, "ssl") && v == "x" {
			v = filepath.Join(t.TempDir(), "absent")
		}
		s, err := Parse(k.Name + "='" + v + "'")
		if err != nil {
			t.Errorf("%s=%s: %v", k.Name, v, err)
			continue
		}
		if _, sent := s.Config.RuntimeParams[k.Name]; sent != sentToServer[k.Name] {
			t.Errorf("%s=%s: in the run-time parameters: %v, want %v", k.Name, v, sent, sentToServer[k.Name])
		}
	}
	s, err := Parse("host=a search_path=app,public")
	if err != nil || s.Config.RuntimeParams["search_path"] != "app,public" {
		t.Errorf("a key libpq does not know is not sent as pgx sends it: %v %v", s.Config.RuntimeParams, err)
	}
}

func TestKeywordValues(t *testing.T) {
	unsetEnv(t, "PGREQUIRESSL", "PGSSLMODE", "PGHOST", "PGHOSTADDR")
	for _, tt := range []struct {
		dsn   string
		check func(*Settings) bool
	}{
		{"host=db hostaddr=192.0.2.7", func(s *Settings) bool {
			return s.Hosts[0].Host == "db" && s.Hosts[0].HostAddr == "192.0.2.7"
		}},
		{"hostaddr=192.0.2.7,2001:db8::1 port=5432,5433", func(s *Settings) bool {
			return len(s.Hosts) == 2 && s.Hosts[0].Host == "192.0.2.7" && s.Hosts[1].HostAddr == "2001:db8::1" && s.Hosts[1].Port == 5433
		}},
		{"postgres:///app?hostaddr=192.0.2.7", func(s *Settings) bool {
			return s.Hosts[0].Host == "192.0.2.7" && s.Hosts[0].HostAddr == "192.0.2.7"
		}},
		{"host=a,b hostaddr=,192.0.2.7", func(s *Settings) bool {
			return s.Hosts[0].HostAddr == "" && s.Hosts[1].HostAddr == "192.0.2.7"
		}},
		{"host=a requiressl=1", func(s *Settings) bool { return s.Hosts[0].SSLMode == negotiation.SSLModeRequire }},
		{"host=a requiressl=0", func(s *Settings) bool { return s.Hosts[0].SSLMode == negotiation.SSLModePrefer }},
		{"host=a requiressl=1 sslmode=disable", func(s *Settings) bool { return s.Hosts[0].SSLMode == negotiation.SSLModeDisable }},
		{"host=a sslmode=disable requiressl=1", func(s *Settings) bool { return s.Hosts[0].SSLMode == negotiation.SSLModeRequire }},
		{"postgres://a/db?requiressl=1", func(s *Settings) bool { return s.Hosts[0].SSLMode == negotiation.SSLModeRequire }},
		{"host=a keepalives=0", func(s *Settings) bool { return s.Keepalives != nil && s.Keepalives.Off }},
		{"host=a keepalives_idle=' 30 ' keepalives_interval=5 keepalives_count=4 tcp_user_timeout=2500", func(s *Settings) bool {
			k := s.Keepalives
			return k != nil && !k.Off && k.Idle == 30*time.Second && k.Interval == 5*time.Second && k.Count == 4 && k.UserTimeout == 2500*time.Millisecond
		}},
		{"host=a keepalives_idle=-1", func(s *Settings) bool { return s.Keepalives != nil && s.Keepalives.Idle == 0 }},
		{"host=a oauth_issuer=https://issuer.example oauth_client_id=app oauth_client_secret=s3 oauth_scope='openid db'", func(s *Settings) bool {
			return s.OAuth == OAuth{Issuer: "https://issuer.example", ClientID: "app", ClientSecret: "s3", Scope: "openid db"}
		}},
		{"postgres://a/db?oauth_issuer=https%3A%2F%2Fissuer.example%2F.well-known%2Fopenid-configuration&oauth_scope=", func(s *Settings) bool {
			return s.OAuth == OAuth{Issuer: "https://issuer.example/.well-known/openid-configuration"}
		}},
		{"host=a", func(s *Settings) bool { return s.Keepalives == nil && !s.LoadBalanceHosts && s.RequirePeer == "" }},
		{"host=a load_balance_hosts=random", func(s *Settings) bool { return s.LoadBalanceHosts }},
		{"host=/tmp requirepeer=postgres", func(s *Settings) bool { return s.RequirePeer == "postgres" }},
		{"host=a target_session_attrs=prefer-standby", func(s *Settings) bool { return s.TargetSessionAttrs == negotiation.TargetPreferStandby }},
		{"host=a target_session_attrs=read-only", func(s *Settings) bool { return s.TargetSessionAttrs == negotiation.TargetReadOnly }},
		{"host=a client_encoding=auto", func(s *Settings) bool { return s.Config.RuntimeParams["client_encoding"] == "UTF8" }},
		{"host=a fallback_application_name=f", func(s *Settings) bool { return s.Config.RuntimeParams["application_name"] == "f" }},
		{"host=a application_name=x fallback_application_name=f", func(s *Settings) bool { return s.Config.RuntimeParams["application_name"] == "x" }},
		{"host=a sslcert=/nonexistent/client.crt sslkey=/nonexistent/client.key sslmode=require", func(s *Settings) bool {
			// No certificate file: nothing read before the handshake, no certificate sent.
			tc := s.Hosts[0].TLSConfig
			if tc == nil || len(tc.Certificates) != 0 || tc.GetClientCertificate == nil || s.Hosts[0].BeforeTLS() != nil {
				return false
			}
			cert, err := tc.GetClientCertificate(nil)
			return err == nil && len(cert.Certificate) == 0
		}},
	} {
		s, err := Parse(tt.dsn)
		if err != nil {
			t.Errorf("%s: %v", tt.dsn, err)
			continue
		}
		if !tt.check(s) {
			t.Errorf("%s: hosts %+v, settings %+v", tt.dsn, s.Hosts, s)
		}
	}
}

func TestKeywordErrors(t *testing.T) {
	secret := "s3cret-value-not-to-show"
	for _, tt := range []struct {
		dsn, key, want string
	}{
		{"host=a,b hostaddr=192.0.2.1", "hostaddr", "could not match 2 host names to 1 hostaddr value"},
		{"host=a hostaddr=db.example", "hostaddr", "numeric"},
		{"host=a keepalives=yes", "keepalives", "an integer"},
		{"host=a tcp_user_timeout=1s", "tcp_user_timeout", "an integer"},
		{"host=a gsslib=sspi", "gsslib", "only available on Windows"},
		{"host=a gsslib=SSPI", "gsslib", "only available on Windows"},
		{"host=/tmp hostaddr=127.0.0.1", "hostaddr", "Unix-socket directory"},
		{"host=a load_balance_hosts=round-robin", "load_balance_hosts", "disable, random"},
		{"host=a scram_client_key=" + secret, "scram_client_key", "not supported"},
	} {
		_, err := Parse(tt.dsn + " password=" + secret)
		pe, ok := err.(*ParseError)
		if !ok {
			t.Errorf("%s: error %v (%T), want a *ParseError", tt.dsn, err, err)
			continue
		}
		if pe.Key != tt.key || !strings.Contains(pe.Error(), tt.want) {
			t.Errorf("%s: key %q, error %q; want key %q and %q", tt.dsn, pe.Key, pe, tt.key, tt.want)
		}
		if strings.Contains(pe.Error(), secret) {
			t.Errorf("%s: the error shows a secret: %s", tt.dsn, pe)
		}
	}
	t.Setenv("PGLOADBALANCEHOSTS", "often")
	if _, err := Parse("host=a"); err == nil || err.(*ParseError).Env != "PGLOADBALANCEHOSTS" {
		t.Errorf("PGLOADBALANCEHOSTS=often: %v", err)
	}
}

// TestDocsKeywordTable checks the keyword table of docs/connection-strings.md against Keywords:
// one row per keyword with its status and version.
func TestDocsKeywordTable(t *testing.T) {
	const page = "../../docs/connection-strings.md"
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| ([0-9]+|≤15) \\| ([a-z ,]+) \\|")
	rows := map[string][2]string{}
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		rows[m[1]] = [2]string{m[2], m[3]}
	}
	var names []string
	for _, k := range keywords {
		names = append(names, k.Name)
		r, ok := rows[k.Name]
		since := k.Since
		if since == "15" {
			since = "≤15"
		}
		switch {
		case !ok:
			t.Errorf("%s: no row for %s", page, k.Name)
		case r[0] != since || r[1] != k.Status.String():
			t.Errorf("%s: %s is %s, since %s; Keywords says %s, since %s", page, k.Name, r[1], r[0], k.Status, since)
		}
	}
	for n := range rows {
		if !slices.Contains(names, n) {
			t.Errorf("%s: row %s is not a libpq keyword", page, n)
		}
	}
}

// TestKeywordOrigins: the keys that change what pgx parses follow libpq's precedence (the
// string, then the service file, then the environment) and survive a trailing backslash.
func TestKeywordOrigins(t *testing.T) {
	dir := t.TempDir()
	services := filepath.Join(dir, "pg_service.conf")
	if err := os.WriteFile(services, []byte("[req]\nrequiressl=1\n[full]\nsslmode=verify-full\n[addr]\nhostaddr=192.0.2.9\n[require]\nsslmode=require\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PGSERVICEFILE", services)
	unsetEnv(t, "PGREQUIRESSL", "PGSSLMODE", "PGHOST", "PGHOSTADDR", "PGSERVICE", "PGSSLROOTCERT")
	ok := func(dsn string, check func(*Settings) bool, env ...string) {
		t.Helper()
		for i := 0; i+1 < len(env); i += 2 {
			t.Setenv(env[i], env[i+1])
			defer os.Unsetenv(env[i])
		}
		s, err := Parse(dsn)
		if err != nil {
			t.Errorf("%s %v: %v", dsn, env, err)
			return
		}
		if !check(s) {
			t.Errorf("%s %v: hosts %+v", dsn, env, s.Hosts)
		}
	}
	ok("service=full host=db", func(s *Settings) bool { return s.Hosts[0].SSLMode == negotiation.SSLModeVerifyFull }, "PGREQUIRESSL", "1")
	ok("host=db", func(s *Settings) bool { return s.Hosts[0].SSLMode == negotiation.SSLModeRequire }, "PGREQUIRESSL", "1")
	ok("host=db", func(s *Settings) bool { return s.Hosts[0].SSLMode == negotiation.SSLModeDisable }, "PGREQUIRESSL", "1", "PGSSLMODE", "disable")
	ok("service=addr", func(s *Settings) bool { return s.Hosts[0].Host == "192.0.2.9" && s.Hosts[0].HostAddr == "192.0.2.9" })
	ok("service=addr host=db", func(s *Settings) bool { return s.Hosts[0].Host == "db" && s.Hosts[0].HostAddr == "192.0.2.9" })
	ok(`host=db requiressl=1 password=ab\`, func(s *Settings) bool {
		return s.Hosts[0].SSLMode == negotiation.SSLModeRequire && s.Config.Password == "ab"
	})
	ok(`hostaddr=192.0.2.9 password=ab\`, func(s *Settings) bool { return s.Hosts[0].HostAddr == "192.0.2.9" && s.Config.Password == "ab" })
	ok("service=require host=db sslnegotiation=direct", func(s *Settings) bool { return s.Hosts[0].SSLMode == negotiation.SSLModeRequire })

	for _, tt := range []struct{ dsn, key, want string }{
		{"service=req host=db", "requiressl", "service file"},
		{"host=db requiressl=0 sslrootcert=system", "sslmode", "weak sslmode"},
		{"host=db sslnegotiation=direct", "sslmode", "weak sslmode"},
	} {
		_, err := Parse(tt.dsn)
		pe, isPE := err.(*ParseError)
		if !isPE || pe.Key != tt.key || !strings.Contains(pe.Error(), tt.want) {
			t.Errorf("%s: %v, want a ParseError for %s saying %q", tt.dsn, err, tt.key, tt.want)
		}
	}
}
