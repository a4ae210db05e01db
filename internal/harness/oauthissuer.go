package harness

import (
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// GrantDeviceCode is the grant_type of the device access token request (RFC 8628 section 3.4).
const GrantDeviceCode = "urn:ietf:params:oauth:grant-type:device_code"

// OAuthIssuerOptions configure an OAuthIssuer. The zero value gives an issuer at
// https://127.0.0.1:PORT whose tokens live an hour and name the identity AppUser.
type OAuthIssuerOptions struct {
	// Path is the path of the issuer identifier, such as "/realm" (no trailing slash), for RFC
	// 8414 section 3's rules: the metadata is then also served at
	// /.well-known/oauth-authorization-server/realm and /.well-known/openid-configuration/realm
	// besides /realm/.well-known/openid-configuration. "" for none.
	Path string
	// Scope is the issuer's scopes_supported and the scope of OAuth(); default "openid postgres".
	Scope string
	// ClientID is the client the token endpoint accepts; default "pgconnector".
	ClientID string
	// ClientSecret is the client's secret (client_secret_basic or client_secret_post). A request
	// that presents another secret, or any secret when this is "", is refused (invalid_client);
	// one that presents none is taken as the public client, refused only the
	// client_credentials grant, which needs ClientSecret set and presented.
	ClientSecret string
	// Identity is the identity (the server's authn_id) of the access tokens the grants issue;
	// default AppUser. ApproveAs approves a device code for another.
	Identity string
	// TokenTTL is the expires_in of the access tokens the grants issue (a whole number of
	// seconds, rounded up); default an hour; SetTokenTTL changes it. golang.org/x/oauth2 takes a
	// token that expires within 10 s as expired already.
	TokenTTL time.Duration
	// DeviceInterval is the polling interval of the device flow (RFC 8628 section 3.2), in
	// seconds; default 1.
	DeviceInterval int
	// AutoApprove approves every device code at once, as if the user had entered it.
	AutoApprove bool
	// EditMetadata, when non-nil, changes the metadata document (RFC 8414 section 2: "issuer",
	// "token_endpoint", "device_authorization_endpoint", "grant_types_supported",
	// "scopes_supported", "response_types_supported", "token_endpoint_auth_methods_supported")
	// before each response, for tests of a client's checks: delete a member, set another issuer.
	EditMetadata func(doc map[string]any)
}

// OAuthIssuer is an OAuth 2.0 authorization server in the test process, on https://127.0.0.1
// (below port 32768) with a certificate from a throwaway CA (CAFile, Client): discovery
// documents (RFC 8414, OpenID Connect Discovery), the device authorization endpoint (RFC 8628
// section 3.1, 3.2) and the token endpoint (device_code, refresh_token and client_credentials
// grants; RFC 6749 section 5.2 errors). Its access tokens are random opaque strings that it
// writes to TokenFile, the file the harness's validator module reads (OAuthOptions.TokenFile),
// with their identity and expiry. Exported fields are set by StartOAuthIssuer. Safe for
// concurrent use.
type OAuthIssuer struct {
	URL          string // the issuer identifier: https://127.0.0.1:PORT plus Options.Path
	DiscoveryURL string // URL + "/.well-known/openid-configuration"
	Scope        string // OAuthIssuerOptions.Scope or its default
	TokenFile    string // the validator's token file (world-readable, rewritten atomically)
	CAFile       string // PEM certificate of the CA that signed the issuer's certificate

	opts OAuthIssuerOptions
	dir  string
	pool *x509.CertPool
	srv  *http.Server
	done chan struct{}

	mu        sync.Mutex
	access    map[string]issuedToken // access token -> identity, expiry
	refresh   map[string]string      // refresh token -> identity
	devices   map[string]*deviceGrant
	userCodes map[string]string // user_code -> device_code
	counts    OAuthIssuerCounts

	closeOnce sync.Once
	closeErr  error
}

// issuedToken is an access token's line of the token file.
type issuedToken struct {
	identity string
	expiry   int64 // unix seconds; 0: never
}

// deviceGrant is a device authorization (RFC 8628 section 3.2) until it is redeemed.
type deviceGrant struct {
	userCode string
	expires  time.Time
	approved string // the identity approved; "" while pending
	denied   bool
}

// OAuthIssuerCounts are what reached an issuer since it started.
type OAuthIssuerCounts struct {
	// Discovery counts the GETs of a metadata document (either well-known name).
	Discovery int
	// DeviceAuthorizations counts the requests to the device authorization endpoint.
	DeviceAuthorizations int
	// Tokens counts the requests to the token endpoint by grant_type (GrantDeviceCode,
	// "refresh_token", "client_credentials", or what the client sent), refused ones included.
	Tokens map[string]int
	// Issued counts the access tokens the token endpoint issued (Mint not included).
	Issued int
}

// StartOAuthIssuer starts an issuer; Close stops it and removes its files. Its files live in a
// directory of TempDir, which Cleanup (or the guardian) also removes.
func StartOAuthIssuer(opts OAuthIssuerOptions) (*OAuthIssuer, error) {
	if opts.Path != "" && (!strings.HasPrefix(opts.Path, "/") || strings.HasSuffix(opts.Path, "/") ||
		strings.ContainsAny(opts.Path, "?#%{} \"\n\r\t\x00")) {
		return nil, fmt.Errorf("harness: OAuthIssuerOptions.Path %q: want a path such as /realm", opts.Path)
	}
	if opts.Scope == "" {
		opts.Scope = "openid postgres"
	}
	if opts.ClientID == "" {
		opts.ClientID = "pgconnector"
	}
	if opts.Identity == "" {
		opts.Identity = AppUser
	}
	if opts.TokenTTL <= 0 {
		opts.TokenTTL = time.Hour
	}
	if opts.DeviceInterval <= 0 {
		opts.DeviceInterval = 1
	}
	if strings.ContainsAny(opts.Identity, "\n\r\x00") {
		return nil, errors.New("harness: OAuthIssuerOptions.Identity holds a line break or NUL")
	}
	dir, err := TempDir("oauthissuer-*")
	if err != nil {
		return nil, err
	}
	i := &OAuthIssuer{
		Scope:     opts.Scope,
		TokenFile: filepath.Join(dir, "tokens"),
		CAFile:    filepath.Join(dir, "ca.crt"),
		opts:      opts,
		dir:       dir,
		done:      make(chan struct{}),
		access:    map[string]issuedToken{},
		refresh:   map[string]string{},
		devices:   map[string]*deviceGrant{},
		userCodes: map[string]string{},
		counts:    OAuthIssuerCounts{Tokens: map[string]int{}},
	}
	fail := func(err error) (*OAuthIssuer, error) {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	// The server account reads the token file: the directory must let it through.
	if err := os.Chmod(dir, 0o755); err != nil {
		return fail(fmt.Errorf("harness: %w", err))
	}
	if err := i.writeTokens(); err != nil {
		return fail(err)
	}
	cs, err := newCertSet()
	if err != nil {
		return fail(err)
	}
	if err := os.WriteFile(i.CAFile, cs.caPEM, 0o644); err != nil {
		return fail(fmt.Errorf("harness: %w", err))
	}
	cert, err := tls.X509KeyPair(cs.certPEM, cs.keyPEM)
	if err != nil {
		return fail(fmt.Errorf("harness: %w", err))
	}
	i.pool = x509.NewCertPool()
	i.pool.AddCert(cs.caCert)
	ln, err := listenLow()
	if err != nil {
		return fail(fmt.Errorf("harness: OAuth issuer: %w", err))
	}
	i.URL = "https://" + ln.Addr().String() + opts.Path
	i.DiscoveryURL = i.URL + "/.well-known/openid-configuration"
	i.srv = &http.Server{
		Handler:           i.routes(),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
		// A client that does not trust the CA is a test's business, not a line on stderr.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	go func() {
		defer close(i.done)
		_ = i.srv.Serve(tls.NewListener(ln, i.srv.TLSConfig))
	}()
	return i, nil
}

// StartOAuthIssuerT starts an issuer for a test, fails the test if that does not work, and
// closes it when the test ends.
func StartOAuthIssuerT(t testing.TB, opts OAuthIssuerOptions) *OAuthIssuer {
	t.Helper()
	i, err := StartOAuthIssuer(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := i.Close(); err != nil {
			t.Errorf("harness: %v", err)
		}
	})
	return i
}

// Close stops the issuer (open connections are closed) and removes its files, the token file
// among them. It is safe to call more than once; every call returns the result of the first.
func (i *OAuthIssuer) Close() error {
	i.closeOnce.Do(func() {
		err := i.srv.Close()
		<-i.done
		if rerr := os.RemoveAll(i.dir); rerr != nil {
			err = errors.Join(err, rerr)
		}
		if err != nil {
			i.closeErr = fmt.Errorf("harness: closing the OAuth issuer: %w", err)
		}
	})
	return i.closeErr
}

// OAuth returns options for a server that accepts this issuer's tokens: Issuer, Scope and
// TokenFile set, the rest zero (to be changed by the caller).
func (i *OAuthIssuer) OAuth() *OAuthOptions {
	return &OAuthOptions{Issuer: i.URL, Scope: i.Scope, TokenFile: i.TokenFile}
}

// CAPool returns a pool holding the CA that signed the issuer's certificate.
func (i *OAuthIssuer) CAPool() *x509.CertPool { return i.pool.Clone() }

// Client returns a new HTTP client that trusts the issuer's certificate (and no other).
func (i *OAuthIssuer) Client() *http.Client {
	return &http.Client{
		Timeout:   time.Minute,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: i.CAPool(), MinVersion: tls.VersionTLS12}},
	}
}

