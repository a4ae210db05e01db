package tracing

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pgconnector/pgconnector/negotiation"
)

// Values the scenarios use.
const (
	testHost = "db.example.com"
	testPort = 5432
	testDB   = "app"
	testIPv4 = "192.0.2.10"
	testIPv6 = "2001:db8::10"
	// secret stands for something that must never become an attribute: it only ever appears in
	// the text of an error, which is recorded as-is (status description and exception.message).
	secret = "s3cr3t-hunter2"
)

var testAddrs = []string{testIPv4, testIPv6}

// fixture is an SDK TracerProvider that records spans, and a caller span to parent the connect.
type fixture struct {
	rec    *tracetest.SpanRecorder
	tr     *negotiation.Trace
	ctx    context.Context // holds the caller span
	caller trace.Span
}

func newFixture(t testing.TB, opts ...sdktrace.TracerProviderOption) *fixture {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(rec)}, opts...)...)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, caller := tp.Tracer("test").Start(context.Background(), "caller")
	return &fixture{rec: rec, tr: NewTrace(tp), ctx: ctx, caller: caller}
}

// ended returns the spans ended so far, by name; the test fails if a name appears twice.
func (f *fixture) ended(t *testing.T) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	m := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range f.rec.Ended() {
		if _, dup := m[s.Name()]; dup {
			t.Errorf("span %q ended twice (or two spans of that name)", s.Name())
		}
		m[s.Name()] = s
	}
	return m
}

func mustDecide(t testing.TB, in negotiation.Input) negotiation.Plan {
	t.Helper()
	p, err := negotiation.Decide(in)
	if err != nil {
		t.Fatalf("Decide(%+v): %v", in, err)
	}
	return p
}

