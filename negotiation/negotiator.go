package negotiation

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgconnector/pgconnector/internal/scram"
)

// Host is one host of a connection string, with what pgx parsed for it.
type Host struct {
	Host    string // as written in the connection string (a name, an IP, or a Unix socket directory)
	Port    uint16
	SSLMode SSLMode
	// TLSConfig is the TLS configuration pgx built for this host from sslmode, sslrootcert,
	// sslcert, sslkey...; nil when sslmode=disable or for a Unix socket.
	TLSConfig *tls.Config
	// BeforeTLS, when set, runs before each TLS handshake with this host (after 'S' to
	// SSLRequest, or at once for direct TLS), nothing of TLS sent yet, as libpq's
	// initialize_SSL (fe-secure-openssl.c) loads the root certificate file before its
	// ClientHello. An error fails the TLS attempt as a *TLSRefusedError: under sslmode=prefer
	// the connect goes on in plaintext on a new connection; with nothing left it fails.
	BeforeTLS func() error
	// HostAddr is hostaddr (libpq-connect.html#LIBPQ-CONNECT-HOSTADDR): the numeric IP address
	// to connect to, without a DNS lookup; Host still names the server for the Kerberos service
	// principal, the TLS server name and .pgpass. "" means: resolve Host.
	HostAddr string
}

// UnixSocket reports whether the host is a Unix-domain socket directory (and no hostaddr is given).
func (h *Host) UnixSocket() bool { return h.HostAddr == "" && len(h.Host) > 0 && h.Host[0] == '/' }

// Config configures a [Negotiator]. Zero values mean "off" or the documented default.
type Config struct {
	Hosts      []Host
	GSSEncMode GSSEncMode
	// DirectSSL is sslnegotiation=direct.
	DirectSSL bool
	// NoLearnedDirect keeps SSLRequest before every TLS handshake that sslnegotiation=direct
	// does not ask to skip, as libpq does. Without it a host remembered to take direct TLS
	// (Known.Direct) is opened with a ClientHello at once, one round trip fewer, SSLRequest
	// following on a new connection if that fails.
	NoLearnedDirect bool
	// Database is the database name, for tracing only.
	Database string
	// Cache remembers server answers; nil means a private cache with a 5-minute TTL.
	Cache *Cache
	// Trace receives the steps; nil means none.
	Trace *Trace
	// LookupFunc resolves a host name to IP addresses; nil means net.DefaultResolver.LookupHost.
	LookupFunc pgconn.LookupFunc
	// DNSTTL is how long a host name's addresses are remembered (dns.go): connects within it
	// share one lookup, and one in its last fifth looks the name up again in the background.
	// Zero or less: every connect looks every host name up, as libpq and pgx do.
	DNSTTL time.Duration
	// DownTTL is how long an address whose TCP connect timed out, was refused or found no route
	// is tried after the others (down.go). Zero or less: every connect tries the addresses in
	// their order, as libpq and pgx do.
	DownTTL time.Duration
	// DialFunc opens a socket; nil means a net.Dialer with a 5-minute keep-alive, as pgx's default.
	// It is given network "tcp" and the address an attempt chose ("ip:port": hostaddr, the host
	// when it is an IP address, else each address of the host's lookup) or network "unix" and
	// the socket's path (dir/.s.PGSQL.port), and every negotiation step runs over what it
	// returns. A CancelRequest of a session dials the network and address the session's dial
	// was given, through DialFunc too.
	DialFunc pgconn.DialFunc
	// GSS carries GSSAPI encryption out; nil means the client has no Kerberos support: it holds
	// no credentials (gssencmode=prefer skips GSS, require fails before dialing).
	GSS GSSClient
	// NoGSS, with GSS nil, says why the client has no Kerberos support (a build without it): a
	// server's request for GSSAPI authentication then fails with an [AuthError] wrapping it,
	// as libpq built without GSSAPI fails it ("GSSAPI authentication not supported",
	// fe-auth.c, pg_fe_sendauth). Nil: that AuthError has no cause.
	NoGSS error
	// TargetSessionAttrs is target_session_attrs: a server of another kind is left for the next
	// host (see TargetSessionAttrs).
	TargetSessionAttrs TargetSessionAttrs
	// LoadBalanceHosts is load_balance_hosts=random (libpq 16): each connect tries the hosts, and
	// each host's addresses, in a random order (fe-connect.c, pqConnectOptions2 and
	// PQconnectPoll: a Fisher-Yates shuffle of each).
	LoadBalanceHosts bool
	// RequirePeer is requirepeer: over a Unix-domain socket, the operating-system user the server
	// must run as (SO_PEERCRED); any other fails the connect. "" checks nothing.
	RequirePeer string
	// ConnectTimeout is connect_timeout, counted as libpq counts it (libpq-connect.html,
	// connect_timeout; fe-connect.c, pqConnectDBComplete): per host and address, from the
	// first attempt on the address, shared by every method tried there (and by a retry after a
	// remembered answer proved wrong); the first address of a host also counts the wait for
	// another connect's probe and the DNS lookup. On expiry the next address is tried, never
	// the next method on the same address. Zero: only the context bounds the connect, and the
	// wait for another connect's probe ends after DefaultProbeWait.
	ConnectTimeout time.Duration
	// Credentials gives the credentials of the application's functions (credentials.go): a
	// password when the attempt's configuration has none, OAuth bearer tokens. Nil: none.
	Credentials Credentials
	// OAuth is the connection string's OAuth keys.
	OAuth OAuthConfig
	// Open makes one pgx connection attempt for a background refresh (refresh.go), as the open
	// of Connect does, and returns the connection, which the negotiator closes at once. It is
	// called on the refresh's goroutine, so it must not write to a connect's variables: give
	// one of its own, not a closure of Connect's. Nil: no background refresh; a remembered
	// negative answer then hides a server's new TLS or GSS encryption until it expires.
	Open func(ctx context.Context) (io.Closer, error)
}

// Negotiator carries the decision out over pgx: for each host it decides the methods, then for
// each resolved address it runs one pgx connection attempt per method, each one configured by
// [Negotiator.Configure]. It is safe for concurrent use.
type Negotiator struct {
	cfg   Config
	trace Trace
	bg    background // the background refreshes, until Close
	// literal holds the one address of each host that needs no lookup (literalAddrs).
	literal map[*Host][]string
	// dns remembers the addresses of host names; nil with Config.DNSTTL <= 0.
	dns *dnsCache
	// down remembers the addresses that did not answer; nil with Config.DownTTL <= 0.
	down *downAddrs
	// roles is the role each host's server showed last (roles.go), by host index; nil without
	// target_session_attrs.
	roles []atomic.Uint32
	// scram keeps the SCRAM keys derived for this negotiator's users and passwords (auth.go).
	scram *scram.Keys
	// requireAuth is the last require_auth parsed (requireAuthOf).
	requireAuth atomic.Pointer[requireAuth]
	// oauth remembers the servers' OAUTHBEARER answers (oauth.go).
	oauth oauthMemory
	// issuerID and issuerWK are Config.OAuth.Issuer as an issuer identifier and, when it is a
	// .well-known URI, that URI (oauthIssuer); issuerErr why it is neither, for the connects
	// that need it.
	issuerID, issuerWK string
	issuerErr          error
}

