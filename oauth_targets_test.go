package pgconnector_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/oauth2"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/tracing"
)

// oauthIdentity is the identity of the issuer's tokens in TestOAuthTargetsLive: not a role, so
// that the server's pg_ident map (delegate_ident_mapping off) has to map it to AppUser.
const oauthIdentity = "app@issuer.example"

// oauthClientSecret is the issuer's client secret in TestOAuthTargetsLive (public clients, which
// present none, are served too).
const oauthClientSecret = "cs-Sekrit-0451"

// oauthTargetsServer starts an issuer and a PostgreSQL 18 server with TLS whose only TCP line
// is a hostssl oauth line without delegate_ident_mapping: the validator sets the token's
// identity as authn_id and the map "oauthmap" of pg_ident.conf maps it to AppUser.
func oauthTargetsServer(t *testing.T) (*harness.OAuthIssuer, *harness.Postgres) {
	t.Helper()
	iss := harness.StartOAuthIssuerT(t, harness.OAuthIssuerOptions{Identity: oauthIdentity, ClientSecret: oauthClientSecret})
	o := iss.OAuth()
	o.Types = []string{"hostssl"}
	o.Map = "oauthmap"
	o.Ident = []string{"oauthmap " + oauthIdentity + " " + harness.AppUser}
	return iss, harness.StartT(t, harness.Options{Major: 18, TLS: true, OAuth: o})
}

// oauthDSN is the verify-full connection string of p for AppUser with oauth_issuer iss.URL.
func oauthDSN(p *harness.Postgres, iss *harness.OAuthIssuer) string {
	return "host=127.0.0.1 port=" + strconv.Itoa(p.Port) + " user=" + harness.AppUser + " dbname=" + p.Database +
		" sslmode=verify-full sslrootcert=" + p.CAFile + " oauth_issuer=" + iss.URL
}

// backendsOf runs f and returns the backends the server started meanwhile.
func backendsOf(t *testing.T, p *harness.Postgres, f func()) int {
	t.Helper()
	mark := p.LogMark()
	f()
	n, err := p.ConnectionsSince(mark)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// pgxWithProvider is pgx's configuration of dsn with an OAuthTokenProvider that returns tok and
// counts its calls in calls.
func pgxWithProvider(t *testing.T, dsn, tok string, calls *atomic.Int32) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.OAuthTokenProvider = func(context.Context) (string, error) {
		calls.Add(1)
		return tok, nil
	}
	return cfg
}

