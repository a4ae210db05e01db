package pgconnector_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	xscram "github.com/xdg-go/scram"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/negotiation"
	"github.com/pgconnector/pgconnector/tracing"
)

// authWatch is a connector whose spans and metrics are recorded: the startup spans tell which
// SASL mechanism each connect used and whether its SCRAM keys came from the cache, the
// pgconnector.scram.derivations metric how many PBKDF2 derivations it ran.
type authWatch struct{ *observed }

func newAuthWatch(t *testing.T, dsn string, opts ...pgconnector.Option) *authWatch {
	t.Helper()
	return &authWatch{newObserved(t, dsn, opts...)}
}

// derivations returns the pgconnector.scram.derivations count, checking that it has one data
// point at most (the connector's pool name).
func (w *authWatch) derivations(t *testing.T) int64 {
	t.Helper()
	p := points(t, collect(t, w.reader)[tracing.MetricSCRAMDerivations])
	if len(p) > 1 {
		t.Fatalf("%s: %d data points, want one: %v", tracing.MetricSCRAMDerivations, len(p), p)
	}
	var n float64
	for _, v := range p {
		n = v
	}
	return int64(n)
}

func (w *authWatch) wantDerivations(t *testing.T, want int64) {
	t.Helper()
	if got := w.derivations(t); got != want {
		t.Fatalf("%s = %d, want %d", tracing.MetricSCRAMDerivations, got, want)
	}
}

// startupAuth is what one startup span says of the authentication.
type startupAuth struct {
	method, mechanism, cached string // cached: "true", "false", or "" when absent
	failed                    bool
}

// startups returns the authentication attributes of the startup spans ended so far, in the
// order they ended.
func (w *authWatch) startups() []startupAuth {
	var out []startupAuth
	for _, s := range w.rec.Ended() {
		if s.Name() != tracing.SpanStartup {
			continue
		}
		a := startupAuth{failed: s.Status().Description != ""}
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case tracing.AuthMethodKey:
				a.method = kv.Value.Emit()
			case tracing.AuthSASLMechanismKey:
				a.mechanism = kv.Value.Emit()
			case tracing.AuthKeyCachedKey:
				a.cached = kv.Value.Emit()
			}
		}
		out = append(out, a)
	}
	return out
}

// lastStartup returns the last startup span's authentication attributes.
func (w *authWatch) lastStartup(t *testing.T) startupAuth {
	t.Helper()
	s := w.startups()
	if len(s) == 0 {
		t.Fatal("no startup span")
	}
	return s[len(s)-1]
}

// checkSpansFree fails if any span recorded holds one of the secrets (attributes, events,
// status).
func (w *authWatch) checkSpansFree(t *testing.T, secrets ...string) {
	t.Helper()
	for _, s := range w.rec.Ended() {
		for _, text := range spanTexts(s) {
			for _, secret := range secrets {
				if strings.Contains(text, secret) {
					t.Errorf("span %s holds a password: %q", s.Name(), text)
				}
			}
		}
	}
}

// connectSSL opens one connection with c and returns whether the server sees it over TLS
// (pg_stat_ssl); the connection is closed.
func connectSSL(t *testing.T, c *pgconnector.Connector) (ssl bool, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dc, err := c.Connect(ctx)
	if err != nil {
		return false, err
	}
	defer dc.Close()
	err = pgconnector.PgxConnOf(dc).QueryRow(ctx, "select ssl from pg_stat_ssl where pid = pg_backend_pid()").Scan(&ssl)
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	return ssl, nil
}

func mustConnect(t *testing.T, c *pgconnector.Connector) {
	t.Helper()
	if _, err := connectSSL(t, c); err != nil {
		t.Fatalf("connect: %v", err)
	}
}

// checkNoSecret fails if err's text holds one of the secrets.
func checkNoSecret(t *testing.T, err error, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if err != nil && strings.Contains(err.Error(), s) {
			t.Errorf("error holds a password (%d bytes): %q", len(s), err)
		}
	}
}

// wantSQLState checks that err reaches a *pgconn.PgError with code.
func wantSQLState(t *testing.T, err error, code string) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != code {
		t.Fatalf("error %v: want a *pgconn.PgError with SQLSTATE %s", err, code)
	}
}

