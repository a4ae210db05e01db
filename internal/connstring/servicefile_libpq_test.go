package connstring

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// serviceCorpus is a generated corpus of service files for the service "s": its section (or
// none, or two) among others, with application_name values of letters, spaces, quotes, "=",
// "#", "[" and backslashes; white space around lines, CRLF, comments, lines outside any
// section, malformed lines in other sections and in the section (no "=", white space before
// "=", an unknown key, a nested service), "[s] trailing", "[ss]", repeated keys, lines of 1023
// bytes or more and a NUL byte. The seed is fixed: the same corpus every run.
func serviceCorpus(n int) []string {
	r := rand.New(rand.NewPCG(30, 5))
	pick := func(s ...string) string { return s[r.IntN(len(s))] }
	value := func() string {
		const alphabet = "abc '=#[\\"
		var b strings.Builder
		b.WriteByte("abc"[r.IntN(3)]) // never empty: psql would send its fallback name
		for range r.IntN(6) {
			b.WriteByte(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	line := func(inSection bool) string {
		switch r.IntN(12) {
		case 0:
			return pick("# comment", "  # indented", "", "   ")
		case 1:
			if inSection && r.IntN(3) > 0 {
				return "application_name=" + value()
			}
			return pick("garbage", "application_name = x", "nosuchkey=1", "service=other")
		case 2:
			return "#" + strings.Repeat("x", 1000+r.IntN(40)) // about libpq's 1024-byte buffer
		case 3:
			return "application_name=" + value() + "\x00" + value()
		case 4:
			return pick("sslmode=disable", "gssencmode=disable", "connect_timeout=10")
		}
		return pick("", " ", "\t") + "application_name=" + value() + pick("", " ", "\t", "\r")
	}
	var files []string
	for range n {
		var f strings.Builder
		for range r.IntN(3) {
			f.WriteString(line(false) + "\n")
		}
		for range 1 + r.IntN(3) {
			header := pick("[s]", "[s]", " [s] ", "[s] trailing", "[ss]", "[t]", "[]", "[s")
			f.WriteString(header + pick("\n", "\r\n"))
			for range r.IntN(5) {
				f.WriteString(line(true) + pick("\n", "\n", "\r\n"))
			}
		}
		files = append(files, f.String())
	}
	return files
}

// TestServiceFileMatchesLibpq: for each file of serviceCorpus, the connector's reading of the
// service "s" is libpq 18's: psql fails exactly when the connector's reading fails, with
// libpq's message of the same problem at the same line (libpqServiceMessage), and
// otherwise the application_name psql connects with is the section's (its first), or the
// environment's when the section has none. The connection's own keys are in the environment,
// which the section's keys override.
func TestServiceFileMatchesLibpq(t *testing.T) {
	libpq18, err := harness.Libpq18Env()
	if err != nil {
		t.Fatal(err)
	}
	clearPGEnv(t)
	srv := harness.StartT(t, harness.Options{Major: 18})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	services := filepath.Join(t.TempDir(), "services")
	t.Setenv("PGSERVICEFILE", services)
	env := append(libpq18, "PGSERVICEFILE="+services, "PGHOST=127.0.0.1", "PGPORT="+strconv.Itoa(srv.Port),
		"PGUSER="+srv.User, "PGDATABASE="+srv.Database, "PGSYSCONFDIR=/nonexistent")
	var ok, failed int
	for i, file := range serviceCorpus(150) {
		if err := os.WriteFile(services, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		v, readErr := read("service=s")
		got, psqlErr := harness.Psql(ctx, env, "service=s", "SHOW application_name")
		switch {
		case (readErr != nil) != (psqlErr != nil):
			t.Errorf("file %d %q: connector %v; libpq %v", i, file, readErr, psqlErr)
		case readErr != nil:
			failed++
			if want := libpqServiceMessage(readErr.Error()); want == "" || !strings.Contains(psqlErr.Error(), want) {
				t.Errorf("file %d %q: connector %v; libpq %v", i, file, readErr, psqlErr)
			}
		default:
			ok++
			want, set := v.service["application_name"]
			if !set {
				want = "pgconnector-harness" // harness.Psql's PGAPPNAME
			}
			if got != want {
				t.Errorf("file %d %q: application_name %q; libpq %q", i, file, want, got)
			}
		}
	}
	t.Logf("%d files read, %d refused, alike", ok, failed)
	if ok < 30 || failed < 30 {
		t.Errorf("%d read, %d refused: the corpus no longer tests both kinds", ok, failed)
	}
}

// libpqServiceMessage is libpq's message for the problem the connector's message msg names (the
// service file's path is quoted alike, with no character the connector would hide), or "".
func libpqServiceMessage(msg string) string {
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`definition of service "[^"]*" not found`),
		regexp.MustCompile(`syntax error in service file "[^"]*", line [0-9]+`),
		regexp.MustCompile(`nested service specifications not supported in service file "[^"]*", line [0-9]+`),
		regexp.MustCompile(`line [0-9]+ too long in service file "[^"]*"`),
	} {
		if m := re.FindString(msg); m != "" {
			return m
		}
	}
	return ""
}