// Errors as the negotiation code would return them.
var (
	errRefused = &net.OpError{Op: "dial", Net: "tcp",
		Addr: &net.TCPAddr{IP: net.ParseIP(testIPv4), Port: testPort},
		Err:  os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	// errDial is how pgx reports it: the connect error text names the user and the database.
	errDial = fmt.Errorf("failed to connect to `user=alice database=app`: %s:%d (%s): %w",
		testIPv4, testPort, testHost, errRefused)
	errBadPassword = &pgconn.PgError{Severity: "FATAL", Code: "28P01",
		Message: `password authentication failed for user "alice" (` + secret + `)`}
	errAuth = fmt.Errorf("failed to connect to `user=alice database=app`: %w", errBadPassword)
)

// span is what a test expects of one span. Attributes are compared exactly, as a set.
type span struct {
	name   string
	kind   trace.SpanKind
	attrs  []attribute.KeyValue
	status codes.Code
	desc   string
	events []event // compared exactly, in order, when not nil (exception events are left out)
	// exception is the exception.message expected of an exception event; "" means none.
	exception string
}

type event struct {
	name  string
	attrs []attribute.KeyValue
}

// scenario is the hooks called in the order the negotiation code calls them for one connect.
type scenario struct {
	name  string
	drive func(ctx context.Context, tr *negotiation.Trace)
	want  []span // the connect span first
}

func scenarios(t testing.TB) []scenario {
	host := negotiation.HostInfo{Host: testHost, Port: testPort}
	start := func(ssl negotiation.SSLMode) negotiation.ConnectStartInfo {
		return negotiation.ConnectStartInfo{Host: testHost, Port: testPort, Database: testDB,
			SSLMode: ssl, GSSEncMode: negotiation.GSSEncModeDisable}
	}
	startAttrs := func(ssl string) []attribute.KeyValue {
		return []attribute.KeyValue{semconv.DBSystemNamePostgreSQL, semconv.ServerAddress(testHost),
			semconv.ServerPort(testPort), semconv.DBNamespace(testDB), SSLModeKey.String(ssl),
			GSSEncModeKey.String("disable")}
	}
	dial := func(m negotiation.Method) negotiation.DialInfo {
		return negotiation.DialInfo{Host: testHost, Address: testIPv4 + ":5432", Method: m}
	}
	dnsSpan := span{name: SpanDNSLookup, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
		semconv.ServerAddress(testHost), semconv.ServerPort(testPort),
		DNSAddressesKey.StringSlice([]string{testIPv4, testIPv6})}}
	tcpSpan := func(m string) span {
		return span{name: SpanTCPConnect, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
			semconv.ServerAddress(testHost), semconv.NetworkTransportTCP, semconv.NetworkPeerAddress(testIPv4),
			semconv.NetworkPeerPort(testPort), MethodKey.String(m)}}
	}
	decision := func(plan string, cacheHit bool, skipped string) ([]attribute.KeyValue, event) {
		attrs := []attribute.KeyValue{PlanKey.String(plan)}
		if skipped != "" {
			attrs = append(attrs, PlanSkippedKey.String(skipped))
		}
		attrs = append(attrs, CacheHitKey.Bool(cacheHit), ProbeWaitedKey.Bool(false))
		ev := event{name: EventDecision, attrs: append([]attribute.KeyValue{
			semconv.ServerAddress(testHost), semconv.ServerPort(testPort)}, attrs...)}
		return attrs, ev
	}
	resolve := func(ctx context.Context, tr *negotiation.Trace) {
		d := tr.DNSStart(ctx, host)
		tr.DNSDone(d, negotiation.DNSDoneInfo{Addrs: testAddrs})
	}
	connected := func(attrs []attribute.KeyValue, transport string, cacheHit bool) []attribute.KeyValue {
		return append(attrs, TransportKey.String(transport), CacheHitKey.Bool(cacheHit), AttemptsKey.Int(1))
	}

	preferIn := negotiation.Input{SSLMode: negotiation.SSLModePrefer, GSSEncMode: negotiation.GSSEncModeDisable}
	preferPlan := mustDecide(t, preferIn)
	requireIn := negotiation.Input{SSLMode: negotiation.SSLModeRequire, GSSEncMode: negotiation.GSSEncModeDisable}
	requirePlan := mustDecide(t, requireIn)
	cachedIn := preferIn
	cachedIn.Known.SSL = negotiation.AnswerNo
	cachedPlan := mustDecide(t, cachedIn)

	var out []scenario

	{ // (a) sslmode=prefer, the server answers 'N': plaintext on the same socket.
		dAttrs, dEvent := decision("ssl,plain", false, "")
		out = append(out, scenario{
			name: "prefer/server refuses SSLRequest/plaintext on same socket",
			drive: func(ctx context.Context, tr *negotiation.Trace) {
				ctx = tr.ConnectStart(ctx, start(negotiation.SSLModePrefer))
				tr.Decision(ctx, negotiation.DecisionInfo{Host: testHost, Port: testPort, Input: preferIn, Plan: preferPlan})
				resolve(ctx, tr)
				c := tr.TCPConnectStart(ctx, dial(negotiation.MethodSSL))
				tr.TCPConnectDone(c, nil)
				s := tr.SSLRequestStart(ctx, dial(negotiation.MethodSSL))
				tr.SSLRequestDone(s, negotiation.RequestDoneInfo{Answer: negotiation.AnswerNo})
				tr.Fallback(ctx, negotiation.FallbackInfo{Host: testHost, From: negotiation.MethodSSL,
					To: negotiation.MethodPlain, Reason: "server refused SSLRequest"})
				u := tr.StartupStart(ctx, dial(negotiation.MethodPlain))
				tr.StartupDone(u, negotiation.StartupDoneInfo{AuthMethod: "trust"})
				tr.ConnectDone(ctx, negotiation.ConnectDoneInfo{Host: testHost, Port: testPort,
					Method: negotiation.MethodPlain, Attempts: 1, Duration: time.Millisecond})
			},
			want: []span{
				{name: SpanConnect, kind: trace.SpanKindClient,
					attrs:  connected(append(startAttrs("prefer"), dAttrs...), "plain", false),
					events: []event{dEvent}},
				dnsSpan,
				tcpSpan("ssl"),
				{name: SpanSSLRequest, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					SSLAnswerKey.String("N"), CacheHitKey.Bool(false)}},
				{name: SpanFallback, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					semconv.ServerAddress(testHost), FallbackFromKey.String("ssl"), FallbackToKey.String("plain"),
					FallbackReasonKey.String("server refused SSLRequest"), FallbackNewConnectionKey.Bool(false)}},
				{name: SpanStartup, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					semconv.DBNamespace(testDB), MethodKey.String("plain"), AuthMethodKey.String("trust")}},
			},
		})
	}

	{ // (b) sslmode=require, the server answers 'S': TLS 1.3, SCRAM.
		dAttrs, dEvent := decision("ssl", false, "")
		out = append(out, scenario{
			name: "require/server accepts SSLRequest/TLS 1.3 and scram-sha-256",
			drive: func(ctx context.Context, tr *negotiation.Trace) {
				ctx = tr.ConnectStart(ctx, start(negotiation.SSLModeRequire))
				tr.Decision(ctx, negotiation.DecisionInfo{Host: testHost, Port: testPort, Input: requireIn, Plan: requirePlan})
				resolve(ctx, tr)
				c := tr.TCPConnectStart(ctx, dial(negotiation.MethodSSL))
				tr.TCPConnectDone(c, nil)
				s := tr.SSLRequestStart(ctx, dial(negotiation.MethodSSL))
				tr.SSLRequestDone(s, negotiation.RequestDoneInfo{Answer: negotiation.AnswerYes})
				h := tr.TLSHandshakeStart(ctx, negotiation.TLSHandshakeStartInfo{ServerName: testHost})
				tr.TLSHandshakeDone(h, negotiation.TLSHandshakeDoneInfo{Version: tls.VersionTLS13,
					CipherSuite: tls.TLS_AES_128_GCM_SHA256})
				u := tr.StartupStart(ctx, dial(negotiation.MethodSSL))
				tr.StartupDone(u, negotiation.StartupDoneInfo{AuthMethod: "scram-sha-256"})
				tr.ConnectDone(ctx, negotiation.ConnectDoneInfo{Host: testHost, Port: testPort,
					Method: negotiation.MethodSSL, Attempts: 1})
			},
			want: []span{
				{name: SpanConnect, kind: trace.SpanKindClient,
					attrs:  connected(append(startAttrs("require"), dAttrs...), "tls", false),
					events: []event{dEvent}},
				dnsSpan,
				tcpSpan("ssl"),
				{name: SpanSSLRequest, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					SSLAnswerKey.String("S"), CacheHitKey.Bool(false)}},
				{name: SpanTLSHandshake, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					TLSDirectKey.Bool(false), semconv.TLSProtocolNameTLS, semconv.TLSProtocolVersion("1.3"),
					semconv.TLSCipher("TLS_AES_128_GCM_SHA256"), semconv.TLSEstablished(true)}},
				{name: SpanStartup, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					semconv.DBNamespace(testDB), MethodKey.String("ssl"), AuthMethodKey.String("scram-sha-256")}},
			},
		})
	}

	{ // (c) the socket cannot be opened.
		dAttrs, dEvent := decision("ssl,plain", false, "")
		out = append(out, scenario{
			name: "prefer/connection refused/dial_error",
			drive: func(ctx context.Context, tr *negotiation.Trace) {
				ctx = tr.ConnectStart(ctx, start(negotiation.SSLModePrefer))
				tr.Decision(ctx, negotiation.DecisionInfo{Host: testHost, Port: testPort, Input: preferIn, Plan: preferPlan})
				resolve(ctx, tr)
				c := tr.TCPConnectStart(ctx, dial(negotiation.MethodSSL))
				tr.TCPConnectDone(c, errRefused)
				tr.ConnectDone(ctx, negotiation.ConnectDoneInfo{Host: testHost, Port: testPort,
					Attempts: 1, Err: errDial})
			},
			want: []span{
				{name: SpanConnect, kind: trace.SpanKindClient,
					attrs: append(append(startAttrs("prefer"), dAttrs...), CacheHitKey.Bool(false),
						AttemptsKey.Int(1), semconv.ErrorTypeKey.String(ErrorTypeDial)),
					status: codes.Error, desc: errDial.Error(), exception: errDial.Error(),
					events: []event{dEvent}},
				dnsSpan,
				func() span {
					s := tcpSpan("ssl")
					s.attrs = append(s.attrs, semconv.ErrorTypeKey.String(ErrorTypeDial))
					s.status, s.desc, s.exception = codes.Error, errRefused.Error(), errRefused.Error()
					return s
				}(),
			},
		})
	}

	{ // (d) the cache remembers 'N': no SSLRequest, the password is wrong.
		dAttrs, dEvent := decision("plain", true, "ssl")
		out = append(out, scenario{
			name: "prefer/cached N skips SSLRequest/bad password 28P01",
			drive: func(ctx context.Context, tr *negotiation.Trace) {
				ctx = tr.ConnectStart(ctx, start(negotiation.SSLModePrefer))
				tr.Decision(ctx, negotiation.DecisionInfo{Host: testHost, Port: testPort, Input: cachedIn, Plan: cachedPlan})
				resolve(ctx, tr)
				c := tr.TCPConnectStart(ctx, dial(negotiation.MethodPlain))
				tr.TCPConnectDone(c, nil)
				u := tr.StartupStart(ctx, dial(negotiation.MethodPlain))
				tr.StartupDone(u, negotiation.StartupDoneInfo{AuthMethod: "scram-sha-256", SQLState: "28P01", Err: errBadPassword})
				tr.ConnectDone(ctx, negotiation.ConnectDoneInfo{Host: testHost, Port: testPort,
					CacheHit: true, Attempts: 1, Err: errAuth})
			},
			want: []span{
				{name: SpanConnect, kind: trace.SpanKindClient,
					attrs: append(append(startAttrs("prefer"), dAttrs...), AttemptsKey.Int(1),
						semconv.ErrorTypeKey.String("28P01"), semconv.DBResponseStatusCode("28P01")),
					status: codes.Error, desc: errAuth.Error(), exception: errAuth.Error(),
					events: []event{dEvent}},
				dnsSpan,
				tcpSpan("plain"),
				{name: SpanStartup, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					semconv.DBNamespace(testDB), MethodKey.String("plain"), AuthMethodKey.String("scram-sha-256"),
					semconv.ErrorTypeKey.String("28P01"), semconv.DBResponseStatusCode("28P01")},
					status: codes.Error, desc: errBadPassword.Error(), exception: errBadPassword.Error()},
			},
		})
	}

	{ // (e) a Unix-domain socket, after waiting for another connect's probe.
		const path = "/var/run/postgresql/.s.PGSQL.5432"
		unixIn := negotiation.Input{SSLMode: negotiation.SSLModePrefer, GSSEncMode: negotiation.GSSEncModePrefer, UnixSocket: true}
		unixPlan := mustDecide(t, unixIn)
		out = append(out, scenario{
			name: "unix socket/after probe wait/peer path",
			drive: func(ctx context.Context, tr *negotiation.Trace) {
				ctx = tr.ConnectStart(ctx, negotiation.ConnectStartInfo{Host: "/var/run/postgresql", Port: testPort,
					Database: testDB, SSLMode: negotiation.SSLModePrefer, GSSEncMode: negotiation.GSSEncModePrefer})
				w := tr.ProbeWaitStart(ctx, negotiation.HostInfo{Host: "/var/run/postgresql", Port: testPort})
				tr.ProbeWaitDone(w, nil)
				tr.Decision(ctx, negotiation.DecisionInfo{Host: "/var/run/postgresql", Port: testPort,
					Input: unixIn, Plan: unixPlan, Waited: true})
				c := tr.TCPConnectStart(ctx, negotiation.DialInfo{Host: "/var/run/postgresql", Address: path,
					Method: negotiation.MethodPlain})
				tr.TCPConnectDone(c, nil)
				u := tr.StartupStart(ctx, negotiation.DialInfo{Host: "/var/run/postgresql", Address: path,
					Method: negotiation.MethodPlain})
				tr.StartupDone(u, negotiation.StartupDoneInfo{AuthMethod: "trust"})
				tr.ConnectDone(ctx, negotiation.ConnectDoneInfo{Host: "/var/run/postgresql", Port: testPort,
					Method: negotiation.MethodPlain, Attempts: 1})
			},
			want: []span{
				{name: SpanConnect, kind: trace.SpanKindClient, attrs: []attribute.KeyValue{
					semconv.DBSystemNamePostgreSQL, semconv.ServerAddress("/var/run/postgresql"),
					semconv.ServerPort(testPort), semconv.DBNamespace(testDB), SSLModeKey.String("prefer"),
					GSSEncModeKey.String("prefer"), PlanKey.String("plain"), ProbeWaitedKey.Bool(true),
					TransportKey.String("plain"), CacheHitKey.Bool(false), AttemptsKey.Int(1)},
					events: []event{{name: EventDecision, attrs: []attribute.KeyValue{
						semconv.ServerAddress("/var/run/postgresql"), semconv.ServerPort(testPort),
						PlanKey.String("plain"), CacheHitKey.Bool(false), ProbeWaitedKey.Bool(true)}}}},
				{name: SpanProbeWait, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					semconv.ServerAddress("/var/run/postgresql"), semconv.ServerPort(testPort)}},
				{name: SpanTCPConnect, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					semconv.ServerAddress("/var/run/postgresql"), semconv.NetworkTransportUnix,
					semconv.NetworkPeerAddress(path), MethodKey.String("plain")}},
				{name: SpanStartup, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					semconv.DBNamespace(testDB), MethodKey.String("plain"), AuthMethodKey.String("trust")}},
			},
		})
	}
	return out
}

