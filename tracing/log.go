package tracing

import (
	"context"
	"errors"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/pgconnector/pgconnector/negotiation"
)

// Messages of the log records of [NewLogTrace]. A step's record has the step's span name as
// its message (SpanTCPConnect, SpanSSLRequest, ...).
const (
	LogConnectStart    = "connect started"
	LogDecision        = "decision"
	LogConnected       = "connected"
	LogConnectFailed   = "connect failed"
	LogProtocolFault   = "the server broke the protocol"
	LogFallback        = "fallback"
	LogRefreshStart    = "refresh of a remembered answer started"
	LogAnswerChanged   = "remembered answer changed"
	LogAnswerConfirmed = "remembered answer confirmed"
	LogRefreshEnded    = "refresh of a remembered answer ended"
	LogRefreshFailed   = "refresh of a remembered answer failed"
	LogCredentials     = "kerberos credentials unusable"
	LogSCRAMDerived    = "scram keys derived"
	// LogOAuthDiscovery is the server's OAUTHBEARER answer (EventOAuthDiscovery);
	// LogOAuthChanged the same when it replaced a different remembered answer.
	LogOAuthDiscovery = "oauth discovery"
	LogOAuthChanged   = "oauth discovery answer changed"
	// LogCredentialRetry is an attempt made again with a fresh credential (EventCredentialRetry).
	LogCredentialRetry = "retry with a fresh credential"
	// LogCredentialRefreshed and LogCredentialRefreshFailed end a background credential refresh
	// (SpanCredentialRefresh).
	LogCredentialRefreshed     = "credential refreshed"
	LogCredentialRefreshFailed = "credential refresh failed"
)

// NewLogTrace returns hooks that log the connector's decisions and their outcome to l, with
// the attribute keys of the spans (server.address, server.port, db.namespace, pgconnector.*,
// error.type) and the hook's context (a handler may read the span from it). nil l: nil, no hooks.
// Compose it with the others: Compose(Compose(m.Trace(), NewLogTrace(l)), NewTrace(tp)).
//
// Levels:
//   - Debug: a connect's start (first host, db.namespace, pgconnector.sslmode,
//     pgconnector.gssencmode), each host's decision (pgconnector.plan, .plan.skipped,
//     .cache.hit, .probe.waited, .gss.credentials, as the decision event), each step of an
//     attempt (tcp_connect with the method and the peer address; dns_lookup, ssl_request,
//     gssenc_request, tls_handshake, service_ticket, gss_context, gss_credentials and startup
//     with their outcome, under their span's name), a successful connect (the host connected
//     to, pgconnector.transport, pgconnector.attempts, pgconnector.cache.hit), the start of a
//     background refresh and its end when it learned nothing new to say (superseded,
//     canceled), a SCRAM key derivation, the wait for a credential of the application's
//     functions (postgresql.credential: pgconnector.credential.kind, .source), the server's
//     OAuth discovery answer (pgconnector.oauth.status, .discovery_uri, .scope,
//     .token_refused), a credential refreshed in the background.
//   - Info: a fallback to the next method (pgconnector.fallback.from, .to, .reason,
//     .new_connection: GSS to TLS, direct TLS to SSLRequest, TLS to plaintext, a remembered
//     answer proved stale), a refresh that changed a remembered answer (the server now accepts
//     the method) or confirmed it, a failed connect (error.type, exception.message: the caller
//     has the error too), credentials that were not delegated as asked, an attempt made again
//     on a new connection with a fresh credential (pgconnector.credential.kind,
//     .credential.retry.reason), an OAuth discovery answer that replaced a different one.
//   - Warn: a server that broke the negotiation's protocol (a *negotiation.ProtocolError, an
//     ErrorResponse to SSLRequest or GSSENCRequest, a failed Kerberos check of the server:
//     negotiation.ErrGSSUnverified): the record of the step where it happened (ssl_request,
//     gssenc_request, gss_context), with [LogProtocolFault] as its message, once whatever the
//     connect does next (fails, or goes on with the next method: then the Info fallback record
//     follows, with the host; step records carry no host, the context's span relates them); a
//     background refresh that failed (inconclusive: nothing learned); Kerberos credentials that
//     could not be read (an error, not their absence), once per check that read them; a
//     background credential refresh that failed (the cached credential is kept until it
//     expires; no connect sees the error).
//
// No record holds a password, a token, a ticket, a key, the cancel key or a statement: the
// hooks are given none (negotiation.Trace), and the error texts are those the spans record (a Kerberos
// library's may name a principal: see the package documentation). Every hook
// asks l.Enabled for its level before it builds a record: a level the handler drops costs no
// allocation.
func NewLogTrace(l *slog.Logger) *negotiation.Trace {
	if l == nil {
		return nil
	}
	g := &logger{l: l}
	return &negotiation.Trace{
		ConnectStart:       g.connectStart,
		ConnectDone:        g.connectDone,
		Decision:           g.decision,
		ProbeWaitStart:     g.probeWaitStart,
		GSSCredentialsDone: g.gssCredentialsDone,
		DNSDone:            g.dnsDone,
		TCPConnectStart:    g.tcpConnectStart,
		TCPConnectDone:     g.tcpConnectDone,
		SSLRequestDone:     g.sslRequestDone,
		GSSEncRequestDone:  g.gssEncRequestDone,
		ServiceTicketDone:  g.serviceTicketDone,
		GSSContextDone:     g.gssContextDone,
		TLSHandshakeDone:   g.tlsHandshakeDone,
		StartupDone:        g.startupDone,
		SCRAMKeyDerived:    g.scramKeyDerived,
		Fallback:           g.fallback,
		RefreshStart:       g.refreshStart,
		RefreshDone:        g.refreshDone,
		CredentialDone:     g.credentialDone,
		OAuthDiscovery:     g.oauthDiscovery,
		CredentialRetry:    g.credentialRetry,
		BackgroundStart:    g.backgroundStart,
		BackgroundDone:     g.backgroundDone,
	}
}

