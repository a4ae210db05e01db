package pgconnector_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/negotiation"
)

// connectWay opens one connection of a Connector by one of its APIs, runs a query that returns
// one text column on it (none when q is empty) and closes it.
type connectWay struct {
	name  string
	query func(ctx context.Context, c *pgconnector.Connector, q string) (string, error)
}

var connectWays = []connectWay{
	{"database/sql", func(ctx context.Context, c *pgconnector.Connector, q string) (string, error) {
		dc, err := c.Connect(ctx)
		if err != nil {
			return "", err
		}
		defer dc.Close()
		return queryText(ctx, pgconnector.PgxConnOf(dc), q)
	}},
	{"ConnectPgx", func(ctx context.Context, c *pgconnector.Connector, q string) (string, error) {
		conn, err := c.ConnectPgx(ctx, nil)
		if err != nil {
			return "", err
		}
		defer conn.Close(ctx)
		return queryText(ctx, conn, q)
	}},
	{"OpenPool", func(ctx context.Context, c *pgconnector.Connector, q string) (string, error) {
		p, err := c.OpenPool(ctx)
		if err != nil {
			return "", err
		}
		defer p.Close()
		conn, err := p.Acquire(ctx)
		if err != nil {
			return "", err
		}
		defer conn.Release()
		return queryText(ctx, conn.Conn(), q)
	}},
}

func queryText(ctx context.Context, conn *pgx.Conn, q string) (string, error) {
	if q == "" {
		return "", nil
	}
	var s string
	err := conn.QueryRow(ctx, q).Scan(&s)
	return s, err
}

// tlsView is what a hook sees of an attempt's TLS configuration: the fields that carry libpq's
// rules.
type tlsView struct {
	verify, skip bool
	min, max     uint16
	serverName   string
	protos       string
}

func viewOf(c *tls.Config) tlsView {
	if c == nil {
		return tlsView{}
	}
	return tlsView{verify: c.VerifyConnection != nil, skip: c.InsecureSkipVerify, min: c.MinVersion, max: c.MaxVersion,
		serverName: c.ServerName, protos: strings.Join(c.NextProtos, ",")}
}

