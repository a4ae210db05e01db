package tracing

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector/negotiation"
)

// Option configures [NewTrace]. There are none yet; the type is kept so that options (for
// example whether to record GSSAPI principal names) can be added without changing NewTrace.
type Option interface {
	apply(*config)
}

type config struct{}

// NewTrace returns hooks that turn each connect step into an OpenTelemetry span.
//
// tp is the TracerProvider of the spans; nil means the global one (otel.GetTracerProvider), read
// once, now. The tracer's scope is [ScopeName] at [Version], with the schema URL of the semantic
// conventions the attributes follow. Every hook of the returned Trace is set, and each may be
// called by concurrent connects. With a no-op TracerProvider the hooks do nothing but pass the
// context on.
func NewTrace(tp trace.TracerProvider, opts ...Option) *negotiation.Trace {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	var cfg config
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	t := &tracer{
		tp: tp,
		tracer: tp.Tracer(ScopeName,
			trace.WithInstrumentationVersion(Version),
			trace.WithSchemaURL(semconv.SchemaURL)),
		cfg:      cfg,
		client:   []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)},
		internal: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)},
	}
	return &negotiation.Trace{
		ConnectStart:        t.connectStart,
		ConnectDone:         t.connectDone,
		Decision:            t.decision,
		ProbeWaitStart:      t.probeWaitStart,
		ProbeWaitDone:       t.probeWaitDone,
		GSSCredentialsStart: t.gssCredentialsStart,
		GSSCredentialsDone:  t.gssCredentialsDone,
		DNSStart:            t.dnsStart,
		DNSDone:             t.dnsDone,
		TCPConnectStart:     t.tcpConnectStart,
		TCPConnectDone:      t.tcpConnectDone,
		SSLRequestStart:     t.sslRequestStart,
		SSLRequestDone:      t.sslRequestDone,
		GSSEncRequestStart:  t.gssEncRequestStart,
		GSSEncRequestDone:   t.gssEncRequestDone,
		ServiceTicketStart:  t.serviceTicketStart,
		ServiceTicketDone:   t.serviceTicketDone,
		GSSContextStart:     t.gssContextStart,
		GSSContextDone:      t.gssContextDone,
		TLSHandshakeStart:   t.tlsHandshakeStart,
		TLSHandshakeDone:    t.tlsHandshakeDone,
		StartupStart:        t.startupStart,
		StartupDone:         t.startupDone,
		Fallback:            t.fallback,
		RefreshStart:        t.refreshStart,
		RefreshDone:         t.refreshDone,
		BackgroundStart:     t.backgroundStart,
		BackgroundDone:      t.backgroundDone,
		CredentialStart:     t.credentialStart,
		CredentialDone:      t.credentialDone,
		OAuthDiscovery:      t.oauthDiscovery,
		CredentialRetry:     t.credentialRetry,
		Detach:              t.detach,
	}
}

type tracer struct {
	tp     trace.TracerProvider
	tracer trace.Tracer
	cfg    config
	// Start options made once, so that starting a span allocates no option slice.
	client, internal []trace.SpanStartOption
}

// stepKey marks, in the context a Start hook returns, the span that hook started, so that the
// matching Done hook ends that span and no other. Each step has its own key: a Done hook given
// the context of another step, of the caller, or no span at all does nothing.
type stepKey uint8

const (
	stepConnect stepKey = iota + 1 // value: *connectState
	stepProbeWait
	stepGSSCredentials
	stepDNS
	stepTCPConnect
	stepSSLRequest
	stepGSSEncRequest
	stepServiceTicket
	stepGSSContext
	stepTLSHandshake
	stepStartup
	stepCredential
)

// connectState is what the steps of one logical connect need from its start.
type connectState struct {
	span     trace.Span
	database string
}

// startStep starts an INTERNAL span named name under the span in ctx, and marks it in the
// returned context with key.
//
// Steps follow the sampling of the connect they belong to: when neither the span in ctx records
// nor ctx belongs to a recording connect (a connect that is not sampled, a no-op provider), no
// step span is started and ctx is returned as it is, at no cost. (The span in ctx may be a step
// that has already ended, if the negotiation code nests a step in one: the connect decides.)
// A span that does not record is not marked either: ending it would do nothing.
func (t *tracer) startStep(ctx context.Context, key stepKey, name string) (context.Context, trace.Span) {
	if unsetGlobal(t.tp) || !traced(ctx) {
		return ctx, nil
	}
	ctx, span := t.tracer.Start(ctx, name, t.internal...)
	if !span.IsRecording() {
		return ctx, nil
	}
	return context.WithValue(ctx, key, span), span
}

// traced reports whether a step under ctx is to be traced: ctx holds a recording span or belongs
// to a recording connect.
func traced(ctx context.Context) bool {
	return trace.SpanFromContext(ctx).IsRecording() || connect(ctx) != nil
}

