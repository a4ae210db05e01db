package pgconnector_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/dbconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/tracing"
)

// measuredOps returns how many measurements of db.client.operation.duration o holds per
// operation name (failures included), and fails if one of them carries attribute key.
func measuredOps(t *testing.T, o *observed, key string) map[string]float64 {
	t.Helper()
	ops := map[string]float64{}
	for attrs, n := range points(t, collect(t, o.reader)[dbconv.ClientOperationDuration{}.Name()]) {
		if key != "" && strings.Contains(attrs, key+"=") {
			t.Errorf("measurement %s carries %s", attrs, key)
		}
		for _, kv := range strings.Split(attrs, ",") {
			if op, ok := strings.CutPrefix(kv, string(semconv.DBOperationNameKey)+"="); ok {
				ops[op] += n
			}
		}
	}
	return ops
}

// Pings and session resets make no span by default, also when their context holds one;
// WithPingSpans(true) traces both. PING is measured either way, RESET_SESSION never.
func TestPingSpans(t *testing.T) {
	plain, _ := servers(t)
	base := connAttrs(plain)
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("WithPingSpans(%v)", on), func(t *testing.T) {
			o := newObserved(t, plain.DSN(), pgconnector.WithPingSpans(on))
			o.db.SetMaxOpenConns(1)
			if err := o.db.Ping(); err != nil { // a root ping: connects, then pings
				t.Fatal(err)
			}
			got := o.under(t, func(ctx context.Context) {
				// The pooled connection again: database/sql resets its session, then pings.
				if err := o.db.PingContext(ctx); err != nil {
					t.Fatal(err)
				}
			})
			var want []stmtSpan
			roots := 0
			if on {
				want = []stmtSpan{{"RESET_SESSION", with(base, "RESET_SESSION", ""), ""}, {"PING", with(base, "PING", ""), ""}}
				roots = 1
			}
			checkStmtSpans(t, got, want)
			var rootPings []string
			for _, s := range o.rec.Ended() {
				if !s.Parent().IsValid() && s.Name() != tracing.SpanConnect && s.Name() != "caller" {
					rootPings = append(rootPings, s.Name())
				}
			}
			if len(rootPings) != roots {
				t.Errorf("root spans %q, want %d PING", rootPings, roots)
			}
			if got, want := measuredOps(t, o, ""), map[string]float64{"PING": 2}; !mapsEqual(got, want) {
				t.Errorf("measured %v, want %v", got, want)
			}
			// PgxConn still reaches pgx's connection under the traced ResetSession.
			conn, err := o.db.Conn(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if err := pgconnector.PgxConn(conn, func(pc *pgx.Conn) error { return pc.Ping(context.Background()) }); err != nil {
				t.Error(err)
			}
		})
	}
}

func mapsEqual(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// WithSpanFilter: false makes no span for the call, which is still measured; the filter gets
// the operation and the text as db.query.text records it, and the caller's context.
func TestSpanFilter(t *testing.T) {
	plain, _ := servers(t)
	type key struct{}
	var mu sync.Mutex
	var calls []string
	o := newObserved(t, plain.DSN(), pgconnector.WithSpanFilter(func(ctx context.Context, op, query string) bool {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, op+"|"+query)
		return ctx.Value(key{}) == nil && !strings.Contains(query, "no_span")
	}))
	got := o.under(t, func(ctx context.Context) {
		for _, q := range []struct {
			ctx  context.Context
			text string
		}{
			{ctx, "select 1 as no_span"},
			{ctx, "select 2 as kept"},
			{context.WithValue(ctx, key{}, true), "select 3 as kept"},
		} {
			if err := o.db.QueryRowContext(q.ctx, q.text).Scan(new(int)); err != nil {
				t.Fatal(err)
			}
		}
		tx, err := o.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	})
	base := connAttrs(plain)
	checkStmtSpans(t, got, []stmtSpan{
		{"SELECT", with(base, "SELECT", "select ? as kept", string(semconv.DBResponseReturnedRowsKey), "1"), ""},
		{"BEGIN", with(base, "BEGIN", ""), ""},
		{"COMMIT", with(base, "COMMIT", ""), ""},
	})
	if want := []string{"SELECT|select ? as no_span", "SELECT|select ? as kept", "SELECT|select ? as kept", "BEGIN|", "COMMIT|"}; !slices.Equal(calls, want) {
		t.Errorf("filter called with %q, want %q", calls, want)
	}
	if got, want := measuredOps(t, o, ""), map[string]float64{"SELECT": 3, "BEGIN": 1, "COMMIT": 1}; !mapsEqual(got, want) {
		t.Errorf("measured %v, want %v", got, want)
	}
}

