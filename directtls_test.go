package pgconnector_test

import (
	"context"
	"database/sql/driver"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/negotiation"
	"github.com/pgconnector/pgconnector/tracing"
)

// directServer is a PostgreSQL 18 server with TLS, seen through a proxy that counts what each
// connection opens with: SSLRequest, or something else (a ClientHello sent directly is counted
// as a connection only).
func directServer(t *testing.T) (*harness.Postgres, *harness.Proxy) {
	t.Helper()
	srv := harness.StartT(t, harness.Options{Major: 18, TLS: true})
	return srv, harness.ProxyT(t, srv.Addr())
}

// proxyDSN is a DSN for srv's database through the proxy, with extra key=value items.
func proxyDSN(srv *harness.Postgres, p *harness.Proxy, extra ...string) string {
	host, port := p.Addr()
	return strings.Join(append([]string{
		"host=" + host, "port=" + strconv.Itoa(port), "user=" + srv.User, "password=" + srv.Password,
		"dbname=" + srv.Database, "connect_timeout=10",
	}, extra...), " ")
}

// known is what c's cache remembers of the proxy's port on host (no Kerberos principal).
func known(c *pgconnector.Connector, p *harness.Proxy, host ...string) negotiation.Known {
	h, port := p.Addr()
	if len(host) > 0 {
		h = host[0]
	}
	return pgconnector.CacheOf(c).Known(negotiation.Key{Host: h, Port: uint16(port)})
}

// connectOnce opens one connection through c, checks that it runs a statement, and closes it.
func connectOnce(t *testing.T, ctx context.Context, c *pgconnector.Connector) {
	t.Helper()
	conn, err := c.Connect(ctx)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close()
	q, ok := conn.(driver.QueryerContext)
	if !ok {
		t.Fatal("the connection runs no queries")
	}
	rows, err := q.QueryContext(ctx, "SELECT 1", nil)
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	rows.Close()
}

// tlsSpans returns, in order, "direct/source/alpn ok|fail" for each tls_handshake span recorded.
func tlsSpans(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		if s.Name() != tracing.SpanTLSHandshake {
			continue
		}
		a := map[string]string{}
		for _, kv := range s.Attributes() {
			a[string(kv.Key)] = kv.Value.Emit()
		}
		ok := "ok"
		if a["tls.established"] != "true" {
			ok = "fail"
		}
		out = append(out, fmt.Sprintf("%s/%s/%s %s", a[string(tracing.TLSDirectKey)], a[string(tracing.TLSDirectSourceKey)], a["tls.next_protocol"], ok))
	}
	return out
}

// On a PostgreSQL 18 server with TLS and the default DSN (sslmode=prefer), the first connection
// asks with SSLRequest and learns from ALPN and server_version that the host takes direct TLS;
// every later one opens with a ClientHello, one socket each, under every sslmode that uses TLS.
func TestDirectTLSLearned(t *testing.T) {
	srv, proxy := directServer(t)
	ctx := context.Background()
	for _, tc := range []struct{ name, host, extra string }{
		{"prefer", "127.0.0.1", ""},
		{"require", "127.0.0.1", "sslmode=require"},
		{"verify-full", "localhost", "sslmode=verify-full sslrootcert=" + srv.CAFile + " host=localhost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mode := tc.extra
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			c := newConnector(t, proxyDSN(srv, proxy, mode), pgconnector.WithTracerProvider(tp))
			before := proxy.Stats()
			connectOnce(t, ctx, c)
			first := proxy.Stats()
			if d := first.SSLRequests - before.SSLRequests; d != 1 {
				t.Fatalf("first connection: %d SSLRequests, want 1", d)
			}
			if got := known(c, proxy, tc.host); got.Direct != negotiation.AnswerYes {
				t.Fatalf("after the first connection the cache knows %+v, want Direct yes", got)
			}
			const warm = 5
			for range warm {
				connectOnce(t, ctx, c)
			}
			after := proxy.Stats()
			if d := after.SSLRequests - first.SSLRequests; d != 0 {
				t.Errorf("warm connections sent %d SSLRequests, want none", d)
			}
			if d := after.Connections - first.Connections; d != warm {
				t.Errorf("warm connections opened %d sockets, want %d", d, warm)
			}
			if d := after.StartupMessages - first.StartupMessages; d != 0 {
				t.Errorf("warm connections sent %d plaintext StartupMessages", d)
			}
			if d := after.DirectTLS - first.DirectTLS; d != warm {
				t.Errorf("%d warm connections opened with a ClientHello, want %d", d, warm)
			}
			if first.DirectTLS != before.DirectTLS {
				t.Errorf("the first connection opened with a ClientHello")
			}
			got := tlsSpans(rec.Ended())
			want := []string{"false//postgresql ok"}
			for range warm {
				want = append(want, "true/learned/postgresql ok")
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("tls_handshake spans:\n got %v\nwant %v", got, want)
			}
		})
	}
}

