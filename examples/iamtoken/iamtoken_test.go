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

// Each new connection gets the current token; a token is minted again shortly before it
// expires; the server refuses a replaced token and an expired one; a connection already open
// outlives its token.
func TestTokens(t *testing.T) {
	pg := harness.StartT(t, harness.Options{Auth: "scram-sha-256"})
	iam := &iamService{pg: pg, ttl: 3 * time.Second}
	tokens := &tokenSource{mint: iam.Mint, margin: time.Second}
	dsn := fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", pg.Host, pg.Port, pg.User, pg.Database)
	c, err := open(dsn, tokens)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	defer db.Close()
	db.SetMaxIdleConns(0)
	ctx := context.Background()
	held, err := db.Conn(ctx) // open across the expiry of its token
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := db.PingContext(ctx); err != nil || iam.Minted() != 1 {
		t.Fatalf("second connect: %v, %d tokens minted, want 1", err, iam.Minted())
	}
	first, firstExpiry := tokens.token, tokens.expiry

	time.Sleep(time.Until(firstExpiry.Add(-tokens.margin / 2)))
	if err := db.PingContext(ctx); err != nil || iam.Minted() != 2 || tokens.token == first {
		t.Fatalf("a connect within the margin: %v, %d tokens minted, want a second one", err, iam.Minted())
	}
	if code := fixed(t, dsn, first); code != "28P01" {
		t.Errorf("the replaced token: SQLSTATE %q, want 28P01", code)
	}

	second := tokens.token
	time.Sleep(time.Until(tokens.expiry.Add(200 * time.Millisecond)))
	if code := fixed(t, dsn, second); code != "28P01" {
		t.Errorf("the expired token: SQLSTATE %q, want 28P01 (VALID UNTIL passed)", code)
	}
	if err := held.PingContext(ctx); err != nil {
		t.Errorf("the connection opened with the first token: %v", err)
	}
	if err := db.PingContext(ctx); err != nil || iam.Minted() != 3 {
		t.Errorf("a connect after the expiry: %v, %d tokens minted, want 3", err, iam.Minted())
	}
}

// A token that cannot be minted fails the connect with an error naming WithBeforeConnect.
func TestMintFails(t *testing.T) {
	pg := harness.StartT(t, harness.Options{Auth: "scram-sha-256"})
	down := errors.New("IAM service unavailable")
	tokens := &tokenSource{mint: func(context.Context) (string, time.Time, error) { return "", time.Time{}, down }}
	c, err := open(pg.DSN(), tokens)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Connect(context.Background())
	if !errors.Is(err, down) || !strings.Contains(err.Error(), "WithBeforeConnect: minting a token: IAM service unavailable") {
		t.Errorf("connect: %v", err)
	}
}

// The example runs as a program does.
func TestRun(t *testing.T) {
	if err := run(context.Background(), harness.StartT(t, harness.Options{Auth: "scram-sha-256"})); err != nil {
		t.Fatal(err)
	}
}
