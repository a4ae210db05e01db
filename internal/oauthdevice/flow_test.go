package oauthdevice

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/oauth2"
)

const (
	clientID     = "pgclient"
	clientSecret = "s3cret-client"
)

// issuer is a local HTTPS issuer with a discovery document, a device authorization endpoint and
// a token endpoint that approves at once and grants refresh tokens.
type issuer struct {
	srv *httptest.Server
	// document, when set, replaces the discovery handler.
	document http.HandlerFunc

	mu           sync.Mutex
	deviceAuths  int
	refreshes    int
	denyRefresh  bool
	failRefresh  bool // 503
	denyDevice   bool
	unauthorized bool
	// what the last device token request carried
	tokenBasicAuth, tokenClientID string
	lastBasicAuth                 string
	lastScope                     string
	lastClientID                  string
	issued                        atomic.Int32
}

func newIssuer(t *testing.T) *issuer {
	is := &issuer{}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		if is.document != nil {
			is.document(w, r)
			return
		}
		writeJSON(w, 200, map[string]any{
			"issuer":                        is.srv.URL,
			"token_endpoint":                is.srv.URL + "/token",
			"device_authorization_endpoint": is.srv.URL + "/device",
			"grant_types_supported":         []string{"urn:ietf:params:oauth:grant-type:device_code", "refresh_token"},
		})
	})
	mux.HandleFunc("/device", func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		is.mu.Lock()
		is.deviceAuths++
		is.lastBasicAuth = r.Header.Get("Authorization")
		is.lastScope = r.Form.Get("scope")
		is.lastClientID = r.Form.Get("client_id")
		is.mu.Unlock()
		writeJSON(w, 200, map[string]any{
			"device_code": "dev-code", "user_code": "ABCD-EFGH", "verification_uri": is.srv.URL + "/activate",
			"expires_in": 300, "interval": 1,
		})
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		is.mu.Lock()
		defer is.mu.Unlock()
		switch r.Form.Get("grant_type") {
		case "refresh_token":
			is.refreshes++
			if is.failRefresh {
				writeJSON(w, 503, map[string]any{"error": "temporarily_unavailable"})
				return
			}
			if is.denyRefresh || !strings.HasPrefix(r.Form.Get("refresh_token"), "refresh-") {
				writeJSON(w, 400, map[string]any{"error": "invalid_grant"})
				return
			}
		case "urn:ietf:params:oauth:grant-type:device_code":
			is.tokenBasicAuth = r.Header.Get("Authorization")
			is.tokenClientID = r.Form.Get("client_id")
			if is.unauthorized {
				writeJSON(w, 401, map[string]any{"error": "invalid_client"})
				return
			}
			if is.denyDevice {
				writeJSON(w, 400, map[string]any{"error": "access_denied", "error_description": "the user said no"})
				return
			}
		default:
			writeJSON(w, 400, map[string]any{"error": "unsupported_grant_type"})
			return
		}
		n := is.issued.Add(1)
		writeJSON(w, 200, map[string]any{
			"access_token": fmt.Sprintf("access-%d", n), "token_type": "Bearer", "expires_in": 3600,
			"refresh_token": fmt.Sprintf("refresh-%d", n),
		})
	})
	is.srv = httptest.NewTLSServer(mux)
	t.Cleanup(is.srv.Close)
	return is
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (is *issuer) request() Request {
	return Request{Issuer: is.srv.URL, DiscoveryURI: is.srv.URL + "/.well-known/openid-configuration", Scope: "openid db"}
}

