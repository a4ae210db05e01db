package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// The harness removes what it made (clusters, the initdb template) once the tests ran.
func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

// fixed connects once with password and returns the SQLSTATE of the failure ("" on success).
func fixed(t *testing.T, dsn, password string) string {
	t.Helper()
	c, err := pgconnector.New(dsn + " password=" + password)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conn, err := c.Connect(context.Background())
	if err == nil {
		conn.Close()
		return ""
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		t.Fatalf("connect: %v, want a server error", err)
	}
	return pe.Code
}

// Mints per token lifetime, not per connection: the first connect costs at most two mints (the
// first token is refused by the backend that asked for it, which read the role before it was
// minted, and the connect is made again once with the second), later connects get
// the kept token until 10 s before its expiry, and the next connect after that mints again (at
// most twice). The server refuses a replaced token; a connection already open outlives it.
func TestTokens(t *testing.T) {
	pg := harness.StartT(t, harness.Options{Auth: "scram-sha-256"})
	// A token is kept for tokenTTL - 10 s = 4 s, the last fifth of which (from 3.2 s) would
	// start a refresh in the background: the connects of each lifetime below end well before.
	iam := &iamService{pg: pg, ttl: tokenTTL}
	dsn := fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", pg.Host, pg.Port, pg.User, pg.Database)
	c, err := open(dsn, iam.Mint)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	defer db.Close()
	db.SetMaxIdleConns(0)
	ctx := context.Background()
	ping := func(what string, n int, maxMinted int) {
		t.Helper()
		for range n {
			if err := db.PingContext(ctx); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		if m := iam.Minted(); m > maxMinted || m < 1 {
			t.Fatalf("%s: %d tokens minted, want 1 to %d", what, m, maxMinted)
		}
	}

	held, err := db.Conn(ctx) // open across the replacement of its token
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	ping("four connects", 4, 2)
	firstLife := iam.Minted()
	first, firstExpiry := iam.Last()

	time.Sleep(time.Until(firstExpiry.Add(-10*time.Second + 300*time.Millisecond)))
	ping("the first connect after the first token's use ended", 1, firstLife+2)
	if iam.Minted() == firstLife {
		t.Fatal("no token minted after the first token's use ended")
	}
	ping("three more connects", 3, iam.Minted())
	if second, _ := iam.Last(); second == first {
		t.Fatal("the second token is the first")
	}
	if code := fixed(t, dsn, first); code != "28P01" {
		t.Errorf("the replaced token: SQLSTATE %q, want 28P01", code)
	}
	if err := held.PingContext(ctx); err != nil {
		t.Errorf("the connection opened with the first token: %v", err)
	}
}

// A token that cannot be minted fails the connect with an error that names WithPasswordFunc and
// wraps the function's.
func TestMintFails(t *testing.T) {
	pg := harness.StartT(t, harness.Options{Auth: "scram-sha-256"})
	down := errors.New("IAM service unavailable")
	c, err := open(pg.DSN(), func(context.Context) (string, time.Time, error) { return "", time.Time{}, down })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Connect(context.Background())
	if !errors.Is(err, down) || !strings.Contains(err.Error(), "WithPasswordFunc: IAM service unavailable") {
		t.Errorf("connect: %v", err)
	}
}

// The example runs as a program does.
func TestRun(t *testing.T) {
	if err := run(context.Background(), harness.StartT(t, harness.Options{Auth: "scram-sha-256"})); err != nil {
		t.Fatal(err)
	}
}
