package pgconnector_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/negotiation"
)

// Servers shared by the tests of this file; each test that changes a server starts its own.
var (
	serversOnce sync.Once
	plainServer *harness.Postgres // TLS off, trust
	tlsServer   *harness.Postgres // TLS on, scram-sha-256
	serversErr  error
)

func servers(t *testing.T) (plain, tls *harness.Postgres) {
	t.Helper()
	serversOnce.Do(func() {
		ctx := context.Background()
		plainServer, serversErr = harness.Start(ctx, harness.Options{})
		if serversErr != nil {
			return
		}
		tlsServer, serversErr = harness.Start(ctx, harness.Options{TLS: true, Auth: "scram-sha-256"})
	})
	if serversErr != nil {
		t.Fatalf("starting servers: %v", serversErr)
	}
	return plainServer, tlsServer
}

func TestMain(m *testing.M) {
	// No Kerberos credentials from the machine: tests that use Kerberos start their own KDC
	// and say where the credentials are.
	os.Setenv("KRB5CCNAME", "FILE:/nonexistent/pgconnector-test-ccache")
	os.Setenv("KRB5_CLIENT_KTNAME", "")
	os.Exit(harness.Run(m)) // stops the shared servers too
}

func mustParsePgx(t testing.TB, dsn string) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// proxied returns a DSN for srv that goes through a counting proxy.
func proxied(t *testing.T, srv *harness.Postgres, extra ...string) (string, *harness.Proxy) {
	t.Helper()
	px := harness.ProxyT(t, fmt.Sprintf("%s:%d", srv.Host, srv.Port))
	host, port := px.Addr()
	items := append([]string{fmt.Sprintf("host=%s port=%d", host, port)}, extra...)
	return srv.DSN(items...), px
}