// stepSpan returns the span the Start hook of step key started, if ctx is the context that hook
// returned (the span is its current span), and nil otherwise.
func stepSpan(ctx context.Context, key stepKey) trace.Span {
	marked, _ := ctx.Value(key).(trace.Span)
	if marked == nil || !sameSpan(trace.SpanFromContext(ctx), marked) {
		return nil
	}
	return marked
}

// connect returns the state of the logical connect ctx belongs to (ctx may be the context of a
// step nested in it), or nil.
func connect(ctx context.Context) *connectState {
	st, _ := ctx.Value(stepConnect).(*connectState)
	return st
}

// sameSpan compares spans by identity of their span context; spans are not always comparable
// with == (the SDK's non-recording span holds a trace state with a slice).
func sameSpan(a, b trace.Span) bool {
	sa, sb := a.SpanContext(), b.SpanContext()
	return sa.SpanID() == sb.SpanID() && sa.TraceID() == sb.TraceID()
}

// fail sets the error of a recording span: status Error with the error's text, error.type,
// db.response.status_code when there is a SQLSTATE, and an exception event. code is the SQLSTATE
// the hook was given, if any; a *pgconn.PgError in err takes precedence.
func fail(span trace.Span, err error, code, def string) {
	if c := sqlState(err); c != "" {
		code = c
	}
	if code != "" {
		span.SetAttributes(semconv.ErrorTypeKey.String(code), semconv.DBResponseStatusCode(code))
	} else {
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(err, def)))
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// endStep ends the span of a step with err as its outcome.
func endStep(ctx context.Context, key stepKey, err error, def string) {
	span := stepSpan(ctx, key)
	if span == nil {
		return
	}
	if err != nil {
		fail(span, err, "", def)
	}
	span.End()
}

func (t *tracer) connectStart(ctx context.Context, info negotiation.ConnectStartInfo) context.Context {
	if unsetGlobal(t.tp) {
		return ctx // no provider yet: the connect and its steps would not record
	}
	// The attributes go in at start so that a sampler sees them (db.system.name is required at
	// creation by the database semantic conventions).
	var a [6]attribute.KeyValue
	kv := connectStartAttributes(append(a[:0], semconv.DBSystemNamePostgreSQL), info)
	opts := [2]trace.SpanStartOption{t.client[0], trace.WithAttributes(kv...)}
	ctx, span := t.tracer.Start(ctx, SpanConnect, opts[:]...)
	if span.IsRecording() {
		ctx = context.WithValue(ctx, stepConnect, &connectState{span: span, database: info.Database})
	}
	return ctx
}

func (t *tracer) connectDone(ctx context.Context, info negotiation.ConnectDoneInfo) {
	st := connect(ctx)
	if st == nil || !sameSpan(trace.SpanFromContext(ctx), st.span) {
		return
	}
	span := st.span
	var a [5]attribute.KeyValue
	span.SetAttributes(connectDoneAttributes(a[:0], info)...)
	if info.Err != nil {
		fail(span, info.Err, "", ErrorTypeConnectFailed)
	}
	span.End()
}

func (t *tracer) decision(ctx context.Context, info negotiation.DecisionInfo) {
	st := connect(ctx)
	if st == nil {
		return
	}
	// Each host's decision is an event of its own, with the host: none of it goes on the connect
	// span, whose attributes are about the connect as a whole (ConnectDone: the host connected
	// to, its transport, the cache.hit of its plan, the sockets opened).
	var a [10]attribute.KeyValue
	kv := decisionAttributes(a[:0], info)
	st.span.AddEvent(EventDecision, trace.WithAttributes(kv...))
}

func (t *tracer) probeWaitStart(ctx context.Context, info negotiation.HostInfo) context.Context {
	ctx, span := t.startStep(ctx, stepProbeWait, SpanProbeWait)
	if span != nil {
		var a [2]attribute.KeyValue
		span.SetAttributes(appendServer(a[:0], info.Host, info.Port)...)
	}
	return ctx
}

func (t *tracer) probeWaitDone(ctx context.Context, err error) {
	endStep(ctx, stepProbeWait, err, ErrorTypeConnectFailed)
}

func (t *tracer) gssCredentialsStart(ctx context.Context) context.Context {
	ctx, _ = t.startStep(ctx, stepGSSCredentials, SpanGSSCredentials)
	return ctx
}

// gssCredentialsDone records whether usable credentials exist and whether the check read the
// credential cache; the hook is never given the principal.
func (t *tracer) gssCredentialsDone(ctx context.Context, info negotiation.GSSCredentialsInfo) {
	span := stepSpan(ctx, stepGSSCredentials)
	if span == nil {
		return
	}
	var a [3]attribute.KeyValue
	span.SetAttributes(gssCredentialsAttributes(a[:0], info)...)
	if info.Err != nil {
		fail(span, info.Err, "", ErrorTypeGSS)
	}
	span.End()
}