// Mint issues an access token for identity directly (no HTTP request) and writes it to the
// token file. ttl > 0 makes it expire ttl from now (rounded up to a second, the validator's
// unit); 0 makes it never expire; ttl < 0 makes it expired already.
func (i *OAuthIssuer) Mint(identity string, ttl time.Duration) (string, error) {
	if identity == "" || strings.ContainsAny(identity, "\n\r\x00") {
		return "", errors.New("harness: Mint: the identity is empty or holds a line break or NUL")
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.issueLocked(identity, ttl)
}

// Revoke removes an access token from the token file, so that the server refuses it from the
// next connection on; it also invalidates token as a refresh token. Revoking an unknown token
// is no error.
func (i *OAuthIssuer) Revoke(token string) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	delete(i.refresh, token)
	if _, ok := i.access[token]; !ok {
		return nil
	}
	delete(i.access, token)
	return i.writeTokensLocked()
}

// Approve approves the device authorization of userCode for Options.Identity, as the user
// would at the verification URI: the next poll of its device code gets tokens.
func (i *OAuthIssuer) Approve(userCode string) error {
	return i.ApproveAs(userCode, i.opts.Identity)
}

// ApproveAs is Approve with the tokens issued for identity.
func (i *OAuthIssuer) ApproveAs(userCode, identity string) error {
	if identity == "" || strings.ContainsAny(identity, "\n\r\x00") {
		return errors.New("harness: ApproveAs: the identity is empty or holds a line break or NUL")
	}
	return i.decide(userCode, func(g *deviceGrant) { g.approved = identity })
}

