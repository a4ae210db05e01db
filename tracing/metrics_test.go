package tracing

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/dbconv"

	"github.com/pgconnector/pgconnector/negotiation"
)

// collect returns what reader holds, by metric name, checking the instrumentation scope.
func collect(t testing.TB, reader *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	m := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != ScopeName || sm.Scope.Version != Version || sm.Scope.SchemaURL != semconv.SchemaURL {
			t.Errorf("scope %+v, want %s %s %s", sm.Scope, ScopeName, Version, semconv.SchemaURL)
		}
		for _, mm := range sm.Metrics {
			m[mm.Name] = mm
		}
	}
	return m
}

// points returns the data points of m by their attributes ("k=v,k=v", keys sorted): the value
// of a sum or gauge, the count of a histogram.
func points(t testing.TB, m metricdata.Metrics) map[string]float64 {
	t.Helper()
	enc := attribute.DefaultEncoder()
	p := map[string]float64{}
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			p[dp.Attributes.Encoded(enc)] = float64(dp.Value)
		}
	case metricdata.Sum[float64]:
		for _, dp := range d.DataPoints {
			p[dp.Attributes.Encoded(enc)] = dp.Value
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			p[dp.Attributes.Encoded(enc)] = float64(dp.Count)
			want := durationBuckets
			if m.Name == MetricConnectStepDuration {
				want = stepBuckets
			}
			if !slices.Equal(dp.Bounds, want) {
				t.Errorf("%s: bounds %v, want %v", m.Name, dp.Bounds, want)
			}
		}
	default:
		t.Fatalf("%s: data of type %T", m.Name, m.Data)
	}
	return p
}

const serverAttrs = "server.address=" + testHost + ",server.port=5432"

