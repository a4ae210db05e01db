package connstring

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgconnector/pgconnector/negotiation"
)

// A URL is read as libpq reads it (fe-connect.c, conninfo_uri_parse_options), and pgx builds its
// configuration from that reading: the plan (the hosts' sslmode), the checks (gssencmode,
// sslrootcert) and pgx's fields agree. Each case is one that the earlier reading (the query cut at
// the first "?", "+" a space, keys not decoded) got wrong.
func TestURLReadAsLibpq(t *testing.T) {
	clearPGEnv(t)
	t.Setenv("HOME", t.TempDir())
	dir := t.TempDir()
	plusFile := filepath.Join(dir, "my+ca.pem")
	for _, tt := range []struct {
		name, dsn string
		check     func(*Settings) string // "" when right
	}{
		{"? in the password, no query", "postgres://u:pa?ss@h/app", func(s *Settings) string {
			if s.Config.Password != "pa?ss" || s.Config.Database != "app" || s.Config.Host != "h" {
				return "password " + s.Config.Password + ", database " + s.Config.Database + ", host " + s.Config.Host
			}
			return ""
		}},
		{"? in the password, sslmode first", "postgres://u:pa?ss@h/app?sslmode=verify-full&sslrootcert=" + plusFile, func(s *Settings) string {
			if s.Hosts[0].SSLMode != negotiation.SSLModeVerifyFull || TLSCheck(s, 0).Host != "h" {
				return "sslmode " + s.Hosts[0].SSLMode.String() + ", name checked " + TLSCheck(s, 0).Host
			}
			return ""
		}},
		{"? in the password, gssencmode first", "postgres://u:pa?ss@h/app?gssencmode=require", func(s *Settings) string {
			if s.GSSEncMode != negotiation.GSSEncModeRequire {
				return "gssencmode " + s.GSSEncMode.String()
			}
			return ""
		}},
		{"& and = in the password", "postgres://u:a&b=c@h/app?sslmode=require", func(s *Settings) string {
			if s.Config.Password != "a&b=c" || s.Hosts[0].SSLMode != negotiation.SSLModeRequire {
				return "password or sslmode wrong: " + s.Hosts[0].SSLMode.String()
			}
			return ""
		}},
		{"+ in a value is a plus", "postgres://h/app?sslmode=verify-ca&sslrootcert=" + plusFile, func(s *Settings) string {
			if got := TLSCheck(s, 0).RootFile; got != plusFile {
				return "root file " + got
			}
			return ""
		}},
		{"percent-encoded key", "postgres://h/app?ssl%6Dode=verify-full&sslrootcert=" + plusFile, func(s *Settings) string {
			if s.Hosts[0].SSLMode != negotiation.SSLModeVerifyFull || TLSCheck(s, 0).Host != "h" {
				return "sslmode " + s.Hosts[0].SSLMode.String()
			}
			return ""
		}},
		{"ending in ?", "postgres://h/app?", func(s *Settings) string {
			if s.Config.Database != "app" {
				return "database " + s.Config.Database
			}
			return ""
		}},
		{"ending in &", "postgres://h/app?sslmode=disable&", func(s *Settings) string {
			if s.Hosts[0].SSLMode != negotiation.SSLModeDisable {
				return "sslmode " + s.Hosts[0].SSLMode.String()
			}
			return ""
		}},
		{"ssl=true", "postgres://h/app?ssl=true", func(s *Settings) string {
			if s.Hosts[0].SSLMode != negotiation.SSLModeRequire {
				return "sslmode " + s.Hosts[0].SSLMode.String()
			}
			return ""
		}},
		{"spaces around parts (libpq 18)", "postgres://u: a%20b @h/app?  sslmode = disable ", func(s *Settings) string {
			if s.Config.Password != "a b" || s.Hosts[0].SSLMode != negotiation.SSLModeDisable {
				return "password or sslmode not read"
			}
			return ""
		}},
		{"percent-encoded host list and IPv6", "postgres://[::1]:5433,h%61:5434/d%62", func(s *Settings) string {
			if len(s.Hosts) != 2 || s.Hosts[0].Host != "::1" || s.Hosts[1].Host != "ha" || s.Hosts[1].Port != 5434 || s.Config.Database != "db" {
				return "hosts or database wrong"
			}
			return ""
		}},
		{"a quote and a backslash in values reach pgx as written", `postgres://u:it's\x@h/app?application_name=a'b\c`, func(s *Settings) string {
			if s.Config.Password != `it's\x` || s.Config.RuntimeParams["application_name"] != `a'b\c` {
				return "password or application_name wrong: " + s.Config.RuntimeParams["application_name"]
			}
			return ""
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.WriteFile(plusFile, []byte("not read by Parse"), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Parse(tt.dsn)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if problem := tt.check(s); problem != "" {
				t.Error(problem)
			}
		})
	}
}

// A key that libpq does not know is refused before anything is read or sent, naming the nearest
// keyword (libpq: "invalid connection option", "invalid URI query parameter"); pgx's keys and
// server parameters stay allowed.
func TestUnknownKeysRefused(t *testing.T) {
	clearPGEnv(t)
	t.Setenv("HOME", t.TempDir())
	const secret = "s3cr3t-pw"
	for _, tt := range []struct {
		name, dsn string
		key       string   // ParseError.Key
		want      []string // substrings of the message
	}{
		{"misspelt sslmode", "host=h password='" + secret + "' sslmdoe=verify-full", "sslmdoe", []string{`invalid connection option "sslmdoe"`, "did you mean sslmode?"}},
		{"require_auth without _", "host=h requireauth=scram-sha-256", "requireauth", []string{"did you mean require_auth?"}},
		{"URL uzer", "postgres://h/app?uzer=x", "uzer", []string{`invalid URI query parameter "uzer"`, "did you mean user?"}},
		{"URL u%7aer", "postgres://h/app?u%7aer=x", "uzer", []string{"did you mean user?"}},
		{"far from every keyword", "host=h frobnicate=1", "frobnicate", []string{"not a libpq keyword"}},
		{"ssl other than true", "postgres://h/app?ssl=1", "ssl", []string{`"ssl"`, "did you mean"}},
		{"server parameter a client cannot set", "host=h shared_buffers=1GB", "shared_buffers", []string{`"shared_buffers"`}},
		{"a libpq keyword with a dot", "host=h ssl.mode=verify-full", "ssl.mode", []string{"did you mean sslmode?"}},
		{"after an unquoted password", "host=h password=correct horse=" + secret, "", []string{"after the password"}},
		{"after an unquoted client secret", "host=h oauth_client_secret=correct horse=" + secret, "", []string{"after the password"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.dsn)
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *ParseError", err)
			}
			if pe.Key != tt.key {
				t.Errorf("Key %q, want %q", pe.Key, tt.key)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not say %q", err, w)
				}
			}
			for _, s := range []string{secret, "horse"} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("%q shows %q", err, s)
				}
			}
		})
	}

	// An "@" of a password not encoded would make a host name of the rest: refused, not shown.
	if _, err := Parse("postgres://u:p@" + secret + "@127.0.0.1/app"); err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("a host with \"@\": %v, want a refusal that does not show it", err)
	}

	s, err := Parse("host=h search_path=app,public myapp.tenant=t1 DateStyle=ISO statement_timeout=5s " +
		"statement_cache_capacity=0 database=d pool_max_conns=3")
	if err != nil {
		t.Fatalf("server parameters and pgx's keys: %v", err)
	}
	for k, want := range map[string]string{"search_path": "app,public", "myapp.tenant": "t1", "DateStyle": "ISO", "statement_timeout": "5s"} {
		if got := s.Config.RuntimeParams[k]; got != want {
			t.Errorf("run-time parameter %s = %q, want %q", k, got, want)
		}
	}
	if s.Config.Database != "d" {
		t.Errorf("database=d: Database %q", s.Config.Database)
	}

	// In a service file, as libpq (parseServiceFile: "syntax error in service file").
	file := filepath.Join(t.TempDir(), "pg_service.conf")
	if err := os.WriteFile(file, []byte("[svc]\nhost=h\nsslmdoe=verify-full\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Parse("service=svc servicefile=" + file)
	if err == nil || !strings.Contains(err.Error(), `"sslmdoe"`) || !strings.Contains(err.Error(), "service file") {
		t.Errorf("unknown key in a service file: %v", err)
	}
}
