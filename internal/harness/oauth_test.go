package harness

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// pgxOAuth connects with pgx's OAuthTokenProvider (token first, no discovery) and returns the
// session's system_user ("oauth:IDENTITY"), and the backends the connect cost.
func pgxOAuth(t *testing.T, ctx context.Context, p *Postgres, dsn, token string) (systemUser string, backends int, err error) {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Password = ""
	cfg.OAuthTokenProvider = func(context.Context) (string, error) { return token, nil }
	mark := p.LogMark()
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err == nil {
		var res []*pgconn.Result
		res, err = conn.Exec(ctx, "SELECT system_user").ReadAll()
		if err == nil {
			systemUser = string(res[0].Rows[0][0])
		}
		_ = conn.Close(ctx)
	}
	backends, cerr := p.ConnectionsSince(mark)
	if cerr != nil {
		t.Fatal(cerr)
	}
	return systemUser, backends, err
}

// oauthDSN is a connection string for role user over TCP without TLS (unless extra says
// otherwise: a later key wins), without password.
func oauthDSN(p *Postgres, user string, extra ...string) string {
	parts := []string{"host=127.0.0.1", "port=" + strconv.Itoa(p.Port), "user=" + user, "dbname=" + p.Database, "sslmode=disable"}
	return strings.Join(append(parts, extra...), " ")
}

