package negotiation

import (
	"context"
	"time"
)

// Credentials the application gives as functions rather than values: a password computed or
// fetched per host and user (a cloud IAM token used as a password), and OAuth bearer tokens for
// SASL OAUTHBEARER (PostgreSQL 18, RFC 7628). The negotiator asks [Config.Credentials] for one
// when the server asks for it, during the authentication exchange (auth.go), and tells it when
// the server refused one; the implementation (the root package) keeps them between connects,
// one call of the application's function for a herd of concurrent connects, refreshed ahead of
// expiry in the background (CredentialRequest.Background).

// CredentialKind is what a credential is.
type CredentialKind uint8

const (
	// CredentialPassword: the password of AuthenticationCleartextPassword, MD5 or SCRAM, from
	// the application's password function (WithPasswordFunc), when the attempt's configuration
	// holds none.
	CredentialPassword CredentialKind = iota + 1
	// CredentialOAuthToken: an OAuth bearer token for SASL OAUTHBEARER.
	CredentialOAuthToken
)

var credentialKindNames = [...]string{"", "password", "oauth_token"}

func (k CredentialKind) String() string {
	if int(k) < len(credentialKindNames) && k != 0 {
		return credentialKindNames[k]
	}
	return "unknown"
}

// CredentialSource says where a credential given to an attempt came from.
type CredentialSource uint8

const (
	// CredentialCached: kept from an earlier call of the application's function (or issuer),
	// not expired.
	CredentialCached CredentialSource = iota + 1
	// CredentialFetched: the application's function (or the issuer's token endpoint, with a
	// refresh token) was called for this connect, or for a herd it was part of.
	CredentialFetched
	// CredentialDevicePrompt: obtained through the OAuth device authorization flow (RFC 8628),
	// a human prompted.
	CredentialDevicePrompt
)

var credentialSourceNames = [...]string{"", "cached", "fetched", "device_prompt"}

func (s CredentialSource) String() string {
	if int(s) < len(credentialSourceNames) && s != 0 {
		return credentialSourceNames[s]
	}
	return "unknown"
}

// CredentialRequest says what credential an attempt needs.
type CredentialRequest struct {
	Kind CredentialKind
	// Host and Port are the attempt's host as written in the connection string (a name, an IP
	// address or a Unix-domain socket directory); User and Database the attempt's.
	Host     string
	Port     uint16
	User     string
	Database string

	// OAuth (CredentialOAuthToken): Issuer is oauth_issuer as an issuer identifier (a
	// .well-known URI given as oauth_issuer taken back to its issuer, RFC 8414 section 3);
	// DiscoveryURI is the server's discovery URI (its openid-configuration or
	// oauth-authorization-server URI), or oauth_issuer's own when it is one; Scope is
	// oauth_scope when set, else what the server asked for (may be "").
	Issuer       string
	DiscoveryURI string
	Scope        string

	// Background runs do on a goroutine of the negotiator's, not tied to the connect that asks
	// (a refresh ahead of expiry): bounded by connect_timeout (else 10 s) and Negotiator.Close,
	// reported through Trace.BackgroundStart/Done (BackgroundCredentialRefresh) and linked to
	// the connect. It reports false, running nothing, once the negotiator is closed. Set by the
	// negotiator; nil outside a connect.
	Background func(do func(ctx context.Context) error) bool
}

// Credential is a secret for one attempt, with what an observer may know of it.
type Credential struct {
	Secret string // never logged, traced or put in an error
	Source CredentialSource
	// Expiry is when the credential stops being valid, as its source said; zero: not known.
	Expiry time.Time
}

// Credentials gives attempts the credentials of the application's functions.
type Credentials interface {
	// Has reports whether credentials of kind can be given (a password function, a token
	// function or the device flow is configured).
	Has(kind CredentialKind) bool
	// Get returns a credential for r, from the cache or by calling the application's function
	// (once for concurrent requests of the same key). It blocks at most until ctx is done. Its
	// error wraps the function's and never holds a secret.
	Get(ctx context.Context, r *CredentialRequest) (Credential, error)
	// Refused drops c, which the server refused for r, so that the next Get fetches anew
	// (unless another connect already replaced it).
	Refused(r *CredentialRequest, c Credential)
}

// OAuthConfig is the connection string's OAuth keys that the negotiation reads (libpq 18,
// libpq-connect.html#LIBPQ-CONNECT-OAUTH-ISSUER).
type OAuthConfig struct {
	// Issuer is oauth_issuer as given: an issuer identifier (https URL), or its
	// /.well-known/openid-configuration or /.well-known/oauth-authorization-server URI.
	Issuer string
	// Scope is oauth_scope: it replaces the scope the server asks for; "" keeps the server's.
	Scope string
	// ClientID is oauth_client_id (the device flow's client; required by libpq, not by a token
	// function).
	ClientID string
	// AllowUnverifiedChannel lets a bearer token go over a channel that does not authenticate
	// the server (TLS without verify-ca or verify-full, plaintext TCP), as libpq does; by default
	// a token goes only over TLS with sslmode verify-ca or verify-full, GSS encryption, or a
	// Unix-domain socket, and the connect is refused before any token is sent.
	AllowUnverifiedChannel bool
}

// CredentialStartInfo describes an attempt's wait for a credential (Trace.CredentialStart).
type CredentialStartInfo struct {
	Kind CredentialKind
	Host string // as written in the connection string
	Port uint16
}

// CredentialDoneInfo is the outcome of a wait for a credential. It never holds the secret.
type CredentialDoneInfo struct {
	Kind   CredentialKind
	Source CredentialSource // 0 on error
	Err    error
	// Duration is the wait, from CredentialStart.
	Duration time.Duration
}

// OAuthDiscoveryInfo is the server's answer to a discovery message (an empty bearer token)
// or to a refused token: the JSON of AuthenticationSASLContinue (RFC 7628 section 3.2.2).
type OAuthDiscoveryInfo struct {
	Host string
	Port uint16
	// Status is the error status the server gave ("invalid_token").
	Status string
	// DiscoveryURI and Scope are what the server asked for.
	DiscoveryURI string
	Scope        string
	// Changed: a different answer was remembered for this host and user, now replaced.
	Changed bool
	// TokenRefused: the answer followed a token (the server refused it), not a discovery message.
	TokenRefused bool
}

// CredentialRetryInfo is why an attempt is made again on a new connection, to the same
// address with the same method, with a fresh credential: after OAuth discovery, or after the
// server refused a cached credential.
type CredentialRetryInfo struct {
	Kind   CredentialKind
	Host   string
	Port   uint16
	Reason string // "oauth discovery", "token refused", "password refused"
}
