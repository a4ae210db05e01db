package pgconnector_test

import (
	"context"
	"maps"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/dbconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/tracing"
)

// spanAttrs returns the attributes of s as strings.
func spanAttrs(s sdktrace.ReadOnlySpan) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}

// childrenOf returns the spans among spans whose parent is parent, in the order they ended.
func childrenOf(spans []sdktrace.ReadOnlySpan, parent trace.SpanID) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Parent().SpanID() == parent {
			out = append(out, s)
		}
	}
	return out
}

// A pool of OpenPool with the default WithStatementSpans: its statements are spans under the
// caller's, shaped by the connector's options (no db.query.text with WithQueryText(false), none
// for what WithSpanFilter drops, the attributes of WithAttributesFunc) and measured through its
// meter provider; each pool call is a pgxpool.acquire span under the caller's, and the one
// connect, the connector's, is under the first of them.
func TestOpenPoolStatementSpans(t *testing.T) {
	plain, _ := servers(t)
	rec, tp := newRecorder()
	reader := sdkmetric.NewManualReader()
	c := newConnector(t, plain.DSN("pool_max_conns=1"),
		pgconnector.WithTracerProvider(tp),
		pgconnector.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		pgconnector.WithQueryText(false),
		pgconnector.WithSpanFilter(func(_ context.Context, _, query string) bool { return !strings.Contains(query, "no_span") }),
		pgconnector.WithAttributesFunc(func(_ context.Context, op, _ string) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("app.op", op)}
		}),
	)
	p := openObservedPool(t, c)

	ctx, caller := tp.Tracer("test").Start(context.Background(), "caller")
	if _, err := p.Exec(ctx, "select 1 as no_span"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Exec(ctx, "select $1::int", 1); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := p.QueryRow(ctx, "select 2").Scan(&n); err != nil {
		t.Fatal(err)
	}
	caller.End()

	spans := rec.Ended()
	var acquires, selects []sdktrace.ReadOnlySpan
	for _, s := range childrenOf(spans, caller.SpanContext().SpanID()) {
		switch s.Name() {
		case tracing.SpanAcquire:
			acquires = append(acquires, s)
		case "SELECT":
			selects = append(selects, s)
		default:
			t.Errorf("span %s under the caller's", s.Name())
		}
	}
	if len(acquires) != 3 {
		t.Errorf("%d acquire spans under the caller's, want 3 (one per pool call); spans: %s", len(acquires), spanNames(spans))
	}
	if len(selects) != 2 {
		t.Fatalf("%d SELECT spans under the caller's, want 2 (the filtered one has none); spans: %s", len(selects), spanNames(spans))
	}
	want := with(connAttrs(plain), "SELECT", "", string(semconv.DBQuerySummaryKey), "SELECT", "app.op", "SELECT", string(semconv.DBResponseReturnedRowsKey), "1") // no db.query.text
	for _, s := range selects {
		if got := spanAttrs(s); !maps.Equal(got, want) {
			t.Errorf("SELECT span attributes %v, want %v", got, want)
		}
		if s.SpanKind() != trace.SpanKindClient {
			t.Errorf("SELECT span of kind %v", s.SpanKind())
		}
	}
	var connects []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == tracing.SpanConnect {
			connects = append(connects, s)
		}
	}
	if len(connects) != 1 {
		t.Fatalf("%d connect spans for one connection, want 1: pgx's handover of the session is not traced", len(connects))
	}
	if len(acquires) > 0 && connects[0].Parent().SpanID() != acquires[0].SpanContext().SpanID() {
		t.Errorf("the connect span's parent is not the first acquire span")
	}
	// Every call measured, the filtered one too.
	var measured float64
	for _, v := range points(t, collect(t, reader)[dbconv.ClientOperationDuration{}.Name()]) {
		measured += v
	}
	if measured != 3 {
		t.Errorf("%v measurements of db.client.operation.duration, want 3", measured)
	}
}

