package harness

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// tokenFileLine returns the token file's line of token ("" when absent).
func tokenFileLine(t *testing.T, i *OAuthIssuer, token string) string {
	t.Helper()
	b, err := os.ReadFile(i.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, token+" ") {
			return l
		}
	}
	return ""
}

// TestOAuthIssuerDiscovery: an issuer with a path serves its metadata at the OpenID Connect
// place and at RFC 8414's, over TLS that Client trusts and the default client does not.
func TestOAuthIssuerDiscovery(t *testing.T) {
	iss := StartOAuthIssuerT(t, OAuthIssuerOptions{Path: "/realm", ClientSecret: "s3cret"})
	if !strings.HasSuffix(iss.URL, "/realm") || iss.DiscoveryURL != iss.URL+"/.well-known/openid-configuration" {
		t.Fatalf("URL %q, DiscoveryURL %q", iss.URL, iss.DiscoveryURL)
	}
	root := strings.TrimSuffix(iss.URL, "/realm")
	client := iss.Client()
	for _, u := range []string{
		iss.DiscoveryURL,
		root + "/.well-known/oauth-authorization-server/realm",
		root + "/.well-known/openid-configuration/realm",
	} {
		resp, err := client.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		var md struct {
			Issuer string   `json:"issuer"`
			Token  string   `json:"token_endpoint"`
			Device string   `json:"device_authorization_endpoint"`
			Grants []string `json:"grant_types_supported"`
		}
		err = json.NewDecoder(resp.Body).Decode(&md)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %v", u, resp.StatusCode, err)
		}
		if md.Issuer != iss.URL || md.Token != iss.URL+"/token" || md.Device != iss.URL+"/device" ||
			!slices.Contains(md.Grants, GrantDeviceCode) || !slices.Contains(md.Grants, "refresh_token") ||
			!slices.Contains(md.Grants, "client_credentials") {
			t.Errorf("%s: %+v", u, md)
		}
	}
	if resp, err := client.Get(root + "/.well-known/openid-configuration"); err != nil || resp.StatusCode != 404 {
		t.Errorf("metadata without the issuer's path: %v %v; want 404", resp, err)
	} else {
		resp.Body.Close()
	}
	if got := iss.Counts().Discovery; got != 3 {
		t.Errorf("Counts().Discovery = %d, want 3", got)
	}
	if _, err := http.Get(iss.DiscoveryURL); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client without the issuer's CA: %v; want a certificate error", err)
	}

	edited := StartOAuthIssuerT(t, OAuthIssuerOptions{EditMetadata: func(doc map[string]any) {
		delete(doc, "device_authorization_endpoint")
		doc["issuer"] = "https://elsewhere.example"
	}})
	resp, err := edited.Client().Get(edited.DiscoveryURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if _, ok := doc["device_authorization_endpoint"]; ok || doc["issuer"] != "https://elsewhere.example" || doc["token_endpoint"] != edited.URL+"/token" {
		t.Errorf("edited metadata %v", doc)
	}
}

// TestOAuthIssuerGrants: golang.org/x/oauth2 runs the device flow (pending until Approve), the
// refresh grant and the client credentials grant against the issuer, whose access tokens land in
// the token file with their identity and expiry; refusals are RFC 6749 errors.
func TestOAuthIssuerGrants(t *testing.T) {
	ctx := testCtx(t)
	iss := StartOAuthIssuerT(t, OAuthIssuerOptions{ClientSecret: "s3cret", TokenTTL: 90 * time.Second})
	ctx = context.WithValue(ctx, oauth2.HTTPClient, iss.Client())
	cfg := &oauth2.Config{
		ClientID:     "pgconnector",
		ClientSecret: "s3cret",
		Endpoint:     oauth2.Endpoint{DeviceAuthURL: iss.URL + "/device", TokenURL: iss.URL + "/token", AuthStyle: oauth2.AuthStyleInHeader},
		Scopes:       strings.Fields(iss.Scope),
	}

	da, err := cfg.DeviceAuth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if da.UserCode == "" || da.Interval != 1 || !strings.Contains(da.VerificationURIComplete, da.UserCode) || da.Expiry.IsZero() {
		t.Errorf("device authorization %+v", da)
	}
	go func() {
		// Approve once a poll has been answered authorization_pending.
		for iss.Counts().Tokens[GrantDeviceCode] < 1 && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		_ = iss.ApproveAs(da.UserCode, "alice")
	}()
	tok, err := cfg.DeviceAccessToken(ctx, da)
	if err != nil {
		t.Fatal(err)
	}
	if polls := iss.Counts().Tokens[GrantDeviceCode]; polls < 2 {
		t.Errorf("%d device code polls, want at least 2 (pending, then approved)", polls)
	}
	if d := time.Until(tok.Expiry); tok.RefreshToken == "" || d < 80*time.Second || d > 91*time.Second {
		t.Errorf("token: refresh %v, expires in %v; want a refresh token, 90 s", tok.RefreshToken != "", d)
	}
	if l := tokenFileLine(t, iss, tok.AccessToken); !strings.HasPrefix(l, tok.AccessToken+" alice ") {
		t.Errorf("token file line %q", l)
	}
	if _, err := cfg.DeviceAccessToken(ctx, da); err == nil {
		t.Error("a redeemed device code: got a token again")
	}

	refreshed, err := cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: tok.RefreshToken}).Token()
	if err != nil {
		t.Fatal(err)
	}
	if refreshed.AccessToken == tok.AccessToken || tokenFileLine(t, iss, refreshed.AccessToken) == "" ||
		refreshed.RefreshToken != tok.RefreshToken {
		t.Errorf("refreshed %+v", refreshed)
	}

	if err := iss.SetTokenTTL(0); err == nil {
		t.Error("SetTokenTTL(0): no error")
	}
	if err := iss.SetTokenTTL(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	cc := clientcredentials.Config{ClientID: "pgconnector", ClientSecret: "s3cret", TokenURL: iss.URL + "/token"}
	ctok, err := cc.Token(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tokenFileLine(t, iss, ctok.AccessToken), ctok.AccessToken+" "+AppUser+" ") || ctok.RefreshToken != "" {
		t.Errorf("client credentials token %+v", ctok)
	}
	if d := time.Until(ctok.Expiry); d < 20*time.Second || d > 31*time.Second {
		t.Errorf("client credentials token after SetTokenTTL(30s) expires in %v", d)
	}
	cc.ClientSecret = "wrong"
	if _, err := cc.Token(ctx); !isOAuthError(err, "invalid_client") {
		t.Errorf("wrong secret: %v", err)
	}

	da, err = cfg.DeviceAuth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := iss.Deny(da.UserCode); err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.DeviceAccessToken(ctx, da); !isOAuthError(err, "access_denied") {
		t.Errorf("denied: %v", err)
	}
	if err := iss.Approve("NOPE-NOPE"); err == nil {
		t.Error("Approve of an unknown user code: no error")
	}

	if err := iss.Revoke(refreshed.RefreshToken); err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: tok.RefreshToken}).Token(); !isOAuthError(err, "invalid_grant") {
		t.Errorf("revoked refresh token: %v", err)
	}
	c := iss.Counts()
	if c.DeviceAuthorizations != 2 || c.Tokens["refresh_token"] != 2 || c.Tokens["client_credentials"] != 2 || c.Issued != 3 {
		t.Errorf("counts %+v", c)
	}
}