type logger struct{ l *slog.Logger }

// logAttrs is the attributes of one record, on the stack of the hook.
type logAttrs struct {
	a  [10]slog.Attr
	kv []slog.Attr
}

func (r *logAttrs) init() *logAttrs { r.kv = r.a[:0]; return r }

func (r *logAttrs) add(kvs ...attribute.KeyValue) *logAttrs {
	for _, kv := range kvs {
		r.kv = append(r.kv, slogAttr(kv))
	}
	return r
}

func (r *logAttrs) server(host string, port uint16) *logAttrs {
	if host != "" {
		r.kv = append(r.kv, slog.String(string(semconv.ServerAddressKey), host))
	}
	if port != 0 {
		r.kv = append(r.kv, slog.Int(string(semconv.ServerPortKey), int(port)))
	}
	return r
}

// err adds error.type (its SQLSTATE, or the class of errorType with def) and the error's text.
func (r *logAttrs) err(err error, code, def string) *logAttrs {
	if c := sqlState(err); c != "" {
		code = c
	}
	if code == "" {
		code = errorType(err, def)
	}
	r.kv = append(r.kv, slog.String(string(semconv.ErrorTypeKey), code), slog.String(string(semconv.ExceptionMessageKey), err.Error()))
	return r
}

// slogAttr is kv as a slog attribute of the same key.
func slogAttr(kv attribute.KeyValue) slog.Attr {
	k := string(kv.Key)
	switch kv.Value.Type() {
	case attribute.BOOL:
		return slog.Bool(k, kv.Value.AsBool())
	case attribute.INT64:
		return slog.Int64(k, kv.Value.AsInt64())
	case attribute.FLOAT64:
		return slog.Float64(k, kv.Value.AsFloat64())
	case attribute.STRING:
		return slog.String(k, kv.Value.AsString())
	}
	return slog.Any(k, kv.Value.AsInterface())
}

func (g *logger) log(ctx context.Context, level slog.Level, msg string, r *logAttrs) {
	g.l.LogAttrs(ctx, level, msg, r.kv...)
}

func (g *logger) on(ctx context.Context, level slog.Level) bool { return g.l.Enabled(ctx, level) }

func (g *logger) connectStart(ctx context.Context, info negotiation.ConnectStartInfo) context.Context {
	if !g.on(ctx, slog.LevelDebug) {
		return ctx
	}
	var r logAttrs
	var a [5]attribute.KeyValue
	g.log(ctx, slog.LevelDebug, LogConnectStart, r.init().add(connectStartAttributes(a[:0], info)...))
	return ctx
}