// WithStatementSpans(false): pgx's configurations have no statement tracer, and a pool of
// OpenPool makes neither statement nor acquire spans; the connect span stays, under the
// caller's.
func TestOpenPoolWithoutStatementSpans(t *testing.T) {
	plain, _ := servers(t)
	rec, tp := newRecorder()
	c := newConnector(t, plain.DSN(), pgconnector.WithTracerProvider(tp), pgconnector.WithStatementSpans(false))
	if tr := c.PgxConfig().Tracer; tr != nil {
		t.Errorf("PgxConfig's Tracer is %T, want nil", tr)
	}
	p := openObservedPool(t, c)
	ctx, caller := tp.Tracer("test").Start(context.Background(), "caller")
	if _, err := p.Exec(ctx, "select 1"); err != nil {
		t.Fatal(err)
	}
	conn, err := c.ConnectPgx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "select 2"); err != nil {
		t.Error(err)
	}
	conn.Close(ctx)
	caller.End()
	var connects int
	for _, s := range rec.Ended() {
		switch s.Name() {
		case tracing.SpanConnect:
			connects++
			if s.Parent().SpanID() != caller.SpanContext().SpanID() {
				t.Errorf("the connect span is not the caller's child")
			}
		case tracing.SpanAcquire, "SELECT":
			t.Errorf("WithStatementSpans(false): a %s span", s.Name())
		}
	}
	if connects != 2 {
		t.Errorf("%d connect spans, want 2 (the pool's connection, ConnectPgx's)", connects)
	}
}

// ConnectPgx with the connector's configuration, or a PgxConfig changed and composed with a
// tracer of the caller's: the statements are spans under the caller's with the connector's
// defaults (db.query.text), and the one connect span is the connector's; the caller's tracer
// sees the statements, not the connect.
func TestConnectPgxStatementSpans(t *testing.T) {
	plain, _ := servers(t)
	rec, tp := newRecorder()
	c := newConnector(t, plain.DSN(), pgconnector.WithTracerProvider(tp))
	ctx := context.Background()
	run := func(cfg *pgx.ConnConfig, query string) []sdktrace.ReadOnlySpan {
		t.Helper()
		before := len(rec.Ended())
		cctx, caller := tp.Tracer("test").Start(ctx, "caller")
		conn, err := c.ConnectPgx(cctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(cctx, query, 1); err != nil {
			t.Error(err)
		}
		conn.Close(ctx)
		caller.End()
		spans := rec.Ended()[before:]
		var connects int
		for _, s := range spans {
			if s.Name() == tracing.SpanConnect {
				connects++
			}
		}
		if connects != 1 {
			t.Errorf("%d connect spans for one ConnectPgx, want 1", connects)
		}
		return childrenOf(spans, caller.SpanContext().SpanID())
	}
	check := func(kids []sdktrace.ReadOnlySpan, text string) {
		t.Helper()
		var stmts int
		for _, s := range kids {
			if s.Name() != "SELECT" {
				continue
			}
			stmts++
			if got, want := spanAttrs(s), with(connAttrs(plain), "SELECT", text, string(semconv.DBQuerySummaryKey), "SELECT", string(semconv.DBResponseReturnedRowsKey), "1"); !maps.Equal(got, want) {
				t.Errorf("SELECT span attributes %v, want %v", got, want)
			}
		}
		if stmts != 1 {
			t.Errorf("%d SELECT spans under the caller's, want 1; spans: %s", stmts, spanNames(kids))
		}
	}

	check(run(nil, "select $1::int"), "select $1::int")

	tr := &tracer{}
	cfg := c.PgxConfig()
	cfg.RuntimeParams["application_name"] = "pgxstmt-test"
	cfg.Tracer = multitracer.New(cfg.Tracer, tr)
	check(run(cfg, "select $1::bigint"), "select $1::bigint")
	if n, q := tr.seen(); n != 0 || q != "select $1::bigint" {
		t.Errorf("the caller's tracer saw %d connects and %q, want 0 and the query", n, q)
	}
}
