package pgconnector_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/ngrok/sqlmw"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// BenchmarkStatementTracing is what statement tracing costs per query: `select 1` on one pooled
// connection to a loopback server, side by side (wall time, and the client's CPU time per query)
//
//   - without the interceptor (WithStatementSpans(false)): pgx's connection as it is;
//
//   - with the interceptor and no-op tracer and meter providers;
//
//   - with the interceptor and the SDK: every span recorded, batched to an exporter that
//     discards them (metrics no-op);
//
//   - the same with the SDK's meter provider too (db.client.operation.duration recorded);
//
//   - the same with a sqlmw.NullInterceptor (WithInterceptor): what an interceptor costs before
//     its own work.
//
//     go test -run '^$' -bench StatementTracing -benchmem -count 5 .
func BenchmarkStatementTracing(b *testing.B) {
	srv := harness.StartT(b, harness.Options{})
	sdkTP := func(b *testing.B) *sdktrace.TracerProvider {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		b.Cleanup(func() { tp.Shutdown(context.Background()) })
		return tp
	}
	for _, bc := range []struct {
		name string
		opts func(b *testing.B) []pgconnector.Option
	}{
		{"no-interceptor", func(*testing.B) []pgconnector.Option {
			return []pgconnector.Option{pgconnector.WithStatementSpans(false),
				pgconnector.WithTracerProvider(tracenoop.NewTracerProvider()), pgconnector.WithMeterProvider(metricnoop.NewMeterProvider())}
		}},
		{"interceptor-noop", func(*testing.B) []pgconnector.Option {
			return []pgconnector.Option{
				pgconnector.WithTracerProvider(tracenoop.NewTracerProvider()), pgconnector.WithMeterProvider(metricnoop.NewMeterProvider())}
		}},
		{"interceptor-sdk", func(b *testing.B) []pgconnector.Option {
			return []pgconnector.Option{pgconnector.WithTracerProvider(sdkTP(b)), pgconnector.WithMeterProvider(metricnoop.NewMeterProvider())}
		}},
		{"interceptor-sdk-metrics", func(b *testing.B) []pgconnector.Option {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			b.Cleanup(func() { mp.Shutdown(context.Background()) })
			return []pgconnector.Option{pgconnector.WithTracerProvider(sdkTP(b)), pgconnector.WithMeterProvider(mp)}
		}},
		{"interceptor-sdk-metrics-sqlmw", func(b *testing.B) []pgconnector.Option {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			b.Cleanup(func() { mp.Shutdown(context.Background()) })
			return []pgconnector.Option{pgconnector.WithTracerProvider(sdkTP(b)), pgconnector.WithMeterProvider(mp),
				pgconnector.WithInterceptor(sqlmw.NullInterceptor{})}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := pgconnector.New(srv.DSN(), bc.opts(b)...)
			if err != nil {
				b.Fatal(err)
			}
			db := c.OpenDB()
			defer db.Close()
			db.SetMaxOpenConns(1)
			ctx := context.Background()
			var one int
			if err := db.QueryRowContext(ctx, "select 1").Scan(&one); err != nil { // connect
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu := cpuTime()
			for b.Loop() {
				if err := db.QueryRowContext(ctx, "select 1").Scan(&one); err != nil {
					b.Fatal(err)
				}
			}
			// The client's CPU time (user and system, all threads of the test process): unlike the
			// wall time, it leaves out the server's work and the wait for it.
			b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the user and system CPU time of this process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
