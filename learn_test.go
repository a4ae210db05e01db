package pgconnector_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// What a connect learns, and what a later one pays for it, against PostgreSQL 15 with GSSAPI,
// the harness's KDC and psql (libpq 15) beside the connector.

// The users of src/interfaces/libpq/t/005_negotiate_encryption.pl and their pg_hba lines, all
// trust, each matching only its transport (the suite's database "postgres" written as all).
var negotiateUsers = []string{"testuser", "ssluser", "nossluser", "gssuser", "nogssuser"}

var negotiateHBA = []string{
	"host         all testuser  127.0.0.1/32 trust",
	"hostnossl    all nossluser 127.0.0.1/32 trust",
	"hostnogssenc all nogssuser 127.0.0.1/32 trust",
	"hostssl      all ssluser   127.0.0.1/32 trust",
	"hostgssenc   all gssuser   127.0.0.1/32 trust",
}

// The pg_hba lines of src/test/kerberos/t/001_auth.pl's failing steps: GSSAPI authentication
// that fails whatever the transport, for a missing pg_ident map or a wrong krb_realm.
func mapHBA() string { return "host all all 127.0.0.1/32 gss map=mymap" }

func realmHBA(realm string) string {
	return "host all all 127.0.0.1/32 gss include_realm=0 krb_realm=" + realm
}

// learnLab is a KDC with alice's ticket and the PostgreSQL 15 clusters the tests below share,
// each started once, on first use.
type learnLab struct {
	*kerberosLab
	err              error             // of the KDC
	once             sync.Once         // servers
	srvErr           error             // of the servers
	gssOn, bothOn    *harness.Postgres // 005's set-up: GSS on and SSL off, both on
	mapped, realmSrv *harness.Postgres // 001_auth.pl's failing map and realm
}

// servers starts the clusters once, for every test that asks.
func (l *learnLab) servers(t *testing.T) {
	t.Helper()
	l.once.Do(func() {
		ctx := context.Background()
		gss := &harness.GSSOptions{KDC: l.kdc, Keytab: true}
		start := func(tls bool, hba ...string) (*harness.Postgres, error) {
			p, err := harness.Start(ctx, harness.Options{Major: 15, TLS: tls, GSS: gss, HBA: hba})
			if err != nil {
				return nil, err
			}
			for _, u := range append([]string{"alice"}, negotiateUsers...) {
				if err := p.CreateRole(u); err != nil {
					p.Stop()
					return nil, err
				}
			}
			return p, nil
		}
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i, set := range []struct {
			dst *(*harness.Postgres)
			tls bool
			hba []string
		}{
			{&l.gssOn, false, negotiateHBA},
			{&l.bothOn, true, negotiateHBA},
			{&l.mapped, false, []string{mapHBA()}},
			{&l.realmSrv, false, []string{realmHBA("EXAMPLE.ORG")}},
		} {
			wg.Go(func() { *set.dst, errs[i] = start(set.tls, set.hba...) })
		}
		wg.Wait()
		l.srvErr = errors.Join(errs...)
	})
	if l.srvErr != nil {
		t.Fatal(l.srvErr)
	}
}

var (
	learnOnce sync.Once
	theLearn  *learnLab
)

// sharedLearnLab returns the lab of the process, its KDC started by the first test that asks;
// the harness's Cleanup stops its servers and KDC at the end of the run.
func sharedLearnLab(t *testing.T) *learnLab {
	t.Helper()
	learnOnce.Do(func() {
		k, err := harness.StartKDC(context.Background(), harness.KDCOptions{})
		if err != nil {
			theLearn = &learnLab{err: err}
			return
		}
		lab := &kerberosLab{kdc: k}
		if _, err = k.AddPrincipal("alice"); err != nil {
			theLearn = &learnLab{err: err}
			return
		}
		lab.ccache = filepath.Join(k.Dir, "alice.ccache") // removed with the KDC
		err = k.Kinit(lab.ccache, "alice", 0)
		theLearn = &learnLab{kerberosLab: lab, err: err}
	})
	if theLearn.err != nil {
		t.Fatal(theLearn.err)
	}
	return theLearn
}

