// Package oauthdevice obtains OAuth bearer tokens through the device authorization grant (RFC
// 8628), as libpq 18's built-in flow does (src/interfaces/libpq-oauth/oauth-curl.c): the
// issuer's discovery document (OpenID Connect Discovery 1.0, RFC 8414) fetched and checked, a
// device authorization request, a prompt for the human, then the token endpoint polled until
// the human has approved. Unlike libpq, a Flow keeps the refresh token the issuer gave, per
// issuer and scope, for its life: the next token comes from a refresh (RFC 6749 section 6), and
// the human is prompted again only when the issuer refuses the refresh token (refused), so
// that a pool asks once.
//
// Everything the issuer sends is untrusted: https only, no redirect followed, a discovery
// document of at most 256 KiB (libpq's MAX_OAUTH_RESPONSE_SIZE) nested at most 16 deep; the
// token responses are read by golang.org/x/oauth2 (at most 1 MiB). No error holds a token, a
// device code or the client secret.
package oauthdevice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/oauth2"
)

// Config configures a Flow.
type Config struct {
	// ClientID and ClientSecret are oauth_client_id and oauth_client_secret. With a secret the
	// client authenticates with HTTP Basic (RFC 6749 section 2.3.1), else it sends client_id in
	// the body, as libpq does.
	ClientID, ClientSecret string
	// HTTPClient makes the requests to the issuer; nil: http.DefaultClient. Its redirects are
	// not followed (a copy is used).
	HTTPClient *http.Client
	// Prompt shows the human where to go and what code to enter; nil: libpq's message on
	// Stderr, "Visit <verification_uri> and enter the code: <user_code>".
	Prompt func(ctx context.Context, d *oauth2.DeviceAuthResponse) error
	// Stderr is where the default prompt goes; nil: os.Stderr.
	Stderr io.Writer
}

// Request says which token is wanted.
type Request struct {
	// Issuer is oauth_issuer as an issuer identifier: the discovery document's "issuer" must
	// be equal to it, byte for byte.
	Issuer string
	// DiscoveryURI is the issuer's discovery document (the server's, or oauth_issuer's own).
	DiscoveryURI string
	// Scope is the space-separated scopes asked for; "": none sent.
	Scope string
}

// maxGrants bounds the refresh tokens kept (one per issuer and scope).
const maxGrants = 64

// Flow obtains tokens through the device flow and keeps their refresh tokens. It is safe for
// concurrent use.
type Flow struct {
	cfg    Config
	client *http.Client

	mu     sync.Mutex
	grants map[grantKey]grant
}

type grantKey struct{ issuer, scope string }

// grant is what a refresh needs: the issuer's endpoints and the refresh token.
type grant struct {
	endpoint     oauth2.Endpoint
	refreshToken string
}

// New returns a Flow for cfg.
func New(cfg Config) *Flow {
	c := http.DefaultClient
	if cfg.HTTPClient != nil {
		c = cfg.HTTPClient
	}
	nc := *c
	nc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Flow{cfg: cfg, client: &nc, grants: map[grantKey]grant{}}
}

// ErrNoRefreshToken is Refresh's error when no refresh token is kept for the request's issuer
// and scope (none was given, or the issuer refused it).
var ErrNoRefreshToken = errors.New("no refresh token kept")

// Refresh returns a token for r from the kept refresh token, without a human: ErrNoRefreshToken
// when none is kept, or the error of the request (the refresh token dropped when the issuer
// refused it, kept when the issuer was not reached or answered 5xx).
func (f *Flow) Refresh(ctx context.Context, r Request) (*oauth2.Token, error) {
	tok, err := f.refresh(context.WithValue(ctx, oauth2.HTTPClient, f.client), r)
	if err != nil && !errors.Is(err, ErrNoRefreshToken) {
		return nil, f.tokenError("failed to refresh the access token", err)
	}
	return tok, err
}

