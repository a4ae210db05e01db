package tracing

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pgconnector/pgconnector/negotiation"
)

// logHooks calls the hooks of one plaintext connect that fell back from SSL, with an SSL plan
// decided from in; a nil hook is skipped. The records are the handler's.
func logHooks(tr *negotiation.Trace, plan negotiation.Plan, in negotiation.Input) {
	ctx := logStart(context.Background(), tr.ConnectStart, negotiation.ConnectStartInfo{Host: "db.example", Port: 5432, Database: "app", SSLMode: negotiation.SSLModePrefer, GSSEncMode: negotiation.GSSEncModeDisable})
	logEvent(ctx, tr.Decision, negotiation.DecisionInfo{Host: "db.example", Port: 5432, Input: in, Plan: plan})
	dial := negotiation.DialInfo{Host: "db.example", Address: "192.0.2.1:5432", Method: negotiation.MethodSSL}
	logEvent(logStart(ctx, tr.TCPConnectStart, dial), tr.TCPConnectDone, nil)
	logEvent(logStart(ctx, tr.SSLRequestStart, dial), tr.SSLRequestDone, negotiation.RequestDoneInfo{Answer: negotiation.AnswerNo})
	logEvent(ctx, tr.Fallback, negotiation.FallbackInfo{Host: "db.example", From: negotiation.MethodSSL, To: negotiation.MethodPlain, Reason: "server refused SSLRequest"})
	logEvent(logStart(ctx, tr.TLSHandshakeStart, negotiation.TLSHandshakeStartInfo{ServerName: "db.example"}), tr.TLSHandshakeDone,
		negotiation.TLSHandshakeDoneInfo{Version: tls.VersionTLS13, CipherSuite: tls.TLS_AES_128_GCM_SHA256})
	logEvent(logStart(ctx, tr.StartupStart, negotiation.DialInfo{Host: "db.example", Method: negotiation.MethodPlain}), tr.StartupDone,
		negotiation.StartupDoneInfo{AuthMethod: "scram-sha-256", SASLMechanism: "SCRAM-SHA-256", KeyCached: true})
	logEvent(ctx, tr.ConnectDone, negotiation.ConnectDoneInfo{Host: "db.example", Port: 5432, Method: negotiation.MethodPlain, Attempts: 1, Duration: time.Millisecond})
}

func logStart[I any](ctx context.Context, hook func(context.Context, I) context.Context, info I) context.Context {
	if hook == nil {
		return ctx
	}
	return hook(ctx, info)
}

func logEvent[I any](ctx context.Context, hook func(context.Context, I), info I) {
	if hook != nil {
		hook(ctx, info)
	}
}

func sslPlan(t testing.TB) (negotiation.Plan, negotiation.Input) {
	in := negotiation.Input{SSLMode: negotiation.SSLModePrefer, GSSEncMode: negotiation.GSSEncModeDisable}
	plan, err := negotiation.Decide(in)
	if err != nil {
		t.Fatal(err)
	}
	return plan, in
}

// At Info, the debug records of a connect cost no allocation, composed as New composes them
// (metrics, logs, spans with no-op providers); the fallback is logged.
func TestLogTraceDisabledLevelAllocs(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	plan, in := sslPlan(t)
	base := Compose(NewMetrics(nil, Pool{Host: "db.example", Port: 5432}).Trace(), NewTrace(noop.NewTracerProvider()))
	logged := Compose(Compose(NewMetrics(nil, Pool{Host: "db.example", Port: 5432}).Trace(), NewLogTrace(l)), NewTrace(noop.NewTracerProvider()))
	logged.Fallback = nil // the one Info record: measured apart
	without := testing.AllocsPerRun(100, func() { logHooks(base, plan, in) })
	with := testing.AllocsPerRun(100, func() { logHooks(logged, plan, in) })
	if with > without {
		t.Errorf("a connect allocates %v times with a logger at Info, %v without", with, without)
	}
	if buf.Len() != 0 {
		t.Errorf("records below Info: %s", buf.String())
	}
	logHooks(NewLogTrace(l), plan, in)
	if got := buf.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, `"msg":"fallback"`) ||
		!strings.Contains(got, `"pgconnector.fallback.reason":"server refused SSLRequest"`) {
		t.Errorf("at Info, want the fallback only: %s", got)
	}
}

