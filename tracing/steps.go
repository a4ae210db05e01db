package tracing

import (
	"crypto/tls"
	"errors"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/pgconnector/pgconnector/negotiation"
)

// What each step records, appended to dst: one function per hook, for its span (trace.go,
// refresh.go) and its log record (log.go) alike, so that both carry the same keys. A new
// attribute of a step goes in its function here, and in docs/observability.md.

// connectStartAttributes: the host and port of the first attempt, db.namespace, the modes.
func connectStartAttributes(dst []attribute.KeyValue, info negotiation.ConnectStartInfo) []attribute.KeyValue {
	dst = appendServer(dst, info.Host, info.Port)
	if info.Database != "" {
		dst = append(dst, semconv.DBNamespace(info.Database))
	}
	return append(dst, SSLModeKey.String(info.SSLMode.String()), GSSEncModeKey.String(info.GSSEncMode.String()))
}

// connectDoneAttributes: the host connected to (or tried last), its transport, the cache.hit of
// its plan, the attempts made.
func connectDoneAttributes(dst []attribute.KeyValue, info negotiation.ConnectDoneInfo) []attribute.KeyValue {
	dst = appendServer(dst, info.Host, info.Port)
	if tr := info.Method.Transport(); tr != "" {
		dst = append(dst, TransportKey.String(tr))
	}
	if info.Cache != negotiation.CacheUseNone {
		dst = append(dst, CacheHitKey.Bool(info.Cache == negotiation.CacheUseHit))
	}
	return append(dst, AttemptsKey.Int(info.Attempts))
}

// decisionAttributes: a host's plan, what it skipped and why it is what it is.
func decisionAttributes(dst []attribute.KeyValue, info negotiation.DecisionInfo) []attribute.KeyValue {
	dst = appendServer(dst, info.Host, info.Port)
	dst = append(dst, PlanKey.String(info.Plan.String()))
	if skipped := info.Plan.Skipped(); len(skipped) > 0 {
		dst = append(dst, PlanSkippedKey.String(joinMethods(skipped)))
	}
	if info.Plan.LearnedDirect() {
		dst = append(dst, PlanDirectLearnedKey.Bool(true))
	}
	if use := info.Plan.CacheUse(); use != negotiation.CacheUseNone {
		dst = append(dst, CacheHitKey.Bool(use == negotiation.CacheUseHit))
	}
	dst = append(dst, ProbeWaitedKey.Bool(info.Waited))
	if info.RoleFirst {
		dst = append(dst, RoleFirstKey.Bool(true))
	}
	if info.Input.GSSEncMode != negotiation.GSSEncModeDisable && !info.Input.UnixSocket {
		// Only where the credentials count, as in Decide: GSS is allowed unless
		// gssencmode=disable, and never over a Unix socket (where they are not even checked).
		dst = append(dst, GSSCredentialsKey.Bool(info.Input.GSSCredentials))
	}
	return dst
}

// gssCredentialsAttributes: whether usable credentials exist and whether the check read the
// credential cache; the hook is never given the principal.
func gssCredentialsAttributes(dst []attribute.KeyValue, info negotiation.GSSCredentialsInfo) []attribute.KeyValue {
	dst = append(dst, GSSCredentialsValidKey.Bool(info.Valid), GSSCredentialsReusedKey.Bool(info.Reused))
	if info.Source != "" {
		dst = append(dst, GSSCredentialsSourceKey.String(info.Source))
	}
	return dst
}

// tcpConnectAttributes: the host, the address dialed, the method of the attempt.
func tcpConnectAttributes(dst []attribute.KeyValue, info negotiation.DialInfo) []attribute.KeyValue {
	if info.Host != "" {
		dst = append(dst, semconv.ServerAddress(info.Host))
	}
	dst = appendPeer(dst, info.Address)
	if info.RememberedDown {
		dst = append(dst, AddressRememberedDownKey.Bool(true))
	}
	if info.AddressAge > 0 {
		dst = append(dst, AddressAgeKey.Float64(info.AddressAge.Seconds()))
	}
	return append(dst, MethodKey.String(info.Method.String()))
}

// serviceTicketAttributes: whether the ticket came from the cache, its enctype.
func serviceTicketAttributes(dst []attribute.KeyValue, info negotiation.ServiceTicketDoneInfo) []attribute.KeyValue {
	dst = append(dst, GSSTicketFromCacheKey.Bool(info.FromCache))
	if info.Enctype != "" {
		dst = append(dst, GSSEnctypeKey.String(info.Enctype))
	}
	return dst
}

// gssContextAttributes: the context's enctype and what became of delegation.
func gssContextAttributes(dst []attribute.KeyValue, info negotiation.GSSContextDoneInfo) []attribute.KeyValue {
	if info.Enctype != "" {
		dst = append(dst, GSSEnctypeKey.String(info.Enctype))
	}
	if info.Delegated || info.DelegationErr != nil {
		dst = append(dst, GSSDelegatedKey.Bool(info.Delegated))
	}
	if info.DelegationErr != nil {
		why := "failed"
		if errors.Is(info.DelegationErr, negotiation.ErrGSSNotForwardable) {
			why = "not-forwardable"
		}
		dst = append(dst, GSSDelegationSkippedKey.String(why))
	}
	return dst
}

