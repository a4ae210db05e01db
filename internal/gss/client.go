package gss

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/types"
	"golang.org/x/sync/singleflight"

	"github.com/pgconnector/pgconnector/internal/ccache"
	"github.com/pgconnector/pgconnector/internal/keytabfile"
	"github.com/pgconnector/pgconnector/internal/krb5conf"
	"github.com/pgconnector/pgconnector/negotiation"
)

// ClientConfig says where a [Client] finds its Kerberos configuration and credentials. Empty
// fields take MIT's environment variables and defaults, read once by [NewClient].
type ClientConfig struct {
	// Krb5Conf is the krb5.conf list in KRB5_CONFIG's syntax: paths separated by colons,
	// each a file or a directory (read like includedir), those that do not exist skipped,
	// include and includedir followed, values of earlier files first (see package
	// internal/krb5conf for MIT's rules). Empty means KRB5_CONFIG if it is set (even to
	// the empty string, which names no file), else /etc/krb5.conf.
	Krb5Conf string
	// CCache is the credential cache name as MIT names it (krb5_cc_resolve): FILE:path or a
	// bare path, DIR:dir (a collection: its primary cache) or DIR::dir/tktX, KEYRING:
	// session|user|persistent|process|thread:name, KCM: or KCM:name (see package
	// internal/ccache). Empty means KRB5CCNAME, else krb5.conf's [libdefaults]
	// default_ccache_name with its %{uid}-style tokens expanded, else FILE:/tmp/krb5cc_<uid>,
	// as krb5_cc_default_name (MIT os/ccdefname.c). MEMORY:, API: and unknown types hold no
	// credentials for this client: Credentials says why, naming the type, and a client
	// keytab, if given, is used instead.
	CCache string
	// ClientKeytab is a keytab to obtain credentials from when the cache holds none:
	// KRB5_CLIENT_KTNAME. It is read with keytabfile.Load; one that is unusable
	// (*keytabfile.UnusableError) gives no credentials and the reason in Missing.
	ClientKeytab string
	// Principal is the client principal (user@REALM) to take from ClientKeytab; empty means
	// its first entry.
	Principal string
	// Service is krbsrvname (default "postgres"): the service principal is Service/host, host as
	// written in the connection string.
	Service string
	// SPN, when set, is krbspn: the whole service principal name (service/host), used for
	// every host.
	SPN string
	// Delegate is gssdelegation=1: forward the ticket-granting ticket to the server in every
	// context (GSS_C_DELEG_FLAG; RFC 4121 §4.1.1.1), when it is forwardable. The forwarded
	// ticket is asked of the KDC once per credentials and kept while they last; without one
	// the context goes without delegation, as with MIT (see Delegation on the session).
	Delegate bool
}

// Client implements negotiation.GSSClient on gokrb5. Whether credentials exist is decided once
// and decided again only when the credential cache's stamp changes (ccache.Cache.Stamp: one stat
// for FILE, two for DIR, two keyctl reads for KEYRING, one request to the daemon for KCM; no
// parse) or its ticket-granting ticket expires, so kinit, kdestroy, kswitch and renewal take
// effect at the next connection. It is safe for concurrent use.
type Client struct {
	cfg ClientConfig
	now func() time.Time

	noCreds atomic.Bool // the last credentials check found none (read without mu)

	// closed: Close was called. Set with mu held, read without it.
	closed atomic.Bool
	// cur is the current decision, nil until the first check: read without mu (a warm
	// Credentials takes no lock), replaced with mu held.
	cur atomic.Pointer[credState]

	mu        sync.Mutex
	gen       uint64
	krb5      *config.Config
	krb5Paths []string          // Krb5Conf split, set by NewClient
	profile   *krb5conf.Profile // read at the first need, then kept

	// cache is the credential cache, resolved at the first credentials check (the default
	// name may come from krb5.conf) and kept.
	cache atomic.Pointer[resolvedCache]

	// exchanges are the KDC exchanges in flight, one per credentials generation and service
	// principal, shared by the callers that want the same ticket at the same time; and the
	// reads of the credential cache in flight, one per stamp (see read).
	exchanges singleflight.Group
	lastRead  atomic.Pointer[lastRead] // the last successful read of the cache (see read)
}

