package ccache

import (
	"os"
	"os/user"
	"strconv"
	"strings"
	"testing"
)

func TestExpand(t *testing.T) {
	uid, euid := strconv.Itoa(os.Getuid()), strconv.Itoa(os.Geteuid())
	u, err := user.LookupId(euid)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", "/var/tmp/x")
	for _, tc := range []struct{ in, want string }{
		{"FILE:/tmp/krb5cc_%{uid}", "FILE:/tmp/krb5cc_" + uid},
		{"KEYRING:persistent:%{euid}", "KEYRING:persistent:" + euid},
		{"%{USERID}-%{username}", uid + "-" + u.Username},
		{"DIR:%{TEMP}/cc%{null}", "DIR:/var/tmp/x/cc"},
		{"%{LIBDIR}|%{BINDIR}|%{SBINDIR}", expandLibDir + "|/usr/bin|/usr/sbin"},
		{"no tokens %{", ""}, // no "}"
		{"100%", "100%"},
		{"%{}", ""},
		{"%{uidx}", ""},
		{"%{APPDATA}", ""},
		// MIT compares only the bytes written: a prefix is the first token it begins.
		{"%{u}", u.Username},
		{"%{LIB}", expandLibDir},
		{"%{US}", uid},
	} {
		got, err := Expand(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("Expand(%q) = %q, want an error", tc.in, got)
			} else if !strings.Contains(err.Error(), tc.in[strings.Index(tc.in, "%{"):]) {
				t.Errorf("Expand(%q): error %q does not name the token", tc.in, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Expand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	t.Setenv("TMPDIR", "")
	if got, _ := Expand("%{TEMP}"); got != "/tmp" {
		t.Errorf("Expand(%%{TEMP}) without TMPDIR = %q, want /tmp", got)
	}
	if !strings.HasPrefix(expandLibDir, "/usr/lib") {
		t.Errorf("LIBDIR %q", expandLibDir)
	}
}

func TestDefaultName(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "KRB5CCNAME" {
				return v
			}
			return ""
		}
	}
	uid := strconv.Itoa(os.Getuid())
	for _, tc := range []struct {
		env, conf, want string
	}{
		{"KEYRING:session:%{uid}", "DIR:/x", "KEYRING:session:%{uid}"}, // verbatim
		{"", "KEYRING:persistent:%{uid}", "KEYRING:persistent:" + uid},
		{"", "", "FILE:/tmp/krb5cc_" + uid},
	} {
		got, err := DefaultName(env(tc.env), tc.conf)
		if err != nil || got != tc.want {
			t.Errorf("DefaultName(KRB5CCNAME=%q, %q) = %q, %v; want %q", tc.env, tc.conf, got, err, tc.want)
		}
	}
	if _, err := DefaultName(nil, "FILE:/tmp/%{nope}"); err == nil || !strings.Contains(err.Error(), "%{nope}") {
		t.Errorf("DefaultName with an unknown token: %v", err)
	}
}