// refused reports whether err is the issuer's refusal of a refresh token: an error answer
// (RFC 6749 section 5.2, invalid_grant say) or another 4xx, not a 5xx (golang.org/x/oauth2 makes
// a RetrieveError of every status not 2xx) nor a network error.
func refused(err error) bool {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		return false
	}
	if re.Response != nil && re.Response.StatusCode >= 500 {
		return false
	}
	return true
}

// refresh is Refresh with the request's own error (an *oauth2.RetrieveError when the issuer
// answered), ctx holding the flow's HTTP client.
func (f *Flow) refresh(ctx context.Context, r Request) (*oauth2.Token, error) {
	key := grantKey{r.Issuer, r.Scope}
	f.mu.Lock()
	g, ok := f.grants[key]
	f.mu.Unlock()
	if !ok {
		return nil, ErrNoRefreshToken
	}
	tok, err := f.config(g.endpoint, r.Scope).TokenSource(ctx, &oauth2.Token{RefreshToken: g.refreshToken}).Token()
	if err == nil {
		f.keep(key, g.endpoint, tok)
		return tok, nil
	}
	if refused(err) { // not when the issuer was not reached or failed
		f.mu.Lock()
		if f.grants[key] == g {
			delete(f.grants, key)
		}
		f.mu.Unlock()
	}
	return nil, err
}

// Token returns a token for r: from a refresh of the kept refresh token when there is one
// (prompted false), else through the whole flow, the human prompted (prompted true). ctx bounds
// every request and the wait for the human (and the device code's expires_in).
func (f *Flow) Token(ctx context.Context, r Request) (tok *oauth2.Token, prompted bool, err error) {
	ctx = context.WithValue(ctx, oauth2.HTTPClient, f.client)
	tok, err = f.refresh(ctx, r)
	switch {
	case err == nil:
		return tok, false, nil
	case ctx.Err() != nil:
		return nil, false, ctx.Err()
	case !errors.Is(err, ErrNoRefreshToken) && !refused(err):
		// The issuer not reached, or failing (the refresh token kept): no human for that.
		return nil, false, f.tokenError("failed to refresh the access token", err)
	}
	p, err := discover(ctx, f.client, r)
	if err != nil {
		return nil, false, err
	}
	ep := oauth2.Endpoint{DeviceAuthURL: p.DeviceAuthorizationEndpoint, TokenURL: p.TokenEndpoint, AuthStyle: oauth2.AuthStyleInParams}
	if f.cfg.ClientSecret != "" {
		ep.AuthStyle = oauth2.AuthStyleInHeader
	}
	oc := f.config(ep, r.Scope)
	ctx = f.basicAuth(ctx, ep)
	da, err := oc.DeviceAuth(ctx)
	if err != nil {
		return nil, false, f.tokenError("failed to obtain device authorization", err)
	}
	for _, field := range [...]struct{ name, v string }{{"device_code", da.DeviceCode}, {"user_code", da.UserCode}, {"verification_uri", da.VerificationURI}} {
		if field.v == "" {
			return nil, false, fmt.Errorf("failed to parse device authorization: field %q is missing", field.name)
		}
	}
	if err := f.prompt(ctx, da); err != nil {
		return nil, true, fmt.Errorf("device prompt failed: %w", err)
	}
	tok, err = oc.DeviceAccessToken(ctx, da)
	if err != nil {
		return nil, true, f.tokenError("failed to obtain access token", err)
	}
	f.keep(grantKey{r.Issuer, r.Scope}, ep, tok)
	return tok, true, nil
}

// basicAuth returns ctx with an HTTP client that authenticates the client with HTTP Basic in
// its POSTs to ep's device authorization and token endpoints when there is a client secret,
// and leaves client_id out of their bodies (RFC 6749 section 2.3.1, as libpq's
// add_client_identification: some issuers refuse both); golang.org/x/oauth2 sends the device
// authorization request with client_id alone, and client_id in the device token request's body.
func (f *Flow) basicAuth(ctx context.Context, ep oauth2.Endpoint) context.Context {
	if f.cfg.ClientSecret == "" {
		return ctx
	}
	c := *f.client
	c.Transport = basicAuthTransport{next: f.client.Transport, id: f.cfg.ClientID, secret: f.cfg.ClientSecret}
	return context.WithValue(ctx, oauth2.HTTPClient, &c)
}

