package gss

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	_ "unsafe" // go:linkname

	"github.com/jackc/pgx/v5/pgconn"
)

// GSS authentication (pg_hba method gss on a connection that is not GSS-encrypted) goes through
// pgx's process-global provider (pgconn.RegisterGSSProvider), which is given no context, only
// Config.KerberosSpn or Config.Host and KerberosSrvName. So that each connector authenticates
// with its own credentials, a connector puts a token into KerberosSpn ([Client.AuthToken]):
// "pgconnector-gss:<secret>:<host>", where the secret is 128 random bits of that Client's,
// known to nobody else. The provider installed here gives the connector's credentials to a
// token whose secret is exactly that of a registered Client; a token that matches none (forged,
// or of a closed connector) is an ordinary SPN.
//
// The provider is chained: when it is installed, the provider registered before (by the
// application, say) is kept, and every ordinary SPN and every GetInitToken call (a connection
// without KerberosSpn) go to it; without one, to the environment's default credentials. pgx
// keeps one provider and has no getter, so the one registered before is read from pgconn's
// unexported variable (pgxNewGSS below). Each Register (each pgconnector.New) checks that ours
// is still the one installed and, if the application has registered another since, installs
// ours again, chained to that one. Between the application's registration and the next
// Register, connectors' tokens reach the application's provider, which cannot use them: GSS
// authentication of those connectors fails until then.
//
// pgx reads its provider without synchronisation, so installing ours (a Register that finds it
// missing) while another goroutine authenticates a pgx connection with GSS is a data race in
// pgx's terms, as any RegisterGSSProvider after start-up is.

const tokenPrefix = "pgconnector-gss:"

// pgxNewGSS is pgconn's newGSS, the provider pgconn.RegisterGSSProvider sets; read here, never
// written. Checked against pgx v5.13.0 with Go 1.26. A go:linkname to a variable that pgconn
// no longer defines does NOT fail the build: the linker then makes this declaration a variable
// of its own, always nil. So the first Register checks, after installing our provider, that
// pgxNewGSS shows it; if not (a pgx this was not written for), ours stays installed without a
// chain, as a plain RegisterGSSProvider would be, and is never installed again.
// TestPgxProviderLinkname fails on such a pgx.
//
//go:linkname pgxNewGSS github.com/jackc/pgx/v5/pgconn.newGSS
var pgxNewGSS pgconn.NewGSSFunc

var (
	providerMu  sync.Mutex // installs the provider; guards linkBroken
	linkBroken  bool       // pgxNewGSS does not show pgx's provider
	tokens      sync.Map   // a registered Client's secret (string) -> *Client
	defaultOnce sync.Once
	defaultCl   *Client
)

// provider is the provider installed in pgx: next is the one registered before it, or nil.
type provider struct {
	next pgconn.NewGSSFunc
}

func (p *provider) newGSS() (pgconn.GSS, error) { return &authContext{next: p.next}, nil }

// providerCode is the code pointer of every (*provider).newGSS method value: how a provider
// read from pgx is recognised as ours, whatever its next.
var providerCode = reflect.ValueOf((&provider{}).newGSS).Pointer()

func isOurs(f pgconn.NewGSSFunc) bool {
	return f != nil && reflect.ValueOf(f).Pointer() == providerCode
}

// Register makes c the credentials of the GSS authentication of connections whose KerberosSpn
// is c.AuthToken(host), and installs this package's provider in pgx, chained to the one
// registered before, unless it is installed already. Call it once per Client; unregister with
// the returned function, after which c's tokens are ordinary SPNs.
func (c *Client) Register() (unregister func()) {
	providerMu.Lock()
	if c.authSecret == "" {
		var b [16]byte
		rand.Read(b[:]) // never fails (crypto/rand)
		c.authSecret = hex.EncodeToString(b[:])
	}
	secret := c.authSecret
	installProvider()
	providerMu.Unlock()
	tokens.Store(secret, c)
	return func() { tokens.CompareAndDelete(secret, c) }
}

// installProvider installs ours in pgx, chained to the provider there, unless that is ours.
// Under providerMu.
func installProvider() {
	if linkBroken {
		return // installed once; whether it still is cannot be seen
	}
	cur := pgxNewGSS
	if isOurs(cur) {
		return
	}
	pgconn.RegisterGSSProvider((&provider{next: cur}).newGSS)
	if !isOurs(pgxNewGSS) {
		linkBroken = true // see pgxNewGSS
	}
}

// AuthToken is the value for pgconn.Config.KerberosSpn that makes pgx authenticate to host
// with c's credentials and service principal. c must be registered. The token holds c's
// secret: it is for pgx's Config, not for logs.
func (c *Client) AuthToken(host string) string {
	if t := c.lastToken.Load(); t != nil && t.host == host {
		return t.token // most connectors connect to one host: no string built per connect
	}
	t := &hostToken{host: host, token: tokenPrefix + c.authSecret + ":" + host}
	c.lastToken.Store(t)
	return t.token
}

// hostToken is the AuthToken of one host.
type hostToken struct{ host, token string }

