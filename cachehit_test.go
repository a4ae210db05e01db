package pgconnector_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/tracing"
)

// connectView is what one connect's spans say: the attributes of its connect span and, per
// decision event in order, "address:port hit" (hit is "true", "false", or "-" when the event has
// no pgconnector.cache.hit), and the cache.hit of its first ssl_request or gssenc_request span
// ("" when there is none).
type connectView struct {
	attrs     map[string]string
	decisions []string
	request   string
}

// viewConnect finds the one connect span under parent among spans and reads it.
func viewConnect(t *testing.T, spans []sdktrace.ReadOnlySpan, parent trace.SpanID) connectView {
	t.Helper()
	var v connectView
	var connect sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == tracing.SpanConnect && s.Parent().SpanID() == parent {
			if connect != nil {
				t.Fatal("more than one connect span")
			}
			connect = s
		}
	}
	if connect == nil {
		t.Fatal("no connect span")
	}
	v.attrs = map[string]string{}
	for _, kv := range connect.Attributes() {
		v.attrs[string(kv.Key)] = kv.Value.Emit()
	}
	for _, ev := range connect.Events() {
		if ev.Name != tracing.EventDecision {
			continue
		}
		a := map[string]string{}
		for _, kv := range ev.Attributes {
			a[string(kv.Key)] = kv.Value.Emit()
		}
		hit := a[string(tracing.CacheHitKey)]
		if hit == "" {
			hit = "-"
		}
		v.decisions = append(v.decisions, a[string(semconv.ServerAddressKey)]+":"+a[string(semconv.ServerPortKey)]+" "+hit)
	}
	var first sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Parent().SpanID() == connect.SpanContext().SpanID() &&
			(s.Name() == tracing.SpanSSLRequest || s.Name() == tracing.SpanGSSEncRequest) &&
			(first == nil || s.StartTime().Before(first.StartTime())) {
			first = s
		}
	}
	if first != nil {
		for _, kv := range first.Attributes() {
			if kv.Key == tracing.CacheHitKey {
				v.request = kv.Value.Emit()
			}
		}
	}
	return v
}

// counts returns the data points of a counter by server ("address:port").
func counts(t *testing.T, reader *sdkmetric.ManualReader, name string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	m, ok := collect(t, reader)[name]
	if !ok {
		return out
	}
	for attrs, v := range points(t, m) {
		rest, ok1 := strings.CutPrefix(attrs, "server.address=")
		host, port, ok2 := strings.Cut(rest, ",server.port=")
		if !ok1 || !ok2 {
			t.Fatalf("%s: attributes %q", name, attrs)
		}
		out[host+":"+port] = v
	}
	return out
}