// NewNegotiator returns a Negotiator for cfg. cfg.Hosts must not be empty.
func NewNegotiator(cfg Config) (*Negotiator, error) {
	if len(cfg.Hosts) == 0 {
		return nil, errors.New("negotiation: no host")
	}
	if cfg.Cache == nil {
		cfg.Cache = NewCache(5 * time.Minute)
	}
	if cfg.LookupFunc == nil {
		cfg.LookupFunc = net.DefaultResolver.LookupHost
	}
	if cfg.DialFunc == nil {
		d := &net.Dialer{KeepAlive: 5 * time.Minute}
		cfg.DialFunc = d.DialContext
	}
	cfg.Hosts = slices.Clone(cfg.Hosts)
	for i := range cfg.Hosts {
		cfg.Hosts[i].TLSConfig = withALPN(cfg.Hosts[i].TLSConfig)
	}
	n := &Negotiator{cfg: cfg, literal: literalAddrs(cfg.Hosts)}
	if cfg.OAuth.Issuer != "" {
		n.issuerID, n.issuerWK, n.issuerErr = oauthIssuer(cfg.OAuth.Issuer)
	}
	if cfg.DNSTTL > 0 {
		n.dns = newDNSCache(cfg.DNSTTL)
	}
	if cfg.DownTTL > 0 {
		n.down = newDownAddrs(cfg.DownTTL)
	}
	n.roles = rolesFor(cfg)
	if cfg.Trace != nil {
		n.trace = *cfg.Trace
	}
	var onDerive func(time.Duration)
	if hook := n.trace.SCRAMKeyDerived; hook != nil {
		onDerive = func(d time.Duration) { hook(context.Background(), SCRAMKeyDerivedInfo{Duration: d}) }
	}
	n.scram = scram.NewKeys(scram.Config{OnDerive: onDerive})
	return n, nil
}

// withALPN returns c, or a copy of it, offering ALPN "postgresql" (RFC 7301), as libpq 17 does
// on every TLS connection (fe-secure-openssl.c, initialize_SSL). A server of PostgreSQL 17 or
// later selects it whether the handshake came after SSLRequest or directly
// (be-secure-openssl.c, alpn_cb); older servers and poolers ignore it. The server's selection
// is half of what makes a host known to take direct TLS (Known.Direct).
func withALPN(c *tls.Config) *tls.Config {
	if c == nil || slices.Contains(c.NextProtos, alpnProtocol) {
		return c
	}
	c = c.Clone()
	c.NextProtos = append(c.NextProtos, alpnProtocol)
	return c
}

// Cache returns the cache the negotiator uses.
func (n *Negotiator) Cache() *Cache { return n.cfg.Cache }

// ErrSSLRequired is returned when sslmode requires TLS and the server answered 'N' to SSLRequest
// (libpq: "server does not support SSL, but SSL was required").
var ErrSSLRequired = errors.New("server does not support SSL, but SSL was required")

// Connect runs one logical connect. open must make one pgx connection attempt with ctx (for
// example a stdlib connector's Connect whose BeforeConnect calls [Negotiator.Configure]) and
// return nil on success. open is called once per attempt, sequentially.
func (n *Negotiator) Connect(ctx context.Context, open func(ctx context.Context) error) error {
	start := time.Now()
	first := &n.cfg.Hosts[0]
	if n.trace.ConnectStart != nil {
		ctx = n.trace.ConnectStart(ctx, ConnectStartInfo{
			Host: first.Host, Port: first.Port, Database: n.cfg.Database,
			SSLMode: first.SSLMode, GSSEncMode: n.cfg.GSSEncMode,
		})
	}
	res := connectResult{host: first}
	err := n.connect(ctx, open, &res)
	if n.trace.ConnectDone != nil {
		n.trace.ConnectDone(ctx, ConnectDoneInfo{
			Host: res.host.Host, Port: res.host.Port, Method: res.method, Cache: res.cache,
			Attempts: res.sockets, Err: err, Duration: time.Since(start),
		})
	}
	return err
}

type connectResult struct {
	host    *Host
	method  Method
	cache   CacheUse // of the plan that connected
	sockets int
}

func (n *Negotiator) connect(ctx context.Context, open func(ctx context.Context) error, res *connectResult) error {
	var failed []*HostError
	var buf, rbuf [8]int // the order of up to 8 hosts without an allocation
	order, roleMoved := n.roleFirst(n.hostOrder(buf[:0]), rbuf[:0])
	order = n.upHostsFirst(ctx, order)
	ps := &pass{}
	for {
		for _, i := range order {
			h := &n.cfg.Hosts[i]
			res.host = h
			ps.roleFirst = i < 64 && roleMoved&(1<<i) != 0
			final, herr := n.connectHost(ctx, h, open, res, ps)
			if herr == nil {
				return nil
			}
			if herr.Step != "target_session_attrs" {
				n.forgetRole(i) // refused, gone, failed: libpq's order until a check sees it again
			}
			failed = append(failed, herr)
			if final {
				return &ConnectError{Hosts: failed}
			}
		}
		// target_session_attrs=prefer-standby and no host was a standby: every host again, in
		// the same order, any server taken (fe-connect.c, SERVER_TYPE_PREFER_STANDBY_PASS2).
		if n.cfg.TargetSessionAttrs != TargetPreferStandby || ps.anyServer {
			return &ConnectError{Hosts: failed}
		}
		ps.anyServer = true
	}
}

// pass is what a walk over the hosts carries: whether it is prefer-standby's second one, which
// takes any server.
type pass struct {
	anyServer bool
	// addrAge: how old the remembered addresses of the host being tried are (zero when looked
	// up by this connect), for DialInfo.AddressAge.
	addrAge time.Duration
	// roleFirst: the host being tried comes before hosts written before it, its remembered
	// role being what target_session_attrs wants (roles.go).
	roleFirst bool
}

