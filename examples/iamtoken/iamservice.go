package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// iamService stands in for a cloud provider's IAM token service: a token it mints is the
// role's password until ttl has passed (ALTER ROLE ... PASSWORD ... VALID UNTIL, run as the
// superuser), after which the server refuses it. Unlike a real one, it keeps one valid token at
// a time: minting replaces the role's password.
type iamService struct {
	pg     *harness.Postgres
	ttl    time.Duration
	minted atomic.Int32

	mu         sync.Mutex
	last       string
	lastExpiry time.Time
}

func (s *iamService) Mint(ctx context.Context) (token string, expiry time.Time, err error) {
	var b [24]byte
	rand.Read(b[:])
	token = hex.EncodeToString(b[:]) // hex: nothing to escape in the literal below
	expiry = time.Now().Add(s.ttl)
	role := pgx.Identifier{s.pg.User}.Sanitize()
	// The statement holds the token: keep it out of the server's log.
	err = s.pg.ExecAdmin(ctx, "SET log_statement = none; ALTER ROLE "+role+" PASSWORD '"+token+
		"' VALID UNTIL '"+expiry.UTC().Format(time.RFC3339Nano)+"'")
	if err != nil {
		return "", time.Time{}, err
	}
	s.minted.Add(1)
	s.mu.Lock()
	s.last, s.lastExpiry = token, expiry
	s.mu.Unlock()
	return token, expiry, nil
}

// Last is the token minted last and its expiry.
func (s *iamService) Last() (token string, expiry time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, s.lastExpiry
}

// Minted is the number of tokens minted.
func (s *iamService) Minted() int { return int(s.minted.Load()) }