func (t *tracer) dnsStart(ctx context.Context, info negotiation.HostInfo) context.Context {
	ctx, span := t.startStep(ctx, stepDNS, SpanDNSLookup)
	if span != nil {
		var a [2]attribute.KeyValue
		span.SetAttributes(appendServer(a[:0], info.Host, info.Port)...)
	}
	return ctx
}

func (t *tracer) dnsDone(ctx context.Context, info negotiation.DNSDoneInfo) {
	span := stepSpan(ctx, stepDNS)
	if span == nil {
		return
	}
	if len(info.Addrs) > 0 {
		span.SetAttributes(DNSAddressesKey.StringSlice(info.Addrs))
	}
	if info.Err != nil {
		fail(span, info.Err, "", ErrorTypeDNS)
	}
	span.End()
}

func (t *tracer) tcpConnectStart(ctx context.Context, info negotiation.DialInfo) context.Context {
	ctx, span := t.startStep(ctx, stepTCPConnect, SpanTCPConnect)
	if span != nil {
		var a [7]attribute.KeyValue
		span.SetAttributes(tcpConnectAttributes(a[:0], info)...)
	}
	return ctx
}

func (t *tracer) tcpConnectDone(ctx context.Context, err error) {
	endStep(ctx, stepTCPConnect, err, ErrorTypeDial)
}

func (t *tracer) sslRequestStart(ctx context.Context, _ negotiation.DialInfo) context.Context {
	ctx, _ = t.startStep(ctx, stepSSLRequest, SpanSSLRequest)
	return ctx
}

func (t *tracer) sslRequestDone(ctx context.Context, info negotiation.RequestDoneInfo) {
	span := stepSpan(ctx, stepSSLRequest)
	if span == nil {
		return
	}
	span.SetAttributes(SSLAnswerKey.String(sslAnswer(info.Answer)), CacheHitKey.Bool(info.CacheHit))
	if info.Err != nil {
		fail(span, info.Err, "", errorTypeRequestDefault)
	}
	span.End()
}

func (t *tracer) gssEncRequestStart(ctx context.Context, _ negotiation.DialInfo) context.Context {
	ctx, _ = t.startStep(ctx, stepGSSEncRequest, SpanGSSEncRequest)
	return ctx
}

func (t *tracer) gssEncRequestDone(ctx context.Context, info negotiation.RequestDoneInfo) {
	span := stepSpan(ctx, stepGSSEncRequest)
	if span == nil {
		return
	}
	span.SetAttributes(GSSAnswerKey.String(gssAnswer(info.Answer)), CacheHitKey.Bool(info.CacheHit))
	if info.Err != nil {
		fail(span, info.Err, "", ErrorTypeGSS)
	}
	span.End()
}

// serviceTicketStart starts the span of obtaining the service ticket. The host (part of the
// service principal) is on the connect and tcp_connect spans; no principal is recorded here.
func (t *tracer) serviceTicketStart(ctx context.Context, _ negotiation.HostInfo) context.Context {
	ctx, _ = t.startStep(ctx, stepServiceTicket, SpanServiceTicket)
	return ctx
}

func (t *tracer) serviceTicketDone(ctx context.Context, info negotiation.ServiceTicketDoneInfo) {
	span := stepSpan(ctx, stepServiceTicket)
	if span == nil {
		return
	}
	var a [2]attribute.KeyValue
	span.SetAttributes(serviceTicketAttributes(a[:0], info)...)
	if info.Err != nil {
		fail(span, info.Err, "", ErrorTypeGSS)
	}
	span.End()
}

func (t *tracer) gssContextStart(ctx context.Context, _ negotiation.DialInfo) context.Context {
	ctx, _ = t.startStep(ctx, stepGSSContext, SpanGSSContext)
	return ctx
}

func (t *tracer) gssContextDone(ctx context.Context, info negotiation.GSSContextDoneInfo) {
	span := stepSpan(ctx, stepGSSContext)
	if span == nil {
		return
	}
	var a [3]attribute.KeyValue
	span.SetAttributes(gssContextAttributes(a[:0], info)...)
	if info.Err != nil {
		fail(span, info.Err, "", ErrorTypeGSS)
	}
	span.End()
}

func (t *tracer) tlsHandshakeStart(ctx context.Context, info negotiation.TLSHandshakeStartInfo) context.Context {
	ctx, span := t.startStep(ctx, stepTLSHandshake, SpanTLSHandshake)
	if span != nil {
		span.SetAttributes(TLSDirectKey.Bool(info.Direct))
		switch {
		case info.Learned:
			span.SetAttributes(TLSDirectSourceKey.String("learned"))
		case info.Direct:
			span.SetAttributes(TLSDirectSourceKey.String("sslnegotiation"))
		}
	}
	return ctx
}