// superuserQuery runs a query returning one text value as the superuser over srv's unix socket.
func superuserQuery(t *testing.T, srv *harness.Postgres, query string, args ...any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", srv.SocketDir, srv.Port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var s string
	if err := conn.QueryRow(ctx, query, args...).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func execAdmin(t *testing.T, srv *harness.Postgres, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.ExecAdmin(ctx, sql); err != nil {
		t.Fatal(err)
	}
}

// rolpassword is the role's SCRAM secret in pg_authid: SCRAM-SHA-256$<iterations>:<salt>$...
func rolpassword(t *testing.T, srv *harness.Postgres, role string) string {
	t.Helper()
	return superuserQuery(t, srv, "select rolpassword from pg_authid where rolname = $1", role)
}

// Over TLS with a server that offers SCRAM-SHA-256-PLUS, the connector binds the channel; with
// channel_binding=disable, or without TLS, it uses SCRAM-SHA-256. Either way, n connections of one
// connector run PBKDF2 once: the first connect derives the keys, the others take them from the
// cache.
func TestSCRAMMechanismAndKeyCache(t *testing.T) {
	_, srv := servers(t)
	const n = 4
	pool := fmt.Sprintf("db.client.connection.pool.name=%s:%d/%s", srv.Host, srv.Port, srv.Database)
	for _, tt := range []struct {
		name, extra, mechanism string
		ssl                    bool
	}{
		{"tls", "sslmode=require", "SCRAM-SHA-256-PLUS", true},
		{"tls channel_binding=disable", "sslmode=require channel_binding=disable", "SCRAM-SHA-256", true},
		{"plaintext", "sslmode=disable", "SCRAM-SHA-256", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newAuthWatch(t, srv.DSN(tt.extra))
			for i := range n {
				ssl, err := connectSSL(t, w.c)
				if err != nil {
					t.Fatalf("connect %d: %v", i, err)
				}
				if ssl != tt.ssl {
					t.Errorf("connect %d: pg_stat_ssl.ssl = %t, want %t", i, ssl, tt.ssl)
				}
			}
			got := w.startups()
			if len(got) != n {
				t.Fatalf("%d startup spans, want %d", len(got), n)
			}
			for i, s := range got {
				want := startupAuth{method: "scram-sha-256", mechanism: tt.mechanism, cached: fmt.Sprint(i > 0)}
				if s != want {
					t.Errorf("startup span %d: %+v, want %+v", i, s, want)
				}
			}
			m := collect(t, w.reader)
			if p := points(t, m[tracing.MetricSCRAMDerivations]); len(p) != 1 || p[pool] != 1 {
				t.Errorf("%s = %v, want {%s: 1}", tracing.MetricSCRAMDerivations, p, pool)
			}
			if took := points(t, m[tracing.MetricSCRAMDerivationTime])[pool]; took <= 0 || took > 10 {
				t.Errorf("%s = %vs, want the time of one PBKDF2 derivation", tracing.MetricSCRAMDerivationTime, took)
			}
			w.checkSpansFree(t, srv.Password)
		})
	}
}

// A wrong password: the server's 28P01 is the error (a *pgconn.PgError), no other host or method
// is tried, the error holds no password, and the keys of the wrong password are not kept (the
// next attempt derives them again). The right password then works with a new connector.
func TestSCRAMWrongPassword(t *testing.T) {
	_, srv := servers(t)
	const wrong = "wrong-Passw0rd-9d1e"
	px := harness.ProxyT(t, srv.Addr()) // a second host: it must not be tried
	pxHost, pxPort := px.Addr()
	dsn := fmt.Sprintf("host=%s,%s port=%d,%d user=%s password=%s dbname=%s",
		srv.Host, pxHost, srv.Port, pxPort, srv.User, wrong, srv.Database)
	w := newAuthWatch(t, dsn)
	for i := range 2 {
		mark := srv.LogMark()
		_, err := connectSSL(t, w.c)
		if err == nil {
			t.Fatal("connected with a wrong password")
		}
		wantSQLState(t, err, "28P01")
		var ce *negotiation.ConnectError
		if !errors.As(err, &ce) || len(ce.Hosts) != 1 || int(ce.Hosts[0].Port) != srv.Port {
			t.Errorf("error %v: want a ConnectError for the first host only", err)
		}
		checkNoSecret(t, err, wrong, srv.Password)
		if n, err := srv.ConnectionsSince(mark); err != nil || n != 1 {
			t.Errorf("connect %d: %d backends (%v), want 1: no second method after 28P01", i, n, err)
		}
		if s := w.lastStartup(t); s != (startupAuth{method: "scram-sha-256", mechanism: "SCRAM-SHA-256-PLUS", cached: "false", failed: true}) {
			t.Errorf("connect %d: startup span %+v", i, s)
		}
	}
	if got := px.Stats().Connections; got != 0 {
		t.Errorf("second host: %d connections, want 0", got)
	}
	w.wantDerivations(t, 2) // keys that failed are not kept
	w.checkSpansFree(t, wrong, srv.Password)

	right := newAuthWatch(t, srv.DSN())
	mustConnect(t, right.c)
	mustConnect(t, right.c)
	right.wantDerivations(t, 1)
}

