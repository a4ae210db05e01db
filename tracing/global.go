package tracing

import (
	"reflect"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// globalDefault is otel's global TracerProvider as it is before otel.SetTracerProvider is
// called: its tracers delegate to the provider set later, and until then make spans that do
// not record. It is nil when a provider was already set when this package was initialised.
var globalDefault = func() trace.TracerProvider {
	tp := otel.GetTracerProvider()
	if reflect.TypeOf(tp).String() != "*global.tracerProvider" {
		return nil
	}
	return tp
}()

// unsetGlobal reports whether tp is otel's global default and still no provider has been set
// (otel.GetTracerProvider returns the set one from then on): a span started now would not
// record, so the hooks skip starting one. The check is an atomic load and a comparison; a
// provider set later is used from the next connect or statement on.
func unsetGlobal(tp trace.TracerProvider) bool {
	return globalDefault != nil && tp == globalDefault && otel.GetTracerProvider() == globalDefault
}

// noopSpan stands for a span not started: ending it, or setting its attributes, does nothing.
var noopSpan trace.Span = &noop.Span{}
