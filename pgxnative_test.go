package pgconnector_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/internal/replay"
	"github.com/pgconnector/pgconnector/negotiation"
	"github.com/pgconnector/pgconnector/tracing"
)

// openPool opens c's pgxpool, with change applied to its configuration first, and closes it
// when the test ends.
func openPool(t *testing.T, c *pgconnector.Connector, change func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := c.PgxPoolConfig()
	if err != nil {
		t.Fatal(err)
	}
	if change != nil {
		change(cfg)
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// freshConn acquires a connection that the pool must open now: the idle ones are closed first.
func freshConn(t *testing.T, ctx context.Context, p *pgxpool.Pool) *pgxpool.Conn {
	t.Helper()
	for _, c := range p.AcquireAllIdle(ctx) {
		c.Conn().Close(ctx)
		c.Release()
	}
	conn, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

var tableSeq atomic.Int64

// exercise runs, on p, what an application does with pgx: queries, a transaction rolled back
// and one committed, COPY in both directions, LISTEN/NOTIFY, a batch, a CancelRequest on a busy
// connection (which stays usable) and a query ended by its context (whose connection pgx closes,
// sending a CancelRequest, and the pool discards).
func exercise(t *testing.T, p *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var n int
	if err := p.QueryRow(ctx, "select $1::int + 1", 41).Scan(&n); err != nil || n != 42 {
		t.Fatalf("query: %d, %v", n, err)
	}

	table := fmt.Sprintf("pgxnative_%d_%d", time.Now().UnixNano(), tableSeq.Add(1))
	if _, err := p.Exec(ctx, "create table "+table+" (a int, b text)"); err != nil {
		t.Fatal(err)
	}
	defer p.Exec(context.Background(), "drop table "+table)

	t.Run("transaction", func(t *testing.T) {
		tx, err := p.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "insert into "+table+" values (1, 'rolled back')"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "insert into "+table+" values (0, 'committed')")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		var b string
		if err := p.QueryRow(ctx, "select string_agg(b, ',') from "+table).Scan(&b); err != nil || b != "committed" {
			t.Errorf("after the transactions: %q, %v", b, err)
		}
	})

	t.Run("COPY", func(t *testing.T) {
		rows := make([][]any, 5000)
		for i := range rows {
			rows[i] = []any{i + 1, strings.Repeat("x", i%100)}
		}
		n, err := p.CopyFrom(ctx, pgx.Identifier{table}, []string{"a", "b"}, pgx.CopyFromRows(rows))
		if err != nil || n != int64(len(rows)) {
			t.Fatalf("CopyFrom: %d, %v", n, err)
		}
		conn, err := p.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		var out bytes.Buffer
		tag, err := conn.Conn().PgConn().CopyTo(ctx, &out, "copy (select a, b from "+table+" where a > 0 order by a) to stdout")
		if err != nil || tag.RowsAffected() != int64(len(rows)) {
			t.Fatalf("CopyTo: %v, %v", tag, err)
		}
		if lines := strings.Count(out.String(), "\n"); lines != len(rows) || !strings.HasPrefix(out.String(), "1\t\n2\tx\n") {
			t.Errorf("CopyTo gave %d lines starting %q", lines, out.String()[:min(20, out.Len())])
		}
	})

	t.Run("LISTEN/NOTIFY", func(t *testing.T) {
		listener, err := p.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer listener.Release()
		if _, err := listener.Exec(ctx, "listen pgxnative"); err != nil {
			t.Fatal(err)
		}
		defer listener.Exec(context.Background(), "unlisten *")
		if _, err := p.Exec(ctx, "select pg_notify('pgxnative', $1)", table); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		nt, err := listener.Conn().WaitForNotification(wctx)
		if err != nil || nt.Channel != "pgxnative" || nt.Payload != table {
			t.Fatalf("notification %+v, %v", nt, err)
		}
	})

	t.Run("batch", func(t *testing.T) {
		b := &pgx.Batch{}
		b.Queue("insert into "+table+" values ($1, $2)", -1, "batched")
		b.Queue("select count(*) from " + table)
		b.Queue("select $1::text", "third")
		res := p.SendBatch(ctx, b)
		if _, err := res.Exec(); err != nil {
			t.Fatal(err)
		}
		var count int
		if err := res.QueryRow().Scan(&count); err != nil || count != 5002 {
			t.Errorf("count %d, %v", count, err)
		}
		var s string
		if err := res.QueryRow().Scan(&s); err != nil || s != "third" {
			t.Errorf("third %q, %v", s, err)
		}
		if err := res.Close(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("CancelRequest", func(t *testing.T) {
		conn, err := p.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		var pid uint32
		if err := conn.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := conn.Exec(ctx, "select pg_sleep(60)")
			done <- err
		}()
		waitActive(t, ctx, p, pid, true)
		if err := conn.Conn().PgConn().CancelRequest(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err = <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("the query was not canceled")
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "57014" {
			t.Fatalf("canceled query: %v, want 57014", err)
		}
		var again uint32
		if err := conn.QueryRow(ctx, "select pg_backend_pid()").Scan(&again); err != nil || again != pid {
			t.Errorf("after the cancel: pid %d, %v (was %d)", again, err, pid)
		}
	})

	t.Run("query ended by its context", func(t *testing.T) {
		conn, err := p.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var pid uint32
		if err := conn.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		qctx, qcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = conn.Exec(qctx, "select pg_sleep(60)")
		qcancel()
		if err == nil {
			t.Fatal("the query outlived its context")
		}
		// pgx's default context watcher closes the connection (sending a CancelRequest first):
		// the pool discards it.
		closed := conn.Conn().IsClosed()
		conn.Release()
		if !closed {
			t.Error("pgx kept the connection of a query ended by its context")
		}
		waitActive(t, ctx, p, pid, false) // the CancelRequest stopped pg_sleep
		var one int
		if err := p.QueryRow(ctx, "select 1").Scan(&one); err != nil {
			t.Fatalf("the pool after a canceled query: %v", err)
		}
	})
}

// waitActive waits until the backend pid runs a statement (active) or no longer does.
func waitActive(t *testing.T, ctx context.Context, p *pgxpool.Pool, pid uint32, active bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		err := p.QueryRow(ctx, "select count(*) from pg_stat_activity where pid = $1 and state = 'active' and query like 'select pg_sleep%'", pid).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if (n > 0) == active {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d: active=%v after 20 s", pid, !active)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// transportOf reports how the session of conn is protected, from the server's views.
func transportOf(t *testing.T, conn interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) string {
	t.Helper()
	var gss, ssl bool
	err := conn.QueryRow(context.Background(), `select coalesce((select encrypted from pg_stat_gssapi where pid = pg_backend_pid()), false),
		coalesce((select ssl from pg_stat_ssl where pid = pg_backend_pid()), false)`).Scan(&gss, &ssl)
	switch {
	case err != nil:
		return "error: " + err.Error()
	case gss:
		return "gss"
	case ssl:
		return "tls"
	}
	return "plain"
}

// (1) A pgxpool over a server without TLS and sslmode=prefer: after the first connection every
// new one costs one backend and no SSLRequest (pgxpool alone: two backends), and pgx works over
// it as over its own connections.
func TestPgxPoolPlain(t *testing.T) {
	plain, _ := servers(t)
	dsn, px := proxied(t, plain, "pool_max_conns=4")
	c := newConnector(t, dsn)
	p := openPool(t, c, nil)
	if got := p.Config().MaxConns; got != 4 {
		t.Errorf("MaxConns %d, want 4 (pool_max_conns)", got)
	}
	ctx := context.Background()
	if tr := transportOf(t, p); tr != "plain" {
		t.Fatalf("transport %s", tr)
	}

	const n = 10
	mark, before := plain.LogMark(), px.Stats()
	for range n {
		conn := freshConn(t, ctx, p)
		conn.Release()
	}
	after := px.Stats()
	backends, err := plain.ConnectionsSince(mark)
	if err != nil {
		t.Fatal(err)
	}
	if backends != n || after.Connections-before.Connections != n || after.SSLRequests != before.SSLRequests {
		t.Errorf("%d warm pool connections: %d backends, %d TCP connections, %d SSLRequests; want %d, %d, 0",
			n, backends, after.Connections-before.Connections, after.SSLRequests-before.SSLRequests, n, n)
	}

	// pgxpool by itself, same string and proxy: two backends a connection.
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	mark = plain.LogMark()
	for range n {
		freshConn(t, ctx, raw).Release()
	}
	if backends, _ := plain.ConnectionsSince(mark); backends != 2*n {
		t.Errorf("pgxpool alone: %d backends for %d connections, expected %d", backends, n, 2*n)
	}

	before = px.Stats()
	exercise(t, p)
	if got := px.Stats().CancelRequests - before.CancelRequests; got < 2 {
		t.Errorf("%d CancelRequests reached the server, want 2 (one sent, one when pgx closed a connection)", got)
	}
}

// (2) A pgxpool over a TLS server (scram-sha-256): the sessions are TLS, and their
// CancelRequests too (pgx encrypts a cancel as its session): none reaches the server in the
// clear. A pool whose context watcher sends a CancelRequest keeps its connection after a query
// ended by its context.
func TestPgxPoolTLS(t *testing.T) {
	_, tlsSrv := servers(t)
	for _, tt := range []struct{ name, extra string }{
		{"prefer", "sslmode=prefer"},
		{"verify-full", "sslmode=verify-full sslrootcert=" + tlsSrv.CAFile},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dsn, px := proxied(t, tlsSrv, tt.extra)
			dsn += " host=localhost" // the proxy's address, by the name of the certificate
			p := openPool(t, newConnector(t, dsn), nil)
			for range 2 {
				conn := freshConn(t, context.Background(), p)
				if tr := transportOf(t, conn); tr != "tls" {
					t.Errorf("transport %s", tr)
				}
				conn.Release()
			}
			before := px.Stats()
			exercise(t, p)
			after := px.Stats()
			if after.CancelRequests != before.CancelRequests {
				t.Errorf("%d CancelRequests in the clear", after.CancelRequests-before.CancelRequests)
			}
			if after.SSLRequests-before.SSLRequests < 2 {
				t.Errorf("%d SSLRequests during the exercise: the cancels did not go over TLS", after.SSLRequests-before.SSLRequests)
			}
		})
	}

	t.Run("CancelRequestContextWatcherHandler", func(t *testing.T) {
		c := newConnector(t, tlsSrv.DSN("sslmode=require"))
		p := openPool(t, c, func(cfg *pgxpool.Config) {
			cfg.ConnConfig.BuildContextWatcherHandler = func(pg *pgconn.PgConn) ctxwatch.Handler {
				return &pgconn.CancelRequestContextWatcherHandler{Conn: pg, CancelRequestDelay: 0, DeadlineDelay: 10 * time.Second}
			}
		})
		ctx := context.Background()
		conn, err := p.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		var pid uint32
		if err := conn.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = conn.Exec(qctx, "select pg_sleep(60)")
		cancel()
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "57014" {
			t.Fatalf("query ended by its context: %v, want 57014", err)
		}
		var again uint32
		if err := conn.QueryRow(ctx, "select pg_backend_pid()").Scan(&again); err != nil || again != pid || conn.Conn().IsClosed() {
			t.Errorf("after the cancel: pid %d (was %d), %v", again, pid, err)
		}
	})
}

// (3) A pgxpool over a server whose pg_hba has only hostgssenc lines: the sessions are
// GSS-encrypted, and everything of exercise works over them, CancelRequests included (sent
// GSS-encrypted, as the session).
func TestPgxPoolGSSEncryption(t *testing.T) {
	lab := newKerberosLab(t)
	srv := lab.server(t, true, lab.gssHBA())
	if err := srv.ExecAdmin(context.Background(), "grant create on schema public to alice"); err != nil {
		t.Fatal(err)
	}
	px := harness.ProxyT(t, srv.Addr())
	_, port := px.Addr()
	dsn := strings.Replace(aliceDSN(srv, "localhost"), "port="+strconv.Itoa(srv.Port), "port="+strconv.Itoa(port), 1)
	p := openPool(t, lab.connector(t, dsn), nil)
	for range 2 { // cold, warm
		conn := freshConn(t, context.Background(), p)
		var encrypted bool
		var principal string
		err := conn.QueryRow(context.Background(), "select encrypted, principal from pg_stat_gssapi where pid = pg_backend_pid()").Scan(&encrypted, &principal)
		conn.Release()
		if err != nil || !encrypted || principal != "alice@"+lab.kdc.Realm {
			t.Fatalf("pg_stat_gssapi: encrypted=%v principal=%q, %v", encrypted, principal, err)
		}
	}
	before := px.Stats()
	exercise(t, p)
	after := px.Stats()
	if after.CancelRequests != before.CancelRequests || after.GSSENCRequests-before.GSSENCRequests < 2 {
		t.Errorf("during the exercise: %d CancelRequests in the clear, %d GSSENCRequests; want 0 and at least 2 (the cancels')",
			after.CancelRequests-before.CancelRequests, after.GSSENCRequests-before.GSSENCRequests)
	}
}

// (4) Several hosts with target_session_attrs: the pool's connections go where the connector's
// negotiation takes them (checked by the connector, not by a ValidateConnect of pgx's), and
// pgx's Config names the server connected to.
func TestPgxPoolTargetSessionAttrs(t *testing.T) {
	primary := harness.StartT(t, harness.Options{})
	standby := harness.StartStandbyT(t, primary)
	down := harness.FreePort(t)
	dsn := func(tsa string) string {
		return fmt.Sprintf("host=127.0.0.1,127.0.0.1,127.0.0.1 port=%d,%d,%d user=app dbname=app connect_timeout=5 target_session_attrs=%s",
			down, standby.Port, primary.Port, tsa)
	}
	for _, tt := range []struct {
		tsa      string
		port     int
		recovery bool
	}{
		{"read-write", primary.Port, false},
		{"primary", primary.Port, false},
		{"standby", standby.Port, true},
		{"read-only", standby.Port, true},
		{"any", standby.Port, true},
	} {
		t.Run(tt.tsa, func(t *testing.T) {
			c := newConnector(t, dsn(tt.tsa))
			p := openPool(t, c, nil)
			for range 2 {
				conn := freshConn(t, context.Background(), p)
				var recovery bool
				if err := conn.QueryRow(context.Background(), "select pg_is_in_recovery()").Scan(&recovery); err != nil {
					t.Fatal(err)
				}
				if recovery != tt.recovery || conn.Conn().Config().Port != uint16(tt.port) {
					t.Errorf("in recovery %v on port %d, want %v on %d", recovery, conn.Conn().Config().Port, tt.recovery, tt.port)
				}
				conn.Release()
			}
			if !tt.recovery {
				exercise(t, p)
			}
		})
	}
}

// tracer is a pgx tracer that counts connects and records the statements.
type tracer struct {
	mu       sync.Mutex
	connects []error
	queries  []string
}

func (tr *tracer) TraceConnectStart(ctx context.Context, _ pgx.TraceConnectStartData) context.Context {
	return ctx
}

func (tr *tracer) TraceConnectEnd(_ context.Context, d pgx.TraceConnectEndData) {
	tr.mu.Lock()
	tr.connects = append(tr.connects, d.Err)
	tr.mu.Unlock()
}

func (tr *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	tr.mu.Lock()
	tr.queries = append(tr.queries, d.SQL)
	tr.mu.Unlock()
	return ctx
}

func (tr *tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (tr *tracer) seen() (connects int, queries string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, err := range tr.connects {
		if err == nil {
			connects++
		}
	}
	return connects, strings.Join(tr.queries, ";")
}

// (5) One *pgx.Conn: ConnectPgx with the connector's settings or a configuration of PgxConfig
// with a tracer of the caller's, which sees the connect and the statements; a CancelRequest
// on it; pgx.ConnectConfig with the configuration alone refuses to connect, a pool of it does not
// need the connector's BeforeConnect.
func TestConnectPgx(t *testing.T) {
	_, tlsSrv := servers(t)
	c := newConnector(t, tlsSrv.DSN("sslmode=require"))
	ctx := context.Background()

	conn, err := c.ConnectPgx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tr := transportOf(t, conn); tr != "tls" {
		t.Errorf("transport %s", tr)
	}
	conn.Close(ctx)

	cfg := c.PgxConfig()
	tr := &tracer{}
	cfg.Tracer = tr
	cfg.RuntimeParams["application_name"] = "pgxnative-test"
	conn, err = c.ConnectPgx(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var app string
	if err := conn.QueryRow(ctx, "select current_setting('application_name')").Scan(&app); err != nil || app != "pgxnative-test" {
		t.Errorf("application_name %q, %v", app, err)
	}
	// Its connect hooks are not called: the connector's connect span covers the connect.
	if n, q := tr.seen(); n != 0 || q != "select current_setting('application_name')" {
		t.Errorf("the caller's tracer saw %d connects and %q, want 0 and the query", n, q)
	}
	if got := conn.PgConn().ParameterStatus("application_name"); got != "pgxnative-test" {
		t.Errorf("ParameterStatus(application_name) = %q", got)
	}

	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, "select pg_sleep(60)")
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if err := conn.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	if err := <-done; !errors.As(err, &pgErr) || pgErr.Code != "57014" {
		t.Fatalf("canceled: %v", err)
	}
	if err := conn.Ping(ctx); err != nil {
		t.Fatal(err)
	}

	_, err = pgx.ConnectConfig(ctx, c.PgxConfig())
	if err == nil || !strings.Contains(err.Error(), "connects only through its Connector") {
		t.Errorf("pgx.ConnectConfig(PgxConfig()): %v", err)
	}
	// A pool without the connector's BeforeConnect still connects through the negotiation
	// (its AfterNetConnect): sslmode=require holds.
	p := openPool(t, c, func(cfg *pgxpool.Config) { cfg.BeforeConnect = nil })
	if tr := transportOf(t, p); tr != "tls" {
		t.Errorf("a pool without the connector's BeforeConnect: transport %s, want tls", tr)
	}

	// The pool's configuration carries a tracer too.
	tr = &tracer{}
	p = openPool(t, c, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = tr })
	if _, err := p.Exec(ctx, "select 42"); err != nil {
		t.Fatal(err)
	}
	if n, q := tr.seen(); n != 0 || q != "select 42" {
		t.Errorf("the pool's tracer saw %d connects and %q, want 0 and the query", n, q)
	}

	// A BeforeConnect of the caller's, wrapping the connector's, sees the configuration before
	// the negotiation and changes what it uses.
	p = openPool(t, newConnector(t, tlsSrv.DSN("password=wrong")), func(cfg *pgxpool.Config) {
		connect := cfg.BeforeConnect
		cfg.BeforeConnect = func(ctx context.Context, cc *pgx.ConnConfig) error {
			cc.Password = tlsSrv.Password
			return connect(ctx, cc)
		}
	})
	if err := p.Ping(ctx); err != nil {
		t.Errorf("with the password set by BeforeConnect: %v", err)
	}
}

// (6) A failed negotiation is the error of pool.Acquire and of ConnectPgx as Connect returns it
// for database/sql: the connector's, naming the host and step, not wrapped by pgx.
func TestPgxConnectErrors(t *testing.T) {
	plain, tlsSrv := servers(t)
	dead := harness.FreePort(t)
	for _, tt := range []struct {
		name string
		dsn  string
		is   error
		text string // the start of the message
	}{
		{"wrong password", tlsSrv.DSN("password=wrong"), nil,
			fmt.Sprintf(`pgconnector: host 127.0.0.1:%d: startup: FATAL: password authentication failed for user "app" (SQLSTATE 28P01)`, tlsSrv.Port)},
		{"sslmode=require, no TLS", plain.DSN("sslmode=require"), negotiation.ErrSSLRequired,
			fmt.Sprintf("pgconnector: host 127.0.0.1:%d: ", plain.Port)},
		{"nothing listens", fmt.Sprintf("host=127.0.0.1 port=%d user=app connect_timeout=5", dead), nil,
			fmt.Sprintf("pgconnector: host 127.0.0.1:%d: TCP connect: ", dead)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newConnector(t, tt.dsn)
			_, sqlErr := c.Connect(context.Background())
			_, connErr := c.ConnectPgx(context.Background(), nil)
			p := openPool(t, c, nil)
			_, poolErr := p.Acquire(context.Background())
			if sqlErr == nil || !strings.HasPrefix(sqlErr.Error(), tt.text) {
				t.Fatalf("database/sql: %v, want %q...", sqlErr, tt.text)
			}
			for what, err := range map[string]error{"ConnectPgx": connErr, "pool.Acquire": poolErr} {
				var ce *negotiation.ConnectError
				if !errors.As(err, &ce) {
					t.Errorf("%s: %T %v, want a *negotiation.ConnectError", what, err, err)
					continue
				}
				if tt.is != nil && !errors.Is(err, tt.is) {
					t.Errorf("%s: %v is not %v", what, err, tt.is)
				}
				if err.Error() != sqlErr.Error() {
					t.Errorf("%s: %q\ndatabase/sql: %q", what, err, sqlErr)
				}
			}
		})
	}

	t.Run("pool key", func(t *testing.T) {
		c := newConnector(t, plain.DSN("pool_max_conns=many"))
		_, err := c.PgxPoolConfig()
		var pe *pgconnector.ParseError
		if !errors.As(err, &pe) || pe.Key != "pool_max_conns" || strings.Contains(err.Error(), plain.Password) {
			t.Errorf("%v, want a ParseError for pool_max_conns", err)
		}
	})
}

// (7) A pool closed (then its connector) leaves no goroutine and no socket, after connects,
// statements, cancels and connections closed by pgx.
func TestPgxPoolCloseLeavesNothing(t *testing.T) {
	plain, _ := servers(t)
	c0 := newConnector(t, plain.DSN()) // the servers' first connects and pgx's package state
	p0 := openPool(t, c0, nil)
	exercise(t, p0)
	p0.Close()
	goroutines, fds, _ := resources()

	c, err := pgconnector.New(plain.DSN("pool_max_conns=3 pool_min_conns=2"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := c.PgxPoolConfig()
	if err != nil {
		t.Fatal(err)
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, p)
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			if _, err := p.Exec(context.Background(), "select pg_sleep(0.05)"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	p.Close()
	c.Close()

	deadline := time.Now().Add(15 * time.Second)
	for {
		g, f, _ := resources()
		if g <= goroutines && f <= fds {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("after Close: %d goroutines (%d before), %d file descriptors (%d before):\n%s",
				g, goroutines, f, fds, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The connect spans of a pool's connections are those of database/sql's, step for step, cold
// and warm, failed or not, under the span of the Acquire.
func TestPgxPoolConnectSpans(t *testing.T) {
	plain, tlsSrv := servers(t)
	for _, tt := range []struct{ name, dsn string }{
		{"plain, prefer", plain.DSN()},
		{"TLS", tlsSrv.DSN()},
		{"wrong password", tlsSrv.DSN("password=wrong", "sslmode=require")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			trees := map[string][]string{}
			for _, via := range []string{"database/sql", "pgxpool"} {
				rec, tp := newRecorder()
				c := newConnector(t, tt.dsn, pgconnector.WithTracerProvider(tp))
				p := openPool(t, c, nil)
				for range 2 { // cold, warm
					ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
					if via == "database/sql" {
						if conn, err := c.Connect(ctx); err == nil {
							conn.Close()
						}
					} else {
						for _, idle := range p.AcquireAllIdle(ctx) {
							idle.Conn().Close(ctx)
							idle.Release()
						}
						if conn, err := p.Acquire(ctx); err == nil {
							conn.Release()
						}
					}
					parent.End()
					root := parent.SpanContext().SpanID()
					if via == "pgxpool" { // the connect is under the Acquire's span
						root = acquireSpan(t, rec.Ended(), root).SpanContext().SpanID()
					}
					trees[via] = append(trees[via], spanTree(t, rec.Ended(), root, treeKeys...))
				}
			}
			for i, what := range []string{"cold", "warm"} {
				sqlTree, poolTree := trees["database/sql"][i], trees["pgxpool"][i]
				if !strings.HasPrefix(poolTree, "postgresql.connect[") || poolTree != sqlTree {
					t.Errorf("%s: pgxpool's spans:\n%s\ndatabase/sql's:\n%s", what, poolTree, sqlTree)
				}
			}
		})
	}
}

// max_protocol_version=latest against a server of protocol 3.0: the server's
// NegotiateProtocolVersion is replayed to pgx, which reads it as the server's (the frontend pgx
// builds for the connection it returns sees it); min_protocol_version=3.2 fails in the
// negotiation, as pgx alone would fail. Concurrent CancelRequests on one connection race on
// nothing (-race).
func TestPgxProtocolVersion(t *testing.T) {
	plain, _ := servers(t)
	ctx := context.Background()
	c := newConnector(t, plain.DSN("max_protocol_version=latest"))
	cfg := c.PgxConfig()
	var mu sync.Mutex
	var recs []*replay.Recorder
	build := cfg.BuildFrontend
	cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		rec := replay.NewRecorder(r)
		mu.Lock()
		recs = append(recs, rec)
		mu.Unlock()
		return build(rec, w)
	}
	conn, err := c.ConnectPgx(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	mu.Lock()
	// The negotiation's attempt, then pgx's own connect.
	if len(recs) != 2 {
		t.Fatalf("%d frontends built, want 2", len(recs))
	}
	for i, rec := range recs {
		npv := rec.NegotiateProtocolVersion()
		if len(npv) < 9 || npv[0] != 'v' || binary.BigEndian.Uint32(npv[5:9])&0xffff != 0 { // PostgreSQL 15 sends 3.0 whole (0x00030000)
			t.Errorf("frontend %d saw NegotiateProtocolVersion %x, want one for 3.0", i, npv)
		}
	}
	mu.Unlock()
	if len(conn.PgConn().SecretKey()) != 4 {
		t.Errorf("secret key %x", conn.PgConn().SecretKey())
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := conn.PgConn().CancelRequest(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := conn.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(recs) != 2 {
		t.Errorf("%d frontends built after the cancels: a CancelRequest used the caller's BuildFrontend", len(recs))
	}
	mu.Unlock()

	_, err = newConnector(t, plain.DSN("min_protocol_version=3.2")).ConnectPgx(ctx, nil)
	// libpq 18's words (fe-protocol3.c, pqGetNegotiateProtocolVersion3), not pgx's.
	var ce *negotiation.ConnectError
	var pv *negotiation.ProtocolVersionError
	if !errors.As(err, &ce) || !errors.As(err, &pv) || !strings.Contains(err.Error(), `server only supports protocol version 3.0, but "min_protocol_version" was set to 3.2`) {
		t.Errorf("min_protocol_version=3.2 against 3.0: %v", err)
	}
}

// WithBeforeConnect serves the attempts of pgx's connections as those of database/sql's (after
// the configuration's own BeforeConnect), and its error stops them the same way.
func TestPgxWithBeforeConnect(t *testing.T) {
	_, tlsSrv := servers(t)
	ctx := context.Background()
	var calls atomic.Int32
	c := newConnector(t, tlsSrv.DSN("password=wrong", "sslmode=require"), pgconnector.WithBeforeConnect(func(ctx context.Context, cfg *pgx.ConnConfig) error {
		calls.Add(1)
		if cfg.Password != "from the pool's BeforeConnect" {
			return fmt.Errorf("password %q", cfg.Password)
		}
		cfg.Password = tlsSrv.Password
		return nil
	}))
	p := openPool(t, c, func(cfg *pgxpool.Config) {
		connect := cfg.BeforeConnect
		cfg.BeforeConnect = func(ctx context.Context, cc *pgx.ConnConfig) error {
			cc.Password = "from the pool's BeforeConnect"
			return connect(ctx, cc)
		}
	})
	if err := p.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("WithBeforeConnect called %d times for one connect", n)
	}

	// Without the pool's hook, the connector's fails: the same error as for database/sql.
	_, sqlErr := c.Connect(ctx)
	_, pgxErr := c.ConnectPgx(ctx, nil)
	var abort *negotiation.AbortError
	if sqlErr == nil || pgxErr == nil || pgxErr.Error() != sqlErr.Error() || !errors.As(pgxErr, &abort) || !strings.Contains(pgxErr.Error(), "WithBeforeConnect") {
		t.Errorf("ConnectPgx: %v\ndatabase/sql: %v", pgxErr, sqlErr)
	}
}

// tracing.NewPgxTracer set on the pool's configuration: the statements are its spans, under the
// caller's; the connect is the connector's span with its steps.
func TestPgxPoolWithPgxTracer(t *testing.T) {
	plain, _ := servers(t)
	rec, tp := newRecorder()
	c := newConnector(t, plain.DSN("sslmode=disable"), pgconnector.WithTracerProvider(tp))
	p := openPool(t, c, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.Tracer = tracing.NewPgxTracer(tracing.StatementConfig{TracerProvider: tp, QueryText: true})
	})
	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	if _, err := p.Exec(ctx, "select 1"); err != nil {
		t.Fatal(err)
	}
	parent.End()
	tree := spanTree(t, rec.Ended(), parent.SpanContext().SpanID(), "db.query.text", "pgconnector.transport")
	for _, want := range []string{
		"postgresql.connect[pgconnector.transport=plain]\n  postgresql.gss_credentials\n  event decision\n  postgresql.tcp_connect\n  postgresql.startup\n",
		"SELECT[db.query.text=select ?]\n",
	} {
		if !strings.Contains(tree, want) {
			t.Errorf("spans:\n%s\nwant among them:\n%s", tree, want)
		}
	}
	connects := 0
	for _, s := range rec.Ended() {
		if s.Name() == tracing.SpanConnect {
			connects++
		}
	}
	if connects != 1 {
		t.Errorf("%d connect spans for one connection: pgx's handover of the session is traced too", connects)
	}
}
