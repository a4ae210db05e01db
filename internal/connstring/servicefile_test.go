package connstring

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// serviceFileCases are service files and what libpq 18's parseServiceFile takes from them for
// the service "s" (fe-connect.c): the section's keys, whether it was found, or the error.
var serviceFileCases = []struct {
	name, file string
	want       map[string]string
	found      bool
	err        string // the error's kind
}{
	{"a section", "[s]\nhost=a\nport=5433\n", map[string]string{"host": "a", "port": "5433"}, true, ""},
	{"white space around lines", "  [s]  \n\thost=a \r\n", map[string]string{"host": "a"}, true, ""},
	{"nothing trimmed around =", "[s]\nhost = a\n", nil, false, "unknown key"},
	{"a value keeps its quotes and inner spaces", "[s]\napplication_name='a b'\n", map[string]string{"application_name": "'a b'"}, true, ""},
	{"an empty value", "[s]\nhost=\n", map[string]string{"host": ""}, true, ""},
	{"the first of a key counts", "[s]\nhost=a\nhost=b\n", map[string]string{"host": "a"}, true, ""},
	{"the section ends at the next", "[s]\nhost=a\n[t]\nport=1\n", map[string]string{"host": "a"}, true, ""},
	{"the first section of a name only", "[s]\nhost=a\n[s]\nport=1\n", map[string]string{"host": "a"}, true, ""},
	{"what follows ] is not looked at", "[s] trailing\nhost=a\n", map[string]string{"host": "a"}, true, ""},
	{"a longer name is another section", "[ss]\nhost=a\n", nil, false, ""},
	{"lines outside the section are not read", "junk\n[t]\nnot a key\n[s]\nhost=a\n", map[string]string{"host": "a"}, true, ""},
	{"comments and empty lines", "# c\n\n[s]\n  # c\nhost=a\n", map[string]string{"host": "a"}, true, ""},
	{"no =", "[s]\nhost\n", nil, false, "syntax"},
	{"nested service", "[s]\nservice=t\n", nil, false, "nested"},
	{"nested servicefile", "[s]\nservicefile=/x\n", nil, false, "nested"},
	{"an LDAP line", "[s]\nldap://h/dc=x?uri?one?(cn=s)\n", nil, false, "ldap"},
	{"not found", "[t]\nhost=a\n", nil, false, ""},
	{"a line of 1022 bytes and its newline is too long", "[t]\n#" + strings.Repeat("x", 1021) + "\n[s]\nhost=a\n", nil, false, "too long"},
	{"1021 bytes and a newline", "[t]\n#" + strings.Repeat("x", 1020) + "\n[s]\nhost=a\n", map[string]string{"host": "a"}, true, ""},
	{"a NUL cuts the piece read", "[s]\nhost=a\x00junk\nport=1\n", map[string]string{"host": "a", "port": "1"}, true, ""},
	{"CRLF", "[s]\r\nhost=a\r\n", map[string]string{"host": "a"}, true, ""},
}

func TestParseServiceFile(t *testing.T) {
	for _, tt := range serviceFileCases {
		t.Run(tt.name, func(t *testing.T) {
			sec, found, err := parseServiceFile([]byte(tt.file), "s")
			kind := ""
			if err != nil {
				kind = err.kind
			}
			if kind != tt.err || found != tt.found {
				t.Fatalf("found %v, error %+v; want found %v, error %q", found, err, tt.found, tt.err)
			}
			if found && !maps.Equal(sec.settings, tt.want) {
				t.Errorf("keys %v, want %v", sec.settings, tt.want)
			}
		})
	}
}

