package harness

import (
	"net/http"
	"strings"
	"time"
)

// The HTTP side of OAuthIssuer: the metadata documents, the device authorization endpoint and
// the token endpoint.

// deviceCodeTTL is the expires_in of a device code (RFC 8628 section 3.2).
const deviceCodeTTL = 10 * time.Minute

// maxFormBytes bounds the body of a POST the issuer reads.
const maxFormBytes = 64 << 10

// routes returns the issuer's handler. With Options.Path "/realm" the metadata is served at the
// OpenID Connect place (/realm/.well-known/openid-configuration) and at the RFC 8414 section 3
// places (/.well-known/oauth-authorization-server/realm, and likewise openid-configuration);
// without a path at /.well-known/openid-configuration and /.well-known/oauth-authorization-server.
func (i *OAuthIssuer) routes() http.Handler {
	mux := http.NewServeMux()
	path := i.opts.Path
	for _, name := range []string{"openid-configuration", "oauth-authorization-server"} {
		mux.HandleFunc("GET /.well-known/"+name+path, i.metadata)
		if path != "" {
			mux.HandleFunc("GET "+path+"/.well-known/"+name, i.metadata)
		}
	}
	mux.HandleFunc("POST "+path+"/device", i.deviceAuthorization)
	mux.HandleFunc("POST "+path+"/token", i.token)
	return mux
}

// metadata serves the authorization server metadata (RFC 8414 section 2). grant_types_supported
// names client_credentials only when the issuer has a ClientSecret (a confidential client).
func (i *OAuthIssuer) metadata(w http.ResponseWriter, r *http.Request) {
	i.mu.Lock()
	i.counts.Discovery++
	i.mu.Unlock()
	grants := []string{GrantDeviceCode, "refresh_token"}
	auth := []string{"none"}
	if i.opts.ClientSecret != "" {
		grants = append(grants, "client_credentials")
		auth = []string{"client_secret_basic", "client_secret_post"}
	}
	doc := map[string]any{
		"issuer":                                i.URL,
		"token_endpoint":                        i.URL + "/token",
		"device_authorization_endpoint":         i.URL + "/device",
		"grant_types_supported":                 grants,
		"scopes_supported":                      strings.Fields(i.Scope),
		"response_types_supported":              []string{"code"},
		"token_endpoint_auth_methods_supported": auth,
	}
	if i.opts.EditMetadata != nil {
		i.opts.EditMetadata(doc)
	}
	writeJSON(w, http.StatusOK, doc)
}

// parseForm reads a bounded form body; false means an error response was written.
func parseForm(w http.ResponseWriter, r *http.Request) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		oauthError(w, "invalid_request", "the request body is not a form of at most 64 KiB")
		return false
	}
	return true
}

// deviceAuthorization is the device authorization endpoint (RFC 8628 sections 3.1, 3.2).
func (i *OAuthIssuer) deviceAuthorization(w http.ResponseWriter, r *http.Request) {
	i.mu.Lock()
	i.counts.DeviceAuthorizations++
	i.mu.Unlock()
	if !parseForm(w, r) {
		return
	}
	if ok, _ := i.clientAuthenticated(r); !ok {
		oauthError(w, "invalid_client", "unknown client or wrong secret")
		return
	}
	deviceCode, userCode := randomToken(), randomUserCode()
	g := &deviceGrant{userCode: userCode, expires: time.Now().Add(deviceCodeTTL)}
	if i.opts.AutoApprove {
		g.approved = i.opts.Identity
	}
	i.mu.Lock()
	i.devices[deviceCode] = g
	i.userCodes[userCode] = deviceCode
	i.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"device_code":               deviceCode,
		"user_code":                 userCode,
		"verification_uri":          i.URL + "/activate",
		"verification_uri_complete": i.URL + "/activate?user_code=" + userCode,
		"expires_in":                int(deviceCodeTTL / time.Second),
		"interval":                  i.opts.DeviceInterval,
	})
}

// token is the token endpoint (RFC 6749 section 3.2; RFC 8628 sections 3.4, 3.5).
func (i *OAuthIssuer) token(w http.ResponseWriter, r *http.Request) {
	if !parseForm(w, r) {
		return
	}
	grant := r.PostForm.Get("grant_type")
	i.mu.Lock()
	i.counts.Tokens[grant]++
	i.mu.Unlock()
	ok, secret := i.clientAuthenticated(r)
	if !ok {
		oauthError(w, "invalid_client", "unknown client or wrong secret")
		return
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	var identity string
	withRefresh := true
	switch grant {
	case GrantDeviceCode:
		code := r.PostForm.Get("device_code")
		g := i.devices[code]
		switch {
		case g == nil:
			oauthError(w, "invalid_grant", "unknown device_code")
			return
		case time.Now().After(g.expires):
			i.forgetDeviceLocked(code)
			oauthError(w, "expired_token", "the device_code has expired")
			return
		case g.denied:
			i.forgetDeviceLocked(code)
			oauthError(w, "access_denied", "the user denied the authorization")
			return
		case g.approved == "":
			oauthError(w, "authorization_pending", "the user has not yet approved the authorization")
			return
		}
		identity = g.approved
		i.forgetDeviceLocked(code)
	case "refresh_token":
		identity = i.refresh[r.PostForm.Get("refresh_token")]
		if identity == "" {
			oauthError(w, "invalid_grant", "unknown or revoked refresh_token")
			return
		}
		withRefresh = false // the client keeps the one it has (RFC 6749 section 6)
	case "client_credentials":
		if !secret || i.opts.ClientSecret == "" {
			oauthError(w, "unauthorized_client", "client_credentials needs a confidential client")
			return
		}
		identity = i.opts.Identity
		withRefresh = false // RFC 6749 section 4.4.3
	case "":
		oauthError(w, "invalid_request", "no grant_type")
		return
	default:
		oauthError(w, "unsupported_grant_type", "unsupported grant_type")
		return
	}
	ttl := i.opts.TokenTTL
	tok, err := i.issueLocked(identity, ttl)
	if err != nil {
		oauthError(w, "server_error", "the token file could not be written")
		return
	}
	i.counts.Issued++
	resp := map[string]any{
		"access_token": tok,
		"token_type":   "Bearer",
		"expires_in":   int((ttl + time.Second - 1) / time.Second),
		"scope":        i.Scope,
	}
	if withRefresh {
		rt := randomToken()
		i.refresh[rt] = identity
		resp["refresh_token"] = rt
	}
	writeJSON(w, http.StatusOK, resp)
}

func (i *OAuthIssuer) forgetDeviceLocked(code string) {
	if g := i.devices[code]; g != nil {
		delete(i.userCodes, g.userCode)
	}
	delete(i.devices, code)
}