// AuthTokenContext is AuthToken for one connection attempt whose context is ctx: the KDC
// exchange of its GSS authentication (pg_hba method gss, which pgx runs with no context) then
// ends with ctx. ctx must end (be canceled or expire): the token's entry goes with it.
//
// A Client whose last check found no credentials gets the plain AuthToken, at no cost on the
// connect path: its authentication fails without a KDC exchange (unless a kinit came since, and
// then gokrb5's own timeouts bound it).
func (c *Client) AuthTokenContext(ctx context.Context, host string) string {
	if c.noCreds.Load() {
		return c.AuthToken(host)
	}
	n := strconv.FormatUint(c.attemptSeq.Add(1), 36)
	c.attempts.Store(n, ctx)
	context.AfterFunc(ctx, func() { c.attempts.Delete(n) })
	return tokenPrefix + c.authSecret + ":~" + n + ":" + host
}

// lookupToken returns the registered Client whose token spn is, the host in it, and the
// attempt's context (context.Background() for a token of AuthToken, or of an attempt that
// ended).
func lookupToken(spn string) (*Client, string, context.Context, bool) {
	rest, ok := strings.CutPrefix(spn, tokenPrefix)
	if !ok {
		return nil, "", nil, false
	}
	secret, host, ok := strings.Cut(rest, ":")
	if !ok {
		return nil, "", nil, false
	}
	v, ok := tokens.Load(secret)
	if !ok {
		return nil, "", nil, false
	}
	c := v.(*Client)
	ctx := context.Background()
	if n, h, ok := strings.Cut(host, ":"); ok && strings.HasPrefix(n, "~") {
		host = h
		if a, ok := c.attempts.Load(n[1:]); ok {
			ctx = a.(context.Context)
		}
	}
	return c, host, ctx, true
}

// authContext is pgx's pgconn.GSS: one authentication exchange, ours or, for an ordinary SPN,
// that of the provider registered before ours.
type authContext struct {
	next  pgconn.NewGSSFunc // the provider registered before ours, or nil
	other pgconn.GSS        // next's context, when this exchange is next's
	init  *Initiator        // ours
}

func (a *authContext) GetInitToken(host, service string) ([]byte, error) {
	if a.next != nil {
		g, err := a.nextGSS()
		if err != nil {
			return nil, err
		}
		return g.GetInitToken(host, service)
	}
	return a.start(context.Background(), defaultClient(), service+"/"+host)
}

func (a *authContext) GetInitTokenFromSPN(spn string) ([]byte, error) {
	if c, host, ctx, ok := lookupToken(spn); ok {
		return a.start(ctx, c, c.SPN(host))
	}
	if a.next != nil {
		g, err := a.nextGSS()
		if err != nil {
			return nil, err
		}
		return g.GetInitTokenFromSPN(spn)
	}
	if strings.HasPrefix(spn, tokenPrefix) {
		// Not shown: it may hold the secret of a connector closed meanwhile.
		return nil, errors.New("gss: krbspn is a pgconnector token of no open connector of this process")
	}
	return a.start(context.Background(), defaultClient(), spn)
}

// nextGSS starts an exchange with the provider registered before ours.
func (a *authContext) nextGSS() (pgconn.GSS, error) {
	g, err := a.next()
	if err != nil {
		return nil, err
	}
	if g == nil {
		return nil, errors.New("gss: the GSS provider registered before pgconnector's returned none")
	}
	a.other = g
	return g, nil
}

// start begins our exchange; ctx bounds its KDC exchange (context.Background(): gokrb5's own
// timeouts, shared with other callers, see Client.ticket).
func (a *authContext) start(ctx context.Context, c *Client, spn string) ([]byte, error) {
	cur := c.cur.Load()
	if cur == nil || cur.creds == nil {
		if _, err := c.Credentials(ctx); err != nil {
			return nil, err
		}
		cur = c.cur.Load()
		if cur.creds == nil {
			return nil, errors.New("gss: the server asked for GSSAPI authentication but no Kerberos credentials are available")
		}
	}
	t, err := c.ticket(ctx, cur, spn)
	if err != nil {
		return nil, err
	}
	var deleg *delegation
	if c.cfg.Delegate {
		d, _, err := c.delegation(ctx, cur)
		if err != nil {
			return nil, err
		}
		deleg = &d
	}
	init, err := newInitiatorWithTicket(cur.creds.Client(), spn, t.tkt, t.key, deleg)
	if err != nil {
		return nil, err
	}
	a.init = init
	out, _, err := init.Step(nil)
	return out, err
}

// Continue takes the server's next token: for ours, the AP-REP, which it verifies (mutual
// authentication).
func (a *authContext) Continue(in []byte) (done bool, out []byte, err error) {
	if a.other != nil {
		return a.other.Continue(in)
	}
	if a.init == nil {
		return false, nil, errors.New("gss: Continue before the first token")
	}
	out, done, err = a.init.Step(in)
	return done, out, err
}

func defaultClient() *Client {
	defaultOnce.Do(func() { defaultCl = NewClient(ClientConfig{}) })
	return defaultCl
}
