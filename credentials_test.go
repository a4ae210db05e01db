package pgconnector

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/pgconnector/pgconnector/internal/oauthdevice"
	"github.com/pgconnector/pgconnector/internal/tokencache"
	"github.com/pgconnector/pgconnector/negotiation"
)

func TestCredentialsNoneWithoutOptions(t *testing.T) {
	if c := newCredentials(&options{}, "", ""); c != nil {
		t.Fatal("credentials without any option")
	}
	if c := newCredentials(&options{oauthDevicePrompt: func(context.Context, *oauth2.DeviceAuthResponse) error { return nil }}, "", ""); c != nil {
		t.Fatal("a device prompt without oauth_client_id made credentials")
	}
}

func TestCredentialsPasswordFunc(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	var got []PasswordRequest
	var mu sync.Mutex
	o := &options{passwordFunc: func(ctx context.Context, r PasswordRequest) (string, time.Time, error) {
		n := calls.Add(1)
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
		if n == 1 {
			<-release
		}
		return "iam-token-" + string(rune('0'+n)), time.Now().Add(15 * time.Minute), nil
	}}
	c := newCredentials(o, "", "")
	if !c.Has(negotiation.CredentialPassword) || c.Has(negotiation.CredentialOAuthToken) {
		t.Fatal("Has")
	}
	req := func(db string) *negotiation.CredentialRequest {
		return &negotiation.CredentialRequest{Kind: negotiation.CredentialPassword, Host: "db.example", Port: 5432, User: "app", Database: db}
	}
	// A herd of 8: one call.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			cr, err := c.Get(context.Background(), req("app"))
			// Fetched for those that waited for the call, cached for any that came after it.
			if err != nil || cr.Secret != "iam-token-1" || (cr.Source != negotiation.CredentialFetched && cr.Source != negotiation.CredentialCached) {
				t.Errorf("herd Get = %+v, %v", cr.Source, err)
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d calls for a herd of 8", n)
	}
	if got[0] != (PasswordRequest{Host: "db.example", Port: 5432, User: "app", Database: "app"}) {
		t.Fatalf("request %+v", got[0])
	}
	cr, err := c.Get(context.Background(), req("app"))
	if err != nil || cr.Source != negotiation.CredentialCached || cr.Secret != "iam-token-1" || cr.Expiry.IsZero() {
		t.Fatalf("second Get = %v %v", cr.Source, err)
	}
	// Another database: its own call.
	if cr, _ := c.Get(context.Background(), req("other")); cr.Secret != "iam-token-2" {
		t.Fatal("the password of another database was shared")
	}
	// Refused: only the refused secret of that request is dropped, and fetched anew.
	c.Refused(req("other"), cr)
	if cr2, _ := c.Get(context.Background(), req("app")); cr2.Secret != "iam-token-1" || cr2.Source != negotiation.CredentialCached {
		t.Fatal("Refused of another database's password dropped this one")
	}
	c.Refused(req("app"), negotiation.Credential{Secret: "iam-token-1"})
	if cr, _ := c.Get(context.Background(), req("app")); cr.Secret != "iam-token-3" || cr.Source != negotiation.CredentialFetched {
		t.Fatalf("after a refusal: %v", cr.Source)
	}
}

func TestCredentialsErrors(t *testing.T) {
	errIAM := errors.New("iam: throttled")
	for _, tc := range []struct {
		name string
		o    options
		kind negotiation.CredentialKind
		want string
		is   error
	}{
		{"password func error", options{passwordFunc: func(context.Context, PasswordRequest) (string, time.Time, error) {
			return "", time.Time{}, errIAM
		}}, negotiation.CredentialPassword, "WithPasswordFunc: iam: throttled", errIAM},
		{"empty password", options{passwordFunc: func(context.Context, PasswordRequest) (string, time.Time, error) {
			return "", time.Time{}, nil
		}}, negotiation.CredentialPassword, "WithPasswordFunc: the function returned an empty password", nil},
		{"token func error", options{oauthTokenFunc: func(context.Context, OAuthRequest) (*oauth2.Token, error) {
			return nil, errIAM
		}}, negotiation.CredentialOAuthToken, "WithOAuthTokenFunc: iam: throttled", errIAM},
		{"nil token", options{oauthTokenFunc: func(context.Context, OAuthRequest) (*oauth2.Token, error) {
			return nil, nil
		}}, negotiation.CredentialOAuthToken, "WithOAuthTokenFunc: no access token", nil},
		{"not bearer", options{oauthTokenFunc: func(context.Context, OAuthRequest) (*oauth2.Token, error) {
			return &oauth2.Token{AccessToken: "sekrit-mac", TokenType: "MAC"}, nil
		}}, negotiation.CredentialOAuthToken, `WithOAuthTokenFunc: token type "MAC" is not Bearer (SASL OAUTHBEARER takes bearer tokens only)`, nil},
		{"no token function", options{passwordFunc: func(context.Context, PasswordRequest) (string, time.Time, error) {
			return "x", time.Time{}, nil
		}}, negotiation.CredentialOAuthToken, "no oauth_token function configured", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCredentials(&tc.o, "", "")
			_, err := c.Get(context.Background(), &negotiation.CredentialRequest{Kind: tc.kind, Host: "h", Port: 5432, User: "u"})
			if err == nil || err.Error() != tc.want {
				t.Fatalf("err = %v, want %s", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatal("errors.Is does not find the function's error")
			}
			if strings.Contains(err.Error(), "sekrit") {
				t.Fatal("the token in the error")
			}
		})
	}
}