func TestDeviceFlowPromptsOnceThenRefreshes(t *testing.T) {
	is := newIssuer(t)
	var prompts []string
	f := New(Config{ClientID: clientID, ClientSecret: clientSecret, HTTPClient: is.srv.Client(),
		Prompt: func(ctx context.Context, d *oauth2.DeviceAuthResponse) error {
			prompts = append(prompts, d.VerificationURI+" "+d.UserCode)
			return nil
		}})
	ctx := context.Background()
	tok, prompted, err := f.Token(ctx, is.request())
	if err != nil || !prompted || tok.AccessToken != "access-1" {
		t.Fatalf("first Token = %v, prompted %v, %v", tok, prompted, err)
	}
	if len(prompts) != 1 || prompts[0] != is.srv.URL+"/activate ABCD-EFGH" {
		t.Fatalf("prompts %q", prompts)
	}
	if !strings.HasPrefix(is.lastBasicAuth, "Basic ") || is.lastScope != "openid db" || is.lastClientID != "" {
		t.Fatalf("device authorization request: Authorization %q, scope %q, client_id %q", is.lastBasicAuth, is.lastScope, is.lastClientID)
	}
	if is.tokenBasicAuth != is.lastBasicAuth || is.tokenClientID != "" {
		t.Fatalf("token request: Authorization %q, client_id %q", is.tokenBasicAuth, is.tokenClientID)
	}
	for i := 2; i <= 3; i++ {
		tok, prompted, err = f.Token(ctx, is.request())
		if err != nil || prompted || tok.AccessToken != fmt.Sprintf("access-%d", i) {
			t.Fatalf("Token %d = %v, prompted %v, %v; want a refresh", i, tok, prompted, err)
		}
	}
	if len(prompts) != 1 || is.deviceAuths != 1 || is.refreshes != 2 {
		t.Fatalf("%d prompts, %d device authorizations, %d refreshes; want 1, 1, 2", len(prompts), is.deviceAuths, is.refreshes)
	}

	// A refused refresh token: the human is asked again.
	is.mu.Lock()
	is.denyRefresh = true
	is.mu.Unlock()
	tok, prompted, err = f.Token(ctx, is.request())
	if err != nil || !prompted || tok.AccessToken != "access-4" || len(prompts) != 2 {
		t.Fatalf("after a refused refresh: %v, prompted %v, %v, %d prompts", tok, prompted, err, len(prompts))
	}
}

// Refresh never asks a human: without a kept refresh token it fails with ErrNoRefreshToken; an
// issuer not reached keeps the refresh token (and Token then asks no human either), one that
// refuses it drops it.
func TestRefreshWithoutHuman(t *testing.T) {
	is := newIssuer(t)
	prompts := 0
	f := New(Config{ClientID: clientID, HTTPClient: is.srv.Client(),
		Prompt: func(context.Context, *oauth2.DeviceAuthResponse) error { prompts++; return nil }})
	ctx := context.Background()
	if _, err := f.Refresh(ctx, is.request()); !errors.Is(err, ErrNoRefreshToken) || prompts != 0 {
		t.Fatalf("Refresh before any grant: %v, %d prompts; want ErrNoRefreshToken, none", err, prompts)
	}
	if _, _, err := f.Token(ctx, is.request()); err != nil || prompts != 1 {
		t.Fatalf("Token: %v, %d prompts", err, prompts)
	}
	if tok, err := f.Refresh(ctx, is.request()); err != nil || tok.AccessToken != "access-2" {
		t.Fatalf("Refresh = %v, %v; want access-2", tok, err)
	}

	// The issuer not reached: an error, no human, the refresh token kept.
	down := New(Config{ClientID: clientID, HTTPClient: &http.Client{Transport: failingTransport{}}})
	down.grants = f.grants
	if _, err := down.Refresh(ctx, is.request()); err == nil || errors.Is(err, ErrNoRefreshToken) {
		t.Fatalf("Refresh with the issuer down: %v", err)
	}
	if _, _, err := down.Token(ctx, is.request()); err == nil || !strings.Contains(err.Error(), "failed to refresh the access token") {
		t.Fatalf("Token with the issuer down: %v; want the refresh's error, no flow", err)
	}
	if tok, err := f.Refresh(ctx, is.request()); err != nil || tok.AccessToken != "access-3" || prompts != 1 {
		t.Fatalf("Refresh after the issuer was down = %v, %v, %d prompts; want access-3 from the kept refresh token", tok, err, prompts)
	}

	// The issuer failing (5xx): an error, no human, the refresh token kept.
	is.mu.Lock()
	is.failRefresh = true
	is.mu.Unlock()
	if _, _, err := f.Token(ctx, is.request()); err == nil || prompts != 1 {
		t.Fatalf("Token with the issuer answering 503: %v, %d prompts; want an error and no prompt", err, prompts)
	}
	is.mu.Lock()
	is.failRefresh = false
	is.mu.Unlock()
	if tok, err := f.Refresh(ctx, is.request()); err != nil || tok.AccessToken != "access-4" {
		t.Fatalf("Refresh after a 503 = %v, %v; want access-4 from the kept refresh token", tok, err)
	}

	// The issuer refuses it: dropped.
	is.mu.Lock()
	is.denyRefresh = true
	is.mu.Unlock()
	if _, err := f.Refresh(ctx, is.request()); err == nil || errors.Is(err, ErrNoRefreshToken) || !strings.Contains(err.Error(), "invalid_grant") {
		t.Fatalf("a refused refresh: %v", err)
	}
	if _, err := f.Refresh(ctx, is.request()); !errors.Is(err, ErrNoRefreshToken) || prompts != 1 {
		t.Fatalf("after a refused refresh: %v, %d prompts; want ErrNoRefreshToken", err, prompts)
	}
}

