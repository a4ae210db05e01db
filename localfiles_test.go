package pgconnector_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// mkfifo makes a named pipe in a new temporary directory. Its cleanup opens the FIFO from both
// ends without blocking, so that a goroutine of a failed test, blocked in open(2) on it, returns.
func mkfifo(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, flag := range []int{os.O_RDONLY, os.O_WRONLY} {
			if f, err := os.OpenFile(path, flag|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
		}
	})
	return path
}

// within runs f and fails the test when f has not returned after 30 s. Not a measure of speed:
// a call blocked in open(2) on a FIFO never returns.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s is still waiting after 30 s: it opened the FIFO", what)
	}
}

// clearLocalFileEnv unsets the variables that name the files of these tests and points HOME at
// an empty directory, so that no default file of the machine's user is found.
func clearLocalFileEnv(t *testing.T) string {
	t.Helper()
	for _, env := range []string{"PGSSLCERT", "PGSSLKEY", "PGSERVICE", "PGSERVICEFILE", "PGSSLMODE",
		"PGSSLROOTCERT", "PGREQUIRESSL", "PGSYSCONFDIR", "PGPASSFILE"} {
		t.Setenv(env, "")
		os.Unsetenv(env)
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	return home
}

// sslkeylogfile naming a FIFO: the connection is made with TLS, and the FIFO gets no line,
// whether or not a reader has it open (without one, a blocking open(2) would wait for one and
// hold the handshake past connect_timeout and the context). A regular file still gets the lines.
func TestKeyLogFileNotRegular(t *testing.T) {
	clearLocalFileEnv(t)
	srv := harness.StartT(t, harness.Options{TLS: true})
	connect := func(t *testing.T, logFile string) {
		t.Helper()
		c, err := pgconnector.New(srv.DSN("sslmode=require", "connect_timeout=2", "sslkeylogfile="+logFile))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var ssl bool
		var connErr error
		within(t, "the connect", func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			dc, err := c.Connect(ctx)
			if err != nil {
				connErr = err
				return
			}
			defer dc.Close()
			connErr = pgconnector.PgxConnOf(dc).QueryRow(ctx,
				"select ssl from pg_stat_ssl where pid = pg_backend_pid()").Scan(&ssl)
		})
		if connErr != nil || !ssl {
			t.Fatalf("connect: %v, ssl %t; want a TLS connection (libpq goes on without the key log)", connErr, ssl)
		}
	}

	t.Run("FIFO without a reader", func(t *testing.T) {
		connect(t, mkfifo(t, "keys.log"))
	})
	t.Run("FIFO with a reader", func(t *testing.T) {
		fifo := mkfifo(t, "keys.log")
		r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		connect(t, fifo)
		buf := make([]byte, 4096)
		n, err := r.Read(buf)
		if n > 0 {
			t.Errorf("the FIFO got %d bytes of key log: %v", n, err)
		}
	})
	t.Run("regular file", func(t *testing.T) {
		logFile := filepath.Join(t.TempDir(), "keys.log")
		connect(t, logFile)
		data, err := os.ReadFile(logFile)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "CLIENT_TRAFFIC_SECRET_0 ") {
			t.Errorf("key log has no CLIENT_TRAFFIC_SECRET_0 line (%d bytes)", len(data))
		}
	})
}