// The user's file, then $PGSYSCONFDIR/pg_service.conf, as libpq's parseServiceInfo: the
// system-wide file when the user's has no such section, never merged, and an error for a
// named user file that does not exist (006_service.pl's cases run against libpq in
// internal/suites/files).
func TestServiceFileOrder(t *testing.T) {
	clearPGEnv(t)
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	user := write("user.conf", "[both]\nhost=user\n[user]\nhost=user\n")
	write("pg_service.conf", "[both]\nhost=sys\nport=7\n[sys]\nhost=sys\n")
	t.Setenv("PGSYSCONFDIR", dir)
	for _, tt := range []struct {
		dsn, host, port, err string
	}{
		{"service=both servicefile=" + user, "user", "", ""},
		{"service=user servicefile=" + user, "user", "", ""},
		{"service=sys servicefile=" + user, "sys", "", ""},
		{"service=none servicefile=" + user, "", "", `definition of service "none" not found in "` + user + `" nor "` + dir + `/pg_service.conf"`},
		{"service=sys servicefile=" + dir + "/missing.conf", "", "", "service file"},
		{"service=sys", "sys", "", ""}, // no ~/.pg_service.conf
	} {
		v, err := read(tt.dsn)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error %v, want %q", tt.dsn, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.dsn, err)
			continue
		}
		if v.service["host"] != tt.host || v.service["port"] != tt.port {
			t.Errorf("%s: service %v, want host %q port %q", tt.dsn, v.service, tt.host, tt.port)
		}
	}
	// PGSERVICE, which pgx reads too: pgx finds nothing of its own to add (withoutPgxService),
	// though its own reader would not find the section (no ~/.pg_service.conf).
	t.Setenv("PGSERVICE", "both")
	s, err := Parse("user=u")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Hosts) != 1 || s.Hosts[0].Host != "sys" || s.Hosts[0].Port != 7 {
		t.Errorf("PGSERVICE=both: hosts %+v, want sys:7", s.Hosts)
	}
	s, err = Parse("user=u servicefile=" + user + " port=8")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Hosts) != 1 || s.Hosts[0].Host != "user" || s.Hosts[0].Port != 8 {
		t.Errorf("PGSERVICE=both, servicefile: hosts %+v, want user:8", s.Hosts)
	}
}

// serviceModel is the service file of libpq-pgservice.html, written apart from
// parseServiceFile: lines split at newlines and trimmed, the section from "[name]" to the next
// "[", each of its lines key=value. It agrees with libpq for files without a NUL byte whose
// lines are shorter than 1022 bytes.
func serviceModel(data []byte, name string) (map[string]string, bool, bool) {
	var settings map[string]string
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.Trim(line, " \t\n\v\f\r")
		switch {
		case line == "" || line[0] == '#':
		case line[0] == '[':
			if in {
				return settings, true, false
			}
			if strings.HasPrefix(line, "["+name+"]") {
				in, settings = true, map[string]string{}
			}
		case in:
			k, v, ok := strings.Cut(line, "=")
			if !ok || k == "service" || k == "servicefile" || !knownKey(k) || strings.HasPrefix(line, "ldap") {
				return nil, false, true
			}
			if _, dup := settings[k]; !dup {
				settings[k] = v
			}
		}
	}
	return settings, in, false
}

// FuzzServiceFile: no panic on any file; the error never holds a line's text beyond a key;
// where the model applies (serviceModel), the section read is the model's.
func FuzzServiceFile(f *testing.F) {
	for _, tt := range serviceFileCases {
		f.Add([]byte(tt.file), "s")
	}
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		if len(data) > maxServiceFileSize {
			return
		}
		sec, found, err := parseServiceFile(data, name)
		if err != nil {
			if found || sec != nil {
				t.Fatalf("an error and a section")
			}
			if msg := err.message(`"f"`); err.kind != "unknown key" && bytes.Contains(data, []byte("secret")) && strings.Contains(msg, "secret") {
				t.Fatalf("the message holds the file's text: %s", msg)
			}
			return
		}
		if found != (sec != nil) {
			t.Fatalf("found %v, section %v", found, sec)
		}
		if found && len(sec.keys) != len(sec.settings) {
			t.Fatalf("keys %v, settings %v", sec.keys, sec.settings)
		}
		if bytes.IndexByte(data, 0) >= 0 || strings.ContainsAny(name, "\n\x00]") {
			return
		}
		for _, line := range bytes.Split(data, []byte("\n")) {
			if len(line) >= serviceLineBuf-2 {
				return
			}
		}
		want, wantFound, wantErr := serviceModel(data, name)
		if wantErr || wantFound != found || found && !maps.Equal(sec.settings, want) {
			t.Fatalf("reader %v %v; model %v %v (error %v)", sec, found, want, wantFound, wantErr)
		}
		if found && !slices.Equal(slices.Sorted(maps.Keys(sec.settings)), slices.Sorted(slices.Values(sec.keys))) {
			t.Fatalf("keys %v, settings %v", sec.keys, sec.settings)
		}
	})
}

// The service file pgx is given when PGSERVICE is set holds the empty section only, and is
// gone once the parse is done.
func TestEmptyServiceFile(t *testing.T) {
	for range 2 {
		path, done, err := emptyServiceFile()
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil || string(b) != "[]\n" {
			t.Fatalf("%s: %q, %v", path, b, err)
		}
		done()
		if _, err := os.Stat(path); err == nil && !strings.HasPrefix(path, "/dev/fd/") { // a descriptor's number may be taken again
			t.Errorf("%s is still there", path)
		}
	}
}
