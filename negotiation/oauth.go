package negotiation

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgconnector/pgconnector/internal/jsonfields"
)

// SASL OAUTHBEARER (RFC 7628) as PostgreSQL 18 speaks it (src/backend/libpq/auth-oauth.c) and
// libpq 18 checks it (src/interfaces/libpq/fe-auth-oauth.c). The client's initial response is
// "n,," 0x01 "auth=Bearer <token>" 0x01 0x01, or with an empty auth value a discovery message;
// the server answers a discovery message, or a token it refuses, with AuthenticationSASLContinue
// holding a JSON object (RFC 7628 section 3.2.2: status, openid-configuration, scope), to which
// the client answers a single 0x01 (section 3.2.3) and the server ends the exchange with an
// ErrorResponse. libpq then obtains a token and connects again: two connections for each. The
// negotiator remembers the server's answer per host, port and user (oauthMemory), so that later
// connects send the token in the first message; the attempt after a discovery or a refused
// cached token is made again on a new connection by tryAddr (credRetry).

const (
	// oauthMaxNesting is libpq's MAX_SASL_NESTING_LEVEL (fe-auth-oauth.c).
	oauthMaxNesting = 8
	wkPrefix        = "/.well-known/"
)

// The states of an OAUTHBEARER exchange (oauthExchange.state).
const (
	oauthSent      = iota + 1 // the initial response went: a token, or a discovery message
	oauthErrorSent            // the server's error JSON came and 0x01 went: only its ErrorResponse may follow
)

// oauthExchange is an attempt's OAUTHBEARER exchange.
type oauthExchange struct {
	state int
	req   CredentialRequest
	cred  *Credential // the token sent; nil for a discovery message or pgx's provider
	pgx   bool        // pgx's OAuthTokenProvider gave the token
	// status is the server's error status, reported with its ErrorResponse.
	status string
}

// oauthAnswer is what a server answered to a discovery message or a refused token.
type oauthAnswer struct {
	Status, DiscoveryURI, Scope string
	hasStatus                   bool
}

// parseOAuthAnswer reads the server's JSON error (RFC 7628 section 3.2.2) with libpq 18's rules
// (fe-auth-oauth.c, handle_oauth_sasl_error and its JSON callbacks): no NUL byte, valid UTF-8, a
// top-level object, nesting at most 8, the top-level fields status, scope and
// openid-configuration strings and each at most once; other fields are ignored. The input is
// bounded by the message's (2000 bytes, authExchange.step). Errors name the problem, never the
// input.
func parseOAuthAnswer(data []byte) (oauthAnswer, error) {
	var a oauthAnswer
	if bytes.IndexByte(data, 0) >= 0 {
		return a, errors.New("server's error message contained an embedded NULL, and was discarded")
	}
	if !utf8.Valid(data) {
		return a, errors.New("server's error response is not valid UTF-8")
	}
	fields := []jsonfields.Field{{Name: "status", To: &a.Status}, {Name: "scope", To: &a.Scope}, {Name: "openid-configuration", To: &a.DiscoveryURI}}
	if err := jsonfields.Read(data, oauthMaxNesting, fields); err != nil {
		return oauthAnswer{}, errors.New("failed to parse server's error response: " + err.Error())
	}
	a.hasStatus = fields[0].Seen
	return a, nil
}

