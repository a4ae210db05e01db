package tracing

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// fakeConn answers every query with one row holding 1, without a server.
type fakeConn struct{}

func (fakeConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("not supported") }
func (fakeConn) Close() error                        { return nil }
func (fakeConn) Begin() (driver.Tx, error)           { return nil, errors.New("not supported") }
func (fakeConn) QueryContext(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
	return &fakeRows{}, nil
}

type fakeRows struct{ done bool }

func (*fakeRows) Columns() []string { return []string{"?column?"} }
func (*fakeRows) Close() error      { return nil }
func (r *fakeRows) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done = true
	dest[0] = int64(1)
	return nil
}

type fakeConnector struct{ wrap func(driver.Conn) driver.Conn }

func (c fakeConnector) Connect(context.Context) (driver.Conn, error) { return c.wrap(fakeConn{}), nil }
func (c fakeConnector) Driver() driver.Driver                        { return nil }

// BenchmarkStatementsOverhead is the client-side cost of the statement tracer alone: database/sql
// over a connection that answers without a server, bare and wrapped (see BenchmarkStatementTracing
// in the root package for the same against a real server).
func BenchmarkStatementsOverhead(b *testing.B) {
	benchmarkStatements(b, "select 1")
}

// BenchmarkStatementsOverheadTables is BenchmarkStatementsOverhead with a text that names tables
// (a span named "SELECT orders customers"): its summary is worked out once, at the first call.
func BenchmarkStatementsOverheadTables(b *testing.B) {
	benchmarkStatements(b, "select o.note from orders o join customers c on o.customer = c.id where o.id = 1")
}

func benchmarkStatements(b *testing.B, text string) {
	sdkTP := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { sdkTP.Shutdown(context.Background()) })
	sdkMP := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	wrapWith := func(cfg StatementConfig) func(driver.Conn) driver.Conn {
		cfg.Database, cfg.QueryText = testDB, true
		s := NewStatements(cfg)
		return func(c driver.Conn) driver.Conn { return s.WrapConn(c, testHost, testPort) }
	}
	for _, bc := range []struct {
		name string
		wrap func(driver.Conn) driver.Conn
	}{
		{"bare", func(c driver.Conn) driver.Conn { return c }},
		{"noop", wrapWith(StatementConfig{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider()})},
		{"sdk", wrapWith(StatementConfig{TracerProvider: sdkTP, MeterProvider: metricnoop.NewMeterProvider()})},
		{"sdk-metrics", wrapWith(StatementConfig{TracerProvider: sdkTP, MeterProvider: sdkMP})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			db := sql.OpenDB(fakeConnector{bc.wrap})
			defer db.Close()
			db.SetMaxOpenConns(1)
			ctx := context.Background()
			var one int
			b.ReportAllocs()
			for b.Loop() {
				if err := db.QueryRowContext(ctx, text).Scan(&one); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
