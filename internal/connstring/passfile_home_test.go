//go:build unix

package connstring

import (
	"os"
	"os/user"
	"path/filepath"
	"testing"
)

// With HOME unset, ~/.pgpass is found in the user database's home directory, as libpq finds it
// (fe-connect.c, pqGetHomeDirectory) and as ~/.postgresql/root.crt is found (homeDir).
func TestPassfileWithoutHOME(t *testing.T) {
	u, err := user.Current()
	if err != nil || u.HomeDir == "" {
		t.Fatalf("the user database has no home directory for this user: %v", err)
	}
	t.Setenv("HOME", "")
	os.Unsetenv("HOME")
	t.Setenv("PGPASSFILE", "")
	os.Unsetenv("PGPASSFILE")
	s, err := Parse("host=127.0.0.1 user=app dbname=app sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(u.HomeDir, ".pgpass")
	if s.passfile != want {
		t.Errorf("password file %q, want %q", s.passfile, want)
	}
	if got, want := defaultRootFile(), filepath.Join(u.HomeDir, ".postgresql", "root.crt"); got != want {
		t.Errorf("root certificate file %q, want %q", got, want)
	}
}
