package tracing

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector/negotiation"
)

// A failed wait for a credential is a failed credential span under the span current when it
// began (the startup span, or the connect span when the negotiator asks before the startup),
// with no source, and error.type credential_error unless the error says timeout or canceled.
func TestCredentialSpanFailure(t *testing.T) {
	errFunc := fmt.Errorf("pgconnector: password function for %s: %w", testHost, errors.New("iam: throttled"))
	errLate := fmt.Errorf("pgconnector: oauth token function: %w", context.DeadlineExceeded)
	for _, tt := range []struct {
		name       string
		kind       negotiation.CredentialKind
		err        error
		underStart bool
		class      string
	}{
		{"password function fails during startup", negotiation.CredentialPassword, errFunc, true, ErrorTypeCredential},
		{"token function past the deadline before startup", negotiation.CredentialOAuthToken, errLate, false, ErrorTypeTimeout},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			ctx := f.tr.ConnectStart(f.ctx, negotiation.ConnectStartInfo{Host: testHost, Port: testPort})
			parent := ctx
			if tt.underStart {
				parent = f.tr.StartupStart(ctx, negotiation.DialInfo{Host: testHost, Method: negotiation.MethodSSL})
			}
			w := f.tr.CredentialStart(parent, negotiation.CredentialStartInfo{Kind: tt.kind, Host: testHost, Port: testPort})
			f.tr.CredentialDone(w, negotiation.CredentialDoneInfo{Kind: tt.kind, Source: negotiation.CredentialFetched, Err: tt.err})
			if tt.underStart {
				f.tr.StartupDone(parent, negotiation.StartupDoneInfo{Err: tt.err})
			}
			f.tr.ConnectDone(ctx, negotiation.ConnectDoneInfo{Host: testHost, Port: testPort, Attempts: 1, Err: tt.err})
			f.caller.End()
			checkBalanced(t, f.rec)
			checkDocumented(t, f.rec.Ended())
			got := f.ended(t)
			s := got[SpanCredential]
			if s == nil {
				t.Fatalf("no %s span; got %v", SpanCredential, names(got))
			}
			checkSpan(t, s, span{name: SpanCredential, kind: trace.SpanKindInternal, attrs: []attribute.KeyValue{
				semconv.ServerAddress(testHost), semconv.ServerPort(testPort), CredentialKindKey.String(tt.kind.String()),
				semconv.ErrorTypeKey.String(tt.class)}, status: codes.Error, desc: tt.err.Error(), exception: tt.err.Error()})
			want := SpanConnect
			if tt.underStart {
				want = SpanStartup
			}
			if p := got[want]; p == nil || s.Parent().SpanID() != p.SpanContext().SpanID() {
				t.Errorf("parent %v, want the %s span", s.Parent().SpanID(), want)
			}
		})
	}
}

