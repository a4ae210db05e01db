// Command iamtoken connects with short-lived tokens instead of a fixed password, as IAM
// database authentication does (AWS RDS IAM, Cloud SQL IAM, Microsoft Entra ID): WithPasswordFunc
// gives the connector a function that mints a token, and the connector keeps the token and gives
// it to every new connection until 10 s before it expires (tokencache.Margin), then mints the
// next one. Connections already open stay open when their token expires: the server checks the
// password when a connection starts.
//
// The IAM service is a stand-in (iamservice.go) on a throwaway local cluster: minting a token
// sets it as the role's password, VALID UNTIL its expiry, so the server itself refuses an
// expired token. A backend checks the password against the role as it was when the backend
// started: the token minted for the connect that asked for it (the function is called when the
// server asks, not before) is refused on that connection (28P01), and the connector, as it does
// for any refused password of WithPasswordFunc, drops it and asks the function once more for a
// new connection, which the server accepts. A real IAM service's tokens are valid from the
// moment they are minted: there the first token serves. DATABASE_URL is not used: a real
// database's roles are not for rotating. Over a network, send a token only over TLS.
//
// In examples/ (the examples' module):
//
//	go run ./iamtoken
package main

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// tokenTTL is how long a minted token is valid. The connector uses a token until 10 s before
// its expiry, so each token serves the connections of its first tokenTTL - 10 s.
const tokenTTL = 14 * time.Second

// open returns a connector whose new connections authenticate with a token of mint, minted when
// the server first asks for a password and again once the kept one is within 10 s of expiry.
func open(dsn string, mint func(ctx context.Context) (token string, expiry time.Time, err error)) (*pgconnector.Connector, error) {
	return pgconnector.New(dsn, pgconnector.WithPasswordFunc(func(ctx context.Context, r pgconnector.PasswordRequest) (string, time.Time, error) {
		return mint(ctx) // a real service would mint for r.Host, r.Port and r.User
	}))
}

func main() {
	log.SetFlags(0)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Println("starting a throwaway PostgreSQL cluster (scram-sha-256) and a stand-in IAM service...")
	pg, err := harness.Start(ctx, harness.Options{Auth: "scram-sha-256"})
	if err == nil {
		err = run(ctx, pg)
		pg.Stop()
	}
	harness.Cleanup() // removes the initdb template too
	if ctx.Err() != nil {
		log.Print("iamtoken: interrupted; the throwaway cluster is stopped and removed")
		os.Exit(130)
	}
	if err != nil {
		log.Fatalf("iamtoken: %v", err)
	}
}

func run(ctx context.Context, pg *harness.Postgres) error {
	iam := &iamService{pg: pg, ttl: tokenTTL}

	// No password in the connection string: each connection gets the token of its time.
	c, err := open(fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", pg.Host, pg.Port, pg.User, pg.Database), iam.Mint)
	if err != nil {
		return err
	}
	db := sql.OpenDB(c)
	defer db.Close()
	db.SetMaxIdleConns(0) // a new connection for each query, to show the rotation
	fmt.Printf("tokens live %v; the connector uses one for %v\n", tokenTTL, tokenTTL-10*time.Second)
	for i := range 6 {
		var user string
		if err := db.QueryRowContext(ctx, "SELECT current_user").Scan(&user); err != nil {
			return err
		}
		fmt.Printf("connection %d: connected as %s; tokens minted so far: %d\n", i+1, user, iam.Minted())
		select {
		case <-time.After(750 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
