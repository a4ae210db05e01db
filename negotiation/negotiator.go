package negotiation

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Host is one host of a connection string, with what pgx parsed for it.
type Host struct {
	Host    string // as written in the connection string (a name, an IP, or a Unix socket directory)
	Port    uint16
	SSLMode SSLMode
	// TLSConfig is the TLS configuration pgx built for this host from sslmode, sslrootcert,
	// sslcert, sslkey...; nil when sslmode=disable or for a Unix socket.
	TLSConfig *tls.Config
}

// UnixSocket reports whether the host is a Unix-domain socket directory.
func (h *Host) UnixSocket() bool { return len(h.Host) > 0 && h.Host[0] == '/' }

// Config configures a [Negotiator]. Zero values mean "off" or the documented default.
type Config struct {
	Hosts      []Host
	GSSEncMode GSSEncMode
	// DirectSSL is sslnegotiation=direct.
	DirectSSL bool
	// Database is the database name, for tracing only.
	Database string
	// Cache remembers server answers; nil means a private cache with a 5-minute TTL.
	Cache *Cache
	// Trace receives the steps; nil means none.
	Trace *Trace
	// LookupFunc resolves a host name to IP addresses; nil means net.DefaultResolver.LookupHost.
	LookupFunc pgconn.LookupFunc
	// DialFunc opens a socket; nil means a net.Dialer with a 5-minute keep-alive, as pgx's default.
	DialFunc pgconn.DialFunc
	// GSS carries GSSAPI encryption out; nil means the client has no Kerberos support: it holds
	// no credentials (gssencmode=prefer skips GSS, require fails before dialing).
	GSS GSSClient
}

// Negotiator carries the decision out over pgx: for each host it decides the methods, then for
// each resolved address it runs one pgx connection attempt per method, each one configured by
// [Negotiator.Configure]. It is safe for concurrent use.
type Negotiator struct {
	cfg   Config
	trace Trace
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
	n := &Negotiator{cfg: cfg}
	if cfg.Trace != nil {
		n.trace = *cfg.Trace
	}
	return n, nil
}

// Cache returns the cache the negotiator uses.
func (n *Negotiator) Cache() *Cache { return n.cfg.Cache }

// ErrSSLRequired is returned when sslmode requires TLS and the server answered 'N' to SSLRequest
// (libpq: "server does not support SSL, but SSL was required").
var ErrSSLRequired = errors.New("server does not support SSL, but SSL was required")

// pgx's SQLSTATEs after which it tries no other host: the same error would come back
// (pgconn.connectPreferred). A transport change cannot help them either.
func isFinalServerError(code string) bool {
	return code == "28P01" || code == "3D000" || code == "42501"
}

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
			Host: res.host.Host, Port: res.host.Port, Method: res.method, CacheHit: res.cacheHit,
			Attempts: res.sockets, Err: err, Duration: time.Since(start),
		})
	}
	return err
}

type connectResult struct {
	host     *Host
	method   Method
	cacheHit bool
	sockets  int
}