func TestSpans(t *testing.T) {
	for _, sc := range scenarios(t) {
		t.Run(sc.name, func(t *testing.T) {
			f := newFixture(t)
			sc.drive(f.ctx, f.tr)
			f.caller.End()

			checkBalanced(t, f.rec)
			got := f.ended(t)
			if len(got) != len(sc.want)+1 {
				t.Errorf("got %d spans %v, want %d and the caller", len(got), names(got), len(sc.want))
			}
			root, ok := got[SpanConnect]
			if !ok {
				t.Fatalf("no %s span; got %v", SpanConnect, names(got))
			}
			callerSC := f.caller.SpanContext()
			if root.Parent().SpanID() != callerSC.SpanID() || root.SpanContext().TraceID() != callerSC.TraceID() {
				t.Errorf("%s: parent %v, want the caller span %v", SpanConnect, root.Parent().SpanID(), callerSC.SpanID())
			}
			for _, w := range sc.want {
				s, ok := got[w.name]
				if !ok {
					t.Errorf("no %s span; got %v", w.name, names(got))
					continue
				}
				checkSpan(t, s, w)
				if w.name != SpanConnect && s.Parent().SpanID() != root.SpanContext().SpanID() {
					t.Errorf("%s: parent %v, want %s %v", w.name, s.Parent().SpanID(), SpanConnect, root.SpanContext().SpanID())
				}
			}
			if s, ok := got[SpanFallback]; ok && !s.StartTime().Equal(s.EndTime()) {
				t.Errorf("%s: lasts %v, want zero length", SpanFallback, s.EndTime().Sub(s.StartTime()))
			}
		})
	}
}

