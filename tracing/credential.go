package tracing

import (
	"context"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector/negotiation"
)

// Spans and events of the credentials of the application's functions (negotiation.Credentials:
// a password of WithPasswordFunc, an OAuth bearer token for SASL OAUTHBEARER, PostgreSQL 18, RFC
// 7628). None of them holds the credential: the hooks are never given it
// (negotiation.CredentialDoneInfo), and the server's discovery URI is recorded without user
// information, query or fragment.
const (
	// SpanCredential is an attempt's wait for a credential (Trace.CredentialStart and
	// CredentialDone): a child of the span current when the negotiator asks, the startup span
	// when the server asked for it during authentication. Attributes: server.address,
	// server.port, pgconnector.credential.kind; at the end pgconnector.credential.source; failed
	// (error.type credential_error, timeout or canceled) when no credential was given.
	SpanCredential = "postgresql.credential"
	// SpanCredentialRefresh is a credential fetched again in the background ahead of its expiry
	// (negotiation.BackgroundCredentialRefresh): a root span linked to the connect that started
	// it, as SpanDNSRefresh; failed when the fetch did (the cached credential is kept until it
	// expires).
	SpanCredentialRefresh = "postgresql.credential_refresh"
	// EventOAuthDiscovery is the server's answer to an OAUTHBEARER message without a token (or
	// with a token it refused): an event of the span current when the hook runs (the startup
	// span), with pgconnector.oauth.status, .discovery_uri, .scope, .token_refused and, when a
	// different answer was remembered, .changed.
	EventOAuthDiscovery = "oauth_discovery"
	// EventCredentialRetry is an attempt made again on a new connection with a fresh credential
	// (after OAuth discovery, or after the server refused a credential): an event of the connect
	// span, with server.address, server.port, pgconnector.credential.kind and
	// pgconnector.credential.retry.reason.
	EventCredentialRetry = "credential_retry"
)

// Attribute keys of the credential spans and events.
const (
	// CredentialKindKey is what credential an attempt waited for: "password" (of the
	// application's password function) or "oauth_token". Span: credential, credential_refresh;
	// event: credential_retry.
	CredentialKindKey = attribute.Key("pgconnector.credential.kind")
	// CredentialSourceKey is where the credential came from: "cached" (kept from an earlier
	// call, not expired), "fetched" (the application's function, or the issuer's token endpoint,
	// called for this connect or for a herd it was part of), "device_prompt" (the OAuth device
	// authorization flow, RFC 8628: a human was asked). Absent on failure. Span: credential.
	CredentialSourceKey = attribute.Key("pgconnector.credential.source")
	// CredentialRetryReasonKey is why an attempt was made again: "oauth discovery", "token
	// refused" or "password refused". Event: credential_retry.
	CredentialRetryReasonKey = attribute.Key("pgconnector.credential.retry.reason")
	// OAuthStatusKey is the error status of the server's OAUTHBEARER answer, for example
	// "invalid_token" (RFC 7628 section 3.2.2). Event: oauth_discovery.
	OAuthStatusKey = attribute.Key("pgconnector.oauth.status")
	// OAuthDiscoveryURIKey is the issuer's discovery URI the server named (its
	// openid-configuration or oauth-authorization-server URI), scheme, host and path only; absent
	// when it is not an absolute http or https URI. Event: oauth_discovery.
	OAuthDiscoveryURIKey = attribute.Key("pgconnector.oauth.discovery_uri")
	// OAuthScopeKey is the scope the server asked for (may be empty). Event: oauth_discovery.
	OAuthScopeKey = attribute.Key("pgconnector.oauth.scope")
	// OAuthTokenRefusedKey is true when the answer followed a token the server refused, false
	// when it followed a discovery message. Event: oauth_discovery.
	OAuthTokenRefusedKey = attribute.Key("pgconnector.oauth.token_refused")
	// OAuthChangedKey is true when a different answer was remembered for the host and user, now
	// replaced; absent otherwise. Event: oauth_discovery.
	OAuthChangedKey = attribute.Key("pgconnector.oauth.changed")
)

// ErrorTypeCredential is the error.type of a failed credential or credential_refresh span whose
// error is not a timeout or cancellation: the application's function or the issuer failed.
const ErrorTypeCredential = "credential_error"

// Bounds of what the server's discovery answer may put in an attribute: the server is not
// authenticated yet, and what it sends goes to every exporter.
const (
	maxDiscoveryURI = 512
	maxScope        = 256
)

func (t *tracer) credentialStart(ctx context.Context, info negotiation.CredentialStartInfo) context.Context {
	ctx, span := t.startStep(ctx, stepCredential, SpanCredential)
	if span != nil {
		var a [3]attribute.KeyValue
		span.SetAttributes(credentialStartAttributes(a[:0], info)...)
	}
	return ctx
}

func (t *tracer) credentialDone(ctx context.Context, info negotiation.CredentialDoneInfo) {
	span := stepSpan(ctx, stepCredential)
	if span == nil {
		return
	}
	var a [1]attribute.KeyValue
	span.SetAttributes(credentialDoneAttributes(a[:0], info)...)
	if info.Err != nil {
		fail(span, info.Err, "", ErrorTypeCredential)
	}
	span.End()
}

// oauthDiscovery adds the server's answer as an event of the span current in ctx (the startup
// span), or of the connect span when that one does not record; outside a recording connect (or
// refresh) it adds nothing, not even to a caller's span.
func (t *tracer) oauthDiscovery(ctx context.Context, info negotiation.OAuthDiscoveryInfo) {
	st := connect(ctx)
	if st == nil {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		span = st.span
	}
	var a [7]attribute.KeyValue
	span.AddEvent(EventOAuthDiscovery, trace.WithAttributes(oauthDiscoveryAttributes(a[:0], info)...))
}

// credentialRetry adds the retry as an event of the connect span: the new attempt's steps follow
// it there.
func (t *tracer) credentialRetry(ctx context.Context, info negotiation.CredentialRetryInfo) {
	st := connect(ctx)
	if st == nil {
		return
	}
	var a [4]attribute.KeyValue
	st.span.AddEvent(EventCredentialRetry, trace.WithAttributes(credentialRetryAttributes(a[:0], info)...))
}

// discoveryURI is u with only its scheme, host and path, or "" when u is not an absolute http or
// https URI, or longer than maxDiscoveryURI: no user information, query or fragment (a server
// could put anything there) reaches an attribute.
func discoveryURI(u string) string {
	if u == "" || len(u) > maxDiscoveryURI {
		return ""
	}
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" {
		return ""
	}
	clean := url.URL{Scheme: p.Scheme, Host: p.Host, Path: p.Path, RawPath: p.RawPath}
	return clean.String()
}

// scopeText is the server's scope, cut at maxScope bytes.
func scopeText(s string) string {
	if len(s) > maxScope {
		return strings.ToValidUTF8(s[:maxScope], "")
	}
	return s
}