// WithRootSpans(false): a statement whose context holds no span makes none (it is measured);
// one under a local or a remote span does.
func TestRootSpans(t *testing.T) {
	plain, _ := servers(t)
	remote := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3},
		SpanID:     trace.SpanID{4, 5, 6},
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	}))
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("WithRootSpans(%v)", on), func(t *testing.T) {
			o := newObserved(t, plain.DSN(), pgconnector.WithRootSpans(on))
			for _, ctx := range []context.Context{context.Background(), remote} {
				if err := o.db.QueryRowContext(ctx, "select 1").Scan(new(int)); err != nil {
					t.Fatal(err)
				}
			}
			got := o.under(t, func(ctx context.Context) {
				if err := o.db.QueryRowContext(ctx, "select 1").Scan(new(int)); err != nil {
					t.Fatal(err)
				}
			})
			if len(got) != 1 {
				t.Errorf("%d spans under the caller, want 1", len(got))
			}
			var roots, underRemote int
			for _, s := range o.rec.Ended() {
				switch {
				case s.Name() != "SELECT":
				case !s.Parent().IsValid():
					roots++
				case s.Parent().IsRemote() && s.Parent().TraceID() == (trace.TraceID{1, 2, 3}):
					underRemote++
				}
			}
			wantRoots := 0
			if on {
				wantRoots = 1
			}
			if roots != wantRoots || underRemote != 1 {
				t.Errorf("%d root SELECT spans, %d under the remote span; want %d, 1", roots, underRemote, wantRoots)
			}
			if got, want := measuredOps(t, o, ""), map[string]float64{"SELECT": 3}; !mapsEqual(got, want) {
				t.Errorf("measured %v, want %v", got, want)
			}
		})
	}
}

// attributeSampler records the attributes each span had when it was sampled.
type attributeSampler struct {
	mu    sync.Mutex
	attrs map[string][]attribute.KeyValue // span name -> attributes
}

func (s *attributeSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.attrs == nil {
		s.attrs = map[string][]attribute.KeyValue{}
	}
	s.attrs[p.Name] = p.Attributes
	return sdktrace.AlwaysSample().ShouldSample(p)
}

func (s *attributeSampler) Description() string { return "attributeSampler" }