// lastRead is a read of the credential cache and the stamp it was read at.
type lastRead struct {
	stamp ccache.Stamp
	data  *credentials.CCache
}

// resolvedCache is the credential cache the client reads, or why it has none.
type resolvedCache struct {
	cache ccache.Cache // nil when err is set
	err   error        // the name could not be resolved: an unsupported type, a bad token
}

// credState is one decision about the credentials, with what it was decided from. Its fields
// other than deleg and delegRetry are not changed once it is Client.cur.
type credState struct {
	stamp     ccache.Stamp
	final     bool         // decided from a stamp: reused while the stamp stays the same
	creds     *Credentials // nil: no usable credentials
	principal string       // creds' principal, "" without creds
	expires   time.Time    // TGT end time; zero for keytab credentials
	gen       uint64
	missing   string // why there are none
	source    string // GSSCredentials.Source

	// The forwarded ticket-granting ticket (Delegate), under Client.mu: nil until an exchange
	// ends; kept until the credentials change or it expires, or, for a failure, until
	// delegRetry.
	deleg      *delegation
	delegRetry time.Time
}

// delegRetryAfter is how long a failure to get a forwarded ticket-granting ticket is kept
// before the next connection asks the KDC again (a non-forwardable ticket stays so until the
// credentials change).
const delegRetryAfter = time.Minute

// NewClient reads the environment for the empty fields of cfg. It opens no file.
func NewClient(cfg ClientConfig) *Client {
	krb5Paths := krb5conf.EnvPaths()
	if cfg.Krb5Conf != "" {
		krb5Paths = krb5conf.SplitPaths(cfg.Krb5Conf)
	} else {
		cfg.Krb5Conf = strings.Join(krb5Paths, ":")
	}
	if cfg.CCache == "" {
		cfg.CCache = os.Getenv("KRB5CCNAME") // else krb5.conf's default, at the first check
	}
	if cfg.ClientKeytab == "" {
		cfg.ClientKeytab = strings.TrimPrefix(os.Getenv("KRB5_CLIENT_KTNAME"), "FILE:")
	}
	if cfg.Service == "" {
		cfg.Service = "postgres"
	}
	return &Client{cfg: cfg, now: time.Now, krb5Paths: krb5Paths}
}

var _ negotiation.GSSClient = (*Client)(nil)

// ErrClosed is the error of Credentials after Close.
var ErrClosed = errors.New("gss: the Kerberos client is closed")

// Close closes the credential cache (a KCM cache's connection to its daemon) and waits for its
// requests in progress to end. Credentials afterwards returns ErrClosed and opens nothing; a
// session already established is not affected. It may be called more than once.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed.Store(true)
	c.mu.Unlock()
	// credCache stores under mu and checks closed first: the cache seen here is the last.
	if rc := c.cache.Load(); rc != nil && rc.cache != nil {
		return rc.cache.Close()
	}
	return nil
}

