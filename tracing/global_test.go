package tracing

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector/negotiation"
)

// TestGlobalProviderSetLater checks the hooks made with otel's global TracerProvider before any
// provider is set: they start no span (and allocate nothing for one) while none is set, and the
// provider set later gets the spans of the next connect and statement. It runs in a child
// process: otel.SetTracerProvider cannot be undone for the other tests.
func TestGlobalProviderSetLater(t *testing.T) {
	if os.Getenv("PGCONNECTOR_TEST_GLOBAL_PROVIDER") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestGlobalProviderSetLater$", "-test.count", "1")
		cmd.Env = append(os.Environ(), "PGCONNECTOR_TEST_GLOBAL_PROVIDER=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	if globalDefault == nil || !unsetGlobal(otel.GetTracerProvider()) {
		t.Fatalf("otel's global default provider not recognised: %T", otel.GetTracerProvider())
	}
	tr := NewTrace(nil)
	st := NewStatements(StatementConfig{})
	ic := &interceptor{s: st, srv: st.server("db.example", 5432)}
	info := negotiation.ConnectStartInfo{Host: "db.example", Port: 5432}

	ctx := context.Background()
	if got := tr.ConnectStart(ctx, info); got != ctx {
		t.Error("ConnectStart with no provider set returned a new context")
	}
	if allocs := testing.AllocsPerRun(100, func() { tr.ConnectStart(ctx, info) }); allocs != 0 {
		t.Errorf("ConnectStart with no provider set: %v allocations, want 0", allocs)
	}
	stmt := st.run(ic.srv, "select 1", 0, nil, 0)
	if got, c := ic.begin(ctx, stmt); got != ctx || c.span != noopSpan {
		t.Error("a statement with no provider set started a span")
	}

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	otel.SetTracerProvider(tp)

	cctx := tr.ConnectStart(ctx, info)
	if !trace.SpanFromContext(cctx).IsRecording() {
		t.Fatal("ConnectStart after otel.SetTracerProvider: no recording span")
	}
	tr.ConnectDone(cctx, negotiation.ConnectDoneInfo{Host: "db.example", Port: 5432})
	sctx, c := ic.begin(ctx, stmt)
	if !trace.SpanFromContext(sctx).IsRecording() || c.span == noopSpan {
		t.Fatal("a statement after otel.SetTracerProvider: no recording span")
	}
	ic.end(sctx, &c, nil)
	var names []string
	for _, s := range rec.Ended() {
		names = append(names, s.Name())
	}
	if len(names) != 2 || names[0] != SpanConnect {
		t.Errorf("spans ended after the provider was set: %q, want %s and the statement's", names, SpanConnect)
	}
}
