// Command iamtoken connects with short-lived tokens instead of a fixed password, as IAM
// database authentication does (AWS RDS IAM, Cloud SQL IAM, Microsoft Entra ID): a token source
// keeps the current token and mints a new one shortly before it expires, and WithBeforeConnect
// gives each new connection the current token as its password. Connections already open stay
// open when their token expires: the server checks the password when a connection starts.
//
// The IAM service is a stand-in (iamservice.go) on a throwaway local cluster: minting a token
// sets it as the role's password, VALID UNTIL its expiry, so the server itself refuses an
// expired token. DATABASE_URL is not used: a real database's roles are not for rotating.
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
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// tokenSource hands out the current token, minting a new one when less than margin is left.
type tokenSource struct {
	mint   func(ctx context.Context) (token string, expiry time.Time, err error)
	margin time.Duration

	mu     sync.Mutex
	token  string
	expiry time.Time
}

func (s *tokenSource) Token(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token == "" || time.Until(s.expiry) < s.margin {
		token, expiry, err := s.mint(ctx)
		if err != nil {
			return "", fmt.Errorf("minting a token: %w", err)
		}
		s.token, s.expiry = token, expiry
	}
	return s.token, nil
}

// open returns a connector whose every new connection authenticates with the current token.
func open(dsn string, tokens *tokenSource) (*pgconnector.Connector, error) {
	return pgconnector.New(dsn, pgconnector.WithBeforeConnect(func(ctx context.Context, cfg *pgx.ConnConfig) error {
		token, err := tokens.Token(ctx)
		cfg.Password = token
		return err
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
	iam := &iamService{pg: pg, ttl: 3 * time.Second}
	tokens := &tokenSource{mint: iam.Mint, margin: time.Second}

	// No password in the connection string: each connection gets the token of its time.
	c, err := open(fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", pg.Host, pg.Port, pg.User, pg.Database), tokens)
	if err != nil {
		return err
	}
	db := sql.OpenDB(c)
	defer db.Close()
	db.SetMaxIdleConns(0) // a new connection for each query, to show the rotation
	for i := range 4 {
		var user string
		if err := db.QueryRowContext(ctx, "SELECT current_user").Scan(&user); err != nil {
			return err
		}
		fmt.Printf("connection %d: connected as %s; tokens minted so far: %d\n", i+1, user, iam.Minted())
		select {
		case <-time.After(1500 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