// Credentials implements negotiation.GSSClient. Looking at the credential cache (and reading it
// when it changed) waits until ctx ends at most (KCM; the other types do not wait): then
// Credentials returns an error that wraps ctx's and the previous decision stays. So does a KCM
// daemon that does not answer within ccache.KCMTimeout (the error wraps
// os.ErrDeadlineExceeded): a check that did not finish is no proof that there are no
// credentials, and nothing is decided from it (see unfinished).
//
// Concurrent checks that find the same new stamp share one read of the cache (a single
// flight, run apart from any caller's context and bounded by the cache type: KCMTimeout for
// KCM); each caller waits for it until its own ctx ends at most. No lock is held while the
// cache is looked at or read.
//
// When the cache's stamp is the last decision's (and its ticket-granting ticket has not
// expired) Credentials takes no lock and does not allocate: it costs the stamp (one stat(2) for
// FILE) and atomic loads.
func (c *Client) Credentials(ctx context.Context) (negotiation.GSSCredentials, error) {
	if c.closed.Load() {
		return negotiation.GSSCredentials{Missing: ErrClosed.Error()}, ErrClosed
	}
	rc, rerr := c.credCache(ctx)
	if errors.Is(rerr, ErrClosed) {
		return negotiation.GSSCredentials{Missing: rerr.Error()}, rerr
	}
	var st ccache.Stamp
	var serr error
	if rc != nil && rc.cache != nil {
		st, serr = rc.cache.Stamp(ctx)
		if serr != nil && unfinished(ctx, serr) {
			err := fmt.Errorf("gss: checking the credential cache: %w", serr)
			return negotiation.GSSCredentials{Missing: err.Error()}, err
		}
	}
	if cur := c.reusable(rerr, serr, st); cur != nil {
		return cur.describe(true), nil
	}
	// Read the cache without c.mu: a KCM daemon may be slow, and other connects need not
	// queue behind this one.
	var data *credentials.CCache
	var lerr error
	if rerr == nil && rc.err == nil && serr == nil && st.Present {
		data, lerr = c.read(ctx, rc.cache, st)
		if lerr != nil && unfinished(ctx, lerr) {
			err := fmt.Errorf("gss: reading the credential cache: %w", lerr)
			return negotiation.GSSCredentials{Missing: err.Error()}, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return negotiation.GSSCredentials{Missing: ErrClosed.Error()}, ErrClosed
	}
	if cur := c.reusable(rerr, serr, st); cur != nil {
		return cur.describe(true), nil // decided meanwhile by another connect, from the same stamp
	}
	now := c.now()
	var next *credState
	var err error
	switch {
	case rerr != nil: // krb5.conf could not be read: nothing is decided
		next, err = &credState{missing: rerr.Error()}, rerr
	case rc.err != nil: // a name this client cannot read: decided, with the keytab if any
		next, err = c.load(nil, ccache.Stamp{}, nil, nil, now)
		next.final = true
		if next.creds == nil && next.missing == "" {
			next.missing = rc.err.Error()
		}
	case serr != nil: // could not look at the cache: decided again at the next check
		next, err = c.load(nil, ccache.Stamp{}, nil, nil, now)
		if next.creds == nil && next.missing == "" {
			next.missing = serr.Error()
		}
	default:
		next, err = c.load(rc.cache, st, data, lerr, now)
		next.final = true
	}
	if next.creds == nil && next.missing == "" {
		switch {
		case err != nil:
			next.missing = err.Error()
		default:
			next.missing = "no credential cache at " + rc.cache.Name()
		}
	}
	if cur := c.cur.Load(); cur == nil || next.creds != cur.creds || next.expires != cur.expires {
		c.gen++
	}
	next.gen = c.gen
	if next.creds != nil {
		next.principal = next.creds.Principal()
	}
	c.cur.Store(next)
	c.noCreds.Store(next.creds == nil)
	return next.describe(false), err
}

// unfinished reports that err, of a cache looked at with ctx, says nothing about the
// credentials because the look did not finish: ctx is done, err is the deadline that ctx gave a
// KCM exchange (its socket's deadline may pass just before ctx's timer fires) or a cancel, or
// the KCM daemon did not answer within ccache.KCMTimeout (os.ErrDeadlineExceeded). libpq with
// MIT krb5 would still be waiting for the daemon there (cc_kcm.c sets no timeout): it never
// goes on as if there were no credentials, and neither does the negotiator (gssencmode=prefer
// must not turn GSS encryption off because a daemon was slow).
func unfinished(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, os.ErrDeadlineExceeded)
}