// WithLearnedDirectTLS(false) keeps libpq's bytes: SSLRequest on every connection.
func TestDirectTLSLearningOff(t *testing.T) {
	srv, proxy := directServer(t)
	c := newConnector(t, proxyDSN(srv, proxy), pgconnector.WithLearnedDirectTLS(false))
	before := proxy.Stats()
	for range 3 {
		connectOnce(t, context.Background(), c)
	}
	if d := proxy.Stats().SSLRequests - before.SSLRequests; d != 3 {
		t.Errorf("%d SSLRequests for 3 connections, want 3", d)
	}
}

// A server that takes TLS after SSLRequest but not directly (a pooler put in front, here
// pgbouncer 1.18 with client TLS) after the host was learned: the connection that finds out goes
// on with SSLRequest on a new socket and does not fail; later ones use SSLRequest at once.
func TestDirectTLSPoolerPutInFront(t *testing.T) {
	srv, proxy := directServer(t)
	bouncer := harness.StartPgbouncerT(t, srv, harness.PgbouncerOptions{TLS: true, PoolMode: "session"})
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	host, port := proxy.Addr()
	dsn := fmt.Sprintf("host=%s port=%d user=%s dbname=%s connect_timeout=10", host, port, bouncer.TrustUser, bouncer.Database)
	c := newConnector(t, dsn, pgconnector.WithTracerProvider(tp))
	connectOnce(t, ctx, c) // learns
	connectOnce(t, ctx, c) // direct
	proxy.SetTarget(bouncer.Addr())
	before := proxy.Stats()
	connectOnce(t, ctx, c) // direct fails, SSLRequest on a new socket
	mid := proxy.Stats()
	if d := mid.Connections - before.Connections; d != 2 {
		t.Errorf("the connection that met the pooler opened %d sockets, want 2 (direct, then SSLRequest)", d)
	}
	if d := mid.SSLRequests - before.SSLRequests; d != 1 {
		t.Errorf("it sent %d SSLRequests, want 1", d)
	}
	if d := mid.StartupMessages - before.StartupMessages; d != 0 {
		t.Errorf("it sent %d plaintext StartupMessages: a failed direct handshake led to plaintext", d)
	}
	if got := known(c, proxy); got.Direct != negotiation.AnswerNo || got.SSL != negotiation.AnswerYes {
		t.Errorf("the cache knows %+v, want SSL yes, Direct no", got)
	}
	connectOnce(t, ctx, c)
	after := proxy.Stats()
	if d := after.Connections - mid.Connections; d != 1 || after.SSLRequests-mid.SSLRequests != 1 {
		t.Errorf("the next connection: %d sockets, %d SSLRequests, want 1 and 1", d, after.SSLRequests-mid.SSLRequests)
	}
	got := tlsSpans(rec.Ended())
	want := []string{"false//postgresql ok", "true/learned/postgresql ok", "true/learned/ fail", "false// ok", "false// ok"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("tls_handshake spans:\n got %v\nwant %v", got, want)
	}
}

// A server restarted without TLS after the host was learned: with sslmode=prefer the
// connection goes on (direct fails, SSLRequest gets the server's 'N', then plaintext, as libpq
// would from the start); with sslmode=require it fails as libpq's does, and no plaintext is
// ever sent.
func TestDirectTLSServerLosesTLS(t *testing.T) {
	srv, proxy := directServer(t)
	ctx := context.Background()
	prefer := newConnector(t, proxyDSN(srv, proxy))
	require := newConnector(t, proxyDSN(srv, proxy, "sslmode=require"))
	for _, c := range []*pgconnector.Connector{prefer, require} {
		connectOnce(t, ctx, c)
		if got := known(c, proxy); got.Direct != negotiation.AnswerYes {
			t.Fatalf("not learned: %+v", got)
		}
	}
	if err := srv.SetSSL(false); err != nil {
		t.Fatal(err)
	}
	before := proxy.Stats()
	connectOnce(t, ctx, prefer)
	mid := proxy.Stats()
	if d := mid.Connections - before.Connections; d != 2 {
		t.Errorf("prefer: %d sockets, want 2 (direct, then SSLRequest answered 'N' and plaintext on it)", d)
	}
	if d := mid.SSLRequests - before.SSLRequests; d != 1 {
		t.Errorf("prefer: %d SSLRequests, want 1", d)
	}
	conn, err := require.Connect(ctx)
	if err == nil {
		conn.Close()
		t.Fatal("sslmode=require connected to a server without TLS")
	}
	if !strings.Contains(err.Error(), "server does not support SSL") && !strings.Contains(err.Error(), "SSL") {
		t.Errorf("sslmode=require: %v", err)
	}
	after := proxy.Stats()
	if d := after.StartupMessages - mid.StartupMessages; d != 0 {
		t.Errorf("sslmode=require sent %d plaintext StartupMessages", d)
	}
	if d := after.SSLRequests - mid.SSLRequests; d != 1 {
		t.Errorf("sslmode=require: %d SSLRequests, want 1 (after the failed direct handshake)", d)
	}
}

