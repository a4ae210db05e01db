package pgconnector_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/tracing"
)

// kerberosLab is a KDC with the user alice, her ticket in a credential cache, and the service
// principals of a PostgreSQL server on loopback.
type kerberosLab struct {
	kdc    *harness.KDC
	ccache string
}

func newKerberosLab(t *testing.T) *kerberosLab {
	t.Helper()
	k := harness.StartKDCT(t, harness.KDCOptions{})
	if _, err := k.AddPrincipal("alice"); err != nil {
		t.Fatal(err)
	}
	ccache := filepath.Join(t.TempDir(), "alice.ccache")
	if err := k.Kinit(ccache, "alice", 0); err != nil {
		t.Fatal(err)
	}
	return &kerberosLab{kdc: k, ccache: ccache}
}

func (l *kerberosLab) gssHBA() string {
	return "hostgssenc all all 127.0.0.1/32 gss include_realm=0 krb_realm=" + l.kdc.Realm
}

// server starts a cluster for the lab with the given pg_hba lines and the role alice.
func (l *kerberosLab) server(t *testing.T, keytab bool, hba ...string) *harness.Postgres {
	t.Helper()
	p := harness.StartT(t, harness.Options{GSS: &harness.GSSOptions{KDC: l.kdc, Keytab: keytab}, HBA: hba})
	if err := p.CreateRole("alice"); err != nil {
		t.Fatal(err)
	}
	return p
}

func (l *kerberosLab) connector(t *testing.T, dsn string, opts ...pgconnector.Option) *pgconnector.Connector {
	t.Helper()
	opts = append([]pgconnector.Option{pgconnector.WithKerberos(pgconnector.Kerberos{Krb5Conf: l.kdc.Krb5Conf, CCache: l.ccache})}, opts...)
	return newConnector(t, dsn, opts...)
}

func aliceDSN(p *harness.Postgres, host string, extra ...string) string {
	return strings.Join(append([]string{"host=" + host, "port=" + strconv.Itoa(p.Port), "dbname=" + p.Database, "user=alice"}, extra...), " ")
}

// Against a server whose pg_hba has only hostgssenc lines, the connection is GSS-encrypted and
// large round trips come back byte-identical.
func TestGSSEncryption(t *testing.T) {
	lab := newKerberosLab(t)
	srv := lab.server(t, true, lab.gssHBA())
	for _, host := range []string{"localhost", "127.0.0.1"} {
		t.Run(host, func(t *testing.T) {
			db := sql.OpenDB(lab.connector(t, aliceDSN(srv, host)))
			defer db.Close()
			var encrypted, authenticated bool
			var principal string
			err := db.QueryRow("select encrypted, gss_authenticated, principal from pg_stat_gssapi where pid = pg_backend_pid()").Scan(&encrypted, &authenticated, &principal)
			if err != nil {
				t.Fatal(err)
			}
			if !encrypted || !authenticated || principal != "alice@"+lab.kdc.Realm {
				t.Errorf("encrypted=%v gss_authenticated=%v principal=%q", encrypted, authenticated, principal)
			}
		})
	}

	db := sql.OpenDB(lab.connector(t, aliceDSN(srv, "localhost")))
	defer db.Close()
	t.Run("1 MiB bytea round trip", func(t *testing.T) {
		in := make([]byte, 1<<20)
		rand.Read(in)
		var out []byte
		if err := db.QueryRow("select $1::bytea", in).Scan(&out); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(in, out) {
			t.Error("bytea came back different")
		}
	})
	t.Run("64 MiB COPY out", func(t *testing.T) {
		const query = "copy (select i, md5(i::text) from generate_series(1, 1700000) i) to stdout"
		gssOut := copyOut(t, db, query)
		if len(gssOut) < 64<<20 {
			t.Fatalf("COPY gave %d bytes, want at least 64 MiB", len(gssOut))
		}
		// The same rows over the Unix socket, without encryption.
		plain := sql.OpenDB(newConnector(t, "host="+srv.SocketDir+" port="+strconv.Itoa(srv.Port)+" user=postgres dbname="+srv.Database))
		defer plain.Close()
		if !bytes.Equal(gssOut, copyOut(t, plain, query)) {
			t.Error("COPY over GSS encryption differs from COPY over the Unix socket")
		}
	})
}

