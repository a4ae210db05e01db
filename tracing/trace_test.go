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
	"slices"
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
	// The client and service principals: like secret, they may appear in the text of an error
	// (Kerberos libraries name them) but never as an attribute.
	testPrincipal        = "alice@EXAMPLE.COM"
	testServicePrincipal = "postgres/db.example.com@EXAMPLE.COM"
	testEnctype          = "aes256-cts-hmac-sha1-96"
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
	// errGSSContext is a failed mutual authentication as a Kerberos library reports it, naming
	// both principals.
	errGSSContext = fmt.Errorf("gss: AP-REP from %s for %s: KRB_AP_ERR_MODIFIED (%s)",
		testServicePrincipal, testPrincipal, secret)
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
	// parent is the name of the span expected as parent; "" means the connect span.
	parent string
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
	startGSS := func(ssl negotiation.SSLMode) negotiation.ConnectStartInfo {
		s := start(ssl)
		s.GSSEncMode = negotiation.GSSEncModePrefer
		return s
	}
	modeAttrs := func(ssl, gss string) []attribute.KeyValue {
		return []attribute.KeyValue{semconv.DBSystemNamePostgreSQL, semconv.ServerAddress(testHost),
			semconv.ServerPort(testPort), semconv.DBNamespace(testDB), SSLModeKey.String(ssl),
			GSSEncModeKey.String(gss)}
	}
	startAttrs := func(ssl string) []attribute.KeyValue { return modeAttrs(ssl, "disable") }
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
	// decision is the event of a decision; hit is its cache.hit, "" when absent.
	decision := func(plan string, hit string, skipped string) event {
		attrs := []attribute.KeyValue{PlanKey.String(plan)}
		if skipped != "" {
			attrs = append(attrs, PlanSkippedKey.String(skipped))
		}
		if hit != "" {
			attrs = append(attrs, CacheHitKey.Bool(hit == "true"))
		}
		attrs = append(attrs, ProbeWaitedKey.Bool(false))
		return event{name: EventDecision, attrs: append([]attribute.KeyValue{
			semconv.ServerAddress(testHost), semconv.ServerPort(testPort)}, attrs...)}
	}
	// gssDecision is a decision with gssencmode other than disable: it adds whether the client
	// holds credentials.
	gssDecision := func(plan string, hit string, skipped string, creds bool) event {
		ev := decision(plan, hit, skipped)
		ev.attrs = append(ev.attrs, GSSCredentialsKey.Bool(creds))
		return ev
	}
	credentialsSpan := func(reused bool) span {
		return span{name: SpanGSSCredentials, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
			GSSCredentialsValidKey.Bool(true), GSSCredentialsReusedKey.Bool(reused)}}
	}
	checkCredentials := func(ctx context.Context, tr *negotiation.Trace, reused bool) {
		g := tr.GSSCredentialsStart(ctx)
		tr.GSSCredentialsDone(g, negotiation.GSSCredentialsInfo{Valid: true, Reused: reused})
	}
	resolve := func(ctx context.Context, tr *negotiation.Trace) {
		d := tr.DNSStart(ctx, host)
		tr.DNSDone(d, negotiation.DNSDoneInfo{Addrs: testAddrs})
	}
	connected := func(attrs []attribute.KeyValue, transport string, hit bool) []attribute.KeyValue {
		return append(attrs, TransportKey.String(transport), CacheHitKey.Bool(hit), AttemptsKey.Int(1))
	}
	// tlsAttempt opens a socket, gets 'S' to SSLRequest and a TLS 1.3 handshake, and starts the
	// startup: the steps of sslSpan, tlsSpan and a startup.
	tlsAttempt := func(ctx context.Context, tr *negotiation.Trace) context.Context {
		c := tr.TCPConnectStart(ctx, dial(negotiation.MethodSSL))
		tr.TCPConnectDone(c, nil)
		s := tr.SSLRequestStart(ctx, dial(negotiation.MethodSSL))
		tr.SSLRequestDone(s, negotiation.RequestDoneInfo{Answer: negotiation.AnswerYes})
		h := tr.TLSHandshakeStart(ctx, negotiation.TLSHandshakeStartInfo{ServerName: testHost})
		tr.TLSHandshakeDone(h, negotiation.TLSHandshakeDoneInfo{Version: tls.VersionTLS13,
			CipherSuite: tls.TLS_AES_128_GCM_SHA256})
		return tr.StartupStart(ctx, dial(negotiation.MethodSSL))
	}
	sslSpan := span{name: SpanSSLRequest, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
		SSLAnswerKey.String("S"), CacheHitKey.Bool(false)}}
	tlsSpan := span{name: SpanTLSHandshake, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
		TLSDirectKey.Bool(false), semconv.TLSProtocolNameTLS, semconv.TLSProtocolVersion("1.3"),
		semconv.TLSCipher("TLS_AES_128_GCM_SHA256"), semconv.TLSEstablished(true)}}

	preferIn := negotiation.Input{SSLMode: negotiation.SSLModePrefer, GSSEncMode: negotiation.GSSEncModeDisable}
	preferPlan := mustDecide(t, preferIn)
	requireIn := negotiation.Input{SSLMode: negotiation.SSLModeRequire, GSSEncMode: negotiation.GSSEncModeDisable}
	requirePlan := mustDecide(t, requireIn)
	cachedIn := preferIn
	cachedIn.Known.SSL = negotiation.AnswerNo
	cachedPlan := mustDecide(t, cachedIn)
	gssIn := negotiation.Input{SSLMode: negotiation.SSLModePrefer, GSSEncMode: negotiation.GSSEncModePrefer,
		GSSCredentials: true, GSSGeneration: 7}
	gssPlan := mustDecide(t, gssIn)
	gssKnownIn := gssIn
	gssKnownIn.Known = negotiation.Known{GSS: negotiation.AnswerYes, GSSGeneration: 7}
	gssKnownPlan := mustDecide(t, gssKnownIn)

	var out []scenario

	{ // (a) sslmode=prefer, the server answers 'N': plaintext on the same socket.
		dEvent := decision("ssl,plain", "false", "")
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
					Method: negotiation.MethodPlain, Cache: negotiation.CacheUseMiss, Attempts: 1, Duration: time.Millisecond})
			},
			want: []span{
				{name: SpanConnect, kind: trace.SpanKindClient,
					attrs:  connected(startAttrs("prefer"), "plain", false),
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
		dEvent := decision("ssl", "false", "")
		out = append(out, scenario{
			name: "require/server accepts SSLRequest/TLS 1.3 and scram-sha-256",
			drive: func(ctx context.Context, tr *negotiation.Trace) {
				ctx = tr.ConnectStart(ctx, start(negotiation.SSLModeRequire))
				tr.Decision(ctx, negotiation.DecisionInfo{Host: testHost, Port: testPort, Input: requireIn, Plan: requirePlan})
				resolve(ctx, tr)
				u := tlsAttempt(ctx, tr)
				tr.StartupDone(u, negotiation.StartupDoneInfo{AuthMethod: "scram-sha-256"})
				tr.ConnectDone(ctx, negotiation.ConnectDoneInfo{Host: testHost, Port: testPort,
					Method: negotiation.MethodSSL, Cache: negotiation.CacheUseMiss, Attempts: 1})
			},
			want: []span{
				{name: SpanConnect, kind: trace.SpanKindClient,
					attrs:  connected(startAttrs("require"), "tls", false),
					events: []event{dEvent}},
				dnsSpan,
				tcpSpan("ssl"), sslSpan, tlsSpan,
				{name: SpanStartup, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					semconv.DBNamespace(testDB), MethodKey.String("ssl"), AuthMethodKey.String("scram-sha-256")}},
			},
		})
	}

	{ // (c) the socket cannot be opened.
		dEvent := decision("ssl,plain", "false", "")
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
					attrs: append(startAttrs("prefer"),
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
		dEvent := decision("plain", "true", "ssl")
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
					Attempts: 1, Err: errAuth})
			},
			want: []span{
				{name: SpanConnect, kind: trace.SpanKindClient,
					attrs: append(startAttrs("prefer"), AttemptsKey.Int(1),
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
					GSSEncModeKey.String("prefer"), TransportKey.String("plain"), AttemptsKey.Int(1)},
					events: []event{{name: EventDecision, attrs: []attribute.KeyValue{
						semconv.ServerAddress("/var/run/postgresql"), semconv.ServerPort(testPort),
						PlanKey.String("plain"), ProbeWaitedKey.Bool(true)}}}},
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
	{ // (f) gssencmode=prefer, GSS remembered as working: the server answers 'G', the service
		// ticket is in the credential cache, the context is established, GSS authentication.
		dEvent := gssDecision("gss,ssl,plain", "true", "", true)
		out = append(out, scenario{
			name: scenarioGSSEncrypted,
			drive: func(ctx context.Context, tr *negotiation.Trace) {
				ctx = tr.ConnectStart(ctx, startGSS(negotiation.SSLModePrefer))
				checkCredentials(ctx, tr, true)
				tr.Decision(ctx, negotiation.DecisionInfo{Host: testHost, Port: testPort, Input: gssKnownIn, Plan: gssKnownPlan})
				resolve(ctx, tr)
				c := tr.TCPConnectStart(ctx, dial(negotiation.MethodGSS))
				tr.TCPConnectDone(c, nil)
				r := tr.GSSEncRequestStart(ctx, dial(negotiation.MethodGSS))
				tr.GSSEncRequestDone(r, negotiation.RequestDoneInfo{Answer: negotiation.AnswerYes, CacheHit: true})
				k := tr.ServiceTicketStart(ctx, host)
				tr.ServiceTicketDone(k, negotiation.ServiceTicketDoneInfo{FromCache: true, Enctype: testEnctype})
				x := tr.GSSContextStart(ctx, dial(negotiation.MethodGSS))
				tr.GSSContextDone(x, negotiation.GSSContextDoneInfo{Enctype: testEnctype})
				u := tr.StartupStart(ctx, dial(negotiation.MethodGSS))
				tr.StartupDone(u, negotiation.StartupDoneInfo{AuthMethod: "gss-or-trust"})
				tr.ConnectDone(ctx, negotiation.ConnectDoneInfo{Host: testHost, Port: testPort,
					Method: negotiation.MethodGSS, Cache: negotiation.CacheUseHit, Attempts: 1})
			},
			want: []span{
				{name: SpanConnect, kind: trace.SpanKindClient,
					attrs:  connected(modeAttrs("prefer", "prefer"), "gss", true),
					events: []event{dEvent}},
				credentialsSpan(true),
				dnsSpan,
				tcpSpan("gss"),
				{name: SpanGSSEncRequest, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					GSSAnswerKey.String("G"), CacheHitKey.Bool(true)}},
				{name: SpanServiceTicket, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					GSSTicketFromCacheKey.Bool(true), GSSEnctypeKey.String(testEnctype)}},
				{name: SpanGSSContext, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					GSSEnctypeKey.String(testEnctype)}},
				{name: SpanStartup, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					semconv.DBNamespace(testDB), MethodKey.String("gss"), AuthMethodKey.String("gss-or-trust")}},
			},
		})
	}

	{ // (g) gssencmode=prefer, the server answers 'N' to GSSENCRequest, then 'N' to SSLRequest on
		// the same socket: plaintext, still on that socket.
		dEvent := gssDecision("gss,ssl,plain", "false", "", true)
		out = append(out, scenario{
			name: "gssencmode=prefer/server refuses GSSENCRequest then SSLRequest/plaintext on same socket",
			drive: func(ctx context.Context, tr *negotiation.Trace) {
				ctx = tr.ConnectStart(ctx, startGSS(negotiation.SSLModePrefer))
				checkCredentials(ctx, tr, false)
				tr.Decision(ctx, negotiation.DecisionInfo{Host: testHost, Port: testPort, Input: gssIn, Plan: gssPlan})
				resolve(ctx, tr)
				c := tr.TCPConnectStart(ctx, dial(negotiation.MethodGSS))
				tr.TCPConnectDone(c, nil)
				r := tr.GSSEncRequestStart(ctx, dial(negotiation.MethodGSS))
				tr.GSSEncRequestDone(r, negotiation.RequestDoneInfo{Answer: negotiation.AnswerNo})
				tr.Fallback(ctx, negotiation.FallbackInfo{Host: testHost, From: negotiation.MethodGSS,
					To: negotiation.MethodSSL, Reason: "server refused GSSENCRequest"})
				s := tr.SSLRequestStart(ctx, dial(negotiation.MethodSSL))
				tr.SSLRequestDone(s, negotiation.RequestDoneInfo{Answer: negotiation.AnswerNo})
				tr.Fallback(ctx, negotiation.FallbackInfo{Host: testHost, From: negotiation.MethodSSL,
					To: negotiation.MethodPlain, Reason: "server refused SSLRequest"})
				u := tr.StartupStart(ctx, dial(negotiation.MethodPlain))
				tr.StartupDone(u, negotiation.StartupDoneInfo{AuthMethod: "trust"})
				tr.ConnectDone(ctx, negotiation.ConnectDoneInfo{Host: testHost, Port: testPort,
					Method: negotiation.MethodPlain, Cache: negotiation.CacheUseMiss, Attempts: 1})
			},
			want: []span{
				{name: SpanConnect, kind: trace.SpanKindClient,
					attrs:  connected(modeAttrs("prefer", "prefer"), "plain", false),
					events: []event{dEvent}},
				credentialsSpan(false),
				dnsSpan,
				tcpSpan("gss"),
				{name: SpanGSSEncRequest, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					GSSAnswerKey.String("N"), CacheHitKey.Bool(false)}},
				{name: SpanFallback, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					semconv.ServerAddress(testHost), FallbackFromKey.String("gss"), FallbackToKey.String("ssl"),
					FallbackReasonKey.String("server refused GSSENCRequest"), FallbackNewConnectionKey.Bool(false)}},
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

	{ // (h) gssencmode=prefer, 'G', a ticket from the KDC, then the context fails: SSL on a new
		// connection.
		dEvent := gssDecision("gss,ssl,plain", "false", "", true)
		out = append(out, scenario{
			name: "gssencmode=prefer/GSS context fails/TLS on a new connection",
			drive: func(ctx context.Context, tr *negotiation.Trace) {
				ctx = tr.ConnectStart(ctx, startGSS(negotiation.SSLModePrefer))
				checkCredentials(ctx, tr, false)
				tr.Decision(ctx, negotiation.DecisionInfo{Host: testHost, Port: testPort, Input: gssIn, Plan: gssPlan})
				resolve(ctx, tr)
				c := tr.TCPConnectStart(ctx, dial(negotiation.MethodGSS))
				tr.TCPConnectDone(c, nil)
				r := tr.GSSEncRequestStart(ctx, dial(negotiation.MethodGSS))
				tr.GSSEncRequestDone(r, negotiation.RequestDoneInfo{Answer: negotiation.AnswerYes})
				k := tr.ServiceTicketStart(ctx, host)
				tr.ServiceTicketDone(k, negotiation.ServiceTicketDoneInfo{Enctype: testEnctype})
				x := tr.GSSContextStart(ctx, dial(negotiation.MethodGSS))
				tr.GSSContextDone(x, negotiation.GSSContextDoneInfo{Enctype: testEnctype, Err: errGSSContext})
				tr.Fallback(ctx, negotiation.FallbackInfo{Host: testHost, From: negotiation.MethodGSS,
					To: negotiation.MethodSSL, Reason: "GSSAPI context establishment failed", NewConnection: true})
				u := tlsAttempt(ctx, tr)
				tr.StartupDone(u, negotiation.StartupDoneInfo{AuthMethod: "scram-sha-256"})
				tr.ConnectDone(ctx, negotiation.ConnectDoneInfo{Host: testHost, Port: testPort,
					Method: negotiation.MethodSSL, Cache: negotiation.CacheUseMiss, Attempts: 2})
			},
			want: []span{
				{name: SpanConnect, kind: trace.SpanKindClient,
					attrs: append(modeAttrs("prefer", "prefer"), TransportKey.String("tls"),
						CacheHitKey.Bool(false), AttemptsKey.Int(2)),
					events: []event{dEvent}},
				credentialsSpan(false),
				dnsSpan,
				tcpSpan("gss"),
				{name: SpanGSSEncRequest, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					GSSAnswerKey.String("G"), CacheHitKey.Bool(false)}},
				{name: SpanServiceTicket, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					GSSTicketFromCacheKey.Bool(false), GSSEnctypeKey.String(testEnctype)}},
				{name: SpanGSSContext, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					GSSEnctypeKey.String(testEnctype), semconv.ErrorTypeKey.String(ErrorTypeGSS)},
					status: codes.Error, desc: errGSSContext.Error(), exception: errGSSContext.Error()},
				{name: SpanFallback, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					semconv.ServerAddress(testHost), FallbackFromKey.String("gss"), FallbackToKey.String("ssl"),
					FallbackReasonKey.String("GSSAPI context establishment failed"), FallbackNewConnectionKey.Bool(true)}},
				tcpSpan("ssl"), sslSpan, tlsSpan,
				{name: SpanStartup, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					semconv.DBNamespace(testDB), MethodKey.String("ssl"), AuthMethodKey.String("scram-sha-256")}},
			},
		})
	}
	{ // (i) sslmode=verify-full, pg_hba oauth: the first startup sends an empty token, the server
		// answers with its discovery URI and scope, the attempt is made again on a new
		// connection, whose startup waits for a token fetched from the application's function.
		verifyIn := negotiation.Input{SSLMode: negotiation.SSLModeVerifyFull, GSSEncMode: negotiation.GSSEncModeDisable}
		verifyPlan := mustDecide(t, verifyIn)
		dEvent := decision("ssl", "false", "")
		out = append(out, scenario{
			name: scenarioOAuth,
			drive: func(ctx context.Context, tr *negotiation.Trace) {
				ctx = tr.ConnectStart(ctx, start(negotiation.SSLModeVerifyFull))
				tr.Decision(ctx, negotiation.DecisionInfo{Host: testHost, Port: testPort, Input: verifyIn, Plan: verifyPlan})
				resolve(ctx, tr)
				u := tlsAttempt(ctx, tr)
				tr.OAuthDiscovery(u, negotiation.OAuthDiscoveryInfo{Host: testHost, Port: testPort, Status: "invalid_token",
					DiscoveryURI: testDiscoveryURI, Scope: testScope})
				tr.StartupDone(u, negotiation.StartupDoneInfo{AuthMethod: "oauth", SASLMechanism: "OAUTHBEARER", Err: errDiscovery})
				tr.CredentialRetry(ctx, negotiation.CredentialRetryInfo{Kind: negotiation.CredentialOAuthToken,
					Host: testHost, Port: testPort, Reason: "oauth discovery"})
				u = tlsAttempt(ctx, tr)
				w := tr.CredentialStart(u, negotiation.CredentialStartInfo{Kind: negotiation.CredentialOAuthToken, Host: testHost, Port: testPort})
				tr.CredentialDone(w, negotiation.CredentialDoneInfo{Kind: negotiation.CredentialOAuthToken,
					Source: negotiation.CredentialFetched, Duration: time.Millisecond})
				tr.StartupDone(u, negotiation.StartupDoneInfo{AuthMethod: "oauth", SASLMechanism: "OAUTHBEARER"})
				tr.ConnectDone(ctx, negotiation.ConnectDoneInfo{Host: testHost, Port: testPort,
					Method: negotiation.MethodSSL, Cache: negotiation.CacheUseMiss, Attempts: 2})
			},
			want: []span{
				{name: SpanConnect, kind: trace.SpanKindClient,
					attrs: append(startAttrs("verify-full"), TransportKey.String("tls"), CacheHitKey.Bool(false),
						AttemptsKey.Int(2)),
					events: []event{dEvent, {name: EventCredentialRetry, attrs: []attribute.KeyValue{
						semconv.ServerAddress(testHost), semconv.ServerPort(testPort),
						CredentialKindKey.String("oauth_token"), CredentialRetryReasonKey.String("oauth discovery")}}}},
				dnsSpan,
				tcpSpan("ssl"), sslSpan, tlsSpan,
				{name: SpanStartup, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					semconv.DBNamespace(testDB), MethodKey.String("ssl"), AuthMethodKey.String("oauth"),
					AuthSASLMechanismKey.String("OAUTHBEARER"), semconv.ErrorTypeKey.String(ErrorTypeStartup)},
					status: codes.Error, desc: errDiscovery.Error(), exception: errDiscovery.Error(),
					events: []event{{name: EventOAuthDiscovery, attrs: []attribute.KeyValue{
						OAuthStatusKey.String("invalid_token"), OAuthDiscoveryURIKey.String(testDiscoveryURI),
						OAuthScopeKey.String(testScope), OAuthTokenRefusedKey.Bool(false)}}}},
				tcpSpan("ssl"), sslSpan, tlsSpan,
				{name: SpanCredential, kind: trace.SpanKindInternal, parent: SpanStartup, attrs: []attribute.KeyValue{
					semconv.ServerAddress(testHost), semconv.ServerPort(testPort),
					CredentialKindKey.String("oauth_token"), CredentialSourceKey.String("fetched")}},
				{name: SpanStartup, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
					semconv.DBNamespace(testDB), MethodKey.String("ssl"), AuthMethodKey.String("oauth"),
					AuthSASLMechanismKey.String("OAUTHBEARER")}, events: []event{}},
			},
		})
	}
	return out
}