func (t *tracer) tlsHandshakeDone(ctx context.Context, info negotiation.TLSHandshakeDoneInfo) {
	span := stepSpan(ctx, stepTLSHandshake)
	if span == nil {
		return
	}
	var a [8]attribute.KeyValue
	kv := tlsDoneAttributes(a[:0], info)
	span.SetAttributes(kv...)
	if info.Err != nil {
		fail(span, info.Err, "", ErrorTypeTLS)
	}
	span.End()
}

func (t *tracer) startupStart(ctx context.Context, info negotiation.DialInfo) context.Context {
	ctx, span := t.startStep(ctx, stepStartup, SpanStartup)
	if span != nil {
		var a [2]attribute.KeyValue
		kv := a[:0]
		if st := connect(ctx); st != nil && st.database != "" {
			kv = append(kv, semconv.DBNamespace(st.database))
		}
		kv = append(kv, MethodKey.String(info.Method.String()))
		span.SetAttributes(kv...)
	}
	return ctx
}

func (t *tracer) startupDone(ctx context.Context, info negotiation.StartupDoneInfo) {
	span := stepSpan(ctx, stepStartup)
	if span == nil {
		return
	}
	var a [3]attribute.KeyValue
	span.SetAttributes(startupAttributes(a[:0], info)...)
	if info.Err != nil {
		fail(span, info.Err, info.SQLState, ErrorTypeStartup)
	}
	span.End()
}

func (t *tracer) fallback(ctx context.Context, info negotiation.FallbackInfo) {
	if unsetGlobal(t.tp) || !traced(ctx) {
		return // as startStep
	}
	now := time.Now()
	opts := [2]trace.SpanStartOption{t.internal[0], trace.WithTimestamp(now)}
	_, span := t.tracer.Start(ctx, SpanFallback, opts[:]...)
	if span.IsRecording() {
		var a [5]attribute.KeyValue
		span.SetAttributes(fallbackAttributes(a[:0], info)...)
		// A decision takes no time; one microsecond keeps backends that reject zero-length
		// spans (Jaeger warns of a negative duration) quiet.
		span.End(trace.WithTimestamp(now.Add(time.Microsecond)))
		return
	}
	span.End()
}

// appendServer appends server.address and server.port, each when known.
func appendServer(kv []attribute.KeyValue, host string, port uint16) []attribute.KeyValue {
	if host != "" {
		kv = append(kv, semconv.ServerAddress(host))
	}
	if port != 0 {
		kv = append(kv, semconv.ServerPort(int(port)))
	}
	return kv
}

// appendPeer appends network.transport, network.peer.address and network.peer.port for a dial
// address: ip:port, or the path of a Unix-domain socket.
func appendPeer(kv []attribute.KeyValue, address string) []attribute.KeyValue {
	if address == "" {
		return kv
	}
	if !isUnixAddress(address) {
		if host, port, err := net.SplitHostPort(address); err == nil {
			kv = append(kv, semconv.NetworkTransportTCP, semconv.NetworkPeerAddress(host))
			if p, err := strconv.ParseUint(port, 10, 16); err == nil {
				kv = append(kv, semconv.NetworkPeerPort(int(p)))
			}
			return kv
		}
	}
	return append(kv, semconv.NetworkTransportUnix, semconv.NetworkPeerAddress(address))
}

// isUnixAddress reports whether a dial address is a Unix-domain socket: a path, or a Linux
// abstract socket name.
func isUnixAddress(address string) bool {
	return strings.HasPrefix(address, "/") || strings.HasPrefix(address, "@")
}

// sslAnswer is the byte the server answered to SSLRequest, as text.
func sslAnswer(a negotiation.Answer) string {
	switch a {
	case negotiation.AnswerYes:
		return "S"
	case negotiation.AnswerNo:
		return "N"
	}
	return ""
}

// gssAnswer is the byte the server answered to GSSENCRequest, as text.
func gssAnswer(a negotiation.Answer) string {
	switch a {
	case negotiation.AnswerYes:
		return "G"
	case negotiation.AnswerNo:
		return "N"
	}
	return ""
}

// tlsVersion returns tls.protocol.name and tls.protocol.version for a crypto/tls version:
// ("tls", "1.3"), ("ssl", "3"), or ("", "0x0305") for a version crypto/tls does not name.
func tlsVersion(v uint16) (name, version string) {
	s := tls.VersionName(v)
	if rest, ok := strings.CutPrefix(s, "TLS "); ok {
		return "tls", rest
	}
	if s == "SSLv3" {
		return "ssl", "3"
	}
	return "", s
}

// joinMethods is the methods' names separated by commas.
func joinMethods(ms []negotiation.Method) string {
	var b strings.Builder
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(m.String())
	}
	return b.String()
}