func isOAuthError(err error, code string) bool {
	var re *oauth2.RetrieveError
	return errors.As(err, &re) && re.ErrorCode == code
}

// TestOAuthIssuerAutoApproveAndClose: AutoApprove answers the first poll with tokens; Mint and
// Revoke edit the token file; Close removes it.
func TestOAuthIssuerAutoApproveAndClose(t *testing.T) {
	ctx := testCtx(t)
	iss, err := StartOAuthIssuer(OAuthIssuerOptions{AutoApprove: true, Identity: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	defer iss.Close()
	ctx = context.WithValue(ctx, oauth2.HTTPClient, iss.Client())
	cfg := &oauth2.Config{ClientID: "pgconnector", Endpoint: oauth2.Endpoint{
		DeviceAuthURL: iss.URL + "/device", TokenURL: iss.URL + "/token", AuthStyle: oauth2.AuthStyleInParams}}
	da, err := cfg.DeviceAuth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := cfg.DeviceAccessToken(ctx, da)
	if err != nil {
		t.Fatal(err)
	}
	if n := iss.Counts().Tokens[GrantDeviceCode]; n != 1 || !strings.HasPrefix(tokenFileLine(t, iss, tok.AccessToken), tok.AccessToken+" bob ") {
		t.Errorf("%d polls, token file line %q", n, tokenFileLine(t, iss, tok.AccessToken))
	}
	cc := clientcredentials.Config{ClientID: "pgconnector", ClientSecret: "x", TokenURL: iss.URL + "/token"}
	if _, err := cc.Token(ctx); !isOAuthError(err, "invalid_client") {
		t.Errorf("client credentials of a public client: %v", err)
	}

	m, err := iss.Mint("carol", 0)
	if err != nil {
		t.Fatal(err)
	}
	if l := tokenFileLine(t, iss, m); l != m+" carol 0" {
		t.Errorf("minted line %q", l)
	}
	// The validator counts in whole seconds: a lifetime is rounded up, never cut short.
	before := time.Now()
	short, err := iss.Mint("dave", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(tokenFileLine(t, iss, short))
	if len(fields) != 3 {
		t.Fatalf("a one-second token's line %v", fields)
	}
	if exp, err := strconv.ParseInt(fields[2], 10, 64); err != nil || time.Unix(exp, 0).Before(before.Add(time.Second)) {
		t.Errorf("a one-second token's line %v: expiry before %v", fields, before.Add(time.Second))
	}
	if err := iss.Revoke(m); err != nil || tokenFileLine(t, iss, m) != "" {
		t.Errorf("after Revoke: %v, line %q", err, tokenFileLine(t, iss, m))
	}
	if _, err := iss.Mint("a\nb", time.Hour); err == nil {
		t.Error("Mint of an identity with a line break: no error")
	}

	if err := iss.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(iss.TokenFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("token file after Close: %v", err)
	}
	if _, err := iss.Client().Get(iss.DiscoveryURL); err == nil {
		t.Error("the issuer answers after Close")
	}
}
