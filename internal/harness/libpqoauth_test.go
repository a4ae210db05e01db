package harness

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLibpqOAuthOracle: libpq 18 with a token hook against a server with an oauth line
// reproduces what ../shared/notes/oauth.md measured: two backends per connect when oauth_issuer
// is the issuer (discovery, then the reconnect with the token), one when it is the discovery
// URI, one hook call per connect; an issuer that does not match the server's refused before any
// hook call; a refused token after the retry; no oauth_client_id refused by libpq once the server asks
// for OAuth (one backend). The server's oauth line is hostssl.
func TestLibpqOAuthOracle(t *testing.T) {
	ctx := testCtx(t)
	iss := StartOAuthIssuerT(t, OAuthIssuerOptions{})
	o := iss.OAuth()
	o.DelegateIdentMapping = true
	o.Types = []string{"hostssl"}
	p := StartT(t, Options{Major: 18, TLS: true, OAuth: o})
	good := mint(t, iss, AppUser, time.Hour)
	base := "host=127.0.0.1 port=" + strconv.Itoa(p.Port) + " user=" + AppUser + " dbname=" + p.Database +
		" sslmode=verify-full sslrootcert=" + p.CAFile
	withID := base + " oauth_client_id=pgconnector"
	const n = 3

	for _, c := range []struct {
		name      string
		conninfo  string
		token     string
		ok        bool
		backends  int    // per connect
		hookCalls int    // per connect
		message   string // in PQerrorMessage when not ok
	}{
		{"oauth_issuer is the issuer", withID + " oauth_issuer=" + iss.URL, good, true, 2, 1, ""},
		{"oauth_issuer is the discovery URI", withID + " oauth_issuer=" + iss.DiscoveryURL, good, true, 1, 1, ""},
		{"oauth_issuer names another issuer", withID + " oauth_issuer=https://127.0.0.1:1/other", good, false, 1, 0,
			`is incompatible with oauth_issuer (https://127.0.0.1:1/other)`},
		{"token refused", withID + " oauth_issuer=" + iss.URL, randomToken(), false, 2, 1,
			`OAuth bearer authentication failed for user "app"`},
		{"no oauth_client_id", base + " oauth_issuer=" + iss.URL, good, false, 1, 0,
			"oauth_issuer and oauth_client_id are not both set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			mark := p.LogMark()
			res, err := LibpqOAuthConnect(ctx, c.conninfo, c.token, n)
			if err != nil {
				t.Fatal(err)
			}
			backends, err := p.ConnectionsSince(mark)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Connects) != n || res.OK() != c.ok || backends != n*c.backends || res.HookCalls != n*c.hookCalls {
				t.Errorf("%+v, %d backends; want ok %v, %d backends, %d hook calls", res, backends, c.ok, n*c.backends, n*c.hookCalls)
			}
			for k, a := range res.Connects {
				if !strings.Contains(a.Err, c.message) || a.HookCalls != c.hookCalls {
					t.Errorf("connect %d: %+v; want a message with %q, %d hook calls", k, a, c.message, c.hookCalls)
				}
			}
			if res.Elapsed <= 0 {
				t.Errorf("Elapsed %v", res.Elapsed)
			}
		})
	}

	// A hostssl line: no entry for a connection without TLS.
	res, err := LibpqOAuthConnect(ctx, strings.Replace(withID, "sslmode=verify-full", "sslmode=disable", 1)+" oauth_issuer="+iss.URL, good, 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.OK() || !strings.Contains(res.Connects[0].Err, "no pg_hba.conf entry") || res.HookCalls != 0 {
		t.Errorf("sslmode=disable against a hostssl oauth line: %+v", res)
	}
}