// A background credential refresh is a root span of its own, postgresql.credential_refresh,
// linked to the connect span, with the host and the kind; failed with credential_error when the
// fetch failed. A credential step under it is its child.
func TestCredentialRefreshSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := Compose(NewMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())), Pool{Host: testHost, Port: testPort}).Trace(), NewTrace(tp))
	cctx := tr.ConnectStart(context.Background(), negotiation.ConnectStartInfo{Host: testHost, Port: testPort, Database: testDB})
	connectSpan := trace.SpanFromContext(cctx).SpanContext()
	u := tr.StartupStart(cctx, negotiation.DialInfo{Host: testHost, Method: negotiation.MethodSSL})
	trigger := tr.Detach(context.Background(), u)
	tr.StartupDone(u, negotiation.StartupDoneInfo{})
	tr.ConnectDone(cctx, negotiation.ConnectDoneInfo{Host: testHost, Port: testPort, Method: negotiation.MethodSSL, Attempts: 1})

	for _, fetchErr := range []error{nil, errors.New("token endpoint: 503 Service Unavailable")} {
		rec.Reset()
		info := negotiation.BackgroundStartInfo{Work: negotiation.BackgroundCredentialRefresh, Host: testHost, Port: testPort,
			Credential: negotiation.CredentialOAuthToken, Trigger: trigger}
		bctx := tr.BackgroundStart(context.Background(), info)
		w := tr.CredentialStart(bctx, negotiation.CredentialStartInfo{Kind: negotiation.CredentialOAuthToken, Host: testHost, Port: testPort})
		tr.CredentialDone(w, negotiation.CredentialDoneInfo{Kind: negotiation.CredentialOAuthToken, Source: negotiation.CredentialFetched, Err: fetchErr})
		tr.BackgroundDone(bctx, negotiation.BackgroundDoneInfo{Work: info.Work, Err: fetchErr})

		checkDocumented(t, rec.Ended())
		spans := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			spans[s.Name()] = s
		}
		bg := spans[SpanCredentialRefresh]
		if bg == nil {
			t.Fatalf("no %s span among %v", SpanCredentialRefresh, spanNames(rec.Ended()))
		}
		if bg.Parent().IsValid() || bg.SpanContext().TraceID() == connectSpan.TraceID() {
			t.Errorf("parent %v in trace %v: want a root span of a trace of its own", bg.Parent(), bg.SpanContext().TraceID())
		}
		if links := bg.Links(); len(links) != 1 || !links[0].SpanContext.Equal(connectSpan) {
			t.Errorf("links %+v, want one to the connect span", links)
		}
		want := []attribute.KeyValue{semconv.DBSystemNamePostgreSQL, semconv.ServerAddress(testHost), semconv.ServerPort(testPort),
			CredentialKindKey.String("oauth_token")}
		if fetchErr != nil {
			want = append(want, semconv.ErrorTypeKey.String(ErrorTypeCredential))
		}
		checkAttrs(t, SpanCredentialRefresh, bg.Attributes(), want)
		if got := bg.Status().Code; (fetchErr != nil) != (got == codes.Error) {
			t.Errorf("status %v with error %v", bg.Status(), fetchErr)
		}
		if s := spans[SpanCredential]; s == nil || s.Parent().SpanID() != bg.SpanContext().SpanID() {
			t.Errorf("the refresh's %s is not its child", SpanCredential)
		}
	}
}

// The discovery event takes only scheme, host and path of the server's URI, bounded; the scope
// bounded; changed only when true; on the connect span when the current span does not record.
func TestOAuthDiscoveryEvent(t *testing.T) {
	long := "https://issuer.example.com/" + strings.Repeat("a", maxDiscoveryURI)
	for _, tt := range []struct {
		name string
		info negotiation.OAuthDiscoveryInfo
		want []attribute.KeyValue
	}{
		{"issuer URI as the server sent it",
			negotiation.OAuthDiscoveryInfo{Status: "invalid_token", DiscoveryURI: testDiscoveryURI, Scope: testScope},
			[]attribute.KeyValue{OAuthStatusKey.String("invalid_token"), OAuthDiscoveryURIKey.String(testDiscoveryURI),
				OAuthScopeKey.String(testScope), OAuthTokenRefusedKey.Bool(false)}},
		{"user information, query and fragment left out, port and path kept",
			negotiation.OAuthDiscoveryInfo{Status: "invalid_token", TokenRefused: true, Changed: true,
				DiscoveryURI: "https://u:pw@issuer.example.com:8443/tenant/.well-known/oauth-authorization-server?code=x#t=y"},
			[]attribute.KeyValue{OAuthStatusKey.String("invalid_token"),
				OAuthDiscoveryURIKey.String("https://issuer.example.com:8443/tenant/.well-known/oauth-authorization-server"),
				OAuthScopeKey.String(""), OAuthTokenRefusedKey.Bool(true), OAuthChangedKey.Bool(true)}},
		{"not an http URI", negotiation.OAuthDiscoveryInfo{Status: "invalid_token", DiscoveryURI: "file:///etc/passwd"},
			[]attribute.KeyValue{OAuthStatusKey.String("invalid_token"), OAuthScopeKey.String(""), OAuthTokenRefusedKey.Bool(false)}},
		{"relative", negotiation.OAuthDiscoveryInfo{DiscoveryURI: "/.well-known/openid-configuration"},
			[]attribute.KeyValue{OAuthScopeKey.String(""), OAuthTokenRefusedKey.Bool(false)}},
		{"too long", negotiation.OAuthDiscoveryInfo{DiscoveryURI: long, Scope: strings.Repeat("s", 1000)},
			[]attribute.KeyValue{OAuthScopeKey.String(strings.Repeat("s", maxScope)), OAuthTokenRefusedKey.Bool(false)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, underStartup := range []bool{true, false} {
				f := newFixture(t)
				ctx := f.tr.ConnectStart(f.ctx, negotiation.ConnectStartInfo{Host: testHost, Port: testPort})
				u := ctx
				if underStartup {
					u = f.tr.StartupStart(ctx, negotiation.DialInfo{Host: testHost, Method: negotiation.MethodSSL})
				}
				f.tr.OAuthDiscovery(u, tt.info)
				if underStartup {
					f.tr.StartupDone(u, negotiation.StartupDoneInfo{})
				}
				f.tr.ConnectDone(ctx, negotiation.ConnectDoneInfo{})
				on := SpanConnect
				if underStartup {
					on = SpanStartup
				}
				s := f.ended(t)[on]
				var found bool
				for _, ev := range s.Events() {
					if ev.Name == EventOAuthDiscovery {
						found = true
						checkAttrs(t, tt.name, ev.Attributes, tt.want)
					}
				}
				if !found {
					t.Errorf("no %s event on %s", EventOAuthDiscovery, on)
				}
				checkDocumented(t, f.rec.Ended())
			}
		})
	}
}