// stepLevel is the level and message of the record of a step that ended with err: Warn and
// LogProtocolFault when the server broke the protocol, else Debug and the step's span name.
func stepLevel(err error, span string) (slog.Level, string) {
	if err != nil && isFault(err) {
		return slog.LevelWarn, LogProtocolFault
	}
	return slog.LevelDebug, span
}

// isFault reports whether err says that the server broke the negotiation's rules.
func isFault(err error) bool {
	var (
		protoErr *negotiation.ProtocolError
		respErr  *negotiation.ErrorResponseError
	)
	return errors.As(err, &protoErr) || errors.As(err, &respErr) || errors.Is(err, negotiation.ErrGSSUnverified)
}

func (g *logger) connectDone(ctx context.Context, info negotiation.ConnectDoneInfo) {
	level, msg := slog.LevelDebug, LogConnected
	if info.Err != nil {
		level, msg = slog.LevelInfo, LogConnectFailed
	}
	if !g.on(ctx, level) {
		return
	}
	var r logAttrs
	var a [5]attribute.KeyValue
	r.init().add(connectDoneAttributes(a[:0], info)...)
	if info.Err != nil {
		r.err(info.Err, "", ErrorTypeConnectFailed)
	}
	g.log(ctx, level, msg, &r)
}

func (g *logger) decision(ctx context.Context, info negotiation.DecisionInfo) {
	if !g.on(ctx, slog.LevelDebug) {
		return
	}
	var r logAttrs
	var a [8]attribute.KeyValue
	g.log(ctx, slog.LevelDebug, LogDecision, r.init().add(decisionAttributes(a[:0], info)...))
}

func (g *logger) probeWaitStart(ctx context.Context, info negotiation.HostInfo) context.Context {
	if g.on(ctx, slog.LevelDebug) {
		var r logAttrs
		g.log(ctx, slog.LevelDebug, SpanProbeWait, r.init().server(info.Host, info.Port))
	}
	return ctx
}

func (g *logger) gssCredentialsDone(ctx context.Context, info negotiation.GSSCredentialsInfo) {
	level, msg := slog.LevelDebug, SpanGSSCredentials
	if info.Err != nil && !info.Reused {
		level, msg = slog.LevelWarn, LogCredentials
	}
	if !g.on(ctx, level) {
		return
	}
	var r logAttrs
	var a [3]attribute.KeyValue
	r.init().add(gssCredentialsAttributes(a[:0], info)...)
	if info.Err != nil {
		r.err(info.Err, "", ErrorTypeGSS)
	}
	g.log(ctx, level, msg, &r)
}

func (g *logger) dnsDone(ctx context.Context, info negotiation.DNSDoneInfo) {
	if !g.on(ctx, slog.LevelDebug) {
		return
	}
	var r logAttrs
	r.init()
	if len(info.Addrs) > 0 {
		r.add(DNSAddressesKey.StringSlice(info.Addrs))
	}
	if info.Err != nil {
		r.err(info.Err, "", ErrorTypeDNS)
	}
	g.log(ctx, slog.LevelDebug, SpanDNSLookup, &r)
}

func (g *logger) tcpConnectStart(ctx context.Context, info negotiation.DialInfo) context.Context {
	if !g.on(ctx, slog.LevelDebug) {
		return ctx
	}
	var r logAttrs
	var a [5]attribute.KeyValue
	g.log(ctx, slog.LevelDebug, SpanTCPConnect, r.init().add(tcpConnectAttributes(a[:0], info)...))
	return ctx
}

func (g *logger) tcpConnectDone(ctx context.Context, err error) {
	if err == nil || !g.on(ctx, slog.LevelDebug) {
		return
	}
	var r logAttrs
	g.log(ctx, slog.LevelDebug, SpanTCPConnect, r.init().err(err, "", ErrorTypeDial))
}

func (g *logger) sslRequestDone(ctx context.Context, info negotiation.RequestDoneInfo) {
	g.requestDone(ctx, info, SpanSSLRequest, SSLAnswerKey.String(sslAnswer(info.Answer)), errorTypeRequestDefault)
}