// read is cache.Load for stamp st, shared by the concurrent callers that found the same stamp:
// one read runs (with a context of its own, bounded by the cache: see ccache.Cache.Load), each
// caller waits for it until its ctx ends at most, then returns ctx's error; the read goes on
// for the others (and for the callers that come while it runs).
//
// The last successful read is kept with its stamp and taken by a caller that finds that stamp
// after the read ended (a KCM Stamp waits for the read's connection, so the callers of a later
// Stamp sequence come just after it).
func (c *Client) read(ctx context.Context, cache ccache.Cache, st ccache.Stamp) (*credentials.CCache, error) {
	if lr := c.lastRead.Load(); lr != nil && lr.stamp == st {
		return lr.data, nil
	}
	key := fmt.Sprintf("load %t %x %x %x %x", st.Present, st.A, st.B, st.C, st.D)
	ch := c.exchanges.DoChan(key, func() (any, error) {
		data, err := cache.Load(context.Background())
		if err == nil {
			c.lastRead.Store(&lastRead{stamp: st, data: data})
		}
		return data, err
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*credentials.CCache), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("credential cache %s: stopped waiting for the read: %w", cache.Name(), ctx.Err())
	}
}

// reusable returns the current decision if it still holds for stamp st (nil if not). It takes
// no lock.
func (c *Client) reusable(rerr, serr error, st ccache.Stamp) *credState {
	cur := c.cur.Load()
	if cur != nil && cur.final && rerr == nil && serr == nil && cur.stamp == st &&
		(cur.expires.IsZero() || c.now().Before(cur.expires)) {
		return cur
	}
	return nil
}

