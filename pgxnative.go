package pgconnector

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgconnector/pgconnector/internal/connstring"
	"github.com/pgconnector/pgconnector/internal/keepalive"
	"github.com/pgconnector/pgconnector/internal/pgxconfig"
	"github.com/pgconnector/pgconnector/internal/replay"
	"github.com/pgconnector/pgconnector/tracing"
)

// pgx's own API, without database/sql: a *pgx.Conn (ConnectPgx) or a *pgxpool.Pool (OpenPool,
// PgxPoolConfig) whose connections the connector opens as it opens those of a sql.DB.
//
// pgx cannot be given a connection that is already open: pgx.ConnectConfig, which pgxpool calls
// for every connection, dials and starts the session itself. So the connector negotiates first
// (negotiatePgx: the same Negotiator.Connect as Connect, whose attempts are pgconn connects
// configured by Negotiator.Configure), takes the session it established from pgconn
// (SyncConn, Hijack), and gives pgx.ConnectConfig a DialFunc that returns that session as a
// replay.Conn: pgx's StartupMessage is dropped, pgx reads the server's greeting again
// (AuthenticationOk, ParameterStatus, BackendKeyData, ReadyForQuery, and
// NegotiateProtocolVersion if there was one), and every byte after that is the session's, over
// the TLS or GSSAPI-encrypting connection or the socket the negotiation gave.

// PgxConfig returns the connector's connection settings for pgx: a copy of what New parsed
// (Settings().Config), without target_session_attrs' ValidateConnect (the connector checks
// target_session_attrs during the negotiation), with the connector's statement tracer as its
// Tracer (below). Change what you need (Tracer, OnNotice, BuildContextWatcherHandler,
// RuntimeParams, the statement cache...) and pass it to [Connector.ConnectPgx]: only the
// connector can open its connections. pgx.ConnectConfig with it
// fails with an error saying so, and so does a pool of it whose BeforeConnect is not the
// connector's.
//
// Its host, port, TLS, Kerberos and lookup settings are not used: the connector's, from its
// connection string, are ([WithTLSConfigFunc] changes TLS for both). A DialFunc you set dials the
// sockets of the connects made with this configuration (in place of the connector's, or of
// [WithDialFunc]'s), with the connection string's keepalive keys. ConnString() is the string
// given to [New]. The others are the connection's: user, password and database (the
// negotiation authenticates with them; a Password left empty is each host's password-file entry,
// looked up at each attempt as for database/sql), run-time parameters, min/max_protocol_version,
// require_auth, channel_binding and sslcertmode (checked during the negotiation), and pgx's hooks:
// BuildFrontend, OnNotice and OnPgError serve each attempt of the negotiation (the notices and
// errors of the startup come there) and the connection pgx returns; AfterNetConnect runs on each
// attempt's socket; AfterConnect and ValidateConnect run once, on the connection pgx returns
// (ValidateConnect must not return pgconn.NotPreferredError: there is no other connect to fall
// back to). ConnectTimeout, when it differs from connect_timeout (which the negotiator counts per
// address, as libpq), bounds the whole negotiation: pgxpool's default of 2 minutes does when the
// string sets no connect_timeout.
//
// Its Tracer is a tracing.PgxTracer whose tracing.StatementConfig is the one the connector's
// options give its database/sql interceptor (WithQueryText, WithSpanNameFunc, WithSpanFilter,
// WithRootSpans, WithAttributesFunc, WithCancelAsError, the providers; WithPingSpans and
// WithSQLCommenter do nothing there), with each connection's own database as db.namespace: the
// statements, batches, COPYs and prepares run on the connection are spans and
// db.client.operation.duration measurements, as tracing.PgxTracer describes. One Tracer for all
// the connector's pgx connections: to add a tracer of your own, compose them,
//
//	cfg.Tracer = multitracer.New(cfg.Tracer, yours) // github.com/jackc/pgx/v5/multitracer
//
// or replace it (a Tracer of yours alone: no statement spans of the connector's). With
// WithStatementSpans(false) Tracer is nil: set yours alone (a multitracer holding nil panics at
// the first statement).
//
// Of the connector's options, WithBeforeConnect runs for each attempt as for database/sql (after
// the hooks of the configuration), on a copy of the configuration made for the attempt: what it
// changes is that attempt's (its password, run-time parameters, the notices of its startup), and
// its changes to the hooks, Tracer and statement settings do not reach the connection pgx
// returns, nor this configuration; WithAfterConnect and WithResetSession are database/sql's only
// (pgxpool's AfterConnect and PrepareConn are their counterparts). The connect hooks
// (pgx.ConnectTracer) of the Tracer, the connector's or yours, are not called: pgx's own connect
// is only the handover of the session the connector established, and the connector's connect
// span covers the connect.
func (c *Connector) PgxConfig() *pgx.ConnConfig {
	cc := c.settings.Config.Copy()
	cc.ValidateConnect = nil
	cc.DialFunc = notThroughConnector // ConnString() is New's string (set there, Copy keeps it)
	if c.pgxTracer != nil {
		cc.Tracer = c.pgxTracer
	}
	return cc
}