func (g *logger) gssEncRequestDone(ctx context.Context, info negotiation.RequestDoneInfo) {
	g.requestDone(ctx, info, SpanGSSEncRequest, GSSAnswerKey.String(gssAnswer(info.Answer)), ErrorTypeGSS)
}

// requestDone logs the end of an SSLRequest or GSSENCRequest step: the answer, whether it was
// remembered, and the error with errType as its default error.type.
func (g *logger) requestDone(ctx context.Context, info negotiation.RequestDoneInfo, step string, answer attribute.KeyValue, errType string) {
	level, msg := stepLevel(info.Err, step)
	if !g.on(ctx, level) {
		return
	}
	var r logAttrs
	r.init().add(answer, CacheHitKey.Bool(info.CacheHit))
	if info.Err != nil {
		r.err(info.Err, "", errType)
	}
	g.log(ctx, level, msg, &r)
}

func (g *logger) serviceTicketDone(ctx context.Context, info negotiation.ServiceTicketDoneInfo) {
	if !g.on(ctx, slog.LevelDebug) {
		return
	}
	var r logAttrs
	var a [2]attribute.KeyValue
	r.init().add(serviceTicketAttributes(a[:0], info)...)
	if info.Err != nil {
		r.err(info.Err, "", ErrorTypeGSS)
	}
	g.log(ctx, slog.LevelDebug, SpanServiceTicket, &r)
}

func (g *logger) gssContextDone(ctx context.Context, info negotiation.GSSContextDoneInfo) {
	level, msg := stepLevel(info.Err, SpanGSSContext)
	if info.DelegationErr != nil && level < slog.LevelInfo {
		level = slog.LevelInfo
	}
	if !g.on(ctx, level) {
		return
	}
	var r logAttrs
	var a [3]attribute.KeyValue
	r.init().add(gssContextAttributes(a[:0], info)...)
	if info.Err != nil {
		r.err(info.Err, "", ErrorTypeGSS)
	}
	g.log(ctx, level, msg, &r)
}

func (g *logger) tlsHandshakeDone(ctx context.Context, info negotiation.TLSHandshakeDoneInfo) {
	if !g.on(ctx, slog.LevelDebug) {
		return
	}
	var r logAttrs
	var a [5]attribute.KeyValue
	r.init().add(tlsDoneAttributes(a[:0], info)...)
	if info.Err != nil {
		r.err(info.Err, "", ErrorTypeTLS)
	}
	g.log(ctx, slog.LevelDebug, SpanTLSHandshake, &r)
}

func (g *logger) startupDone(ctx context.Context, info negotiation.StartupDoneInfo) {
	if !g.on(ctx, slog.LevelDebug) {
		return
	}
	var r logAttrs
	var a [3]attribute.KeyValue
	r.init().add(startupAttributes(a[:0], info)...)
	if info.Err != nil {
		r.err(info.Err, info.SQLState, ErrorTypeStartup)
	}
	g.log(ctx, slog.LevelDebug, SpanStartup, &r)
}

func (g *logger) scramKeyDerived(ctx context.Context, info negotiation.SCRAMKeyDerivedInfo) {
	if g.on(ctx, slog.LevelDebug) {
		var r logAttrs
		r.init().kv = append(r.kv, slog.Float64("pgconnector.scram.derivation_time", info.Duration.Seconds()))
		g.log(ctx, slog.LevelDebug, LogSCRAMDerived, &r)
	}
}

func (g *logger) fallback(ctx context.Context, info negotiation.FallbackInfo) {
	if !g.on(ctx, slog.LevelInfo) {
		return
	}
	var r logAttrs
	var a [5]attribute.KeyValue
	g.log(ctx, slog.LevelInfo, LogFallback, r.init().add(fallbackAttributes(a[:0], info)...))
}

func (g *logger) refreshStart(ctx context.Context, info negotiation.RefreshStartInfo) context.Context {
	if !g.on(ctx, slog.LevelDebug) {
		return ctx
	}
	var r logAttrs
	var a [5]attribute.KeyValue
	g.log(ctx, slog.LevelDebug, LogRefreshStart, r.init().add(refreshStartAttributes(a[:0], info)...))
	return ctx
}

