package main

import (
	"context"
	"os"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// The harness removes what it made (clusters, the initdb template) once the tests ran.
func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

// Every connection reaches the server through the jump host, TLS end to end (verify-full):
// database/sql's, the cancel request of the statement whose context ended, and a pgx pool's.
// The server counts as many connections as the jump host forwarded, all to the address the
// connector chose.
func TestTunnel(t *testing.T) {
	pg := harness.StartT(t, harness.Options{TLS: true, Auth: "scram-sha-256"})
	jump, err := startJumpHost()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { jump.Close() })
	dsn := pg.DSN("host=localhost", "hostaddr=127.0.0.1", "sslmode=verify-full", "sslrootcert="+pg.CAFile)
	c, err := pgconnector.New(dsn, pgconnector.WithDialFunc(tunnelTo(jump.Addr())))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mark := pg.LogMark()
	db := c.OpenDB()
	defer db.Close()
	ctx := context.Background()
	addr, err := work(ctx, db)
	if err != nil || addr != "127.0.0.1/32" {
		t.Fatalf("work: %q, %v", addr, err)
	}
	var ssl bool
	if err := db.QueryRow("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || !ssl {
		t.Errorf("the session is not TLS (%v)", err)
	}
	pool, err := c.OpenPool(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	pool.Close()
	db.Close()

	want := "tcp 127.0.0.1:" + strconv.Itoa(pg.Port)
	got := jump.Forwarded()
	if len(got) != 1 || got[want] < 3 { // a connect, the cancel request, the pool's connect
		t.Errorf("the jump host forwarded %v, want 3 or more connections to %s only", got, want)
	}
	if n, err := pg.ConnectionsSince(mark); err != nil || n != got[want] {
		t.Errorf("the server got %d connections (%v), the jump host forwarded %d", n, err, got[want])
	}
}

// The example runs as a program does.
func TestRun(t *testing.T) {
	pg := harness.StartT(t, harness.Options{})
	if err := run(context.Background(), pg.DSN(), noop.NewTracerProvider()); err != nil {
		t.Fatal(err)
	}
}