// ConnectPgx opens one connection for pgx with the connector's negotiation, decision cache,
// GSSAPI encryption and connect spans, as [Connector.Connect] opens one for database/sql. cfg
// is nil (the connector's settings: [Connector.PgxConfig]) or a configuration PgxConfig
// returned, changed as that says; it is copied. The caller closes the connection.
//
// An error of the negotiation is returned as it is: a *negotiation.ConnectError naming the host
// and the step that failed (or a context error), as Connect returns it. The connection's
// statements are spans of the configuration's Tracer: with cfg nil, or a PgxConfig whose Tracer
// was kept, the connector's (see PgxConfig; none with WithStatementSpans(false)).
func (c *Connector) ConnectPgx(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	if cfg == nil {
		cfg = c.PgxConfig()
	} else {
		cfg = cfg.Copy()
	}
	d, err := c.negotiatePgx(ctx, cfg)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		d.Abandon() // in case pgx failed before its dial
		return nil, err
	}
	return conn, nil
}

// PgxPoolConfig returns a pgxpool configuration whose connections the connector opens: its
// ConnConfig is [Connector.PgxConfig]'s (all it says holds here) and its BeforeConnect runs the
// negotiation for each new connection of the pool. The pool settings are pgxpool's, from the
// connection string's pool_* keys (pool_max_conns=10...) or pgxpool's defaults. Pass it to
// pgxpool.NewWithConfig, or use [Connector.OpenPool].
//
// What pgx lets an application change on the configuration keeps pgx's meaning. BeforeConnect:
// a function of yours may wrap the connector's (calling yours first, so that what it changes is
// what the negotiation uses) or replace it, as pgx users fetch a token:
//
//	cfg.BeforeConnect = func(ctx context.Context, cc *pgx.ConnConfig) error {
//		cc.Password = token(ctx) // an IAM token, say
//		return nil
//	}
//
// Replaced, the negotiation runs in the configuration's ConnConfig.AfterNetConnect, after
// yours, with what yours left in the connection's configuration. Keep one of the two: with both
// replaced, the connect fails with an error saying so. ConnConfig.DialFunc: yours dials the
// sockets of this pool's connects (each attempt's, with the connection string's keepalive keys
// applied as to [WithDialFunc]'s) in place of the connector's dialer (the connector's background
// rechecks of a down host use its own). With BeforeConnect replaced, pgx first dials the
// string's first host through yours itself, before AfterNetConnect: that socket is closed
// unused, and when that host is down the connect fails there, the other hosts untried; wrap
// BeforeConnect instead (call the one PgxPoolConfig set after yours), which dials once.
// ConnString() is the string given to [New]. The pool settings, AfterConnect, BeforeAcquire,
// PrepareConn, AfterRelease, BeforeClose, ShouldPing and the ConnConfig fields PgxConfig
// describes are used as pgx uses them.
//
// ConnConfig.TLSConfig, Fallbacks and LookupFunc are the connector's (nil, and one returning the host): its TLS
// and lookup are used (WithTLSConfigFunc, WithLookupFunc); set, the connect fails with an error
// naming the field and the option.
//
// A failed negotiation is the error of pool.Acquire (and of the pool's other calls that
// connect) as it is: a *negotiation.ConnectError naming the host and step, not wrapped by pgx
// (with BeforeConnect replaced, wrapped by pgx's connect error: errors.As finds it).
// The pool needs the connector to open connections: close the pool before the connector.
//
// Its ConnConfig.Tracer is a new tracing.PoolTracer, composed (github.com/jackc/pgx/v5/multitracer)
// with PgxConfig's statement tracer: a pgxpool.acquire span per Acquire under a recording span
// of the caller (the connect span of a connection the Acquire opens is its child), the pool
// measurements db.client.connection.wait_time, .use_time and .timeouts, and the statement spans
// and measurements that PgxConfig describes, shaped by the same options. WithStatementSpans(false)
// turns the acquire and statement spans off (the Tracer is then the PoolTracer alone); the pool
// measurements stay. To add a tracer of your own, compose it with them:
//
//	cfg.ConnConfig.Tracer = multitracer.New(cfg.ConnConfig.Tracer, yours)
//
// (multitracer passes pgxpool's acquire and release hooks on); a Tracer replaced outright loses
// the acquire spans, the pool measurements and the statement spans.
func (c *Connector) PgxPoolConfig() (*pgxpool.Config, error) {
	pc, _, err := c.pgxPoolConfig()
	return pc, err
}

