package pgconnector_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
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
			opts := append([]pgconnector.Option{pgconnector.WithLookupFunc(lookup), pgconnector.WithTracerProvider(tp), recordingMeter()}, tt.opts...)
			c := newConnector(t, plain.DSN("host=db.pgconnector.test"), opts...)
			defer c.Close()
			connectN(t, c, n)
			if got := lookups.Load(); got != tt.lookups {
				t.Errorf("%d connects: %d lookups, want %d", n, got, tt.lookups)
			}
			var spans, aged int32
			for _, s := range rec.Ended() {
				switch s.Name() {
				case tracing.SpanDNSLookup:
					spans++
				case tracing.SpanTCPConnect:
					for _, kv := range s.Attributes() {
						if kv.Key == tracing.AddressAgeKey && kv.Value.AsFloat64() > 0 {
							aged++
						}
					}
				}
			}
			if spans != tt.lookups {
				t.Errorf("%d dns_lookup spans, want %d (one per lookup)", spans, tt.lookups)
			}
			// Every connect without a lookup of its own says how old its addresses are.
			if aged != n-tt.lookups {
				t.Errorf("%d tcp_connect spans with pgconnector.dns.age, want %d", aged, n-tt.lookups)
			}
		})
	}
}

// A first host that refuses, or whose SYNs are dropped (connect_timeout), costs the first
// connect a TCP connect; the next ones go to the second host at once (one tcp_connect span
// each). WithDownHostTTL(0) keeps libpq's order. A first host that resets the connection after
// accepting it answered: it is not remembered down, and every connect fails on it as libpq's
// does ("server closed the connection unexpectedly": no other host).
func TestDownHostTriedLast(t *testing.T) {
	plain, _ := servers(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // refuses from now on
	sink := harness.SYNSinkT(t, "127.0.0.1")
	_, sinkPort, _ := net.SplitHostPort(sink.Addr())
	resets := resettingListener(t)
	dsn := func(first string) string {
		return plain.DSN(fmt.Sprintf("host=127.0.0.1,%s port=%s,%d connect_timeout=1", plain.Host, first, plain.Port))
	}
	for _, tt := range []struct {
		name  string
		dsn   string
		opts  []pgconnector.Option
		dial  []int // tcp_connect spans per connect
		fails bool
	}{
		{"refused", dsn(fmt.Sprint(refused)), nil, []int{2, 1, 1, 1}, false},
		{"SYNs dropped", dsn(sinkPort), nil, []int{2, 1, 1, 1}, false},
		{"refused, WithDownHostTTL(0)", dsn(fmt.Sprint(refused)), []pgconnector.Option{pgconnector.WithDownHostTTL(0)}, []int{2, 2, 2, 2}, false},
		{"reset after accept", dsn(fmt.Sprint(resets)), nil, []int{1, 1, 1, 1}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			c := newConnector(t, tt.dsn, append([]pgconnector.Option{pgconnector.WithTracerProvider(tp), recordingMeter()}, tt.opts...)...)
			defer c.Close()
			var got []int
			seen := 0
			for i := range tt.dial {
				conn, err := c.Connect(context.Background())
				if err == nil {
					conn.Close()
				}
				if (err != nil) != tt.fails {
					t.Fatalf("connect %d: %v", i+1, err)
				}
				dials := 0
				for _, s := range rec.Ended()[seen:] {
					if s.Name() == tracing.SpanTCPConnect {
						dials++
					}
				}
				seen = len(rec.Ended())
				got = append(got, dials)
			}
			if !slices.Equal(got, tt.dial) {
				t.Errorf("tcp_connect spans per connect: %v, want %v", got, tt.dial)
			}
		})
	}
}

// resettingListener returns the port of a listener on 127.0.0.1 that accepts each connection,
// reads the client's first packet and resets the connection (SO_LINGER 0).
func resettingListener(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				c.Read(make([]byte, 8)) // SSLRequest, GSSENCRequest or a StartupMessage's start
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}
