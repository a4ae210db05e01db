package connstring

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// passfileCorpus is a generated corpus of password files for the role pw_user of the database
// app at 127.0.0.1 and port: entries whose fields are the connection's values, "*", escaped
// and unescaped variants, white space, other values; passwords of letters, colons,
// backslashes, stars, spaces, "#" and carriage returns; more than five fields; comments,
// CRLF, lines longer than libpq's first buffer (256 bytes), a NUL byte, a last line without a
// newline. The seed is fixed: the same corpus every run.
func passfileCorpus(port string, n int) []string {
	r := rand.New(rand.NewPCG(30, 3))
	pick := func(s ...string) string { return s[r.IntN(len(s))] }
	escape := func(s string) string { // a backslash before some of the characters
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			if r.IntN(4) == 0 {
				b.WriteByte('\\')
			}
			b.WriteByte(s[i])
		}
		return b.String()
	}
	field := func(value string, others ...string) string {
		switch r.IntN(6) {
		case 0:
			return "*"
		case 1:
			return escape(value)
		case 2:
			return pick(append(others, "\\*", "*"+value, " "+value, value+" ")...)
		}
		return value
	}
	password := func() string {
		const alphabet = "abcp:\\ *#\r"
		var b strings.Builder
		for range r.IntN(9) {
			b.WriteByte(alphabet[r.IntN(len(alphabet))])
		}
		if r.IntN(10) == 0 {
			b.WriteString(strings.Repeat("x", 240+r.IntN(40))) // across the 256-byte buffer
		}
		return b.String()
	}
	var files []string
	for range n {
		var f strings.Builder
		lines := 1 + r.IntN(4)
		for i := range lines {
			switch r.IntN(8) {
			case 0:
				f.WriteString(pick("#", " #", "") + strings.Repeat("c", r.IntN(300)))
			default:
				f.WriteString(strings.Join([]string{
					field("127.0.0.1", "localhost", "127.0.0.2"),
					field(port, "5432", port+"0"),
					field("app", "postgres"),
					field("pw_user", "pw_use", "pw_userx"),
					password(),
				}, ":"))
				if r.IntN(5) == 0 {
					f.WriteString(":" + password()) // a sixth field
				}
			}
			if r.IntN(25) == 0 {
				f.WriteString("\x00nul" + password())
			}
			if i < lines-1 || r.IntN(3) > 0 {
				f.WriteString(pick("\n", "\n", "\r\n", "\r\r\n"))
			}
		}
		files = append(files, f.String())
	}
	// libpq's buffer cases at the end of a file without a newline: a last line of 255 bytes
	// (it fills the buffer: never read) and of 254 (read).
	entry := "127.0.0.1:" + port + ":app:pw_user:"
	files = append(files,
		entry+strings.Repeat("p", 255-len(entry)),
		entry+strings.Repeat("p", 254-len(entry)))
	return files
}

// TestPasswordFileMatchesLibpq: for each file of passfileCorpus, the password the connector
// reads (passwordFromFile) is libpq's. The role's password is set to the connector's answer and
// psql (libpq 18) connects with the file under pg_hba "password": it gets in exactly when libpq
// took the same password, and says "no password supplied" exactly when the connector found
// none (no entry, or an empty password). internal/suites/files runs PostgreSQL's own cases
// through the connector.
func TestPasswordFileMatchesLibpq(t *testing.T) {
	libpq18, err := harness.Libpq18Env()
	if err != nil {
		t.Fatal(err)
	}
	srv := harness.StartT(t, harness.Options{Major: 18})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := srv.ExecAdmin(ctx, "CREATE ROLE pw_user LOGIN"); err != nil {
		t.Fatal(err)
	}
	if err := srv.SetHBA("host all pw_user 127.0.0.1/32 password"); err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(srv.Port)
	pgpass := filepath.Join(t.TempDir(), "pgpass")
	conninfo := "host=127.0.0.1 port=" + port + " user=pw_user dbname=app sslmode=disable"
	found := 0
	for i, file := range passfileCorpus(port, 200) {
		if err := os.WriteFile(pgpass, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		want, _, err := passwordFromFile(pgpass, "127.0.0.1", uint16(srv.Port), "app", "pw_user")
		if err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
		if want != "" {
			found++
			lit := "'" + strings.ReplaceAll(want, "'", "''") + "'"
			if err := srv.ExecAdmin(ctx, "ALTER ROLE pw_user PASSWORD "+lit); err != nil {
				t.Fatalf("file %d: %v", i, err)
			}
		}
		_, err = harness.Psql(ctx, append(libpq18, "PGPASSFILE="+pgpass), conninfo, "SELECT 1")
		switch {
		case want != "" && err != nil:
			t.Errorf("file %d %q: the connector's password %q is not libpq's: %v", i, file, want, err)
		case want == "" && (err == nil || !strings.Contains(err.Error(), "no password supplied")):
			t.Errorf("file %d %q: the connector finds no password, libpq: %v", i, file, err)
		}
	}
	t.Logf("%d of %d files give a password", found, 202)
	// The corpus is worth something only if both kinds of answers are common.
	if found < 40 || found > 180 {
		t.Errorf("%d of the files give a password: the corpus no longer tests both kinds", found)
	}
}