// credCache resolves the credential cache name once: ClientConfig.CCache, else krb5.conf's
// default_ccache_name, else MIT's default. A krb5.conf that cannot be read is an error and
// is tried again at the next call; a name that cannot be resolved is kept as the answer.
func (c *Client) credCache(ctx context.Context) (*resolvedCache, error) {
	if rc := c.cache.Load(); rc != nil {
		return rc, nil
	}
	if err := c.readProfile(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if rc := c.cache.Load(); rc != nil {
		return rc, nil
	}
	p, err := c.loadProfile()
	if err != nil {
		return nil, err
	}
	rc := &resolvedCache{}
	defName, _ := p.DefaultCCacheName()
	kcmSocket, _ := p.KCMSocket()
	name, err := ccache.DefaultName(func(string) string { return c.cfg.CCache }, defName)
	if err == nil {
		rc.cache, err = ccache.Resolve(name, ccache.Options{KCMSocket: kcmSocket})
	}
	if err != nil {
		rc.err = fmt.Errorf("gss: %w", err)
	}
	c.cache.Store(rc)
	return rc, nil
}

func (s *credState) describe(reused bool) negotiation.GSSCredentials {
	return negotiation.GSSCredentials{Valid: s.creds != nil, Principal: s.principal, Generation: s.gen, Reused: reused, Missing: s.missing, Source: s.source}
}

// load decides from the credential cache cc (nil: none to read) as read (data, or the error
// lerr of cc.Load), else the client keytab.
func (c *Client) load(cc ccache.Cache, st ccache.Stamp, data *credentials.CCache, lerr error, now time.Time) (*credState, error) {
	next := &credState{stamp: st}
	if cc != nil {
		typ, _, _ := strings.Cut(cc.Name(), ":") // ccache names always have a type
		next.source = strings.ToUpper(typ)
	}
	if cc != nil && st.Present {
		creds, expires, err := c.fromCCache(cc, data, lerr, now)
		if errors.Is(err, ccache.ErrNoCache) { // gone between the stamp and the read
			err = nil
			next.missing = "no credential cache at " + cc.Name()
		} else if err == nil {
			next.creds, next.expires = creds, expires
			return next, nil
		}
		var unusable *ccache.UnusableError
		if exp, ok := err.(errExpired); ok {
			// Not a failure of the check: decided, no credentials until the cache changes.
			next.missing, err = exp.Error(), nil
		} else if errors.As(err, &unusable) {
			// A cache that is not a regular file or not in MIT's format: decided likewise,
			// so that gssencmode=prefer goes on without GSS as libpq does, and require says
			// why (GSSCredentials.Missing).
			next.missing, err = err.Error(), nil
		}
		if c.cfg.ClientKeytab == "" {
			return next, err
		}
		next.missing = ""
	}
	if c.cfg.ClientKeytab == "" {
		return next, nil
	}
	creds, err := c.fromKeytab()
	next.creds = creds
	if creds != nil {
		next.source = "keytab"
	}
	var unusable *keytabfile.UnusableError
	if errors.As(err, &unusable) {
		// Not a regular file, too large or not in MIT's format: decided as for such a cache,
		// so that gssencmode=prefer goes on without GSS and require says why.
		next.missing, err = err.Error(), nil
	}
	return next, err
}

// Profile returns the krb5.conf profile of Krb5Conf, read at the first call (or the first
// credentials check) and kept: for settings gokrb5 does not read, such as [libdefaults]
// default_ccache_name and kcm_socket. A read that fails is tried again at the next call.
func (c *Client) Profile() (*krb5conf.Profile, error) {
	if err := c.readProfile(context.Background()); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loadProfile()
}

// readProfile reads krb5.conf, if it was not read yet, without c.mu: other connects do not
// wait on the read. Reading stops when ctx ends (krb5conf.LoadContext); two connects that
// read at the same time both read, and the first to finish is kept.
func (c *Client) readProfile(ctx context.Context) error {
	c.mu.Lock()
	done := c.profile != nil
	c.mu.Unlock()
	if done {
		return nil
	}
	p, err := krb5conf.LoadContext(ctx, c.krb5Paths)
	if err != nil {
		return fmt.Errorf("gss: reading the Kerberos configuration %s: %w", c.cfg.Krb5Conf, err)
	}
	c.mu.Lock()
	if c.profile == nil {
		c.profile = p
	}
	c.mu.Unlock()
	return nil
}

// loadProfile is Profile with c.mu held.
func (c *Client) loadProfile() (*krb5conf.Profile, error) {
	if c.profile == nil {
		p, err := krb5conf.Load(c.krb5Paths)
		if err != nil {
			return nil, fmt.Errorf("gss: reading the Kerberos configuration %s: %w", c.cfg.Krb5Conf, err)
		}
		c.profile = p
	}
	return c.profile, nil
}

// config returns gokrb5's view of the profile; c.mu is held.
func (c *Client) config() (*config.Config, error) {
	if c.krb5 == nil {
		p, err := c.loadProfile()
		if err != nil {
			return nil, err
		}
		cfg, err := p.Gokrb5Config()
		if err != nil {
			return nil, fmt.Errorf("gss: %w", err)
		}
		c.krb5 = cfg
	}
	return c.krb5, nil
}

func (c *Client) fromCCache(cache ccache.Cache, cc *credentials.CCache, lerr error, now time.Time) (*Credentials, time.Time, error) {
	if lerr != nil {
		return nil, time.Time{}, fmt.Errorf("gss: reading the credential cache: %w", lerr)
	}
	realm := cc.GetClientRealm()
	tgt, ok := cc.GetEntry(types.PrincipalName{NameType: 2, NameString: []string{"krbtgt", realm}})
	if !ok {
		return nil, time.Time{}, errors.New("gss: the credential cache holds no ticket-granting ticket")
	}
	if !now.Before(tgt.EndTime) {
		// Expired: no credentials (libpq would still try and fail in the server's face);
		// decided again after kinit.
		return nil, tgt.EndTime, errExpired{tgt.EndTime}
	}
	cfg, err := c.config()
	if err != nil {
		return nil, time.Time{}, err
	}
	creds, err := CredentialsFromCCacheData(cache.Name(), cc, cfg)
	if err != nil {
		return nil, time.Time{}, err
	}
	return creds, tgt.EndTime, nil
}

// errExpired is a ticket-granting ticket that has expired.
type errExpired struct{ at time.Time }

func (e errExpired) Error() string {
	return "the ticket-granting ticket expired at " + e.at.UTC().Format(time.RFC3339)
}

// fromKeytab obtains credentials from the client keytab (keytabfile.Load: a regular file of
// at most 16 MiB in MIT's format, else a *keytabfile.UnusableError).
func (c *Client) fromKeytab() (*Credentials, error) {
	user, realm, ok := strings.Cut(c.cfg.Principal, "@")
	if c.cfg.Principal != "" && !ok {
		return nil, fmt.Errorf("gss: principal %q has no realm", c.cfg.Principal)
	}
	kt, err := keytabfile.Load(c.cfg.ClientKeytab, user, realm)
	if err != nil {
		var unusable *keytabfile.UnusableError
		if errors.As(err, &unusable) {
			return nil, err
		}
		return nil, fmt.Errorf("gss: %w", err)
	}
	if c.cfg.Principal == "" {
		if len(kt.Entries) == 0 {
			return nil, errors.New("gss: the client keytab is empty")
		}
		p := kt.Entries[0].Principal
		user, realm = strings.Join(p.Components, "/"), p.Realm
	}
	cfg, err := c.config()
	if err != nil {
		return nil, err
	}
	return CredentialsFromKeytab(user, realm, kt, cfg)
}

// ServiceTicket implements negotiation.GSSClient. It returns when the ticket is there (from
// gokrb5's cache, or from the KDC) or when ctx ends, whichever comes first: see ticket for what
// it leaves running then.
func (c *Client) ServiceTicket(ctx context.Context, host string) (negotiation.GSSSession, bool, error) {
	cur := c.cur.Load()
	if cur == nil || cur.creds == nil {
		return nil, false, errors.New("gss: no credentials")
	}
	spn := c.SPN(host)
	t, err := c.ticket(ctx, cur, spn)
	if err != nil {
		return nil, false, err
	}
	s := &session{creds: cur.creds, spn: spn, tkt: t.tkt, key: t.key, enctype: EnctypeName(t.key.KeyType)}
	fromCache := t.fromCache
	if c.cfg.Delegate {
		d, cached, err := c.delegation(ctx, cur)
		if err != nil {
			return nil, false, err
		}
		s.deleg = &d
		fromCache = fromCache && cached
	}
	return s, fromCache, nil
}

// delegation returns the forwarded ticket-granting ticket of the credentials of st, or why
// there is none, from st or the KDC; cached is true when no KDC exchange was needed. The
// exchange follows ticket's discipline: shared by the callers of one credentials generation,
// each waiting for it or for its ctx (then ctx's error, and the exchange goes on, bounded by
// gokrb5's timeouts, for the next caller). Its outcome stays with st: see credState.deleg.
func (c *Client) delegation(ctx context.Context, st *credState) (d delegation, cached bool, err error) {
	now := c.now()
	c.mu.Lock()
	if d := st.deleg; d != nil {
		valid := d.err == nil && now.Before(d.fwd.part.EndTime.Add(-time.Minute))
		notForwardable := errors.Is(d.err, ErrNotForwardable)
		if valid || notForwardable || d.err != nil && now.Before(st.delegRetry) {
			c.mu.Unlock()
			return *d, true, nil
		}
	}
	c.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return delegation{}, false, fmt.Errorf("gss: no forwarded ticket-granting ticket: %w", err)
	}
	ch := c.exchanges.DoChan("deleg "+strconv.FormatUint(st.gen, 10), func() (any, error) {
		d := st.creds.forwarded()
		c.mu.Lock()
		st.deleg, st.delegRetry = &d, c.now().Add(delegRetryAfter)
		c.mu.Unlock()
		return d, nil
	})
	select {
	case r := <-ch:
		return r.Val.(delegation), false, nil
	case <-ctx.Done():
		return delegation{}, false, fmt.Errorf("gss: no forwarded ticket-granting ticket: stopped waiting for the KDC: %w", ctx.Err())
	}
}