// encryptionOf connects once through c and says how, as 005's current_enc(): "gss",
// "ssl", "plain", or "fail".
func encryptionOf(t *testing.T, c *pgconnector.Connector) string {
	t.Helper()
	conn, err := c.Connect(context.Background())
	if err != nil {
		t.Logf("connector: %v", err)
		return "fail"
	}
	defer conn.Close()
	rows, err := conn.(driver.QueryerContext).QueryContext(context.Background(), encryptionQuery, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	dest := make([]driver.Value, 1)
	if err := rows.Next(dest); err != nil {
		t.Fatal(err)
	}
	s, _ := dest[0].(string)
	return s
}

// psqlOutcome is encryptionOf for psql (libpq 15) with alice's ticket.
func (l *learnLab) psqlOutcome(t *testing.T, dsn string) string {
	t.Helper()
	out, err := harness.Psql(context.Background(), l.kdc.Env(l.ccache), dsn, encryptionQuery)
	if err != nil {
		t.Logf("psql: %v", err)
		return "fail"
	}
	return out
}

// counted is a DSN through a counting proxy in front of srv, as 005 connects (host and
// hostaddr), and the proxy.
func counted(t *testing.T, srv *harness.Postgres, user string, extra ...string) (string, *harness.Proxy) {
	t.Helper()
	px := harness.ProxyT(t, srv.Addr())
	_, port := px.Addr()
	parts := append([]string{"host=localhost hostaddr=127.0.0.1", fmt.Sprintf("port=%d", port), "dbname=" + srv.Database, "user=" + user}, extra...)
	return strings.Join(parts, " "), px
}

// encryptionQuery says how the session is protected, as 005's current_enc() does.
const encryptionQuery = `select case when coalesce((select ssl from pg_stat_ssl where pid = pg_backend_pid()), false) then 'ssl'
	when coalesce((select encrypted from pg_stat_gssapi where pid = pg_backend_pid()), false) then 'gss' else 'plain' end`

// connections runs connect and returns what it returned and how many TCP connections px saw
// it open.
func connections(px *harness.Proxy, connect func() string) (string, int) {
	before := px.Stats().Connections
	out := connect()
	return out, px.Stats().Connections - before
}

// A failed GSSAPI authentication teaches nothing about GSS encryption (001_auth.pl, "fails
// without mapping, then succeeds with mapping", and its krb_realm steps): pg_hba "host ... gss"
// refuses alice over every transport, which libpq too tries one after the other; once the
// administrator fixes the map or the realm, the next connect through the same Connector is
// GSS-encrypted at once, in one connection, as psql's is.
func TestFailedGSSLoginTeachesNoTransport(t *testing.T) {
	lab := sharedLearnLab(t)
	for _, tt := range []struct {
		name      string
		hba       string
		fix       func(t *testing.T, srv *harness.Postgres)
		failCount int // TCP connections of the failing connect: GSS, then without
	}{
		{"missing map, then the map added", mapHBA(), func(t *testing.T, srv *harness.Postgres) {
			// pg_ident.conf as 001_auth.pl appends it; SetHBA reloads the server (the same
			// pg_hba line), which reads pg_ident.conf again.
			ident := fmt.Sprintf("mymap /^(.*)@%s$ \\1\n", strings.ReplaceAll(lab.kdc.Realm, ".", `\.`))
			if err := os.WriteFile(filepath.Join(srv.DataDir, "pg_ident.conf"), []byte(ident), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := srv.SetHBA(mapHBA()); err != nil {
				t.Fatal(err)
			}
		}, 2},
		{"wrong krb_realm, then the right one", realmHBA("EXAMPLE.ORG"), func(t *testing.T, srv *harness.Postgres) {
			if err := srv.SetHBA(realmHBA(lab.kdc.Realm)); err != nil {
				t.Fatal(err)
			}
		}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := harness.StartT(t, harness.Options{Major: 15, GSS: &harness.GSSOptions{KDC: lab.kdc, Keytab: true}, HBA: []string{tt.hba}})
			if err := srv.CreateRole("alice"); err != nil {
				t.Fatal(err)
			}
			dsn, px := counted(t, srv, "alice")
			c := lab.connector(t, dsn)

			psql, _ := connections(px, func() string { return lab.psqlOutcome(t, dsn) })
			got, n := connections(px, func() string { return encryptionOf(t, c) })
			if got != "fail" || psql != "fail" {
				t.Fatalf("before the fix: connector %s, psql %s; want both to fail", got, psql)
			}
			if n != tt.failCount {
				t.Errorf("the failing connect opened %d TCP connections, want %d", n, tt.failCount)
			}

			tt.fix(t, srv)
			got, n = connections(px, func() string { return encryptionOf(t, c) })
			if got != "gss" || n != 1 {
				t.Errorf("the next connect: %s in %d TCP connections, want gss in 1", got, n)
			}
			if psql := lab.psqlOutcome(t, dsn); psql != "gss" {
				t.Errorf("psql: %s, want gss", psql)
			}
		})
	}
}

// A connect whose plan comes from remembered answers never opens more TCP connections than
// the first (cold) connect did, nor than libpq's (psql 15, beside it on the same proxy), and
// ends as psql does. The rows: 005_negotiate_encryption.pl's users and pg_hba (GSS on with SSL
// off, both on), whose EVENTS give the cold count, and 001_auth.pl's failing map and realm.
func TestWarmConnectsCostNoMoreThanCold(t *testing.T) {
	lab := sharedLearnLab(t)
	lab.servers(t)
	for _, tt := range []struct {
		name    string
		srv     *harness.Postgres
		user    string
		modes   string
		outcome string
		cold    int // TCP connections: 005's EVENTS (a "connect" and each "reconnect")
		warm    int // at most, for every later connect
	}{
		// GSS on, SSL off: "connect, authfail, reconnect, sslreject -> fail"
		{"gssuser gssencmode=disable sslmode=allow, GSS on", lab.gssOn, "gssuser", "gssencmode=disable sslmode=allow", "fail", 2, 2},
		// "connect, sslreject, authfail -> fail"
		{"gssuser gssencmode=disable sslmode=prefer, GSS on", lab.gssOn, "gssuser", "gssencmode=disable sslmode=prefer", "fail", 1, 1},
		// both on: "connect, gssaccept, authfail, reconnect, authfail -> fail"
		{"ssluser gssencmode=prefer sslmode=disable, both on", lab.bothOn, "ssluser", "gssencmode=prefer sslmode=disable", "fail", 2, 2},
		// GSS on: "connect, gssaccept, authfail, reconnect, sslreject, authok -> plain"; once
		// the fallback got in, GSS is known to fail for this user and skipped.
		{"nogssuser gssencmode=prefer sslmode=prefer, GSS on", lab.gssOn, "nogssuser", "gssencmode=prefer sslmode=prefer", "plain", 2, 1},
		// "connect, gssaccept, authok -> gss"
		{"gssuser gssencmode=prefer sslmode=prefer, GSS on", lab.gssOn, "gssuser", "gssencmode=prefer sslmode=prefer", "gss", 1, 1},
		// 001_auth.pl: GSS-encrypted, refused; SSLRequest refused, plaintext, refused.
		{"001_auth.pl fails without mapping", lab.mapped, "alice", "", "fail", 2, 2},
		{"001_auth.pl fails with wrong krb_realm", lab.realmSrv, "alice", "", "fail", 2, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dsn, px := counted(t, tt.srv, tt.user, tt.modes)
			psql, libpq := connections(px, func() string { return lab.psqlOutcome(t, dsn) })
			if psql != tt.outcome || libpq != tt.cold {
				t.Fatalf("psql: %s in %d TCP connections; the table says %s in %d", psql, libpq, tt.outcome, tt.cold)
			}
			c := lab.connector(t, dsn)
			got, cold := connections(px, func() string { return encryptionOf(t, c) })
			if got != psql || cold != libpq {
				t.Errorf("cold connect: %s in %d TCP connections, want %s in %d as psql", got, cold, psql, libpq)
			}
			for i := range 3 {
				got, n := connections(px, func() string { return encryptionOf(t, c) })
				if got != psql || n > tt.warm {
					t.Errorf("warm connect %d: %s in %d TCP connections, want %s in at most %d (cold: %d)", i+1, got, n, psql, tt.warm, cold)
				}
			}
		})
	}
}