// issuerFromWellKnown derives the issuer identifier of a .well-known URI by RFC 8414 section 3
// (and OpenID Connect Discovery 1.0 section 4, whose suffix comes after the path), with libpq
// 18's checks and messages (fe-auth-oauth.c, issuer_from_well_known_uri): https (the scheme in
// any letter case), no query or fragment, the suffix openid-configuration or
// oauth-authorization-server as a whole path segment, at the start of the path unless it ends
// it. libpq's PGOAUTHDEBUG=UNSAFE, which allows http, has no counterpart.
func issuerFromWellKnown(uri string) (string, error) {
	const https = "https://"
	if len(uri) < len(https) || !strings.EqualFold(uri[:len(https)], https) {
		return "", fmt.Errorf("OAuth discovery URI %q must use HTTPS", uri)
	}
	authority := uri[len(https):]
	if strings.ContainsAny(authority, "?#") {
		return "", fmt.Errorf("OAuth discovery URI %q must not contain query or fragment components", uri)
	}
	i := strings.Index(authority, wkPrefix)
	if i < 0 {
		return "", fmt.Errorf("OAuth discovery URI %q is not a .well-known URI", uri)
	}
	rest := authority[i+len(wkPrefix):]
	var suffix string
	for _, s := range []string{"openid-configuration", "oauth-authorization-server"} {
		if strings.HasPrefix(rest, s) {
			suffix = s
			break
		}
	}
	after := rest[len(suffix):]
	if suffix == "" || after != "" && after[0] != '/' {
		return "", fmt.Errorf("OAuth discovery URI %q uses an unsupported .well-known suffix", uri)
	}
	if after != "" && strings.IndexByte(authority, '/') != i {
		return "", fmt.Errorf("OAuth discovery URI %q uses an invalid format", uri)
	}
	return uri[:len(https)] + authority[:i] + after, nil
}

// oauthIssuer is oauth_issuer taken apart (libpq's setup_oauth_parameters): its issuer
// identifier, and its own discovery URI when it is a .well-known URI (then no discovery message
// is needed).
func oauthIssuer(issuer string) (id, discoveryURI string, err error) {
	if !strings.Contains(issuer, wkPrefix) {
		return issuer, "", nil
	}
	id, err = issuerFromWellKnown(issuer)
	return id, issuer, err
}

// MaxOAuthAnswers caps the server answers (discovery URI and scope, per host, port and user) a
// Negotiator remembers; a full memory forgets the least recently used.
const MaxOAuthAnswers = MaxCacheKeys

type oauthKey struct {
	host string
	port uint16
	user string
}

type oauthEntry struct {
	uri, scope string
	used       uint64
}

// oauthMemory remembers, per host as written, port and user, the discovery URI and scope the
// server asked for. The answer holds no secret and is checked against oauth_issuer before use.
type oauthMemory struct {
	mu   sync.Mutex
	m    map[oauthKey]*oauthEntry
	tick uint64
	// pending holds, per key with nothing remembered, the discovery one attempt is making: the
	// attempts of a herd wait for its answer (beginDiscovery) instead of each costing the
	// server a backend for the same question. Closed and removed by endDiscovery.
	pending map[oauthKey]chan struct{}
}

// beginDiscovery returns, for k, the channel of the discovery another attempt is making (lead
// false: wait for it, then look again), or makes this attempt the one that discovers (lead
// true: it must call endDiscovery once its exchange is over, answered or not).
func (o *oauthMemory) beginDiscovery(k oauthKey) (wait <-chan struct{}, lead bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if c := o.pending[k]; c != nil {
		return c, false
	}
	if o.pending == nil {
		o.pending = map[oauthKey]chan struct{}{}
	}
	o.pending[k] = make(chan struct{})
	return nil, true
}

// endDiscovery ends the discovery of k that beginDiscovery gave this attempt: the attempts
// waiting for it look at the memory again. The leader calls it once (and clears its
// attempt's oauthLead): a second call could end a later leader's discovery of the same k.
func (o *oauthMemory) endDiscovery(k oauthKey) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if c := o.pending[k]; c != nil {
		close(c)
		delete(o.pending, k)
	}
}

func (o *oauthMemory) get(k oauthKey) (uri, scope string, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e := o.m[k]
	if e == nil {
		return "", "", false
	}
	o.tick++
	e.used = o.tick
	return e.uri, e.scope, true
}

// put remembers uri and scope for k, and reports whether a different answer was remembered.
func (o *oauthMemory) put(k oauthKey, uri, scope string) (changed bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[oauthKey]*oauthEntry{}
	}
	o.tick++
	if e := o.m[k]; e != nil {
		changed = e.uri != uri || e.scope != scope
		e.uri, e.scope, e.used = uri, scope, o.tick
		return changed
	}
	if len(o.m) >= MaxOAuthAnswers {
		var oldest oauthKey
		min := ^uint64(0)
		for key, e := range o.m {
			if e.used < min {
				oldest, min = key, e.used
			}
		}
		delete(o.m, oldest)
	}
	o.m[k] = &oauthEntry{uri: uri, scope: scope, used: o.tick}
	return false
}

