package e2e

import (
	"context"
	"reflect"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// TestHarnessJaegerOTLP sends spans to both OTLP receivers (HTTP and gRPC) of the harness's
// Jaeger and reads them back through its query API (Jaeger.WaitForSpans). It is here rather than
// in internal/harness, whose other Jaeger tests are there (TestJaeger), because it needs the OTLP
// exporters, which the library module does not require.
func TestHarnessJaegerOTLP(t *testing.T) {
	j := harness.StartJaegerT(t) // may build Jaeger first: see the package comment
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	since := time.Now().Add(-time.Second)

	httpExp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(j.OTLPHTTPEndpoint()), otlptracehttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	grpcExp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(j.OTLPGRPCEndpoint()), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		service string
		exp     sdktrace.SpanExporter
	}{
		{"harness-otlp-http", httpExp},
		{"harness-otlp-grpc", grpcExp},
	} {
		t.Run(tc.service, func(t *testing.T) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tc.exp),
				sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", tc.service))))
			tr := tp.Tracer("harness-test")
			pctx, parent := tr.Start(ctx, "parent", trace.WithSpanKind(trace.SpanKindServer))
			_, child := tr.Start(pctx, "child", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
				attribute.String("s", "x"), attribute.Int("port", 5432), attribute.Bool("b", true),
				attribute.Float64("f", 0.25), attribute.StringSlice("list", []string{"a", "b"})))
			child.SetStatus(codes.Error, "it failed")
			child.End()
			parent.End()
			if err := tp.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}

			spans, err := j.WaitForSpans(ctx, tc.service, since, func(s []harness.Span) bool { return len(s) >= 2 })
			if err != nil {
				t.Fatal(err)
			}
			if len(spans) != 2 || spans[0].Name != "parent" || spans[1].Name != "child" {
				t.Fatalf("spans: %+v", spans)
			}
			p, c := spans[0], spans[1]
			if p.TraceID != parent.SpanContext().TraceID().String() || p.SpanID != parent.SpanContext().SpanID().String() ||
				p.ParentSpanID != "" || p.Kind != trace.SpanKindServer || p.Service != tc.service || p.Scope != "harness-test" {
				t.Errorf("parent: %+v", p)
			}
			if c.TraceID != p.TraceID || c.ParentSpanID != p.SpanID || c.Kind != trace.SpanKindClient {
				t.Errorf("child: %+v", c)
			}
			if c.Status != (harness.Status{Code: codes.Error, Message: "it failed"}) {
				t.Errorf("child status: %+v", c.Status)
			}
			for k, v := range map[string]any{"s": "x", "port": int64(5432), "b": true, "f": 0.25, "list": []any{"a", "b"}} {
				if !reflect.DeepEqual(c.Attributes[k], v) {
					t.Errorf("child attribute %s = %#v, want %#v", k, c.Attributes[k], v)
				}
			}
		})
	}

}