// scenarioOAuth is the name of scenario (i): OAuth discovery, a retry, a token fetched.
const scenarioOAuth = "verify-full/oauth discovery/retry on a new connection with a fetched token"

// The OAuth issuer of scenario (i), and the error of its first startup.
const (
	testDiscoveryURI = "https://issuer.example.com/.well-known/openid-configuration"
	testScope        = "openid db"
)

var errDiscovery = errors.New("OAuth discovery: the server asked for a bearer token")

// scenarioGSSEncrypted is the name of scenario (f), which BenchmarkHooksNoop also runs.
const scenarioGSSEncrypted = "gssencmode=prefer/cached G/GSS encryption, ticket from cache, gss auth"

func TestSpans(t *testing.T) {
	for _, sc := range scenarios(t) {
		t.Run(sc.name, func(t *testing.T) {
			f := newFixture(t)
			sc.drive(f.ctx, f.tr)
			f.caller.End()

			checkBalanced(t, f.rec)
			ended := f.rec.Ended()
			if len(ended) != len(sc.want)+1 {
				t.Errorf("got %d spans %v, want %d and the caller", len(ended), spanNames(ended), len(sc.want))
			}
			// Spans of the same name (two sockets, two fallbacks) are matched in the order they
			// ended, which is the order of the hooks.
			got := map[string][]sdktrace.ReadOnlySpan{}
			for _, s := range ended {
				got[s.Name()] = append(got[s.Name()], s)
			}
			if n := len(got[SpanConnect]); n != 1 {
				t.Fatalf("%d %s spans, want 1; got %v", n, SpanConnect, spanNames(ended))
			}
			root := got[SpanConnect][0]
			callerSC := f.caller.SpanContext()
			if root.Parent().SpanID() != callerSC.SpanID() || root.SpanContext().TraceID() != callerSC.TraceID() {
				t.Errorf("%s: parent %v, want the caller span %v", SpanConnect, root.Parent().SpanID(), callerSC.SpanID())
			}
			seen := map[string]int{}
			for _, w := range sc.want {
				i := seen[w.name]
				seen[w.name]++
				if i >= len(got[w.name]) {
					t.Errorf("no %s span #%d; got %v", w.name, i+1, spanNames(ended))
					continue
				}
				s := got[w.name][i]
				checkSpan(t, s, w)
				switch {
				case w.name == SpanConnect:
				case w.parent != "":
					// The parent is the last span of that name ended before s.
					var parent sdktrace.ReadOnlySpan
					for _, p := range ended {
						if p.Name() == w.parent && !p.EndTime().Before(s.EndTime()) {
							parent = p
							break
						}
					}
					if parent == nil || s.Parent().SpanID() != parent.SpanContext().SpanID() {
						t.Errorf("%s: parent %v, want a %s", w.name, s.Parent().SpanID(), w.parent)
					}
				case s.Parent().SpanID() != root.SpanContext().SpanID():
					t.Errorf("%s: parent %v, want %s %v", w.name, s.Parent().SpanID(), SpanConnect, root.SpanContext().SpanID())
				}
			}
			// The steps ended in the order of the scenario (the connect span ends last).
			var order, wantOrder []string
			for _, s := range ended {
				if s.Name() != SpanConnect && s.Name() != "caller" {
					order = append(order, s.Name())
				}
			}
			for _, w := range sc.want[1:] {
				wantOrder = append(wantOrder, w.name)
			}
			if !slices.Equal(order, wantOrder) {
				t.Errorf("steps ended in the order\n %v\nwant\n %v", order, wantOrder)
			}
			for _, s := range got[SpanFallback] {
				if d := s.EndTime().Sub(s.StartTime()); d != time.Microsecond {
					t.Errorf("%s: lasts %v, want 1µs", SpanFallback, d)
				}
			}
		})
	}
}

