package pgconnector_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgxpool"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/dbconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/tracing"
)

// acquireSpan returns the one pgxpool.acquire span among spans whose parent is parent.
func acquireSpan(t *testing.T, spans []sdktrace.ReadOnlySpan, parent trace.SpanID) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == tracing.SpanAcquire && s.Parent().SpanID() == parent {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d %s spans under the caller's, want 1; spans: %s", len(found), tracing.SpanAcquire, spanNames(spans))
	}
	return found[0]
}

// openObservedPool opens c's pgxpool (OpenPool) and closes it, then c, when the test ends.
func openObservedPool(t *testing.T, c *pgconnector.Connector) *pgxpool.Pool {
	t.Helper()
	t.Cleanup(func() { c.Close() })
	p, err := c.OpenPool(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// An Acquire under a caller's span is a pgxpool.acquire span with the connection's attributes,
// parent of the connect span of the connection it opened; a warm one has no connect under it; an
// Acquire that times out fails its span, which has the server of the connection string's one host; none without a caller's span, nor with
// WithStatementSpans(false).
func TestPgxPoolAcquireSpans(t *testing.T) {
	plain, _ := servers(t)
	rec, tp := newRecorder()
	c := newConnector(t, plain.DSN("pool_max_conns=1"), pgconnector.WithTracerProvider(tp))
	p := openObservedPool(t, c)
	caller := func(f func(ctx context.Context)) trace.SpanID {
		ctx, span := tp.Tracer("test").Start(context.Background(), "caller")
		f(ctx)
		span.End()
		return span.SpanContext().SpanID()
	}
	acquire := func(ctx context.Context) {
		conn, err := p.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conn.Release()
	}

	// Cold: the Acquire opens the connection.
	id := caller(acquire)
	s := acquireSpan(t, rec.Ended(), id)
	if s.SpanKind() != trace.SpanKindInternal || s.Status().Code != 0 {
		t.Errorf("%s: kind %v, status %v", s.Name(), s.SpanKind(), s.Status())
	}
	want := connAttrs(plain)
	got := map[string]string{}
	for _, kv := range s.Attributes() {
		got[string(kv.Key)] = kv.Value.Emit()
	}
	if !maps.Equal(got, want) {
		t.Errorf("%s attributes %v, want %v", s.Name(), got, want)
	}
	var connects int
	for _, sp := range rec.Ended() {
		if sp.Name() == tracing.SpanConnect {
			connects++
			if sp.Parent().SpanID() != s.SpanContext().SpanID() {
				t.Errorf("the connect span's parent is %v, not the acquire span %v", sp.Parent().SpanID(), s.SpanContext().SpanID())
			}
		}
	}
	if connects != 1 {
		t.Errorf("%d connect spans, want 1", connects)
	}

	// Warm: no connect under it.
	id = caller(acquire)
	warm := acquireSpan(t, rec.Ended(), id)
	for _, sp := range rec.Ended() {
		if sp.Parent().SpanID() == warm.SpanContext().SpanID() {
			t.Errorf("a warm Acquire has a child span %s", sp.Name())
		}
	}

	// Exhausted: the Acquire ends with its context's deadline.
	held, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	id = caller(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		if _, err := p.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Acquire of an exhausted pool: %v, want a deadline error", err)
		}
	})
	failed := acquireSpan(t, rec.Ended(), id)
	held.Release()
	if failed.Status().Code != 1 { // codes.Error
		t.Errorf("a timed-out Acquire's span has status %v", failed.Status())
	}
	var errType string
	for _, kv := range failed.Attributes() {
		if kv.Key == semconv.ErrorTypeKey {
			errType = kv.Value.Emit()
		}
	}
	if errType != tracing.ErrorTypeTimeout {
		t.Errorf("error.type %q, want %q", errType, tracing.ErrorTypeTimeout)
	}
	// A connection string of one host: the server of a failed Acquire too, from its start.
	server := map[string]string{}
	for _, kv := range failed.Attributes() {
		if k := string(kv.Key); k == "server.address" || k == "server.port" {
			server[k] = kv.Value.Emit()
		}
	}
	if server["server.address"] != want["server.address"] || server["server.port"] != want["server.port"] {
		t.Errorf("the failed Acquire's server %v, want that of the connection string's one host (%s:%s)", server, want["server.address"], want["server.port"])
	}

	// No caller's span: no acquire span.
	before := len(rec.Ended())
	acquire(context.Background())
	for _, sp := range rec.Ended()[before:] {
		t.Errorf("span %s without a caller's span", sp.Name())
	}

	// Composed with a tracer of the caller's through multitracer, as PgxPoolConfig says: the
	// acquire span, the connector's statement span (one), and the caller's tracer sees the
	// statement.
	cfg, err := c.PgxPoolConfig()
	if err != nil {
		t.Fatal(err)
	}
	tr := &tracer{}
	cfg.ConnConfig.Tracer = multitracer.New(cfg.ConnConfig.Tracer, tr)
	mp, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Close()
	id = caller(func(ctx context.Context) {
		if err := mp.QueryRow(ctx, "select 1").Scan(new(int)); err != nil {
			t.Error(err)
		}
	})
	acquireSpan(t, rec.Ended(), id)
	var selects int
	for _, sp := range rec.Ended() {
		if sp.Name() == "SELECT" && sp.Parent().SpanID() == id {
			selects++
		}
	}
	if selects != 1 {
		t.Errorf("multitracer: %d SELECT spans under the caller's, want 1", selects)
	}
	if n, q := tr.seen(); n != 0 || q != "select 1" {
		t.Errorf("multitracer: the caller's tracer saw %d connects and %q, want 0 and the query", n, q)
	}

	// WithStatementSpans(false): the connect is the caller's child.
	rec2, tp2 := newRecorder()
	c2 := newConnector(t, plain.DSN(), pgconnector.WithTracerProvider(tp2), pgconnector.WithStatementSpans(false))
	p2 := openObservedPool(t, c2)
	ctx, span := tp2.Tracer("test").Start(context.Background(), "caller")
	conn, err := p2.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn.Release()
	span.End()
	connects = 0
	for _, sp := range rec2.Ended() {
		switch sp.Name() {
		case tracing.SpanAcquire:
			t.Error("WithStatementSpans(false): an acquire span")
		case tracing.SpanConnect:
			connects++
			if sp.Parent().SpanID() != span.SpanContext().SpanID() {
				t.Error("WithStatementSpans(false): the connect span is not the caller's child")
			}
		}
	}
	if connects != 1 {
		t.Errorf("WithStatementSpans(false): %d connect spans, want 1", connects)
	}
}

