package tlspolicy

import (
	"os"
	"path/filepath"
	"testing"
)

// The SNI as libpq sends it: with sslsni=1, for a host name, never for an IP address.
func TestSNIName(t *testing.T) {
	for _, tt := range []struct {
		host string
		sni  bool
		want string
	}{
		{"db.example", true, "db.example"},
		{"db.example", false, ""},
		{"", true, ""},
		{"127.0.0.1", true, ""},
		{"::1", true, ""},
		{"fe80::1%eth0", true, ""},
		{"1.2.3.4.example", true, "1.2.3.4.example"},
		{"localhost", true, "localhost"},
	} {
		if got := SNIName(tt.host, tt.sni); got != tt.want {
			t.Errorf("SNIName(%q, %v) = %q, want %q", tt.host, tt.sni, got, tt.want)
		}
	}
}

// KeyLogFile appends each line to the file, created with mode 0600, and writes to nothing but a
// regular file, always reporting the whole line written.
func TestKeyLogFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.log")
	f := KeyLogFile(path)
	for _, line := range []string{"CLIENT_RANDOM 01 02\n", "CLIENT_RANDOM 03 04\n"} {
		if n, err := f.Write([]byte(line)); n != len(line) || err != nil {
			t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(line))
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "CLIENT_RANDOM 01 02\nCLIENT_RANDOM 03 04\n"; got != want {
		t.Errorf("file holds %q, want %q", got, want)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v (%v), want 0600", st.Mode().Perm(), err)
	}
	// A directory: nothing written, no error.
	if n, err := KeyLogFile(dir).Write([]byte("x\n")); n != 2 || err != nil {
		t.Errorf("Write to a directory = %d, %v; want 2, nil", n, err)
	}
	// A file in a directory that does not exist: dropped.
	missing := filepath.Join(dir, "no", "keys.log")
	if n, err := KeyLogFile(missing).Write([]byte("x\n")); n != 2 || err != nil {
		t.Errorf("Write = %d, %v; want 2, nil", n, err)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("%s was created", missing)
	}
}