// failingTransport reaches no issuer.
type failingTransport struct{}

func (failingTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("connection refused")
}

func TestDefaultPrompt(t *testing.T) {
	is := newIssuer(t)
	var stderr bytes.Buffer
	f := New(Config{ClientID: clientID, HTTPClient: is.srv.Client(), Stderr: &stderr})
	if _, _, err := f.Token(context.Background(), is.request()); err != nil {
		t.Fatal(err)
	}
	want := "Visit " + is.srv.URL + "/activate and enter the code: ABCD-EFGH\n"
	if stderr.String() != want {
		t.Fatalf("prompt %q, want libpq's %q", stderr.String(), want)
	}
	if is.lastBasicAuth != "" || is.lastClientID != clientID {
		t.Fatalf("without a client secret: Authorization %q, client_id %q", is.lastBasicAuth, is.lastClientID)
	}
}

func TestDeviceFlowErrors(t *testing.T) {
	is := newIssuer(t)
	is.denyDevice = true
	f := New(Config{ClientID: clientID, ClientSecret: clientSecret, HTTPClient: is.srv.Client(),
		Prompt: func(context.Context, *oauth2.DeviceAuthResponse) error { return nil }})
	_, _, err := f.Token(context.Background(), is.request())
	if err == nil || err.Error() != "failed to obtain access token: the user said no (access_denied)" {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), clientSecret) || strings.Contains(err.Error(), "dev-code") {
		t.Fatal("a secret in the error")
	}
	if got := clip(strings.Repeat("é", 200)); len(got) > maxErrorText+3 || !strings.HasSuffix(got, "é...") {
		t.Fatalf("clip: %d bytes, %q", len(got), got[len(got)-8:])
	}
}

// TestTokenUnauthorized: a 401 without a description says what libpq says of the client secret.
func TestTokenUnauthorized(t *testing.T) {
	is := newIssuer(t)
	is.unauthorized = true
	for secret, want := range map[string]string{
		"":           "failed to obtain access token: provider requires client authentication, and no oauth_client_secret is set (invalid_client)",
		clientSecret: "failed to obtain access token: provider rejected the oauth_client_secret (invalid_client)",
	} {
		f := New(Config{ClientID: clientID, ClientSecret: secret, HTTPClient: is.srv.Client(),
			Prompt: func(context.Context, *oauth2.DeviceAuthResponse) error { return nil }})
		if _, _, err := f.Token(context.Background(), is.request()); err == nil || err.Error() != want {
			t.Errorf("secret %q: err = %v\nwant %s", secret, err, want)
		}
	}
}