func newConnector(t *testing.T, dsn string, opts ...pgconnector.Option) *pgconnector.Connector {
	t.Helper()
	c, err := pgconnector.New(dsn, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// connectN opens and closes n connections one after the other, checking each with a query.
func connectN(t *testing.T, c driver.Connector, n int) {
	t.Helper()
	db := sql.OpenDB(c)
	defer db.Close()
	db.SetMaxIdleConns(0) // every query gets a new connection
	for i := range n {
		var one int
		if err := db.QueryRow("select 1").Scan(&one); err != nil || one != 1 {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
}

// Against a server without TLS and a default DSN (sslmode=prefer), after the first connection
// every connection costs one TCP connection and one backend; pgx's stdlib pays two of each.
func TestOneBackendPerConnectionWhenTLSIsRefused(t *testing.T) {
	plain, _ := servers(t)
	const n = 20
	dsn, px := proxied(t, plain)

	c := newConnector(t, dsn)
	connectN(t, c, 1) // learns 'N'
	before, mark := px.Stats(), plain.LogMark()
	connectN(t, c, n)
	after := px.Stats()
	backends, err := plain.ConnectionsSince(mark)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.Connections - before.Connections; got != n {
		t.Errorf("pgconnector: %d TCP connections for %d connects, want %d", got, n, n)
	}
	if backends != n {
		t.Errorf("pgconnector: %d backends for %d connects, want %d", backends, n, n)
	}
	if got := after.SSLRequests - before.SSLRequests; got != 0 {
		t.Errorf("pgconnector: %d SSLRequests after the first connection, want 0", got)
	}

	// The same test with pgx's stdlib, same DSN, same proxy.
	before, mark = px.Stats(), plain.LogMark()
	connectN(t, stdlib.GetConnector(*mustParsePgx(t, dsn)), n)
	after = px.Stats()
	backends, err = plain.ConnectionsSince(mark)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.Connections - before.Connections; got != 2*n {
		t.Errorf("pgx stdlib: %d TCP connections for %d connects, expected %d", got, n, 2*n)
	}
	if backends != 2*n {
		t.Errorf("pgx stdlib: %d backends for %d connects, expected %d", backends, n, 2*n)
	}
}

// With an unknown answer, the first connection goes on after 'N' on the same socket.
func TestFirstConnectionReusesSocketAfterN(t *testing.T) {
	plain, _ := servers(t)
	dsn, px := proxied(t, plain)
	mark := plain.LogMark()
	connectN(t, newConnector(t, dsn), 1)
	st := px.Stats()
	if st.Connections != 1 || st.SSLRequests != 1 || st.StartupMessages != 1 {
		t.Errorf("first connection: %+v, want 1 TCP connection, 1 SSLRequest, 1 StartupMessage", st)
	}
	if backends, _ := plain.ConnectionsSince(mark); backends != 1 {
		t.Errorf("first connection: %d backends, want 1", backends)
	}
}

// 64 goroutines connecting at once on a cold cache: one SSLRequest probe reaches the server.
func TestColdHerdSendsOneProbe(t *testing.T) {
	plain, _ := servers(t)
	dsn, px := proxied(t, plain)
	c := newConnector(t, dsn)
	const herd = 64
	var wg sync.WaitGroup
	errs := make(chan error, herd)
	start := make(chan struct{})
	for range herd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			conn, err := c.Connect(context.Background())
			if err != nil {
				errs <- err
				return
			}
			conn.Close()
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("connect: %v", err)
	}
	st := px.Stats()
	if st.SSLRequests != 1 {
		t.Errorf("%d SSLRequests for %d concurrent cold connects, want 1", st.SSLRequests, herd)
	}
	if st.Connections != herd || st.StartupMessages != herd {
		t.Errorf("stats %+v, want %d connections and startup messages", st, herd)
	}
}

func TestGSSEncMode(t *testing.T) {
	plain, _ := servers(t)
	for _, tt := range []struct {
		name, dsnExtra, env string
	}{
		{"disable", "gssencmode=disable", ""},
		{"prefer", "gssencmode=prefer", ""},
		{"PGGSSENCMODE=disable", "", "disable"},
		{"PGGSSENCMODE=prefer", "", "prefer"},
		{"gssdelegation", "gssencmode=prefer gssdelegation=1", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("PGGSSENCMODE", tt.env)
			dsn := plain.DSN(tt.dsnExtra)
			// The server rejects an unknown startup parameter (42704): a successful connect
			// shows it never received gssencmode or gssdelegation.
			connectN(t, newConnector(t, dsn), 1)
		})
	}

	t.Run("require fails before dialing", func(t *testing.T) {
		for _, dsnExtra := range []string{"gssencmode=require", ""} {
			t.Setenv("PGGSSENCMODE", "require")
			dsn, px := proxied(t, plain, dsnExtra)
			_, err := newConnector(t, dsn).Connect(context.Background())
			if !errors.Is(err, negotiation.ErrGSSNoCredentials) {
				t.Fatalf("error = %v, want %v", err, negotiation.ErrGSSNoCredentials)
			}
			if !strings.Contains(err.Error(), "GSSAPI encryption is required but no credentials are available") {
				t.Errorf("error %q does not say why", err)
			}
			if st := px.Stats(); st.Connections != 0 {
				t.Errorf("%d TCP connections, want none", st.Connections)
			}
		}
	})

	t.Run("pgx forwards gssencmode to the server", func(t *testing.T) {
		db := sql.OpenDB(stdlib.GetConnector(*mustParsePgx(t, plain.DSN("gssencmode=disable"))))
		defer db.Close()
		err := db.Ping()
		if err == nil || !strings.Contains(err.Error(), "42704") {
			t.Fatalf("pgx: %v; expected the server to reject gssencmode (42704)", err)
		}
	})
}

func TestTLS(t *testing.T) {
	_, tlsSrv := servers(t)
	for _, tt := range []struct {
		name, extra string
	}{
		{"prefer", ""},
		{"require", "sslmode=require"},
		{"verify-full", "host=localhost sslmode=verify-full sslrootcert=" + tlsSrv.CAFile},
		{"verify-ca", "sslmode=verify-ca sslrootcert=" + tlsSrv.CAFile},
		{"allow uses plaintext first", "sslmode=allow"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := sql.OpenDB(newConnector(t, tlsSrv.DSN(tt.extra)))
			defer db.Close()
			var ssl bool
			for range 3 { // cold, then warm
				if err := db.QueryRow("select ssl from pg_stat_ssl where pid = pg_backend_pid()").Scan(&ssl); err != nil {
					t.Fatal(err)
				}
				db.SetMaxIdleConns(0)
			}
			if want := tt.name != "allow uses plaintext first"; ssl != want {
				t.Errorf("ssl = %v, want %v", ssl, want)
			}
		})
	}

	t.Run("verify-full rejects a wrong host name", func(t *testing.T) {
		c := newConnector(t, tlsSrv.DSN("sslmode=verify-full sslrootcert="+tlsSrv.CAFile, "host=127.0.0.2"))
		_, err := c.Connect(context.Background())
		if err == nil {
			t.Fatal("connected to 127.0.0.2 with a certificate for 127.0.0.1 and localhost")
		}
	})

	// A failed TLS handshake must be an error, not a panic in pgx (which closes the net.Conn
	// that AfterNetConnect returns, even with an error). 127.0.0.2 above never gets that far:
	// nothing listens there.
	t.Run("a failed TLS handshake is an error", func(t *testing.T) {
		other := harness.StartT(t, harness.Options{TLS: true}) // another throwaway CA
		for _, extra := range []string{
			"sslmode=verify-full sslrootcert=" + other.CAFile,
			"sslmode=verify-ca sslrootcert=" + other.CAFile,
			"sslmode=require sslnegotiation=direct", // direct TLS needs PostgreSQL 17
		} {
			c := newConnector(t, tlsSrv.DSN(extra))
			if _, err := c.Connect(context.Background()); err == nil {
				t.Errorf("%s: connected", extra)
			}
		}
	})
}

func TestSSLRequireAgainstServerWithoutTLS(t *testing.T) {
	plain, _ := servers(t)
	c := newConnector(t, plain.DSN("sslmode=require"))
	for range 2 { // the remembered 'N' must not turn require into plaintext
		_, err := c.Connect(context.Background())
		if !errors.Is(err, negotiation.ErrSSLRequired) {
			t.Fatalf("error = %v, want %v", err, negotiation.ErrSSLRequired)
		}
	}
}

// A remembered 'N' that turned wrong (the server now has TLS and accepts only TLS) is dropped
// and the connect negotiates again.
func TestStaleAnswerIsRelearned(t *testing.T) {
	srv := harness.StartT(t, harness.Options{})
	dsn, px := proxied(t, srv)
	c := newConnector(t, dsn)
	connectN(t, c, 2) // learns 'N', then uses it
	if st := px.Stats(); st.SSLRequests != 1 {
		t.Fatalf("%d SSLRequests before the change, want 1", st.SSLRequests)
	}
	if err := srv.SetSSL(true); err != nil {
		t.Fatal(err)
	}
	if err := srv.SetHBA("hostssl all all 127.0.0.1/32 trust"); err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	defer db.Close()
	var ssl bool
	if err := db.QueryRow("select ssl from pg_stat_ssl where pid = pg_backend_pid()").Scan(&ssl); err != nil {
		t.Fatalf("after the server turned TLS on: %v", err)
	}
	if !ssl {
		t.Error("connection is not TLS")
	}
	before := px.Stats()
	db.SetMaxIdleConns(0)
	if err := db.QueryRow("select 1").Scan(new(int)); err != nil {
		t.Fatal(err)
	}
	if got := px.Stats().Connections - before.Connections; got != 1 {
		t.Errorf("after relearning: %d TCP connections for one connect, want 1", got)
	}
}

func TestAuthMethods(t *testing.T) {
	for _, auth := range []string{"scram-sha-256", "md5"} {
		t.Run(auth, func(t *testing.T) {
			srv := harness.StartT(t, harness.Options{Auth: auth})
			connectN(t, newConnector(t, srv.DSN()), 2)

			_, err := newConnector(t, srv.DSN("password=wrong-secret-pw")).Connect(context.Background())
			if err == nil {
				t.Fatal("connected with a wrong password")
			}
			if !strings.Contains(err.Error(), "28P01") {
				t.Errorf("error %q does not say the password was wrong", err)
			}
			if strings.Contains(err.Error(), "wrong-secret-pw") || strings.Contains(err.Error(), srv.Password) {
				t.Errorf("error %q contains the password", err)
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	plain, _ := servers(t)
	// Every error of New is a *ParseError naming the key; settings_test.go has one case per key.
	for _, tt := range []struct {
		name, dsn, key string
		want           []string // substrings of the error
	}{
		{"unknown gssencmode", "host=h gssencmode=always", "gssencmode", []string{`"always"`, "disable, prefer, require"}},
		{"unknown sslmode", "host=h sslmode=sometimes", "sslmode", []string{"disable, allow, prefer, require, verify-ca, verify-full"}},
		{"malformed URL", "postgres://user:s3cr3t-pw@host:notaport/db", "port", []string{"1 to 65535"}},
		{"malformed keyword/value", "host=h password='s3cr3t-pw", "password", []string{"not closed"}},
		{"bad port", "host=h port=99999 password=s3cr3t-pw", "port", nil},
		{"unknown sslnegotiation", "host=h sslnegotiation=fast password=s3cr3t-pw", "sslnegotiation", []string{`"fast"`, "postgres, direct"}},
		{"empty gssencmode before the password", "host=h gssencmode= password=s3cr3t-pw", "gssencmode", []string{"value not shown"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := pgconnector.New(tt.dsn)
			var pe *pgconnector.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T) is not a *ParseError", err, err)
			}
			if pe.Key != tt.key {
				t.Errorf("error %q: Key %q, want %q", err, pe.Key, tt.key)
			}
			for _, w := range append(tt.want, tt.key) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "s3cr3t-pw") {
				t.Errorf("error %q contains the password", err)
			}
		})
	}
	t.Run("sql.Open", func(t *testing.T) {
		db, err := sql.Open("pgconnector", "host=h gssencmode= password=s3cr3t-pw")
		if err == nil {
			err = db.Ping()
			db.Close()
		}
		var pe *pgconnector.ParseError
		if !errors.As(err, &pe) || pe.Key != "gssencmode" || strings.Contains(err.Error(), "s3cr3t-pw") {
			t.Errorf("sql.Open: %v, want a *ParseError for gssencmode without the password", err)
		}
	})

	t.Run("unreachable host", func(t *testing.T) {
		port := harness.FreePort(t)
		c := newConnector(t, fmt.Sprintf("host=127.0.0.1 port=%d user=u password=s3cr3t-pw connect_timeout=5", port))
		_, err := c.Connect(context.Background())
		if err == nil || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("error = %v, want connection refused", err)
		}
		if strings.Contains(err.Error(), "s3cr3t-pw") {
			t.Errorf("error %q contains the password", err)
		}
	})

	t.Run("unknown host name", func(t *testing.T) {
		c := newConnector(t, "host=no-such-host.invalid user=u connect_timeout=5")
		_, err := c.Connect(context.Background())
		if err == nil || !strings.Contains(err.Error(), "no-such-host.invalid") {
			t.Fatalf("error = %v, want one naming the host", err)
		}
	})

	t.Run("unknown database", func(t *testing.T) {
		_, err := newConnector(t, plain.DSN("dbname=nosuchdb")).Connect(context.Background())
		if err == nil || !strings.Contains(err.Error(), "3D000") {
			t.Fatalf("error = %v, want 3D000", err)
		}
	})
}

func TestMultipleHosts(t *testing.T) {
	plain, _ := servers(t)
	dead := harness.FreePort(t)
	dsn := fmt.Sprintf("host=127.0.0.1,%s port=%d,%d user=%s dbname=%s", plain.Host, dead, plain.Port, plain.User, plain.Database)
	connectN(t, newConnector(t, dsn), 2)
}

func TestUnixSocket(t *testing.T) {
	plain, _ := servers(t)
	dsn := fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=require", plain.SocketDir, plain.Port, plain.User, plain.Database)
	connectN(t, newConnector(t, dsn), 1)
	_, err := newConnector(t, dsn+" gssencmode=require").Connect(context.Background())
	if !errors.Is(err, negotiation.ErrGSSUnixSocket) {
		t.Fatalf("gssencmode=require over a Unix socket: %v", err)
	}
}

func TestSQLOpen(t *testing.T) {
	plain, _ := servers(t)
	db, err := sql.Open("pgconnector", plain.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
}

func newRecorder() (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	rec := tracetest.NewSpanRecorder()
	return rec, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
}

var _ = time.Second
