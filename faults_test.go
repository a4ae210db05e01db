package pgconnector_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/negotiation"
)

// gssEncrypted reports whether conn (from the connector) is GSS-encrypted, from the server's
// own view (pg_stat_gssapi).
func gssEncrypted(t *testing.T, conn driver.Conn) bool {
	t.Helper()
	rows, err := conn.(driver.QueryerContext).QueryContext(context.Background(),
		"select encrypted from pg_stat_gssapi where pid = pg_backend_pid()", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	dest := make([]driver.Value, 1)
	if err := rows.Next(dest); err != nil {
		t.Fatal(err)
	}
	encrypted, _ := dest[0].(bool)
	return encrypted
}

// An overloaded server ("too many clients", 53300) after GSS encryption was established says
// nothing about GSS: the failed connect opens one socket and reports the server's error, and the
// next connects, once the server has room, are GSS-encrypted again (the cache did not learn
// "no GSS"). Before, the next connects for the TTL went in plaintext.
func TestOverloadDoesNotTurnGSSOff(t *testing.T) {
	lab := newKerberosLab(t)
	srv := harness.StartT(t, harness.Options{
		GSS:      &harness.GSSOptions{KDC: lab.kdc, Keytab: true},
		HBA:      []string{lab.gssHBA(), "host all all 127.0.0.1/32 trust"},
		Settings: map[string]string{"max_connections": "3", "superuser_reserved_connections": "0"},
	})
	if err := srv.CreateRole("alice"); err != nil {
		t.Fatal(err)
	}
	px := harness.ProxyT(t, srv.Addr())
	host, port := px.Addr()
	c := lab.connector(t, "host="+host+" port="+strconv.Itoa(port)+" user=alice dbname="+srv.Database)
	ctx := context.Background()

	// Fill the server; each connection is GSS-encrypted.
	var held []driver.Conn
	for range 3 {
		conn, err := c.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !gssEncrypted(t, conn) {
			t.Fatal("not GSS-encrypted before the overload")
		}
		held = append(held, conn)
	}
	before := px.Stats().Connections
	_, err := c.Connect(ctx)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "53300" {
		t.Fatalf("connect to a full server: %v, want SQLSTATE 53300", err)
	}
	if n := px.Stats().Connections - before; n != 1 {
		t.Errorf("the failed connect opened %d sockets, want 1", n)
	}
	for _, conn := range held {
		conn.Close()
	}
	for i := range 3 {
		conn, err := c.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !gssEncrypted(t, conn) {
			t.Errorf("connect %d after the overload is not GSS-encrypted", i+1)
		}
		conn.Close()
	}
}

// An error leads with its cause: a wrong password against a server without TLS is the server's
// 28P01, said once, not "server refused TLS connection" with the cause on a second line; an
// optional method the server refused is not an error.
func TestErrorLeadsWithItsCause(t *testing.T) {
	srv := harness.StartT(t, harness.Options{Auth: "scram-sha-256"})
	_, err := newConnector(t, srv.DSN("password=wrong-secret-pw")).Connect(context.Background())
	if err == nil {
		t.Fatal("connected with a wrong password")
	}
	msg := err.Error()
	want := "pgconnector: host " + srv.Host + ":" + strconv.Itoa(srv.Port) + ": startup: FATAL: password authentication failed"
	if !strings.HasPrefix(msg, want) {
		t.Errorf("error %q\ndoes not start with %q", msg, want)
	}
	for _, bad := range []string{"TLS", "refused", "failed to connect to", "\n", "wrong-secret-pw"} {
		if strings.Contains(msg, bad) {
			t.Errorf("error %q contains %q", msg, bad)
		}
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "28P01" {
		t.Errorf("errors.As finds %v, want the server's 28P01", pgErr)
	}
}

// A KDC that accepts and never answers holds a connect no longer than connect_timeout, or the
// context's deadline (gokrb5 alone waits 5 s and more per KDC), for GSS encryption and for GSS
// authentication (pg_hba method gss, which pgx runs with no context) alike. Nothing is
// remembered, so the next connect asks the KDC again.
func TestSilentKDCIsBounded(t *testing.T) {
	lab := newKerberosLab(t)
	encSrv := lab.server(t, true, lab.gssHBA(), "hostnogssenc all all 127.0.0.1/32 trust")
	authSrv := lab.server(t, true, "host all all 127.0.0.1/32 gss include_realm=0 krb_realm="+lab.kdc.Realm)
	silent := harness.KDCStandInT(t, harness.KDCSilent)
	conf := filepath.Join(t.TempDir(), "krb5.conf")
	if err := silent.WriteKrb5Conf(conf, lab.kdc.Realm); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		dsn     string
		step    string
		timeout time.Duration // of the context; 0: none
		bound   time.Duration
	}{
		{"GSS encryption, connect_timeout=1", aliceDSN(encSrv, "localhost", "connect_timeout=1"), "service ticket", 0, time.Second},
		{"GSS encryption, context deadline 300ms", aliceDSN(encSrv, "localhost", "connect_timeout=1"), "service ticket", 300 * time.Millisecond, 300 * time.Millisecond},
		{"GSS authentication, connect_timeout=1", aliceDSN(authSrv, "localhost", "gssencmode=disable", "sslmode=disable", "connect_timeout=1"), "startup", 0, time.Second},
		{"GSS authentication, context deadline 300ms", aliceDSN(authSrv, "localhost", "gssencmode=disable", "sslmode=disable"), "startup", 300 * time.Millisecond, 300 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newConnector(t, tt.dsn, pgconnector.WithKerberos(pgconnector.Kerberos{Krb5Conf: conf, CCache: lab.ccache}))
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			start := time.Now()
			_, err := c.Connect(ctx)
			took := time.Since(start)
			if err == nil {
				t.Fatal("connected although the KDC never answers")
			}
			if !strings.Contains(err.Error(), tt.step) {
				t.Errorf("error %q does not name the %s step", err, tt.step)
			}
			if took > tt.bound+time.Second {
				t.Errorf("the connect took %v, want about %v", took, tt.bound)
			}
		})
	}
	if silent.Accepted()+silent.Datagrams() == 0 {
		t.Error("the KDC stand-in was never asked: the test proves nothing")
	}
}