func TestMetricsOfConnects(t *testing.T) {
	decide := func(in negotiation.Input) negotiation.DecisionInfo {
		return negotiation.DecisionInfo{Host: testHost, Port: testPort, Input: in, Plan: mustDecide(t, in)}
	}
	prefer := negotiation.Input{SSLMode: negotiation.SSLModePrefer, GSSEncMode: negotiation.GSSEncModePrefer}
	known := func(in negotiation.Input, k negotiation.Known) negotiation.Input { in.Known = k; return in }
	refused := negotiation.Known{SSL: negotiation.AnswerNo}
	gssCreds := negotiation.Input{SSLMode: negotiation.SSLModeDisable, GSSEncMode: negotiation.GSSEncModePrefer,
		GSSCredentials: true, GSSGeneration: 7}
	gssFailed := negotiation.Known{GSS: negotiation.AnswerNo, GSSGeneration: 7}
	done := func(m negotiation.Method) negotiation.ConnectDoneInfo {
		return negotiation.ConnectDoneInfo{Host: testHost, Port: testPort, Method: m, Duration: 3 * time.Millisecond}
	}
	plain, tls := done(negotiation.MethodPlain), done(negotiation.MethodSSL)
	waited := decide(known(prefer, refused))
	waited.Waited = true
	otherHost := decide(known(prefer, refused))
	otherHost.Host = "other.example.com"
	failed := plain
	failed.Method, failed.Err = 0, errors.New("boom")

	for _, tt := range []struct {
		name      string
		decisions []negotiation.DecisionInfo
		done      negotiation.ConnectDoneInfo
		hits      float64
		misses    float64
		roundTrip float64 // attempts avoided
		backend   float64
	}{
		{"cold, prefer", []negotiation.DecisionInfo{decide(prefer)}, plain, 0, 1, 0, 0},
		{"'N' remembered, prefer", []negotiation.DecisionInfo{decide(known(prefer, refused))}, plain, 1, 0, 1, 0},
		{"'S' remembered, prefer", []negotiation.DecisionInfo{decide(known(prefer, negotiation.Known{SSL: negotiation.AnswerYes}))}, tls, 1, 0, 0, 0},
		{"'N' remembered, allow: libpq tries plaintext first",
			[]negotiation.DecisionInfo{decide(negotiation.Input{SSLMode: negotiation.SSLModeAllow, Known: refused})}, plain, 1, 0, 0, 0},
		{"'S' remembered, require", []negotiation.DecisionInfo{decide(negotiation.Input{SSLMode: negotiation.SSLModeRequire,
			Known: negotiation.Known{SSL: negotiation.AnswerYes}})}, tls, 1, 0, 0, 0},
		{"sslmode=disable, no credentials: no cache", []negotiation.DecisionInfo{decide(negotiation.Input{SSLMode: negotiation.SSLModeDisable,
			GSSEncMode: negotiation.GSSEncModePrefer})}, plain, 0, 0, 0, 0},
		{"Unix socket: no cache", []negotiation.DecisionInfo{decide(negotiation.Input{SSLMode: negotiation.SSLModePrefer, UnixSocket: true})}, plain, 0, 0, 0, 0},
		{"sslnegotiation=direct: no cache", []negotiation.DecisionInfo{decide(negotiation.Input{SSLMode: negotiation.SSLModeRequire, DirectSSL: true})},
			done(negotiation.MethodDirectSSL), 0, 0, 0, 0},
		{"GSS failure remembered", []negotiation.DecisionInfo{decide(known(gssCreds, gssFailed))}, plain, 1, 0, 1, 1},
		{"GSS failure learned with other credentials", []negotiation.DecisionInfo{decide(known(gssCreds,
			negotiation.Known{GSS: negotiation.AnswerNo, GSSGeneration: 6}))}, plain, 0, 1, 0, 0},
		// The remembered 'N' changed the plan (no SSL after GSS): a hit, though GSS is asked.
		{"GSS unknown, 'N' remembered", []negotiation.DecisionInfo{decide(known(negotiation.Input{SSLMode: negotiation.SSLModePrefer,
			GSSEncMode: negotiation.GSSEncModePrefer, GSSCredentials: true}, refused))}, done(negotiation.MethodGSS), 1, 0, 0, 0},
		{"GSS success remembered, no credentials now: SSL asked", []negotiation.DecisionInfo{decide(known(prefer,
			negotiation.Known{GSS: negotiation.AnswerYes, GSSGeneration: 7}))}, plain, 0, 1, 0, 0},
		{"GSS success remembered, with credentials", []negotiation.DecisionInfo{decide(known(negotiation.Input{SSLMode: negotiation.SSLModePrefer,
			GSSEncMode: negotiation.GSSEncModePrefer, GSSCredentials: true, GSSGeneration: 7},
			negotiation.Known{GSS: negotiation.AnswerYes, GSSGeneration: 7}))}, done(negotiation.MethodGSS), 1, 0, 0, 0},
		{"GSS success learned with other credentials", []negotiation.DecisionInfo{decide(known(negotiation.Input{SSLMode: negotiation.SSLModePrefer,
			GSSEncMode: negotiation.GSSEncModePrefer, GSSCredentials: true, GSSGeneration: 7},
			negotiation.Known{GSS: negotiation.AnswerYes, GSSGeneration: 6, SSL: negotiation.AnswerYes}))}, done(negotiation.MethodGSS), 0, 1, 0, 0},
		{"'N' remembered, require: asked anyway", []negotiation.DecisionInfo{decide(negotiation.Input{SSLMode: negotiation.SSLModeRequire,
			Known: refused})}, failed, 0, 1, 0, 0},
		{"'S' remembered, allow: plaintext first, nothing to confirm", []negotiation.DecisionInfo{decide(negotiation.Input{SSLMode: negotiation.SSLModeAllow,
			Known: negotiation.Known{SSL: negotiation.AnswerYes}})}, plain, 0, 0, 0, 0},
		{"after a wait for the probe: counted once", []negotiation.DecisionInfo{waited}, plain, 1, 0, 1, 0},
		{"stale answer negotiated again", []negotiation.DecisionInfo{decide(known(prefer, refused)), decide(prefer)}, tls, 1, 1, 0, 0},
		{"connected to another host", []negotiation.DecisionInfo{decide(prefer), otherHost}, plain, 1, 1, 0, 0},
		{"failed connect", []negotiation.DecisionInfo{decide(known(prefer, refused))}, failed, 1, 0, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			m := NewMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Pool{Host: testHost, Port: testPort, Database: testDB})
			tr := m.Trace()
			ctx := tr.ConnectStart(context.Background(), negotiation.ConnectStartInfo{Host: testHost, Port: testPort})
			for _, d := range tt.decisions {
				tr.Decision(ctx, d)
			}
			tr.ConnectDone(ctx, tt.done)
			got := collect(t, reader)

			sum := func(name string) map[string]float64 {
				mm, ok := got[name]
				if !ok {
					return map[string]float64{}
				}
				return points(t, mm)
			}
			want := func(hosts map[string]float64) map[string]float64 {
				maps.DeleteFunc(hosts, func(_ string, v float64) bool { return v == 0 })
				return hosts
			}
			hits, misses := sum(MetricCacheHits), sum(MetricCacheMisses)
			var total [2]float64
			for _, v := range hits {
				total[0] += v
			}
			for _, v := range misses {
				total[1] += v
			}
			if total != [2]float64{tt.hits, tt.misses} {
				t.Errorf("hits, misses = %v %v, want %v %v", hits, misses, tt.hits, tt.misses)
			}
			if tt.name == "'N' remembered, prefer" {
				if w := map[string]float64{serverAttrs: 1}; !maps.Equal(hits, w) {
					t.Errorf("hits %v, want %v", hits, w)
				}
			}
			avoided := sum(MetricAttemptsAvoided)
			wantAvoided := want(map[string]float64{
				"pgconnector.avoided.kind=round_trip," + serverAttrs: tt.roundTrip,
				"pgconnector.avoided.kind=backend," + serverAttrs:    tt.backend,
			})
			if !maps.Equal(avoided, wantAvoided) {
				t.Errorf("attempts avoided %v, want %v", avoided, wantAvoided)
			}

			create := sum(dbconv.ClientConnectionCreateTime{}.Name())
			pool := "db.client.connection.pool.name=" + testHost + ":5432/" + testDB
			wantCreate := map[string]float64{pool + ",pgconnector.outcome=success,pgconnector.transport=" + tt.done.Method.Transport(): 1}
			if tt.done.Err != nil {
				wantCreate = map[string]float64{pool + ",error.type=" + ErrorTypeConnectFailed + ",pgconnector.outcome=error": 1}
			}
			if !maps.Equal(create, wantCreate) {
				t.Errorf("create_time %v, want %v", create, wantCreate)
			}
		})
	}
}