// tlsDoneAttributes: the outcome of a TLS handshake: tls.protocol.name and .version, tls.cipher, tls.next_protocol (the ALPN
// protocol the server selected, RFC 7301: "postgresql" on PostgreSQL 17 and later) and
// tls.established.
func tlsDoneAttributes(dst []attribute.KeyValue, info negotiation.TLSHandshakeDoneInfo) []attribute.KeyValue {
	if info.Version != 0 {
		name, version := tlsVersion(info.Version)
		if name != "" {
			dst = append(dst, semconv.TLSProtocolNameKey.String(name))
		}
		dst = append(dst, semconv.TLSProtocolVersion(version))
	}
	if info.CipherSuite != 0 {
		dst = append(dst, semconv.TLSCipher(tls.CipherSuiteName(info.CipherSuite)))
	}
	if info.ALPN != "" {
		dst = append(dst, semconv.TLSNextProtocol(info.ALPN))
	}
	return append(dst, semconv.TLSEstablished(info.Err == nil))
}

// startupAttributes: the authentication the server asked for and, for SCRAM, whether the
// client key came from the cache.
func startupAttributes(dst []attribute.KeyValue, info negotiation.StartupDoneInfo) []attribute.KeyValue {
	if info.AuthMethod != "" {
		dst = append(dst, AuthMethodKey.String(info.AuthMethod))
	}
	if m := info.SASLMechanism; m != "" {
		dst = append(dst, AuthSASLMechanismKey.String(m))
		if strings.HasPrefix(m, "SCRAM-") {
			dst = append(dst, AuthKeyCachedKey.Bool(info.KeyCached))
		}
	}
	return dst
}

// fallbackAttributes: the host, the method given up and the next, why, and whether the next
// needs a new connection.
func fallbackAttributes(dst []attribute.KeyValue, info negotiation.FallbackInfo) []attribute.KeyValue {
	if info.Host != "" {
		dst = append(dst, semconv.ServerAddress(info.Host))
	}
	dst = append(dst, FallbackFromKey.String(info.From.String()))
	if info.To != 0 {
		dst = append(dst, FallbackToKey.String(info.To.String()))
	}
	return append(dst, FallbackReasonKey.String(info.Reason), FallbackNewConnectionKey.Bool(info.NewConnection))
}

// refreshStartAttributes: the host, db.namespace, the method asked again and the age of the
// answer it asks again.
func refreshStartAttributes(dst []attribute.KeyValue, info negotiation.RefreshStartInfo) []attribute.KeyValue {
	dst = appendServer(dst, info.Host, info.Port)
	if info.Database != "" {
		dst = append(dst, semconv.DBNamespace(info.Database))
	}
	return append(dst, RefreshMethodKey.String(info.Method.String()), RefreshAgeKey.Float64(info.Age.Seconds()))
}

// backgroundStartAttributes: the host and port (when known), for a recheck the address dialed
// again, for a credential refresh the kind of credential.
func backgroundStartAttributes(dst []attribute.KeyValue, info negotiation.BackgroundStartInfo) []attribute.KeyValue {
	dst = appendServer(dst, info.Host, info.Port)
	if info.Credential != 0 {
		dst = append(dst, CredentialKindKey.String(info.Credential.String()))
	}
	return appendPeer(dst, info.Address)
}

// credentialStartAttributes: the host and port of the attempt, the kind of credential.
func credentialStartAttributes(dst []attribute.KeyValue, info negotiation.CredentialStartInfo) []attribute.KeyValue {
	dst = appendServer(dst, info.Host, info.Port)
	return append(dst, CredentialKindKey.String(info.Kind.String()))
}

// credentialDoneAttributes: where the credential came from; nothing on failure. Never the
// credential, nor its expiry.
func credentialDoneAttributes(dst []attribute.KeyValue, info negotiation.CredentialDoneInfo) []attribute.KeyValue {
	if info.Err == nil && info.Source != 0 {
		dst = append(dst, CredentialSourceKey.String(info.Source.String()))
	}
	return dst
}

// oauthDiscoveryAttributes: the server's OAUTHBEARER answer: its status, the discovery URI
// (scheme, host and path only) and scope, whether it followed a refused token, and whether it
// replaced a different remembered one. The host is that of the span the event goes on.
func oauthDiscoveryAttributes(dst []attribute.KeyValue, info negotiation.OAuthDiscoveryInfo) []attribute.KeyValue {
	if info.Status != "" {
		dst = append(dst, OAuthStatusKey.String(scopeText(info.Status)))
	}
	if u := discoveryURI(info.DiscoveryURI); u != "" {
		dst = append(dst, OAuthDiscoveryURIKey.String(u))
	}
	dst = append(dst, OAuthScopeKey.String(scopeText(info.Scope)), OAuthTokenRefusedKey.Bool(info.TokenRefused))
	if info.Changed {
		dst = append(dst, OAuthChangedKey.Bool(true))
	}
	return dst
}

// credentialRetryAttributes: the host and port of the attempt made again, the kind of
// credential, why.
func credentialRetryAttributes(dst []attribute.KeyValue, info negotiation.CredentialRetryInfo) []attribute.KeyValue {
	dst = appendServer(dst, info.Host, info.Port)
	return append(dst, CredentialKindKey.String(info.Kind.String()), CredentialRetryReasonKey.String(info.Reason))
}