func (n *Negotiator) connect(ctx context.Context, open func(ctx context.Context) error, res *connectResult) error {
	var errs []error
	var notPreferred *attempt
	for i := range n.cfg.Hosts {
		h := &n.cfg.Hosts[i]
		res.host = h
		final, err := n.connectHost(ctx, h, open, res, &notPreferred)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
		if final {
			break
		}
	}
	if notPreferred != nil {
		// target_session_attrs=prefer-standby: no preferred server; take the first acceptable one,
		// as pgconn.connectPreferred does.
		at := notPreferred.retry()
		at.ignoreNotPreferred = true
		err := n.run(ctx, at, open)
		res.sockets += int(at.sockets.Load())
		if err == nil {
			res.host, res.method = at.host, at.method
			return nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// connectHost tries one host: decide, resolve, then every address with every method.
// final reports that no other host should be tried.
func (n *Negotiator) connectHost(ctx context.Context, h *Host, open func(context.Context) error, res *connectResult, notPreferred **attempt) (final bool, err error) {
	creds := n.credentials(ctx, h)
	key := Key{Host: h.Host, Port: h.Port, Principal: creds.Principal}
	retried := false
	for {
		plan, in, leader, err := n.decide(ctx, h, key, creds)
		if err != nil {
			if errors.Is(err, ErrGSSNoCredentials) && creds.Missing != "" {
				err = fmt.Errorf("%w: %s", err, creds.Missing)
			}
			return false, err
		}
		final, opened, err := n.tryHost(ctx, h, key, plan, in, leader, open, res, notPreferred)
		if leader {
			n.cfg.Cache.EndProbe(key)
		}
		if err == nil || final || retried || !plan.CacheHit() || !opened {
			return final, err
		}
		// A plan made from a remembered answer failed after reaching the server: the answer
		// may be wrong. Forget it and negotiate this host again as libpq would.
		n.cfg.Cache.Forget(key)
		if n.trace.Fallback != nil {
			n.trace.Fallback(ctx, FallbackInfo{Host: h.Host, Reason: "remembered answer may be stale: negotiating again", NewConnection: true})
		}
		retried = true
	}
}

// decide makes the plan for h, waiting for another connect's probe when one is running.
func (n *Negotiator) decide(ctx context.Context, h *Host, key Key, creds GSSCredentials) (plan Plan, in Input, leader bool, err error) {
	waited := false
	for {
		in = Input{
			SSLMode:    h.SSLMode,
			GSSEncMode: n.cfg.GSSEncMode,
			DirectSSL:  n.cfg.DirectSSL,
			UnixSocket: h.UnixSocket(),
			Known:      n.cfg.Cache.Known(key),

			GSSCredentials: creds.Valid,
			GSSGeneration:  creds.Generation,
		}
		plan, err = Decide(in)
		if err != nil {
			return plan, in, false, err
		}
		if plan.Learns && n.cfg.Cache.remembers() {
			wait, lead := n.cfg.Cache.BeginProbe(key, in.Known)
			if !lead {
				if err := n.waitProbe(ctx, h, wait); err != nil {
					return plan, in, false, err
				}
				waited = true
				continue
			}
			leader = true
		}
		if n.trace.Decision != nil {
			n.trace.Decision(ctx, DecisionInfo{Host: h.Host, Port: h.Port, Input: in, Plan: plan, Waited: waited})
		}
		return plan, in, leader, nil
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

func (n *Negotiator) lookup(ctx context.Context, h *Host) ([]string, error) {
	if _, err := netip.ParseAddr(h.Host); err == nil || h.UnixSocket() {
		return []string{h.Host}, nil
	}
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
		return nil, fmt.Errorf("failed to resolve host %q: %w", h.Host, err)
	}
	return addrs, nil
}

// tryHost runs the plan on every address of h. opened reports that some socket reached the server.
func (n *Negotiator) tryHost(ctx context.Context, h *Host, key Key, plan Plan, in Input, leader bool,
	open func(context.Context) error, res *connectResult, notPreferred **attempt,
) (final, opened bool, err error) {
	res.cacheHit = plan.CacheHit() || (in.Known.SSL != AnswerUnknown && slices.Contains(plan.Methods(), MethodSSL))
	addrs, err := n.lookup(ctx, h)
	if err != nil {
		return false, false, err
	}
	var errs []error
	for _, addr := range addrs {
		var reuse net.Conn
		methods := plan.Methods()
		for i, m := range methods {
			at := &attempt{n: n, host: h, key: key, addr: addr, method: m, known: in.Known, gssGeneration: in.GSSGeneration}
			// The probe of a plan that starts with SSL ends with the answer to SSLRequest; one
			// that starts with GSS ends when this host's connect does (GSS can still fail
			// after 'G', during authentication).
			at.leader.Store(leader && i == 0 && m == MethodSSL)
			at.reuse.Store(connBox(reuse))
			err := n.run(ctx, at, open)
			res.sockets += int(at.sockets.Load())
			opened = opened || at.reached.Load()
			if m == MethodGSS {
				n.learnGSS(at, err)
			}
			if err == nil {
				res.method = m
				return false, true, nil
			}
			reuse = at.takeReuse()
			var npErr *pgconn.NotPreferredError
			if errors.As(err, &npErr) && *notPreferred == nil {
				*notPreferred = at
			}
			// When no socket could be opened the next method would not fare better: like
			// libpq, go on with the next address instead.
			var next Method
			if i+1 < len(methods) && (at.reached.Load() || reuse != nil) {
				next = methods[i+1]
			}
			if Answer(at.sslAnswer.Load()) == AnswerNo && m == MethodSSL && h.SSLMode.requiresTLS() {
				err = fmt.Errorf("%w (sslmode=%s, host %s)", ErrSSLRequired, h.SSLMode, h.Host)
			}
			if at.gssAnswer == AnswerNo && n.cfg.GSSEncMode == GSSEncModeRequire {
				err = fmt.Errorf("%w (host %s)", ErrGSSRequired, h.Host)
			}
			errs = append(errs, err)
			if code := sqlState(err); code != "" && isFinalServerError(code) {
				closeConn(reuse)
				return true, true, joinErrs(errs)
			}
			if next != 0 || reuse == nil {
				n.fallback(ctx, h, m, next, at, err, reuse != nil)
			}
			if next == 0 {
				break
			}
		}
		closeConn(reuse)
	}
	return false, opened, joinErrs(errs)
}

func (n *Negotiator) fallback(ctx context.Context, h *Host, from, to Method, at *attempt, err error, sameSocket bool) {
	if n.trace.Fallback == nil {
		return
	}
	reason := "connection failed"
	switch {
	case sameSocket && from == MethodGSS:
		reason = "server refused GSSENCRequest"
	case sameSocket:
		reason = "server refused SSLRequest"
	case at.gssErr != "":
		reason = at.gssErr
	case at.tlsErr:
		reason = "TLS handshake failed"
	case sqlState(err) != "":
		reason = "server error " + sqlState(err)
	case !at.reached.Load():
		reason = "could not connect"
	}
	n.trace.Fallback(ctx, FallbackInfo{Host: h.Host, From: from, To: to, Reason: reason, NewConnection: !sameSocket && to != 0})
}

func (n *Negotiator) run(ctx context.Context, at *attempt, open func(context.Context) error) error {
	err := open(context.WithValue(ctx, attemptKey{}, at))
	at.leader.Store(false)
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
	cfg.LookupFunc = at.lookup
	cfg.DialFunc = at.dial
	afterNetConnect := cfg.AfterNetConnect
	cfg.AfterNetConnect = func(ctx context.Context, cfg *pgconn.Config, conn net.Conn) (net.Conn, error) {
		out, err := at.afterNetConnect(ctx, conn)
		if err == nil && afterNetConnect != nil {
			out, err = afterNetConnect(ctx, cfg, out)
		}
		if err != nil && out == nil {
			// pgx calls Close on what AfterNetConnect returns, even with an error.
			out = conn
		}
		return out, err
	}
	buildFrontend := cfg.BuildFrontend
	cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		return buildFrontend(&authObserver{r: r, at: at}, w)
	}
	if at.ignoreNotPreferred {
		cfg.ValidateConnect = nil
	}
	return nil
}

type attemptKey struct{}

// attempt is one pgx connection attempt: one host, one address, one method. Its dial function
// stays in the connection's pgx configuration and also serves CancelRequest, so what it touches
// after the connect is safe for concurrent use.
type attempt struct {
	n      *Negotiator
	host   *Host
	key    Key
	addr   string
	method Method
	known  Known

	gssGeneration uint64
	// leader is set while this attempt's connect leads the probe of its key; a cancel request
	// dialled later through the same attempt must not end another connect's probe.
	leader atomic.Bool

	ignoreNotPreferred bool

	reuse   atomic.Pointer[connHolder] // a socket left open after 'N', for the next method
	sockets atomic.Int32               // sockets opened
	reached atomic.Bool                // some socket connected

	sslAnswer atomic.Uint32 // Answer to SSLRequest on this attempt's socket

	// Written during the connect only (one goroutine).
	gssAnswer      Answer // answer to GSSENCRequest
	gssEstablished bool   // the GSS context was established
	gssErr         string // the GSS step that failed, as a fallback reason
	tlsErr         bool
	authMethod     string
	startupCtx     context.Context
	startupMu      sync.Mutex
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

func (at *attempt) retry() *attempt {
	return &attempt{n: at.n, host: at.host, key: at.key, addr: at.addr, method: at.method, known: at.known}
}

func (at *attempt) lookup(ctx context.Context, host string) ([]string, error) {
	return []string{at.addr}, nil
}

func (at *attempt) dial(ctx context.Context, network, address string) (net.Conn, error) {
	tr := &at.n.trace
	info := DialInfo{Host: at.host.Host, Address: address, Method: at.method}
	conn := at.takeReuse()
	if conn == nil {
		dctx := ctx
		if tr.TCPConnectStart != nil {
			dctx = tr.TCPConnectStart(ctx, info)
		}
		var err error
		conn, err = at.n.cfg.DialFunc(ctx, network, address)
		if tr.TCPConnectDone != nil {
			tr.TCPConnectDone(dctx, err)
		}
		if err != nil {
			return nil, err
		}
		at.sockets.Add(1)
		at.reached.Store(true)
	}
	switch at.method {
	case MethodSSL:
		return &sslRequestConn{Conn: conn, at: at, ctx: ctx, info: info}, nil
	case MethodGSS:
		return at.startGSS(ctx, conn, info)
	}
	return conn, nil
}

// onSSLAnswer records the server's answer to SSLRequest and releases waiting connects.
func (at *attempt) onSSLAnswer(a Answer) {
	at.sslAnswer.Store(uint32(a))
	at.n.cfg.Cache.SetSSL(at.key, a)
	if at.leader.Load() {
		at.n.cfg.Cache.EndProbe(at.key)
	}
}

func (at *attempt) afterNetConnect(ctx context.Context, conn net.Conn) (net.Conn, error) {
	tr := &at.n.trace
	if tc, ok := conn.(*tls.Conn); ok {
		// pgx leaves the handshake to the first write; do it now so that it is a step of its own.
		hctx := ctx
		if tr.TLSHandshakeStart != nil {
			hctx = tr.TLSHandshakeStart(ctx, TLSHandshakeStartInfo{ServerName: at.host.Host, Direct: at.method == MethodDirectSSL})
		}
		err := tc.HandshakeContext(ctx)
		if tr.TLSHandshakeDone != nil {
			st := tc.ConnectionState()
			tr.TLSHandshakeDone(hctx, TLSHandshakeDoneInfo{Version: st.Version, CipherSuite: st.CipherSuite, Err: err})
		}
		if err != nil {
			at.tlsErr = true
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

func (at *attempt) endStartup(err error) {
	at.startupMu.Lock()
	sctx := at.startupCtx
	at.startupCtx = nil
	at.startupMu.Unlock()
	if sctx != nil && at.n.trace.StartupDone != nil {
		at.n.trace.StartupDone(sctx, StartupDoneInfo{AuthMethod: at.authMethod, SQLState: sqlState(err), Err: err})
	}
}

// sslRequestConn watches pgx's SSLRequest on a new socket: it reports the one-byte answer, and
// after 'N' keeps the socket open when pgx closes it, so that the next method goes on on the
// same socket as libpq does (pgx would dial again).
type sslRequestConn struct {
	net.Conn
	at    *attempt
	ctx   context.Context
	info  DialInfo
	state uint8 // 0: nothing sent, 1: SSLRequest sent, 2: answered or not an SSLRequest
	rctx  context.Context
	keep  bool
}

var sslRequestPacket = [8]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f} // Int32(8) Int32(80877103)

func (c *sslRequestConn) Write(b []byte) (int, error) {
	if c.state == 0 {
		c.state = 2
		if len(b) == len(sslRequestPacket) && [8]byte(b) == sslRequestPacket {
			c.state = 1
			c.rctx = c.ctx
			if tr := &c.at.n.trace; tr.SSLRequestStart != nil {
				c.rctx = tr.SSLRequestStart(c.ctx, c.info)
			}
		}
	}
	return c.Conn.Write(b)
}

func (c *sslRequestConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.state == 1 && (n > 0 || err != nil) {
		c.state = 2
		a := AnswerUnknown
		if n > 0 {
			switch b[0] {
			case 'S':
				a = AnswerYes
			case 'N':
				a = AnswerNo
				c.keep = true
			default:
				err2 := fmt.Errorf("unexpected answer %q to SSLRequest", b[0])
				if err == nil {
					err = err2
				}
			}
		}
		if a != AnswerUnknown {
			c.at.onSSLAnswer(a)
		}
		if tr := &c.at.n.trace; tr.SSLRequestDone != nil {
			tr.SSLRequestDone(c.rctx, RequestDoneInfo{Answer: a, CacheHit: c.at.known.SSL != AnswerUnknown, Err: err})
		}
	}
	return n, err
}

func (c *sslRequestConn) Close() error {
	if c.keep {
		c.keep = false
		c.at.reuse.Store(&connHolder{c.Conn})
		return nil
	}
	return c.Conn.Close()
}

// authObserver reads the backend's first messages to learn which authentication the server
// asked for (AuthenticationOk at once is trust). It reads only message types and the
// authentication code, never a message body beyond that; after the first authentication
// message or an error it is a plain pass-through.
type authObserver struct {
	r    io.Reader
	at   *attempt
	done bool
	hdr  [9]byte // type, length, first 4 body bytes
	have int
	skip int // body bytes of the current non-authentication message still to pass
}

func (o *authObserver) Read(b []byte) (int, error) {
	n, err := o.r.Read(b)
	if !o.done {
		o.observe(b[:n])
	}
	return n, err
}

func (o *authObserver) observe(p []byte) {
	for len(p) > 0 && !o.done {
		if o.skip > 0 {
			k := min(o.skip, len(p))
			o.skip -= k
			p = p[k:]
			continue
		}
		k := min(len(o.hdr)-o.have, len(p))
		copy(o.hdr[o.have:], p[:k])
		o.have += k
		p = p[k:]
		if o.have < 5 {
			continue
		}
		length := int(uint32(o.hdr[1])<<24 | uint32(o.hdr[2])<<16 | uint32(o.hdr[3])<<8 | uint32(o.hdr[4]))
		switch o.hdr[0] {
		case 'R':
			if o.have < 9 {
				continue
			}
			o.at.authMethod = authMethodName(uint32(o.hdr[5])<<24 | uint32(o.hdr[6])<<16 | uint32(o.hdr[7])<<8 | uint32(o.hdr[8]))
			o.done = true
		case 'E':
			o.done = true
		default:
			// A message before authentication (NegotiateProtocolVersion): skip its body.
			body := length - 4
			consumed := o.have - 5
			o.have = 0
			o.skip = body - consumed
			if o.skip < 0 {
				o.done = true
			}
		}
	}
}

// authMethodName names an AuthenticationRequest code (protocol-message-formats.html).
func authMethodName(code uint32) string {
	switch code {
	case 0:
		return "trust"
	case 3:
		return "password"
	case 5:
		return "md5"
	case 7:
		return "gss"
	case 9:
		return "sspi"
	case 10:
		return "scram-sha-256"
	}
	return ""
}

func sqlState(err error) string {
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

func joinErrs(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}