// WithAttributesFunc: the application's attributes, from the call's context, are on the span
// from its start (the sampler sees them), and not on the measurement.
func TestAttributesFunc(t *testing.T) {
	plain, _ := servers(t)
	type tenantKey struct{}
	sampler := &attributeSampler{}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	c := newConnector(t, plain.DSN(), pgconnector.WithTracerProvider(tp),
		pgconnector.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		pgconnector.WithSpanNameFunc(func(ctx context.Context, op, query string) string {
			if ctx.Value(tenantKey{}) != nil {
				return "tenant " + op
			}
			return ""
		}),
		pgconnector.WithAttributesFunc(func(ctx context.Context, op, query string) []attribute.KeyValue {
			tenant, _ := ctx.Value(tenantKey{}).(string)
			if tenant == "" {
				return nil
			}
			return []attribute.KeyValue{attribute.String("app.tenant", tenant), attribute.String("app.query", query)}
		}))
	o := &observed{rec: rec, tp: tp, reader: reader, c: c, db: c.OpenDB()}
	t.Cleanup(func() { o.db.Close() })
	got := o.under(t, func(ctx context.Context) {
		for _, ctx := range []context.Context{context.WithValue(ctx, tenantKey{}, "acme"), ctx} {
			if err := o.db.QueryRowContext(ctx, "select $1::int", 1).Scan(new(int)); err != nil {
				t.Fatal(err)
			}
		}
	})
	base := connAttrs(plain)
	checkStmtSpans(t, got, []stmtSpan{
		{"tenant SELECT", with(base, "SELECT", "select $1::int", string(semconv.DBQuerySummaryKey), "SELECT", "app.tenant", "acme", "app.query", "select $1::int", string(semconv.DBResponseReturnedRowsKey), "1"), ""},
		{"SELECT", with(base, "SELECT", "select $1::int", string(semconv.DBResponseReturnedRowsKey), "1"), ""},
	})
	sampler.mu.Lock()
	seen := sampler.attrs["tenant SELECT"]
	sampler.mu.Unlock()
	if !slices.Contains(seen, attribute.String("app.tenant", "acme")) {
		t.Errorf("the sampler saw %v, without app.tenant", seen)
	}
	if got, want := measuredOps(t, o, "app.tenant"), map[string]float64{"SELECT": 2}; !mapsEqual(got, want) {
		t.Errorf("measured %v, want %v", got, want)
	}
}

// WithCancelAsError(false): a statement canceled by its context is not an error span (its
// error.type still says why it ended); one whose deadline passed still is. By default both are.
func TestCancelAsError(t *testing.T) {
	plain, _ := servers(t)
	for _, asError := range []bool{true, false} {
		t.Run(fmt.Sprintf("WithCancelAsError(%v)", asError), func(t *testing.T) {
			o := newObserved(t, plain.DSN(), pgconnector.WithCancelAsError(asError))
			for _, tt := range []struct {
				name   string
				ctx    func(ctx context.Context) (context.Context, context.CancelFunc)
				types  []string // error.type, one of
				status codes.Code
			}{
				{"canceled", func(ctx context.Context) (context.Context, context.CancelFunc) {
					ctx, cancel := context.WithCancel(ctx)
					time.AfterFunc(300*time.Millisecond, cancel)
					return ctx, cancel
				}, []string{tracing.ErrorTypeCanceled, "57014"}, map[bool]codes.Code{true: codes.Error, false: codes.Unset}[asError]},
				{"deadline", func(ctx context.Context) (context.Context, context.CancelFunc) {
					return context.WithTimeout(ctx, 300*time.Millisecond)
				}, []string{tracing.ErrorTypeTimeout}, codes.Error},
			} {
				t.Run(tt.name, func(t *testing.T) {
					for _, args := range [][]any{nil, {1}} { // an exec without values (simple protocol), a query with one
						got := o.under(t, func(ctx context.Context) {
							conn, err := o.db.Conn(ctx)
							if err != nil {
								t.Fatal(err)
							}
							defer conn.Close()
							cctx, cancel := tt.ctx(ctx)
							defer cancel()
							var qerr error
							if args == nil {
								_, qerr = conn.ExecContext(cctx, "select pg_sleep(5)")
							} else {
								qerr = conn.QueryRowContext(cctx, "select pg_sleep(5) where $1::int = 1", args...).Scan(new(any))
							}
							if qerr == nil {
								t.Fatal("no error")
							}
						})
						if len(got) != 1 {
							t.Fatalf("spans %s, want one", spanNames(got))
						}
						s := got[0]
						var errType string
						for _, kv := range s.Attributes() {
							if kv.Key == semconv.ErrorTypeKey {
								errType = kv.Value.AsString()
							}
						}
						if !slices.Contains(tt.types, errType) {
							t.Errorf("args %v: error.type %q, want one of %q", args, errType, tt.types)
						}
						if s.Status().Code != tt.status {
							t.Errorf("args %v: status %v %q, want %v", args, s.Status().Code, s.Status().Description, tt.status)
						}
					}
				})
			}
			// The measurements of the failures carry their error.type whatever the option says.
			var failed float64
			for attrs, n := range points(t, collect(t, o.reader)[dbconv.ClientOperationDuration{}.Name()]) {
				if strings.Contains(attrs, "error.type=") {
					failed += n
				}
			}
			if failed != 4 {
				t.Errorf("%v failed measurements, want 4", failed)
			}
		})
	}
}

