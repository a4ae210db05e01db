package pgconnector

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/pgconnector/pgconnector/internal/oauthdevice"
	"github.com/pgconnector/pgconnector/internal/tokencache"
	"github.com/pgconnector/pgconnector/negotiation"
)

// PasswordRequest is what [WithPasswordFunc]'s function is asked for: the password of User on
// the attempt's host. Host is as written in the connection string (a name, an IP address or a
// Unix-domain socket directory), Port its port; User and Database are the attempt's.
type PasswordRequest struct {
	Host     string
	Port     uint16
	User     string
	Database string
}

// OAuthRequest is what [WithOAuthTokenFunc]'s function is asked for: a bearer token for
// SASL OAUTHBEARER (PostgreSQL 18). It holds what libpq 18 gives its
// PQAUTHDATA_OAUTH_BEARER_TOKEN hook (the discovery URI and scope; PGoauthBearerRequest) and more:
//   - Host, Port, User, Database: the attempt's, as PasswordRequest's (the token is kept per
//     Issuer, Scope and ClientID, not per host: another host with the same issuer gets it too);
//   - Issuer: oauth_issuer as an issuer identifier (a .well-known URI given as oauth_issuer
//     taken back to its issuer, RFC 8414 section 3); the server's discovery URI was checked
//     against it;
//   - DiscoveryURI: the issuer's discovery document, as the server named it (or oauth_issuer's
//     own .well-known URI);
//   - Scope: oauth_scope when set, else the scope the server asked for (may be "");
//   - ClientID: oauth_client_id ("" when not set: a token function does not need it).
type OAuthRequest struct {
	Host     string
	Port     uint16
	User     string
	Database string

	Issuer       string
	DiscoveryURI string
	Scope        string
	ClientID     string
}

// credentials implements negotiation.Credentials over a tokencache.Cache: the functions of
// WithPasswordFunc and WithOAuthTokenFunc, or the device flow (internal/oauthdevice) when
// oauth_client_id is set and there is no token function.
type credentials struct {
	password func(ctx context.Context, r PasswordRequest) (string, time.Time, error)
	token    func(ctx context.Context, r OAuthRequest) (*oauth2.Token, error)
	device   *oauthdevice.Flow
	clientID string
	cache    *tokencache.Cache
}

// newCredentials returns the connector's credentials, or nil when no option asks for any (a
// connector without them costs nothing).
func newCredentials(o *options, clientID, clientSecret string) *credentials {
	c := &credentials{password: o.passwordFunc, token: o.oauthTokenFunc, clientID: clientID}
	if c.token == nil && clientID != "" {
		c.device = oauthdevice.New(oauthdevice.Config{ClientID: clientID, ClientSecret: clientSecret,
			HTTPClient: o.oauthHTTPClient, Prompt: o.oauthDevicePrompt})
	}
	if c.password == nil && c.token == nil && c.device == nil {
		return nil
	}
	c.cache = tokencache.New(tokencache.Config{})
	return c
}

// oauthClientOf is the connection string's oauth_client_id and oauth_client_secret.
func oauthClientOf(s *Settings) (id, secret string) {
	return s.OAuth.ClientID, s.OAuth.ClientSecret
}

func (c *credentials) Has(kind negotiation.CredentialKind) bool {
	switch kind {
	case negotiation.CredentialPassword:
		return c.password != nil
	case negotiation.CredentialOAuthToken:
		return c.token != nil || c.device != nil
	}
	return false
}

// key is r's key in the cache. A password is kept per host, port, user and database: the
// database too because pg_hba.conf chooses the method (and so what the function must return,
// an IAM token or a password) per database, and the function is given it; a connector has
// one database in most programs, so it costs nothing there. A token is kept per issuer, scope
// and client: the server only validates it, any host of the same issuer takes it.
func (c *credentials) key(r *negotiation.CredentialRequest) string {
	if r.Kind == negotiation.CredentialPassword {
		return strings.Join([]string{"password", r.Host, strconv.Itoa(int(r.Port)), r.User, r.Database}, "\x00")
	}
	return strings.Join([]string{"oauth", r.Issuer, r.Scope, c.clientID}, "\x00")
}