// hostOrder is the order in which one connect tries the hosts: as written, or shuffled with
// load_balance_hosts=random, appended to order. math/rand/v2's top-level functions take no
// lock (each thread has its own ChaCha8 state).
func (n *Negotiator) hostOrder(order []int) []int {
	for i := range n.cfg.Hosts {
		order = append(order, i)
	}
	if n.cfg.LoadBalanceHosts {
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	return order
}

// connectHost tries one host: decide, resolve, then every address with every method.
// final reports that no other host should be tried.
func (n *Negotiator) connectHost(ctx context.Context, h *Host, open func(context.Context) error, res *connectResult, ps *pass) (final bool, herr *HostError) {
	bv := n.newBudget() // on the stack: the host's calls below do not keep it
	b := &bv
	defer b.release()
	creds, cerr := n.credentials(ctx, b, h)
	if cerr != nil {
		return ctx.Err() != nil, cerr
	}
	key := Key{Host: h.Host, HostAddr: h.HostAddr, Port: h.Port, Principal: creds.Principal}
	retried := false
	var tbuf [8]tried // on the stack, for the common host of one or two addresses
	tr := triedMethods{list: tbuf[:0]}
	var prev *HostError
	for {
		plan, in, probe, err := n.decide(ctx, b, h, key, creds, ps.roleFirst)
		if err != nil {
			if errors.Is(err, ErrGSSNoCredentials) && creds.Missing != "" {
				err = fmt.Errorf("%w: %s", err, creds.Missing)
			}
			// libpq fails the whole connect when the modes allow no method on a host
			// (fe-connect.c, init_allowed_encryption_methods: gssencmode=require over a Unix
			// socket or without credentials), the remaining hosts untried.
			return true, &HostError{Host: h.Host, Port: h.Port, Err: err}
		}
		tr.record = plan.CacheHit() && !retried // only a plan from remembered answers is retried
		final, stale, herr := n.tryHost(ctx, b, h, key, plan, in, probe, open, res, ps, &tr, prev)
		if herr == nil || retried || !stale || !plan.CacheHit() || ctx.Err() != nil || !n.cfg.Cache.GotInSince(key) {
			return final, herr
		}
		// A plan made from a remembered answer failed in a way the transport can explain (pg_hba
		// wants another one), and connects got in with that answer before: the server may have
		// changed. Forget the answer and negotiate this host again as libpq would, within the
		// same connect_timeout, never again with a method this connect was refused on the same
		// address. A rejection that no connect got past since the answer was learned is the
		// server's answer to this client, which a cold connect met too: the retry would only
		// open more connections than libpq's connect (see Cache.GotIn).
		n.cfg.Cache.Forget(key)
		prev = herr
		if n.trace.Fallback != nil {
			n.trace.Fallback(ctx, FallbackInfo{Host: h.Host, Reason: "remembered answer may be stale: negotiating again", NewConnection: true})
		}
		retried = true
	}
}

// budget is connect_timeout for one host, as Config.ConnectTimeout says it is counted.
//
// The host's own deadline (its start plus connect_timeout) bounds what comes before the first
// address (the credentials check, the wait for another connect's probe, the DNS lookup) and the
// first address's attempts. What comes before shares one context with one timer, made when
// first needed and released by release, from which the first address's attempts derive theirs:
// a timer costs the runtime a wake-up of its network poller (a write and a read of its eventfd)
// when it is set, on every connect.
type budget struct {
	d     time.Duration
	start time.Time
	// The deadline of each address, set when it is first tried: the first one's in first and
	// firstAt (no map for a host of one address), the others' in deadlines.
	first     string
	firstAt   time.Time
	deadlines map[string]time.Time

	host       context.Context // start+d, from the ctx of the first call (nil until then)
	hostCancel context.CancelFunc
}

func (n *Negotiator) newBudget() budget {
	return budget{d: n.cfg.ConnectTimeout, start: time.Now()}
}

// release ends the host's context; call it once the host is done.
func (b *budget) release() {
	if b.hostCancel != nil {
		b.hostCancel()
	}
}

func noCancel() {}

// context returns ctx bounded by addr's deadline ("" before any address: the host's start);
// ctx must be the same context at every call for one host. For an address, the context always
// ends when the caller cancels it, deadline or not: what an attempt leaves registered under it
// (a GSS authentication token) goes with it. The calls before any address ("") leave nothing
// registered once they return: they share the host's context, and their cancel does nothing.
func (b *budget) context(ctx context.Context, addr string) (context.Context, context.CancelFunc) {
	if b.d <= 0 {
		if addr == "" {
			return ctx, noCancel
		}
		return context.WithCancel(ctx)
	}
	var d time.Time
	switch {
	case addr == "":
		d = b.start.Add(b.d) // what comes before the first address shares the host's start
	case b.firstAt.IsZero():
		d = b.start.Add(b.d) // so does the first address
		b.first, b.firstAt = addr, d
	case addr == b.first:
		d = b.firstAt
	default:
		var ok bool
		if d, ok = b.deadlines[addr]; !ok {
			d = time.Now().Add(b.d)
			if b.deadlines == nil {
				b.deadlines = make(map[string]time.Time, 2)
			}
			b.deadlines[addr] = d
		}
	}
	if !d.Equal(b.start.Add(b.d)) {
		return context.WithDeadline(ctx, d)
	}
	switch {
	case addr == "":
		if b.host == nil {
			b.host, b.hostCancel = context.WithDeadline(ctx, d)
		}
		return b.host, noCancel
	case b.host == nil: // nothing before the address needed the host's context
		return context.WithDeadline(ctx, d)
	}
	return context.WithCancel(b.host)
}

// DefaultProbeWait bounds, when connect_timeout is not set, how long a connect waits for another
// connect's probe of the same host (the answer to its SSLRequest, or its first address with GSS)
// before it negotiates itself, as libpq would have from the start. With connect_timeout set the
// wait counts against the first address's connect_timeout instead (Config.ConnectTimeout).
//
// Why 2 s: a probe normally ends one round trip after its connection (a GSS probe after the KDC
// exchange and the startup too); 2 s is twice the initial retransmission timeout of TCP (1 s,
// RFC 6298 section 2, Linux's TCP_TIMEOUT_INIT), so a probe not done by then has lost a packet
// or met a peer that does not answer (a middlebox that swallows SSLRequest). Waiting longer
// would hold a connect with no deadline of its own (database/sql's background opener passes
// none) for as long as that probe's connect lives; giving up costs the waiter only what every
// libpq connect pays, its own negotiation.
const DefaultProbeWait = 2 * time.Second

// decide makes the plan for h, waiting for another connect's probe when one is running (at
// most the first address's connect_timeout, else DefaultProbeWait).
func (n *Negotiator) decide(ctx context.Context, b *budget, h *Host, key Key, creds GSSCredentials, roleFirst bool) (plan Plan, in Input, probe *Probe, err error) {
	waited, gaveUp := false, false
	for {
		in = Input{
			SSLMode:    h.SSLMode,
			GSSEncMode: n.cfg.GSSEncMode,
			DirectSSL:  n.cfg.DirectSSL,
			UnixSocket: h.UnixSocket(),
			Known:      n.cfg.Cache.Known(key),

			NoLearnedDirect: n.cfg.NoLearnedDirect,

			GSSCredentials: creds.Valid,
			GSSGeneration:  creds.Generation,
		}
		plan, err = Decide(in)
		if err != nil {
			return plan, in, nil, err
		}
		if plan.Learns && n.cfg.Cache.remembers() && !gaveUp {
			wait, p := n.cfg.Cache.BeginProbe(key, in.Known)
			if p == nil {
				wctx, cancel := b.context(ctx, "")
				if b.d <= 0 {
					wctx, cancel = context.WithTimeout(ctx, DefaultProbeWait)
				}
				err := n.waitProbe(wctx, h, wait)
				cancel()
				switch {
				case ctx.Err() != nil:
					return plan, in, nil, err
				case err != nil:
					// The probe outlived the first address's connect_timeout, which this
					// connect shares, or DefaultProbeWait without one: go on without it, as
					// libpq would have from the start.
					gaveUp = true
				}
				waited = true
				continue
			}
			probe = p
		}
		if n.trace.Decision != nil {
			n.trace.Decision(ctx, DecisionInfo{Host: h.Host, Port: h.Port, Input: in, Plan: plan, Waited: waited, RoleFirst: roleFirst})
		}
		n.refreshSkipped(ctx, h, key, &plan, &in) // in the background: the connect does not wait
		return plan, in, probe, nil
	}
}

func (n *Negotiator) waitProbe(ctx context.Context, h *Host, wait <-chan struct{}) error {
	wctx := ctx
	if n.trace.ProbeWaitStart != nil {
		wctx = n.trace.ProbeWaitStart(ctx, HostInfo{Host: h.Host, Port: h.Port})
	}
	var err error
	select {
	case <-wait:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if n.trace.ProbeWaitDone != nil {
		n.trace.ProbeWaitDone(wctx, err)
	}
	return err
}

// resolve returns h's addresses: hostaddr, an IP address or a Unix socket directory as written
// (made once, in NewNegotiator), with no lookup and no timer; else the remembered answer
// (Config.DNSTTL) or a DNS lookup bounded by the host's connect_timeout. With
// load_balance_hosts=random the addresses come shuffled (a copy).
func (n *Negotiator) resolve(ctx context.Context, b *budget, h *Host) (dnsAnswer, error) {
	if a := n.literal[h]; a != nil {
		return dnsAnswer{addrs: a}, nil
	}
	lctx, cancel := b.context(ctx, "")
	defer cancel()
	var ans dnsAnswer
	var err error
	if n.dns != nil {
		ans, err = n.dns.get(lctx, n, h)
	} else {
		ans.addrs, err = n.lookup(lctx, h)
	}
	if err != nil {
		return ans, err
	}
	ans.raw = ans.addrs
	ans.addrs = n.shuffled(ans.addrs)
	return ans, nil
}

// shuffled returns addrs, or a shuffled copy of them with load_balance_hosts=random.
func (n *Negotiator) shuffled(addrs []string) []string {
	if n.cfg.LoadBalanceHosts && len(addrs) > 1 {
		addrs = slices.Clone(addrs)
		rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	}
	return addrs
}

// backgroundTimeout bounds what the negotiator does for later connects, with no caller waiting:
// a lookup in the background (refreshDNS), the one after every remembered address failed, and
// the dial of an address remembered down (recheckDown): connect_timeout, else 10 s.
func (n *Negotiator) backgroundTimeout() time.Duration {
	if n.cfg.ConnectTimeout > 0 {
		return n.cfg.ConnectTimeout
	}
	return 10 * time.Second
}

// refreshDNS looks h's name up again in the background, for the connects after the one of ctx
// (linked to its trace, taking nothing else of it: background.go), and hands the answer to the
// cache.
func (n *Negotiator) refreshDNS(ctx context.Context, h *Host) {
	info := BackgroundStartInfo{Work: BackgroundDNSLookup, Host: h.Host, Port: h.Port, Trigger: n.detach(ctx)}
	if !n.runBackground(info, func(ctx context.Context) error {
		addrs, err := n.lookup(ctx, h) // nil after a failure: the answer is left to expire
		n.dns.refreshed(h.Host, addrs)
		return err
	}) {
		n.dns.refreshed(h.Host, nil)
	}
}

// literalAddrs returns, for each host that needs no lookup, its one address.
func literalAddrs(hosts []Host) map[*Host][]string {
	m := make(map[*Host][]string, len(hosts))
	for i := range hosts {
		h := &hosts[i]
		switch _, err := netip.ParseAddr(h.Host); {
		case h.HostAddr != "":
			m[h] = []string{h.HostAddr}
		case h.UnixSocket(), err == nil:
			m[h] = []string{h.Host}
		}
	}
	return m
}

func (n *Negotiator) lookup(ctx context.Context, h *Host) ([]string, error) {
	dctx := ctx
	if n.trace.DNSStart != nil {
		dctx = n.trace.DNSStart(ctx, HostInfo{Host: h.Host, Port: h.Port})
	}
	addrs, err := n.cfg.LookupFunc(ctx, h.Host)
	if err == nil && len(addrs) == 0 {
		err = fmt.Errorf("no address for host %q", h.Host)
	}
	if n.trace.DNSDone != nil {
		n.trace.DNSDone(dctx, DNSDoneInfo{Addrs: addrs, Err: err})
	}
	if err != nil {
		return nil, err
	}
	return addrs, nil
}

// tried is a method one connect tried on an address.
type tried struct {
	addr string
	m    Method
}

// triedMethods are the methods a connect tried on each address of a host, recorded while
// record is set, so that a retry of the host never tries one again.
type triedMethods struct {
	record bool
	list   []tried
}

func (t *triedMethods) add(addr string, m Method) {
	if t.record {
		t.list = append(t.list, tried{addr, m})
	}
}

func (t *triedMethods) has(addr string, m Method) bool {
	return slices.Contains(t.list, tried{addr, m})
}

// tryHost runs the plan on every address of h, leaving out on each the methods tr lists for it.
// stale reports a failure that a wrong remembered answer could explain (see judge); herr is nil
// on success, prev when no method was left to try. probe, when this connect probes h for the
// others, ends with the first address at the latest.
func (n *Negotiator) tryHost(ctx context.Context, b *budget, h *Host, key Key, plan Plan, in Input, probe *Probe,
	open func(context.Context) error, res *connectResult, ps *pass, tr *triedMethods, prev *HostError,
) (final, stale bool, herr *HostError) {
	defer probe.End()
	herr = prev
	ans, err := n.resolve(ctx, b, h)
	if err != nil {
		return ctx.Err() != nil, false, &HostError{Host: h.Host, Port: h.Port, Step: "DNS lookup", Err: err}
	}
	caller, _ := ctx.Deadline()
	addrs := n.upFirst(ctx, h, ans.addrs)
	ps.addrAge = 0
	if ans.remembered {
		ps.addrAge = max(ans.age, time.Nanosecond) // waited for another connect's lookup: just now
	}
	for again := false; ; again = true {
		reached := false
		for i, addr := range addrs {
			actx, cancel := b.context(ctx, addr)
			r := n.tryAddr(actx, caller, h, key, addrs[i:i+1:i+1], plan, in, probe, open, res, ps, tr)
			cancel()
			// The others waited for what this host's first address would teach: it has.
			probe.End()
			probe = nil
			if r.none {
				// Every method of the plan was tried here already, by this connect: a server
				// answered before (or the address failed then), no reason to look it up again.
				reached = true
				continue
			}
			stale = stale || r.stale
			if !r.refusedOnly || prev == nil {
				herr = r.herr // a retry's 'N' with nothing left says less than the failure before it
			}
			reached = reached || r.reached
			if r.done || r.final || r.leave || ctx.Err() != nil {
				if r.final && !r.soft {
					stale = false
				}
				return r.final || ctx.Err() != nil, stale, herr
			}
		}
		if again || !ans.remembered || reached {
			return false, stale, herr
		}
		// Every address of a remembered answer failed before a server answered: the name may
		// have moved. Ask again at once, and try what is new.
		addrs = n.resolveAgain(ctx, h, ans.raw)
		ps.addrAge = 0
		if len(addrs) == 0 {
			return false, stale, herr
		}
	}
}

// resolveAgain forgets h's remembered answer (tried: its addresses, all failed), looks the name
// up again, bounded by connect_timeout from now (or 10 s), and returns the addresses of the new
// answer that were not tried.
func (n *Negotiator) resolveAgain(ctx context.Context, h *Host, tried []string) []string {
	n.dns.forget(h.Host, tried)
	lctx, cancel := context.WithTimeout(ctx, n.backgroundTimeout())
	defer cancel()
	addrs, err := n.lookup(lctx, h)
	if err != nil {
		return nil
	}
	n.dns.put(h.Host, addrs)
	return slices.DeleteFunc(n.shuffled(slices.Clone(addrs)), func(a string) bool { return slices.Contains(tried, a) })
}

// addrResult is what trying one address gave.
type addrResult struct {
	done                bool // connected
	final, leave, stale bool // see verdict
	soft                bool // final, unless a stale remembered answer explains it (a retry goes first)
	reached             bool // a socket to the address was opened (a server may have answered)
	// none: no method was left to try on the address; refusedOnly: the last attempt ended in
	// the server's 'N' with nothing left to try, which says less than an earlier failure.
	none, refusedOnly bool
	// gssRefused: GSS encryption was refused with 28000 and nothing got in after it here.
	gssRefused bool
	herr       *HostError
}

// tryAddr runs the plan's methods on one address, each after the previous one failed as
// judge allows. caller is the deadline of the caller's context.
func (n *Negotiator) tryAddr(ctx context.Context, caller time.Time, h *Host, key Key, one []string, plan Plan, in Input, probe *Probe,
	open func(context.Context) error, res *connectResult, ps *pass, tr *triedMethods,
) (r addrResult) {
	addr := one[0]
	var reuse net.Conn
	var reuseReq request
	reached := false
	defer func() {
		closeConn(reuse)
		r.reached = reached
	}()
	methods := plan.Methods()
	if len(tr.list) > 0 {
		// A retry: what this connect tried here already is not asked again.
		var left [len(plan.methods)]Method
		k := 0
		for _, m := range methods {
			if !tr.has(addr, m) {
				left[k] = m
				k++
			}
		}
		if k == 0 {
			return addrResult{none: true}
		}
		methods = left[:k]
	}
	// gssRefused: GSS encryption was refused here with 28000 (gssNoIfFallbackGetsIn): "no GSS
	// encryption" is learned if a method without it then gets in.
	gssRefused := false
	for i, m := range methods {
		tr.add(addr, m)
		at := &attempt{n: n, host: h, key: key, addr: addr, addrs: one, method: m, known: in.Known, gssGeneration: in.GSSGeneration, anyServer: ps.anyServer, cache: plan.CacheUse(), caller: caller, addrAge: ps.addrAge}
		at.learnedDirect = m == MethodDirectSSL && plan.LearnedDirect()
		if m == MethodDirectSSL && reuse != nil {
			// A server reads a ClientHello as direct TLS only as a connection's first bytes
			// (postmaster.c, ProcessSSLStartup): after 'N' to GSSENCRequest, a new connection.
			reuse.Close()
			reuse = nil
		}
		// The probe of a plan that starts with SSL ends with the answer to SSLRequest; one
		// that starts with GSS ends when the first address is done (GSS can still fail
		// after 'G', during authentication).
		if i == 0 && m == MethodSSL {
			at.probe.Store(probe)
		}
		at.given.Store(connBox(reuse))
		at.givenReq = reuseReq
		reuse = nil
		at, err := n.runRetrying(ctx, at, open, res, &reached)
		reached = reached || at.reached.Load()
		res.sockets += int(at.sockets.Load())
		if g := at.given.Swap(nil); g != nil {
			g.c.Close() // pgx failed before dialing
		}
		if err == nil {
			if gssRefused {
				n.cfg.Cache.SetGSS(at.key, AnswerNo, at.gssGeneration)
			}
			switch {
			case m == MethodGSS:
				n.cfg.Cache.SetGSS(at.key, AnswerYes, at.gssGeneration)
			case at.learnedDirect:
				n.cfg.Cache.RenewDirect(at.key)
			case at.directShown:
				n.cfg.Cache.LearnDirect(at.key)
			case m == MethodSSL && !at.alpn && at.known.Direct == AnswerUnknown:
				// No ALPN postgresql over SSLRequest: a server before 17 or a pooler, which
				// takes no direct TLS. Remembered, so that the next connects (until the TTL
				// ends) do not look for server_version again (Configure).
				n.cfg.Cache.SetDirect(at.key, AnswerNo)
			}
			n.cfg.Cache.GotIn(at.key) // after what the connect taught
			res.method, res.cache = m, at.cache
			return addrResult{done: true}
		}
		// A server that target_session_attrs does not accept: the next host, and nothing
		// learned about the transport (the remembered answers stay, no probe again).
		var tsaErr *TargetSessionAttrsError
		if errors.As(err, &tsaErr) {
			if m == MethodGSS { // GSS encryption was established before the check
				n.cfg.Cache.SetGSS(at.key, AnswerYes, at.gssGeneration)
			} else if gssRefused { // the server let this connection in without it
				n.cfg.Cache.SetGSS(at.key, AnswerNo, at.gssGeneration)
			}
			if n.trace.Fallback != nil {
				n.trace.Fallback(ctx, FallbackInfo{Host: h.Host, From: m, Reason: tsaErr.Reason})
			}
			herr := at.hostError(tsaErr) // not pgx's "ValidateConnect failed" around it
			herr.Step = "target_session_attrs"
			return addrResult{herr: herr, leave: true}
		}
		hasNext := i+1 < len(methods)

		// 'N': not a failure when the modes allow going on without. The next method goes on on
		// the same socket when it was kept (see canPeek), else on a new one.
		if at.refused.Load() {
			reuse = at.takeReuse()
			reuseReq = sslRequest
			if m == MethodGSS {
				reuseReq = gssencRequest
				n.cfg.Cache.SetGSS(at.key, AnswerNo, at.gssGeneration)
			}
			switch {
			case m == MethodGSS && n.cfg.GSSEncMode == GSSEncModeRequire:
				at.failStep, at.failErr = stepGSSENCRequest, ErrGSSRequired // the attempt is over: fail() would not record it
				err = &GSSRequiredError{Reason: "the server does not support it (it answered 'N' to GSSENCRequest)", Err: ErrGSSRequired}
			case m == MethodSSL && h.SSLMode.requiresTLS():
				// libpq: "server does not support SSL, but SSL was required", and no other
				// host (fe-connect.c, ENCRYPTION_NEGOTIATION_FAILED: error_return).
				at.failStep, at.failErr = stepSSLRequest, ErrSSLRequired
				err = fmt.Errorf("%w (sslmode=%s)", ErrSSLRequired, h.SSLMode)
				return addrResult{herr: at.hostError(err), final: true}
			case hasNext:
				n.fallback(ctx, h, m, methods[i+1], sameSocketReason(m), reuse != nil)
				continue
			}
			return addrResult{herr: at.hostError(err), refusedOnly: true}
		}

		st, c := at.failure(ctx, err)
		if at.learnedDirect && st == stepTLS && c != classCanceled {
			// The host no longer takes direct TLS (a pooler in front, a server restarted
			// older or without TLS), the network kept the handshake from ending, or the
			// client refused the certificate (which SSLRequest will get too: direct TLS then
			// only costs a socket). Either way, SSLRequest from now on, which is libpq's way
			// and gives up no encryption, and for this connect on a new socket while time is
			// left: plaintext only after the server's own 'N' to it, or as libpq's sslmode
			// allows after a certificate it refuses.
			n.cfg.Cache.SetDirect(at.key, AnswerNo)
			// A timeout of the handshake alone (learnedDirectWait) leaves the address's time
			// for SSLRequest; one of the whole connect does not.
			if (c != classTimeout || ctx.Err() == nil) && hasNext && at.reached.Load() {
				n.fallback(ctx, h, m, methods[i+1], "direct TLS failed ("+failureReason(st, c, "")+"): SSLRequest", false)
				continue
			}
		}
		v := judge(m, st, c, sqlState(err), at.authOK.Load())
		if m == MethodGSS {
			switch v.gss {
			case gssNo:
				n.cfg.Cache.SetGSS(at.key, AnswerNo, at.gssGeneration)
			case gssNoIfFallbackGetsIn:
				gssRefused = true
			case gssStrike:
				n.cfg.Cache.StrikeGSS(at.key, at.gssGeneration)
			}
		}
		if c == classTimeout {
			err = n.timeoutError(ctx, caller, err)
		}
		if m == MethodGSS && n.cfg.GSSEncMode == GSSEncModeRequire && st != stepStartup && st != stepDial {
			reason, detail := gssFailure(st, c)
			err = &GSSRequiredError{Reason: reason, Err: err, detail: detail}
		}
		r.herr = at.hostError(err)
		// When no socket could be opened the next method would not fare better: like
		// libpq, go on with the next address instead.
		next := v.next && hasNext && at.reached.Load()
		if v.next && !hasNext && (c == classErrorResponse || c == classServer || c == classTLSRefused || st == stepTLS) {
			// libpq: an error response, a failed TLS handshake (direct TLS to a server before
			// 17 or without TLS, a reset), or a TLS server the client refused, with nothing
			// left to try fails the connect (fe-connect.c, CONNECTION_FAILED: error_return).
			// A remembered answer that may be stale gets its one retry first (connectHost).
			v.final = true
			r.soft = v.stale
		}
		var to Method
		if next {
			to = methods[i+1]
		}
		if !v.final {
			n.fallback(ctx, h, m, to, failureReason(st, c, sqlState(err)), false)
		}
		r.stale = r.stale || v.stale
		r.gssRefused = gssRefused
		if !next {
			r.final, r.leave = v.final, v.leave
			return r
		}
	}
	return r
}

// timeoutError says which deadline ended an attempt: connect_timeout (the address's) or the
// caller's context.
func (n *Negotiator) timeoutError(ctx context.Context, caller time.Time, err error) error {
	d, ok := ctx.Deadline()
	if !ok || time.Now().Before(d) {
		return err // a timeout of the network, not one of ours
	}
	if n.cfg.ConnectTimeout > 0 && (caller.IsZero() || d.Before(caller)) {
		return &labeled{err: err, msg: "timeout expired (connect_timeout " + n.cfg.ConnectTimeout.String() + ")"}
	}
	return &labeled{err: err, msg: "the context's deadline passed"}
}

func (n *Negotiator) fallback(ctx context.Context, h *Host, from, to Method, reason string, sameSocket bool) {
	if n.trace.Fallback == nil {
		return
	}
	n.trace.Fallback(ctx, FallbackInfo{Host: h.Host, From: from, To: to, Reason: reason, NewConnection: !sameSocket && to != 0})
}

func sameSocketReason(m Method) string {
	if m == MethodGSS {
		return "server refused GSSENCRequest"
	}
	return "server refused SSLRequest"
}

// failureReason says why an attempt failed, for the fallback's reason.
func failureReason(st step, c class, code string) string {
	switch {
	case c == classServer:
		return "server error " + code
	case c == classTimeout:
		return st.String() + ": timeout"
	case c == classCanceled:
		return "canceled"
	case st == stepDial:
		return "could not connect"
	case st == stepTLS:
		return "TLS handshake failed"
	case st == stepServiceTicket:
		return "no service ticket"
	case st == stepGSSContext:
		return "GSSAPI context establishment failed"
	case st == stepSSLRequest, st == stepGSSENCRequest:
		return st.String() + " failed"
	}
	return "connection failed"
}

// gssFailure says why GSS encryption could not be had, for a GSSRequiredError; detail: the
// cause's own message adds to it.
func gssFailure(st step, c class) (reason string, detail bool) {
	what := map[class]string{
		classClosed:        "the server closed the connection",
		classReset:         "the server reset the connection",
		classTimeout:       "no answer came before the timeout",
		classErrorResponse: "the server sent an error response",
	}[c]
	switch {
	case st == stepGSSENCRequest && what != "":
		return what + " on GSSENCRequest", false
	case st == stepGSSContext && what != "":
		return what + " during the GSSAPI context establishment", false
	case st == stepServiceTicket:
		return "no service ticket could be had", true
	case st == stepGSSContext:
		return "the GSSAPI context could not be established", true
	}
	return "it could not be established on " + st.String(), true
}

func (n *Negotiator) run(ctx context.Context, at *attempt, open func(context.Context) error) error {
	err := open(context.WithValue(ctx, attemptKey{}, at))
	if at.oauthLead {
		// The attempt's discovery ended without an answer, or ended: the herd waiting for it
		// goes on (oauthMemory.beginDiscovery).
		at.n.oauth.endDiscovery(at.oauthLeadKey)
	}
	at.probe.Store(nil)
	at.done.Store(true)
	at.endStartup(err)
	return err
}

// Configure rewrites a pgx configuration for the attempt carried by ctx: one host, one address,
// the TLS configuration of the method, and the negotiator's dial and observation hooks. Call it
// from stdlib.OptionBeforeConnect (or before pgconn.ConnectConfig); cfg must be a copy.
// It fails when ctx carries no attempt (a connect that did not come through [Negotiator.Connect]).
func (n *Negotiator) Configure(ctx context.Context, cfg *pgconn.Config) error {
	at, _ := ctx.Value(attemptKey{}).(*attempt)
	if at == nil || at.n != n {
		return errors.New("pgconnector: connection attempt did not come through the negotiator")
	}
	cfg.Host, cfg.Port = at.host.Host, at.host.Port
	cfg.Fallbacks = nil
	cfg.TLSConfig = nil
	if at.method == MethodSSL || at.method == MethodDirectSSL {
		cfg.TLSConfig = at.host.TLSConfig
	}
	// pgx opens TLS directly or after SSLRequest by this field, also for CancelRequest, which
	// then goes the way the session went.
	cfg.SSLNegotiation = "postgres"
	if at.method == MethodDirectSSL {
		cfg.SSLNegotiation = "direct"
	}
	// LookupFunc and AfterNetConnect are called during the connect only, with ctx (which carries
	// the attempt): package functions, not closures made per attempt. DialFunc also serves
	// CancelRequest, whose context does not carry the attempt.
	cfg.LookupFunc = lookupAttempt
	cfg.DialFunc = at.dial
	// connect_timeout is the negotiator's (Config.ConnectTimeout), in ctx: pgx would give every
	// attempt a full one of its own.
	cfg.ConnectTimeout = 0
	if afterNetConnect := cfg.AfterNetConnect; afterNetConnect != nil {
		cfg.AfterNetConnect = func(ctx context.Context, cfg *pgconn.Config, conn net.Conn) (net.Conn, error) {
			out, err := at.afterNetConnect(ctx, conn)
			if err == nil {
				out, err = afterNetConnect(ctx, cfg, out)
			}
			if err != nil && out == nil {
				// pgx calls Close on what AfterNetConnect returns, even with an error.
				out = conn
			}
			return out, err
		}
	} else {
		cfg.AfterNetConnect = afterNetConnectAttempt
	}
	buildFrontend := cfg.BuildFrontend
	cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		// pgx builds the frontend when it connects, after every hook. The authentication
		// exchange is the negotiator's (auth.go), with what ConfigureAuth took, or else with cfg
		// as it is now.
		s := at.auth
		if !at.authSet {
			s, _ = at.n.authSettingsOf(cfg) // pgx checked require_auth when it parsed it
		}
		ctx := at.connCtx
		if ctx == nil {
			ctx = context.Background()
		}
		return buildFrontend(&authExchange{r: r, w: w, at: at, s: s, ctx: ctx}, w)
	}
	cfg.KerberosSpn = "" // pgx's GSS provider is never asked: the exchange is ours
	cfg.ValidateConnect = nil
	if tsa := at.n.cfg.TargetSessionAttrs; tsa != TargetAny && !at.anyServer {
		cfg.ValidateConnect = func(ctx context.Context, c *pgconn.PgConn) error {
			r, err := tsa.validate(ctx, c)
			at.n.learnRole(at.host, r)
			return err
		}
	}
	if at.method == MethodSSL && at.known.Direct == AnswerUnknown && at.n.cfg.Cache.remembers() && !at.n.cfg.NoLearnedDirect {
		// The server's version, to learn direct TLS from (afterReady).
		validate := cfg.ValidateConnect
		cfg.ValidateConnect = func(ctx context.Context, c *pgconn.PgConn) error {
			at.afterReady(c)
			if validate != nil {
				return validate(ctx, c)
			}
			return nil
		}
	}
	return nil
}

// SetBeforeTLS replaces, for the attempt ctx carries, the check [Host.BeforeTLS] would run before
// the TLS handshake: check (nil: none) runs instead. Call it after [Negotiator.Configure], when
// the caller gave the attempt a TLS configuration of its own whose trust anchors are not those
// Host.BeforeTLS looks for (a root certificate pool given in memory). It fails when ctx carries
// no attempt of this negotiator.
func (n *Negotiator) SetBeforeTLS(ctx context.Context, check func() error) error {
	at, _ := ctx.Value(attemptKey{}).(*attempt)
	if at == nil || at.n != n {
		return errors.New("pgconnector: connection attempt did not come through the negotiator")
	}
	at.beforeTLS, at.beforeTLSSet = check, true
	return nil
}

// afterReady reads, once the server sent ReadyForQuery, whether the connection shows that the
// host takes direct TLS: a server that selected ALPN postgresql over SSLRequest and reports
// server_version 17 or later (direct TLS came with PostgreSQL 17, release-17.html; a pooler
// passes the server's server_version on, but does not select ALPN postgresql unless it takes
// direct TLS itself).
func (at *attempt) afterReady(c *pgconn.PgConn) {
	if !at.alpn {
		return
	}
	v := c.ParameterStatus("server_version")
	major := 0
	for i := 0; i < len(v) && v[i] >= '0' && v[i] <= '9' && major < 1000; i++ {
		major = major*10 + int(v[i]-'0')
	}
	at.directShown = major >= 17
}

type attemptKey struct{}

// AttemptHost returns the host and port, as written in the connection string, of the attempt
// ctx carries: in the open function given to [Negotiator.Connect], where the attempt's
// connection goes. ok is false for a context that carries no attempt.
func AttemptHost(ctx context.Context) (host string, port uint16, ok bool) {
	at, _ := ctx.Value(attemptKey{}).(*attempt)
	if at == nil {
		return "", 0, false
	}
	return at.host.Host, at.host.Port, true
}

// attempt is one pgx connection attempt: one host, one address, one method. Its dial function
// stays in the connection's pgx configuration and also serves CancelRequest, so what it touches
// after the connect is safe for concurrent use.
type attempt struct {
	n      *Negotiator
	host   *Host
	key    Key
	addr   string
	addrs  []string // []string{addr}, shared: pgx's LookupFunc answer (lookupAttempt)
	method Method
	known  Known
	cache  CacheUse // what the cache did for the plan of this attempt's host

	gssGeneration uint64
	// probe is this host's probe while this attempt's answer to SSLRequest ends it.
	probe atomic.Pointer[Probe]
	// done is set when the connect attempt is over: the dial function then serves pgx's
	// CancelRequest, which must not touch the cache, the attempt or the socket bookkeeping.
	done atomic.Bool
	// refused: the server answered 'N' to this attempt's request.
	refused atomic.Bool
	// authOK: the server sent AuthenticationOk (authObserver).
	authOK atomic.Bool

	// anyServer: prefer-standby's second pass, which takes any server.
	anyServer bool

	// given is a socket left open by the previous method after 'N' to givenReq: this attempt
	// goes on on it instead of dialing.
	given    atomic.Pointer[connHolder]
	givenReq request
	reuse    atomic.Pointer[connHolder] // the socket this attempt leaves open after 'N'
	sockets  atomic.Int32               // sockets opened
	reached  atomic.Bool                // some socket connected (or was given)
	caller   time.Time                  // the deadline of the connect's caller, zero for none
	addrAge  time.Duration              // DialInfo.AddressAge

	sslAnswer atomic.Uint32 // Answer to SSLRequest on this attempt's socket

	// Written during the connect only (one goroutine).

	// beforeTLS replaces host.BeforeTLS when beforeTLSSet (SetBeforeTLS).
	beforeTLS    func() error
	beforeTLSSet bool
	// dialNetwork and dialAddress are what the connect's dial was given; a CancelRequest of the
	// session dials them again (read once done is set, which orders them before).
	dialNetwork, dialAddress string

	failStep   step // where the attempt failed, when the negotiator saw it (fail)
	failErr    error
	authMethod string
	// auth is what the attempt authenticates with (ConfigureAuth); connCtx is the context pgx
	// connects with (from AfterNetConnect), which bounds the authentication exchange.
	auth          authSettings
	authSet       bool
	connCtx       context.Context
	saslMechanism string // the SASL mechanism used, if any
	// creds: what the attempts with this method on this address share of Config.Credentials
	// (credfetch.go); nil until an exchange asks for the attempt to be made again.
	creds *credRetry
	// oauthLead: this attempt makes the OAuth discovery of oauthLeadKey that others wait for
	// (oauthMemory.beginDiscovery); run ends it at the latest.
	oauthLead     bool
	oauthLeadKey  oauthKey
	keyCached     bool // SCRAM: the keys came from the cache
	alpn          bool // the server selected ALPN postgresql
	directShown   bool // the connection showed that the host takes direct TLS (afterReady)
	learnedDirect bool // a direct TLS attempt made because the host is known to take it
	startupCtx    context.Context
	startupMu     sync.Mutex
}

type connHolder struct{ c net.Conn }

func connBox(c net.Conn) *connHolder {
	if c == nil {
		return nil
	}
	return &connHolder{c}
}

func (at *attempt) takeReuse() net.Conn {
	if h := at.reuse.Swap(nil); h != nil {
		return h.c
	}
	return nil
}

// fail records where the attempt failed and why, the first time, while the connect runs.
func (at *attempt) fail(st step, err error) {
	if at.done.Load() {
		return // a CancelRequest's dial
	}
	if at.failErr == nil && err != nil {
		at.failStep, at.failErr = st, err
	}
}

// failure returns the step and class of the attempt's failure: err is what pgx returned.
func (at *attempt) failure(ctx context.Context, err error) (step, class) {
	if at.failErr != nil {
		c := classify(ctx, at.failErr)
		if c == classOther {
			c = classify(ctx, err)
		}
		return at.failStep, c
	}
	return stepStartup, classify(ctx, err)
}

// hostError describes the attempt's failure as its host's.
func (at *attempt) hostError(err error) *HostError {
	st := stepStartup
	if at.failErr != nil {
		st = at.failStep
	}
	return &HostError{Host: at.host.Host, Port: at.host.Port, Addr: at.addr, Method: at.method, Step: st.String(), Err: err}
}

// lookupAttempt is pgx's LookupFunc during an attempt: the one address the attempt is for.
func lookupAttempt(ctx context.Context, host string) ([]string, error) {
	at, _ := ctx.Value(attemptKey{}).(*attempt)
	if at == nil {
		return nil, errors.New("pgconnector: address lookup outside a connection attempt")
	}
	return at.addrs, nil
}

// afterNetConnectAttempt is pgx's AfterNetConnect during an attempt, when the configuration
// had none of its own.
func afterNetConnectAttempt(ctx context.Context, _ *pgconn.Config, conn net.Conn) (net.Conn, error) {
	at, _ := ctx.Value(attemptKey{}).(*attempt)
	if at == nil {
		return conn, errors.New("pgconnector: connection outside a connection attempt")
	}
	return at.afterNetConnect(ctx, conn)
}

func (at *attempt) dial(ctx context.Context, network, address string) (net.Conn, error) {
	if at.done.Load() {
		// A CancelRequest: pgx dials the session's RemoteAddr, which is the server's only when
		// the dial function connects to it directly (not through a tunnel or a proxy). The
		// cancel goes where the session's dial went, as libpq sends it to the connection's
		// address (fe-cancel.c, PQcancelCreate), through the same dial function.
		if at.dialAddress != "" {
			network, address = at.dialNetwork, at.dialAddress
		}
	} else {
		at.dialNetwork, at.dialAddress = network, address
	}
	tr := &at.n.trace
	info := DialInfo{Host: at.host.Host, Address: address, Method: at.method, AddressAge: at.addrAge}
	var conn net.Conn
	if h := at.given.Swap(nil); h != nil {
		conn = h.c
		at.reached.Store(true)
		// The previous method's request was refused: nothing may have arrived since.
		if err := quiet(conn, at.givenReq); err != nil {
			at.fail(stepOf(at.givenReq), err)
			conn.Close()
			return nil, err
		}
	} else {
		dctx := ctx
		if tr.TCPConnectStart != nil {
			info.RememberedDown = at.n.downNow(ctx, at.host.Host, network, address)
			dctx = tr.TCPConnectStart(ctx, info)
		}
		var err error
		conn, err = at.n.cfg.DialFunc(ctx, network, address)
		at.n.noteDial(network, address, err, at.caller)
		if tr.TCPConnectDone != nil {
			tr.TCPConnectDone(dctx, err)
		}
		if err != nil {
			at.fail(stepDial, err)
			return nil, err
		}
		at.sockets.Add(1)
		at.reached.Store(true)
		if want := at.n.cfg.RequirePeer; want != "" && network == "unix" {
			if err := checkPeer(conn, want); err != nil {
				at.fail(stepDial, err)
				conn.Close()
				return nil, err
			}
		}
	}
	switch at.method {
	case MethodSSL:
		return &sslRequestConn{Conn: conn, at: at, ctx: ctx, info: info}, nil
	case MethodGSS:
		return at.startGSS(ctx, conn, info)
	}
	return conn, nil
}

// stepOf is the step of a request's answer.
func stepOf(r request) step {
	if r == gssencRequest {
		return stepGSSENCRequest
	}
	return stepSSLRequest
}

// onSSLAnswer records the server's answer to SSLRequest and releases waiting connects; not
// for a CancelRequest's dial (the answer to a cancel's SSLRequest teaches nothing new, and the
// cache is the connects').
func (at *attempt) onSSLAnswer(a Answer) {
	if at.done.Load() {
		return
	}
	at.sslAnswer.Store(uint32(a))
	if a == AnswerNo {
		at.refused.Store(true)
	}
	at.n.cfg.Cache.SetSSL(at.key, a)
	at.probe.Load().End()
}

func (at *attempt) afterNetConnect(ctx context.Context, conn net.Conn) (net.Conn, error) {
	tr := &at.n.trace
	at.connCtx = ctx
	if tc, ok := conn.(*tls.Conn); ok {
		// pgx leaves the handshake to the first write; do it now so that it is a step of its own.
		hctx := ctx
		if tr.TLSHandshakeStart != nil {
			hctx = tr.TLSHandshakeStart(ctx, TLSHandshakeStartInfo{ServerName: at.host.Host, Direct: at.method == MethodDirectSSL, Learned: at.learnedDirect})
		}
		var err error
		check := at.host.BeforeTLS
		if at.beforeTLSSet {
			check = at.beforeTLS
		}
		if check != nil {
			if err = check(); err != nil {
				err = refusedTLS(err)
			}
		}
		if err == nil {
			if at.learnedDirect {
				// A deadline on the socket, not a context: no allocation on a warm connect.
				_ = tc.SetDeadline(time.Now().Add(learnedDirectWait(ctx)))
			}
			err = tc.HandshakeContext(ctx)
			if at.learnedDirect && err == nil {
				_ = tc.SetDeadline(time.Time{})
			}
		}
		at.alpn = err == nil && tc.ConnectionState().NegotiatedProtocol == alpnProtocol
		if err == nil && at.method == MethodDirectSSL && !at.alpn {
			// libpq 17 (fe-secure-openssl.c, open_client_SSL): ALPN is mandatory with direct
			// TLS; Go's client already fails a handshake where the server selects a protocol
			// it did not offer, so what is left is a server that selected none. Nothing is
			// written on the connection after the handshake.
			err = &TLSRefusedError{Err: ErrDirectTLSNoALPN}
		}
		if tr.TLSHandshakeDone != nil {
			st := tc.ConnectionState()
			tr.TLSHandshakeDone(hctx, TLSHandshakeDoneInfo{Version: st.Version, CipherSuite: st.CipherSuite, ALPN: st.NegotiatedProtocol, Err: err})
		}
		if err != nil {
			at.fail(stepTLS, err)
			// pgx closes the connection it gets back with the error: never hand it nil.
			return conn, err
		}
	}
	if tr.StartupStart != nil {
		sctx := tr.StartupStart(ctx, DialInfo{Host: at.host.Host, Address: at.addr, Method: at.method})
		at.startupMu.Lock()
		at.startupCtx = sctx
		at.startupMu.Unlock()
	}
	return conn, nil
}

// maxLearnedDirectWait bounds the wait for a learned direct TLS handshake when the connect has
// no deadline (learnedDirectWait).
const maxLearnedDirectWait = 10 * time.Second

// learnedDirectWait is how long a direct TLS handshake the cache chose may take: half the time
// left to the connect (connect_timeout or the context), at most maxLearnedDirectWait. A peer
// that swallows a ClientHello sent as the first bytes (a middlebox that knows only SSLRequest)
// then leaves the other half for SSLRequest, which libpq would have sent from the start, instead
// of failing the connect or, without a deadline, holding it forever.
func learnedDirectWait(ctx context.Context) time.Duration {
	d := maxLearnedDirectWait
	if deadline, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(deadline)/2)
	}
	return d
}

func (at *attempt) endStartup(err error) {
	at.startupMu.Lock()
	sctx := at.startupCtx
	at.startupCtx = nil
	at.startupMu.Unlock()
	if sctx != nil && at.n.trace.StartupDone != nil {
		info := StartupDoneInfo{AuthMethod: at.authMethod, SASLMechanism: at.saslMechanism, KeyCached: at.keyCached, SQLState: sqlState(err)}
		if err != nil {
			info.Err = cause(err)
		}
		at.n.trace.StartupDone(sctx, info)
	}
}

func sqlState(err error) string {
	if err == nil {
		return "" // and no allocation for errors.As's target on every successful startup
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

func closeConn(c net.Conn) {
	if c != nil {
		c.Close()
	}
}
