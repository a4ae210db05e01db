package pgconnector_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/tracing"
)

// prepareCounter is a pgx tracer that counts the prepares of a connection: named ones (pgx's
// statement cache: a statement the server keeps) and unnamed ones (a describe of the text, as
// QueryExecModeDescribeExec and the description cache make).
type prepareCounter struct{ named, unnamed atomic.Int64 }

func (p *prepareCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (p *prepareCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (p *prepareCounter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, data pgx.TracePrepareStartData) context.Context {
	if data.Name != "" {
		p.named.Add(1)
	} else {
		p.unnamed.Add(1)
	}
	return ctx
}
func (p *prepareCounter) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// BenchmarkSQLCommenter is what the sqlcommenter comment costs: `select $1::int` with one value on
// one pooled loopback connection, each query under a sampled request span (SDK, spans batched to
// an exporter that discards them), in pgx's default mode (QueryExecModeCacheStatement) and with
// the simple protocol:
//
//   - off: no comment;
//   - uncached: tracing.SQLCommentUncached (the cached query is sent as written; the simple
//     protocol one is commented);
//   - naive: the text commented by the caller, as a commenter that ignores pgx's cache would:
//     each text is new to the statement cache;
//   - all: tracing.SQLCommentAll (the cached query runs with QueryExecModeDescribeExec).
//
// Beyond ns/op: cpu-ns/op (the client's CPU time) and server-cpu-ns/op (the backend's, from
// /proc, at the kernel's tick resolution), prepares/op (named statements pgx prepared for its cache), describes/op
// (unnamed prepares: a parse and describe round trip) and server-stmts (the statements the server
// held prepared on the connection at the end).
//
//	go test -run '^$' -bench SQLCommenter -benchmem .
func BenchmarkSQLCommenter(b *testing.B) {
	srv := harness.StartT(b, harness.Options{})
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { tp.Shutdown(context.Background()) })
	tracer := tp.Tracer("bench")
	for _, bc := range []struct {
		name   string
		mode   tracing.SQLCommentMode
		naive  bool
		simple bool
	}{
		{"cached/off", tracing.SQLCommentOff, false, false},
		{"cached/uncached", tracing.SQLCommentUncached, false, false},
		{"cached/naive", tracing.SQLCommentOff, true, false},
		{"cached/all", tracing.SQLCommentAll, false, false},
		{"simple/off", tracing.SQLCommentOff, false, true},
		{"simple/uncached", tracing.SQLCommentUncached, false, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			counter := &prepareCounter{}
			c, err := pgconnector.New(srv.DSN(),
				pgconnector.WithTracerProvider(tp), pgconnector.WithMeterProvider(metricnoop.NewMeterProvider()),
				pgconnector.WithSQLCommenter(bc.mode),
				pgconnector.WithBeforeConnect(func(_ context.Context, cfg *pgx.ConnConfig) error {
					cfg.Tracer = counter
					return nil
				}))
			if err != nil {
				b.Fatal(err)
			}
			db := c.OpenDB()
			defer db.Close()
			db.SetMaxOpenConns(1)
			var args []any
			if bc.simple {
				args = append(args, pgx.QueryExecModeSimpleProtocol)
			}
			args = append(args, 1)
			var one, backend int
			if err := db.QueryRowContext(context.Background(), "select $1::int", args...).Scan(&one); err != nil { // connect, cache
				b.Fatal(err)
			}
			if err := db.QueryRowContext(context.Background(), "select pg_backend_pid()").Scan(&backend); err != nil {
				b.Fatal(err)
			}
			cpu, serverCPU := cpuTime(), processCPU(backend)
			counter.named.Store(0)
			counter.unnamed.Store(0)
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				ctx, span := tracer.Start(context.Background(), "request")
				text := "select $1::int"
				if bc.naive {
					sc := span.SpanContext()
					text += " /*traceparent='00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01'*/"
				}
				if err := db.QueryRowContext(ctx, text, args...).Scan(&one); err != nil {
					b.Fatal(err)
				}
				span.End()
				n++
			}
			// CPU times leave out the wait for the other processes of a loaded machine.
			b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(n), "cpu-ns/op")
			if after := processCPU(backend); after >= 0 && serverCPU >= 0 {
				b.ReportMetric(float64((after-serverCPU).Nanoseconds())/float64(n), "server-cpu-ns/op")
			}
			b.ReportMetric(float64(counter.named.Load())/float64(n), "prepares/op")
			b.ReportMetric(float64(counter.unnamed.Load())/float64(n), "describes/op")
			var held int
			if err := db.QueryRowContext(context.Background(), "select count(*) from pg_prepared_statements").Scan(&held); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(held), "server-stmts")
		})
	}
}

// processCPU returns the user and system CPU time of process pid (Linux /proc/<pid>/stat, in
// ticks of 1/100 s), or -1 when it cannot be read.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14 of proc_pid_stat(5)
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