func copyOut(t *testing.T, db *sql.DB, query string) []byte {
	t.Helper()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var buf bytes.Buffer
	err = pgconnector.PgxConn(conn, func(pc *pgx.Conn) error {
		_, err := pc.PgConn().CopyTo(context.Background(), &buf, query)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// transport reports how the session of db's next connection is protected.
func transport(t *testing.T, db *sql.DB) string {
	t.Helper()
	var gss, ssl bool
	err := db.QueryRow(`select coalesce((select encrypted from pg_stat_gssapi where pid = pg_backend_pid()), false),
		coalesce((select ssl from pg_stat_ssl where pid = pg_backend_pid()), false)`).Scan(&gss, &ssl)
	switch {
	case err != nil:
		return "error: " + err.Error()
	case gss:
		return "gss"
	case ssl:
		return "tls"
	}
	return "plain"
}

// With a valid ticket and gssencmode=prefer, on servers where GSS encryption cannot succeed,
// every connection after the first costs one backend and logs no GSS failure; libpq pays two.
func TestGSSFailureIsRemembered(t *testing.T) {
	lab := newKerberosLab(t)
	trust := "hostnogssenc all all 127.0.0.1/32 trust"
	for _, tt := range []struct {
		name   string
		keytab bool
		hba    []string
	}{
		{"server without keytab", false, []string{lab.gssHBA(), trust}},
		{"pg_hba without hostgssenc", true, []string{trust}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := lab.server(t, tt.keytab, tt.hba...)
			const n = 10
			dsn := aliceDSN(srv, "localhost", "sslmode=disable")
			db := sql.OpenDB(lab.connector(t, dsn))
			defer db.Close()
			db.SetMaxIdleConns(0)
			if got := transport(t, db); got != "plain" {
				t.Fatalf("first connection: %s, want plain", got)
			}
			mark := srv.LogMark()
			for range n {
				if got := transport(t, db); got != "plain" {
					t.Fatalf("%s, want plain", got)
				}
			}
			backends, err := srv.ConnectionsSince(mark)
			if err != nil {
				t.Fatal(err)
			}
			if backends != n {
				t.Errorf("pgconnector: %d backends for %d connections, want %d", backends, n, n)
			}
			log := srv.Log()[mark:]
			for _, bad := range []string{"GSSAPI", "FATAL"} {
				if strings.Contains(log, bad) {
					t.Errorf("the server logged %q after the first connection:\n%s", bad, log)
				}
			}

			// libpq, same environment, same server.
			mark = srv.LogMark()
			for range n {
				if _, err := harness.Psql(context.Background(), lab.kdc.Env(lab.ccache), dsn, "select 1"); err != nil {
					t.Fatal(err)
				}
			}
			libpq, err := srv.ConnectionsSince(mark)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("backends for %d connections: pgconnector %d, libpq (psql) %d", n, backends, libpq)
			if libpq != 2*n {
				t.Errorf("libpq: %d backends for %d connections; expected %d", libpq, n, 2*n)
			}
		})
	}
}

// kinit and kdestroy while a process keeps connecting change its decision at the next connection.
func TestKinitAndKdestroyTakeEffect(t *testing.T) {
	lab := newKerberosLab(t)
	srv := lab.server(t, true, lab.gssHBA(), "hostnogssenc all all 127.0.0.1/32 trust")
	ccache := filepath.Join(t.TempDir(), "later.ccache")
	c := newConnector(t, aliceDSN(srv, "localhost", "sslmode=disable"),
		pgconnector.WithKerberos(pgconnector.Kerberos{Krb5Conf: lab.kdc.Krb5Conf, CCache: ccache}))
	db := sql.OpenDB(c)
	defer db.Close()
	db.SetMaxIdleConns(0)
	step := func(want string) {
		t.Helper()
		if got := transport(t, db); got != want {
			t.Fatalf("%s, want %s", got, want)
		}
	}
	step("plain") // no ticket
	step("plain")
	if err := lab.kdc.Kinit(ccache, "alice", 0); err != nil {
		t.Fatal(err)
	}
	step("gss") // kinit
	step("gss")
	if err := os.Remove(ccache); err != nil { // kdestroy
		t.Fatal(err)
	}
	step("plain")
	if err := lab.kdc.Kinit(ccache, "alice", 0); err != nil {
		t.Fatal(err)
	}
	step("gss")
}

// pg_hba method gss on a connection that is not GSS-encrypted: GSS authentication through pgx,
// with this connector's credentials and the server verified (mutual authentication).
func TestGSSAuthentication(t *testing.T) {
	lab := newKerberosLab(t)
	srv := lab.server(t, true, "hostnogssenc all all 127.0.0.1/32 gss include_realm=0 krb_realm="+lab.kdc.Realm)
	for _, sslmode := range []string{"disable", "prefer"} {
		t.Run("gssencmode=disable sslmode="+sslmode, func(t *testing.T) {
			rec, tp := newRecorder()
			db := sql.OpenDB(lab.connector(t, aliceDSN(srv, "localhost", "gssencmode=disable", "sslmode="+sslmode), pgconnector.WithTracerProvider(tp)))
			defer db.Close()
			var encrypted, authenticated bool
			var principal string
			err := db.QueryRow("select encrypted, gss_authenticated, principal from pg_stat_gssapi where pid = pg_backend_pid()").Scan(&encrypted, &authenticated, &principal)
			if err != nil {
				t.Fatal(err)
			}
			if encrypted || !authenticated || principal != "alice@"+lab.kdc.Realm {
				t.Errorf("encrypted=%v gss_authenticated=%v principal=%q", encrypted, authenticated, principal)
			}
			found := false
			for _, s := range rec.Ended() {
				for _, kv := range s.Attributes() {
					if kv.Key == "pgconnector.auth.method" && kv.Value.AsString() == "gss" {
						found = true
					}
				}
			}
			if !found {
				t.Error("no startup span with pgconnector.auth.method=gss")
			}
		})
	}
	t.Run("no credentials", func(t *testing.T) {
		c := newConnector(t, aliceDSN(srv, "localhost", "gssencmode=disable", "sslmode=disable"),
			pgconnector.WithKerberos(pgconnector.Kerberos{Krb5Conf: lab.kdc.Krb5Conf, CCache: filepath.Join(t.TempDir(), "none")}))
		_, err := c.Connect(context.Background())
		if err == nil || !strings.Contains(err.Error(), "no Kerberos credentials") {
			t.Fatalf("error = %v, want one saying there are no Kerberos credentials", err)
		}
	})
}

// Over GSS encryption the server sends AuthenticationOk at once both for pg_hba "hostgssenc ...
// gss" (the encrypted channel already authenticated the client: auth.c, ClientAuthentication)
// and for "hostgssenc ... trust"; the startup span says what the wire proves, gss-or-trust, for
// both, and never trust. The server's own view (pg_stat_gssapi.gss_authenticated) shows that the
// two lines differ.
func TestGSSEncryptionAuthMethod(t *testing.T) {
	lab := newKerberosLab(t)
	for _, tt := range []struct {
		hba           string
		authenticated bool // pg_stat_gssapi.gss_authenticated
	}{
		{"gss include_realm=0 krb_realm=" + lab.kdc.Realm, true},
		{"trust", false},
	} {
		t.Run("hostgssenc "+strings.Fields(tt.hba)[0], func(t *testing.T) {
			srv := lab.server(t, true, "hostgssenc all all 127.0.0.1/32 "+tt.hba)
			rec, tp := newRecorder()
			db := sql.OpenDB(lab.connector(t, aliceDSN(srv, "localhost"), pgconnector.WithTracerProvider(tp)))
			defer db.Close()
			var encrypted, authenticated bool
			err := db.QueryRow("select encrypted, gss_authenticated from pg_stat_gssapi where pid = pg_backend_pid()").Scan(&encrypted, &authenticated)
			if err != nil {
				t.Fatal(err)
			}
			if !encrypted || authenticated != tt.authenticated {
				t.Fatalf("encrypted=%v gss_authenticated=%v, want true %v", encrypted, authenticated, tt.authenticated)
			}
			var got []string
			for _, s := range rec.Ended() {
				if s.Name() != tracing.SpanStartup {
					continue
				}
				attrs := map[attribute.Key]string{}
				for _, kv := range s.Attributes() {
					attrs[kv.Key] = kv.Value.Emit()
				}
				got = append(got, attrs[tracing.MethodKey]+" "+attrs[tracing.AuthMethodKey])
			}
			if want := []string{"gss gss-or-trust"}; !slices.Equal(got, want) {
				t.Errorf("startup spans (method auth.method): %q, want %q", got, want)
			}
		})
	}
}

// 64 goroutines connecting at once on a cold cache, with a ticket, to a server where GSS
// encryption cannot succeed: one GSSENCRequest reaches the server.
func TestGSSColdHerdSendsOneProbe(t *testing.T) {
	lab := newKerberosLab(t)
	srv := lab.server(t, false, lab.gssHBA(), "hostnogssenc all all 127.0.0.1/32 trust")
	px := harness.ProxyT(t, srv.Addr())
	host, port := px.Addr()
	c := lab.connector(t, "host="+host+" port="+strconv.Itoa(port)+" user=alice dbname="+srv.Database+" sslmode=disable")
	const herd = 64
	errs := make(chan error, herd)
	start := make(chan struct{})
	for range herd {
		go func() {
			<-start
			conn, err := c.Connect(context.Background())
			if err == nil {
				conn.Close()
			}
			errs <- err
		}()
	}
	close(start)
	for range herd {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if st := px.Stats(); st.GSSENCRequests != 1 || st.StartupMessages != herd {
		t.Errorf("proxy saw %+v; want 1 GSSENCRequest and %d startup messages", st, herd)
	}
}

// appGSS is a GSS provider as an application registers one with pgx: it records what it is
// asked and fails, saying so.
type appGSS struct {
	name  string
	mu    sync.Mutex
	calls []string
}

func (p *appGSS) newGSS() (pgconn.GSS, error) { return (*appGSSContext)(p), nil }

func (p *appGSS) took() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.calls
	p.calls = nil
	return c
}

type appGSSContext appGSS

func (a *appGSSContext) fail(call string) ([]byte, error) {
	a.mu.Lock()
	a.calls = append(a.calls, call)
	a.mu.Unlock()
	return nil, errors.New(a.name + " was asked")
}

func (a *appGSSContext) GetInitToken(host, service string) ([]byte, error) {
	return a.fail("GetInitToken " + host + " " + service)
}

func (a *appGSSContext) GetInitTokenFromSPN(spn string) ([]byte, error) {
	return a.fail("GetInitTokenFromSPN " + spn)
}

func (a *appGSSContext) Continue([]byte) (bool, []byte, error) {
	return false, nil, errors.New("no exchange")
}

// pg_hba method gss: the connector runs the GSSAPI authentication exchange itself, with its own
// credentials, and pgx's process-wide GSS provider is no part of it. A provider the application
// registers with pgx, before or after New, is never asked anything by a connector (nor shown a
// principal, a ticket or a secret of it), still serves the application's own pgx connections,
// and the connector authenticates the same with no provider registered at all.
func TestGSSAuthIndependentOfPgxProvider(t *testing.T) {
	lab := newKerberosLab(t)
	srv := lab.server(t, true, "hostnogssenc all all 127.0.0.1/32 gss include_realm=0 krb_realm="+lab.kdc.Realm)
	t.Cleanup(func() { pgconn.RegisterGSSProvider(nil) })
	ctx := context.Background()
	// openDB opens a pool on c in which every query has a connection of its own; closing it
	// closes c.
	openDB := func(c *pgconnector.Connector) *sql.DB {
		db := sql.OpenDB(c)
		db.SetMaxIdleConns(0)
		return db
	}
	gssConnect := func(t *testing.T, db *sql.DB) {
		t.Helper()
		var encrypted, authenticated bool
		var principal string
		if err := db.QueryRow("select encrypted, gss_authenticated, principal from pg_stat_gssapi where pid = pg_backend_pid()").Scan(&encrypted, &authenticated, &principal); err != nil {
			t.Fatal(err)
		}
		if encrypted || !authenticated || principal != "alice@"+lab.kdc.Realm {
			t.Errorf("encrypted=%v gss_authenticated=%v principal=%q", encrypted, authenticated, principal)
		}
	}
	connectorDSN := aliceDSN(srv, "localhost", "gssencmode=disable", "sslmode=disable")
	// pgxConnect connects with pgx alone, as other code of the application would.
	pgxConnect := func(extra ...string) error {
		conn, err := pgconn.Connect(ctx, aliceDSN(srv, "localhost", append([]string{"sslmode=disable"}, extra...)...))
		if err == nil {
			conn.Close(ctx)
		}
		return err
	}
	noCalls := func(t *testing.T, app *appGSS) {
		t.Helper()
		if got := app.took(); len(got) != 0 {
			t.Errorf("%s was asked by a connector: %q", app.name, got)
		}
	}

	app := &appGSS{name: "the application's provider"}
	pgconn.RegisterGSSProvider(app.newGSS) // before New
	db := openDB(lab.connector(t, connectorDSN))
	defer db.Close()
	gssConnect(t, db)
	noCalls(t, app)
	// The application's own pgx connections still go to its provider.
	if err := pgxConnect("krbspn=postgres/localhost"); err == nil {
		t.Error("a pgx connection authenticated without the application's provider")
	}
	if got := app.took(); len(got) != 1 || got[0] != "GetInitTokenFromSPN postgres/localhost" {
		t.Errorf("the application's provider got %q", got)
	}

	// Registered after New: the connector made before and one made after never reach it.
	app2 := &appGSS{name: "the application's second provider"}
	pgconn.RegisterGSSProvider(app2.newGSS)
	db2 := openDB(lab.connector(t, connectorDSN))
	defer db2.Close()
	for range 3 {
		gssConnect(t, db)
		gssConnect(t, db2)
	}
	noCalls(t, app)
	noCalls(t, app2)

	// No provider at all: pgx alone cannot authenticate, the connector can.
	pgconn.RegisterGSSProvider(nil)
	if err := pgxConnect(); err == nil {
		t.Error("pgx connected with no GSS provider registered")
	}
	db3 := openDB(lab.connector(t, connectorDSN))
	defer db3.Close()
	gssConnect(t, db3)
	gssConnect(t, db)
	if log := srv.Log(); strings.Contains(log, "pgconnector-gss:") {
		t.Error("the server log shows a connector token")
	}
}

// TestGSSKeywordsMatchPsql: the libpq keywords and multi-host rules that touch GSS encryption,
// with a ticket, side by side with psql; require_auth (libpq 16) against libpq-connect.html,
// and against psql too when its libpq is 16 or later: a GSS-encrypted channel satisfies
// require_auth=gss and nothing else.
func TestGSSKeywordsMatchPsql(t *testing.T) {
	lab := newKerberosLab(t)
	srv := lab.server(t, true, lab.gssHBA())
	socket := srv.SocketDir + "," + "localhost"
	port := strconv.Itoa(srv.Port)
	for _, tc := range []struct {
		conninfo, want string // want: for keys psql 15 does not know, checked against psql 16+; "" means as psql
	}{
		{aliceDSN(srv, "localhost", "hostaddr=127.0.0.1"), ""},
		{aliceDSN(srv, "localhost", "hostaddr=127.0.0.1 krbsrvname=postgres gsslib=gssapi"), ""},
		{"host=" + socket + " port=" + port + "," + port + " dbname=app user=alice gssencmode=require", ""},
		{"host=" + socket + " port=" + port + "," + port + " dbname=app user=alice gssencmode=prefer", ""},
		{aliceDSN(srv, "localhost", "gssencmode=require require_auth=gss"), outcomeGSS},
		{aliceDSN(srv, "localhost", "gssencmode=require require_auth=!password,!none"), outcomeGSS},
		{aliceDSN(srv, "localhost", "require_auth=scram-sha-256"), outcomeError},
		// A negated list requires no exchange (fe-auth.c, check_expected_areq: auth_required is
		// false), so the AuthenticationOk of GSS encryption passes it, as in libpq.
		{aliceDSN(srv, "localhost", "require_auth=!gss"), outcomeGSS},
		{aliceDSN(srv, "localhost", "require_auth=!gss,!none"), outcomeError},
	} {
		t.Run(tc.conninfo, func(t *testing.T) {
			want, psqlErr := psqlMatrixOutcome(t, lab.kdc, lab.ccache, tc.conninfo)
			if tc.want != "" {
				switch {
				case strings.Contains(psqlErr, "invalid connection option"):
					want = tc.want
				case want != tc.want:
					// psql of libpq 16 or later knows require_auth: it must agree with the
					// documentation's outcome written here.
					t.Fatalf("psql (libpq 16+) gives %s (%s), the documented outcome is %s", want, psqlErr, tc.want)
				}
			}
			c := lab.connector(t, tc.conninfo)
			for _, phase := range []string{"cold", "warm"} {
				got, msg := connectorMatrixOutcome(t, c)
				if got != want {
					t.Errorf("%s cache: connector %s (%s), want %s (psql: %s)", phase, got, msg, want, psqlErr)
				}
			}
		})
	}
}
