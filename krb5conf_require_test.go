package pgconnector_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// A krb5.conf that cannot be loaded (line 3 includes a FIFO, or a file that does not exist),
// with a valid ticket in the credential cache: gssencmode=require fails with an error that
// names the file, the line and the problem, not only "no credentials are available";
// gssencmode=prefer goes on without GSS. psql (libpq 15) is run beside for the missing include
// (MIT fails the profile, so gss_acquire_cred fails: plain under prefer, an error under
// require); on the FIFO it would wait for a writer for good (see TestKrb5ConfFIFO).
func TestKrb5ConfErrorInRequire(t *testing.T) {
	lab := newKerberosLab(t)
	srv := lab.server(t, true, lab.gssHBA(), "hostnogssenc all all 127.0.0.1/32 trust")
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // a reader stuck on the FIFO goes on
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
	})
	conf := func(line string) string {
		p := filepath.Join(t.TempDir(), "krb5.conf")
		text := "include " + lab.kdc.Krb5Conf + "\n[libdefaults]\n" + line + "\n"
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name     string
		include  string // the path on line 3
		problem  string // what the error must say of it
		withPsql bool
	}{
		{"include of a FIFO", fifo, "it is a named pipe (FIFO)", false},
		{"missing include", filepath.Join(dir, "missing.conf"), "no such file or directory", true},
	} {
		krb5Conf := conf("include " + c.include)
		for _, mode := range []string{"prefer", "require"} {
			t.Run(c.name+"/"+mode, func(t *testing.T) {
				dsn := aliceDSN(srv, "localhost", "sslmode=disable", "gssencmode="+mode, "connect_timeout=10")
				connector := newConnector(t, dsn, pgconnector.WithKerberos(pgconnector.Kerberos{Krb5Conf: krb5Conf, CCache: lab.ccache}))
				defer connector.Close()
				got, msg := connectorMatrixOutcome(t, connector)
				want := map[string]string{"prefer": outcomePlain, "require": outcomeError}[mode]
				if got != want {
					t.Fatalf("connector: %s (%s), want %s", got, msg, want)
				}
				if mode == "require" {
					for _, s := range []string{"no credentials are available", krb5Conf + ":3", c.include, c.problem} {
						if !strings.Contains(msg, s) {
							t.Errorf("error %q does not say %q", msg, s)
						}
					}
					t.Log(msg)
				}
				if !c.withPsql {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				env := append(lab.kdc.Env(lab.ccache), "KRB5_CONFIG="+krb5Conf)
				out, err := harness.Psql(ctx, env, dsn, matrixQuery)
				psqlGot := outcomePlain
				switch {
				case err != nil:
					psqlGot = outcomeError
				case !strings.HasPrefix(out, "f|"):
					psqlGot = outcomeGSS
				}
				if psqlGot != got {
					t.Errorf("connector: %s, psql: %s (%v)", got, psqlGot, err)
				}
			})
		}
	}
}