// The instruments' names, units and kinds, and the pool metrics read from DBStats until
// unregistered.
func TestMetricsOfPool(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m := NewMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Pool{Host: testHost, Port: testPort, Database: testDB})
	stats := sql.DBStats{Idle: 2, InUse: 3, WaitCount: 4, WaitDuration: 1500 * time.Millisecond}
	unregister := m.ObserveDBStats(func() sql.DBStats { return stats })
	tr := m.Trace()
	ctx := tr.ConnectStart(context.Background(), negotiation.ConnectStartInfo{})
	in := negotiation.Input{SSLMode: negotiation.SSLModePrefer, Known: negotiation.Known{SSL: negotiation.AnswerNo}}
	tr.Decision(ctx, negotiation.DecisionInfo{Host: testHost, Port: testPort, Input: in, Plan: mustDecide(t, in)})
	tr.ConnectDone(ctx, negotiation.ConnectDoneInfo{Host: testHost, Port: testPort, Method: negotiation.MethodPlain})
	cold := negotiation.Input{SSLMode: negotiation.SSLModePrefer}
	tr.Decision(ctx, negotiation.DecisionInfo{Host: testHost, Port: testPort, Input: cold, Plan: mustDecide(t, cold)})

	pool := attribute.NewSet(semconv.DBClientConnectionPoolName(testHost + ":5432/" + testDB))
	server := attribute.NewSet(semconv.ServerAddress(testHost), semconv.ServerPort(testPort))
	sum := func(name, desc, unit string, monotonic bool, pts ...metricdata.DataPoint[int64]) metricdata.Metrics {
		return metricdata.Metrics{Name: name, Description: desc, Unit: unit, Data: metricdata.Sum[int64]{
			Temporality: metricdata.CumulativeTemporality, IsMonotonic: monotonic, DataPoints: pts}}
	}
	want := []metricdata.Metrics{
		sum(dbconv.ClientConnectionCountObservable{}.Name(), dbconv.ClientConnectionCountObservable{}.Description(),
			dbconv.ClientConnectionCountObservable{}.Unit(), false,
			metricdata.DataPoint[int64]{Attributes: attribute.NewSet(pool.ToSlice()[0], semconv.DBClientConnectionStateIdle), Value: 2},
			metricdata.DataPoint[int64]{Attributes: attribute.NewSet(pool.ToSlice()[0], semconv.DBClientConnectionStateUsed), Value: 3}),
		sum(MetricConnectionWaits, "Connections callers waited for because the pool had none free.", "{wait}", true,
			metricdata.DataPoint[int64]{Attributes: pool, Value: 4}),
		{Name: MetricConnectionWaitTime, Description: "Total time callers waited for a connection from the pool.", Unit: "s",
			Data: metricdata.Sum[float64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true,
				DataPoints: []metricdata.DataPoint[float64]{{Attributes: pool, Value: 1.5}}}},
		sum(MetricCacheHits, "Decisions whose plan a remembered server answer changed or confirmed.", "{decision}", true,
			metricdata.DataPoint[int64]{Attributes: server, Value: 1}),
		sum(MetricCacheMisses, "Decisions whose first request had no remembered acceptance, and that left nothing out.", "{decision}", true,
			metricdata.DataPoint[int64]{Attributes: server, Value: 1}),
		sum(MetricAttemptsAvoided, "Round trips and server backends libpq would have spent and a successful connect did not.", "{attempt}", true,
			metricdata.DataPoint[int64]{Attributes: attribute.NewSet(append(server.ToSlice(), AvoidedKindKey.String(AvoidedRoundTrip))...), Value: 1}),
		{Name: dbconv.ClientConnectionCreateTime{}.Name(), Description: dbconv.ClientConnectionCreateTime{}.Description(),
			Unit: dbconv.ClientConnectionCreateTime{}.Unit(), Data: metricdata.Histogram[float64]{Temporality: metricdata.CumulativeTemporality,
				DataPoints: []metricdata.HistogramDataPoint[float64]{{Attributes: attribute.NewSet(pool.ToSlice()[0],
					OutcomeKey.String(OutcomeSuccess), TransportKey.String("plain"))}}}},
	}
	got := collect(t, reader)
	for _, w := range want {
		metricdatatest.AssertEqual(t, w, got[w.Name], metricdatatest.IgnoreTimestamp(), metricdatatest.IgnoreValue())
		if _, ok := w.Data.(metricdata.Histogram[float64]); !ok {
			metricdatatest.AssertEqual(t, w, got[w.Name], metricdatatest.IgnoreTimestamp())
		}
	}
	if _, ok := got[dbconv.ClientConnectionMaxObservable{}.Name()]; ok {
		t.Errorf("%s reported without SetMaxOpenConns", dbconv.ClientConnectionMaxObservable{}.Name())
	}

	stats.MaxOpenConnections = 10
	got = collect(t, reader)
	max := dbconv.ClientConnectionMaxObservable{}
	metricdatatest.AssertEqual(t, sum(max.Name(), max.Description(), max.Unit(), false,
		metricdata.DataPoint[int64]{Attributes: pool, Value: 10}), got[max.Name()], metricdatatest.IgnoreTimestamp())

	unregister()
	got = collect(t, reader)
	for _, name := range []string{dbconv.ClientConnectionCountObservable{}.Name(), max.Name(), MetricConnectionWaits, MetricConnectionWaitTime} {
		if mm, ok := got[name]; ok && len(points(t, mm)) > 0 {
			t.Errorf("%s still reported after unregister: %v", name, points(t, mm))
		}
	}
}