func (o *oauthMemory) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.m)
}

// bearerChannelVerified reports whether the attempt's channel authenticates the server, the
// only kind a bearer token goes over by default (OAuthConfig.AllowUnverifiedChannel): TLS with
// sslmode verify-ca or verify-full, GSS encryption, or a Unix-domain socket.
func (x *authExchange) bearerChannelVerified() bool {
	h := x.at.host
	switch {
	case x.at.method == MethodGSS:
		return true
	case x.tlsInUse():
		return h != nil && (h.SSLMode == SSLModeVerifyCA || h.SSLMode == SSLModeVerifyFull)
	}
	return x.at.dialNetwork == "unix" || h != nil && h.UnixSocket()
}

// checkBearerChannel refuses to send a bearer token (or a discovery message) over a channel
// that does not authenticate the server, unless the configuration allows it.
func (x *authExchange) checkBearerChannel() error {
	if x.bearerChannelVerified() || x.at.n.cfg.OAuth.AllowUnverifiedChannel {
		return nil
	}
	mode := "plaintext TCP"
	if x.tlsInUse() {
		mode = "TLS without certificate verification (sslmode=" + x.at.host.SSLMode.String() + ")"
	}
	return &AuthError{Problem: "server requested OAuth authentication over " + mode + ", which does not authenticate the server: " +
		"a bearer token is sent only over TLS with sslmode=verify-ca or verify-full, GSS encryption or a Unix-domain socket " +
		"(pgconnector.WithOAuthUnverifiedChannel, OAuthConfig.AllowUnverifiedChannel, allows it)"}
}

// startOAuth answers an AuthenticationSASL that offers OAUTHBEARER, require_auth and
// channel_binding checked: with pgx's OAuthTokenProvider, token first as pgx does; else with a
// token of Config.Credentials when the server's answer is known (remembered, or oauth_issuer is
// its .well-known URI), else with a discovery message.
func (x *authExchange) startOAuth() error {
	if err := x.checkBearerChannel(); err != nil {
		return err
	}
	n := x.at.n
	x.oauth = true
	x.at.saslMechanism = "OAUTHBEARER"
	if x.s.oauth != nil {
		token, err := x.s.oauth(x.ctx)
		if err != nil {
			return &AbortError{Err: fmt.Errorf("OAuthTokenProvider: %w", err)}
		}
		x.ob = &oauthExchange{pgx: true}
		return x.sendBearer(token)
	}
	creds := n.cfg.Credentials
	if creds == nil || !creds.Has(CredentialOAuthToken) {
		return &AuthError{Problem: "server requires OAuth authentication, but oauth_issuer and oauth_client_id are not both set"}
	}
	cfg := &n.cfg.OAuth
	if cfg.Issuer == "" {
		return &AuthError{Problem: "server requires OAuth authentication, but oauth_issuer is not set"}
	}
	if n.issuerErr != nil {
		return &AuthError{Problem: n.issuerErr.Error()}
	}
	id, wkURI := n.issuerID, n.issuerWK
	x.ob = &oauthExchange{req: x.credentialRequest(CredentialOAuthToken)}
	req := &x.ob.req
	req.Issuer, req.Scope = id, cfg.Scope
	if st := x.at.creds; st != nil && st.next != nil && st.req.Kind == CredentialOAuthToken {
		// Fetched for this attempt, after the one before it.
		*req = st.req
		x.ob.cred, st.next = st.next, nil
		return x.sendBearer(x.ob.cred.Secret)
	}
	if req.DiscoveryURI = wkURI; wkURI == "" {
		k := x.oauthKey()
		uri, scope, ok := n.oauth.get(k)
		if !ok {
			// One discovery for a herd: the others wait for its answer (a round trip), bounded
			// by the attempt's context, and discover themselves only if it brought none.
			wait, lead := n.oauth.beginDiscovery(k)
			if lead {
				x.at.oauthLead, x.at.oauthLeadKey = true, k
			} else {
				select {
				case <-wait:
				case <-x.ctx.Done():
					return x.ctx.Err()
				}
				uri, scope, ok = n.oauth.get(k)
			}
		}
		if !ok {
			// Discovery: an empty auth value (RFC 7628 section 4.3; libpq's discover).
			x.ob.state = oauthSent
			return x.sendInitial("")
		}
		req.DiscoveryURI = uri
		if cfg.Scope == "" {
			req.Scope = scope
		}
	}
	c, err := x.at.getCredential(x.ctx, req)
	if err != nil {
		return err
	}
	x.ob.cred = &c
	return x.sendBearer(c.Secret)
}