// closedConnector is newConnector closed with the test.
func closedConnector(t *testing.T, dsn string, opts ...pgconnector.Option) *pgconnector.Connector {
	t.Helper()
	c := newConnector(t, dsn, opts...)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestOAuthTargetsLive: the targets on PostgreSQL 18 over verify-full TLS, with a hostssl
// oauth line whose identity the server maps through pg_ident.conf (delegate_ident_mapping off),
// beside libpq 18 (its token hook) and pgx's OAuthTokenProvider: after the first connect one
// backend per connect (libpq: two, pgx: one but a provider call per connection); a cold herd of
// 8 calls the token func once (pgx's provider: 8 times) and asks the server its issuer once; the device flow prompts once per
// connector and renews an expired token with its refresh token; require_auth and
// channel_binding as libpq words them; no secret in a span, log record or error.
func TestOAuthTargetsLive(t *testing.T) {
	iss, p := oauthTargetsServer(t)
	var calls atomic.Int32
	tokenFunc := pgconnector.WithOAuthTokenFunc(func(ctx context.Context, r pgconnector.OAuthRequest) (*oauth2.Token, error) {
		calls.Add(1)
		time.Sleep(20 * time.Millisecond) // a network call: the herd comes in meanwhile
		tok, err := iss.Mint(oauthIdentity, time.Hour)
		return &oauth2.Token{AccessToken: tok, Expiry: time.Now().Add(time.Hour)}, err
	})
	dsn := oauthDSN(p, iss)
	pgxDSN := strings.Replace(dsn, " oauth_issuer="+iss.URL, "", 1) // pgx knows no oauth_* keys
	const n = 5

	t.Run("backends per connect: 1.0 after the first; libpq 2.0; pgx 1.0 with a provider call each", func(t *testing.T) {
		calls.Store(0)
		db := openNoIdle(t, dsn, tokenFunc)
		var su string
		if first := backendsOf(t, p, func() {
			if err := db.QueryRow("SELECT system_user").Scan(&su); err != nil {
				t.Fatal(err)
			}
		}); first != 2 || su != "oauth:"+oauthIdentity {
			t.Errorf("first connect: %d backends, system_user %q; want 2 (discovery, token), oauth:%s", first, su, oauthIdentity)
		}
		ours := backendsOf(t, p, func() {
			for range n {
				if err := db.Ping(); err != nil {
					t.Fatal(err)
				}
			}
		})
		if ours != n || calls.Load() != 1 {
			t.Errorf("%d backends for %d connects, %d token func calls; want %d (1.0 per connect), 1", ours, n, calls.Load(), n)
		}

		tok, err := iss.Mint(oauthIdentity, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		var res harness.LibpqOAuthResult
		libpq := backendsOf(t, p, func() {
			res, err = harness.LibpqOAuthConnect(context.Background(), dsn+" oauth_client_id=pgconnector", tok, n)
		})
		if err != nil || !res.OK() || libpq != 2*n || res.HookCalls != n {
			t.Errorf("libpq 18: %d backends for %d connects, %d hook calls, %+v, %v; want %d (2.0 per connect), %d", libpq, n, res.HookCalls, res.Connects, err, 2*n, n)
		}

		var provider atomic.Int32
		cfg := pgxWithProvider(t, pgxDSN, tok, &provider)
		pgxBackends := backendsOf(t, p, func() {
			for range n {
				conn, err := pgx.ConnectConfig(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				conn.Close(context.Background())
			}
		})
		if pgxBackends != n || provider.Load() != n {
			t.Errorf("pgx: %d backends, %d provider calls for %d connects; want %d, %d", pgxBackends, provider.Load(), n, n, n)
		}

		// The connector's pgx side with pgx's own provider: token first, the provider per connect.
		c, err := pgconnector.New(dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		provider.Store(0)
		viaConnector := backendsOf(t, p, func() {
			for range n {
				pc := c.PgxConfig()
				pc.OAuthTokenProvider = cfg.OAuthTokenProvider
				conn, err := c.ConnectPgx(context.Background(), pc)
				if err != nil {
					t.Fatal(err)
				}
				conn.Close(context.Background())
			}
		})
		if viaConnector != n || provider.Load() != n {
			t.Errorf("ConnectPgx with OAuthTokenProvider: %d backends, %d provider calls for %d connects; want %d, %d", viaConnector, provider.Load(), n, n, n)
		}
	})

	t.Run("a cold herd of 8: one token func call, one discovery; pgx's provider 8", func(t *testing.T) {
		// The transport is learned first (a connect as another user, whose token the server's
		// map refuses), so that the herd's connects reach authentication together.
		var warmed atomic.Bool
		c := closedConnector(t, dsn, tokenFunc, pgconnector.WithBeforeConnect(func(ctx context.Context, cfg *pgx.ConnConfig) error {
			if !warmed.Load() {
				cfg.User = "postgres"
			}
			return nil
		}))
		if conn, err := c.Connect(context.Background()); err == nil {
			conn.Close()
			t.Fatal("a connect as postgres with app's token got in")
		}
		warmed.Store(true)
		calls.Store(0)
		var errs []error
		backends := backendsOf(t, p, func() { errs = herd(t, 8, c.Connect) })
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		if calls.Load() != 1 {
			t.Errorf("%d token func calls for a herd of 8; want 1", calls.Load())
		}
		// One connection asks the server its issuer; the others wait for its answer and send
		// the token in their first message (libpq: 16 backends for 8 connections).
		if backends != 9 {
			t.Errorf("%d backends for a cold herd of 8; want 9 (one discovery, then one each)", backends)
		}
		tok, err := iss.Mint(oauthIdentity, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		var provider atomic.Int32
		cfg := pgxWithProvider(t, pgxDSN, tok, &provider)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				conn, err := pgx.ConnectConfig(context.Background(), cfg)
				if err != nil {
					t.Error(err)
					return
				}
				conn.Close(context.Background())
			})
		}
		wg.Wait()
		if provider.Load() != 8 {
			t.Errorf("pgx's provider: %d calls for a herd of 8; want 8 (one per connection)", provider.Load())
		}
	})

	t.Run("device flow: one prompt per connector, a refresh without a prompt", func(t *testing.T) {
		device := func(prompts *atomic.Int32) (*pgconnector.Connector, *sql.DB) {
			c := newConnector(t, dsn+" oauth_client_id=pgconnector",
				pgconnector.WithOAuthHTTPClient(iss.Client()),
				pgconnector.WithOAuthDevicePrompt(func(ctx context.Context, d *oauth2.DeviceAuthResponse) error {
					prompts.Add(1)
					return iss.Approve(d.UserCode)
				}))
			db := sql.OpenDB(c)
			t.Cleanup(func() { db.Close() })
			db.SetMaxIdleConns(0)
			return c, db
		}
		// Tokens that live 12 s keep 2 s in the cache (tokencache.Margin is 10 s).
		if err := iss.SetTokenTTL(12 * time.Second); err != nil {
			t.Fatal(err)
		}
		defer iss.SetTokenTTL(time.Hour)
		var prompts atomic.Int32
		c, db := device(&prompts)
		before := iss.Counts()
		if errs := herd(t, 4, c.Connect); len(errs) > 0 {
			t.Fatal(errs)
		}
		for range 3 {
			if err := db.Ping(); err != nil {
				t.Fatal(err)
			}
		}
		if prompts.Load() != 1 {
			t.Errorf("%d prompts for a pool of 4 and 3 connects; want 1", prompts.Load())
		}
		time.Sleep(2500 * time.Millisecond) // past the access token's expiry less the margin
		if err := db.Ping(); err != nil {
			t.Fatal(err)
		}
		after := iss.Counts()
		if prompts.Load() != 1 || after.Tokens["refresh_token"] == before.Tokens["refresh_token"] || after.DeviceAuthorizations-before.DeviceAuthorizations != 1 {
			t.Errorf("after the token expired: %d prompts, %d refresh grants, %d device authorizations; want 1, at least 1, 1",
				prompts.Load(), after.Tokens["refresh_token"]-before.Tokens["refresh_token"], after.DeviceAuthorizations-before.DeviceAuthorizations)
		}
		var again atomic.Int32
		if _, db2 := device(&again); db2.Ping() != nil || again.Load() != 1 {
			t.Errorf("a second connector: %d prompts; want 1 (one per connector)", again.Load())
		}
	})

	t.Run("require_auth and channel_binding as libpq", func(t *testing.T) {
		tok, err := iss.Mint(oauthIdentity, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ extra, libpqSays string }{
			{"require_auth=oauth", ""},
			{"require_auth=scram-sha-256", `authentication method requirement "scram-sha-256" failed: server requested OAUTHBEARER authentication`},
			{"channel_binding=require", "channel binding is required, but server did not offer an authentication method that supports channel binding"},
		} {
			res, err := harness.LibpqOAuthConnect(context.Background(), dsn+" oauth_client_id=pgconnector "+tc.extra, tok, 1)
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Connects[0].Err; (tc.libpqSays == "") != (got == "") || !strings.Contains(got, tc.libpqSays) {
				t.Fatalf("%s: libpq 18 says %q, want %q", tc.extra, got, tc.libpqSays)
			}
			calls.Store(0)
			err = openNoIdle(t, dsn+" "+tc.extra, tokenFunc).Ping()
			switch {
			case tc.libpqSays == "" && err != nil:
				t.Errorf("%s: %v", tc.extra, err)
			case tc.libpqSays != "" && (err == nil || !strings.Contains(err.Error(), tc.libpqSays) || calls.Load() != 0):
				t.Errorf("%s: %v, %d token calls; want libpq's %q, none", tc.extra, err, calls.Load(), tc.libpqSays)
			}
		}
	})

	t.Run("no secret in spans, logs or errors", func(t *testing.T) {
		oauthNoSecretsSeen(t, iss, p, dsn)
	})
}

// oauthNoSecretsSeen runs OAuth connects of every kind against p (discovery and its retry, a
// cached token, a revoked token replaced on a second backend with one call, the device flow
// with a client secret and its refresh token after a refusal, refused connects) with a
// recording tracer provider and a logger at Debug, then looks for every token, refresh token, device code, user code and the client secret
// in every span name, attribute, event, status, log record and error: none may hold one. The
// credential spans (kind, source) and the oauth_discovery and credential_retry events are
// under the connect spans.
func oauthNoSecretsSeen(t *testing.T, iss *harness.OAuthIssuer, p *harness.Postgres, dsn string) {
	rec, tp := newRecorder()
	logger, logs := newLogger(slog.LevelDebug)
	var mu sync.Mutex
	secrets := []string{oauthClientSecret}
	keep := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		secrets = append(secrets, s)
	}
	var errs []string
	connects := func(db *sql.DB, n int) {
		t.Helper()
		for range n {
			if err := db.Ping(); err != nil {
				t.Fatal(err)
			}
		}
	}
	var last atomic.Value
	var calls atomic.Int32
	tokenFunc := pgconnector.WithOAuthTokenFunc(func(ctx context.Context, r pgconnector.OAuthRequest) (*oauth2.Token, error) {
		calls.Add(1)
		tok, err := iss.Mint(oauthIdentity, time.Hour)
		keep(tok)
		last.Store(tok)
		return &oauth2.Token{AccessToken: tok, Expiry: time.Now().Add(time.Hour)}, err
	})
	seen := []pgconnector.Option{pgconnector.WithTracerProvider(tp), pgconnector.WithLogger(logger)}
	db := openNoIdle(t, dsn, append(seen, tokenFunc)...)
	connects(db, 2) // discovery, its retry; cached
	if err := iss.Revoke(last.Load().(string)); err != nil {
		t.Fatal(err)
	}
	calls.Store(0)
	if n := backendsOf(t, p, func() { connects(db, 1) }); n != 2 || calls.Load() != 1 {
		t.Errorf("a revoked token: %d backends, %d token func calls; want 2 (refused, then a fresh token), 1", n, calls.Load())
	}

	hc := iss.Client()
	tr := &tokenRecorder{next: hc.Transport}
	hc.Transport = tr
	var prompts atomic.Int32
	device := openNoIdle(t, dsn+" oauth_client_id=pgconnector oauth_client_secret="+oauthClientSecret, append(seen,
		pgconnector.WithOAuthHTTPClient(hc),
		pgconnector.WithOAuthDevicePrompt(func(ctx context.Context, d *oauth2.DeviceAuthResponse) error {
			prompts.Add(1)
			keep(d.DeviceCode)
			keep(d.UserCode)
			return iss.Approve(d.UserCode)
		}))...)
	connects(device, 2)
	for _, tok := range tr.accessTokens() { // refused, renewed with the refresh token
		if err := iss.Revoke(tok); err != nil {
			t.Fatal(err)
		}
	}
	refreshed := iss.Counts().Tokens["refresh_token"]
	connects(device, 1)
	if prompts.Load() != 1 || iss.Counts().Tokens["refresh_token"] != refreshed+1 {
		t.Errorf("device flow: %d prompts, %d refresh grants after the access token was revoked; want 1, 1",
			prompts.Load(), iss.Counts().Tokens["refresh_token"]-refreshed)
	}

	failing := openNoIdle(t, dsn+" oauth_client_id=pgconnector oauth_client_secret=wrong-"+oauthClientSecret, append(seen,
		pgconnector.WithOAuthHTTPClient(iss.Client()))...)
	for _, db := range []*sql.DB{failing, openNoIdle(t, dsn+" require_auth=scram-sha-256", append(seen, tokenFunc)...)} {
		err := db.Ping()
		if err == nil {
			t.Fatal("a connect that must fail succeeded")
		}
		errs = append(errs, err.Error())
	}
	secrets = append(secrets, tr.secrets()...)
	secrets = append(secrets, "wrong-"+oauthClientSecret)
	if len(tr.secrets()) < 4 { // device code, access token, refresh token; the refreshed access token
		t.Fatalf("the issuer's answers held %d secrets; want at least 4", len(tr.secrets()))
	}

	noSecretSeen(t, rec, logs, errs, secrets)
	spans := rec.Ended()
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	underConnect := func(s sdktrace.ReadOnlySpan) bool {
		for s != nil {
			if s.Name() == tracing.SpanConnect {
				return true
			}
			s = byID[s.Parent().SpanID()]
		}
		return false
	}
	sources := map[string]bool{}
	events := map[string]bool{}
	for _, s := range spans {
		if s.Name() == tracing.SpanCredential && underConnect(s) {
			kind, source := "", ""
			for _, kv := range s.Attributes() {
				switch kv.Key {
				case tracing.CredentialKindKey:
					kind = kv.Value.Emit()
				case tracing.CredentialSourceKey:
					source = kv.Value.Emit()
				}
			}
			if kind == "oauth_token" {
				sources[source] = true
			}
		}
		for _, e := range s.Events() {
			if underConnect(s) {
				events[e.Name] = true
			}
		}
	}
	if !sources["fetched"] || !sources["cached"] || !sources["device_prompt"] {
		t.Errorf("credential spans of kind oauth_token under a connect span with the sources %v; want fetched, cached, device_prompt", sources)
	}
	if !events[tracing.EventOAuthDiscovery] || !events[tracing.EventCredentialRetry] {
		t.Errorf("events under the connect spans %v; want %s and %s", events, tracing.EventOAuthDiscovery, tracing.EventCredentialRetry)
	}
}

// noSecretSeen fails the test when a span's name, attribute, event or status, a log record of
// logs or one of errs holds one of secrets.
func noSecretSeen(t *testing.T, rec *tracetest.SpanRecorder, logs *logBuffer, errs, secrets []string) {
	t.Helper()
	texts := append([]string{logs.String()}, errs...)
	for _, s := range rec.Ended() {
		texts = append(texts, spanTexts(s)...)
	}
	for _, text := range texts {
		for _, secret := range secrets {
			if secret != "" && strings.Contains(text, secret) {
				t.Fatalf("a secret of %d bytes in %q", len(secret), text)
			}
		}
	}
}

// tokenRecorder is an http.RoundTripper that keeps the access tokens, refresh tokens and device
// codes of the issuer's answers, to look for them where they must not be.
type tokenRecorder struct {
	next   http.RoundTripper
	mu     sync.Mutex
	seen   []string
	access []string // the access tokens among seen
}

func (r *tokenRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	var doc map[string]any
	if json.Unmarshal(body, &doc) == nil {
		r.mu.Lock()
		for _, k := range []string{"access_token", "refresh_token", "device_code"} {
			if s, ok := doc[k].(string); ok && s != "" {
				r.seen = append(r.seen, s)
				if k == "access_token" {
					r.access = append(r.access, s)
				}
			}
		}
		r.mu.Unlock()
	}
	return resp, nil
}

func (r *tokenRecorder) secrets() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

func (r *tokenRecorder) accessTokens() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.access...)
}
