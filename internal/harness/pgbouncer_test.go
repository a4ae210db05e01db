package harness

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgbouncer in front of a server that wants SCRAM over TCP: the trust user and the SCRAM user
// with its password get in, the SCRAM user with a wrong password gets pgbouncer's refusal
// (pgbouncer checks the proof itself, with the secret copied from pg_authid, and the server
// sees nothing of it), and Stop leaves no process, directory or listener.
func TestPgbouncer(t *testing.T) {
	t.Parallel()
	pg := StartT(t, Options{Auth: "scram-sha-256"})
	b := StartPgbouncerT(t, pg, PgbouncerOptions{})
	if b.Port < 1024 || b.Port >= 32768 {
		t.Errorf("pgbouncer listens on port %d, want one from 1024 to 32767", b.Port)
	}
	if b.Host != "127.0.0.1" || b.Database != pg.Database || b.TrustUser != PgbouncerTrustUser || b.ScramUser != PgbouncerScramUser || len(b.ScramPassword) < 16 {
		t.Errorf("fields: host %q, database %q, users %q and %q, password of %d characters", b.Host, b.Database, b.TrustUser, b.ScramUser, len(b.ScramPassword))
	}
	if !strings.HasPrefix(filepath.Base(b.Dir), "pgbouncer-") || filepath.Dir(b.Dir) != pg.env.base {
		t.Errorf("pgbouncer's directory %s is not a pgbouncer-* in the harness's directory %s", b.Dir, pg.env.base)
	}
	users, err := os.ReadFile(filepath.Join(b.Dir, "userlist.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(users), b.ScramPassword) || !strings.Contains(string(users), `"`+b.ScramUser+`" "SCRAM-SHA-256$4096:`) {
		t.Errorf("the auth_file does not hold the SCRAM secret (and only it) of %s", b.ScramUser)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logins, err := b.Logins()
	if err != nil {
		t.Fatal(err)
	}
	serverMark := pg.LogMark()
	for _, c := range []struct{ user, dsn string }{
		{b.TrustUser, b.TrustDSN("sslmode=disable")},
		{b.ScramUser, b.ScramDSN("sslmode=disable")},
	} {
		conn, err := pgx.Connect(ctx, c.dsn)
		if err != nil {
			t.Fatalf("%s through pgbouncer: %v", c.user, err)
		}
		var user string
		err = conn.QueryRow(ctx, "select current_user").Scan(&user)
		_ = conn.Close(ctx)
		if err != nil || user != c.user {
			t.Errorf("%s through pgbouncer: current_user %q, %v", c.user, user, err)
		}
	}

	_, err = pgx.Connect(ctx, b.ScramDSN("sslmode=disable", "password=wrong"))
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "08P01" || !strings.Contains(pgErr.Message, "SASL authentication failed") {
		t.Errorf("wrong password through pgbouncer: %v, want pgbouncer's SASL authentication failed (08P01)", err)
	}
	if strings.Contains(pg.logSince(serverMark), "authentication failed") {
		t.Errorf("the server saw an authentication fail: pgbouncer should have checked the proof:\n%s", pg.logSince(serverMark))
	}
	if n, err := b.Logins(); err != nil || n-logins != 3 {
		t.Errorf("pgbouncer logged %d logins (%v), want 3", n-logins, err)
	}

	pid, dir, addr := b.Pid(), b.Dir, b.Addr()
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pgbouncer (pid %d) still runs after Stop: %v", pid, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s is still there after Stop (%v)", dir, err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after Stop", addr)
	}
	if err := b.Stop(); err != nil {
		t.Errorf("a second Stop: %v", err)
	}
}

// Bad options are refused before anything starts.
func TestPgbouncerOptions(t *testing.T) {
	for _, tc := range []struct {
		opts PgbouncerOptions
		want string
	}{
		{PgbouncerOptions{PoolMode: "sessions"}, `unsupported PgbouncerOptions.PoolMode "sessions"`},
		{PgbouncerOptions{MaxClientConn: -1}, "must not be negative"},
	} {
		_, err := StartPgbouncer(context.Background(), &Postgres{env: &env{}}, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("StartPgbouncer(%+v) = %v, want an error with %q", tc.opts, err, tc.want)
		}
	}
	if _, err := StartPgbouncer(context.Background(), &Postgres{}, PgbouncerOptions{}); err == nil {
		t.Error("StartPgbouncer with a server that was never started: no error")
	}
}

// A port taken between the choice and pgbouncer's bind makes StartPgbouncer choose again.
func TestPgbouncerPortTaken(t *testing.T) {
	pg := StartT(t, Options{})
	busy, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(busy)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	calls := 0
	pickBouncerPort = func() (int, error) {
		calls++
		if calls == 1 {
			return busy, nil
		}
		return freePort()
	}
	t.Cleanup(func() { pickBouncerPort = freePort })
	b := StartPgbouncerT(t, pg, PgbouncerOptions{})
	if calls != 2 || b.Port == busy {
		t.Errorf("%d port choices, port %d (the busy one: %d), want 2 and another port", calls, b.Port, busy)
	}
	conn, err := pgx.Connect(context.Background(), b.TrustDSN("sslmode=disable"))
	if err != nil {
		t.Fatal(err)
	}
	conn.Close(context.Background())
}
