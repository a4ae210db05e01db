package gss

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/jcmturner/gokrb5/v8/keytab"
	"github.com/jcmturner/gokrb5/v8/types"

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
}

// Client implements negotiation.GSSClient on gokrb5. Whether credentials exist is decided once
// and decided again only when the credential cache file changes (one stat per check, no parse)
// or its ticket-granting ticket expires, so kinit, kdestroy and renewal take effect at the next
// connection. It is safe for concurrent use.
type Client struct {
	cfg    ClientConfig
	now    func() time.Time
	authID uint64 // set by Register

	mu   sync.Mutex
	gen  uint64
	cur  *credState // nil until the first check
	krb5 *config.Config
}

// credState is one decision about the credentials, with what it was decided from.
type credState struct {
	stat    fileStamp
	creds   *Credentials // nil: no usable credentials
	expires time.Time    // TGT end time; zero for keytab credentials
	gen     uint64
	missing string // why there are none
}

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

// ServiceTicket implements negotiation.GSSClient.
func (c *Client) ServiceTicket(ctx context.Context, host string) (negotiation.GSSSession, bool, error) {
	c.mu.Lock()
	cur := c.cur
	c.mu.Unlock()
	if cur == nil || cur.creds == nil {
		return nil, false, errors.New("gss: no credentials")
	}
	spn := c.SPN(host)
	cl := cur.creds.Client()
	_, _, fromCache := cl.GetCachedTicket(spn)
	_, key, err := cl.GetServiceTicket(spn)
	if err != nil {
		return nil, false, kdcExchangeError(spn, err)
	}
	return &session{creds: cur.creds, spn: spn, enctype: EnctypeName(key.KeyType)}, fromCache, nil
}

// SPN returns the service principal name for host: krbspn, or krbsrvname/host.
func (c *Client) SPN(host string) string {
	if c.cfg.SPN != "" {
		return c.cfg.SPN
	}
	return c.cfg.Service + "/" + host
}

// session is one context establishment with a service ticket in the client's cache.
type session struct {
	creds   *Credentials
	spn     string
	enctype string
}

func (s *session) Enctype() string { return s.enctype }

// Establish implements negotiation.GSSSession: AP-REQ out, AP-REP in (mutual authentication),
// then the connection wrapped in PostgreSQL's GSSAPI packet framing.
func (s *session) Establish(ctx context.Context, conn net.Conn) (net.Conn, error) {
	init, err := s.creds.NewInitiator(s.spn, false)
	if err != nil {
		return nil, err
	}
	out, _, err := init.Step(nil)
	if err != nil {
		return nil, err
	}
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