// The cancel request of a session opened with learned direct TLS goes the same way: a
// ClientHello at once, and the statement is canceled.
func TestDirectTLSCancel(t *testing.T) {
	srv, proxy := directServer(t)
	c := newConnector(t, proxyDSN(srv, proxy))
	db := c.OpenDB()
	defer db.Close()
	ctx := context.Background()
	connectOnce(t, ctx, c)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	before := proxy.Stats()
	qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = conn.ExecContext(qctx, "SELECT pg_sleep(30)")
	if err == nil {
		t.Fatal("pg_sleep(30) was not canceled")
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("the cancel took %v", el)
	}
	after := proxy.Stats()
	opened := func(s harness.ProxyStats) int {
		return s.DirectTLS + s.SSLRequests + s.CancelRequests + s.StartupMessages
	}
	for deadline := time.Now().Add(5 * time.Second); opened(after) == opened(before) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond) // the cancel connection may still be on its way
		after = proxy.Stats()
	}
	if d := after.SSLRequests - before.SSLRequests; d != 0 || after.DirectTLS-before.DirectTLS != 1 {
		t.Errorf("the cancel connection sent %d SSLRequests and %d ClientHellos, want a ClientHello at once", d, after.DirectTLS-before.DirectTLS)
	}
	if d := after.CancelRequests - before.CancelRequests; d != 0 {
		t.Errorf("%d CancelRequests in the clear", d)
	}
}

// A server before PostgreSQL 17 selects no ALPN: it is remembered as taking no direct TLS, and
// every connection sends SSLRequest, as libpq's.
func TestDirectTLSNotLearnedBefore17(t *testing.T) {
	for _, major := range []int{15, 16} {
		t.Run(strconv.Itoa(major), func(t *testing.T) {
			srv := harness.StartT(t, harness.Options{Major: major, TLS: true})
			proxy := harness.ProxyT(t, srv.Addr())
			c := newConnector(t, proxyDSN(srv, proxy, "sslmode=require"))
			before := proxy.Stats()
			for range 3 {
				connectOnce(t, context.Background(), c)
			}
			if d := proxy.Stats().SSLRequests - before.SSLRequests; d != 3 {
				t.Errorf("%d SSLRequests for 3 connections, want 3", d)
			}
			if got := known(c, proxy); got.Direct != negotiation.AnswerNo {
				t.Errorf("the cache knows %+v, want Direct no (no ALPN selected)", got)
			}
		})
	}
}

// swallower is a middlebox in front of target that knows only SSLRequest: once swallow is set, a
// connection whose first byte opens a TLS record is held open and never answered; every other
// connection is passed through.
type swallower struct {
	l       net.Listener
	target  string
	swallow atomic.Bool
	held    atomic.Int32
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn
}

func newSwallower(t *testing.T, target string) *swallower {
	l, err := harness.Listen()
	if err != nil {
		t.Fatal(err)
	}
	s := &swallower{l: l, target: target}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.serve(c) }()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *swallower) serve(c net.Conn) {
	defer c.Close()
	var first [1]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		return
	}
	if first[0] == 0x16 && s.swallow.Load() {
		s.held.Add(1)
		_, _ = io.Copy(io.Discard, c) // until the client gives up
		return
	}
	srv, err := net.Dial("tcp", s.target)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.conns = append(s.conns, srv)
	s.mu.Unlock()
	defer srv.Close()
	if _, err := srv.Write(first[:]); err != nil {
		return
	}
	go func() { _, _ = io.Copy(c, srv); c.Close() }()
	_, _ = io.Copy(srv, c)
}

// A learned direct handshake that is never answered (a middlebox that knows only SSLRequest)
// waits half of connect_timeout, then the same connect goes on with SSLRequest and succeeds; the
// next ones use SSLRequest at once.
func TestDirectTLSSwallowed(t *testing.T) {
	srv := harness.StartT(t, harness.Options{Major: 18, TLS: true})
	mb := newSwallower(t, srv.Addr())
	host, port, _ := net.SplitHostPort(mb.l.Addr().String())
	dsn := fmt.Sprintf("host=%s port=%s user=%s password=%s dbname=%s connect_timeout=4", host, port, srv.User, srv.Password, srv.Database)
	c := newConnector(t, dsn)
	ctx := context.Background()
	connectOnce(t, ctx, c) // learns
	n, _ := strconv.Atoi(port)
	key := negotiation.Key{Host: host, Port: uint16(n)}
	if got := pgconnector.CacheOf(c).Known(key); got.Direct != negotiation.AnswerYes {
		t.Fatalf("not learned: %+v", got)
	}
	mb.swallow.Store(true)
	start := time.Now()
	connectOnce(t, ctx, c) // direct, swallowed; then SSLRequest
	if el := time.Since(start); el < time.Second || el > 4*time.Second {
		t.Errorf("the connect took %v, want about half of connect_timeout (2 s) and less than all of it", el)
	}
	if mb.held.Load() != 1 {
		t.Errorf("%d ClientHellos swallowed, want 1", mb.held.Load())
	}
	if got := pgconnector.CacheOf(c).Known(key); got.Direct != negotiation.AnswerNo {
		t.Errorf("the cache knows %+v, want Direct no", got)
	}
	start = time.Now()
	connectOnce(t, ctx, c)
	if mb.held.Load() != 1 {
		t.Errorf("the next connect sent a ClientHello again")
	}
}