// At Debug, every step is a record with the spans' keys; a fault is Warn.
func TestLogTraceRecords(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if NewLogTrace(nil) != nil {
		t.Error("NewLogTrace(nil) is not nil")
	}
	tr := NewLogTrace(l)
	plan, in := sslPlan(t)
	logHooks(tr, plan, in)
	fault := &negotiation.ProtocolError{Request: "SSLRequest", Problem: "unexpected answer byte 0x58"}
	tr.SSLRequestDone(context.Background(), negotiation.RequestDoneInfo{Err: fault})
	tr.ConnectDone(context.Background(), negotiation.ConnectDoneInfo{Host: "db.example", Port: 5432, Attempts: 1, Err: fault})
	tr.GSSEncRequestDone(context.Background(), negotiation.RequestDoneInfo{Err: &negotiation.ErrorResponseError{Request: "GSSENCRequest"}})
	tr.RefreshDone(context.Background(), negotiation.RefreshDoneInfo{Host: "db.example", Port: 5432, Method: negotiation.MethodSSL,
		Outcome: negotiation.RefreshInconclusive, Err: errors.New("i/o timeout")})
	got := buf.String()
	for _, want := range []string{
		`level=DEBUG msg="connect started" server.address=db.example server.port=5432 db.namespace=app pgconnector.sslmode=prefer pgconnector.gssencmode=disable`,
		`level=DEBUG msg=decision server.address=db.example server.port=5432 pgconnector.plan=ssl,plain`,
		`level=DEBUG msg=postgresql.tcp_connect server.address=db.example network.transport=tcp network.peer.address=192.0.2.1 network.peer.port=5432 pgconnector.method=ssl`,
		`level=DEBUG msg=postgresql.ssl_request pgconnector.ssl.answer=N pgconnector.cache.hit=false`,
		`level=INFO msg=fallback server.address=db.example pgconnector.fallback.from=ssl pgconnector.fallback.to=plain pgconnector.fallback.reason="server refused SSLRequest" pgconnector.fallback.new_connection=false`,
		`level=DEBUG msg=postgresql.tls_handshake tls.protocol.name=tls tls.protocol.version=1.3 tls.cipher=TLS_AES_128_GCM_SHA256 tls.established=true`,
		`level=DEBUG msg=postgresql.startup pgconnector.auth.method=scram-sha-256 pgconnector.auth.sasl_mechanism=SCRAM-SHA-256 pgconnector.auth.key_cached=true`,
		`level=DEBUG msg=connected server.address=db.example server.port=5432 pgconnector.transport=plain pgconnector.attempts=1`,
		`level=WARN msg="the server broke the protocol" pgconnector.ssl.answer="" pgconnector.cache.hit=false error.type=protocol_error exception.message="protocol violation in the answer to SSLRequest: unexpected answer byte 0x58"`,
		`level=WARN msg="the server broke the protocol" pgconnector.gss.answer="" pgconnector.cache.hit=false error.type=error_response`,
		`level=INFO msg="connect failed" server.address=db.example server.port=5432 pgconnector.attempts=1 error.type=protocol_error exception.message=`,
		`level=WARN msg="refresh of a remembered answer failed" server.address=db.example server.port=5432 pgconnector.refresh.method=ssl pgconnector.refresh.outcome=inconclusive pgconnector.attempts=0 error.type=connect_failed exception.message="i/o timeout"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no record %s in\n%s", want, got)
		}
	}
}