// TestNothingButHostPortDatabase checks, over every scenario, that the only attributes are the
// documented ones (no user, password or other field of the connection string), and that the
// text of an error appears only where it is recorded as-is: the status description and
// exception.message.
func TestNothingButHostPortDatabase(t *testing.T) {
	allowed := map[attribute.Key]bool{}
	for _, k := range []attribute.Key{
		semconv.DBSystemNameKey, semconv.DBNamespaceKey, semconv.ServerAddressKey, semconv.ServerPortKey,
		semconv.ErrorTypeKey, semconv.DBResponseStatusCodeKey, semconv.NetworkTransportKey,
		semconv.NetworkPeerAddressKey, semconv.NetworkPeerPortKey, semconv.TLSProtocolNameKey,
		semconv.TLSProtocolVersionKey, semconv.TLSCipherKey, semconv.TLSEstablishedKey,
		SSLModeKey, GSSEncModeKey, TransportKey, CacheHitKey, AttemptsKey, PlanKey, PlanSkippedKey,
		ProbeWaitedKey, DNSAddressesKey, MethodKey, SSLAnswerKey, TLSDirectKey, AuthMethodKey,
		FallbackFromKey, FallbackToKey, FallbackReasonKey, FallbackNewConnectionKey,
	} {
		allowed[k] = true
	}
	exceptionKeys := map[attribute.Key]bool{"exception.type": true, "exception.message": true}
	for _, sc := range scenarios(t) {
		t.Run(sc.name, func(t *testing.T) {
			f := newFixture(t)
			sc.drive(f.ctx, f.tr)
			for _, s := range f.rec.Ended() {
				for _, kv := range s.Attributes() {
					if !allowed[kv.Key] {
						t.Errorf("%s: attribute %s is not documented", s.Name(), kv.Key)
					}
					checkNoSecret(t, s.Name(), kv)
				}
				for _, ev := range s.Events() {
					for _, kv := range ev.Attributes {
						if ev.Name == "exception" && exceptionKeys[kv.Key] {
							continue // the error's text, as-is
						}
						if !allowed[kv.Key] {
							t.Errorf("%s: event %s: attribute %s is not documented", s.Name(), ev.Name, kv.Key)
						}
						checkNoSecret(t, s.Name()+": event "+ev.Name, kv)
					}
				}
			}
		})
	}
}