// ticketResult is a service ticket and its session key.
type ticketResult struct {
	tkt       messages.Ticket
	key       types.EncryptionKey
	fromCache bool // no KDC exchange was needed
}

// ticket returns a ticket for spn with the credentials of st, from gokrb5's cache or the KDC.
//
// gokrb5 takes no context: its exchanges end by its own timeouts only. So the exchange runs in
// a goroutine of its own, shared by every caller that wants a ticket for spn with the same
// credentials while it runs (at most one per credentials and service principal), and each
// caller waits for it or for its own ctx, whichever ends first: a caller returns at once when
// ctx ends, with ctx's error. The exchange it leaves goes on until gokrb5 ends it: for each
// message, 5 s to connect to a KDC and 5 s to send the request and read the answer, for each
// KDC of the realm in turn (gokrb5 tries them in random order), over TCP and, unless
// udp_preference_limit = 1, UDP too. With a realm of n KDCs that accept and never answer,
// that is at most 10 s x n per transport for the TGS-REQ, and as long again for each earlier
// message the credentials need: for keytab credentials the AS-REQ (which gokrb5 sends lazily,
// here) and its retry with preauthentication; a renewal of a renewable ticket-granting ticket.
// Callers that come meanwhile wait for that same exchange, and get its ticket (cached by
// gokrb5 for later callers) or its error.
func (c *Client) ticket(ctx context.Context, st *credState, spn string) (ticketResult, error) {
	if err := ctx.Err(); err != nil {
		return ticketResult{}, fmt.Errorf("gss: no service ticket for %s: %w", spn, err)
	}
	cl := st.creds.Client()
	key := strconv.FormatUint(st.gen, 10) + " " + spn
	ch := c.exchanges.DoChan(key, func() (any, error) {
		// Even the cache lookup can be an exchange: gokrb5 renews an expired renewable ticket.
		if tkt, k, ok := cl.GetCachedTicket(spn); ok {
			return ticketResult{tkt: tkt, key: k, fromCache: true}, nil
		}
		tkt, k, err := cl.GetServiceTicket(spn)
		if err != nil {
			return nil, kdcExchangeError(spn, err)
		}
		return ticketResult{tkt: tkt, key: k}, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return ticketResult{}, r.Err
		}
		return r.Val.(ticketResult), nil
	case <-ctx.Done():
		return ticketResult{}, fmt.Errorf("gss: no service ticket for %s: stopped waiting for the KDC: %w", spn, ctx.Err())
	}
}

