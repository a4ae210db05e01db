package pgconnector_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// BenchmarkConnectTracing is what tracing the connect steps costs per connection: each
// iteration opens one connection with Connector.Connect and closes it, no query, with a warm
// decision cache (one connect before the timer starts), against an in-process fake server
// (harness.FakeServer: 'N' to SSLRequest and GSSENCRequest, trusts every startup). Side by
// side in one run:
//
//   - tracing=none: no tracing option, so the global tracer and meter providers of the time of
//     New; nothing in this test binary sets them, so they are OpenTelemetry's default
//     (non-recording spans), which the benchmark checks before it starts.
//   - tracing=noop: the no-op tracer and meter providers (trace/noop, metric/noop).
//   - tracing=sdk-batch: the SDK's TracerProvider, every span sampled (AlwaysSample) and
//     batched (WithBatcher, default queue) to an exporter that encodes them as JSON to
//     io.Discard as the stdout exporter does (jsonExporter); the no-op meter provider.
//   - tracing=sdk-batch+metrics: the same with the SDK's MeterProvider and a ManualReader (the
//     measurements are aggregated, never collected).
//
// Metrics: cpu-ns/op, the process's user+system CPU time (getrusage RUSAGE_SELF, cpuTime in
// stmt_bench_test.go) per connection, up to the end of the final ForceFlush, so it includes
// the batch processor's export work even where that happens after the timer stopped. The fake
// server runs in this process, so cpu-ns/op includes its work too (the same in every variant).
// For the SDK variants, spans/op is the spans the exporter received per connection and
// dropped/op the spans ended but never exported (the batch processor drops spans when its
// queue is full); a small span processor counts the ended spans. The benchmark fails if fewer
// spans than connections were exported: each connect makes at least postgresql.connect.
//
//	go test -run '^$' -bench ConnectTracing -benchmem .
func BenchmarkConnectTracing(b *testing.B) {
	fs := harness.FakeServerT(b)
	host, port := fs.Addr()
	dsn := fmt.Sprintf("host=%s port=%d user=bench dbname=bench connect_timeout=10", host, port)

	// sdkProvider returns the SDK's TracerProvider of the SDK variants, with the counters of
	// the spans it ended and exported; it is shut down when the benchmark run ends.
	sdkProvider := func(b *testing.B) (*sdktrace.TracerProvider, *countingExporter, *endCounter) {
		exp := &countingExporter{SpanExporter: &jsonExporter{enc: json.NewEncoder(io.Discard)}}
		ended := &endCounter{}
		tp := sdktrace.NewTracerProvider(
			sdktrace.WithBatcher(exp),
			sdktrace.WithSpanProcessor(ended),
			sdktrace.WithSampler(sdktrace.AlwaysSample()),
		)
		b.Cleanup(func() {
			if err := tp.Shutdown(context.Background()); err != nil {
				b.Errorf("tracer provider shutdown: %v", err)
			}
		})
		return tp, exp, ended
	}

	for _, bc := range []struct {
		name    string
		sdk     bool // SDK tracer provider
		metrics bool // SDK meter provider (else no-op); only with sdk
	}{
		{name: "tracing=none"},
		{name: "tracing=noop"},
		{name: "tracing=sdk-batch", sdk: true},
		{name: "tracing=sdk-batch+metrics", sdk: true, metrics: true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var opts []pgconnector.Option
			var tp *sdktrace.TracerProvider
			var exp *countingExporter
			var ended *endCounter
			switch {
			case bc.name == "tracing=none":
				// New takes otel.GetTracerProvider(): make sure it is a no-op one here.
				_, span := otel.GetTracerProvider().Tracer("bench").Start(context.Background(), "check")
				recording := span.IsRecording()
				span.End()
				if recording {
					b.Fatalf("the global TracerProvider records spans (%T): tracing=none would not be a baseline",
						otel.GetTracerProvider())
				}
			case !bc.sdk:
				opts = []pgconnector.Option{
					pgconnector.WithTracerProvider(tracenoop.NewTracerProvider()),
					pgconnector.WithMeterProvider(metricnoop.NewMeterProvider()),
				}
			default:
				tp, exp, ended = sdkProvider(b)
				var mp metric.MeterProvider = metricnoop.NewMeterProvider()
				if bc.metrics {
					smp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
					b.Cleanup(func() {
						if err := smp.Shutdown(context.Background()); err != nil {
							b.Errorf("meter provider shutdown: %v", err)
						}
					})
					mp = smp
				}
				opts = []pgconnector.Option{pgconnector.WithTracerProvider(tp), pgconnector.WithMeterProvider(mp)}
			}

			c, err := pgconnector.New(dsn, opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			connect := func() error {
				conn, err := c.Connect(ctx)
				if err != nil {
					return err
				}
				return conn.Close()
			}
			// Warm up: fills the decision cache (the probe).
			if err := connect(); err != nil {
				b.Fatal(err)
			}
			flush := func() {
				if tp != nil {
					if err := tp.ForceFlush(ctx); err != nil {
						b.Fatalf("force flush: %v", err)
					}
				}
			}
			flush() // the warm-up's spans are not counted
			var exported0, ended0 int64
			if exp != nil {
				exported0, ended0 = exp.spans.Load(), ended.spans.Load()
			}

			b.ReportAllocs()
			cpu0 := cpuTime()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := connect(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			flush()
			cpu1 := cpuTime()

			n := float64(b.N)
			b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/n, "cpu-ns/op")
			if exp != nil {
				exported, endedN := exp.spans.Load()-exported0, ended.spans.Load()-ended0
				b.ReportMetric(float64(exported)/n, "spans/op")
				b.ReportMetric(float64(endedN-exported)/n, "dropped/op")
				if exported < int64(b.N) {
					b.Fatalf("%d spans exported for %d connects (%d ended): want at least one (postgresql.connect) per connect",
						exported, b.N, endedN)
				}
			}
		})
	}
}

// jsonExporter writes each span as one JSON object, the work the OpenTelemetry stdout exporter
// (stdouttrace, with timestamps) does per span: the SDK's span stub (tracetest), encoded with
// encoding/json under a lock. It stands in for it so that the library's go.mod does not require
// an exporter for one benchmark.
type jsonExporter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (e *jsonExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	stubs := tracetest.SpanStubsFromReadOnlySpans(spans)
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range stubs {
		if err := e.enc.Encode(&stubs[i]); err != nil {
			return err
		}
	}
	return nil
}

func (*jsonExporter) Shutdown(context.Context) error { return nil }

// countingExporter forwards to the exporter it wraps and counts the spans it is given.
type countingExporter struct {
	sdktrace.SpanExporter
	spans atomic.Int64
}

func (e *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.spans.Add(int64(len(spans)))
	return e.SpanExporter.ExportSpans(ctx, spans)
}

// endCounter is a span processor that counts the spans ended, exported or not.
type endCounter struct{ spans atomic.Int64 }

func (*endCounter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (p *endCounter) OnEnd(sdktrace.ReadOnlySpan)                   { p.spans.Add(1) }
func (*endCounter) Shutdown(context.Context) error                  { return nil }
func (*endCounter) ForceFlush(context.Context) error                { return nil }