// pgxPoolConfig is PgxPoolConfig, with the PoolTracer its Tracer holds.
func (c *Connector) pgxPoolConfig() (*pgxpool.Config, *tracing.PoolTracer, error) {
	cc := c.PgxConfig()
	pc, err := connstring.PoolConfig(c.settings, cc)
	if err != nil {
		return nil, nil, err
	}
	pt := c.newPoolTracer()
	cc.Tracer = pt
	if c.pgxTracer != nil {
		// Without its connect hooks: the connector's connect span covers a pool's connect, also
		// when the negotiation runs in AfterNetConnect, after pgx began its own connect.
		cc.Tracer = multitracer.New(pt, tracing.WithoutConnectTrace(c.pgxTracer))
	}
	// A pool connect without the connector's BeforeConnect (an application's replaced it)
	// is negotiated in AfterNetConnect, on the configuration pgxpool made for it: pgx's own
	// TLS, fallbacks and host lookup must not run before (poolAfterNetConnect).
	cc.DialFunc = poolDial
	cc.AfterNetConnect = c.poolAfterNetConnect
	cc.TLSConfig, cc.Fallbacks = nil, nil
	cc.LookupFunc = sameHost
	pc.ConnConfig = cc
	pc.BeforeConnect = c.poolBeforeConnect
	return pc, pt, nil
}

// newPoolTracer is the tracing.PoolTracer of one pool: its acquire spans (unless
// WithStatementSpans(false)) and measurements.
func (c *Connector) newPoolTracer() *tracing.PoolTracer {
	cfg := tracing.PoolTracerConfig{
		TracerProvider: c.tp,
		Metrics:        c.metrics,
		Database:       c.settings.Config.Database,
		User:           c.settings.Config.User,
		NoSpans:        c.tp == nil,
	}
	if hs := c.settings.Hosts; len(hs) == 1 {
		// The acquire spans' server.address and server.port when they start (no attribute
		// added to them at their end).
		cfg.Host, cfg.Port = hs[0].Host, hs[0].Port
	}
	return tracing.NewPoolTracer(cfg)
}

