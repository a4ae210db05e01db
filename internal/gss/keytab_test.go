package gss

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jcmturner/gokrb5/v8/keytab"
	"golang.org/x/sys/unix"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// A client keytab that is not one (here kadmin's keytab of alice followed by an entry length
// the file does not hold, or a FIFO): Credentials returns at once, without error, no
// credentials and why in Missing, naming the file; neither quotes a byte of the keys (gokrb5's
// keytab.Load quotes the whole file in its error, keys included, and waits forever on a FIFO).
// A good keytab still gives credentials.
func TestClientKeytabUnusable(t *testing.T) {
	r := newRealm(t, harness.KDCOptions{})
	good, err := os.ReadFile(r.keytab)
	if err != nil {
		t.Fatal(err)
	}
	kt, err := keytab.Load(r.keytab)
	if err != nil || len(kt.Entries) == 0 {
		t.Fatalf("kadmin's keytab: %v", err)
	}
	dir := t.TempDir()
	claim := filepath.Join(dir, "claim.keytab")
	if err := os.WriteFile(claim, binary.BigEndian.AppendUint32(good, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Opening and closing the write end lets a reader blocked in open(2) go on.
	release := func() {
		if fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
			unix.Close(fd)
		}
	}
	t.Cleanup(release)
	noCCache := filepath.Join(dir, "none")
	for _, c := range []struct{ name, path, want string }{
		{"entry length past the end", claim, "claims 4096 bytes, 0 are left"},
		{"FIFO", fifo, "a named pipe (FIFO), not a regular file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := NewClient(ClientConfig{Krb5Conf: r.kdc.Krb5Conf, CCache: noCCache, ClientKeytab: c.path})
			defer cl.Close()
			type result struct {
				missing string
				valid   bool
				err     error
			}
			done := make(chan result, 1)
			go func() {
				creds, err := cl.Credentials(context.Background())
				done <- result{creds.Missing, creds.Valid, err}
			}()
			var res result
			select {
			case res = <-done:
			case <-time.After(10 * time.Second):
				release()
				<-done
				t.Fatal("Credentials did not return in 10 s, until the FIFO got a writer")
			}
			for _, s := range []string{res.missing, errString(res.err)} {
				for _, e := range kt.Entries {
					k := e.Key.KeyValue
					if strings.Contains(s, string(k[:8])) || strings.Contains(s, hex.EncodeToString(k[:8])) {
						t.Fatalf("%q quotes a key", s)
					}
				}
			}
			if res.err != nil || res.valid || !strings.Contains(res.missing, c.path) || !strings.Contains(res.missing, c.want) {
				t.Fatalf("Credentials: valid %v, missing %q, error %v; want no error, no credentials, and %q about %s",
					res.valid, res.missing, res.err, c.want, c.path)
			}
		})
	}
	cl := NewClient(ClientConfig{Krb5Conf: r.kdc.Krb5Conf, CCache: noCCache, ClientKeytab: r.keytab})
	defer cl.Close()
	if creds, err := cl.Credentials(context.Background()); err != nil || !creds.Valid || creds.Source != "keytab" {
		t.Fatalf("kadmin's keytab: %+v, %v", creds, err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