func TestDiscoveryChecks(t *testing.T) {
	is := newIssuer(t)
	doc := func(status int, ct, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", ct)
			w.WriteHeader(status)
			w.Write([]byte(body))
		}
	}
	url := is.srv.URL
	good := func(issuer, token, device string) string {
		return fmt.Sprintf(`{"issuer":%q,"token_endpoint":%q,"device_authorization_endpoint":%q}`, issuer, token, device)
	}
	for _, c := range []struct {
		name    string
		handler http.HandlerFunc
		req     func(Request) Request
		want    string
	}{
		{"issuer differs", doc(200, "application/json", good("https://other.example", url+"/token", url+"/device")), nil,
			"the issuer identifier (https://other.example) does not match oauth_issuer (" + url + ")"},
		{"no device endpoint", doc(200, "application/json", fmt.Sprintf(`{"issuer":%q,"token_endpoint":%q}`, url, url+"/token")), nil,
			fmt.Sprintf("issuer %q does not provide a device authorization endpoint", url)},
		{"http device endpoint", doc(200, "application/json", good(url, url+"/token", "http://127.0.0.1/device")), nil,
			`device authorization endpoint "http://127.0.0.1/device" must use HTTPS`},
		{"http token endpoint", doc(200, "application/json", good(url, "http://127.0.0.1/token", url+"/device")), nil,
			`token endpoint "http://127.0.0.1/token" must use HTTPS`},
		{"missing issuer", doc(200, "application/json", `{"token_endpoint":"x"}`), nil,
			`failed to parse OpenID discovery document: field "issuer" is missing`},
		{"issuer a number", doc(200, "application/json", `{"issuer":1,"token_endpoint":"x"}`), nil,
			`failed to parse OpenID discovery document: field "issuer" must be a string`},
		{"content type", doc(200, "text/html", good(url, url+"/token", url+"/device")), nil,
			`failed to parse OpenID discovery document: unexpected content type: "text/html"`},
		{"status", doc(404, "application/json", `{}`), nil,
			"failed to fetch OpenID discovery document: unexpected response code 404"},
		{"redirect not followed", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://elsewhere.example/doc", http.StatusFound)
		}, nil, "failed to fetch OpenID discovery document: unexpected response code 302"},
		{"too large", doc(200, "application/json", `{"issuer":"`+strings.Repeat("a", maxDocument)+`"}`), nil,
			"failed to parse OpenID discovery document: response is larger than 262144 bytes"},
		{"too deep", doc(200, "application/json", `{"issuer":"x","a":`+strings.Repeat("[", 20)+strings.Repeat("]", 20)+`}`), nil,
			"failed to parse OpenID discovery document: JSON is too deeply nested"},
		{"duplicated issuer", doc(200, "application/json", `{"issuer":"https://evil.example",`+good(url, url+"/token", url+"/device")[1:]), nil,
			`failed to parse OpenID discovery document: field "issuer" is duplicated`},
		{"an array", doc(200, "application/json", `[`+good(url, url+"/token", url+"/device")+`]`), nil,
			`failed to parse OpenID discovery document: top-level element must be an object`},
		{"issuer's text masked and clipped", doc(200, "application/json", `{"issuer":"https://x\u001b[31m`+strings.Repeat("y", 300)+`","token_endpoint":"`+url+`/token"}`), nil,
			"the issuer identifier (https://x?[31m" + strings.Repeat("y", maxErrorText-len("https://x?[31m")) + "...) does not match oauth_issuer (" + url + ")"},
		{"not UTF-8", doc(200, "application/json", "{\"issuer\":\"\xff\"}"), nil,
			"failed to parse OpenID discovery document: response is not valid UTF-8"},
		{"http discovery URI", nil, func(r Request) Request { r.DiscoveryURI = "http://127.0.0.1/x"; return r },
			`discovery URI "http://127.0.0.1/x" must use HTTPS`},
	} {
		t.Run(c.name, func(t *testing.T) {
			is.document = c.handler
			r := is.request()
			if c.req != nil {
				r = c.req(r)
			}
			f := New(Config{ClientID: clientID, HTTPClient: is.srv.Client(),
				Prompt: func(context.Context, *oauth2.DeviceAuthResponse) error { t.Fatal("prompted"); return nil }})
			_, _, err := f.Token(context.Background(), r)
			if err == nil || err.Error() != c.want {
				t.Fatalf("err = %v\nwant %s", err, c.want)
			}
		})
	}
}

func TestCanceledWhileWaitingForHuman(t *testing.T) {
	is := newIssuer(t)
	ctx, cancel := context.WithCancel(context.Background())
	f := New(Config{ClientID: clientID, HTTPClient: is.srv.Client(),
		Prompt: func(context.Context, *oauth2.DeviceAuthResponse) error { cancel(); return nil }})
	if _, _, err := f.Token(ctx, is.request()); err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("err = %v", err)
	}
}
