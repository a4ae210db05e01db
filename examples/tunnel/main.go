// Command tunnel reaches PostgreSQL only through a forwarding "jump host", as an SSH tunnel
// does: pgconnector.WithDialFunc dials the jump host for every connection the connector opens
// (database/sql's, a pgx pool's, the cancel request of a statement whose context ended) and
// asks it for the address the connector chose, as an SSH client asks for a direct-tcpip
// channel. The negotiation (SSLRequest, TLS, authentication) runs end to end through it; the
// jump host sees only bytes. With golang.org/x/crypto/ssh the dial function would be
// sshClient.DialContext.
//
// In examples/ (the examples' module):
//
//	go run ./tunnel                               # on a throwaway local PostgreSQL cluster
//	DATABASE_URL=postgres://... go run ./tunnel   # the jump host runs here, in the same process
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/examples/internal/demo"
)

func main() { demo.Main("tunnel", run) }

func run(ctx context.Context, dsn string, tp trace.TracerProvider) error {
	jump, err := startJumpHost()
	if err != nil {
		return err
	}
	defer jump.Close()
	c, err := pgconnector.New(dsn, pgconnector.WithTracerProvider(tp), pgconnector.WithDialFunc(tunnelTo(jump.Addr())))
	if err != nil {
		return err
	}
	db := c.OpenDB()
	defer db.Close() // and the connector, after the pool below
	addr, err := work(ctx, db)
	if err != nil {
		return err
	}
	fmt.Println("connected through the jump host to the server at", addr)
	pool, err := c.OpenPool(ctx) // pgx's connections go the same way
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return err
	}
	fmt.Println("connections the jump host forwarded (a connect, a cancel request, the pool's connect):", jump.Forwarded())
	return nil
}

// work queries the server's address, then runs a statement whose context ends: its cancel
// request goes through the tunnel too.
func work(ctx context.Context, db *sql.DB) (addr string, err error) {
	if err := db.QueryRowContext(ctx, "SELECT coalesce(inet_server_addr()::text, 'a Unix socket')").Scan(&addr); err != nil {
		return "", err
	}
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := db.ExecContext(sctx, "SELECT pg_sleep(10)"); err == nil {
		return "", errors.New("pg_sleep(10) ended within 200 ms")
	}
	return addr, nil
}

// tunnelTo returns a dial function that opens every connection through the jump host at
// jumpAddr: it connects to the jump host, names the network and address the connector chose
// ("tcp 10.0.0.5:5432"), and returns the forwarded connection once the jump host accepted.
func tunnelTo(jumpAddr string) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", jumpAddr)
		if err != nil {
			return nil, fmt.Errorf("jump host: %w", err)
		}
		if deadline, ok := ctx.Deadline(); ok {
			conn.SetDeadline(deadline)
			defer conn.SetDeadline(time.Time{})
		}
		if _, err := fmt.Fprintf(conn, "%s %s\n", network, address); err != nil {
			conn.Close()
			return nil, fmt.Errorf("jump host: %w", err)
		}
		var ok [1]byte // '+', or '-' and the reason
		if _, err := io.ReadFull(conn, ok[:]); err != nil || ok[0] != '+' {
			why, _ := io.ReadAll(io.LimitReader(conn, 200))
			conn.Close()
			return nil, errors.Join(fmt.Errorf("jump host could not reach %s: %s", address, why), err)
		}
		return conn, nil
	}
}
