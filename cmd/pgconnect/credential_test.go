package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pgconnector/pgconnector/negotiation"
	"github.com/pgconnector/pgconnector/tracing"
)

// oauthConnect calls the connector's trace hooks as the negotiator does for a first connect to
// a host whose pg_hba line is oauth: a startup that sends an empty token and gets the server's
// discovery answer, the attempt made again on a new connection, its startup waiting for a token
// of the application's function. It returns the spans, as explain gets them.
func oauthConnect(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := tracing.NewTrace(tp)
	const host, port = "db.example.com", 5432
	in := negotiation.Input{SSLMode: negotiation.SSLModeVerifyFull, GSSEncMode: negotiation.GSSEncModeDisable}
	plan, err := negotiation.Decide(in)
	if err != nil {
		t.Fatal(err)
	}
	dial := negotiation.DialInfo{Host: host, Address: "192.0.2.10:5432", Method: negotiation.MethodSSL}
	ctx := tr.ConnectStart(context.Background(), negotiation.ConnectStartInfo{Host: host, Port: port, Database: "app",
		SSLMode: negotiation.SSLModeVerifyFull, GSSEncMode: negotiation.GSSEncModeDisable})
	tr.Decision(ctx, negotiation.DecisionInfo{Host: host, Port: port, Input: in, Plan: plan})
	attempt := func() context.Context {
		c := tr.TCPConnectStart(ctx, dial)
		tr.TCPConnectDone(c, nil)
		s := tr.SSLRequestStart(ctx, dial)
		tr.SSLRequestDone(s, negotiation.RequestDoneInfo{Answer: negotiation.AnswerYes})
		h := tr.TLSHandshakeStart(ctx, negotiation.TLSHandshakeStartInfo{ServerName: host})
		tr.TLSHandshakeDone(h, negotiation.TLSHandshakeDoneInfo{Version: tls.VersionTLS13, CipherSuite: tls.TLS_AES_128_GCM_SHA256})
		return tr.StartupStart(ctx, dial)
	}
	u := attempt()
	tr.OAuthDiscovery(u, negotiation.OAuthDiscoveryInfo{Host: host, Port: port, Status: "invalid_token",
		DiscoveryURI: "https://issuer.example.com/.well-known/openid-configuration", Scope: "openid db"})
	tr.StartupDone(u, negotiation.StartupDoneInfo{AuthMethod: "oauth", SASLMechanism: "OAUTHBEARER",
		Err: errors.New("OAuth discovery: the server asked for a bearer token")})
	tr.CredentialRetry(ctx, negotiation.CredentialRetryInfo{Kind: negotiation.CredentialOAuthToken, Host: host, Port: port, Reason: "oauth discovery"})
	u = attempt()
	w := tr.CredentialStart(u, negotiation.CredentialStartInfo{Kind: negotiation.CredentialOAuthToken, Host: host, Port: port})
	tr.CredentialDone(w, negotiation.CredentialDoneInfo{Kind: negotiation.CredentialOAuthToken, Source: negotiation.CredentialFetched})
	tr.StartupDone(u, negotiation.StartupDoneInfo{AuthMethod: "oauth", SASLMechanism: "OAUTHBEARER"})
	tr.ConnectDone(ctx, negotiation.ConnectDoneInfo{Host: host, Port: port, Method: negotiation.MethodSSL,
		Cache: negotiation.CacheUseMiss, Attempts: 2})
	return rec.Ended()
}

// explain shows the credential wait under the startup that waited, the server's discovery answer
// under the startup that got it, the retry between the two attempts, in the order they happened,
// and the credential and the retry in the result line; -json has the same.
func TestExplainCredentialSteps(t *testing.T) {
	cn := fromSpans(oauthConnect(t))
	cn.Run, cn.Server = "cold", "18.4"
	if got, want := stepNames(cn), "tcp_connect,ssl_request,tls_handshake,startup,oauth_discovery,credential_retry,"+
		"tcp_connect,ssl_request,tls_handshake,startup,credential"; got != want {
		t.Errorf("steps %s\nwant  %s", got, want)
	}
	for _, st := range cn.Steps {
		switch st.Name {
		case "oauth_discovery":
			if !st.Event || st.Parent != "startup" || st.Attrs["oauth.discovery_uri"] != "https://issuer.example.com/.well-known/openid-configuration" ||
				st.Attrs["oauth.scope"] != "openid db" || st.Attrs["oauth.status"] != "invalid_token" {
				t.Errorf("oauth_discovery: %+v", st)
			}
		case "credential_retry":
			if !st.Event || st.Parent != "" || st.Attrs["credential.retry.reason"] != "oauth discovery" || st.Attrs["credential.kind"] != "oauth_token" {
				t.Errorf("credential_retry: %+v", st)
			}
		case "credential":
			if st.Event || st.Parent != "startup" || st.Attrs["credential.source"] != "fetched" || st.Attrs["credential.kind"] != "oauth_token" {
				t.Errorf("credential: %+v", st)
			}
		default:
			if st.Event || st.Parent != "" {
				t.Errorf("%s: event %v, parent %q", st.Name, st.Event, st.Parent)
			}
		}
	}
	if cn.Credential != "oauth_token fetched" || len(cn.Retries) != 1 || cn.Retries[0] != "oauth discovery" || cn.Sockets != 2 || !cn.Answers.OAuth {
		t.Errorf("credential %q, retries %v, sockets %d, answers %+v", cn.Credential, cn.Retries, cn.Sockets, cn.Answers)
	}

	m := Modes{SSLMode: "verify-full", GSSEncMode: "disable"}
	cmp := Comparison{Host: cn.Host, Port: cn.Port, Answers: cn.Answers, Libpq: EstimateLibpq(m, cn.Answers), Pgx: EstimatePgx(m, cn.Answers),
		Basis: "estimated from the server's answers"}
	var out bytes.Buffer
	printText(&out, &Report{Target: "db.example.com:5432 user=app dbname=app", SSLMode: "verify-full", GSSEncMode: "disable",
		Connects: []Connect{cn}, Compare: []Comparison{cmp}})
	t.Log("\n" + out.String())
	wantIn(t, out.String(),
		"\n    oauth_discovery ", "oauth.discovery_uri=https://issuer.example.com/.well-known/openid-configuration oauth.scope=openid db oauth.status=invalid_token",
		"\n  credential_retry  ", "credential.kind=oauth_token credential.retry.reason=oauth discovery",
		"\n    credential      ", "credential.kind=oauth_token credential.source=fetched",
		"auth oauth (OAUTHBEARER), oauth_token fetched, 1 retry with a fresh credential (oauth discovery), 2 socket(s)",
		"(SSLRequest 'S', GSSENCRequest not asked, SASL OAUTHBEARER asked for):",
		"libpq  2 socket(s), 2 backend(s), 6 round trip(s) before startup, tls (OAUTHBEARER: an empty token first",
		"pgx    1 socket(s), 1 backend(s), 3 round trip(s) before startup, tls (OAUTHBEARER: the token first")
	// An event is a point: '|' on the waterfall, no duration.
	for line := range strings.Lines(out.String()) {
		if strings.Contains(line, "oauth_discovery ") || strings.Contains(line, "credential_retry ") {
			if !strings.Contains(line, "|") || strings.Contains(line, "#") || strings.Contains(line, " ms") {
				t.Errorf("event line %q", line)
			}
		}
	}
}
