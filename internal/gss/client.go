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
	"syscall"
	"time"

	"github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/messages"
	"github.com/jcmturner/gokrb5/v8/types"
	"golang.org/x/sync/singleflight"

	"github.com/pgconnector/pgconnector/negotiation"
)

// ClientConfig says where a [Client] finds its Kerberos configuration and credentials. Empty
// fields take MIT's environment variables and defaults, read once by [NewClient].
type ClientConfig struct {
	// Krb5Conf is the krb5.conf path: KRB5_CONFIG, else /etc/krb5.conf.
	Krb5Conf string
	// CCache is the FILE credential cache path (a "FILE:" prefix is accepted): KRB5CCNAME,
	// else /tmp/krb5cc_<uid>. Other cache types (KCM:, KEYRING:, DIR:) are not supported:
	// with one of them the client holds no credentials unless a client keytab is given.
	CCache string
	// ClientKeytab is a keytab to obtain credentials from when the cache holds none:
	// KRB5_CLIENT_KTNAME.
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
// and decided again only when the credential cache file changes (one stat per check, no parse)
// or its ticket-granting ticket expires, so kinit, kdestroy and renewal take effect at the next
// connection. It is safe for concurrent use.
type Client struct {
	cfg        ClientConfig
	now        func() time.Time
	authSecret string // set by Register: see pgxauth.go

	noCreds    atomic.Bool   // the last credentials check found none (read without mu)
	attemptSeq atomic.Uint64 // numbers the tokens of AuthTokenContext
	attempts   sync.Map      // their number (base 36) -> the attempt's context.Context

	mu   sync.Mutex
	gen  uint64
	cur  *credState // nil until the first check
	krb5 *config.Config

	// exchanges are the KDC exchanges in flight, one per credentials generation and service
	// principal, shared by the callers that want the same ticket at the same time.
	exchanges singleflight.Group
}

// credState is one decision about the credentials, with what it was decided from.
type credState struct {
	stat    fileStamp
	creds   *Credentials // nil: no usable credentials
	expires time.Time    // TGT end time; zero for keytab credentials
	gen     uint64
	missing string // why there are none

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

type fileStamp struct {
	exists     bool
	dev, ino   uint64
	size       int64
	mtime      int64
	ctime      int64
	statFailed bool
}

// NewClient reads the environment for the empty fields of cfg. It opens no file.
func NewClient(cfg ClientConfig) *Client {
	if cfg.Krb5Conf == "" {
		cfg.Krb5Conf = os.Getenv("KRB5_CONFIG")
		if i := strings.IndexByte(cfg.Krb5Conf, ':'); i >= 0 {
			cfg.Krb5Conf = cfg.Krb5Conf[:i] // MIT allows a list; gokrb5 reads one file
		}
		if cfg.Krb5Conf == "" {
			cfg.Krb5Conf = "/etc/krb5.conf"
		}
	}
	if cfg.CCache == "" {
		cfg.CCache = os.Getenv("KRB5CCNAME")
		if cfg.CCache == "" {
			cfg.CCache = fmt.Sprintf("/tmp/krb5cc_%d", os.Getuid())
		}
	}
	if rest, ok := strings.CutPrefix(cfg.CCache, "FILE:"); ok {
		cfg.CCache = rest
	} else if i := strings.IndexByte(cfg.CCache, ':'); i > 0 && !strings.HasPrefix(cfg.CCache, "/") {
		cfg.CCache = "" // an unsupported cache type
	}
	if cfg.ClientKeytab == "" {
		cfg.ClientKeytab = strings.TrimPrefix(os.Getenv("KRB5_CLIENT_KTNAME"), "FILE:")
	}
	if cfg.Service == "" {
		cfg.Service = "postgres"
	}
	return &Client{cfg: cfg, now: time.Now}
}

var _ negotiation.GSSClient = (*Client)(nil)

// Credentials implements negotiation.GSSClient.
func (c *Client) Credentials(ctx context.Context) (negotiation.GSSCredentials, error) {
	st := stampOf(c.cfg.CCache)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if cur := c.cur; cur != nil && cur.stat == st && (cur.expires.IsZero() || now.Before(cur.expires)) {
		return cur.describe(true), nil
	}
	next, err := c.load(st, now)
	if next.creds == nil && next.missing == "" {
		switch {
		case err != nil:
			next.missing = err.Error()
		case c.cfg.CCache == "":
			next.missing = "the credential cache type is not supported (FILE only)"
		default:
			next.missing = "no credential cache at " + c.cfg.CCache
		}
	}
	if c.cur == nil || next.creds != c.cur.creds || next.expires != c.cur.expires {
		c.gen++
	}
	next.gen = c.gen
	c.cur = next
	c.noCreds.Store(next.creds == nil)
	return next.describe(false), err
}

func (s *credState) describe(reused bool) negotiation.GSSCredentials {
	g := negotiation.GSSCredentials{Valid: s.creds != nil, Generation: s.gen, Reused: reused, Missing: s.missing}
	if s.creds != nil {
		g.Principal = s.creds.Principal()
	}
	return g
}

// load decides from the credential cache, else the client keytab.
func (c *Client) load(st fileStamp, now time.Time) (*credState, error) {
	next := &credState{stat: st}
	if st.exists {
		creds, expires, err := c.fromCCache(now)
		if err == nil {
			next.creds, next.expires = creds, expires
			return next, nil
		}
		if exp, ok := err.(errExpired); ok {
			// Not a failure of the check: decided, no credentials until the cache changes.
			next.missing, err = exp.Error(), nil
		}
		if c.cfg.ClientKeytab == "" {
			return next, err
		}
	}
	if c.cfg.ClientKeytab == "" {
		return next, nil
	}
	creds, err := c.fromKeytab()
	next.creds = creds
	return next, err
}

func (c *Client) config() (*config.Config, error) {
	if c.krb5 == nil {
		cfg, err := config.Load(c.cfg.Krb5Conf)
		if err != nil {
			return nil, fmt.Errorf("gss: reading %s: %w", c.cfg.Krb5Conf, err)
		}
		c.krb5 = cfg
	}
	return c.krb5, nil
}

func (c *Client) fromCCache(now time.Time) (*Credentials, time.Time, error) {
	cc, err := credentials.LoadCCache(c.cfg.CCache)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("gss: reading the credential cache: %w", err)
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
	creds, err := CredentialsFromCCache(c.cfg.CCache, cfg)
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

func (c *Client) fromKeytab() (*Credentials, error) {
	kt, err := keytab.Load(c.cfg.ClientKeytab)
	if err != nil {
		return nil, fmt.Errorf("gss: reading the client keytab: %w", err)
	}
	user, realm, ok := strings.Cut(c.cfg.Principal, "@")
	if c.cfg.Principal == "" {
		if len(kt.Entries) == 0 {
			return nil, errors.New("gss: the client keytab is empty")
		}
		p := kt.Entries[0].Principal
		user, realm, ok = strings.Join(p.Components, "/"), p.Realm, true
	}
	if !ok {
		return nil, fmt.Errorf("gss: principal %q has no realm", c.cfg.Principal)
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
	c.mu.Lock()
	cur := c.cur
	c.mu.Unlock()
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

func stampOf(path string) fileStamp {
	if path == "" {
		return fileStamp{}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileStamp{statFailed: !errors.Is(err, syscall.ENOENT)}
	}
	return fileStamp{exists: true, dev: uint64(st.Dev), ino: st.Ino, size: st.Size,
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}
