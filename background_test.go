package pgconnector_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/tracing"
)

// Work a connect starts in the background, a lookup of the host name in the last fifth of its
// remembered answer's life and the dial of an address remembered down, runs beside that connect
// and the ones after it and may outlive them: it takes nothing of the connect. With recording
// tracer and meter providers, whose hooks keep per-connect state in the connect's context (the
// host the connect dialed last, for pgconnector.connect.step.duration), a background step that
// ran under the connect's context wrote that state while the connect did (the race detector
// fails the test). Its span is a root span of its own, linked to the connect's span: no step of
// it is in the connect's trace.
func TestBackgroundWorkIsDetached(t *testing.T) {
	srv := harness.FakeServerT(t)
	ip, port := srv.Addr()
	const ttl = 2 * time.Second

	t.Run("DNS lookup", func(t *testing.T) {
		var mu sync.Mutex
		var answered []time.Time
		lookup := func(_ context.Context, host string) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			answered = append(answered, time.Now())
			return []string{ip}, nil
		}
		o := newObserved(t, fmt.Sprintf("host=db.pgconnector.test port=%d user=u dbname=d sslmode=disable", port),
			pgconnector.WithLookupFunc(lookup), pgconnector.WithDNSCacheTTL(ttl))
		defer o.c.Close()
		connectOnce(t, context.Background(), o.c)
		mu.Lock()
		first := answered[0]
		mu.Unlock()
		// In the answer's last fifth (1.6 s to 2 s old): the connect goes on with it while the
		// name is looked up again.
		waitUntil(first.Add(ttl - ttl/5 + 100*time.Millisecond))
		connectOnce(t, context.Background(), o.c)
		bg := waitSpan(t, o, tracing.SpanDNSRefresh)
		checkDetached(t, o, bg)
		var lookups int
		for _, s := range o.rec.Ended() {
			if s.Name() == tracing.SpanDNSLookup && s.Parent().SpanID() == bg.SpanContext().SpanID() {
				lookups++
			}
		}
		if lookups != 1 {
			t.Errorf("%d dns_lookup spans under %s, want 1", lookups, tracing.SpanDNSRefresh)
		}
	})

	t.Run("recheck of an address remembered down", func(t *testing.T) {
		ln, err := harness.Listen()
		if err != nil {
			t.Fatal(err)
		}
		refused := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		o := newObserved(t, fmt.Sprintf("host=%s,%s port=%d,%d user=u dbname=d sslmode=disable", ip, ip, refused, port),
			pgconnector.WithDownHostTTL(ttl))
		defer o.c.Close()
		start := time.Now()
		connectOnce(t, context.Background(), o.c) // remembers the first host down
		// Half the memory's life later: the connect that puts the address last dials it again
		// in the background, and goes on with the second host.
		waitUntil(start.Add(ttl/2 + 100*time.Millisecond))
		connectOnce(t, context.Background(), o.c)
		bg := waitSpan(t, o, tracing.SpanDownRecheck)
		checkDetached(t, o, bg)
		if got := attr(bg.Attributes(), semconv.NetworkPeerPortKey); got != strconv.Itoa(refused) {
			t.Errorf("%s: network.peer.port %q, want %d", tracing.SpanDownRecheck, got, refused)
		}
		if bg.Status().Code != codes.Error {
			t.Errorf("%s of a refusing address: status %v, want Error", tracing.SpanDownRecheck, bg.Status())
		}
	})
}

// recordingMeter is WithMeterProvider with a recording provider: the tests of background work
// run with recording tracer and meter providers, whose hooks keep per-connect state that the
// work must not touch.
func recordingMeter() pgconnector.Option {
	return pgconnector.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))
}

// waitSpan waits (at most 10 s) for the first ended span named name.
func waitSpan(t *testing.T, o *observed, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, s := range o.rec.Ended() {
			if s.Name() == name {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s span after 10 s", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkDetached checks that bg, the span of background work the second connect started, is a
// root span linked to that connect's span, and that no lookup is in the connect's trace.
func checkDetached(t *testing.T, o *observed, bg sdktrace.ReadOnlySpan) {
	t.Helper()
	var connects []sdktrace.ReadOnlySpan
	for _, s := range o.rec.Ended() {
		if s.Name() == tracing.SpanConnect {
			connects = append(connects, s)
		}
	}
	if len(connects) != 2 {
		t.Fatalf("%d connect spans, want 2", len(connects))
	}
	trigger := connects[1].SpanContext()
	if bg.Parent().IsValid() {
		t.Errorf("%s: parent %v, want none (a root span)", bg.Name(), bg.Parent().SpanID())
	}
	if bg.SpanContext().TraceID() == trigger.TraceID() {
		t.Errorf("%s is in the trace of the connect that started it", bg.Name())
	}
	if links := bg.Links(); len(links) != 1 || !links[0].SpanContext.Equal(trigger) {
		t.Errorf("%s: links %v, want one to the connect span %v", bg.Name(), links, trigger.SpanID())
	}
	for _, s := range o.rec.Ended() {
		if s.SpanContext().TraceID() == trigger.TraceID() && s.Name() == tracing.SpanDNSLookup {
			t.Errorf("a dns_lookup span in the trace of the connect that used a remembered answer")
		}
	}
}
