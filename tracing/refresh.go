package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector/negotiation"
)

// SpanRefresh is the span of a background refresh of a remembered negative answer: a root span
// of its own (no caller waits for it, so it belongs to no caller's trace), linked to the connect
// span whose decision started it, with the refresh's steps (tcp_connect, ssl_request, ...)
// below it.
const SpanRefresh = "postgresql.refresh"

// Attribute keys of the refresh span.
const (
	// RefreshMethodKey is the method whose remembered negative answer is asked again: "ssl" or
	// "gss". Span: refresh.
	RefreshMethodKey = attribute.Key("pgconnector.refresh.method")
	// RefreshAgeKey is how old the remembered answer was, in seconds. Span: refresh.
	RefreshAgeKey = attribute.Key("pgconnector.refresh.age")
	// RefreshOutcomeKey is what the refresh found: "enabled" (the server now accepts the
	// method: the next connects use it), "confirmed" (the same negative answer, remembered
	// anew), "inconclusive" (nothing learned: a timeout, a reset, load; the answer stays as it
	// was), "canceled" (the connector was closed), "superseded" (the answer had changed before
	// anything was asked). Span: refresh.
	RefreshOutcomeKey = attribute.Key("pgconnector.refresh.outcome")
)

// refreshKey marks the refresh span in the context RefreshStart returns.
type refreshKey struct{}

// refreshStart starts the refresh's root span. The span is marked with the connect key as well,
// so that its steps find what they need of a connect (the database, for the startup span) and
// are traced even where the refresh span itself is not the current span.
func (t *tracer) refreshStart(ctx context.Context, info negotiation.RefreshStartInfo) context.Context {
	var a [6]attribute.KeyValue
	kv := refreshStartAttributes(append(a[:0], semconv.DBSystemNamePostgreSQL), info)
	ctx, span := t.startLinked(ctx, SpanRefresh, info.Trigger, kv)
	if span.IsRecording() {
		ctx = context.WithValue(ctx, stepConnect, &connectState{span: span, database: info.Database})
		ctx = context.WithValue(ctx, refreshKey{}, span)
	}
	return ctx
}

func (t *tracer) refreshDone(ctx context.Context, info negotiation.RefreshDoneInfo) {
	span, _ := ctx.Value(refreshKey{}).(trace.Span)
	if span == nil || !sameSpan(trace.SpanFromContext(ctx), span) {
		return
	}
	span.SetAttributes(RefreshOutcomeKey.String(info.Outcome.String()), AttemptsKey.Int(info.Attempts))
	if info.Err != nil {
		fail(span, info.Err, "", ErrorTypeConnectFailed)
	}
	span.End()
}
