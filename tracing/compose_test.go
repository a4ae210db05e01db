package tracing

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/semconv/v1.43.0/dbconv"

	"github.com/pgconnector/pgconnector/negotiation"
)

type composeKey struct{}

// recordingTrace returns a Trace whose every hook appends "name:hook" to calls; its Start hooks
// put name in the context, after checking they see want (the earlier trace's value).
func recordingTrace(t *testing.T, name, want string, calls *[]string) *negotiation.Trace {
	var tr negotiation.Trace
	v := reflect.ValueOf(&tr).Elem()
	for i := range v.NumField() {
		field := v.Type().Field(i)
		fn := reflect.MakeFunc(field.Type, func(args []reflect.Value) []reflect.Value {
			ctx := args[0].Interface().(context.Context)
			*calls = append(*calls, name+":"+field.Name)
			if field.Type.NumOut() == 0 {
				return nil
			}
			if got, _ := ctx.Value(composeKey{}).(string); got != want {
				t.Errorf("%s.%s: context holds %q, want %q", name, field.Name, got, want)
			}
			return []reflect.Value{reflect.ValueOf(context.WithValue(ctx, composeKey{}, name))}
		})
		v.Field(i).Set(fn)
	}
	return &tr
}

// Every hook of negotiation.Trace is composed (a hook added later and forgotten fails here),
// Start and event hooks run a then b, Done hooks b then a, and b starts under a's context.
func TestComposeCallsEveryHook(t *testing.T) {
	var calls []string
	tr := Compose(recordingTrace(t, "a", "", &calls), recordingTrace(t, "b", "a", &calls))
	v := reflect.ValueOf(tr).Elem()
	for i := range v.NumField() {
		field := v.Type().Field(i)
		if v.Field(i).IsNil() {
			t.Errorf("%s: not composed", field.Name)
			continue
		}
		calls = calls[:0]
		args := []reflect.Value{reflect.ValueOf(context.Background())}
		if field.Type.NumIn() == 2 {
			args = append(args, reflect.Zero(field.Type.In(1)))
		}
		v.Field(i).Call(args)
		want := []string{"a:" + field.Name, "b:" + field.Name}
		if strings.HasSuffix(field.Name, "Done") {
			want = []string{"b:" + field.Name, "a:" + field.Name}
		}
		if !slices.Equal(calls, want) {
			t.Errorf("%s: calls %v, want %v", field.Name, calls, want)
		}
	}
}

func TestComposeNil(t *testing.T) {
	var calls []string
	a := recordingTrace(t, "a", "", &calls)
	for _, tr := range []*negotiation.Trace{Compose(a, nil), Compose(nil, a), Compose(a, &negotiation.Trace{})} {
		calls = calls[:0]
		tr.ConnectDone(context.Background(), negotiation.ConnectDoneInfo{})
		if !slices.Equal(calls, []string{"a:ConnectDone"}) {
			t.Errorf("calls %v", calls)
		}
	}
	if tr := Compose(nil, nil); tr == nil || tr.ConnectStart != nil {
		t.Errorf("Compose(nil, nil) = %+v, want an empty Trace", tr)
	}
}

// The span tree of every scenario is the same with the metric hooks composed before the span
// hooks, and the metric hooks see every connect.
func TestComposedMetricsLeaveSpansAlone(t *testing.T) {
	spansOf := func(sc scenario, compose bool) (string, bool) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		tr := NewTrace(tp)
		if compose {
			tr = Compose(NewMetrics(mp, Pool{Host: testHost, Port: testPort, Database: testDB}).Trace(), tr)
		}
		sc.drive(context.Background(), tr)
		var b strings.Builder
		for _, s := range rec.Ended() {
			fmt.Fprintf(&b, "%s parent=%v %v %v\n", s.Name(), s.Parent().IsValid(), s.Attributes(), s.Status())
		}
		_, ok := collect(t, reader)[dbconv.ClientConnectionCreateTime{}.Name()]
		return b.String(), ok
	}
	for _, sc := range scenarios(t) {
		plain, _ := spansOf(sc, false)
		composed, measured := spansOf(sc, true)
		if plain != composed {
			t.Errorf("%s: spans alone:\n%s\ncomposed with metrics:\n%s", sc.name, plain, composed)
		}
		if !measured {
			t.Errorf("%s: the connect was not measured", sc.name)
		}
	}
}