// SPN returns the service principal name for host: krbspn, or krbsrvname/host.
func (c *Client) SPN(host string) string {
	if c.cfg.SPN != "" {
		return c.cfg.SPN
	}
	return c.cfg.Service + "/" + host
}

// session is one context establishment with a service ticket.
type session struct {
	creds   *Credentials
	spn     string
	tkt     messages.Ticket
	key     types.EncryptionKey // the ticket's session key: never printed
	enctype string
	deleg   *delegation // nil: no delegation asked

	delegSent bool  // set by Establish
	delegWhy  error // set by Establish
}

// Delegation reports, after Establish, whether the AP-REQ carried a forwarded ticket-granting
// ticket, and, when delegation was asked (gssdelegation=1) but not sent, why: see
// Initiator.Delegation.
func (s *session) Delegation() (sent bool, why error) { return s.delegSent, s.delegWhy }

func (s *session) Enctype() string { return s.enctype }

// String shows the service principal and the enctype, no key material.
func (s *session) String() string { return "gss.session{" + s.spn + ", " + s.enctype + "}" }

// GoString is String.
func (s *session) GoString() string { return s.String() }

// Establish implements negotiation.GSSSession: AP-REQ out, AP-REP in (mutual authentication),
// then the connection wrapped in PostgreSQL's GSSAPI packet framing.
func (s *session) Establish(ctx context.Context, conn net.Conn) (net.Conn, error) {
	init, err := newInitiatorWithTicket(s.creds.Client(), s.spn, s.tkt, s.key, s.deleg)
	if err != nil {
		return nil, err
	}
	out, _, err := init.Step(nil)
	if err != nil {
		return nil, err
	}
	s.delegSent, s.delegWhy = init.Delegation()
	if err := WriteToken(conn, out); err != nil {
		return nil, err
	}
	in, err := ReadToken(conn, MaxAuthPacket)
	if err != nil {
		return nil, err
	}
	if _, done, err := init.Step(in); err != nil {
		return nil, err
	} else if !done {
		return nil, errors.New("gss: the server wants more context tokens than Kerberos V5 uses")
	}
	w, err := init.Wrapper()
	if err != nil {
		return nil, err
	}
	return NewConn(conn, w), nil
}
