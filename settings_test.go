package pgconnector

import (
	"strconv"
	"strings"
	"testing"

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
	} {
		t.Run(tt.dsn, func(t *testing.T) {
			t.Setenv("PGSSLMODE", "")
			s, err := ParseSettings(tt.dsn)
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
	t.Setenv("PGGSSENCMODE", "")
	s, err := ParseSettings("host=a gssencmode=disable gssdelegation=1 application_name=x")
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
	if s, err = ParseSettings("host=a"); err != nil || s.GSSEncMode != negotiation.GSSEncModeRequire {
		t.Errorf("PGGSSENCMODE=require: %v, %v", s.GSSEncMode, err)
	}
	if s, err = ParseSettings("host=a gssencmode=disable"); err != nil || s.GSSEncMode != negotiation.GSSEncModeDisable {
		t.Errorf("the DSN must win over PGGSSENCMODE: %v, %v", s.GSSEncMode, err)
	}
	t.Setenv("PGGSSENCMODE", "bogus")
	if _, err = ParseSettings("host=a"); err == nil || !strings.Contains(err.Error(), "gssencmode") {
		t.Errorf("bad PGGSSENCMODE: %v", err)
	}
}

// Connection-string handling never panics, and its errors never echo the password.
func FuzzParseSettings(f *testing.F) {
	for _, s := range []string{
		"host=a user=u password=pw gssencmode=prefer",
		"postgres://u:pw@a:5432,b/db?sslmode=require&gssencmode=require",
		"host=a,b port=1,2 gssdelegation=1 password='p w'",
		"host=/tmp sslmode=verify-full gssencmode=disable",
		"postgres://u:pw@[::1]:x/db",
		"host=a password=pw sslmode=allow target_session_attrs=read-write",
	} {
		f.Add(s, "s3cr3t")
	}
	f.Fuzz(func(t *testing.T, dsn, password string) {
		if len(password) < 6 || strings.ContainsAny(password, "'\\ =&%@:/?#[]") {
			password = "s3cr3t"
		}
		for _, d := range []string{dsn + " password=" + password, "postgres://u:" + password + "@" + dsn} {
			s, err := ParseSettings(d)
			if err != nil {
				if strings.Contains(err.Error(), password) {
					t.Fatalf("error %q contains the password", err)
				}
				continue
			}
			if len(s.Hosts) == 0 {
				t.Fatal("no host and no error")
			}
			for _, h := range s.Hosts {
				if h.SSLMode == 0 {
					t.Fatalf("host %q has no sslmode", h.Host)
				}
			}
			if _, ok := s.Config.RuntimeParams["gssencmode"]; ok {
				t.Fatal("gssencmode left in the run-time parameters")
			}
		}
	})
}