// The role's password changes while connectors run: a connector with the old password fails
// with 28P01; one whose WithBeforeConnect gives the new password derives the keys for the new
// salt and connects. Setting the same password again makes a new salt, hence a new derivation.
func TestSCRAMPasswordChanged(t *testing.T) {
	srv := harness.StartT(t, harness.Options{Auth: "scram-sha-256"})
	const role, a, b = "rotating", "alpha-Secret-7c2", "bravo-Secret-4e8"
	execAdmin(t, srv, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", role, a))
	dsn := srv.DSN("user="+role, "password="+a, "sslmode=disable")
	var current atomic.Pointer[string]
	current.Store(new(a))
	fixed := newAuthWatch(t, dsn)
	hooked := newAuthWatch(t, dsn, pgconnector.WithBeforeConnect(func(_ context.Context, cfg *pgx.ConnConfig) error {
		cfg.Password = *current.Load()
		return nil
	}))
	for _, w := range []*authWatch{fixed, hooked} {
		mustConnect(t, w.c)
		mustConnect(t, w.c)
		if s := w.lastStartup(t); s.cached != "true" {
			t.Fatalf("second connect: keys not cached: %+v", s)
		}
		w.wantDerivations(t, 1)
	}

	alterPassword := func(pw string) {
		t.Helper()
		before := rolpassword(t, srv, role)
		execAdmin(t, srv, fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", role, pw))
		if after := rolpassword(t, srv, role); after == before {
			t.Fatal("ALTER ROLE did not change the SCRAM secret")
		}
	}
	alterPassword(b)
	for _, w := range []*authWatch{fixed, hooked} {
		_, err := connectSSL(t, w.c)
		wantSQLState(t, err, "28P01")
		checkNoSecret(t, err, a, b)
		w.wantDerivations(t, 2) // password A with the new salt
	}

	current.Store(new(b))
	mustConnect(t, hooked.c)
	if s := hooked.lastStartup(t); s.cached != "false" {
		t.Errorf("first connect with the new password: %+v, want keys derived", s)
	}
	hooked.wantDerivations(t, 3)
	mustConnect(t, hooked.c)
	if s := hooked.lastStartup(t); s.cached != "true" {
		t.Errorf("second connect with the new password: %+v, want keys cached", s)
	}
	hooked.wantDerivations(t, 3)

	alterPassword(b) // the same text: PostgreSQL makes a new salt
	mustConnect(t, hooked.c)
	if s := hooked.lastStartup(t); s.cached != "false" {
		t.Errorf("connect after the new salt: %+v, want keys derived", s)
	}
	hooked.wantDerivations(t, 4)
	mustConnect(t, hooked.c)
	hooked.wantDerivations(t, 4)
	fixed.checkSpansFree(t, a, b)
	hooked.checkSpansFree(t, a, b)
}

// scramSecret is a SCRAM secret as PostgreSQL stores it in pg_authid.rolpassword
// (src/common/scram-common.c, scram_build_secret):
// SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>, base64.
func scramSecret(t *testing.T, password string, iters int) string {
	t.Helper()
	salt := make([]byte, 16)
	rand.Read(salt)
	c, err := xscram.SHA256.NewClient("", password, "")
	if err != nil {
		t.Fatal(err)
	}
	creds, err := c.GetStoredCredentialsWithError(xscram.KeyFactors{Salt: string(salt), Iters: iters})
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", iters, b64(salt), b64(creds.StoredKey), b64(creds.ServerKey))
}

// The role's SCRAM secret is replaced by one with another iteration count (as scram_iterations
// would make, PostgreSQL 16): the next connect derives new keys and succeeds.
func TestSCRAMIterationCountChanged(t *testing.T) {
	srv := harness.StartT(t, harness.Options{Auth: "scram-sha-256"})
	const role, pw, iters = "iterated", "iter-Secret-51a", 8192
	execAdmin(t, srv, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", role, pw))
	if s := rolpassword(t, srv, role); !strings.HasPrefix(s, "SCRAM-SHA-256$4096:") {
		t.Fatalf("secret %.20q..., want PostgreSQL 15's 4096 iterations", s)
	}
	w := newAuthWatch(t, srv.DSN("user="+role, "password="+pw, "sslmode=disable"))
	mustConnect(t, w.c)
	mustConnect(t, w.c)
	w.wantDerivations(t, 1)

	secret := scramSecret(t, pw, iters)
	execAdmin(t, srv, fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", role, secret))
	if got := rolpassword(t, srv, role); got != secret {
		t.Fatalf("pg_authid holds %.20q..., want the secret set (%d iterations)", got, iters)
	}
	mustConnect(t, w.c)
	if s := w.lastStartup(t); s.cached != "false" {
		t.Errorf("connect after the new iteration count: %+v, want keys derived", s)
	}
	w.wantDerivations(t, 2)
	mustConnect(t, w.c)
	if s := w.lastStartup(t); s.cached != "true" {
		t.Errorf("second connect: %+v, want keys cached", s)
	}
	w.wantDerivations(t, 2)
}

// herd opens n connections at once through c, each held until all are open, and returns the
// errors of those that failed.
func herd(t *testing.T, n int, connect func(ctx context.Context) (driver.Conn, error)) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var opened, wg sync.WaitGroup
	opened.Add(n)
	release := make(chan struct{})
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			conn, err := connect(ctx)
			errs[i] = err
			opened.Done()
			if err == nil {
				<-release
				conn.Close()
			}
		})
	}
	close(start)
	opened.Wait()
	close(release)
	wg.Wait()
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	return failed
}

