package pgconnector_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// A krb5.conf that names a FIFO (as KRB5_CONFIG itself, by include, or inside an includedir
// directory, under a name includedir reads) leaves the connector without Kerberos credentials
// at once: with gssencmode=prefer it connects in plaintext to a trust server, and the next
// connect does too. libpq 15 (psql) opens the FIFO and waits for a writer for good, past
// connect_timeout, in gss_acquire_cred: that is its defect; psql is run beside with a limit of
// a few seconds and, if it does finish, must agree.
func TestKrb5ConfFIFO(t *testing.T) {
	srv := harness.StartT(t, harness.Options{})
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	dfifo := filepath.Join(dir, "d", "x.conf")
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{fifo, dfifo} {
		if err := syscall.Mkfifo(f, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// unblock opens the FIFOs for writing (O_NONBLOCK: only if a reader waits), so that a
	// reader stuck on one goes on.
	unblock := func() {
		for _, f := range []string{fifo, dfifo} {
			if w, err := os.OpenFile(f, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
		}
	}
	t.Cleanup(unblock)
	conf := func(line string) string {
		p := filepath.Join(t.TempDir(), "krb5.conf")
		if err := os.WriteFile(p, []byte("[libdefaults]\n default_realm = EXAMPLE.COM\n"+line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dsn := srv.DSN("sslmode=disable", "gssencmode=prefer", "connect_timeout=10")
	for _, c := range []struct{ name, krb5Config string }{
		{"regular file", conf("")}, // the control: psql finishes, and agrees
		{"KRB5_CONFIG", fifo},
		{"include", conf("include " + fifo)},
		{"includedir", conf("includedir " + filepath.Join(dir, "d"))},
	} {
		t.Run(c.name, func(t *testing.T) {
			ccache := "FILE:" + filepath.Join(t.TempDir(), "none")
			connector := newConnector(t, dsn, pgconnector.WithKerberos(pgconnector.Kerberos{Krb5Conf: c.krb5Config, CCache: ccache}))
			defer connector.Close()
			for i := range 2 {
				done := make(chan string, 1)
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					dc, err := connector.Connect(ctx)
					if err != nil {
						done <- "error: " + err.Error()
						return
					}
					defer dc.Close()
					var encrypted bool
					if err := pgconnector.PgxConnOf(dc).QueryRow(ctx, "select encrypted from pg_stat_gssapi where pid = pg_backend_pid()").Scan(&encrypted); err != nil {
						done <- "query: " + err.Error()
						return
					}
					done <- map[bool]string{false: "plain", true: "gss"}[encrypted]
				}()
				select {
				case got := <-done:
					if got != "plain" {
						t.Fatalf("connect %d: %s, want plain", i+1, got)
					}
				case <-time.After(20 * time.Second):
					unblock()
					t.Fatalf("connect %d had not returned after 20 s (connect_timeout=10)", i+1)
				}
			}

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			out, err := harness.Psql(ctx, []string{"KRB5_CONFIG=" + c.krb5Config, "KRB5CCNAME=" + ccache},
				srv.DSN("sslmode=disable", "gssencmode=prefer", "connect_timeout=2"),
				"select encrypted from pg_stat_gssapi where pid = pg_backend_pid()")
			switch {
			case errors.Is(ctx.Err(), context.DeadlineExceeded):
				t.Logf("psql (libpq 15) was still waiting on the FIFO after 5 s, past connect_timeout=2: %v", err)
			case err != nil:
				t.Errorf("psql: %v, want plain as the connector", err)
			case out != "f":
				t.Errorf("psql: encrypted=%q, want f (plain) as the connector", out)
			}
		})
	}
}
