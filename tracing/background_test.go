package tracing

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector/negotiation"
)

// What Detach gives background work is the connect span's identity and nothing else of the
// connect (neither its span state nor its metric state); a background lookup or recheck is a
// root span of its own linked to that connect span, with its lookup below it.
func TestBackgroundSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	m := NewMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())), Pool{Host: testHost, Port: testPort, Database: testDB})
	tr := Compose(m.Trace(), NewTrace(tp))

	cctx := tr.ConnectStart(context.Background(), negotiation.ConnectStartInfo{Host: testHost, Port: testPort, Database: testDB})
	connectSpan := trace.SpanFromContext(cctx).SpanContext()
	// From a step of the connect, as the negotiator calls it.
	dctx := tr.TCPConnectStart(cctx, negotiation.DialInfo{Host: testHost, Address: testIPv4 + ":5432", Method: negotiation.MethodPlain})
	trigger := tr.Detach(context.Background(), dctx)
	tr.TCPConnectDone(dctx, nil)
	if connect(trigger) != nil || trigger.Value(metricsConnectKey{}) != nil {
		t.Error("Detach's context holds the connect's state")
	}
	if got := trace.SpanContextFromContext(trigger); !got.Equal(connectSpan) {
		t.Errorf("Detach's context names span %v, want the connect span %v", got.SpanID(), connectSpan.SpanID())
	}

	for _, tt := range []struct {
		info negotiation.BackgroundStartInfo
		err  error
		name string
		want []attribute.KeyValue
	}{
		{negotiation.BackgroundStartInfo{Work: negotiation.BackgroundDNSLookup, Host: testHost, Port: testPort}, nil, SpanDNSRefresh,
			[]attribute.KeyValue{semconv.DBSystemNamePostgreSQL, semconv.ServerAddress(testHost), semconv.ServerPort(testPort)}},
		{negotiation.BackgroundStartInfo{Work: negotiation.BackgroundDownRecheck, Host: testHost, Port: testPort, Address: testIPv4 + ":5432"},
			errors.New("connect: connection refused"), SpanDownRecheck,
			[]attribute.KeyValue{semconv.DBSystemNamePostgreSQL, semconv.ServerAddress(testHost), semconv.ServerPort(testPort),
				semconv.NetworkTransportTCP, semconv.NetworkPeerAddress(testIPv4), semconv.NetworkPeerPort(5432),
				semconv.ErrorTypeKey.String(ErrorTypeDial)}},
	} {
		rec.Reset()
		tt.info.Trigger = trigger
		bctx := tr.BackgroundStart(context.Background(), tt.info)
		if tt.info.Work == negotiation.BackgroundDNSLookup {
			lctx := tr.DNSStart(bctx, negotiation.HostInfo{Host: testHost, Port: testPort})
			tr.DNSDone(lctx, negotiation.DNSDoneInfo{Addrs: []string{testIPv4}})
		}
		tr.BackgroundDone(bctx, negotiation.BackgroundDoneInfo{Work: tt.info.Work, Err: tt.err})

		spans := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			spans[s.Name()] = s
		}
		checkDocumented(t, rec.Ended())
		bg := spans[tt.name]
		if bg == nil {
			t.Fatalf("no %s span among %v", tt.name, spanNames(rec.Ended()))
		}
		if bg.Parent().IsValid() || bg.SpanContext().TraceID() == connectSpan.TraceID() {
			t.Errorf("%s: parent %v in trace %v: want a root span of a trace of its own", tt.name, bg.Parent(), bg.SpanContext().TraceID())
		}
		if links := bg.Links(); len(links) != 1 || !links[0].SpanContext.Equal(connectSpan) {
			t.Errorf("%s: links %+v, want one to the connect span", tt.name, links)
		}
		checkAttrs(t, tt.name, bg.Attributes(), tt.want)
		if got := bg.Status().Code; (tt.err != nil) != (got == codes.Error) {
			t.Errorf("%s: status %v", tt.name, bg.Status())
		}
		if tt.info.Work == negotiation.BackgroundDNSLookup {
			if s := spans[SpanDNSLookup]; s == nil || s.Parent().SpanID() != bg.SpanContext().SpanID() {
				t.Errorf("the background lookup's %s is not a child of %s", SpanDNSLookup, tt.name)
			}
		}
	}
	tr.ConnectDone(cctx, negotiation.ConnectDoneInfo{Host: testHost, Port: testPort, Method: negotiation.MethodPlain})
}