// A remembered answer that turns out wrong is negotiated again within the same connect_timeout:
// against a server that stalls after the StartupMessage, a connect made from a remembered 'N'
// fails after connect_timeout, not twice that (before, the retry got a timeout of its own).
func TestStaleAnswerRetryKeepsTheTimeout(t *testing.T) {
	srv := harness.FaultServerT(t, harness.FaultServerOptions{Fault: harness.Fault{Step: harness.StepStartup, Kind: harness.FaultStall}})
	_, port := srv.Addr()
	c := newConnector(t, "host=127.0.0.1 port="+strconv.Itoa(port)+" user=u dbname=d connect_timeout=2")
	pgconnector.CacheOf(c).SetSSL(negotiation.Key{Host: "127.0.0.1", Port: uint16(port)}, negotiation.AnswerNo)
	start := time.Now()
	_, err := c.Connect(context.Background())
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("error %v, want a timeout", err)
	}
	if took > 3*time.Second {
		t.Errorf("the connect took %v, want about the 2 s of connect_timeout", took)
	}
	if st := srv.Stats(); st.SSLRequests != 0 {
		t.Errorf("%d SSLRequests: a timeout is not a reason to forget what the server answered", st.SSLRequests)
	}
}

// What a failure of GSS after 'G' teaches, through a proxy in front of a real server that offers
// GSS encryption (hostgssenc) and allows plaintext too: a failed check of the server (an AP-REP
// that does not verify, a wrap token failing its integrity check), a reset or a stall is never
// remembered, so the next connect is GSS-encrypted again; only the server closing the socket on
// the AP-REQ twice in a row (what PostgreSQL does when it cannot accept the context, and what a
// restart does once) is. Beside psql, which remembers nothing.
func TestGSSFaultsAreNotRemembered(t *testing.T) {
	lab := newKerberosLab(t)
	srv := lab.server(t, true, lab.gssHBA(), "hostnogssenc all all 127.0.0.1/32 trust")
	for _, tt := range []struct {
		name         string
		fault        harness.Fault
		extra        string
		first        string // the first connect: "gss", "plain" or "fail"
		firstSockets int
		second       string // the next connect, the fault gone
		third        string // and the one after, when the row says ("": not tried)
		thirdSockets int
		psqlFirst    string // psql's first and second connects
		psqlSecond   string
		differs      string
	}{
		{name: "AP-REP corrupted", fault: harness.Fault{Step: harness.StepAPRep, Kind: harness.FaultCorrupt, Count: 1},
			first: "plain", firstSockets: 2, second: "gss", psqlFirst: "plain", psqlSecond: "gss"},
		{name: "AP-REP reset", fault: harness.Fault{Step: harness.StepAPRep, Kind: harness.FaultReset, Count: 1},
			first: "plain", firstSockets: 2, second: "gss", psqlFirst: "plain", psqlSecond: "gss"},
		{name: "AP-REP closed once", fault: harness.Fault{Step: harness.StepAPRep, Kind: harness.FaultClose, Count: 1},
			first: "plain", firstSockets: 2, second: "gss", psqlFirst: "plain", psqlSecond: "gss"},
		{name: "AP-REP closed twice", fault: harness.Fault{Step: harness.StepAPRep, Kind: harness.FaultClose, Count: 2},
			first: "plain", firstSockets: 2, second: "plain", third: "plain", thirdSockets: 1, psqlFirst: "plain", psqlSecond: "plain",
			differs: "a server that closes on the AP-REQ twice in a row is one that cannot accept the context (no keytab): remembered for the TTL, saving a backend per connect (psql pays it every time)"},
		{name: "first wrap token corrupted", fault: harness.Fault{Step: harness.StepWrapToken, Kind: harness.FaultCorrupt, Count: 1},
			first: "fail", firstSockets: 1, second: "gss", psqlFirst: "fail", psqlSecond: "gss"},
		{name: "first wrap token reset", fault: harness.Fault{Step: harness.StepWrapToken, Kind: harness.FaultReset, Count: 1},
			first: "fail", firstSockets: 1, second: "gss", psqlFirst: "fail", psqlSecond: "gss"},
		{name: "first wrap token stalled", fault: harness.Fault{Step: harness.StepWrapToken, Kind: harness.FaultStall, Count: 1}, extra: "connect_timeout=2",
			first: "fail", firstSockets: 1, second: "gss", psqlFirst: "fail", psqlSecond: "gss"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			px := harness.FaultProxyT(t, srv.Addr(), tt.fault)
			_, port := px.Addr()
			dsn := aliceDSN(srv, "localhost", tt.extra)
			dsn = strings.Replace(dsn, "port="+strconv.Itoa(srv.Port), "port="+strconv.Itoa(port), 1)
			c := lab.connector(t, dsn)
			outcome := func() string {
				conn, err := c.Connect(context.Background())
				if err != nil {
					t.Logf("connector: %v", err)
					return "fail"
				}
				defer conn.Close()
				if gssEncrypted(t, conn) {
					return "gss"
				}
				return "plain"
			}
			if got := outcome(); got != tt.first {
				t.Errorf("first connect: %s, want %s", got, tt.first)
			}
			if n := px.Stats().Connections; n != tt.firstSockets {
				t.Errorf("first connect: %d sockets, want %d", n, tt.firstSockets)
			}
			if got := outcome(); got != tt.second {
				t.Errorf("next connect: %s, want %s", got, tt.second)
			}
			if tt.third != "" {
				before := px.Stats().Connections
				if got := outcome(); got != tt.third {
					t.Errorf("third connect: %s, want %s", got, tt.third)
				}
				if n := px.Stats().Connections - before; n != tt.thirdSockets {
					t.Errorf("third connect: %d sockets, want %d", n, tt.thirdSockets)
				}
			}

			// psql through a proxy of its own with the same fault.
			ppx := harness.FaultProxyT(t, srv.Addr(), tt.fault)
			_, pport := ppx.Addr()
			pdsn := strings.Replace(aliceDSN(srv, "localhost", tt.extra), "port="+strconv.Itoa(srv.Port), "port="+strconv.Itoa(pport), 1)
			psql := func() string {
				out, err := harness.Psql(context.Background(), lab.kdc.Env(lab.ccache), pdsn,
					"select encrypted from pg_stat_gssapi where pid = pg_backend_pid()")
				switch {
				case err != nil:
					return "fail"
				case out == "t":
					return "gss"
				}
				return "plain"
			}
			if got := psql(); got != tt.psqlFirst {
				t.Errorf("psql, first: %s, want %s: the oracle changed, check the row", got, tt.psqlFirst)
			}
			if got := psql(); got != tt.psqlSecond {
				t.Errorf("psql, next: %s, want %s: the oracle changed, check the row", got, tt.psqlSecond)
			}
		})
	}
}