// 64 connects at once through one new connector: one PBKDF2 derivation, every connect succeeds.
func TestSCRAMColdHerd(t *testing.T) {
	_, srv := servers(t)
	const n = 64
	w := newAuthWatch(t, srv.DSN("sslmode=require"))
	if errs := herd(t, n, w.c.Connect); len(errs) > 0 {
		t.Fatalf("%d of %d connects failed, the first: %v", len(errs), n, errs[0])
	}
	w.wantDerivations(t, 1)
	got := w.startups()
	if len(got) != n {
		t.Fatalf("%d startup spans, want %d", len(got), n)
	}
	for i, s := range got {
		if s.mechanism != "SCRAM-SHA-256-PLUS" || s.failed {
			t.Errorf("startup span %d: %+v", i, s)
		}
	}
}

// pgx connections (ConnectPgx, and a pgxpool of OpenPool) of a connector use the keys its
// database/sql connections derived.
func TestSCRAMKeysSharedWithPgx(t *testing.T) {
	_, srv := servers(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := newAuthWatch(t, srv.DSN("sslmode=require"))
	db := sql.OpenDB(w.c)
	t.Cleanup(func() { db.Close() })
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	w.wantDerivations(t, 1)

	conn, err := w.c.ConnectPgx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ssl bool
	err = conn.QueryRow(ctx, "select ssl from pg_stat_ssl where pid = pg_backend_pid()").Scan(&ssl)
	conn.Close(ctx)
	if err != nil || !ssl {
		t.Fatalf("ConnectPgx: ssl %t, %v", ssl, err)
	}

	pool, err := w.c.OpenPool(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // before the connector's Close
	var conns []*pgxpool.Conn
	for range 3 {
		pc, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, pc)
	}
	for _, pc := range conns {
		if err := pc.QueryRow(ctx, "select 1").Scan(new(int)); err != nil {
			t.Fatal(err)
		}
		pc.Release()
	}
	w.wantDerivations(t, 1)
	got := w.startups()
	if len(got) != 5 {
		t.Fatalf("%d startup spans, want 5", len(got))
	}
	for i, s := range got {
		want := startupAuth{method: "scram-sha-256", mechanism: "SCRAM-SHA-256-PLUS", cached: fmt.Sprint(i > 0)}
		if s != want {
			t.Errorf("startup span %d: %+v, want %+v", i, s, want)
		}
	}
}