func checkNoSecret(t *testing.T, where string, kv attribute.KeyValue) {
	t.Helper()
	if v := kv.Value.Emit(); strings.Contains(v, secret) || strings.Contains(v, "alice") {
		t.Errorf("%s: attribute %s = %q holds the text of an error", where, kv.Key, v)
	}
}

func TestScope(t *testing.T) {
	f := newFixture(t)
	ctx := f.tr.ConnectStart(f.ctx, negotiation.ConnectStartInfo{Host: testHost})
	f.tr.ConnectDone(ctx, negotiation.ConnectDoneInfo{})
	s := f.rec.Ended()[0]
	if got := s.InstrumentationScope(); got.Name != ScopeName || got.Version != Version || got.SchemaURL != semconv.SchemaURL {
		t.Errorf("scope = %+v, want %s %s %s", got, ScopeName, Version, semconv.SchemaURL)
	}
}

// TestDoneHooksLeaveOtherSpansAlone calls each Done hook with a context its Start hook did not
// return: none may end, or add to, a span it did not start.
func TestDoneHooksLeaveOtherSpansAlone(t *testing.T) {
	done := []struct {
		name string
		call func(tr *negotiation.Trace, ctx context.Context)
	}{
		{"ConnectDone", func(tr *negotiation.Trace, ctx context.Context) {
			tr.ConnectDone(ctx, negotiation.ConnectDoneInfo{Err: errDial})
		}},
		{"ProbeWaitDone", func(tr *negotiation.Trace, ctx context.Context) { tr.ProbeWaitDone(ctx, errDial) }},
		{"DNSDone", func(tr *negotiation.Trace, ctx context.Context) {
			tr.DNSDone(ctx, negotiation.DNSDoneInfo{Addrs: []string{testIPv4}, Err: errDial})
		}},
		{"TCPConnectDone", func(tr *negotiation.Trace, ctx context.Context) { tr.TCPConnectDone(ctx, errDial) }},
		{"SSLRequestDone", func(tr *negotiation.Trace, ctx context.Context) {
			tr.SSLRequestDone(ctx, negotiation.RequestDoneInfo{Answer: negotiation.AnswerNo, Err: errDial})
		}},
		{"TLSHandshakeDone", func(tr *negotiation.Trace, ctx context.Context) {
			tr.TLSHandshakeDone(ctx, negotiation.TLSHandshakeDoneInfo{Version: tls.VersionTLS12, Err: errDial})
		}},
		{"StartupDone", func(tr *negotiation.Trace, ctx context.Context) {
			tr.StartupDone(ctx, negotiation.StartupDoneInfo{AuthMethod: "md5", Err: errAuth})
		}},
		{"Decision", func(tr *negotiation.Trace, ctx context.Context) {
			tr.Decision(ctx, negotiation.DecisionInfo{Host: testHost})
		}},
	}
	contexts := []struct {
		name string
		ctx  func(f *fixture) context.Context // the span it holds must be left alone
	}{
		{"background", func(*fixture) context.Context { return context.Background() }},
		{"caller span", func(f *fixture) context.Context { return f.ctx }},
		{"other step", func(f *fixture) context.Context {
			// A step of another kind, outside any connect: only its own Done may end it.
			return f.tr.DNSStart(f.ctx, negotiation.HostInfo{Host: testHost})
		}},
		{"connect span", func(f *fixture) context.Context {
			return f.tr.ConnectStart(f.ctx, negotiation.ConnectStartInfo{Host: testHost})
		}},
	}
	for _, d := range done {
		for _, c := range contexts {
			if (d.name == "ConnectDone" && c.name == "connect span") ||
				(d.name == "DNSDone" && c.name == "other step") ||
				(d.name == "Decision" && c.name == "connect span") {
				continue // the matching hook
			}
			t.Run(d.name+"/"+c.name, func(t *testing.T) {
				f := newFixture(t)
				ctx := c.ctx(f)
				d.call(f.tr, ctx)
				if ended := f.rec.Ended(); len(ended) != 0 {
					t.Errorf("%s ended %v", d.name, ended[0].Name())
				}
				for _, s := range f.rec.Started() {
					if attrs := s.Attributes(); hasKey(attrs, semconv.ErrorTypeKey) || hasKey(attrs, DNSAddressesKey) ||
						hasKey(attrs, PlanKey) || len(s.Events()) != 0 {
						t.Errorf("%s changed span %s: %v, events %v", d.name, s.Name(), attrs, s.Events())
					}
				}
			})
		}
	}
}