// basicAuthTransport authenticates every POST it carries: the client it is in (basicAuth's)
// carries the flow's device authorization and token requests alone.
type basicAuthTransport struct {
	next       http.RoundTripper
	id, secret string
}

func (t basicAuthTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	next := t.next
	if next == nil {
		next = http.DefaultTransport
	}
	if req.Method != http.MethodPost || req.Body == nil {
		return next.RoundTrip(req)
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	v, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, err
	}
	v.Del("client_id")
	enc := v.Encode()
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(strings.NewReader(enc))
	r.ContentLength = int64(len(enc))
	r.GetBody = nil
	r.SetBasicAuth(url.QueryEscape(t.id), url.QueryEscape(t.secret))
	return next.RoundTrip(r)
}

func (f *Flow) config(ep oauth2.Endpoint, scope string) *oauth2.Config {
	return &oauth2.Config{ClientID: f.cfg.ClientID, ClientSecret: f.cfg.ClientSecret, Endpoint: ep, Scopes: strings.Fields(scope)}
}

// keep keeps tok's refresh token (the issuer may give none: then the next token asks the human).
func (f *Flow) keep(key grantKey, ep oauth2.Endpoint, tok *oauth2.Token) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if tok.RefreshToken == "" {
		delete(f.grants, key)
		return
	}
	if _, ok := f.grants[key]; !ok && len(f.grants) >= maxGrants {
		for k := range f.grants { // any one
			delete(f.grants, k)
			break
		}
	}
	f.grants[key] = grant{endpoint: ep, refreshToken: tok.RefreshToken}
}

func (f *Flow) prompt(ctx context.Context, da *oauth2.DeviceAuthResponse) error {
	if f.cfg.Prompt != nil {
		return f.cfg.Prompt(ctx, da)
	}
	w := f.cfg.Stderr
	if w == nil {
		w = os.Stderr
	}
	_, err := fmt.Fprintf(w, "Visit %s and enter the code: %s\n", clip(da.VerificationURI), clip(da.UserCode)) // the issuer's text, no terminal escapes
	return err
}

// tokenError is err of a device authorization or token request as libpq words it
// (record_token_error): the issuer's error_description and error, or for a 401 without a
// description what it says of the client secret; never the response's body.
func (f *Flow) tokenError(what string, err error) error {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		return fmt.Errorf("%s: %w", what, err)
	}
	if re.ErrorCode == "" {
		status := 0
		if re.Response != nil {
			status = re.Response.StatusCode
		}
		return fmt.Errorf("%s: unexpected response code %d", what, status)
	}
	msg := ""
	switch {
	case re.ErrorDescription != "":
		msg = clip(re.ErrorDescription) + " "
	case re.Response != nil && re.Response.StatusCode == http.StatusUnauthorized && f.cfg.ClientSecret != "":
		msg = "provider rejected the oauth_client_secret "
	case re.Response != nil && re.Response.StatusCode == http.StatusUnauthorized:
		msg = "provider requires client authentication, and no oauth_client_secret is set "
	}
	return fmt.Errorf("%s: %s(%s)", what, msg, clip(re.ErrorCode))
}

// maxErrorText bounds what of an issuer's error texts goes into an error.
const maxErrorText = 256

// clip cuts s, the issuer's text, to maxErrorText bytes (on a rune boundary), marked "...",
// with control characters (a terminal's escapes, newlines) and invalid UTF-8 shown as "?".
func clip(s string) string {
	more := ""
	if len(s) > maxErrorText {
		cut := maxErrorText
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s, more = s[:cut], "..."
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError {
			return '?'
		}
		return r
	}, s) + more
}