func (x *authExchange) oauthKey() oauthKey {
	return oauthKey{host: x.at.host.Host, port: x.at.host.Port, user: x.s.user}
}

// sendBearer sends the initial response with token, which must be a b64token (RFC 6750 section
// 2.1), as the server requires (auth-oauth.c, validate_token_format): anything else could add
// key-value pairs to the message.
func (x *authExchange) sendBearer(token string) error {
	if token == "" {
		return &AuthError{Problem: "OAuth flow did not provide a token"}
	}
	if !isB64Token(token) {
		if x.ob.cred != nil { // not kept: a later connect asks the function again
			n := x.at.n
			n.cfg.Credentials.Refused(&x.ob.req, *x.ob.cred)
		}
		return &AuthError{Problem: "OAuth flow provided a token that is not a bearer token (RFC 6750 section 2.1: letters, digits, -._~+/ then =)"}
	}
	x.finished = true
	if x.ob == nil {
		x.ob = &oauthExchange{}
	}
	x.ob.state = oauthSent
	return x.sendInitial("Bearer " + token)
}

// sendInitial sends OAUTHBEARER's initial response (RFC 7628 section 3.1, as libpq's
// client_initial_response): gs2-header "n,,", then auth=value, kvsep-terminated.
func (x *authExchange) sendInitial(auth string) error {
	return x.send(&pgproto3.SASLInitialResponse{AuthMechanism: "OAUTHBEARER", Data: []byte("n,,\x01auth=" + auth + "\x01\x01")})
}

func isB64Token(s string) bool {
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~+/", c) >= 0) {
			break
		}
	}
	if i == 0 {
		return false
	}
	for ; i < len(s); i++ {
		if s[i] != '=' {
			return false
		}
	}
	return true
}