func hasKey(kvs []attribute.KeyValue, k attribute.Key) bool {
	for _, kv := range kvs {
		if kv.Key == k {
			return true
		}
	}
	return false
}

// TestNotRecording drives every scenario through providers whose spans do not record.
func TestNotRecording(t *testing.T) {
	providers := []struct {
		name string
		tp   func(t *testing.T) (trace.TracerProvider, *tracetest.SpanRecorder)
	}{
		{"noop provider", func(*testing.T) (trace.TracerProvider, *tracetest.SpanRecorder) {
			return noop.NewTracerProvider(), nil
		}},
		{"nil provider is the global one", func(*testing.T) (trace.TracerProvider, *tracetest.SpanRecorder) {
			return nil, nil
		}},
		{"sdk never samples", func(t *testing.T) (trace.TracerProvider, *tracetest.SpanRecorder) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.NeverSample()))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			return tp, rec
		}},
	}
	for _, p := range providers {
		for _, sc := range scenarios(t) {
			t.Run(p.name+"/"+sc.name, func(t *testing.T) {
				tp, rec := p.tp(t)
				tr := NewTrace(tp)
				sc.drive(context.Background(), tr)
				if rec != nil && len(rec.Started()) != 0 {
					t.Errorf("%d spans recorded, want none", len(rec.Started()))
				}
			})
		}
	}
}

// TestStepsFollowTheirParent checks that a step hook called under no recording span starts no
// span, even with a provider that samples every root span.
func TestStepsFollowTheirParent(t *testing.T) {
	starts := []struct {
		name string
		call func(tr *negotiation.Trace, ctx context.Context) context.Context
	}{
		{"ProbeWaitStart", func(tr *negotiation.Trace, ctx context.Context) context.Context {
			return tr.ProbeWaitStart(ctx, negotiation.HostInfo{Host: testHost})
		}},
		{"DNSStart", func(tr *negotiation.Trace, ctx context.Context) context.Context {
			return tr.DNSStart(ctx, negotiation.HostInfo{Host: testHost})
		}},
		{"TCPConnectStart", func(tr *negotiation.Trace, ctx context.Context) context.Context {
			return tr.TCPConnectStart(ctx, negotiation.DialInfo{Host: testHost})
		}},
		{"SSLRequestStart", func(tr *negotiation.Trace, ctx context.Context) context.Context {
			return tr.SSLRequestStart(ctx, negotiation.DialInfo{Host: testHost})
		}},
		{"TLSHandshakeStart", func(tr *negotiation.Trace, ctx context.Context) context.Context {
			return tr.TLSHandshakeStart(ctx, negotiation.TLSHandshakeStartInfo{})
		}},
		{"StartupStart", func(tr *negotiation.Trace, ctx context.Context) context.Context {
			return tr.StartupStart(ctx, negotiation.DialInfo{Host: testHost})
		}},
		{"Fallback", func(tr *negotiation.Trace, ctx context.Context) context.Context {
			tr.Fallback(ctx, negotiation.FallbackInfo{From: negotiation.MethodSSL})
			return ctx
		}},
	}
	for _, s := range starts {
		t.Run(s.name+"/no span in ctx", func(t *testing.T) {
			f := newFixture(t, sdktrace.WithSampler(sdktrace.AlwaysSample()))
			ctx := context.Background()
			if got := s.call(f.tr, ctx); got != ctx {
				t.Errorf("%s returned a new context, want its argument", s.name)
			}
			if n := len(f.rec.Started()); n != 1 { // the fixture's caller span
				t.Errorf("%d spans started, want none", n-1)
			}
		})
	}
}

