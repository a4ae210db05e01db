package connstring

// OAuth is the connection string's OAuth keys (libpq 18, libpq-connect.html#LIBPQ-CONNECT-OAUTH-ISSUER
// and following), read from a string, a URL or a service file; libpq reads no environment
// variable for them. An empty value is not given, as in libpq (empty.go). None of them is sent
// to the server or given to pgx.
type OAuth struct {
	// Issuer is oauth_issuer as given: an issuer identifier, or its .well-known URI.
	Issuer string
	// ClientID is oauth_client_id, ClientSecret oauth_client_secret (never shown: see String).
	ClientID     string
	ClientSecret string
	// Scope is oauth_scope: it replaces the scope the server asks for.
	Scope string
}

// String shows the keys that are given, the secret as given or not, never its value.
func (o OAuth) String() string {
	s := "oauth_issuer=" + o.Issuer + " oauth_client_id=" + o.ClientID + " oauth_scope=" + o.Scope
	if o.ClientSecret != "" {
		s += " oauth_client_secret=(given)"
	}
	return s
}

// GoString is String, so that %#v shows no secret either.
func (o OAuth) GoString() string { return o.String() }

// oauthKeys reads the OAuth keys of vals.
func oauthKeys(vals *values) OAuth {
	get := func(key string) string {
		v, _, _ := vals.get(key, "", false)
		return v
	}
	return OAuth{Issuer: get("oauth_issuer"), ClientID: get("oauth_client_id"), ClientSecret: get("oauth_client_secret"), Scope: get("oauth_scope")}
}