// pgx sends a CancelRequest through the dial function of the attempt that made the connection.
// That dial is not a connect: whatever the server answers the cancel's SSLRequest, the cache is
// left as the connects made it, no socket is kept, and concurrent cancels race on nothing (run
// with -race).
func TestCancelRequestsLeaveTheNegotiationAlone(t *testing.T) {
	srv := harness.StartT(t, harness.Options{TLS: true})
	c := newConnector(t, srv.DSN("sslmode=prefer"))
	key := negotiation.Key{Host: srv.Host, Port: uint16(srv.Port)}
	var conns []driver.Conn
	for range 4 {
		conn, err := c.Connect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
	}
	if k := pgconnector.CacheOf(c).Known(key); k.SSL != negotiation.AnswerYes {
		t.Fatalf("after TLS connects the cache knows %+v", k)
	}
	// The server stops offering TLS: the cancels' SSLRequests get 'N'.
	if err := srv.SetSSL(false); err != nil {
		t.Fatal(err)
	}
	_, fds, _ := resources()
	var wg sync.WaitGroup
	for _, conn := range conns {
		pc := pgconnector.PgxConnOf(conn)
		for range 2 {
			wg.Go(func() {
				// Refused: the server no longer does TLS, and the connection's cancel asks for it.
				if err := pc.PgConn().CancelRequest(context.Background()); err == nil {
					t.Error("a CancelRequest over TLS succeeded against a server without TLS")
				}
			})
		}
	}
	wg.Wait()
	for _, conn := range conns {
		conn.Close()
	}
	if k := pgconnector.CacheOf(c).Known(key); k.SSL != negotiation.AnswerYes {
		t.Errorf("a CancelRequest's dial changed the cache: %+v", k)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, now, _ := resources()
		if now <= fds {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("file descriptors %d -> %d after the cancels: a cancel's socket is kept", fds, now)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
}