// TestStepUnderEndedStep checks that a step nested in a step that has already ended (the
// negotiation code passing the context of tcp_connect on to ssl_request, say) is still traced,
// as a child of that step, because its connect records.
func TestStepUnderEndedStep(t *testing.T) {
	f := newFixture(t)
	ctx := f.tr.ConnectStart(f.ctx, negotiation.ConnectStartInfo{Host: testHost})
	c := f.tr.TCPConnectStart(ctx, negotiation.DialInfo{Host: testHost, Address: testIPv4 + ":5432"})
	f.tr.TCPConnectDone(c, nil)
	s := f.tr.SSLRequestStart(c, negotiation.DialInfo{Host: testHost})
	f.tr.SSLRequestDone(s, negotiation.RequestDoneInfo{Answer: negotiation.AnswerNo})
	f.tr.Fallback(c, negotiation.FallbackInfo{From: negotiation.MethodSSL, To: negotiation.MethodPlain})
	f.tr.ConnectDone(ctx, negotiation.ConnectDoneInfo{Method: negotiation.MethodPlain, Attempts: 1})
	f.caller.End()
	checkBalanced(t, f.rec)
	got := f.ended(t)
	tcp := got[SpanTCPConnect]
	for _, name := range []string{SpanSSLRequest, SpanFallback} {
		s, ok := got[name]
		if !ok {
			t.Errorf("no %s span; got %v", name, names(got))
			continue
		}
		if tcp == nil || s.Parent().SpanID() != tcp.SpanContext().SpanID() {
			t.Errorf("%s: parent %v, want %s", name, s.Parent().SpanID(), SpanTCPConnect)
		}
	}
}