// TestNothingButHostPortDatabase checks, over every scenario, that the only attributes are the
// documented ones (no user, password, principal or other field of the connection string), and
// that the text of an error appears only where it is recorded as-is: the status description and
// exception.message.
func TestNothingButHostPortDatabase(t *testing.T) {
	for _, sc := range scenarios(t) {
		t.Run(sc.name, func(t *testing.T) {
			f := newFixture(t)
			sc.drive(f.ctx, f.tr)
			checkDocumented(t, f.rec.Ended())
		})
	}
}

// documented is every attribute key the package may set.
var documented = func() map[attribute.Key]bool {
	m := map[attribute.Key]bool{}
	for _, k := range []attribute.Key{
		semconv.DBSystemNameKey, semconv.DBNamespaceKey, semconv.ServerAddressKey, semconv.ServerPortKey,
		semconv.ErrorTypeKey, semconv.DBResponseStatusCodeKey, semconv.NetworkTransportKey,
		semconv.NetworkPeerAddressKey, semconv.NetworkPeerPortKey, semconv.TLSProtocolNameKey,
		semconv.TLSProtocolVersionKey, semconv.TLSCipherKey, semconv.TLSEstablishedKey,
		SSLModeKey, GSSEncModeKey, TransportKey, CacheHitKey, AttemptsKey, PlanKey, PlanSkippedKey,
		ProbeWaitedKey, GSSCredentialsKey, GSSCredentialsValidKey, GSSCredentialsReusedKey,
		DNSAddressesKey, MethodKey, SSLAnswerKey, GSSAnswerKey, GSSTicketFromCacheKey, GSSEnctypeKey,
		TLSDirectKey, AuthMethodKey, FallbackFromKey, FallbackToKey, FallbackReasonKey,
		FallbackNewConnectionKey, GSSCredentialsSourceKey, GSSDelegatedKey, GSSDelegationSkippedKey,
		AddressRememberedDownKey, RoleFirstKey, AddressAgeKey, AuthSASLMechanismKey,
		CredentialKindKey, CredentialSourceKey, CredentialRetryReasonKey, OAuthStatusKey,
		OAuthDiscoveryURIKey, OAuthScopeKey, OAuthTokenRefusedKey, OAuthChangedKey,
	} {
		m[k] = true
	}
	return m
}()