// Deny denies the device authorization of userCode: its next poll gets access_denied.
func (i *OAuthIssuer) Deny(userCode string) error {
	return i.decide(userCode, func(g *deviceGrant) { g.denied = true })
}

func (i *OAuthIssuer) decide(userCode string, set func(*deviceGrant)) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	g := i.devices[i.userCodes[userCode]]
	if g == nil {
		return fmt.Errorf("harness: no pending device authorization with user code %q", userCode)
	}
	set(g)
	return nil
}

// SetTokenTTL sets the lifetime of the access tokens the grants issue from now on (see
// OAuthIssuerOptions.TokenTTL); d <= 0 is an error.
func (i *OAuthIssuer) SetTokenTTL(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("harness: SetTokenTTL(%v): want a positive lifetime", d)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	i.opts.TokenTTL = d
	return nil
}

// Counts returns what reached the issuer so far (a copy).
func (i *OAuthIssuer) Counts() OAuthIssuerCounts {
	i.mu.Lock()
	defer i.mu.Unlock()
	c := i.counts
	c.Tokens = make(map[string]int, len(i.counts.Tokens))
	for k, v := range i.counts.Tokens {
		c.Tokens[k] = v
	}
	return c
}

// issueLocked makes an access token for identity that expires after ttl (see Mint) and writes
// the token file.
func (i *OAuthIssuer) issueLocked(identity string, ttl time.Duration) (string, error) {
	tok := randomToken()
	var expiry int64
	switch {
	case ttl > 0:
		expiry = time.Now().Add(ttl + time.Second - 1).Unix()
	case ttl < 0:
		expiry = time.Now().Add(ttl).Unix()
		expiry = max(expiry, 1)
	}
	i.access[tok] = issuedToken{identity: identity, expiry: expiry}
	if err := i.writeTokensLocked(); err != nil {
		delete(i.access, tok)
		return "", err
	}
	return tok, nil
}