func (g *logger) refreshDone(ctx context.Context, info negotiation.RefreshDoneInfo) {
	level, msg := slog.LevelDebug, LogRefreshEnded
	switch info.Outcome {
	case negotiation.RefreshEnabled:
		level, msg = slog.LevelInfo, LogAnswerChanged
	case negotiation.RefreshConfirmed:
		level, msg = slog.LevelInfo, LogAnswerConfirmed
	case negotiation.RefreshInconclusive:
		level, msg = slog.LevelWarn, LogRefreshFailed
	}
	if !g.on(ctx, level) {
		return
	}
	var r logAttrs
	r.init().server(info.Host, info.Port)
	r.add(RefreshMethodKey.String(info.Method.String()), RefreshOutcomeKey.String(info.Outcome.String()), AttemptsKey.Int(info.Attempts))
	if info.Err != nil {
		r.err(info.Err, "", ErrorTypeConnectFailed)
	}
	g.log(ctx, level, msg, &r)
}

func (g *logger) credentialDone(ctx context.Context, info negotiation.CredentialDoneInfo) {
	if !g.on(ctx, slog.LevelDebug) {
		return
	}
	var r logAttrs
	var a [1]attribute.KeyValue
	r.init().add(CredentialKindKey.String(info.Kind.String()))
	r.add(credentialDoneAttributes(a[:0], info)...)
	if info.Err != nil {
		r.err(info.Err, "", ErrorTypeCredential)
	}
	g.log(ctx, slog.LevelDebug, SpanCredential, &r)
}

func (g *logger) oauthDiscovery(ctx context.Context, info negotiation.OAuthDiscoveryInfo) {
	level, msg := slog.LevelDebug, LogOAuthDiscovery
	if info.Changed {
		level, msg = slog.LevelInfo, LogOAuthChanged
	}
	if !g.on(ctx, level) {
		return
	}
	var r logAttrs
	var a [5]attribute.KeyValue
	r.init().server(info.Host, info.Port)
	g.log(ctx, level, msg, r.add(oauthDiscoveryAttributes(a[:0], info)...))
}

func (g *logger) credentialRetry(ctx context.Context, info negotiation.CredentialRetryInfo) {
	if !g.on(ctx, slog.LevelInfo) {
		return
	}
	var r logAttrs
	var a [4]attribute.KeyValue
	g.log(ctx, slog.LevelInfo, LogCredentialRetry, r.init().add(credentialRetryAttributes(a[:0], info)...))
}

// logRefreshKey keeps, in the context of a background credential refresh, what its record
// says of it: the host, port and kind of BackgroundStartInfo.
type logRefreshKey struct{}

// backgroundStart keeps the host and kind of a background credential refresh for its record
// (one allocation per refresh, ahead of a credential's expiry); the lookups and rechecks of
// addresses are not logged.
func (g *logger) backgroundStart(ctx context.Context, info negotiation.BackgroundStartInfo) context.Context {
	if info.Work != negotiation.BackgroundCredentialRefresh || !g.on(ctx, slog.LevelWarn) {
		return ctx
	}
	info.Trigger = nil // what the record needs, and nothing of the connect
	return context.WithValue(ctx, logRefreshKey{}, &info)
}

// backgroundDone logs the end of a background credential refresh.
func (g *logger) backgroundDone(ctx context.Context, info negotiation.BackgroundDoneInfo) {
	if info.Work != negotiation.BackgroundCredentialRefresh {
		return
	}
	level, msg := slog.LevelDebug, LogCredentialRefreshed
	if info.Err != nil {
		level, msg = slog.LevelWarn, LogCredentialRefreshFailed
	}
	if !g.on(ctx, level) {
		return
	}
	var r logAttrs
	r.init()
	if start, _ := ctx.Value(logRefreshKey{}).(*negotiation.BackgroundStartInfo); start != nil {
		r.server(start.Host, start.Port)
		if start.Credential != 0 {
			r.add(CredentialKindKey.String(start.Credential.String()))
		}
	}
	if info.Err != nil {
		r.err(info.Err, "", ErrorTypeCredential)
	}
	g.log(ctx, level, msg, &r)
}