func TestErrorType(t *testing.T) {
	tests := []struct {
		name string
		err  error
		def  string
		want string
	}{
		{"server error gives its SQLSTATE", errAuth, ErrorTypeConnectFailed, "28P01"},
		{"connection refused", errDial, ErrorTypeConnectFailed, ErrorTypeDial},
		{"host not found", &net.DNSError{Err: "no such host", Name: testHost, IsNotFound: true}, ErrorTypeConnectFailed, ErrorTypeDNS},
		{"dns timeout is a timeout", &net.DNSError{Err: "i/o timeout", Name: testHost, IsTimeout: true}, ErrorTypeDNS, ErrorTypeTimeout},
		{"context deadline", fmt.Errorf("connect: %w", context.DeadlineExceeded), ErrorTypeConnectFailed, ErrorTypeTimeout},
		{"context canceled", fmt.Errorf("connect: %w", context.Canceled), ErrorTypeConnectFailed, ErrorTypeCanceled},
		{"unknown certificate authority", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, ErrorTypeConnectFailed, ErrorTypeTLS},
		{"host name mismatch", x509.HostnameError{Host: testHost, Certificate: &x509.Certificate{}}, ErrorTypeConnectFailed, ErrorTypeTLS},
		{"not a TLS record", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, ErrorTypeConnectFailed, ErrorTypeTLS},
		{"alert from the server", &net.OpError{Op: "remote error", Err: errors.New("tls: handshake failure")}, ErrorTypeConnectFailed, ErrorTypeTLS},
		{"gssencmode=require without credentials", negotiation.ErrGSSNoCredentials, ErrorTypeConnectFailed, ErrorTypeGSSEncRequire},
		{"gssencmode=require over a Unix socket", negotiation.ErrGSSUnixSocket, ErrorTypeConnectFailed, ErrorTypeGSSEncRequire},
		{"no method allowed", negotiation.ErrNoMethod, ErrorTypeConnectFailed, ErrorTypeNoMethod},
		{"server closed the socket", fmt.Errorf("receive message: %w", io.ErrUnexpectedEOF), ErrorTypeStartup, ErrorTypeNetwork},
		{"read reset", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, ErrorTypeStartup, ErrorTypeNetwork},
		{"anything else takes the step's class", errors.New("server sent an unexpected message"), ErrorTypeStartup, ErrorTypeStartup},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errorType(tt.err, tt.def); got != tt.want {
				t.Errorf("errorType(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

func TestTLSVersion(t *testing.T) {
	tests := []struct {
		v             uint16
		name, version string
	}{
		{tls.VersionTLS13, "tls", "1.3"},
		{tls.VersionTLS12, "tls", "1.2"},
		{tls.VersionTLS10, "tls", "1.0"},
		{0x0300, "ssl", "3"},
		{0x0305, "", "0x0305"},
	}
	for _, tt := range tests {
		t.Run(tls.VersionName(tt.v), func(t *testing.T) {
			if name, version := tlsVersion(tt.v); name != tt.name || version != tt.version {
				t.Errorf("tlsVersion(%#x) = %q, %q, want %q, %q", tt.v, name, version, tt.name, tt.version)
			}
		})
	}
}

func TestPeerAttributes(t *testing.T) {
	tests := []struct {
		name    string
		address string
		want    []attribute.KeyValue
	}{
		{"ipv4", "192.0.2.10:5432", []attribute.KeyValue{semconv.NetworkTransportTCP,
			semconv.NetworkPeerAddress("192.0.2.10"), semconv.NetworkPeerPort(5432)}},
		{"ipv6", "[2001:db8::10]:6432", []attribute.KeyValue{semconv.NetworkTransportTCP,
			semconv.NetworkPeerAddress("2001:db8::10"), semconv.NetworkPeerPort(6432)}},
		{"unix socket path", "/tmp/.s.PGSQL.5432", []attribute.KeyValue{semconv.NetworkTransportUnix,
			semconv.NetworkPeerAddress("/tmp/.s.PGSQL.5432")}},
		{"abstract unix socket", "@pg/.s.PGSQL.5432", []attribute.KeyValue{semconv.NetworkTransportUnix,
			semconv.NetworkPeerAddress("@pg/.s.PGSQL.5432")}},
		{"empty", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkAttrs(t, tt.name, appendPeer(nil, tt.address), tt.want)
		})
	}
}

// checkBalanced fails unless every started span has ended, exactly once.
func checkBalanced(t *testing.T, rec *tracetest.SpanRecorder) {
	t.Helper()
	ended := map[trace.SpanID]int{}
	for _, s := range rec.Ended() {
		ended[s.SpanContext().SpanID()]++
	}
	for _, s := range rec.Started() {
		if n := ended[s.SpanContext().SpanID()]; n != 1 {
			t.Errorf("span %s ended %d times, want 1", s.Name(), n)
		}
	}
	if len(rec.Started()) != len(rec.Ended()) {
		t.Errorf("%d spans started, %d ended", len(rec.Started()), len(rec.Ended()))
	}
}

func checkSpan(t *testing.T, s sdktrace.ReadOnlySpan, w span) {
	t.Helper()
	if s.SpanKind() != w.kind {
		t.Errorf("%s: kind %v, want %v", w.name, s.SpanKind(), w.kind)
	}
	checkAttrs(t, w.name, s.Attributes(), w.attrs)
	if st := s.Status(); st.Code != w.status || st.Description != w.desc {
		t.Errorf("%s: status %v %q, want %v %q", w.name, st.Code, st.Description, w.status, w.desc)
	}
	var events []event
	exception := ""
	for _, ev := range s.Events() {
		if ev.Name == "exception" {
			for _, kv := range ev.Attributes {
				if kv.Key == "exception.message" {
					exception = kv.Value.AsString()
				}
			}
			continue
		}
		events = append(events, event{name: ev.Name, attrs: ev.Attributes})
	}
	if exception != w.exception {
		t.Errorf("%s: exception.message %q, want %q", w.name, exception, w.exception)
	}
	if w.events != nil {
		if len(events) != len(w.events) {
			t.Errorf("%s: %d events, want %d", w.name, len(events), len(w.events))
			return
		}
		for i := range events {
			if events[i].name != w.events[i].name {
				t.Errorf("%s: event %d is %q, want %q", w.name, i, events[i].name, w.events[i].name)
			}
			checkAttrs(t, w.name+": event "+events[i].name, events[i].attrs, w.events[i].attrs)
		}
	}
}

// checkAttrs compares attributes as sets of key=value.
func checkAttrs(t *testing.T, where string, got, want []attribute.KeyValue) {
	t.Helper()
	g, w := attribute.NewSet(got...), attribute.NewSet(want...)
	if g.Len() != len(got) {
		t.Errorf("%s: duplicate attribute keys in %v", where, got)
	}
	if !g.Equals(&w) {
		t.Errorf("%s: attributes\n got %s\nwant %s", where, g.Encoded(attribute.DefaultEncoder()), w.Encoded(attribute.DefaultEncoder()))
	}
}

func names(m map[string]sdktrace.ReadOnlySpan) []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	return out
}

// BenchmarkHooksNoop is the cost of the hooks of a whole connect (scenario a: DNS, socket,
// SSLRequest answered 'N', fallback, startup) when spans do not record.
func BenchmarkHooksNoop(b *testing.B) {
	sc := scenarios(b)[0]
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	b.Cleanup(func() { _ = never.Shutdown(context.Background()) })
	for _, p := range []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"noop", noop.NewTracerProvider()},
		{"sdk-never-sample", never},
	} {
		b.Run(p.name, func(b *testing.B) {
			tr := NewTrace(p.tp)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				sc.drive(ctx, tr)
			}
		})
	}
}