// The hooks of credentials are given no secret: no field of their infos can hold one (a
// Credential, a field named for a secret). What this package adds from them holds none either: a
// secret put everywhere the server or the application could put text that reaches the hooks
// (the error of the application's function, the server's discovery URI and status) appears in no
// attribute of a span, an event, a metric point or a log record, only as the error's own text
// (status description, exception.message).
func TestCredentialHooksRecordNoSecret(t *testing.T) {
	infos := []any{negotiation.CredentialStartInfo{}, negotiation.CredentialDoneInfo{}, negotiation.OAuthDiscoveryInfo{},
		negotiation.CredentialRetryInfo{}, negotiation.BackgroundStartInfo{}, negotiation.BackgroundDoneInfo{}}
	credentialType := reflect.TypeFor[negotiation.Credential]()
	for _, info := range infos {
		typ := reflect.TypeOf(info)
		for i := range typ.NumField() {
			f := typ.Field(i)
			name := strings.ToLower(f.Name)
			if f.Type == credentialType || f.Type == reflect.PointerTo(credentialType) ||
				strings.Contains(name, "secret") || (strings.Contains(name, "token") && f.Type.Kind() == reflect.String) ||
				strings.Contains(name, "password") || strings.Contains(name, "code") {
				t.Errorf("%s.%s (%s) may hold a secret", typ.Name(), f.Name, f.Type)
			}
		}
	}

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	var logs bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	tr := Compose(Compose(NewMetrics(mp, Pool{Host: testHost, Port: testPort}).Trace(), NewLogTrace(l)), NewTrace(tp))

	errFunc := fmt.Errorf("token function: issuer said %s", secret)
	ctx := tr.ConnectStart(context.Background(), negotiation.ConnectStartInfo{Host: testHost, Port: testPort, Database: testDB})
	u := tr.StartupStart(ctx, negotiation.DialInfo{Host: testHost, Method: negotiation.MethodSSL})
	tr.OAuthDiscovery(u, negotiation.OAuthDiscoveryInfo{Host: testHost, Port: testPort, Status: "invalid_token",
		DiscoveryURI: "https://alice:" + secret + "@issuer.example.com/.well-known/openid-configuration?code=" + secret + "#access_token=" + secret,
		Scope:        testScope, TokenRefused: true})
	w := tr.CredentialStart(u, negotiation.CredentialStartInfo{Kind: negotiation.CredentialOAuthToken, Host: testHost, Port: testPort})
	tr.CredentialDone(w, negotiation.CredentialDoneInfo{Kind: negotiation.CredentialOAuthToken, Err: errFunc})
	tr.StartupDone(u, negotiation.StartupDoneInfo{Err: errFunc})
	tr.CredentialRetry(ctx, negotiation.CredentialRetryInfo{Kind: negotiation.CredentialOAuthToken, Host: testHost, Port: testPort, Reason: "token refused"})
	tr.ConnectDone(ctx, negotiation.ConnectDoneInfo{Host: testHost, Port: testPort, Attempts: 2, Err: errFunc})
	bctx := tr.BackgroundStart(context.Background(), negotiation.BackgroundStartInfo{Work: negotiation.BackgroundCredentialRefresh,
		Host: testHost, Port: testPort, Credential: negotiation.CredentialOAuthToken, Trigger: tr.Detach(context.Background(), ctx)})
	tr.BackgroundDone(bctx, negotiation.BackgroundDoneInfo{Work: negotiation.BackgroundCredentialRefresh, Err: errFunc})

	checkDocumented(t, rec.Ended()) // attributes and events: no secret but in exception.message
	for name, m := range collect(t, reader) {
		for k := range points(t, m) {
			if strings.Contains(k, secret) {
				t.Errorf("%s: a point's attributes hold the secret: %s", name, k)
			}
		}
	}
	// In a log record the secret may be only the error's text, exception.message.
	for line := range strings.Lines(logs.String()) {
		var without strings.Builder
		for part := range strings.SplitSeq(line, `,"`) {
			if !strings.HasPrefix(part, `exception.message"`) {
				without.WriteString(part)
			}
		}
		if strings.Contains(without.String(), secret) {
			t.Errorf("a log record holds the secret outside exception.message: %s", line)
		}
	}
	if !strings.Contains(logs.String(), `"pgconnector.oauth.discovery_uri":"https://issuer.example.com/.well-known/openid-configuration"`) {
		t.Errorf("no discovery record with the URI's scheme, host and path:\n%s", logs.String())
	}
}

