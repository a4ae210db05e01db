package pgconnector_test

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// TestOAuthExchangeLive: on PostgreSQL 18 with an oauth line (the harness's validator and
// issuer), the first connect costs two backends (discovery, then the token on a new
// connection), the next one backend, and the token function is called once; a cached token the
// server refuses (revoked) is replaced within the connect, on a new connection; over the unix
// socket (a verified channel). Over plaintext TCP the connect is refused before anything is
// sent unless WithOAuthUnverifiedChannel; an oauth_issuer that is not the server's issuer gets
// libpq's error and no token.
func TestOAuthExchangeLive(t *testing.T) {
	iss := harness.StartOAuthIssuerT(t, harness.OAuthIssuerOptions{})
	o := iss.OAuth()
	o.DelegateIdentMapping = true
	o.Types = []string{"host", "local"}
	p := harness.StartT(t, harness.Options{Major: 18, OAuth: o})
	var calls atomic.Int32
	var last atomic.Value // the last token minted
	tokenFunc := pgconnector.WithOAuthTokenFunc(func(ctx context.Context, r pgconnector.OAuthRequest) (*oauth2.Token, error) {
		calls.Add(1)
		if r.Issuer != iss.URL || r.DiscoveryURI != iss.DiscoveryURL || r.Scope != iss.Scope {
			t.Errorf("request %+v", r)
		}
		tok, err := iss.Mint(harness.AppUser, time.Hour)
		last.Store(tok)
		return &oauth2.Token{AccessToken: tok, Expiry: time.Now().Add(time.Hour)}, err
	})
	connect := func(dsn string, opts ...pgconnector.Option) (backends int, err error) {
		t.Helper()
		db := openNoIdle(t, dsn, opts...)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		mark := p.LogMark()
		var su string
		err = db.QueryRowContext(ctx, "SELECT system_user").Scan(&su)
		if err == nil && su != "oauth:"+harness.AppUser {
			t.Errorf("system_user %q", su)
		}
		n, cerr := p.ConnectionsSince(mark)
		if cerr != nil {
			t.Fatal(cerr)
		}
		return n, err
	}
	socket := "host=" + p.SocketDir + " port=" + strconv.Itoa(p.Port) + " user=" + harness.AppUser + " dbname=" + p.Database + " oauth_issuer=" + iss.URL

	t.Run("two backends on the first connect, one on the next", func(t *testing.T) {
		db := openNoIdle(t, socket, tokenFunc)
		calls.Store(0)
		var got []int
		for range 3 {
			mark := p.LogMark()
			if err := db.PingContext(context.Background()); err != nil {
				t.Fatal(err)
			}
			n, err := p.ConnectionsSince(mark)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, n)
		}
		if len(got) != 3 || got[0] != 2 || got[1] != 1 || got[2] != 1 || calls.Load() != 1 {
			t.Errorf("backends per connect %v, token func calls %d; want [2 1 1], 1", got, calls.Load())
		}
	})

	t.Run("a revoked cached token: one retry with a fresh token", func(t *testing.T) {
		db := openNoIdle(t, socket, tokenFunc)
		if err := db.PingContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := iss.Revoke(last.Load().(string)); err != nil {
			t.Fatal(err)
		}
		calls.Store(0)
		mark := p.LogMark()
		if err := db.PingContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n, _ := p.ConnectionsSince(mark); n != 2 || calls.Load() != 1 {
			t.Errorf("%d backends, %d token func calls; want 2 (the refused token, the fresh one), 1", n, calls.Load())
		}
	})

	t.Run("plaintext TCP refused, allowed with WithOAuthUnverifiedChannel", func(t *testing.T) {
		tcp := "host=127.0.0.1 port=" + strconv.Itoa(p.Port) + " user=" + harness.AppUser + " dbname=" + p.Database + " sslmode=disable oauth_issuer=" + iss.URL
		calls.Store(0)
		if _, err := connect(tcp, tokenFunc); err == nil || !strings.Contains(err.Error(), "WithOAuthUnverifiedChannel") || calls.Load() != 0 {
			t.Errorf("error %v, %d calls; want the channel refused, no call", err, calls.Load())
		}
		if n, err := connect(tcp, tokenFunc, pgconnector.WithOAuthUnverifiedChannel(true)); err != nil || n != 2 {
			t.Errorf("with WithOAuthUnverifiedChannel: %d backends, %v", n, err)
		}
	})

	t.Run("another issuer: libpq's error, no token", func(t *testing.T) {
		calls.Store(0)
		dsn := strings.Replace(socket, "oauth_issuer="+iss.URL, "oauth_issuer=https://other.example", 1)
		_, err := connect(dsn, tokenFunc)
		if err == nil || !strings.Contains(err.Error(), "is incompatible with oauth_issuer (https://other.example)") || calls.Load() != 0 {
			t.Errorf("error %v, %d calls", err, calls.Load())
		}
	})
}

// TestPasswordFuncRefusedLive: on PostgreSQL 18 with SCRAM, a password of WithPasswordFunc that
// the server refuses (28P01: the role's password changed) is dropped and the function asked
// once more within the same connect, on a new connection: the connect succeeds with two
// backends and two calls; a second refusal is the server's 28P01.
func TestPasswordFuncRefusedLive(t *testing.T) {
	srv := harness.StartT(t, harness.Options{Major: 18, Auth: "scram-sha-256"})
	const role = "rotated"
	execAdmin(t, srv, "CREATE ROLE "+role+" LOGIN PASSWORD 'old-Secret-1'")
	var current atomic.Value
	current.Store("old-Secret-1")
	var calls atomic.Int32
	db := openNoIdle(t, srv.DSN("user="+role, "sslmode=disable"), pgconnector.WithPasswordFunc(
		func(ctx context.Context, r pgconnector.PasswordRequest) (string, time.Time, error) {
			calls.Add(1)
			return current.Load().(string), time.Now().Add(time.Hour), nil
		}))
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	execAdmin(t, srv, "ALTER ROLE "+role+" PASSWORD 'new-Secret-2'")
	current.Store("new-Secret-2")
	calls.Store(0)
	mark := srv.LogMark()
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatalf("after the password changed: %v", err)
	}
	if n, _ := srv.ConnectionsSince(mark); n != 2 || calls.Load() != 1 {
		t.Errorf("%d backends, %d calls; want 2 (the cached password refused, the fresh one), 1", n, calls.Load())
	}
	execAdmin(t, srv, "ALTER ROLE "+role+" PASSWORD 'newer-Secret-3'")
	err := db.PingContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), "28P01") || strings.Contains(err.Error(), "Secret") {
		t.Errorf("a second refusal: %v, want the server's 28P01 without the password", err)
	}
}

// openNoIdle opens a database of a connector for dsn that keeps no idle connection (each use
// connects), closed with the test.
func openNoIdle(t *testing.T, dsn string, opts ...pgconnector.Option) *sql.DB {
	t.Helper()
	c, err := pgconnector.New(dsn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	db.SetMaxIdleConns(0)
	return db
}
