package tracing

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/pgconnector/pgconnector/negotiation"
)

// The refresh span's own keys are documented (docs/observability.md, Spans) with the others.
func init() {
	for _, k := range []attribute.Key{RefreshMethodKey, RefreshAgeKey, RefreshOutcomeKey} {
		documented[k] = true
	}
}

// A background refresh is a root span of its own, linked to the connect that started it, with
// its steps below it (the startup span with the database, as a connect's); it is not counted as
// a connect in the metrics.
func TestRefreshSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reader := sdkmetric.NewManualReader()
	m := NewMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Pool{Host: testHost, Port: testPort, Database: testDB})
	tr := Compose(m.Trace(), NewTrace(tp))

	ctx, caller := tp.Tracer("test").Start(context.Background(), "caller")
	cctx := tr.ConnectStart(ctx, negotiation.ConnectStartInfo{Host: testHost, Port: testPort, Database: testDB})

	for _, tt := range []struct {
		outcome negotiation.RefreshOutcome
		err     error
	}{
		{negotiation.RefreshEnabled, nil},
		{negotiation.RefreshInconclusive, errors.New("timeout expired (connect_timeout 1s)")},
	} {
		rec.Reset()
		rctx := tr.RefreshStart(context.Background(), negotiation.RefreshStartInfo{
			Host: testHost, Port: testPort, Database: testDB, Method: negotiation.MethodSSL, Age: 90 * time.Second, Trigger: cctx,
		})
		sctx := tr.SSLRequestStart(rctx, negotiation.DialInfo{Host: testHost, Address: testIPv4 + ":5432", Method: negotiation.MethodSSL})
		tr.SSLRequestDone(sctx, negotiation.RequestDoneInfo{Answer: negotiation.AnswerYes})
		uctx := tr.StartupStart(rctx, negotiation.DialInfo{Host: testHost, Address: testIPv4 + ":5432", Method: negotiation.MethodSSL})
		tr.StartupDone(uctx, negotiation.StartupDoneInfo{AuthMethod: "trust"})
		tr.RefreshDone(rctx, negotiation.RefreshDoneInfo{Host: testHost, Port: testPort, Method: negotiation.MethodSSL,
			Outcome: tt.outcome, Attempts: 1, Err: tt.err})

		spans := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			spans[s.Name()] = s
		}
		r := spans[SpanRefresh]
		if r == nil {
			t.Fatalf("%v: no %s span among %v", tt.outcome, SpanRefresh, spanNames(rec.Ended()))
		}
		checkDocumented(t, rec.Ended())
		if r.Parent().IsValid() {
			t.Errorf("%v: the refresh span has a parent %v: want a root", tt.outcome, r.Parent())
		}
		if links := r.Links(); len(links) != 1 || links[0].SpanContext.TraceID() != caller.SpanContext().TraceID() {
			t.Errorf("%v: links %+v, want one to the connect's trace", tt.outcome, links)
		}
		want := []attribute.KeyValue{
			semconv.DBSystemNamePostgreSQL, semconv.ServerAddress(testHost), semconv.ServerPort(testPort),
			semconv.DBNamespace(testDB), RefreshMethodKey.String("ssl"), RefreshAgeKey.Float64(90),
			RefreshOutcomeKey.String(tt.outcome.String()), AttemptsKey.Int(1),
		}
		if tt.err != nil {
			want = append(want, semconv.ErrorTypeKey.String(ErrorTypeConnectFailed))
		}
		checkAttrs(t, SpanRefresh, r.Attributes(), want)
		if got := r.Status().Code; (tt.err != nil) != (got == codes.Error) {
			t.Errorf("%v: status %v", tt.outcome, r.Status())
		}
		for _, name := range []string{SpanSSLRequest, SpanStartup} {
			s := spans[name]
			if s == nil || s.Parent().SpanID() != r.SpanContext().SpanID() {
				t.Errorf("%v: %s is not a child of the refresh span", tt.outcome, name)
			}
		}
		if s := spans[SpanStartup]; s != nil && !hasKey(s.Attributes(), semconv.DBNamespaceKey) {
			t.Errorf("%v: the refresh's startup span has no db.namespace", tt.outcome)
		}
	}
	// The connect that started the refreshes is the only one measured.
	tr.ConnectDone(cctx, negotiation.ConnectDoneInfo{Host: testHost, Port: testPort, Method: negotiation.MethodPlain})
	if got := points(t, collect(t, reader)["db.client.connection.create_time"]); len(got) != 1 || sum(got) != 1 {
		t.Errorf("connect durations %v: want one connect", got)
	}
}

func sum(p map[string]float64) float64 {
	var s float64
	for _, v := range p {
		s += v
	}
	return s
}