// checkDocumented fails for an attribute of spans or of their events that is not documented, or
// that holds the text of an error (exception.type and exception.message excepted).
func checkDocumented(t *testing.T, spans []sdktrace.ReadOnlySpan) {
	t.Helper()
	exceptionKeys := map[attribute.Key]bool{"exception.type": true, "exception.message": true}
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			if !documented[kv.Key] {
				t.Errorf("%s: attribute %s is not documented", s.Name(), kv.Key)
			}
			checkNoSecret(t, s.Name(), kv)
		}
		for _, ev := range s.Events() {
			for _, kv := range ev.Attributes {
				if ev.Name == "exception" && exceptionKeys[kv.Key] {
					continue // the error's text, as-is
				}
				if !documented[kv.Key] {
					t.Errorf("%s: event %s: attribute %s is not documented", s.Name(), ev.Name, kv.Key)
				}
				checkNoSecret(t, s.Name()+": event "+ev.Name, kv)
			}
		}
	}
}

func checkNoSecret(t *testing.T, where string, kv attribute.KeyValue) {
	t.Helper()
	v := kv.Value.Emit()
	for _, bad := range []string{secret, "alice", testPrincipal, testServicePrincipal, "EXAMPLE.COM", "postgres/"} {
		if strings.Contains(v, bad) {
			t.Errorf("%s: attribute %s = %q holds the text of an error or a principal", where, kv.Key, v)
			return
		}
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
		{"GSSCredentialsDone", func(tr *negotiation.Trace, ctx context.Context) {
			tr.GSSCredentialsDone(ctx, negotiation.GSSCredentialsInfo{Valid: true, Reused: true, Err: errGSSContext})
		}},
		{"GSSEncRequestDone", func(tr *negotiation.Trace, ctx context.Context) {
			tr.GSSEncRequestDone(ctx, negotiation.RequestDoneInfo{Answer: negotiation.AnswerYes, Err: errDial})
		}},
		{"ServiceTicketDone", func(tr *negotiation.Trace, ctx context.Context) {
			tr.ServiceTicketDone(ctx, negotiation.ServiceTicketDoneInfo{FromCache: true, Enctype: testEnctype, Err: errGSSContext})
		}},
		{"GSSContextDone", func(tr *negotiation.Trace, ctx context.Context) {
			tr.GSSContextDone(ctx, negotiation.GSSContextDoneInfo{Enctype: testEnctype, Err: errGSSContext})
		}},
		{"CredentialDone", func(tr *negotiation.Trace, ctx context.Context) {
			tr.CredentialDone(ctx, negotiation.CredentialDoneInfo{Kind: negotiation.CredentialPassword,
				Source: negotiation.CredentialFetched, Err: errDial})
		}},
		{"CredentialRetry", func(tr *negotiation.Trace, ctx context.Context) {
			tr.CredentialRetry(ctx, negotiation.CredentialRetryInfo{Kind: negotiation.CredentialPassword, Reason: "password refused"})
		}},
		{"OAuthDiscovery", func(tr *negotiation.Trace, ctx context.Context) {
			tr.OAuthDiscovery(ctx, negotiation.OAuthDiscoveryInfo{Status: "invalid_token", DiscoveryURI: testDiscoveryURI})
		}},
		{"Decision", func(tr *negotiation.Trace, ctx context.Context) {
			tr.Decision(ctx, negotiation.DecisionInfo{Host: testHost,
				Input: negotiation.Input{GSSEncMode: negotiation.GSSEncModePrefer, GSSCredentials: true}})
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
				(d.name == "Decision" && c.name == "connect span") ||
				((d.name == "CredentialRetry" || d.name == "OAuthDiscovery") && c.name == "connect span") {
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
						hasKey(attrs, PlanKey) || hasKey(attrs, GSSCredentialsKey) || hasKey(attrs, GSSCredentialsValidKey) ||
						hasKey(attrs, GSSAnswerKey) || hasKey(attrs, GSSTicketFromCacheKey) || hasKey(attrs, GSSEnctypeKey) ||
						len(s.Events()) != 0 {
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
		{"GSSCredentialsStart", func(tr *negotiation.Trace, ctx context.Context) context.Context {
			return tr.GSSCredentialsStart(ctx)
		}},
		{"GSSEncRequestStart", func(tr *negotiation.Trace, ctx context.Context) context.Context {
			return tr.GSSEncRequestStart(ctx, negotiation.DialInfo{Host: testHost})
		}},
		{"ServiceTicketStart", func(tr *negotiation.Trace, ctx context.Context) context.Context {
			return tr.ServiceTicketStart(ctx, negotiation.HostInfo{Host: testHost})
		}},
		{"GSSContextStart", func(tr *negotiation.Trace, ctx context.Context) context.Context {
			return tr.GSSContextStart(ctx, negotiation.DialInfo{Host: testHost})
		}},
		{"Fallback", func(tr *negotiation.Trace, ctx context.Context) context.Context {
			tr.Fallback(ctx, negotiation.FallbackInfo{From: negotiation.MethodSSL})
			return ctx
		}},
		{"CredentialStart", func(tr *negotiation.Trace, ctx context.Context) context.Context {
			return tr.CredentialStart(ctx, negotiation.CredentialStartInfo{Kind: negotiation.CredentialOAuthToken, Host: testHost})
		}},
		{"OAuthDiscovery", func(tr *negotiation.Trace, ctx context.Context) context.Context {
			tr.OAuthDiscovery(ctx, negotiation.OAuthDiscoveryInfo{Status: "invalid_token", DiscoveryURI: testDiscoveryURI})
			return ctx
		}},
		{"CredentialRetry", func(tr *negotiation.Trace, ctx context.Context) context.Context {
			tr.CredentialRetry(ctx, negotiation.CredentialRetryInfo{Kind: negotiation.CredentialOAuthToken, Reason: "token refused"})
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

// TestGSSStepFailures checks the status and error.type of each GSS step that fails: the class
// chosen from the Go error, or gss_error, and attributes known before the failure kept.
func TestGSSStepFailures(t *testing.T) {
	errCCache := fmt.Errorf("gss: credential cache FILE:/tmp/krb5cc_1000 of %s: ticket expired", testPrincipal)
	errE := errors.New("server sent an error response to GSSENCRequest")
	errKDC := fmt.Errorf("KRB Error: (7) KDC_ERR_S_PRINCIPAL_UNKNOWN Server not found in Kerberos database: %s", testServicePrincipal)
	errTimeout := fmt.Errorf("gss: %w", context.DeadlineExceeded)
	dial := negotiation.DialInfo{Host: testHost, Address: testIPv4 + ":5432", Method: negotiation.MethodGSS}
	failed := func(name string, err error, class string, attrs ...attribute.KeyValue) span {
		return span{name: name, kind: trace.SpanKindInternal, attrs: append(attrs, semconv.ErrorTypeKey.String(class)),
			status: codes.Error, desc: err.Error(), exception: err.Error()}
	}
	tests := []struct {
		name string
		step func(ctx context.Context, tr *negotiation.Trace)
		want span
	}{
		{"credentials check fails",
			func(ctx context.Context, tr *negotiation.Trace) {
				g := tr.GSSCredentialsStart(ctx)
				tr.GSSCredentialsDone(g, negotiation.GSSCredentialsInfo{Err: errCCache})
			},
			failed(SpanGSSCredentials, errCCache, ErrorTypeGSS,
				GSSCredentialsValidKey.Bool(false), GSSCredentialsReusedKey.Bool(false))},
		{"server sends ErrorResponse to GSSENCRequest",
			func(ctx context.Context, tr *negotiation.Trace) {
				r := tr.GSSEncRequestStart(ctx, dial)
				tr.GSSEncRequestDone(r, negotiation.RequestDoneInfo{Err: errE})
			},
			failed(SpanGSSEncRequest, errE, ErrorTypeGSS, GSSAnswerKey.String(""), CacheHitKey.Bool(false))},
		{"server closes the socket before answering GSSENCRequest",
			func(ctx context.Context, tr *negotiation.Trace) {
				r := tr.GSSEncRequestStart(ctx, dial)
				tr.GSSEncRequestDone(r, negotiation.RequestDoneInfo{CacheHit: true, Err: io.ErrUnexpectedEOF})
			},
			failed(SpanGSSEncRequest, io.ErrUnexpectedEOF, ErrorTypeNetwork, GSSAnswerKey.String(""), CacheHitKey.Bool(true))},
		{"KDC does not know the service principal",
			func(ctx context.Context, tr *negotiation.Trace) {
				k := tr.ServiceTicketStart(ctx, negotiation.HostInfo{Host: testHost, Port: testPort})
				tr.ServiceTicketDone(k, negotiation.ServiceTicketDoneInfo{Err: errKDC})
			},
			failed(SpanServiceTicket, errKDC, ErrorTypeGSS, GSSTicketFromCacheKey.Bool(false))},
		{"context establishment times out",
			func(ctx context.Context, tr *negotiation.Trace) {
				x := tr.GSSContextStart(ctx, dial)
				tr.GSSContextDone(x, negotiation.GSSContextDoneInfo{Enctype: testEnctype, Err: errTimeout})
			},
			failed(SpanGSSContext, errTimeout, ErrorTypeTimeout, GSSEnctypeKey.String(testEnctype))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			ctx := f.tr.ConnectStart(f.ctx, negotiation.ConnectStartInfo{Host: testHost,
				GSSEncMode: negotiation.GSSEncModePrefer})
			tt.step(ctx, f.tr)
			f.tr.ConnectDone(ctx, negotiation.ConnectDoneInfo{Method: negotiation.MethodSSL, Attempts: 1})
			f.caller.End()
			checkBalanced(t, f.rec)
			got := f.ended(t)
			s, ok := got[tt.want.name]
			if !ok {
				t.Fatalf("no %s span; got %v", tt.want.name, names(got))
			}
			checkSpan(t, s, tt.want)
			if root := got[SpanConnect]; root == nil || s.Parent().SpanID() != root.SpanContext().SpanID() {
				t.Errorf("%s: parent %v, want %s", tt.want.name, s.Parent().SpanID(), SpanConnect)
			}
			checkDocumented(t, f.rec.Ended())
		})
	}
}

// TestStepsAllocateNothingNotRecording checks that, when spans do not record, a whole connect
// costs the allocations of ConnectStart and ConnectDone alone: the step hooks allocate nothing.
func TestStepsAllocateNothingNotRecording(t *testing.T) {
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	t.Cleanup(func() { _ = never.Shutdown(context.Background()) })
	for _, p := range []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"noop", noop.NewTracerProvider()},
		{"sdk-never-sample", never},
	} {
		tr := NewTrace(p.tp)
		ctx := context.Background()
		base := testing.AllocsPerRun(100, func() {
			c := tr.ConnectStart(ctx, negotiation.ConnectStartInfo{Host: testHost, Port: testPort, Database: testDB,
				SSLMode: negotiation.SSLModePrefer, GSSEncMode: negotiation.GSSEncModePrefer})
			tr.ConnectDone(c, negotiation.ConnectDoneInfo{Host: testHost, Port: testPort,
				Method: negotiation.MethodGSS, Attempts: 1})
		})
		for _, sc := range scenarios(t) {
			t.Run(p.name+"/"+sc.name, func(t *testing.T) {
				if n := testing.AllocsPerRun(100, func() { sc.drive(ctx, tr) }); n != base {
					t.Errorf("%v allocations per connect, want %v (those of the connect span alone)", n, base)
				}
			})
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
		{"gssencmode=require refused by the server", fmt.Errorf("%w (host %s)", negotiation.ErrGSSRequired, testHost), ErrorTypeConnectFailed, ErrorTypeGSSEncRequire},
		{"no method allowed", negotiation.ErrNoMethod, ErrorTypeConnectFailed, ErrorTypeNoMethod},
		{"bytes with the answer", fmt.Errorf("tls error: %w", &negotiation.ProtocolError{Request: "SSLRequest", Problem: "x"}), ErrorTypeConnectFailed, ErrorTypeProtocol},
		{"ErrorResponse to SSLRequest", &negotiation.ErrorResponseError{Request: "SSLRequest"}, ErrorTypeConnectFailed, ErrorTypeErrorResponse},
		{"Kerberos refused", fmt.Errorf("gss: %w", negotiation.ErrGSSRejected), ErrorTypeGSS, ErrorTypeGSSRejected},
		{"tampering", fmt.Errorf("gss: %w", negotiation.ErrGSSUnverified), ErrorTypeGSS, ErrorTypeGSSUnverified},
		{"gssencmode=require, server closed", &negotiation.GSSRequiredError{Reason: "x", Err: io.ErrUnexpectedEOF}, ErrorTypeConnectFailed, ErrorTypeGSSEncRequire},
		{"GSS context failure takes the GSS class", errGSSContext, ErrorTypeGSS, ErrorTypeGSS},
		{"GSS token cut short is a network error", fmt.Errorf("GSSAPI context establishment failed: %w", io.ErrUnexpectedEOF), ErrorTypeGSS, ErrorTypeNetwork},
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

func spanNames(spans []sdktrace.ReadOnlySpan) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name()
	}
	return out
}

func names(m map[string]sdktrace.ReadOnlySpan) []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	return out
}

// BenchmarkHooksNoop is the cost of the hooks of a whole connect when spans do not record:
// scenario a (DNS, socket, SSLRequest answered 'N', fallback, startup), and scenario f with the
// GSS steps (credentials, GSSENCRequest, service ticket, context). Steps allocate nothing: both
// cost the same allocations, those of the connect span.
func BenchmarkHooksNoop(b *testing.B) {
	scs := scenarios(b)
	gss := scs[slices.IndexFunc(scs, func(sc scenario) bool { return sc.name == scenarioGSSEncrypted })]
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	b.Cleanup(func() { _ = never.Shutdown(context.Background()) })
	for _, p := range []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"noop", noop.NewTracerProvider()},
		{"sdk-never-sample", never},
	} {
		for _, v := range []struct {
			suffix string
			sc     scenario
		}{{"", scs[0]}, {"-gss", gss}} {
			b.Run(p.name+v.suffix, func(b *testing.B) {
				tr := NewTrace(p.tp)
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					v.sc.drive(ctx, tr)
				}
			})
		}
	}
}

// TestDocsSpanAttributes: every attribute key the package may set on a connect or refresh span or
// its events is named in docs/observability.md, the page that says what each one holds.
func TestDocsSpanAttributes(t *testing.T) {
	b, err := os.ReadFile("../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	for k := range documented {
		if !strings.Contains(string(b), "`"+string(k)+"`") {
			t.Errorf("docs/observability.md does not name the attribute %s", k)
		}
	}
}

// An address tried late because it was remembered down says so on its tcp_connect span; any
// other has no such attribute.
func TestTCPConnectRememberedDown(t *testing.T) {
	for _, down := range []bool{true, false} {
		f := newFixture(t)
		ctx := f.tr.ConnectStart(f.ctx, negotiation.ConnectStartInfo{Host: testHost, Port: testPort})
		dctx := f.tr.TCPConnectStart(ctx, negotiation.DialInfo{Host: testHost, Address: testIPv4 + ":5432",
			Method: negotiation.MethodPlain, RememberedDown: down})
		f.tr.TCPConnectDone(dctx, nil)
		f.tr.ConnectDone(ctx, negotiation.ConnectDoneInfo{Host: testHost, Port: testPort, Method: negotiation.MethodPlain})
		span := f.ended(t)[SpanTCPConnect]
		if span == nil {
			t.Fatal("no tcp_connect span")
		}
		got, found := false, false
		for _, kv := range span.Attributes() {
			if kv.Key == AddressRememberedDownKey {
				got, found = kv.Value.AsBool(), true
			}
		}
		if found != down || got != down {
			t.Errorf("remembered down %v: attribute present %v, value %v", down, found, got)
		}
	}
}
