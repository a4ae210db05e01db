package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector/negotiation"
)

// Spans of the negotiator's background lookups, rechecks and credential refreshes
// (negotiation.BackgroundWork): each a root span of its own, as SpanRefresh (no caller waits for
// it, and it may outlive the connect that started it), linked to the span of that connect, with
// its steps (dns_lookup) below it. SpanCredentialRefresh is in credential.go.
const (
	// SpanDNSRefresh is a host name looked up again in the last fifth of the life of its
	// remembered answer (WithDNSCacheTTL), for the next connects.
	SpanDNSRefresh = "postgresql.dns_refresh"
	// SpanDownRecheck is an address remembered down (WithDownHostTTL) dialed again; the span
	// fails when the dial did (the address stays remembered down).
	SpanDownRecheck = "postgresql.down_recheck"
)

// backgroundKey marks the background span in the context BackgroundStart returns.
type backgroundKey struct{}

// detach returns ctx with the identity of the connect span of from (or, outside a connect, of
// its current span) as its current span, for the link of the background work the connect
// starts (refreshStart, backgroundStart): a SpanContext, a value, not the span nor anything
// else of the connect.
func (t *tracer) detach(ctx, from context.Context) context.Context {
	sc := trace.SpanContextFromContext(from)
	if st := connect(from); st != nil {
		sc = st.span.SpanContext()
	}
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithSpanContext(ctx, sc)
}

// startLinked starts name, an INTERNAL root span with the attributes kv, linked to the span of
// trigger (what Detach returned for the connect that started the work), if it names one.
func (t *tracer) startLinked(ctx context.Context, name string, trigger context.Context, kv []attribute.KeyValue) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{t.internal[0], trace.WithNewRoot(), trace.WithAttributes(kv...)}
	if trigger != nil {
		if sc := trace.SpanContextFromContext(trigger); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	return t.tracer.Start(ctx, name, opts...)
}

// backgroundStart starts the root span of a background lookup or recheck, linked to the span of
// its Trigger.
func (t *tracer) backgroundStart(ctx context.Context, info negotiation.BackgroundStartInfo) context.Context {
	if unsetGlobal(t.tp) {
		return ctx
	}
	name := SpanDNSRefresh
	switch info.Work {
	case negotiation.BackgroundDownRecheck:
		name = SpanDownRecheck
	case negotiation.BackgroundCredentialRefresh:
		name = SpanCredentialRefresh
	}
	var a [7]attribute.KeyValue
	kv := backgroundStartAttributes(append(a[:0], semconv.DBSystemNamePostgreSQL), info)
	ctx, span := t.startLinked(ctx, name, info.Trigger, kv)
	if span.IsRecording() {
		ctx = context.WithValue(ctx, backgroundKey{}, span)
	}
	return ctx
}

func (t *tracer) backgroundDone(ctx context.Context, info negotiation.BackgroundDoneInfo) {
	span, _ := ctx.Value(backgroundKey{}).(trace.Span)
	if span == nil || !sameSpan(trace.SpanFromContext(ctx), span) {
		return
	}
	if info.Err != nil {
		fail(span, info.Err, "", backgroundErrorType(info.Work))
	}
	span.End()
}

// backgroundErrorType is the default error.type of a failed background span of work w.
func backgroundErrorType(w negotiation.BackgroundWork) string {
	switch w {
	case negotiation.BackgroundDownRecheck:
		return ErrorTypeDial
	case negotiation.BackgroundCredentialRefresh:
		return ErrorTypeCredential
	}
	return ErrorTypeDNS
}