// A change WithBeforeConnect makes to the TLS configuration of one attempt, which the connector
// refuses, leaves nothing in the configuration later attempts get: against a server whose
// certificate does not carry the host's name (verify-full) and that asks for a cleartext
// password, the connects after the refused one still check the certificate, fail the
// handshake, and the server authenticates no one. For database/sql, ConnectPgx and a pool.
func TestBeforeConnectRefusedTLSChangeLeavesNoTrace(t *testing.T) {
	srv := harness.StartT(t, harness.Options{TLS: true, Auth: "password"})
	// The certificate is for 127.0.0.1 and localhost: host names another name, hostaddr reaches the server.
	dsn := srv.DSN("host=other-name.invalid", "hostaddr=127.0.0.1", "sslmode=verify-full", "sslrootcert="+srv.CAFile)
	changes := []struct {
		name   string
		change func(c *tls.Config)
	}{
		{"VerifyConnection removed", func(c *tls.Config) { c.VerifyConnection, c.InsecureSkipVerify = nil, true }},
		{"MinVersion lowered", func(c *tls.Config) { c.MinVersion = tls.VersionTLS10 }},
		{"MaxVersion raised", func(c *tls.Config) { c.MaxVersion = 0 }},
		{"ServerName changed", func(c *tls.Config) { c.ServerName = "127.0.0.1" }},
		{"NextProtos changed in place", func(c *tls.Config) {
			for i := range c.NextProtos {
				c.NextProtos[i] = "h2"
			}
		}},
		{"all at once", func(c *tls.Config) {
			c.VerifyConnection = nil
			c.MinVersion = tls.VersionTLS10
			for i := range c.NextProtos {
				c.NextProtos[i] = "h2"
			}
		}},
	}
	for _, way := range connectWays {
		for _, ch := range changes {
			t.Run(way.name+"/"+ch.name, func(t *testing.T) {
				var mu sync.Mutex
				var seen []tlsView
				c := newConnector(t, dsn+" ssl_max_protocol_version=TLSv1.3", pgconnector.WithBeforeConnect(func(_ context.Context, cfg *pgx.ConnConfig) error {
					mu.Lock()
					defer mu.Unlock()
					seen = append(seen, viewOf(cfg.TLSConfig))
					if len(seen) == 1 && cfg.TLSConfig != nil {
						ch.change(cfg.TLSConfig)
					}
					return nil
				}))
				defer c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				mark := srv.LogMark()
				_, err := way.query(ctx, c, "")
				if err == nil || !strings.Contains(err.Error(), "WithBeforeConnect") {
					t.Fatalf("connect 1 (the hook changed the TLS configuration): %v, want a refusal naming WithBeforeConnect", err)
				}
				for i := 2; i <= 3; i++ {
					_, err := way.query(ctx, c, "")
					var tlsErr *negotiation.TLSRefusedError
					if err == nil || !errors.As(err, &tlsErr) || !strings.Contains(err.Error(), "other-name.invalid") {
						t.Errorf("connect %d (the hook changed nothing): %v, want the certificate refused for other-name.invalid", i, err)
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if len(seen) != 3 {
					t.Fatalf("the hook ran %d times, want 3 (one attempt per connect)", len(seen))
				}
				if !seen[0].verify || seen[0].max == 0 || !strings.Contains(seen[0].protos, "postgresql") {
					t.Fatalf("connect 1's hook saw %+v: not the connector's configuration", seen[0])
				}
				for i, v := range seen[1:] {
					if v != seen[0] {
						t.Errorf("connect %d's hook saw %+v, want connect 1's before its change %+v", i+2, v, seen[0])
					}
				}
				if log := logAfter(srv, mark); strings.Contains(log, "connection authorized") || strings.Contains(log, "authentication") {
					t.Errorf("the server authenticated a client:\n%s", log)
				}
			})
		}
	}
}

// logAfter is the server log written after mark (srv.LogMark).
func logAfter(srv *harness.Postgres, mark int64) string {
	log := srv.Log()
	if int64(len(log)) < mark {
		return log
	}
	return log[mark:]
}

// A change WithTLSConfigFunc makes in place to a slice of its clone (NextProtos), which the
// connector refuses, leaves nothing behind: the next connect, whose function changes nothing,
// connects.
func TestTLSConfigFuncRefusedChangeLeavesNoTrace(t *testing.T) {
	_, tlsSrv := servers(t)
	for _, way := range connectWays {
		t.Run(way.name, func(t *testing.T) {
			var calls atomic.Int32
			c := newConnector(t, tlsSrv.DSN("sslmode=verify-full", "sslrootcert="+tlsSrv.CAFile),
				pgconnector.WithTLSConfigFunc(func(_ context.Context, _ string, cfg *tls.Config) error {
					if calls.Add(1) == 1 {
						for i := range cfg.NextProtos {
							cfg.NextProtos[i] = "h2"
						}
					}
					return nil
				}))
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := way.query(ctx, c, ""); err == nil || !strings.Contains(err.Error(), `ALPN "postgresql"`) {
				t.Fatalf("connect 1: %v, want the ALPN change refused", err)
			}
			for i := 2; i <= 3; i++ {
				if _, err := way.query(ctx, c, "select 'ok'"); err != nil {
					t.Errorf("connect %d (the function changed nothing): %v", i, err)
				}
			}
		})
	}
}

// The run-time parameters a hook sets are that connect's: the next connect, whose hook sets
// none, has the connection string's, whether the first connect succeeded or its hook's change
// was refused, and the connector's settings keep theirs.
func TestBeforeConnectRuntimeParamsPerConnect(t *testing.T) {
	plain, _ := servers(t)
	for _, refused := range []bool{false, true} {
		for _, way := range connectWays {
			name := way.name
			if refused {
				name += "/refused"
			}
			t.Run(name, func(t *testing.T) {
				var calls atomic.Int32
				c := newConnector(t, plain.DSN("application_name=fromdsn", "sslmode=disable"), pgconnector.WithBeforeConnect(func(_ context.Context, cfg *pgx.ConnConfig) error {
					if calls.Add(1) == 1 {
						cfg.RuntimeParams["application_name"] = "hooked"
						cfg.RuntimeParams["search_path"] = "hooked"
						if refused {
							cfg.DialFunc = (&net.Dialer{}).DialContext
						}
					}
					return nil
				}))
				defer c.Close()
				before := maps.Clone(c.Settings().Config.RuntimeParams)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				app, err := way.query(ctx, c, "select current_setting('application_name')")
				switch {
				case refused && err == nil:
					t.Fatal("connect 1: the hook's DialFunc was not refused")
				case !refused && (err != nil || app != "hooked"):
					t.Fatalf("connect 1: application_name %q, %v; want the hook's", app, err)
				}
				for i := 2; i <= 3; i++ {
					q := "select current_setting('application_name') || ' ' || current_setting('search_path')"
					if got, err := way.query(ctx, c, q); err != nil || got != `fromdsn "$user", public` {
						t.Errorf("connect %d: application_name and search_path %q, %v; want the connection string's", i, got, err)
					}
				}
				if after := c.Settings().Config.RuntimeParams; !maps.Equal(after, before) {
					t.Errorf("the connector's run-time parameters became %v, were %v", after, before)
				}
			})
		}
	}
}

// pgx's hooks that the negotiation runs through, and the fields of the attempt it chose, are the
// connector's: WithBeforeConnect changing one is refused, naming the option to use instead,
// before anything is sent; without the refusal, require_auth and target_session_attrs would be
// off (the cases below connect where the connector must refuse).
func TestBeforeConnectKeepsTheConnectorsHooks(t *testing.T) {
	plain, _ := servers(t)
	cases := []struct {
		name, dsn, want string
		change          func(cfg *pgx.ConnConfig)
	}{
		{"BuildFrontend", plain.DSN("sslmode=disable", "require_auth=scram-sha-256"), "BuildFrontend (the connector's", func(cfg *pgx.ConnConfig) {
			cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend { return pgproto3.NewFrontend(r, w) }
		}},
		{"BuildFrontend wrapped", plain.DSN("sslmode=disable"), "set Password, RequireAuth or ChannelBinding", func(cfg *pgx.ConnConfig) {
			build := cfg.BuildFrontend
			cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend { return build(r, w) }
		}},
		{"AfterNetConnect", plain.DSN("sslmode=disable"), "AfterNetConnect (the connector's: the TLS handshake, the direct-TLS ALPN check and requirepeer run in it): wrap the connection in WithDialFunc", func(cfg *pgx.ConnConfig) {
			cfg.AfterNetConnect = func(_ context.Context, _ *pgconn.Config, conn net.Conn) (net.Conn, error) { return conn, nil }
		}},
		{"AfterNetConnect removed", plain.DSN("sslmode=disable"), "AfterNetConnect", func(cfg *pgx.ConnConfig) { cfg.AfterNetConnect = nil }},
		{"ValidateConnect removed", plain.DSN("sslmode=disable", "target_session_attrs=read-only"), "write target_session_attrs in the connection string", func(cfg *pgx.ConnConfig) {
			cfg.ValidateConnect = nil
		}},
		{"ValidateConnect set", plain.DSN("sslmode=disable"), "ValidateConnect (the connector's: target_session_attrs)", func(cfg *pgx.ConnConfig) {
			cfg.ValidateConnect = func(context.Context, *pgconn.PgConn) error { return nil }
		}},
		{"SSLNegotiation", plain.DSN("sslmode=disable"), "write sslnegotiation in the connection string", func(cfg *pgx.ConnConfig) { cfg.SSLNegotiation = "direct" }},
		{"KerberosSrvName", plain.DSN("sslmode=disable"), "write krbsrvname in the connection string", func(cfg *pgx.ConnConfig) { cfg.KerberosSrvName = "other" }},
		{"KerberosSpn", plain.DSN("sslmode=disable"), "write krbsrvname in the connection string", func(cfg *pgx.ConnConfig) { cfg.KerberosSpn = "other/host" }},
		{"LookupFunc", plain.DSN("sslmode=disable"), "LookupFunc (the connector resolves the host): write hostaddr", func(cfg *pgx.ConnConfig) {
			cfg.LookupFunc = net.DefaultResolver.LookupHost
		}},
		{"Fallbacks", plain.DSN("sslmode=disable"), "the host or port", func(cfg *pgx.ConnConfig) {
			cfg.Fallbacks = []*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port}}
		}},
	}
	for _, way := range connectWays {
		for _, tc := range cases {
			t.Run(way.name+"/"+tc.name, func(t *testing.T) {
				c := newConnector(t, tc.dsn, pgconnector.WithBeforeConnect(func(_ context.Context, cfg *pgx.ConnConfig) error {
					tc.change(cfg)
					return nil
				}))
				defer c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				mark := plain.LogMark()
				_, err := way.query(ctx, c, "")
				var abort *negotiation.AbortError
				if err == nil || !errors.As(err, &abort) || !strings.Contains(err.Error(), "WithBeforeConnect: it changed ") || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("%v, want a refusal naming WithBeforeConnect and %q", err, tc.want)
				}
				if n, err := plain.ConnectionsSince(mark); err != nil || n != 0 {
					t.Errorf("%d connections reached the server (%v), want none: the refusal comes before the socket", n, err)
				}
			})
		}
	}
}