// When connects got in with a remembered 'N' and pg_hba then refuses plaintext, the retry of the
// remembered answer asks SSLRequest again (the server might have turned TLS on) but, answered
// 'N' again, does not send the StartupMessage that was refused a moment before; the retry
// learned the 'N' again with no connect in since, so the next refused connect is one TCP
// connection, as libpq's (psql beside it on the same proxy).
func TestStaleRetryNeverRepeatsARefusedMethod(t *testing.T) {
	srv := harness.StartT(t, harness.Options{HBA: []string{"host all all 127.0.0.1/32 trust"}})
	dsn, px := proxied(t, srv)
	c := newConnector(t, dsn)
	connectN(t, c, 2) // learns 'N', then gets in with it
	if err := srv.SetHBA("host all all 127.0.0.1/32 reject"); err != nil {
		t.Fatal(err)
	}
	connect := func() (outcome string, st harness.ProxyStats) {
		before := px.Stats()
		conn, err := c.Connect(context.Background())
		outcome = "fail"
		if err == nil {
			conn.Close()
			outcome = "in"
		} else if !strings.Contains(err.Error(), "28000") {
			t.Errorf("error %v, want pg_hba's 28000", err)
		}
		after := px.Stats()
		return outcome, harness.ProxyStats{
			Connections:     after.Connections - before.Connections,
			SSLRequests:     after.SSLRequests - before.SSLRequests,
			StartupMessages: after.StartupMessages - before.StartupMessages,
		}
	}
	got, st := connect()
	if want := (harness.ProxyStats{Connections: 2, SSLRequests: 1, StartupMessages: 1}); got != "fail" || st != want {
		t.Errorf("first refused connect: %s with %+v, want fail with %+v (plaintext refused, then 'N' on a new connection)", got, st, want)
	}
	for i := range 2 {
		got, st = connect()
		if want := (harness.ProxyStats{Connections: 1, StartupMessages: 1}); got != "fail" || st != want {
			t.Errorf("refused connect %d after it: %s with %+v, want fail with %+v", i+2, got, st, want)
		}
	}
	before := px.Stats().Connections
	if _, err := harness.Psql(context.Background(), nil, dsn, "select 1"); err == nil {
		t.Error("psql got in")
	}
	if n := px.Stats().Connections - before; n != 1 {
		t.Errorf("psql: %d TCP connections, want 1", n)
	}
}