func TestCredentialsOAuthTokenFunc(t *testing.T) {
	var calls atomic.Int32
	var last OAuthRequest
	exp := time.Now().Add(time.Hour).Round(0)
	o := &options{oauthTokenFunc: func(ctx context.Context, r OAuthRequest) (*oauth2.Token, error) {
		calls.Add(1)
		last = r
		return &oauth2.Token{AccessToken: "tok-" + r.Scope, TokenType: "bearer", Expiry: exp}, nil
	}}
	c := newCredentials(o, "client-1", "")
	req := func(host, scope string) *negotiation.CredentialRequest {
		return &negotiation.CredentialRequest{Kind: negotiation.CredentialOAuthToken, Host: host, Port: 5432, User: "u", Database: "d",
			Issuer: "https://issuer.example", DiscoveryURI: "https://issuer.example/.well-known/openid-configuration", Scope: scope}
	}
	cr, err := c.Get(context.Background(), req("a", "openid db"))
	if err != nil || cr.Secret != "tok-openid db" || !cr.Expiry.Equal(exp) || cr.Source != negotiation.CredentialFetched {
		t.Fatalf("Get = %+v, %v", cr.Source, err)
	}
	want := OAuthRequest{Host: "a", Port: 5432, User: "u", Database: "d", Issuer: "https://issuer.example",
		DiscoveryURI: "https://issuer.example/.well-known/openid-configuration", Scope: "openid db", ClientID: "client-1"}
	if last != want {
		t.Fatalf("request %+v", last)
	}
	// Another host of the same issuer and scope: the same token.
	if cr, _ := c.Get(context.Background(), req("b", "openid db")); cr.Source != negotiation.CredentialCached {
		t.Fatal("a token was not shared between the hosts of one issuer")
	}
	// Another scope: its own.
	if cr, _ := c.Get(context.Background(), req("a", "other")); cr.Secret != "tok-other" || calls.Load() != 2 {
		t.Fatal("a token was shared between scopes")
	}
}

// deviceIssuer is a local HTTPS issuer that approves device codes at once, issuing access
// tokens at1, at2, ... valid for an hour, with a refresh token when refreshTokens is set; issued
// counts its tokens.
func deviceIssuer(t *testing.T, refreshTokens bool) (*httptest.Server, *atomic.Int32) {
	var srv *httptest.Server
	issued := new(atomic.Int32)
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]string{"issuer": srv.URL, "token_endpoint": srv.URL + "/token", "device_authorization_endpoint": srv.URL + "/device"})
	})
	mux.HandleFunc("/device", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]any{"device_code": "dc", "user_code": "UC", "verification_uri": srv.URL + "/go", "expires_in": 60, "interval": 1})
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		n := issued.Add(1)
		tok := map[string]any{"access_token": "at" + string(rune('0'+n)), "token_type": "Bearer", "expires_in": 3600}
		if refreshTokens {
			tok["refresh_token"] = "rt"
		}
		reply(w, tok)
	})
	srv = httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	return srv, issued
}

// TestCredentialsDeviceFlow: the human is prompted once; after the server refuses the token,
// the next comes from a refresh without a prompt.
func TestCredentialsDeviceFlow(t *testing.T) {
	srv, _ := deviceIssuer(t, true)
	var prompts atomic.Int32
	o := &options{oauthHTTPClient: srv.Client(), oauthDevicePrompt: func(context.Context, *oauth2.DeviceAuthResponse) error {
		prompts.Add(1)
		return nil
	}}
	c := newCredentials(o, "client", "")
	if !c.Has(negotiation.CredentialOAuthToken) {
		t.Fatal("no device flow with oauth_client_id")
	}
	req := &negotiation.CredentialRequest{Kind: negotiation.CredentialOAuthToken, Host: "h", Port: 5432,
		Issuer: srv.URL, DiscoveryURI: srv.URL + "/.well-known/openid-configuration", Scope: "openid"}
	cr, err := c.Get(context.Background(), req)
	if err != nil || cr.Source != negotiation.CredentialDevicePrompt || cr.Secret != "at1" {
		t.Fatalf("first Get = %v, %v", cr.Source, err)
	}
	if cr, _ := c.Get(context.Background(), req); cr.Source != negotiation.CredentialCached {
		t.Fatalf("second Get: %v", cr.Source)
	}
	c.Refused(req, cr)
	cr, err = c.Get(context.Background(), req)
	if err != nil || cr.Source != negotiation.CredentialFetched || cr.Secret != "at2" || prompts.Load() != 1 {
		t.Fatalf("after a refusal: %v, %v, %d prompts", cr.Source, err, prompts.Load())
	}
}