// pgconnector.cache.hit means one thing wherever it appears: a remembered server answer changed
// the plan of the host (a method left out) or confirmed it (the server is remembered to accept
// the request the plan sends first). The connect span says it of the host connected to, each
// decision event of its host, the decision cache metrics count each decision as its event says,
// and where no remembered answer could change or confirm a plan the attribute is absent and
// nothing is counted. Real servers, the in-memory exporter, the metrics SDK.
func TestCacheHitAgreement(t *testing.T) {
	plain, tlsSrv := servers(t)
	lab := newKerberosLab(t)
	gssEnc := lab.server(t, true, lab.gssHBA())
	gssAuth := lab.server(t, true, "hostnogssenc all all 127.0.0.1/32 gss include_realm=0 krb_realm="+lab.kdc.Realm)
	dead := harness.FreePort(t) // nothing listens there
	addr := func(host string, port int) string { return host + ":" + strconv.Itoa(port) }
	plainAddr, tlsAddr := addr(plain.Host, plain.Port), addr(tlsSrv.Host, tlsSrv.Port)
	deadAddr := addr("127.0.0.1", dead)
	preferStandby := func(first, second int) string {
		return plain.DSN("host=127.0.0.1,127.0.0.1", fmt.Sprintf("port=%d,%d", first, second),
			"target_session_attrs=prefer-standby")
	}
	primary := harness.StartT(t, harness.Options{TLS: true, Auth: "scram-sha-256"})
	standby := harness.StartStandbyT(t, primary)
	standbyAddr := addr(standby.Host, standby.Port)
	standbyDSN := standby.DSN("host=127.0.0.1,127.0.0.1", fmt.Sprintf("port=%d,%d", plain.Port, standby.Port),
		"target_session_attrs=prefer-standby")

	for _, tt := range []struct {
		name      string
		dsn       string
		kerberos  bool
		prime     int    // connects before the one checked
		kinit     bool   // new credentials after them
		hit       string // cache.hit of the connect span; "" absent
		server    string // the host connected to
		transport string
		decisions []string
		request   string // cache.hit of the first request span; "" none
	}{
		{name: "cold", dsn: tlsSrv.DSN(), hit: "false", server: tlsAddr, transport: "tls",
			decisions: []string{tlsAddr + " false"}, request: "false"},
		{name: "warm SSL", dsn: tlsSrv.DSN(), prime: 1, hit: "true", server: tlsAddr, transport: "tls",
			decisions: []string{tlsAddr + " true"}, request: "true"},
		{name: "cold GSS", dsn: aliceDSN(gssEnc, "localhost"), kerberos: true, hit: "false",
			server: addr("localhost", gssEnc.Port), transport: "gss",
			decisions: []string{addr("localhost", gssEnc.Port) + " false"}, request: "false"},
		{name: "warm GSS", dsn: aliceDSN(gssEnc, "localhost"), kerberos: true, prime: 1, hit: "true",
			server: addr("localhost", gssEnc.Port), transport: "gss",
			decisions: []string{addr("localhost", gssEnc.Port) + " true"}, request: "true"},
		{name: "warm GSS, then a new ticket: learned with other credentials", dsn: aliceDSN(gssEnc, "localhost"), kerberos: true,
			prime: 1, kinit: true, hit: "false", server: addr("localhost", gssEnc.Port), transport: "gss",
			decisions: []string{addr("localhost", gssEnc.Port) + " false"}, request: "false"},
		{name: "warm plain ('N' remembered)", dsn: plain.DSN(), prime: 1, hit: "true", server: plainAddr,
			transport: "plain", decisions: []string{plainAddr + " true"}},
		// target_session_attrs=prefer-standby: the standby, listed second, remembered as a
		// standby since the prime connect, is tried first (roles.go); cold, after the primary.
		{name: "prefer-standby, the standby second", dsn: standbyDSN, prime: 1, hit: "true",
			server: standbyAddr, transport: "tls", request: "true",
			decisions: []string{standbyAddr + " true"}},
		{name: "prefer-standby, the standby second, cold", dsn: standbyDSN, hit: "false",
			server: standbyAddr, transport: "tls", request: "false",
			decisions: []string{plainAddr + " false", standbyAddr + " false"}},
		// No standby: libpq's second pass over every host takes any server. The host down is
		// decided from nothing each time (a miss), the primary from its remembered 'N'.
		{name: "prefer-standby, no standby: the first host, in the second pass", dsn: preferStandby(plain.Port, dead),
			prime: 1, hit: "true", server: plainAddr, transport: "plain",
			decisions: []string{plainAddr + " true", deadAddr + " false", plainAddr + " true"}},
		// The host down first in the string: remembered down since the prime connect, it goes
		// after the primary in each pass (WithDownHostTTL), so both passes look as above.
		{name: "prefer-standby, no standby: the second host, in the second pass", dsn: preferStandby(dead, plain.Port),
			prime: 1, hit: "true", server: plainAddr, transport: "plain",
			decisions: []string{plainAddr + " true", deadAddr + " false", plainAddr + " true"}},
		{name: "gssencmode=disable, 'N' remembered", dsn: aliceDSN(gssAuth, "localhost", "gssencmode=disable"),
			kerberos: true, prime: 1, hit: "true", server: addr("localhost", gssAuth.Port), transport: "plain",
			decisions: []string{addr("localhost", gssAuth.Port) + " true"}},
		{name: "gssencmode=disable sslmode=disable: nothing to remember", dsn: aliceDSN(gssAuth, "localhost", "gssencmode=disable", "sslmode=disable"),
			kerberos: true, prime: 1, server: addr("localhost", gssAuth.Port), transport: "plain",
			decisions: []string{addr("localhost", gssAuth.Port) + " -"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec, tp := newRecorder()
			reader := sdkmetric.NewManualReader()
			opts := []pgconnector.Option{pgconnector.WithTracerProvider(tp),
				pgconnector.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))}
			var c *pgconnector.Connector
			if tt.kerberos {
				c = lab.connector(t, tt.dsn, opts...)
			} else {
				c = newConnector(t, tt.dsn, opts...)
			}
			defer c.Close()
			for range tt.prime {
				conn, err := c.Connect(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				conn.Close()
			}
			if tt.kinit {
				if err := lab.kdc.Kinit(lab.ccache, "alice", 0); err != nil {
					t.Fatal(err)
				}
			}
			hits0 := counts(t, reader, tracing.MetricCacheHits)
			misses0 := counts(t, reader, tracing.MetricCacheMisses)

			ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
			conn, err := c.Connect(ctx)
			parent.End()
			if err != nil {
				t.Fatal(err)
			}
			conn.Close()

			v := viewConnect(t, rec.Ended(), parent.SpanContext().SpanID())
			got := connectView{attrs: map[string]string{
				"hit":       v.attrs[string(tracing.CacheHitKey)],
				"server":    v.attrs[string(semconv.ServerAddressKey)] + ":" + v.attrs[string(semconv.ServerPortKey)],
				"transport": v.attrs[string(tracing.TransportKey)],
			}, decisions: v.decisions, request: v.request}
			want := connectView{attrs: map[string]string{"hit": tt.hit, "server": tt.server, "transport": tt.transport},
				decisions: tt.decisions, request: tt.request}
			if !maps.Equal(got.attrs, want.attrs) || !slices.Equal(got.decisions, want.decisions) || got.request != want.request {
				t.Errorf("connect span %v, decisions %q, first request span cache.hit %q;\nwant %v, %q, %q",
					got.attrs, got.decisions, got.request, want.attrs, want.decisions, want.request)
			}

			// The connect span says what the decision of the host it connected to says.
			var last string
			for _, d := range v.decisions {
				if server, hit, _ := strings.Cut(d, " "); server == got.attrs["server"] {
					last = hit
				}
			}
			if last == "-" {
				last = ""
			}
			if last != got.attrs["hit"] {
				t.Errorf("connect span cache.hit %q, decision of %s %q", got.attrs["hit"], got.attrs["server"], last)
			}
			// The metrics count each decision as its event says.
			wantHits, wantMisses := map[string]float64{}, map[string]float64{}
			for _, d := range v.decisions {
				server, hit, _ := strings.Cut(d, " ")
				switch hit {
				case "true":
					wantHits[server]++
				case "false":
					wantMisses[server]++
				}
			}
			delta := func(name string, before map[string]float64) map[string]float64 {
				d := counts(t, reader, name)
				for k, v := range before {
					if d[k] -= v; d[k] == 0 {
						delete(d, k)
					}
				}
				return d
			}
			if h, m := delta(tracing.MetricCacheHits, hits0), delta(tracing.MetricCacheMisses, misses0); !maps.Equal(h, wantHits) || !maps.Equal(m, wantMisses) {
				t.Errorf("metrics: hits %v misses %v; the decisions say hits %v misses %v", h, m, wantHits, wantMisses)
			}
		})
	}
}