// A hook that puts another attempt's functions (kept from an earlier call) in place of this
// attempt's is not refused (the functions are the connector's), but the attempt runs with its
// own: every connect goes where its negotiation sent it and authenticates with its own settings.
func TestBeforeConnectOtherAttemptsFunctions(t *testing.T) {
	_, tlsSrv := servers(t)
	for _, way := range connectWays {
		t.Run(way.name, func(t *testing.T) {
			var mu sync.Mutex
			var kept *pgx.ConnConfig
			var passwords []string
			c := newConnector(t, tlsSrv.DSN("sslmode=verify-full", "sslrootcert="+tlsSrv.CAFile, "password=wrong"), pgconnector.WithBeforeConnect(func(_ context.Context, cfg *pgx.ConnConfig) error {
				mu.Lock()
				defer mu.Unlock()
				if kept == nil {
					kept = cfg.Copy()
					return nil // the first attempt: the wrong password, refused by the server
				}
				cfg.Password = tlsSrv.Password
				passwords = append(passwords, cfg.Password)
				cfg.DialFunc, cfg.LookupFunc, cfg.BuildFrontend = kept.DialFunc, kept.LookupFunc, kept.BuildFrontend
				cfg.AfterNetConnect = kept.AfterNetConnect
				if cfg.ValidateConnect != nil && kept.ValidateConnect != nil { // the first connects learn the server's version there
					cfg.ValidateConnect = kept.ValidateConnect
				}
				cfg.TLSConfig.VerifyConnection = kept.TLSConfig.VerifyConnection
				return nil
			}))
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := way.query(ctx, c, ""); err == nil || !strings.Contains(err.Error(), "password authentication failed") {
				t.Fatalf("connect 1: %v, want the server's refusal of the wrong password", err)
			}
			for i := 2; i <= 3; i++ {
				if got, err := way.query(ctx, c, "select current_user::text"); err != nil || got != tlsSrv.User {
					t.Errorf("connect %d with connect 1's functions: %q, %v; want a connection as %s", i, got, err, tlsSrv.User)
				}
			}
		})
	}
}

