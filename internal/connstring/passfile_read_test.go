package connstring

import (
	"bytes"
	"strings"
	"testing"
)

// passfileCases are password-file lines and what libpq takes from them for host "h", port
// "5432", database "d" and user "u" (fe-connect.c, passwordFromFile and pwdfMatchesString). The
// first two are 001_password.pl's (src/test/authentication/t/001_password.pl: "more than five
// fields" and "p\ass"), which internal/suites/files checks against a server too.
var passfileCases = []struct {
	name, file string
	want       string
	found      bool
}{
	{"more than five fields: the fifth", "h:5432:d:u:pass:extra\n", "pass", true},
	{"a backslash before an ordinary character is dropped", `h:5432:d:u:p\ass` + "\n", "pass", true},
	{"escaped colon and backslash", `h:5432:d:u:a\:b\\c` + "\n", `a:b\c`, true},
	{"a backslash ending the line is kept", `h:5432:d:u:pw\`, `pw\`, true},
	{"stars", "*:*:*:*:star\n", "star", true},
	{"an escaped star is a star", `\*:5432:d:u:pw` + "\n", "", false},
	{"a star with more is not a star", "*h:5432:d:u:pw\n", "", false},
	{"escapes in a field", `\h:54\32:d:u:pw` + "\n", "pw", true},
	{"an escaped colon in a field is part of it", `h\::5432:d:u:pw` + "\n", "", false},
	{"four fields: nothing", "h:5432:d:u\n", "", false},
	{"an empty password", "h:5432:d:u:\n", "", true},
	{"leading white space is kept", " h:5432:d:u:pw\n", "", false},
	{"trailing white space is part of the password", "h:5432:d:u:pw \n", "pw ", true},
	{"a comment", "#h:5432:d:u:pw\n", "", false},
	{"white space before # makes an entry", " #h:5432:d:u:pw\n*:*:*:*:next\n", "next", true},
	{"CRLF", "h:5432:d:u:pw\r\n", "pw", true},
	{"carriage returns and newlines at the end", "h:5432:d:u:pw\r\r\n", "pw", true},
	{"the first match wins", "h:5432:d:u:one\n*:*:*:*:two\n", "one", true},
	{"no newline at the end", "x:1:d:u:no\nh:5432:d:u:last", "last", true},
	// "h:5432:d:u:a" and ":b" join into one line, whose password ends at the colon.
	{"a NUL ends the piece read; the next line goes on", "h:5432:d:u:a\x00junk\n:b\n", "a", true},
	{"a longer line", "h:5432:d:u:" + strings.Repeat("p", 5000) + "\n", strings.Repeat("p", 5000), true},
	{"a last line that fills the buffer is not read", "h:5432:d:u:" + strings.Repeat("p", 255-11), "", false},
	{"one byte shorter is read", "h:5432:d:u:" + strings.Repeat("p", 254-11), strings.Repeat("p", 254-11), true},
}

func TestPassfileLookup(t *testing.T) {
	for _, tt := range passfileCases {
		t.Run(tt.name, func(t *testing.T) {
			got, found := passfileLookup([]byte(tt.file), "h", "5432", "d", "u")
			if got != tt.want || found != tt.found {
				t.Errorf("got %q, %v; want %q, %v", got, found, tt.want, tt.found)
			}
		})
	}
}

// An IPv6 host holds colons: libpq matches them escaped or not (an unescaped colon of the field
// matches a colon of the host, pwdfMatchesString).
func TestPassfileIPv6Host(t *testing.T) {
	for _, file := range []string{"::1:5432:d:u:pw\n", `\:\:1:5432:d:u:pw` + "\n"} {
		if got, found := passfileLookup([]byte(file), "::1", "5432", "d", "u"); got != "pw" || !found {
			t.Errorf("%q: got %q, %v; want pw", file, got, found)
		}
	}
}

// passfileModel is what the password file means in libpq's documentation (libpq-pgpass.html),
// written apart from passfileLookup: lines split at newlines, a comment or an empty line
// skipped, the line cut into fields at colons no backslash escapes, each field unescaped, "*"
// as written matching anything, the fifth field the password. It agrees with libpq for files
// without a NUL byte whose last line ends with a newline or is shorter than 255 bytes.
func passfileModel(data []byte, host, port, dbname, user string) (string, bool) {
	for _, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		var fields, raw []string
		var f, r []byte
		for i := 0; i < len(line); i++ {
			c := line[i]
			if c == ':' {
				fields, raw = append(fields, string(f)), append(raw, string(r))
				f, r = nil, nil
				continue
			}
			r = append(r, c)
			if c == '\\' && i+1 < len(line) {
				i++
				c = line[i]
				r = append(r, c)
			}
			f = append(f, c)
		}
		fields, raw = append(fields, string(f)), append(raw, string(r))
		if len(fields) < 5 {
			continue
		}
		match := true
		for i, token := range []string{host, port, dbname, user} {
			if raw[i] != "*" && fields[i] != token {
				match = false
			}
		}
		if match {
			return fields[4], true
		}
	}
	return "", false
}

func modelApplies(data []byte) bool {
	if bytes.IndexByte(data, 0) >= 0 {
		return false
	}
	last := data[bytes.LastIndexByte(data, '\n')+1:]
	return len(last) < 255
}

func TestPassfileModelAgrees(t *testing.T) {
	for _, tt := range passfileCases {
		data := []byte(tt.file)
		if !modelApplies(data) {
			continue
		}
		got, found := passfileLookup(data, "h", "5432", "d", "u")
		want, wantFound := passfileModel(data, "h", "5432", "d", "u")
		if got != want || found != wantFound {
			t.Errorf("%s: reader %q, %v; model %q, %v", tt.name, got, found, want, wantFound)
		}
	}
}

// FuzzPassfile: no panic on any file, and, where the model applies (passfileModel), the
// reader's password is the model's. The tokens are fuzzed too (a host may hold a colon: ::1).
func FuzzPassfile(f *testing.F) {
	for _, tt := range passfileCases {
		f.Add([]byte(tt.file), "h", "5432", "d", "u")
	}
	f.Add([]byte(`\:\:1:5432:*:*:v6`+"\n"), "::1", "5432", "d", "u")
	f.Add([]byte("::1:5432:*:*:v6\n"), "::1", "5432", "d", "u")
	f.Add([]byte("a:b:c:d:e\r\n#x\n\n"), "a", "b", "c", "d")
	f.Fuzz(func(t *testing.T, data []byte, host, port, dbname, user string) {
		if len(data) > maxPassfileSize {
			return
		}
		got, found := passfileLookup(data, host, port, dbname, user)
		if !found && got != "" {
			t.Fatalf("no entry matched but the password is %q", got)
		}
		if len(got) > len(data) {
			t.Fatalf("a password longer than the file")
		}
		// The model splits at colons: a token with one (an IPv6 host) is libpq's own case,
		// an unescaped colon in the field matching it.
		if !modelApplies(data) || strings.ContainsAny(host+port+dbname+user, ":\x00") {
			return
		}
		want, wantFound := passfileModel(data, host, port, dbname, user)
		if got != want || found != wantFound {
			t.Fatalf("reader %q, %v; model %q, %v", got, found, want, wantFound)
		}
	})
}