// One point of pgconnector.credential.retries per retry, by kind and reason; the credential wait
// is a "credential" step of the step histogram.
func TestCredentialMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tr := NewMetrics(mp, Pool{Host: testHost, Port: testPort, Database: testDB}).Trace()
	ctx := tr.ConnectStart(context.Background(), negotiation.ConnectStartInfo{Host: testHost, Port: testPort})
	for _, reason := range []string{"oauth discovery", "token refused", "token refused"} {
		tr.CredentialRetry(ctx, negotiation.CredentialRetryInfo{Kind: negotiation.CredentialOAuthToken, Host: testHost, Port: testPort, Reason: reason})
	}
	tr.CredentialRetry(ctx, negotiation.CredentialRetryInfo{Kind: negotiation.CredentialPassword, Host: "db2.example.com", Port: testPort, Reason: "password refused"})
	for _, err := range []error{nil, errors.New("iam: throttled")} {
		w := tr.CredentialStart(ctx, negotiation.CredentialStartInfo{Kind: negotiation.CredentialPassword, Host: testHost, Port: testPort})
		tr.CredentialDone(w, negotiation.CredentialDoneInfo{Kind: negotiation.CredentialPassword, Source: negotiation.CredentialCached, Err: err})
	}
	got := collect(t, reader)
	wantRetries := map[string]float64{
		"pgconnector.credential.kind=oauth_token,pgconnector.credential.retry.reason=oauth discovery," + serverAttrs:                                1,
		"pgconnector.credential.kind=oauth_token,pgconnector.credential.retry.reason=token refused," + serverAttrs:                                  2,
		"pgconnector.credential.kind=password,pgconnector.credential.retry.reason=password refused,server.address=db2.example.com,server.port=5432": 1,
	}
	if p := points(t, got[MetricCredentialRetries]); !maps.Equal(p, wantRetries) {
		t.Errorf("%s:\n %v\nwant\n %v", MetricCredentialRetries, p, wantRetries)
	}
	wantSteps := map[string]float64{
		"pgconnector.outcome=success,pgconnector.step=credential,server.address=" + testHost: 1,
		"pgconnector.outcome=error,pgconnector.step=credential,server.address=" + testHost:   1,
	}
	if p := points(t, got[MetricConnectStepDuration]); !maps.Equal(p, wantSteps) {
		t.Errorf("%s:\n %v\nwant\n %v", MetricConnectStepDuration, p, wantSteps)
	}
}