// The same options on pgx's own API (tracing.StatementConfig of a PgxTracer), on a real server:
// a root statement makes no span (OmitRootSpans), a filtered one none, the kept ones carry the
// application's attributes, a canceled one is not an error (CancelNotError); a batch's queries
// are filtered one by one.
func TestPgxTracerSpanOptions(t *testing.T) {
	plain, _ := servers(t)
	o := newPgxObserved(t, plain.DSN())
	reader := sdkmetric.NewManualReader()
	o.cfg.Tracer = tracing.NewPgxTracer(tracing.StatementConfig{
		TracerProvider: o.tp,
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		QueryText:      true,
		OmitRootSpans:  true,
		CancelNotError: true,
		SpanFilter:     func(ctx context.Context, op, query string) bool { return !strings.HasSuffix(query, "no_span") },
		Attributes: func(ctx context.Context, op, query string) []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("app.op", op)}
		},
	})
	conn := o.connect(t)
	if _, err := conn.Exec(context.Background(), "select 1"); err != nil { // a root: no span
		t.Fatal(err)
	}
	got := o.under(t, func(ctx context.Context) {
		if _, err := conn.Exec(ctx, "select 1 as no_span"); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "select $1::int", 1); err != nil {
			t.Fatal(err)
		}
		b := &pgx.Batch{}
		b.Queue("select 1 as no_span")
		b.Queue("select 2 as kept")
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(300*time.Millisecond, cancel)
		if _, err := conn.Exec(cctx, "select pg_sleep(5)"); err == nil {
			t.Fatal("no error")
		}
	})
	var names []string
	var stmts []sdktrace.ReadOnlySpan
	for _, s := range o.rec.Ended() {
		if s.Name() != tracing.SpanConnect {
			names = append(names, s.Name())
			stmts = append(stmts, s)
		}
	}
	if want := []string{"SELECT", "SELECT", "BATCH SELECT", "SELECT", "caller"}; !slices.Equal(names, want) {
		t.Fatalf("spans %q, want %q", names, want)
	}
	if len(got) != 3 {
		t.Fatalf("%d spans under the caller, want 3", len(got))
	}
	for _, s := range stmts[:4] {
		if !slices.Contains(s.Attributes(), attribute.String("app.op", s.Name())) {
			t.Errorf("%s: attributes %v, without app.op", s.Name(), s.Attributes())
		}
		if strings.HasSuffix(queryTextOf(s), "no_span") {
			t.Errorf("a filtered statement has a span: %s", queryTextOf(s))
		}
	}
	canceled := got[2]
	if canceled.Status().Code != codes.Unset || !slices.ContainsFunc(canceled.Attributes(), func(kv attribute.KeyValue) bool {
		return kv.Key == semconv.ErrorTypeKey
	}) {
		t.Errorf("canceled statement: status %v, attributes %v; want Unset with error.type", canceled.Status(), canceled.Attributes())
	}
	var measured float64
	for _, n := range points(t, collect(t, reader)[dbconv.ClientOperationDuration{}.Name()]) {
		measured += n
	}
	if measured != 5 { // every call: the root, the filtered, the kept, the batch, the canceled
		t.Errorf("%v measurements, want 5", measured)
	}
}

func queryTextOf(s sdktrace.ReadOnlySpan) string {
	for _, kv := range s.Attributes() {
		if kv.Key == semconv.DBQueryTextKey {
			return kv.Value.AsString()
		}
	}
	return ""
}