// The pool metrics of OpenPool under the names of OpenDB's: connections used, idle and the
// maximum as connections are acquired and released, a pending Acquire of an exhausted pool, the
// wait of each Acquire, a timeout; nothing after Close.
func TestPgxPoolMetrics(t *testing.T) {
	plain, _ := servers(t)
	const max = 3
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	c := newConnector(t, plain.DSN("pool_max_conns="+strconv.Itoa(max), "pool_min_idle_conns=1"), pgconnector.WithMeterProvider(mp))
	p := openObservedPool(t, c)
	ctx := context.Background()

	pool := fmt.Sprintf("db.client.connection.pool.name=%s:%d/%s", plain.Host, plain.Port, plain.Database)
	idle, used := pool+",db.client.connection.state=idle", pool+",db.client.connection.state=used"
	count, maxName := dbconv.ClientConnectionCountObservable{}.Name(), dbconv.ClientConnectionMaxObservable{}.Name()
	pending := dbconv.ClientConnectionPendingRequestsObservable{}.Name()
	check := func(name string, want map[string]float64) {
		t.Helper()
		if p := points(t, collect(t, reader)[name]); !maps.Equal(p, want) {
			t.Errorf("%s:\n %v\nwant\n %v", name, p, want)
		}
	}

	// pool_min_idle_conns=1 opens one in the background: wait for it, so that counts are exact.
	for deadline := time.Now().Add(10 * time.Second); p.Stat().IdleConns() < 1 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	var conns []*pgxpool.Conn
	for range max - 1 {
		conn, err := p.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
	}
	want := map[string]float64{idle: float64(p.Stat().IdleConns()), used: max - 1}
	check(count, want)
	check(maxName, map[string]float64{pool: max})
	check(dbconv.ClientConnectionIdleMinObservable{}.Name(), map[string]float64{pool: 1})
	check(pending, map[string]float64{pool: 0})

	// Exhaust the pool: one more Acquire waits.
	last, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conns = append(conns, last)
	check(count, map[string]float64{idle: 0, used: max})
	waitsBefore := points(t, collect(t, reader)[tracing.MetricConnectionWaits])[pool]
	done := make(chan error)
	go func() {
		conn, err := p.Acquire(ctx)
		if err == nil {
			conn.Release()
		}
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if points(t, collect(t, reader)[pending])[pool] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no pending request observed")
		}
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	conns[0].Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	check(pending, map[string]float64{pool: 0})
	if w := points(t, collect(t, reader)[tracing.MetricConnectionWaits])[pool]; w != waitsBefore+1 {
		t.Errorf("%s = %v, want %v", tracing.MetricConnectionWaits, w, waitsBefore+1)
	}
	if w := points(t, collect(t, reader)[tracing.MetricConnectionWaitTime])[pool]; w < 0.02 {
		t.Errorf("%s = %vs, want at least the 20ms waited", tracing.MetricConnectionWaitTime, w)
	}

	// A timeout while exhausted.
	held, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	if _, err := p.Acquire(tctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire of an exhausted pool: %v", err)
	}
	cancel()
	held.Release()
	for _, conn := range conns[1:] {
		conn.Release()
	}
	check(dbconv.ClientConnectionTimeouts{}.Name(), map[string]float64{pool: 1})
	// Every Acquire's wait (histogram count): max-1, the last, the waiter, held, the timeout.
	check(dbconv.ClientConnectionWaitTime{}.Name(), map[string]float64{pool: max - 1 + 1 + 1 + 1 + 1})
	// Every Release's use: all but the timed-out one.
	check(dbconv.ClientConnectionUseTime{}.Name(), map[string]float64{pool: max - 1 + 1 + 1 + 1})
	check(count, map[string]float64{idle: max, used: 0})

	p.Close()
	c.Close()
	got := collect(t, reader)
	for _, name := range []string{count, maxName, pending, tracing.MetricConnectionWaits} {
		if m, ok := got[name]; ok && len(points(t, m)) != 0 {
			t.Errorf("%s still observed after Close: %v", name, points(t, m))
		}
	}
}