func mint(t *testing.T, i *OAuthIssuer, identity string, ttl time.Duration) string {
	t.Helper()
	tok, err := i.Mint(identity, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestOAuthValidator: the validator module authorizes a token of the token file for its
// identity (minted, or from the issuer's token endpoint), over TCP, TLS and the unix socket, with one backend per pgx connect, and refuses a
// revoked, expired, unknown or other identity's token (delegate_ident_mapping=1).
func TestOAuthValidator(t *testing.T) {
	ctx := testCtx(t)
	iss := StartOAuthIssuerT(t, OAuthIssuerOptions{ClientSecret: "s3cret"})
	o := iss.OAuth()
	o.DelegateIdentMapping = true
	o.Types = []string{"host", "local"}
	p := StartT(t, Options{Major: 18, TLS: true, OAuth: o})

	good := mint(t, iss, AppUser, time.Hour)
	for name, dsn := range map[string]string{
		"tcp":    oauthDSN(p, AppUser, "sslmode=disable"),
		"tls":    oauthDSN(p, AppUser, "sslmode=verify-full", "sslrootcert="+p.CAFile),
		"socket": "host=" + p.SocketDir + " port=" + strconv.Itoa(p.Port) + " user=" + AppUser + " dbname=" + p.Database,
	} {
		su, n, err := pgxOAuth(t, ctx, p, dsn, good)
		if err != nil || su != "oauth:"+AppUser || n != 1 {
			t.Errorf("%s: system_user %q, %d backends, %v; want oauth:%s, 1, nil", name, su, n, err, AppUser)
		}
	}

	// A token from the issuer's token endpoint works as a minted one.
	cc := clientcredentials.Config{ClientID: "pgconnector", ClientSecret: "s3cret", TokenURL: iss.URL + "/token"}
	issued, err := cc.Token(context.WithValue(ctx, oauth2.HTTPClient, iss.Client()))
	if err != nil {
		t.Fatal(err)
	}
	if su, _, err := pgxOAuth(t, ctx, p, oauthDSN(p, AppUser), issued.AccessToken); err != nil || su != "oauth:"+AppUser {
		t.Errorf("client credentials token: system_user %q, %v", su, err)
	}

	revoked := mint(t, iss, AppUser, time.Hour)
	if _, _, err := pgxOAuth(t, ctx, p, oauthDSN(p, AppUser), revoked); err != nil {
		t.Fatalf("before Revoke: %v", err)
	}
	if err := iss.Revoke(revoked); err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{
		"revoked":        revoked,
		"expired":        mint(t, iss, AppUser, -time.Minute),
		"unknown":        randomToken(),
		"other identity": mint(t, iss, "alice", time.Hour),
	} {
		su, n, err := pgxOAuth(t, ctx, p, oauthDSN(p, AppUser), tok)
		if err == nil || !strings.Contains(err.Error(), "invalid_token") || n != 1 {
			t.Errorf("%s token: system_user %q, %d backends, error %v; want refused after 1 backend", name, su, n, err)
		}
	}
	// The module is built once per process: the next cluster loads the same file.
	oauthValidatorMu.Lock()
	built := oauthValidatorDir
	oauthValidatorMu.Unlock()
	if again, err := oauthValidatorModule(ctx); err != nil || again != built {
		t.Errorf("module directory %q, then %q (%v); want the same", built, again, err)
	}
	if _, err := os.Stat(filepath.Join(built, oauthValidatorName+".so")); err != nil {
		t.Error(err)
	}
}

// TestOAuthIdentMapping: without delegate_ident_mapping the validator's identity is the authn_id
// and the server's mapping applies: a pg_ident map, or else identity = role.
func TestOAuthIdentMapping(t *testing.T) {
	ctx := testCtx(t)
	iss := StartOAuthIssuerT(t, OAuthIssuerOptions{})
	o := iss.OAuth()
	o.Map = "oauthmap"
	o.Ident = []string{"oauthmap alice@example.com " + AppUser}
	p := StartT(t, Options{Major: 18, OAuth: o})
	dsn := oauthDSN(p, AppUser)

	alice, bob, app := mint(t, iss, "alice@example.com", time.Hour), mint(t, iss, "bob", time.Hour), mint(t, iss, AppUser, time.Hour)
	if su, _, err := pgxOAuth(t, ctx, p, dsn, alice); err != nil || su != "oauth:alice@example.com" {
		t.Errorf("mapped identity: system_user %q, %v", su, err)
	}
	for name, tok := range map[string]string{"unmapped": bob, "role name, not in the map": app} {
		if _, _, err := pgxOAuth(t, ctx, p, dsn, tok); err == nil {
			t.Errorf("%s identity: connected, want refused", name)
		}
	}

	o.Map = ""
	if err := p.SetHBA(o.HBALine("host")); err != nil {
		t.Fatal(err)
	}
	if su, _, err := pgxOAuth(t, ctx, p, dsn, app); err != nil || su != "oauth:"+AppUser {
		t.Errorf("identity = role without a map: system_user %q, %v", su, err)
	}
	if _, _, err := pgxOAuth(t, ctx, p, dsn, alice); err == nil {
		t.Error("identity != role without a map: connected, want refused")
	}
}

// TestOAuthOptionsChecked: OAuth on another major than 18, and options that cannot make a valid
// hba line or issuer, are refused with an error that names the problem.
func TestOAuthOptionsChecked(t *testing.T) {
	o := &OAuthOptions{Issuer: "https://127.0.0.1:1", Scope: "openid", TokenFile: "/nonexistent"}
	_, err := Start(context.Background(), Options{Major: 17, OAuth: o})
	if err == nil || !strings.Contains(err.Error(), "needs PostgreSQL 18") {
		t.Errorf("Major 17: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(*OAuthOptions)
		tls  bool
		want string
	}{
		{"http issuer", func(o *OAuthOptions) { o.Issuer = "http://127.0.0.1:1" }, false, "https"},
		{"no scope", func(o *OAuthOptions) { o.Scope = "" }, false, "scope= is required"},
		{"relative token file", func(o *OAuthOptions) { o.TokenFile = "tokens" }, false, "absolute"},
		{"quote in scope", func(o *OAuthOptions) { o.Scope = `a"b` }, false, "double quote"},
		{"map and delegation", func(o *OAuthOptions) { o.Map, o.DelegateIdentMapping = "m", true }, false, "Map and DelegateIdentMapping"},
		{"unknown type", func(o *OAuthOptions) { o.Types = []string{"hostgssenc"} }, true, `"hostgssenc"`},
		{"hostssl without TLS", func(o *OAuthOptions) { o.Types = []string{"hostssl"} }, false, "Options.TLS"},
	} {
		bad := *o
		c.edit(&bad)
		if err := bad.check(18, c.tls); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error with %q", c.name, err, c.want)
		}
	}
	if err := o.check(18, false); err != nil {
		t.Errorf("valid options: %v", err)
	}
	for _, path := range []string{"realm", "/realm/", "/{x}", "/a b"} {
		if _, err := StartOAuthIssuer(OAuthIssuerOptions{Path: path}); err == nil || !strings.Contains(err.Error(), "Path") {
			t.Errorf("issuer Path %q: %v", path, err)
		}
	}
}