// Every step span of every scenario is one point of pgconnector.connect.step.duration, with the
// span's name (without "postgresql."), its outcome and the host; with no meter provider that
// records, the step hooks leave the context as it is and allocate nothing.
func TestStepDurations(t *testing.T) {
	steps := map[string]bool{SpanProbeWait: true, SpanGSSCredentials: true, SpanDNSLookup: true, SpanTCPConnect: true,
		SpanGSSEncRequest: true, SpanServiceTicket: true, SpanGSSContext: true, SpanSSLRequest: true, SpanTLSHandshake: true,
		SpanStartup: true, SpanCredential: true}
	seen := map[string]bool{}
	for _, sc := range scenarios(t) {
		t.Run(sc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			sc.drive(context.Background(), Compose(NewMetrics(mp, Pool{Host: testHost, Port: testPort, Database: testDB}).Trace(), NewTrace(tp)))

			host := testHost
			for _, s := range rec.Ended() {
				for _, kv := range s.Attributes() {
					if s.Name() == SpanConnect && kv.Key == semconv.ServerAddressKey {
						host = kv.Value.AsString()
					}
				}
			}
			want := map[string]float64{}
			for _, s := range rec.Ended() {
				if !steps[s.Name()] {
					continue
				}
				seen[s.Name()] = true
				outcome := OutcomeSuccess
				if s.Status().Code == codes.Error {
					outcome = OutcomeError
				}
				k := "pgconnector.outcome=" + outcome + ",pgconnector.step=" + strings.TrimPrefix(s.Name(), "postgresql.")
				if s.Name() != SpanGSSCredentials {
					k += ",server.address=" + host
				}
				want[k]++
			}
			if len(want) == 0 {
				t.Fatal("no step spans: the scenario tests nothing here")
			}
			got := map[string]float64{}
			if mm, ok := collect(t, reader)[MetricConnectStepDuration]; ok {
				got = points(t, mm)
				if mm.Unit != "s" {
					t.Errorf("unit %q, want s", mm.Unit)
				}
			}
			if !maps.Equal(got, want) {
				t.Errorf("step durations:\n %v\nwant (from the step spans)\n %v", got, want)
			}
		})
	}

	for name := range steps {
		if !seen[name] {
			t.Errorf("no scenario has a %s span: its point is not checked", name)
		}
	}

	// No provider that records: no clock in the context, no allocation.
	tr := NewMetrics(noopmetric.NewMeterProvider(), Pool{Host: testHost, Port: testPort, Database: testDB}).Trace()
	ctx := context.Background()
	info := negotiation.DialInfo{Host: testHost, Address: testIPv4 + ":5432", Method: negotiation.MethodSSL}
	allocs := testing.AllocsPerRun(100, func() {
		c := tr.TCPConnectStart(ctx, info)
		tr.TCPConnectDone(c, nil)
		c = tr.SSLRequestStart(ctx, info)
		tr.SSLRequestDone(c, negotiation.RequestDoneInfo{Answer: negotiation.AnswerYes})
		c = tr.TLSHandshakeStart(ctx, negotiation.TLSHandshakeStartInfo{})
		tr.TLSHandshakeDone(c, negotiation.TLSHandshakeDoneInfo{})
		if c != ctx {
			t.Fatal("a step hook changed the context with no meter provider that records")
		}
	})
	if allocs != 0 {
		t.Errorf("step hooks with a no-op meter provider: %v allocations, want 0", allocs)
	}
}