// The credential hooks' records: the wait and the discovery at Debug, a changed discovery answer
// and a retry at Info, a failed background refresh at Warn with its host and kind.
func TestCredentialLogRecords(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	tr := NewLogTrace(l)
	ctx := context.Background()
	tr.CredentialDone(ctx, negotiation.CredentialDoneInfo{Kind: negotiation.CredentialOAuthToken, Source: negotiation.CredentialDevicePrompt})
	tr.CredentialDone(ctx, negotiation.CredentialDoneInfo{Kind: negotiation.CredentialPassword, Err: errors.New("iam: throttled")})
	tr.OAuthDiscovery(ctx, negotiation.OAuthDiscoveryInfo{Host: "db.example", Port: 5432, Status: "invalid_token",
		DiscoveryURI: testDiscoveryURI, Scope: testScope})
	tr.OAuthDiscovery(ctx, negotiation.OAuthDiscoveryInfo{Host: "db.example", Port: 5432, Status: "invalid_token",
		DiscoveryURI: testDiscoveryURI, Changed: true})
	tr.CredentialRetry(ctx, negotiation.CredentialRetryInfo{Kind: negotiation.CredentialOAuthToken, Host: "db.example", Port: 5432, Reason: "oauth discovery"})
	for _, err := range []error{nil, errors.New("token endpoint: 503")} {
		b := tr.BackgroundStart(ctx, negotiation.BackgroundStartInfo{Work: negotiation.BackgroundCredentialRefresh, Host: "db.example", Port: 5432,
			Credential: negotiation.CredentialOAuthToken})
		tr.BackgroundDone(b, negotiation.BackgroundDoneInfo{Work: negotiation.BackgroundCredentialRefresh, Err: err})
	}
	b := tr.BackgroundStart(ctx, negotiation.BackgroundStartInfo{Work: negotiation.BackgroundDNSLookup, Host: "db.example"})
	tr.BackgroundDone(b, negotiation.BackgroundDoneInfo{Work: negotiation.BackgroundDNSLookup, Err: errors.New("no such host")})
	got := buf.String()
	for _, want := range []string{
		`level=DEBUG msg=postgresql.credential pgconnector.credential.kind=oauth_token pgconnector.credential.source=device_prompt`,
		`level=DEBUG msg=postgresql.credential pgconnector.credential.kind=password error.type=credential_error exception.message="iam: throttled"`,
		`level=DEBUG msg="oauth discovery" server.address=db.example server.port=5432 pgconnector.oauth.status=invalid_token pgconnector.oauth.discovery_uri=` + testDiscoveryURI + ` pgconnector.oauth.scope="openid db" pgconnector.oauth.token_refused=false`,
		`level=INFO msg="oauth discovery answer changed" server.address=db.example server.port=5432 pgconnector.oauth.status=invalid_token pgconnector.oauth.discovery_uri=` + testDiscoveryURI + ` pgconnector.oauth.scope="" pgconnector.oauth.token_refused=false pgconnector.oauth.changed=true`,
		`level=INFO msg="retry with a fresh credential" server.address=db.example server.port=5432 pgconnector.credential.kind=oauth_token pgconnector.credential.retry.reason="oauth discovery"`,
		`level=DEBUG msg="credential refreshed" server.address=db.example server.port=5432 pgconnector.credential.kind=oauth_token`,
		`level=WARN msg="credential refresh failed" server.address=db.example server.port=5432 pgconnector.credential.kind=oauth_token error.type=credential_error exception.message="token endpoint: 503"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no record %s in\n%s", want, got)
		}
	}
	if strings.Contains(got, "no such host") {
		t.Errorf("a background lookup was logged:\n%s", got)
	}
}