// continueOAuth answers the server's AuthenticationSASLContinue: its JSON error, checked as
// libpq checks it (handle_oauth_sasl_error), answered with 0x01 (RFC 7628 section 3.2.3). A
// discovery URI whose issuer is not oauth_issuer's is refused before anything more is sent;
// only invalid_token is retried: after a discovery message, with a token on a new connection;
// after a refused cached token (or one sent for an answer that changed), once with a fresh one.
func (x *authExchange) continueOAuth(data []byte) error {
	ob := x.ob
	if ob == nil || ob.state != oauthSent {
		return &AuthError{Problem: "server sent additional OAuth data after error"}
	}
	a, err := parseOAuthAnswer(data)
	if err != nil {
		return &AuthError{Problem: err.Error()}
	}
	n := x.at.n
	tokenSent := x.finished
	if ob.pgx {
		// pgx's provider: no discovery, no issuer check; the server's status is reported.
		ob.state, ob.status = oauthErrorSent, statusWord(a.Status)
		return x.send(&pgproto3.SASLResponse{Data: []byte{1}})
	}
	info := OAuthDiscoveryInfo{Status: a.Status, DiscoveryURI: a.DiscoveryURI, Scope: a.Scope, TokenRefused: tokenSent}
	if x.at.host != nil {
		info.Host, info.Port = x.at.host.Host, x.at.host.Port
	}
	var problem string
	if a.DiscoveryURI != "" {
		id, err := issuerFromWellKnown(a.DiscoveryURI)
		switch {
		case err != nil:
			problem = err.Error()
		case id != ob.req.Issuer:
			problem = fmt.Sprintf("server's discovery document at %s (issuer %q) is incompatible with oauth_issuer (%s)", printable(a.DiscoveryURI), printable(id), n.cfg.OAuth.Issuer)
		case ob.req.DiscoveryURI != "" && a.DiscoveryURI != ob.req.DiscoveryURI && n.issuerWK != "":
			// oauth_issuer's own discovery URI is the one (libpq: handle_oauth_sasl_error); a
			// remembered one is replaced by the server's new answer.
			problem = fmt.Sprintf("server's discovery document has moved to %s (previous location was %s)", printable(a.DiscoveryURI), printable(ob.req.DiscoveryURI))
		}
	}
	if problem == "" {
		switch {
		case !a.hasStatus:
			problem = "server sent error response without a status"
		case a.Status != "invalid_token":
			problem = "server rejected OAuth bearer token: " + statusWord(a.Status)
		case !tokenSent && a.DiscoveryURI == "":
			problem = "server requires OAuth authentication, but no discovery metadata was provided"
		}
	}
	if problem == "" && a.DiscoveryURI != "" {
		if n.issuerWK == "" { // a .well-known oauth_issuer asks no server
			info.Changed = n.oauth.put(x.oauthKey(), a.DiscoveryURI, a.Scope)
		}
	}
	if x.at.oauthLead {
		n.oauth.endDiscovery(x.at.oauthLeadKey)
		x.at.oauthLead = false // ended: the attempt's end must not end a later leader's
	}
	if n.trace.OAuthDiscovery != nil {
		n.trace.OAuthDiscovery(x.ctx, info)
	}
	if ob.cred != nil {
		n.cfg.Credentials.Refused(&ob.req, *ob.cred)
	}
	if problem != "" {
		return &AuthError{Problem: problem}
	}
	next := ob.req
	if a.DiscoveryURI != "" {
		next.DiscoveryURI = a.DiscoveryURI
		if n.cfg.OAuth.Scope == "" {
			next.Scope = a.Scope
		}
	}
	switch {
	case !tokenSent:
		x.at.retryState().want(retryDiscovery, next)
	case ob.cred.Source == CredentialCached || info.Changed:
		x.at.retryState().want(retryTokenRefused, next)
	}
	ob.state, ob.status = oauthErrorSent, a.Status
	return x.send(&pgproto3.SASLResponse{Data: []byte{1}})
}

// oauthRejectedError is the server's ErrorResponse after it refused an OAuth bearer token, with
// the status of its JSON; it unwraps to the server's *pgconn.PgError.
type oauthRejectedError struct {
	status string
	pg     *pgconn.PgError
}

func (e *oauthRejectedError) Error() string {
	return "server rejected OAuth bearer token (" + e.status + "): " + e.pg.Error()
}

func (e *oauthRejectedError) Unwrap() error { return e.pg }

// oauthErrorResponse is the ErrorResponse msg (a whole message) that follows the client's 0x01,
// as the error of the attempt, or nil when no OAuth error came before it.
func (x *authExchange) oauthErrorResponse(msg []byte) error {
	if x.ob == nil || x.ob.state != oauthErrorSent {
		return nil
	}
	var er pgproto3.ErrorResponse
	if err := er.Decode(msg[5:]); err != nil {
		return errStartup("a malformed ErrorResponse")
	}
	return &oauthRejectedError{status: statusWord(x.ob.status), pg: pgconn.ErrorResponseToPgError(&er)}
}

// statusWord is a server's status as shown: itself when a short word, else a placeholder (the
// server is not authenticated).
func statusWord(s string) string {
	if s != "" && len(s) <= 64 && strings.Trim(s, "abcdefghijklmnopqrstuvwxyz_-") == "" {
		return s
	}
	return "(a status that is not a word)"
}

// printable is s for an error message: at most 256 bytes, control characters replaced.
func printable(s string) string {
	if len(s) > 256 {
		s = s[:256] + "..."
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}