// TestCredentialsDeviceRefreshNeverPrompts: a refresh ahead of expiry in the background uses
// the kept refresh token alone; with none (the issuer gave none) it fails without asking a
// human, and the cached token stays until it expires.
func TestCredentialsDeviceRefreshNeverPrompts(t *testing.T) {
	srv, issued := deviceIssuer(t, false)
	var prompts atomic.Int32
	o := &options{oauthHTTPClient: srv.Client(), oauthDevicePrompt: func(context.Context, *oauth2.DeviceAuthResponse) error {
		prompts.Add(1)
		return nil
	}}
	c := newCredentials(o, "client", "")
	var mu sync.Mutex
	now := time.Now()
	c.cache = tokencache.New(tokencache.Config{Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	done := make(chan error, 1)
	req := &negotiation.CredentialRequest{Kind: negotiation.CredentialOAuthToken, Host: "h", Port: 5432,
		Issuer: srv.URL, DiscoveryURI: srv.URL + "/.well-known/openid-configuration", Scope: "openid",
		Background: func(do func(ctx context.Context) error) bool {
			go func() { done <- do(context.Background()) }()
			return true
		}}
	if cr, err := c.Get(context.Background(), req); err != nil || cr.Source != negotiation.CredentialDevicePrompt {
		t.Fatalf("first Get = %v, %v", cr.Source, err)
	}
	mu.Lock()
	now = now.Add(55 * time.Minute) // the last fifth of the token's hour
	mu.Unlock()
	if cr, err := c.Get(context.Background(), req); err != nil || cr.Source != negotiation.CredentialCached || cr.Secret != "at1" {
		t.Fatalf("Get in the last fifth = %v, %v", cr.Source, err)
	}
	if err := <-done; !errors.Is(err, oauthdevice.ErrNoRefreshToken) {
		t.Fatalf("the background refresh: %v, want ErrNoRefreshToken", err)
	}
	if prompts.Load() != 1 || issued.Load() != 1 {
		t.Fatalf("%d prompts, %d tokens issued; want 1 and 1 (no flow in the background)", prompts.Load(), issued.Load())
	}
}

// TestCredentialsTokenSourceLine: the line WithOAuthTokenFunc's doc gives for an
// oauth2.TokenSource works as written.
func TestCredentialsTokenSourceLine(t *testing.T) {
	ts := oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "static", TokenType: "Bearer"})
	var o options
	WithOAuthTokenFunc(func(context.Context, OAuthRequest) (*oauth2.Token, error) { return ts.Token() })(&o)
	c := newCredentials(&o, "", "")
	cr, err := c.Get(context.Background(), &negotiation.CredentialRequest{Kind: negotiation.CredentialOAuthToken, Issuer: "https://i.example"})
	if err != nil || cr.Secret != "static" || !cr.Expiry.IsZero() {
		t.Fatalf("Get = %v, %v", cr.Source, err)
	}
}

// TestCredentialsRefreshInBackground: a connect that finds the password in the last fifth of
// its life gets it from the cache at once, and starts one call of the function through
// CredentialRequest.Background; the next connects get the new password.
func TestCredentialsRefreshInBackground(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	var calls atomic.Int32
	o := &options{passwordFunc: func(ctx context.Context, r PasswordRequest) (string, time.Time, error) {
		n := calls.Add(1)
		return "pw" + string(rune('0'+n)), clock().Add(15 * time.Minute), nil
	}}
	c := newCredentials(o, "", "")
	c.cache = tokencache.New(tokencache.Config{Now: clock})
	var started atomic.Int32
	done := make(chan error, 4)
	req := &negotiation.CredentialRequest{Kind: negotiation.CredentialPassword, Host: "h", Port: 5432, User: "u",
		Background: func(do func(ctx context.Context) error) bool {
			started.Add(1)
			go func() { done <- do(context.Background()) }()
			return true
		}}
	if cr, _ := c.Get(context.Background(), req); cr.Secret != "pw1" {
		t.Fatal(cr.Source)
	}
	mu.Lock()
	now = now.Add(13 * time.Minute) // the last fifth of 15 min less the margin
	mu.Unlock()
	cr, err := c.Get(context.Background(), req)
	if err != nil || cr.Secret != "pw1" || cr.Source != negotiation.CredentialCached {
		t.Fatalf("Get in the last fifth = %v, %v", cr.Source, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if cr, _ := c.Get(context.Background(), req); cr.Secret != "pw2" || cr.Source != negotiation.CredentialCached {
		t.Fatalf("after the refresh: %v", cr.Source)
	}
	if started.Load() != 1 || calls.Load() != 2 {
		t.Fatalf("%d refreshes, %d calls; want 1, 2", started.Load(), calls.Load())
	}
}
