//go:build unix

package tlspolicy

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector/internal/testpki"
	"github.com/pgconnector/pgconnector/negotiation"
)

// A root certificate file is untrusted input: only a regular file of at most MaxRootFile bytes
// with a certificate is read; a FIFO is refused without waiting for a writer, a device without
// reading it, and a file too large before it is read.
func TestReadRootFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.crt")
	if err := os.WriteFile(good, testpki.PEMCert(testpki.NewCA(t).Cert), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	large := filepath.Join(dir, "large.crt")
	f, err := os.Create(large)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxRootFile + 1); err != nil { // sparse: nothing written
		t.Fatal(err)
	}
	f.Close()
	empty := filepath.Join(dir, "empty.crt")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	badCert := filepath.Join(dir, "bad.crt")
	if err := os.WriteFile(badCert, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path, err string
	}{
		{good, ""},
		{fifo, "not a regular file"},
		{"/dev/zero", "not a regular file"},
		{dir, "not a regular file"},
		{large, "larger than"},
		{empty, "no certificate found"},
		{badCert, "a certificate does not parse"},
		{filepath.Join(dir, "none"), "no such file"},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := ReadRootFile(tt.path)
			done <- err
		}()
		select {
		case err := <-done:
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("%s: %v, want %q", filepath.Base(tt.path), err, tt.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: ReadRootFile blocks", tt.path)
		}
	}
	// Through the check: the path is named, as libpq names it, and the error is a refusal.
	s := &ServerCheck{RootFile: fifo}
	err = s.BeforeTLS()
	var tr *negotiation.TLSRefusedError
	if !errors.As(err, &tr) || !strings.Contains(err.Error(), `could not read root certificate file "`+fifo+`": not a regular file`) {
		t.Errorf("FIFO as root file: %v", err)
	}
	// A missing file under verify-* (libpq's text), and without a home directory.
	for _, tt := range []struct {
		s    ServerCheck
		want string
	}{
		{ServerCheck{RootFile: filepath.Join(dir, "none"), Verify: true}, `root certificate file "` + filepath.Join(dir, "none") + `" does not exist` + "\n" + RootHint},
		{ServerCheck{Verify: true}, "could not get home directory to locate root certificate file\n" + RootHint},
		{ServerCheck{RootFile: filepath.Join(dir, "none")}, ""},
	} {
		err := tt.s.BeforeTLS()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || err.Error() != tt.want) {
			t.Errorf("%+v: %v, want %q", tt.s, err, tt.want)
		}
	}

	// The cache of the parsed file: a file rewritten in place, or replaced, is read again.
	cache := &RootCache{}
	path := filepath.Join(dir, "cached.crt")
	for i, how := range []string{"written", "rewritten in place", "unchanged", "replaced"} {
		ca := testpki.NewCA(t).Cert
		switch how {
		case "unchanged":
		case "replaced":
			tmp := path + ".new"
			if err := os.WriteFile(tmp, testpki.PEMCert(ca), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		default:
			if err := os.WriteFile(path, testpki.PEMCert(ca), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		pool, err := cache.read(path)
		if err != nil {
			t.Fatal(err)
		}
		if how == "unchanged" {
			continue
		}
		if _, err := ca.Verify(x509.VerifyOptions{Roots: pool.anchors}); err != nil {
			t.Errorf("%d, file %s: the pool is not the file's: %v", i, how, err)
		}
	}
}
