package harness

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// pgx with sslmode=prefer gets 'N' from the trap, sends the password it asks for in the clear
// and gets in; with sslmode=require it refuses the 'N' and sends nothing.
func TestPasswordTrap(t *testing.T) {
	ctx := testCtx(t)
	ln, err := Listen() // a free port below 32768, for the trap on another loopback address
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	trap := PasswordTrapT(t, fmt.Sprintf("127.0.0.2:%d", port))
	dsn := fmt.Sprintf("host=127.0.0.2 port=%d user=app password=secret dbname=app connect_timeout=10", port)
	conn, err := pgconn.Connect(ctx, dsn+" sslmode=prefer")
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "select 1").Close(); err != nil {
		t.Error(err)
	}
	conn.Close(ctx)
	if _, err := pgconn.Connect(ctx, dsn+" sslmode=require"); err == nil {
		t.Error("sslmode=require got in")
	}
	if got := trap.Passwords(); !slices.Equal(got, []string{"secret"}) || trap.SSLRequests() != 2 {
		t.Errorf("passwords %q after %d SSLRequests, want [secret] after 2", got, trap.SSLRequests())
	}
}

// The proxy answers the first SSLRequest 'N' itself (the client goes on in the clear to the TLS
// server behind it) and forwards the next one.
func TestSSLStripProxy(t *testing.T) {
	ctx := testCtx(t)
	srv := FaultServerT(t, FaultServerOptions{TLS: true})
	px := SSLStripProxyT(t, faultAddr(srv), 1)
	for i, want := range []SSLStripStats{{Stripped: 1, ClearStartups: 1}, {Stripped: 1, SSLRequests: 1, ClearStartups: 1}} {
		conn, err := pgconn.Connect(ctx, faultDSN(px, "sslmode=prefer"))
		if err != nil {
			t.Fatalf("connect %d: %v", i+1, err)
		}
		conn.Close(context.Background())
		if got := px.Stats(); got != want {
			t.Errorf("after connect %d: %+v, want %+v", i+1, got, want)
		}
	}
}