// OpenPool returns pgxpool.NewWithConfig(ctx, cfg) for the cfg of [Connector.PgxPoolConfig]: a
// pool whose connections are opened by the connector. As pgxpool's, it connects only when
// asked to (Acquire and the calls that acquire, pool_min_conns). Close the pool before the
// connector.
//
// Besides the acquire and statement spans and the measurements of PgxPoolConfig's tracer, the
// pool's metrics are reported to the meter provider, read from pool.Stat() at each collection,
// under the names
// [Connector.OpenDB] uses: db.client.connection.count (idle, used), .max (MaxConns), .idle.min
// (MinIdleConns), .pending_requests (the Acquires under way), pgconnector.connection.waits and
// pgconnector.connection.wait_time (the Acquires that waited for a connection, and their total
// wait), with db.client.connection.pool.name as OpenDB's (tracing.Metrics has the table of what
// each pool reports). pgxpool.Pool has no close hook: they stop with [Connector.Close].
func (c *Connector) OpenPool(ctx context.Context) (*pgxpool.Pool, error) {
	cfg, pt, err := c.pgxPoolConfig()
	if err != nil {
		return nil, err
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	unregister := c.metrics.ObservePgxPool(p, pt)
	c.mu.Lock()
	c.onClose = append(c.onClose, unregister)
	c.mu.Unlock()
	return p, nil
}

// poolBeforeConnect is PgxPoolConfig's BeforeConnect. pgxpool calls pgx.ConnectConfig with cc
// right after it; should that not happen (a BeforeConnect wrapping this one fails after it), the
// session is closed when cc is collected.
func (c *Connector) poolBeforeConnect(ctx context.Context, cc *pgx.ConnConfig) error {
	if err := notHonoured(&cc.Config); err != nil {
		return err
	}
	d, err := c.negotiatePgx(ctx, cc)
	if err != nil {
		return err
	}
	runtime.AddCleanup(cc, (*replay.Dial).Abandon, d)
	return nil
}

// poolDial is the DialFunc of PgxPoolConfig's configuration. The connector's BeforeConnect
// replaces it (negotiatePgx); when an application's BeforeConnect replaced that one, pgx calls it
// and poolAfterNetConnect negotiates in its place, on the pendingConn it returns.
func poolDial(context.Context, string, string) (net.Conn, error) {
	return pendingConn{}, nil
}

// notHonoured names the fields of a PgxPoolConfig configuration, set by the application, that
// the connector cannot use, with the option to use instead: the TLS configuration (the
// connector's TLS follows the connection string's keys, each attempt's is made by the
// negotiation) and the host lookup (the connector resolves the hosts).
func notHonoured(cfg *pgconn.Config) error {
	switch {
	case cfg.TLSConfig != nil || len(cfg.Fallbacks) > 0:
		return errors.New("pgconnector: ConnConfig.TLSConfig and Fallbacks of Connector.PgxPoolConfig are the connector's " +
			"(the connection string's sslmode and TLS keys): use WithTLSConfigFunc")
	case !pgxconfig.SameFunc(cfg.LookupFunc, sameHost):
		return errors.New("pgconnector: ConnConfig.LookupFunc of Connector.PgxPoolConfig is not used (the connector resolves the hosts): " +
			"use WithLookupFunc, write hostaddr in the connection string, or map addresses in the ConnConfig.DialFunc")
	}
	return nil
}

// sameHost is the LookupFunc of PgxPoolConfig's configuration: the connector resolves the hosts.
func sameHost(_ context.Context, host string) ([]string, error) { return []string{host}, nil }

// pendingConn is what poolDial returns: no connection yet. Reading or writing it fails (an
// AfterNetConnect of the application's replaced poolAfterNetConnect too).
type pendingConn struct {
	net.Conn // nil: only the methods below are called
}

var errPoolHooks = errors.New("pgconnector: pgx used the connection of Connector.PgxPoolConfig's DialFunc itself: the connector " +
	"opens the pool's connections in the configuration's BeforeConnect, or in its ConnConfig.AfterNetConnect when BeforeConnect " +
	"was replaced, and both were replaced (keep one: wrap BeforeConnect, calling the one PgxPoolConfig set after yours), " +
	"or ConnConfig.TLSConfig was set (pgx's TLS runs before AfterNetConnect: use WithTLSConfigFunc)")

func (pendingConn) Read([]byte) (int, error)         { return 0, errPoolHooks }
func (pendingConn) Write([]byte) (int, error)        { return 0, errPoolHooks }
func (pendingConn) Close() error                     { return nil }
func (pendingConn) SetDeadline(time.Time) error      { return nil }
func (pendingConn) SetReadDeadline(time.Time) error  { return nil }
func (pendingConn) SetWriteDeadline(time.Time) error { return nil }

// poolAfterNetConnect is the AfterNetConnect of PgxPoolConfig's configuration. When the
// connector's BeforeConnect ran, negotiatePgx removed it. Otherwise (an application's
// BeforeConnect replaced the connector's) conn is poolDial's pendingConn, or the connection of
// a DialFunc of the application's, which is closed: the negotiation runs here, with config as the
// application's BeforeConnect left it (its Password, a token say), dialing through that
// DialFunc, and the session it established is the connection pgx goes on with.
func (c *Connector) poolAfterNetConnect(ctx context.Context, config *pgconn.Config, conn net.Conn) (net.Conn, error) {
	// pgconn closes the connection returned with an error: conn, closed already.
	conn.Close()
	if err := notHonoured(config); err != nil {
		return conn, err
	}
	cc := c.PgxConfig()
	cc.Config = *config.Copy()
	d, err := c.negotiatePgx(ctx, cc)
	if err != nil {
		return conn, err
	}
	// What pgx keeps of the connect: the session's address, and cancel requests sent as the
	// session's (replay.Dial).
	config.Host, config.Port, config.DialFunc = cc.Host, cc.Port, cc.DialFunc
	return d.DialFunc(ctx, "tcp", net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
}

var errNotThroughConnector = errors.New("pgconnector: this pgx configuration connects only through its Connector: " +
	"use Connector.ConnectPgx, or a pool of Connector.PgxPoolConfig that keeps its BeforeConnect")

// notThroughConnector is the DialFunc of PgxConfig's configuration, replaced by negotiatePgx.
func notThroughConnector(context.Context, string, string) (net.Conn, error) {
	return nil, errNotThroughConnector
}

// negotiatePgx runs the negotiation for the connection that pgx.ConnectConfig(ctx, cc) is about
// to open and makes cc open the session it established. ctx is the connect's: its values (the
// caller's span) and its end; pgxpool's is the Acquire's values, ended by the pool's Close.
func (c *Connector) negotiatePgx(ctx context.Context, cc *pgx.ConnConfig) (*replay.Dial, error) {
	// pgx counts ConnectTimeout per address; connect_timeout is the negotiator's, per address
	// too (as libpq). Another value (pgxpool's 2-minute default when the string has no
	// connect_timeout, or the caller's) bounds the whole negotiation, as it would bound pgx's.
	if d := cc.ConnectTimeout; d > 0 && d != c.settings.Config.ConnectTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	// A DialFunc of the application's (set on PgxConfig's or PgxPoolConfig's configuration)
	// dials this connect's sockets, with the connection string's keepalive keys applied as to
	// WithDialFunc's (connectDialer).
	if f := cc.DialFunc; !pgxconfig.SameFunc(f, notThroughConnector) && !pgxconfig.SameFunc(f, poolDial) {
		ctx = context.WithValue(ctx, dialKey{}, pgconn.DialFunc(keepalive.Wrap(f, c.settings.Keepalives)))
	}
	base := cc.Copy()
	base.AfterConnect = nil // the caller's runs once, on the connection pgx makes
	if pgxconfig.SameFunc(base.AfterNetConnect, c.poolAfterNetConnect) {
		base.AfterNetConnect = nil // PgxPoolConfig's: this is the negotiation
	}
	var (
		hc  *pgconn.HijackedConn
		npv []byte
	)
	// The open function of Connect, with pgconn instead of the stdlib connector: one attempt,
	// configured by Negotiator.Configure, whose established session is taken from pgconn.
	ctx, note := connstring.WithPassfileNote(ctx)
	err := c.negotiator.Connect(ctx, func(ctx context.Context) error {
		cfg := base.Copy()
		var rec *replay.Recorder
		build := cfg.BuildFrontend
		cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
			rec = replay.NewRecorder(r)
			return build(rec, w)
		}
		if err := c.configureAttempt(ctx, cfg); err != nil {
			return err
		}
		pg, err := pgconn.ConnectConfig(ctx, &cfg.Config)
		if err != nil {
			return err
		}
		// Nothing of the session may stay in pgconn's buffers (SyncConn, then Hijack).
		if err := pg.SyncConn(ctx); err != nil {
			pg.Close(ctx)
			return err
		}
		h, err := pg.Hijack()
		if err != nil {
			pg.Close(ctx)
			return err
		}
		hc = h
		if rec != nil {
			npv = rec.NegotiateProtocolVersion()
		}
		return nil
	})
	if err != nil {
		return nil, note.Wrap(err)
	}
	g := replay.Greeting{
		NegotiateProtocolVersion: npv,
		ParameterStatuses:        hc.ParameterStatuses,
		PID:                      hc.PID,
		SecretKey:                hc.SecretKey,
		TxStatus:                 hc.TxStatus,
	}
	d := replay.NewDial(hc, replay.NewConn(hc.Conn, g.Encode()))

	// The session's: pgx's Config().Host and Port say where it went.
	cc.Host, cc.Port = hc.Config.Host, hc.Config.Port
	cc.DialFunc = d.DialFunc
	cc.LookupFunc = sameHost
	// What the attempt that established the session did or checked is not done again: TLS,
	// the other hosts, the client certificate, channel binding and require_auth checks, the
	// caller's AfterNetConnect.
	cc.TLSConfig = nil
	cc.Fallbacks = nil
	cc.SSLCertMode = ""
	cc.ChannelBinding = ""
	cc.RequireAuth = ""
	cc.AfterNetConnect = nil
	// The connector's connect span covers the connect; pgx's own connect is the handover of
	// the session and is not traced again (a second postgresql.connect from a PgxTracer, the
	// connector's or one the caller set, or from another ConnectTracer).
	cc.Tracer = tracing.WithoutConnectTrace(cc.Tracer)
	return d, nil
}

// dialKey is the context key of a connect's own dial function: a DialFunc an application set on
// a pgx configuration of the connector (negotiatePgx).
type dialKey struct{}

// connectDialer is the negotiator's dial function: the connect's own (dialKey) when it has one,
// else dial, the connector's (WithDialFunc's, or the one of the connection string's keys).
func connectDialer(dial pgconn.DialFunc) pgconn.DialFunc {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		if f, ok := ctx.Value(dialKey{}).(pgconn.DialFunc); ok {
			return f(ctx, network, address)
		}
		return dial(ctx, network, address)
	}
}