// sslcert, sslkey and the service file, which pgx reads whole when it parses the connection
// string: one that is a FIFO or a device is refused by New at once with a *ParseError that names
// the key and the file's type. libpq reads them with fopen (a FIFO holds it until a writer
// comes, so psql is not run for those); /dev/null and sslmode=disable are compared with psql.
func TestLocalFilesNotRegular(t *testing.T) {
	home := clearLocalFileEnv(t)
	srv := harness.StartT(t, harness.Options{TLS: true})
	cert := filepath.Join(t.TempDir(), "client.crt")
	if err := os.WriteFile(cert, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const fifoType = "is not a regular file: a named pipe (FIFO)"
	for _, tc := range []struct {
		name     string
		dsn      func(fifo string) string
		env      func(fifo string) map[string]string
		home     string // a FIFO made at this path under HOME
		key, src string // the ParseError's Key and Env
		want     string
		connects bool // New returns no error
	}{
		{name: "sslcert", dsn: func(f string) string { return "sslcert=" + f }, key: "sslcert", want: fifoType},
		{name: "PGSSLCERT", env: func(f string) map[string]string { return map[string]string{"PGSSLCERT": f} },
			key: "sslcert", src: "PGSSLCERT", want: "(from PGSSLCERT) " + fifoType},
		{name: "sslkey", dsn: func(f string) string { return "sslcert=" + cert + " sslkey=" + f }, key: "sslkey", want: fifoType},
		{name: "PGSSLKEY", dsn: func(string) string { return "sslcert=" + cert },
			env: func(f string) map[string]string { return map[string]string{"PGSSLKEY": f} },
			key: "sslkey", src: "PGSSLKEY", want: "(from PGSSLKEY) " + fifoType},
		{name: "servicefile", dsn: func(f string) string { return "service=app servicefile=" + f }, key: "servicefile", want: fifoType},
		{name: "PGSERVICEFILE", dsn: func(string) string { return "service=app" },
			env: func(f string) map[string]string { return map[string]string{"PGSERVICEFILE": f} },
			key: "servicefile", src: "PGSERVICEFILE", want: "(from PGSERVICEFILE) " + fifoType},
		{name: "~/.pg_service.conf", dsn: func(string) string { return "service=app" }, home: ".pg_service.conf",
			key: "servicefile", want: fifoType},
		{name: "~/.postgresql/postgresql.key", dsn: func(string) string { return "" }, home: ".postgresql/postgresql.key",
			key: "sslkey", want: fifoType},
		// Not read by pgx (the connector reads root files itself, at each connection: internal/tlspolicy).
		{name: "~/.postgresql/root.crt", home: ".postgresql/root.crt", connects: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fifo string
			if tc.home != "" {
				fifo = filepath.Join(home, tc.home)
				if err := os.MkdirAll(filepath.Dir(fifo), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := syscall.Mkfifo(fifo, 0o600); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.Remove(fifo) })
				if strings.HasSuffix(tc.home, ".key") { // pgx's default key is read only beside its default cert
					crt := filepath.Join(home, ".postgresql", "postgresql.crt")
					if err := os.WriteFile(crt, []byte("not a certificate\n"), 0o600); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { os.Remove(crt) })
				}
			} else {
				fifo = mkfifo(t, "file")
			}
			if tc.env != nil {
				for k, v := range tc.env(fifo) {
					t.Setenv(k, v)
				}
			}
			dsn := srv.DSN("sslmode=require")
			if tc.dsn != nil {
				dsn += " " + tc.dsn(fifo)
			}
			var err error
			within(t, "New", func() {
				var c *pgconnector.Connector
				if c, err = pgconnector.New(dsn); err == nil {
					c.Close()
				}
			})
			if tc.connects {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			var pe *pgconnector.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("New: %v; want a *ParseError", err)
			}
			if pe.Key != tc.key || pe.Env != tc.src || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v (Key %q, Env %q); want Key %q, Env %q, %q", err, pe.Key, pe.Env, tc.key, tc.src, tc.want)
			}
			if strings.Contains(err.Error(), srv.Password) {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}

	// Beside psql: a device (libpq reads /dev/null as an empty file, which is no certificate and
	// no service: both fail), and sslmode=disable, where neither libpq nor pgx reads sslcert.
	for _, tc := range []struct {
		name, conninfo string
		env            []string // for both, as NAME=value
		want           string   // the connector's error, "" for a connection
	}{
		{name: "sslcert /dev/null", conninfo: srv.DSN("sslmode=require", "sslcert=/dev/null"),
			want: `sslcert "/dev/null" is not a regular file: a character device`},
		{name: "PGSERVICEFILE /dev/null", conninfo: srv.DSN("service=app"), env: []string{"PGSERVICEFILE=/dev/null"},
			want: `servicefile "/dev/null" (from PGSERVICEFILE) is not a regular file: a character device`},
		{name: "sslcert FIFO under sslmode=disable", conninfo: srv.DSN("sslmode=disable", "sslcert="+mkfifo(t, "cert"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, kv := range tc.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			psql, psqlMsg := psqlOutcome(t, nil, tc.env, tc.conninfo)
			var ours, ourMsg string
			within(t, "the connector", func() { ours, ourMsg = connectorOutcome(t, nil, tc.conninfo) })
			t.Logf("psql: %s %s; pgconnector: %s %s", psql, psqlMsg, ours, ourMsg)
			if (psql == "error") != (ours == "error") {
				t.Fatalf("psql: %s %s; pgconnector: %s %s", psql, psqlMsg, ours, ourMsg)
			}
			if tc.want != "" && !strings.Contains(ourMsg, tc.want) {
				t.Errorf("pgconnector: %s; want %q", ourMsg, tc.want)
			}
		})
	}
}