// The configuration PgxConfig returns is the caller's: changing it, in place too (its run-time
// parameters, its TLS configurations and their slices, its fallbacks), changes nothing of the
// connector's. The connector's TLS rules still hold for a ConnectPgx given the changed
// configuration, and for the connects after it; the run-time parameters are the given
// configuration's.
func TestPgxConfigChangesStayInIt(t *testing.T) {
	plain, tlsSrv := servers(t)
	// Neither host's name is in the certificate.
	dsn := tlsSrv.DSN("host=other-name.invalid,other-name-2.invalid", "hostaddr=127.0.0.1,127.0.0.1", "port="+strconv.Itoa(tlsSrv.Port),
		"sslmode=verify-full", "sslrootcert="+tlsSrv.CAFile)
	spoil := func(tc *tls.Config) {
		if tc == nil {
			return
		}
		tc.VerifyConnection, tc.MinVersion, tc.ServerName = nil, tls.VersionTLS10, "localhost"
		for i := range tc.NextProtos {
			tc.NextProtos[i] = "h2"
		}
	}
	c := newConnector(t, dsn)
	defer c.Close()
	hosts := func() []tlsView {
		var v []tlsView
		for _, h := range c.Settings().Hosts {
			v = append(v, viewOf(h.TLSConfig))
		}
		return v
	}
	wantHosts := hosts()
	cfg := c.PgxConfig()
	spoil(cfg.TLSConfig)
	for _, fb := range cfg.Fallbacks {
		spoil(fb.TLSConfig)
		fb.Port = 1
	}
	if len(cfg.Fallbacks) == 0 {
		t.Fatal("PgxConfig has no fallbacks for the second host")
	}
	if v := viewOf(c.PgxConfig().TLSConfig); !v.verify || v.min == tls.VersionTLS10 {
		t.Errorf("a second PgxConfig's TLS configuration is the changed one: %+v", v)
	}
	if got := hosts(); !slices.Equal(got, wantHosts) {
		t.Errorf("the hosts' TLS configurations became %+v, were %+v", got, wantHosts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, given := range []*pgx.ConnConfig{cfg, nil, cfg} {
		conn, err := c.ConnectPgx(ctx, given)
		var tlsErr *negotiation.TLSRefusedError
		if err == nil {
			conn.Close(ctx)
		}
		if !errors.As(err, &tlsErr) || !strings.Contains(err.Error(), "other-name.invalid") {
			t.Errorf("ConnectPgx (given a configuration: %v): %v, want the certificate refused", given != nil, err)
		}
	}

	p := newConnector(t, plain.DSN("sslmode=disable", "application_name=fromdsn"))
	defer p.Close()
	pcfg := p.PgxConfig()
	pcfg.RuntimeParams["application_name"] = "changed"
	if app := p.PgxConfig().RuntimeParams["application_name"]; app != "fromdsn" {
		t.Errorf("a second PgxConfig has application_name %q", app)
	}
	for _, given := range []*pgx.ConnConfig{pcfg, nil} {
		conn, err := p.ConnectPgx(ctx, given)
		if err != nil {
			t.Fatal(err)
		}
		app, err := queryText(ctx, conn, "select current_setting('application_name')")
		conn.Close(ctx)
		if want := map[bool]string{true: "changed", false: "fromdsn"}[given != nil]; err != nil || app != want {
			t.Errorf("ConnectPgx (given a configuration: %v): application_name %q (%v), want %q", given != nil, app, err, want)
		}
	}
}
