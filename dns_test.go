package pgconnector_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/tracing"
)

// The application's resolver (WithLookupFunc) is asked for the host name as written, once for
// five connects by default (the answer is remembered, WithDNSCacheTTL), at every connect with a
// TTL of zero (libpq's way); each real lookup, and only it, is a dns_lookup span.
func TestLookupFuncAndDNSCache(t *testing.T) {
	plain, _ := servers(t)
	const n = 5
	for _, tt := range []struct {
		name    string
		opts    []pgconnector.Option
		lookups int32
	}{
		{"default", nil, 1},
		{"WithDNSCacheTTL(0)", []pgconnector.Option{pgconnector.WithDNSCacheTTL(0)}, n},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var lookups atomic.Int32
			lookup := func(_ context.Context, host string) ([]string, error) {
				lookups.Add(1)
				if host != "db.pgconnector.test" {
					return nil, fmt.Errorf("unknown host %q", host)
				}
				return []string{plain.Host}, nil
			}
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			opts := append([]pgconnector.Option{pgconnector.WithLookupFunc(lookup), pgconnector.WithTracerProvider(tp)}, tt.opts...)
			c := newConnector(t, plain.DSN("host=db.pgconnector.test"), opts...)
			defer c.Close()
			connectN(t, c, n)
			if got := lookups.Load(); got != tt.lookups {
				t.Errorf("%d connects: %d lookups, want %d", n, got, tt.lookups)
			}
			var spans int32
			for _, s := range rec.Ended() {
				if s.Name() == tracing.SpanDNSLookup {
					spans++
				}
			}
			if spans != tt.lookups {
				t.Errorf("%d dns_lookup spans, want %d (one per lookup)", spans, tt.lookups)
			}
		})
	}
}