func (c *credentials) Get(ctx context.Context, r *negotiation.CredentialRequest) (negotiation.Credential, error) {
	if !c.Has(r.Kind) {
		return negotiation.Credential{}, fmt.Errorf("no %s function configured", r.Kind)
	}
	s, cached, err := c.cache.Get(ctx, c.key(r), c.fetch(r), tokencache.Background(r.Background))
	if err != nil {
		return negotiation.Credential{}, err
	}
	src := negotiation.CredentialSource(s.Note)
	if cached {
		src = negotiation.CredentialCached
	}
	return negotiation.Credential{Secret: s.Value, Source: src, Expiry: s.Expiry}, nil
}

func (c *credentials) Refused(r *negotiation.CredentialRequest, cred negotiation.Credential) {
	c.cache.Drop(c.key(r), cred.Secret)
}

// fetch returns the fetch of r's credential; it copies what it needs of r (a refresh in the
// background outlives the connect).
func (c *credentials) fetch(r *negotiation.CredentialRequest) tokencache.Fetch {
	if r.Kind == negotiation.CredentialPassword {
		pr := PasswordRequest{Host: r.Host, Port: r.Port, User: r.User, Database: r.Database}
		return func(ctx context.Context) (tokencache.Secret, error) {
			pw, exp, err := c.password(ctx, pr)
			switch {
			case err != nil:
				return tokencache.Secret{}, fmt.Errorf("WithPasswordFunc: %w", err)
			case pw == "":
				return tokencache.Secret{}, errors.New("WithPasswordFunc: the function returned an empty password")
			}
			return tokencache.Secret{Value: pw, Expiry: exp, Note: uint8(negotiation.CredentialFetched)}, nil
		}
	}
	or := OAuthRequest{Host: r.Host, Port: r.Port, User: r.User, Database: r.Database,
		Issuer: r.Issuer, DiscoveryURI: r.DiscoveryURI, Scope: r.Scope, ClientID: c.clientID}
	if c.token != nil {
		return func(ctx context.Context) (tokencache.Secret, error) {
			tok, err := c.token(ctx, or)
			if err != nil {
				return tokencache.Secret{}, fmt.Errorf("WithOAuthTokenFunc: %w", err)
			}
			return tokenSecret("WithOAuthTokenFunc", tok, negotiation.CredentialFetched)
		}
	}
	dr := oauthdevice.Request{Issuer: r.Issuer, DiscoveryURI: r.DiscoveryURI, Scope: r.Scope}
	return func(ctx context.Context) (tokencache.Secret, error) {
		if tokencache.Refreshing(ctx) { // ahead of expiry: the refresh token, never a human
			tok, err := c.device.Refresh(ctx, dr)
			if err != nil {
				return tokencache.Secret{}, fmt.Errorf("OAuth device flow: %w", err)
			}
			return tokenSecret("OAuth device flow", tok, negotiation.CredentialFetched)
		}
		tok, prompted, err := c.device.Token(ctx, dr)
		if err != nil {
			return tokencache.Secret{}, fmt.Errorf("OAuth device flow: %w", err)
		}
		src := negotiation.CredentialFetched
		if prompted {
			src = negotiation.CredentialDevicePrompt
		}
		return tokenSecret("OAuth device flow", tok, src)
	}
}

// tokenSecret is tok as a cached secret: its access token until its Expiry (zero: until the
// server refuses it). A token that is not a bearer token, or is empty, is refused.
func tokenSecret(from string, tok *oauth2.Token, src negotiation.CredentialSource) (tokencache.Secret, error) {
	switch {
	case tok == nil || tok.AccessToken == "":
		return tokencache.Secret{}, fmt.Errorf("%s: no access token", from)
	case tok.TokenType != "" && !strings.EqualFold(tok.TokenType, "Bearer"):
		return tokencache.Secret{}, fmt.Errorf("%s: token type %q is not Bearer (SASL OAUTHBEARER takes bearer tokens only)", from, tok.TokenType)
	}
	return tokencache.Secret{Value: tok.AccessToken, Expiry: tok.Expiry, Note: uint8(src)}, nil
}