func (i *OAuthIssuer) writeTokens() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.writeTokensLocked()
}

// writeTokensLocked writes the token file anew, through a rename so that the validator never
// reads half a file.
func (i *OAuthIssuer) writeTokensLocked() error {
	lines := make([]string, 0, len(i.access))
	for tok, it := range i.access {
		lines = append(lines, tok+" "+it.identity+" "+strconv.FormatInt(it.expiry, 10)+"\n")
	}
	sort.Strings(lines)
	data := []byte(strings.Join(lines, ""))
	if len(data) >= oauthTokenFileMax {
		return fmt.Errorf("harness: the OAuth token file would exceed %d bytes (revoke tokens)", oauthTokenFileMax)
	}
	tmp := i.TokenFile + ".new"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil { // whatever the umask
		return fmt.Errorf("harness: %w", err)
	}
	if err := os.Rename(tmp, i.TokenFile); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	return nil
}

// randomToken returns 32 random bytes, base64url without padding (43 characters, no space).
func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail on supported platforms
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// userCodeAlphabet has no vowels and no digits easily mistaken (RFC 8628 section 6.1).
const userCodeAlphabet = "BCDFGHJKLMNPQRSTVWXZ"

// randomUserCode returns a user code such as "WDJB-MJHT".
func randomUserCode() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	code := make([]byte, 0, 9)
	for k, c := range b {
		if k == 4 {
			code = append(code, '-')
		}
		code = append(code, userCodeAlphabet[int(c)%len(userCodeAlphabet)])
	}
	return string(code)
}

// clientAuthenticated reports whether the request names the issuer's client (client_id in the
// form, or HTTP Basic; RFC 6749 section 2.3.1) with the right secret or none, and whether it
// presented one (the right one when ok). A client without a secret is let through as a public
// client (golang.org/x/oauth2's DeviceAuth sends none); only client_credentials needs one.
func (i *OAuthIssuer) clientAuthenticated(r *http.Request) (ok, secret bool) {
	id, pw, basic := r.BasicAuth()
	if !basic {
		id, pw = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	secret = pw != ""
	if id != i.opts.ClientID {
		return false, secret
	}
	if !secret {
		return true, false
	}
	return i.opts.ClientSecret != "" && subtle.ConstantTimeCompare([]byte(pw), []byte(i.opts.ClientSecret)) == 1, true
}

// writeJSON writes v as the JSON body of a response with status code, not cached (RFC 6749
// section 5.1).
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// oauthError writes an RFC 6749 section 5.2 error response: 401 for invalid_client, else 400.
func oauthError(w http.ResponseWriter, code, description string) {
	status := http.StatusBadRequest
	if code == "invalid_client" {
		w.Header().Set("WWW-Authenticate", `Basic realm="pgconnector"`)
		status = http.StatusUnauthorized
	}
	writeJSON(w, status, map[string]string{"error": code, "error_description": description})
}
