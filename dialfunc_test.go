package pgconnector_test

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/negotiation"
)

// dialCounter is a WithDialFunc that counts its calls per network and address and connects
// every address to one target (a tunnel's far end).
type dialCounter struct {
	target string
	mu     sync.Mutex
	calls  map[string]int // "network address"
}

func (d *dialCounter) dial(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	if d.calls == nil {
		d.calls = map[string]int{}
	}
	d.calls[network+" "+address]++
	d.mu.Unlock()
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", d.target)
}

func (d *dialCounter) snapshot() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]int{}
	for k, v := range d.calls {
		out[k] = v
	}
	return out
}

// total is the number of calls; it fails the test when one was for another address than want.
func (d *dialCounter) total(t *testing.T, want string) int {
	t.Helper()
	n := 0
	for k, v := range d.snapshot() {
		if k != want {
			t.Errorf("WithDialFunc was called for %q, want only %q", k, want)
		}
		n += v
	}
	return n
}

// waitDials waits (at most 10 s) until the dial function was called n times.
func waitDials(t *testing.T, d *dialCounter, want string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); d.total(t, want) < n && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := d.total(t, want); got != n {
		t.Fatalf("WithDialFunc called %d times, want %d", got, n)
	}
}

// Every connection the connector opens goes through WithDialFunc: database/sql's and pgx's
// connects, a pool's, the CancelRequests of both kinds of session, and a background refresh.
// The connection string names a port where nothing listens; the dial function reaches the
// server through a proxy (the far end of a tunnel), which sees as many connections as the
// function was called: none went around it.
func TestWithDialFuncOpensEveryConnection(t *testing.T) {
	srv := harness.StartT(t, harness.Options{})
	px := harness.ProxyT(t, srv.Addr())
	pxHost, pxPort := px.Addr()
	nowhere := harness.FreePort(t)
	want := "tcp 127.0.0.1:" + strconv.Itoa(nowhere)
	d := &dialCounter{target: net.JoinHostPort(pxHost, strconv.Itoa(pxPort))}
	const ttl = 10 * time.Second
	rec, tp := newRecorder()
	var tlsCalls atomic.Int32 // WithTLSConfigFunc serves the refresh's TLS attempt too
	c := newConnector(t, srv.DSN("port="+strconv.Itoa(nowhere), "sslmode=prefer"),
		pgconnector.WithDialFunc(d.dial), pgconnector.WithCacheTTL(ttl), pgconnector.WithTracerProvider(tp),
		pgconnector.WithTLSConfigFunc(func(context.Context, string, *tls.Config) error { tlsCalls.Add(1); return nil }))
	ctx := context.Background()

	// database/sql: a connect (SSLRequest refused, plaintext on the same socket), then a
	// statement canceled through its context: the CancelRequest is dialed the same way.
	db := sql.OpenDB(c)
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitDials(t, d, want, 1)
	qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	_, err = conn.ExecContext(qctx, "SELECT pg_sleep(30)")
	cancel()
	if err == nil || time.Since(start) > 10*time.Second {
		t.Fatalf("pg_sleep(30) under a 300 ms context: %v after %v", err, time.Since(start))
	}
	waitDials(t, d, want, 2)
	for deadline := time.Now().Add(5 * time.Second); px.Stats().CancelRequests < 1 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := px.Stats().CancelRequests; n != 1 {
		t.Errorf("the server side saw %d CancelRequests, want 1", n)
	}
	conn.Close()
	key := negotiation.Key{Host: "127.0.0.1", Port: uint16(nowhere)}
	a, learned := remembered(t, c, key, negotiation.MethodSSL)
	if a != negotiation.AnswerNo {
		t.Fatalf("the cache says %v for SSL, want no", a)
	}

	// pgx: ConnectPgx, its CancelRequest, and a pool's connect.
	pc, err := c.ConnectPgx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitDials(t, d, want, 3)
	qctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = pc.Exec(qctx, "SELECT pg_sleep(30)")
	cancel()
	if err == nil {
		t.Fatal("pg_sleep(30) was not canceled")
	}
	waitDials(t, d, want, 4)
	pc.Close(ctx)
	pool, err := c.OpenPool(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	pool.Close()
	waitDials(t, d, want, 5)

	// The server turns TLS on; once the 'N' is old enough, a connect starts a refresh, whose
	// connection is dialed the same way and learns 'S'.
	if err := srv.SetSSL(true); err != nil {
		t.Fatal(err)
	}
	waitUntil(learned.Add(pgconnector.CacheOf(c).RefreshAge()))
	before := tlsCalls.Load()
	dc, err := c.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dc.Close()
	if got := waitRefresh(t, rec, 1); got != "enabled" {
		t.Fatalf("refresh outcome %q, want enabled", got)
	}
	waitDials(t, d, want, 7)
	if n := tlsCalls.Load() - before; n != 1 {
		t.Errorf("WithTLSConfigFunc called %d times for the plaintext connect and the refresh's TLS attempt, want 1", n)
	}
	if got := transport(t, db); got != "tls" {
		t.Errorf("a connect after the refresh: %s, want tls", got)
	}
	if time.Now().After(learned.Add(ttl)) {
		t.Fatalf("too slow to tell: the 'N' learned at %v would have expired by now", learned)
	}
	total := d.total(t, want)
	if st := px.Stats(); st.Connections != total {
		t.Errorf("the proxy saw %d connections, WithDialFunc was called %d times", st.Connections, total)
	}
}

// An error of the dial function fails the connect, wrapped; over a Unix-domain socket the
// function gets network "unix" and the socket's path, as pgx gives them.
func TestWithDialFuncErrorAndUnixSocket(t *testing.T) {
	srv := harness.StartT(t, harness.Options{})
	errTunnel := errors.New("the tunnel is down")
	failing := func(context.Context, string, string) (net.Conn, error) { return nil, errTunnel }
	c := newConnector(t, srv.DSN("sslmode=disable"), pgconnector.WithDialFunc(failing))
	mark := srv.LogMark()
	_, sqlErr := c.Connect(context.Background())
	_, pgxErr := c.ConnectPgx(context.Background(), nil)
	for _, err := range []error{sqlErr, pgxErr} {
		var ce *negotiation.ConnectError
		if !errors.Is(err, errTunnel) || !errors.As(err, &ce) || !strings.Contains(err.Error(), "the tunnel is down") {
			t.Errorf("connect error %v, want a *negotiation.ConnectError wrapping the dial function's", err)
		}
	}
	if n, _ := srv.ConnectionsSince(mark); n != 0 {
		t.Errorf("the server got %d connections", n)
	}

	var mu sync.Mutex
	var got []string
	unix := func(ctx context.Context, network, address string) (net.Conn, error) {
		mu.Lock()
		got = append(got, network+" "+address)
		mu.Unlock()
		var nd net.Dialer
		return nd.DialContext(ctx, network, address)
	}
	c = newConnector(t, srv.DSN("host="+srv.SocketDir, "sslmode=disable"), pgconnector.WithDialFunc(unix))
	connectN(t, c, 1)
	want := "unix " + srv.SocketDir + "/.s.PGSQL." + strconv.Itoa(srv.Port)
	if len(got) != 1 || got[0] != want {
		t.Errorf("the dial function got %q, want [%q]", got, want)
	}
}

// hostaddr: the dial function gets hostaddr's address, and the host name stays the server's
// for TLS (verify-full checks the certificate against it).
func TestWithDialFuncHostaddr(t *testing.T) {
	_, tlsSrv := servers(t)
	d := &dialCounter{target: tlsSrv.Addr()}
	c := newConnector(t, tlsSrv.DSN("host=localhost", "hostaddr=127.0.0.1", "sslmode=verify-full", "sslrootcert="+tlsSrv.CAFile),
		pgconnector.WithDialFunc(d.dial))
	db := sql.OpenDB(c)
	defer db.Close()
	if got := transport(t, db); got != "tls" {
		t.Fatalf("transport %s, want tls", got)
	}
	if n := d.total(t, "tcp 127.0.0.1:"+strconv.Itoa(tlsSrv.Port)); n != 1 {
		t.Errorf("WithDialFunc called %d times, want 1", n)
	}
}

// WithBeforeConnect may not change what the connector sets for the attempt: the dial
// function, the TLS configuration or its fields. The connect fails with an error naming the
// hook and the option to use instead.
func TestWithBeforeConnectKeepsDialAndTLS(t *testing.T) {
	_, tlsSrv := servers(t)
	for _, tc := range []struct {
		name, want string
		change     func(cfg *pgx.ConnConfig)
	}{
		{"DialFunc", "DialFunc: use WithDialFunc", func(cfg *pgx.ConnConfig) {
			cfg.DialFunc = (&net.Dialer{}).DialContext
		}},
		{"TLSConfig", "TLSConfig: use WithTLSConfigFunc", func(cfg *pgx.ConnConfig) {
			cfg.TLSConfig = cfg.TLSConfig.Clone()
		}},
	} {
		c := newConnector(t, tlsSrv.DSN("sslmode=verify-full", "sslrootcert="+tlsSrv.CAFile), pgconnector.WithBeforeConnect(
			func(_ context.Context, cfg *pgx.ConnConfig) error {
				tc.change(cfg)
				return nil
			}))
		_, err := c.Connect(context.Background())
		var abort *negotiation.AbortError
		if err == nil || !errors.As(err, &abort) || !strings.Contains(err.Error(), "WithBeforeConnect") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s changed: %v, want an error naming WithBeforeConnect and %q", tc.name, err, tc.want)
		}
	}
	// A field of the configuration changed in place (the connector's own: each Connector has
	// its configurations): refused too.
	c := newConnector(t, tlsSrv.DSN("sslmode=verify-full", "sslrootcert="+tlsSrv.CAFile), pgconnector.WithBeforeConnect(
		func(_ context.Context, cfg *pgx.ConnConfig) error {
			cfg.TLSConfig.MinVersion = 0x0301
			return nil
		}))
	_, err := c.Connect(context.Background())
	if err == nil || !strings.Contains(err.Error(), "WithBeforeConnect") || !strings.Contains(err.Error(), "fields of TLSConfig") {
		t.Errorf("a field of TLSConfig changed: %v", err)
	}
}
