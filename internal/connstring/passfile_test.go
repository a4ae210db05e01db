package connstring

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The lookup of one host, for what no server of the harness can show: the host name libpq uses
// for a Unix-socket directory (fe-connect.c, passwordFromFile: "localhost" for the default socket
// directory only), files libpq does not read, and the size bound.
func TestPasswordFromFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	entries := write("pgpass", "localhost:5432:*:*:pw-localhost\n/sockets/other:5432:*:*:pw-other\n"+
		"db.example:6432:app:app:pw-db\n127.0.0.1:*:*:*:pw-ip\n", 0o600)
	big := write("big", strings.Repeat("#"+strings.Repeat("x", 1000)+"\n", 1100)+"*:*:*:*:pw-big\n", 0o600)
	open := write("open", "*:*:*:*:pw-open\n", 0o644)
	for _, tt := range []struct {
		name, path, host string
		port             uint16
		dbname, user     string
		want             string
		ignored          string // libpq's warning
		err              string
	}{
		{"no host: localhost", entries, "", 5432, "app", "app", "pw-localhost", "", ""},
		{"another socket directory: itself", entries, "/sockets/other", 5432, "app", "app", "pw-other", "", ""},
		{"name, port, database, user", entries, "db.example", 6432, "app", "app", "pw-db", "", ""},
		{"database defaults to the user", entries, "db.example", 6432, "", "app", "pw-db", "", ""},
		{"another port", entries, "db.example", 5432, "app", "app", "", "", ""},
		{"another user", entries, "db.example", 6432, "app", "bob", "", "", ""},
		{"no user: no lookup", entries, "127.0.0.1", 5432, "app", "", "", "", ""},
		{"no such file", filepath.Join(dir, "none"), "127.0.0.1", 5432, "app", "app", "", "", ""},
		{"a directory", dir, "127.0.0.1", 5432, "app", "app", "", "is not a plain file", ""},
		{"group and others may read it", open, "127.0.0.1", 5432, "app", "app", "", "has group or world access; permissions should be u=rw (0600) or less", ""},
		{"larger than 1 MiB", big, "127.0.0.1", 5432, "app", "app", "", "", "is larger than 1048576 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ignored, err := passwordFromFile(tt.path, tt.host, tt.port, tt.dbname, tt.user)
			if !strings.Contains(ignored, tt.ignored) || (tt.ignored == "") != (ignored == "") {
				t.Errorf("ignored %q, want %q", ignored, tt.ignored)
			}
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("error %v, want %q", err, tt.err)
			}
			if err != nil && strings.Contains(err.Error(), "pw-") {
				t.Errorf("the error holds a password: %v", err)
			}
			if got != tt.want {
				t.Errorf("password %q, want %q", got, tt.want)
			}
		})
	}
	// libpq's DEFAULT_PGSOCKET_DIR on Debian, which psql 15 here is built with, is pgx's
	// default host when it exists.
	if _, err := os.Stat("/var/run/postgresql"); err == nil {
		if got, _, _ := passwordFromFile(entries, "/var/run/postgresql", 5432, "app", "app"); got != "pw-localhost" {
			t.Errorf("default socket directory: %q, want the localhost entry", got)
		}
	}
}

// pgx never reads the password file (pgconn/config.go reads it with jackc/pgpassfile when the
// password is empty, for the first host only): the string pgx parses ends with an empty passfile, also
// when PGPASSFILE or the service names a file, so Config.Password is the string's alone and the
// connector looks the file up per host, as libpq reads it.
func TestPgxReadsNoPasswordFile(t *testing.T) {
	clearPGEnv(t)
	dir := t.TempDir()
	pgpass := filepath.Join(dir, "pgpass")
	if err := os.WriteFile(pgpass, []byte("*:*:*:*:from-the-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	services := filepath.Join(dir, "services")
	if err := os.WriteFile(services, []byte("[s]\npassfile="+pgpass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ dsn, env string }{
		{"host=h user=u", "PGPASSFILE"},
		{"host=h user=u passfile=" + pgpass, ""},
		{"host=h user=u service=s servicefile=" + services, ""},
	} {
		if tt.env != "" {
			t.Setenv(tt.env, pgpass)
		}
		s, err := Parse(tt.dsn)
		if err != nil {
			t.Fatalf("%s: %v", tt.dsn, err)
		}
		if s.Config.Password != "" {
			t.Errorf("%s: pgx read the password file", tt.dsn)
		}
		if s.passfile != pgpass {
			t.Errorf("%s: the connector's password file %q, want %q", tt.dsn, s.passfile, pgpass)
		}
	}
}
