package gss

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// appGSS is a GSS provider as an application registers one: it records the calls it gets and
// fails them (nothing here needs it to succeed).
type appGSS struct {
	name  string
	mu    sync.Mutex
	calls []string
}

func (p *appGSS) newGSS() (pgconn.GSS, error) { return (*appContext)(p), nil }

func (p *appGSS) record(s string) {
	p.mu.Lock()
	p.calls = append(p.calls, s)
	p.mu.Unlock()
}

func (p *appGSS) took() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.calls
	p.calls = nil
	return c
}

type appContext appGSS

func (a *appContext) GetInitToken(host, service string) ([]byte, error) {
	(*appGSS)(a).record("GetInitToken " + host + " " + service)
	return nil, errors.New(a.name + " was called")
}

func (a *appContext) GetInitTokenFromSPN(spn string) ([]byte, error) {
	(*appGSS)(a).record("GetInitTokenFromSPN " + spn)
	return nil, errors.New(a.name + " was called")
}

func (a *appContext) Continue([]byte) (bool, []byte, error) {
	return false, nil, errors.New("no exchange")
}

// pgxGSS starts an exchange with the provider pgx would use now.
func pgxGSS(t *testing.T) pgconn.GSS {
	t.Helper()
	if pgxNewGSS == nil {
		t.Fatal("pgx has no GSS provider")
	}
	g, err := pgxNewGSS()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// resetProvider leaves pgx without a provider when the test ends: the next Register installs
// ours, chained to none.
func resetProvider(t *testing.T) {
	t.Cleanup(func() { pgconn.RegisterGSSProvider(nil) })
}

// The go:linkname sees what pgconn.RegisterGSSProvider sets (pgx v5.13.0): what installProvider
// checks at the first Register (else the provider is installed unchained, linkBroken).
func TestPgxProviderLinkname(t *testing.T) {
	resetProvider(t)
	app := &appGSS{name: "app"}
	pgconn.RegisterGSSProvider(app.newGSS)
	if pgxNewGSS == nil {
		t.Fatal("pgxNewGSS does not see the registered provider: is pgconn.newGSS still pgx's variable?")
	}
	if _, err := pgxGSS(t).GetInitTokenFromSPN("postgres/x"); err == nil || app.took()[0] != "GetInitTokenFromSPN postgres/x" {
		t.Fatal("pgxNewGSS is not the provider registered")
	}
	if isOurs(pgxNewGSS) {
		t.Error("the application's provider is taken for ours")
	}
	NewClient(ClientConfig{}).Register()
	if !isOurs(pgxNewGSS) {
		t.Error("Register did not install ours")
	}
	pgconn.RegisterGSSProvider(nil)
	if pgxNewGSS != nil {
		t.Error("pgxNewGSS does not see the provider removed")
	}
	if linkBroken {
		t.Error("linkBroken is set with a pgx whose provider pgxNewGSS shows")
	}
}

var tokenRE = regexp.MustCompile(`^pgconnector-gss:[0-9a-f]{32}:db\.example\.com$`)

// A token holds 128 random bits of its Client's; only the exact token of a registered Client
// is looked up, anything else (forged, of another Client, of a closed one) is an ordinary SPN.
func TestAuthTokens(t *testing.T) {
	resetProvider(t)
	a, b := NewClient(ClientConfig{}), NewClient(ClientConfig{})
	unregisterA := a.Register()
	defer b.Register()()
	ta, tb := a.AuthToken("db.example.com"), b.AuthToken("db.example.com")
	if !tokenRE.MatchString(ta) || !tokenRE.MatchString(tb) || ta == tb {
		t.Fatalf("tokens %q and %q: want two different pgconnector-gss:<32 hex digits>:db.example.com", ta, tb)
	}
	if a.AuthToken("db.example.com") != ta {
		t.Error("a Client's token changes")
	}
	a.Register() // again: same secret
	if a.AuthToken("db.example.com") != ta {
		t.Error("a second Register changed the token")
	}
	if c, host, _, ok := lookupToken(ta); !ok || c != a || host != "db.example.com" {
		t.Fatalf("lookupToken(a's token) = %p, %q, %t", c, host, ok)
	}
	if c, _, _, ok := lookupToken(tb); !ok || c != b {
		t.Fatal("b's token is not b's")
	}
	secret := strings.Split(ta, ":")[1]
	flipped := []byte(secret)
	if flipped[31] == '0' {
		flipped[31] = '1'
	} else {
		flipped[31] = '0'
	}
	for _, forged := range []string{
		"pgconnector-gss:" + string(flipped) + ":db.example.com",
		"pgconnector-gss:" + strings.Repeat("0", 32) + ":db.example.com",
		"pgconnector-gss:" + strings.ToUpper(secret) + ":db.example.com",
		"pgconnector-gss:" + secret[:31] + ":db.example.com",
		"pgconnector-gss:" + secret + "0:db.example.com",
		"pgconnector-gss:" + secret,
		"pgconnector-gss::db.example.com",
		"pgconnector-gss:1:db.example.com", // the former sequential ids
		"PGCONNECTOR-GSS:" + secret + ":db.example.com",
		"postgres/db.example.com",
	} {
		if c, _, _, ok := lookupToken(forged); ok {
			t.Errorf("lookupToken(%q) found %p", forged, c)
		}
	}
	unregisterA()
	if _, _, _, ok := lookupToken(ta); ok {
		t.Error("the token of an unregistered Client is still looked up")
	}
	if _, _, _, ok := lookupToken(tb); !ok {
		t.Error("unregistering a removed b's token too")
	}
}

// The provider registered before ours gets every ordinary SPN and every GetInitToken call, in
// either order of registration; a forged token is an ordinary SPN; a Client's own token goes to
// that Client.
func TestProviderChaining(t *testing.T) {
	resetProvider(t)
	// A Client without credentials: a token that reaches it fails saying so.
	noCreds := func() *Client {
		return NewClient(ClientConfig{CCache: t.TempDir() + "/none", Krb5Conf: t.TempDir() + "/none"})
	}
	forged := "pgconnector-gss:" + strings.Repeat("0", 32) + ":localhost"
	check := func(t *testing.T, app *appGSS, c *Client) {
		t.Helper()
		if !isOurs(pgxNewGSS) {
			t.Fatal("ours is not installed")
		}
		for _, call := range []struct {
			do   func(pgconn.GSS) error
			want string
		}{
			{func(g pgconn.GSS) error { _, err := g.GetInitTokenFromSPN("postgres/db"); return err }, "GetInitTokenFromSPN postgres/db"},
			{func(g pgconn.GSS) error { _, err := g.GetInitToken("db", "postgres"); return err }, "GetInitToken db postgres"},
			{func(g pgconn.GSS) error { _, err := g.GetInitTokenFromSPN(forged); return err }, "GetInitTokenFromSPN " + forged},
		} {
			g := pgxGSS(t)
			err := call.do(g)
			if got := app.took(); err == nil || !strings.Contains(err.Error(), app.name+" was called") || len(got) != 1 || got[0] != call.want {
				t.Errorf("%s: %v, the application's provider got %q", call.want, err, got)
			}
			if _, _, err := g.Continue([]byte{1}); err == nil || err.Error() != "no exchange" {
				t.Errorf("Continue after %s did not go to the application's provider: %v", call.want, err)
			}
		}
		_, err := pgxGSS(t).GetInitTokenFromSPN(c.AuthToken("localhost"))
		if got := app.took(); len(got) != 0 || err == nil || !strings.Contains(err.Error(), "no Kerberos credentials") {
			t.Errorf("the connector's token: %v, the application's provider got %q; want the Client's own \"no credentials\"", err, got)
		}
	}

	t.Run("application first", func(t *testing.T) {
		app := &appGSS{name: "app1"}
		pgconn.RegisterGSSProvider(app.newGSS)
		c := noCreds()
		defer c.Register()()
		check(t, app, c)
		// Another Register keeps the chain as it is: no loop through ours.
		c2 := noCreds()
		defer c2.Register()()
		check(t, app, c2)
	})
	t.Run("application after a connector", func(t *testing.T) {
		c := noCreds()
		defer c.Register()()
		app := &appGSS{name: "app2"}
		pgconn.RegisterGSSProvider(app.newGSS)
		// Until the next Register, the application's provider has everything, tokens too.
		if _, err := pgxGSS(t).GetInitTokenFromSPN(c.AuthToken("localhost")); err == nil || len(app.took()) != 1 {
			t.Fatal("the application's provider is not pgx's")
		}
		c2 := noCreds()
		defer c2.Register()()
		check(t, app, c)
		check(t, app, c2)
	})
	t.Run("no application provider", func(t *testing.T) {
		pgconn.RegisterGSSProvider(nil)
		c := noCreds()
		defer c.Register()()
		if !isOurs(pgxNewGSS) {
			t.Fatal("ours is not installed")
		}
		_, err := pgxGSS(t).GetInitTokenFromSPN(forged)
		if err == nil || strings.Contains(err.Error(), strings.Repeat("0", 32)) || !strings.Contains(err.Error(), "token of no open connector") {
			t.Errorf("forged token without a chained provider: %v", err)
		}
		if _, err := pgxGSS(t).GetInitTokenFromSPN(c.AuthToken("localhost")); err == nil || !strings.Contains(err.Error(), "no Kerberos credentials") {
			t.Errorf("the connector's token: %v", err)
		}
	})
	t.Run("application provider failing", func(t *testing.T) {
		pgconn.RegisterGSSProvider(func() (pgconn.GSS, error) { return nil, errors.New("app3 cannot start") })
		defer noCreds().Register()()
		if _, err := pgxGSS(t).GetInitTokenFromSPN("postgres/db"); err == nil || err.Error() != "app3 cannot start" {
			t.Errorf("%v, want the application's provider's error", err)
		}
		pgconn.RegisterGSSProvider(func() (pgconn.GSS, error) { return nil, nil })
		defer noCreds().Register()()
		if _, err := pgxGSS(t).GetInitToken("db", "postgres"); err == nil || !strings.Contains(err.Error(), "returned none") {
			t.Errorf("%v, want an error saying the provider returned none", err)
		}
	})
}

// Concurrent Registers and token lookups (run with -race).
func TestRegisterConcurrently(t *testing.T) {
	resetProvider(t)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			c := NewClient(ClientConfig{})
			unregister := c.Register()
			defer unregister()
			tok := c.AuthToken(fmt.Sprintf("h%d", i))
			if got, host, _, ok := lookupToken(tok); !ok || got != c || host != fmt.Sprintf("h%d", i) {
				t.Errorf("lookupToken(%q) = %p, %q, %t", tok, got, host, ok)
			}
		})
	}
	wg.Wait()
	if !isOurs(pgxNewGSS) {
		t.Error("ours is not installed")
	}
}

// A token of AuthTokenContext carries its attempt's context to the KDC exchange, and is gone
// with it.
func TestAuthTokenContext(t *testing.T) {
	resetProvider(t)
	c := NewClient(ClientConfig{})
	defer c.Register()()
	ctx, cancel := context.WithCancel(context.Background())
	tok := c.AuthTokenContext(ctx, "[::1]:db")
	got, host, gotCtx, ok := lookupToken(tok)
	if !ok || got != c || host != "[::1]:db" || gotCtx != ctx {
		t.Fatalf("lookupToken(%q) = %p, %q, %v, %t", tok, got, host, gotCtx, ok)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, _, gotCtx, _ := lookupToken(tok); gotCtx == context.Background() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the attempt's context stays registered after it ended")
		}
		time.Sleep(time.Millisecond)
	}
}
