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