// With two hosts, each decision's attributes are on the decision event of the host it was made
// for, and the connect span says only what is about the connect as a whole: the host connected
// to, its transport, the cache.hit of its plan, the sockets opened. The first host is remembered
// to refuse SSLRequest (its plan leaves SSL out) and is down; the second is cold and connects
// over TLS.
func TestPlanAttributesPerHost(t *testing.T) {
	_, tlsSrv := servers(t)
	gone := harness.StartT(t, harness.Options{})
	dsn := tlsSrv.DSN("host=127.0.0.1,127.0.0.1", fmt.Sprintf("port=%d,%d", gone.Port, tlsSrv.Port))
	rec, tp := newRecorder()
	c := newConnector(t, dsn, pgconnector.WithTracerProvider(tp))
	defer c.Close()
	conn, err := c.Connect(context.Background()) // the first host: 'N' remembered
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if err := gone.Stop(); err != nil {
		t.Fatal(err)
	}

	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	conn, err = c.Connect(ctx)
	parent.End()
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()

	emit := func(kvs []attribute.KeyValue) map[string]string {
		m := map[string]string{}
		for _, kv := range kvs {
			m[string(kv.Key)] = kv.Value.Emit()
		}
		return m
	}
	var connect sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == tracing.SpanConnect && s.Parent().SpanID() == parent.SpanContext().SpanID() {
			connect = s
		}
	}
	if connect == nil {
		t.Fatal("no connect span")
	}
	port := func(p int) string { return strconv.Itoa(p) }
	want := map[string]string{
		"db.system.name": "postgresql", "db.namespace": tlsSrv.Database,
		"server.address": "127.0.0.1", "server.port": port(tlsSrv.Port),
		"pgconnector.sslmode": "prefer", "pgconnector.gssencmode": "prefer",
		"pgconnector.transport": "tls", "pgconnector.cache.hit": "false", "pgconnector.attempts": "1",
	}
	if got := emit(connect.Attributes()); !maps.Equal(got, want) {
		t.Errorf("connect span attributes\n %v\nwant\n %v", got, want)
	}
	var events []map[string]string
	for _, ev := range connect.Events() {
		if ev.Name == tracing.EventDecision {
			events = append(events, emit(ev.Attributes))
		}
	}
	wantEvents := []map[string]string{
		{"server.address": "127.0.0.1", "server.port": port(gone.Port), "pgconnector.plan": "plain",
			"pgconnector.plan.skipped": "ssl", "pgconnector.cache.hit": "true", "pgconnector.probe.waited": "false",
			"pgconnector.gss.credentials": "false"},
		{"server.address": "127.0.0.1", "server.port": port(tlsSrv.Port), "pgconnector.plan": "ssl,plain",
			"pgconnector.cache.hit": "false", "pgconnector.probe.waited": "false", "pgconnector.gss.credentials": "false"},
	}
	if !slices.EqualFunc(events, wantEvents, maps.Equal) {
		t.Errorf("decision events\n %v\nwant\n %v", events, wantEvents)
	}
}
