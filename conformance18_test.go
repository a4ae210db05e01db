package pgconnector_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// libpq18Differences are the cases of the keyword matrix where the connector's outcome differs
// from libpq 18's, by the case's name (key, then the connection string with the servers named),
// with the reason. A listed case that no longer differs fails, so the table stays true.
var libpq18Differences = map[string]string{
	"scram_client_key plain: scram_client_key=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=": "the connector rejects the SCRAM pass-through keys in New (internal/connstring/keywords.go: Rejected); " +
		"libpq 18 takes them and uses them only when the server asks for SCRAM",
}

// libpq18KeywordCases are the keyword cases that need libpq 18 as the oracle: the keys and
// values of libpq 16 to 18 with the servers that make them matter.
func libpq18KeywordCases(base func(*harness.Postgres) string, plain, tlsSrv, scram, scramTLS *harness.Postgres) []keywordCase {
	pw := func(s *harness.Postgres) string { return base(s) + "password=" + s.Password + " " }
	verifyFull := func(s *harness.Postgres) string {
		return fmt.Sprintf("host=localhost port=%d user=%s dbname=%s sslmode=verify-full sslrootcert=%s ", s.Port, s.User, s.Database, s.CAFile)
	}
	c := func(key, conninfo string) keywordCase {
		return keywordCase{key: key, conninfo: conninfo, libpq18: true, versioned: true}
	}
	return []keywordCase{
		// Direct TLS (libpq 17): only with sslmode require and stronger; a server before 17
		// does not take a ClientHello in place of a startup packet.
		c("sslnegotiation", base(tlsSrv)+"sslmode=require sslnegotiation=direct"),
		c("sslnegotiation", verifyFull(tlsSrv)+"sslnegotiation=direct"),
		c("sslnegotiation", base(tlsSrv)+"sslmode=verify-ca sslrootcert="+tlsSrv.CAFile+" sslnegotiation=direct"),
		c("sslnegotiation", base(tlsSrv)+"sslmode=prefer sslnegotiation=direct"),
		c("sslnegotiation", base(tlsSrv)+"sslmode=allow sslnegotiation=direct"),
		c("sslnegotiation", base(tlsSrv)+"sslmode=disable sslnegotiation=direct"),
		c("sslnegotiation", base(plain)+"sslmode=require sslnegotiation=direct"),
		c("sslnegotiation", pw(scramTLS)+"sslmode=require sslnegotiation=direct channel_binding=require"),
		c("sslnegotiation", base(tlsSrv)+"sslmode=require sslnegotiation=sideways"),

		// require_auth (libpq 16) on trust and SCRAM servers.
		c("require_auth", pw(scram)+"require_auth=!password"),
		c("require_auth", pw(scram)+"require_auth=!none"),
		c("require_auth", pw(scram)+"require_auth=none"),
		c("require_auth", pw(scram)+"require_auth=md5"),
		c("require_auth", pw(scram)+"require_auth=password,md5"),
		c("require_auth", pw(scram)+"require_auth=scram-sha-256,none"),
		c("require_auth", base(plain)+"require_auth=!none"),
		c("require_auth", base(plain)+"require_auth=none,scram-sha-256"),
		c("require_auth", base(plain)+"require_auth=scram-sha-256,!md5"),
		c("require_auth", base(plain)+"require_auth=kerberos"),
		c("require_auth", pw(scramTLS)+"sslmode=require require_auth=scram-sha-256 channel_binding=require"),
		c("require_auth", pw(scramTLS)+"sslmode=require require_auth=!scram-sha-256"),

		// channel_binding on SCRAM over TLS.
		c("channel_binding", pw(scramTLS)+"sslmode=require channel_binding=require"),
		c("channel_binding", pw(scramTLS)+"sslmode=prefer channel_binding=require"),
		c("channel_binding", pw(scramTLS)+"sslmode=disable channel_binding=require"),
		c("channel_binding", pw(scramTLS)+"channel_binding=disable"),
		c("channel_binding", base(tlsSrv)+"sslmode=require channel_binding=require"),

		// Protocol 3.2 (libpq 18, PostgreSQL 18): a server before 18 answers
		// NegotiateProtocolVersion 3.0.
		c("max_protocol_version", base(plain)+"max_protocol_version=3.2"),
		c("max_protocol_version", base(plain)+"max_protocol_version=latest"),
		c("max_protocol_version", base(plain)+"max_protocol_version=3.1"),
		c("min_protocol_version", base(plain)+"min_protocol_version=3.2"),
		c("min_protocol_version", base(plain)+"min_protocol_version=latest"),
		c("min_protocol_version", base(plain)+"min_protocol_version=3.2 max_protocol_version=3.0"),
		c("max_protocol_version", base(tlsSrv)+"sslmode=require max_protocol_version=3.2"),
		c("min_protocol_version", pw(scramTLS)+"sslmode=require sslnegotiation=direct min_protocol_version=3.2"),

		// sslcertmode (libpq 16): the harness's servers ask for no client certificate.
		c("sslcertmode", base(tlsSrv)+"sslmode=require sslcertmode=disable"),
		c("sslcertmode", base(tlsSrv)+"sslmode=disable sslcertmode=require"),
		c("sslcertmode", base(tlsSrv)+"sslmode=require sslcertmode=sometimes"),

		// sslrootcert=system (libpq 16): the machine's roots do not sign the harness's CA.
		c("sslrootcert", base(tlsSrv)+"sslrootcert=system"),
		c("sslrootcert", base(tlsSrv)+"sslmode=require sslrootcert=system"),
		c("sslrootcert", base(tlsSrv)+"sslmode=verify-full sslrootcert=system"),

		// The same server under two names: the outcome does not depend on the order.
		{key: "load_balance_hosts", conninfo: fmt.Sprintf("host=127.0.0.1,localhost port=%d user=app dbname=app load_balance_hosts=random", plain.Port), libpq18: true},
		// A valid key (32 bytes) that a trust server never asks for.
		{key: "scram_client_key", conninfo: base(plain) + "scram_client_key=" + base64.StdEncoding.EncodeToString(make([]byte, 32)), libpq18: true},
		{key: "gssdelegation", conninfo: base(plain) + "gssdelegation=1", libpq18: true},
		{key: "sslkeylogfile", conninfo: base(tlsSrv) + "sslmode=disable sslkeylogfile=/dev/null", libpq18: true},
	}
}

// TestKeywordsMatchLibpq18 runs the keyword matrix with psql loading libpq 18
// (harness.Libpq18Env) as the oracle: in full against PostgreSQL 18 servers, where every key of
// libpq 15 to 18 is compared with libpq 18's own outcome, and its versioned cases (TLS, direct
// TLS, protocol 3.2, require_auth, channel binding) against 16 and 17. On each version a
// session opened with max_protocol_version=3.2 then has its statement canceled by the
// connector: the cancel key is 32 bytes on 18 (protocol 3.2, protocol.sgml "BackendKeyData"),
// 4 on 16 and 17 (3.0 after NegotiateProtocolVersion).
func TestKeywordsMatchLibpq18(t *testing.T) {
	env, err := harness.Libpq18Env()
	if err != nil {
		t.Fatal(err)
	}
	for _, major := range []int{18, 17, 16} {
		t.Run(strconv.Itoa(major), func(t *testing.T) {
			_, tlsSrv, _, _ := keywordMatrix(t, major, env, major != 18)
			keyLen := map[bool]int{true: 32, false: 4}[major >= 18]
			checkCancel(t, tlsSrv, "sslmode=require max_protocol_version=3.2", keyLen)
			checkCancel(t, tlsSrv, "sslmode=require", 4)
		})
	}
}

// checkCancel opens sessions to srv with a connector for srv.DSN(extra) (the one canceled after
// another has taught the cache what it can), checks that its cancel key has keyLen bytes, and
// cancels a pg_sleep on it with pgx's CancelRequest, which goes out through the connector as the
// session's client (internal/replay, Dial): the statement must end with 57014 (query_canceled),
// which the server answers only to a CancelRequest with the session's key, and the session must
// go on.
func checkCancel(t *testing.T, srv *harness.Postgres, extra string, keyLen int) {
	t.Helper()
	c := newConnector(t, srv.DSN(extra))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	connectOnce(t, ctx, c)
	dc, err := c.Connect(ctx)
	if err != nil {
		t.Fatalf("%s: %v", extra, err)
	}
	defer dc.Close()
	conn := pgconnector.PgxConnOf(dc)
	if n := len(conn.PgConn().SecretKey()); n != keyLen {
		t.Errorf("PostgreSQL %d, %s: cancel key of %d bytes, want %d", srv.Version, extra, n, keyLen)
	}
	pid := conn.PgConn().PID()
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, "SELECT pg_sleep(30)")
		done <- err
	}()
	watch, err := c.Connect(ctx)
	if err != nil {
		t.Fatalf("%s: %v", extra, err)
	}
	defer watch.Close()
	for active := false; !active; {
		if err := pgconnector.PgxConnOf(watch).QueryRow(ctx, "SELECT count(*) = 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active'", pid).Scan(&active); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	if err := conn.PgConn().CancelRequest(ctx); err != nil {
		t.Fatalf("PostgreSQL %d, %s: CancelRequest: %v", srv.Version, extra, err)
	}
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("PostgreSQL %d, %s: pg_sleep(30) was not canceled", srv.Version, extra)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "57014" {
		t.Errorf("PostgreSQL %d, %s: pg_sleep(30) ended with %v, want 57014", srv.Version, extra, err)
	}
	var again uint32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&again); err != nil || again != pid {
		t.Errorf("PostgreSQL %d, %s: after the cancel: pid %d, %v (was %d)", srv.Version, extra, again, err, pid)
	}
	t.Logf("PostgreSQL %d, %s: %d-byte cancel key, canceled in %v", srv.Version, extra, keyLen, time.Since(start).Round(time.Millisecond))
}

// TestMultiHostMatchesLibpq18 runs the multi-host matrix against PostgreSQL 18 servers (a
// primary, its standby, a read-only primary, a rejecting server) with libpq 18 as the oracle.
func TestMultiHostMatchesLibpq18(t *testing.T) {
	env, err := harness.Libpq18Env()
	if err != nil {
		t.Fatal(err)
	}
	multiHostMatrix(t, 18, env)
}

// TestMultiHostVersionsMatchLibpq18 lists servers of PostgreSQL 16, 17 and 18 in one connection
// string and compares, with libpq 18 as the oracle, which one the connector reaches, or that
// both fail, where the version decides: direct TLS (17+), protocol 3.2 (18), require_auth and
// channel binding on a trust server before a SCRAM one, sslmode=require before a server without
// TLS, a certificate that does not verify (libpq-connect.html, "Specifying Multiple Hosts").
func TestMultiHostVersionsMatchLibpq18(t *testing.T) {
	env, err := harness.Libpq18Env()
	if err != nil {
		t.Fatal(err)
	}
	names := map[int]string{}
	servers := map[string]*harness.Postgres{}
	for _, major := range []int{16, 17, 18} {
		for _, o := range []struct {
			name string
			opts harness.Options
		}{
			{"scram-tls", harness.Options{Major: major, TLS: true, Auth: "scram-sha-256"}},
			{"trust-tls", harness.Options{Major: major, TLS: true}},
			{"plain", harness.Options{Major: major}},
		} {
			if major != 18 && o.name == "trust-tls" {
				continue // one trust server with TLS is enough
			}
			name := fmt.Sprintf("%s-%d", o.name, major)
			srv := harness.StartT(t, o.opts)
			servers[name], names[srv.Port] = srv, name
		}
	}
	// The SCRAM servers share one password, so that one string reaches each.
	pw := servers["scram-tls-18"].Password
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range []string{"scram-tls-16", "scram-tls-17"} {
		if err := servers[n].ExecAdmin(ctx, fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", servers[n].User, pw)); err != nil {
			t.Fatal(err)
		}
	}
	type result struct{ name, psql, connector string }
	var results []result
	for _, c := range []struct {
		order []string
		extra string
	}{
		{[]string{"scram-tls-16", "scram-tls-18"}, "sslmode=require sslnegotiation=direct"},
		{[]string{"scram-tls-16", "scram-tls-17"}, "sslmode=require sslnegotiation=direct"},
		{[]string{"scram-tls-17", "scram-tls-16"}, "sslmode=require sslnegotiation=direct"},
		{[]string{"plain-18", "scram-tls-17"}, "sslmode=require sslnegotiation=direct"},
		{[]string{"scram-tls-16", "scram-tls-18"}, "min_protocol_version=3.2"},
		{[]string{"scram-tls-17", "scram-tls-18"}, "min_protocol_version=3.2 sslmode=require"},
		{[]string{"scram-tls-16", "scram-tls-18"}, "max_protocol_version=3.2"},
		{[]string{"trust-tls-18", "scram-tls-16"}, "require_auth=scram-sha-256"},
		{[]string{"trust-tls-18", "scram-tls-17"}, "channel_binding=require"},
		{[]string{"scram-tls-16", "trust-tls-18"}, "require_auth=none"},
		{[]string{"plain-16", "scram-tls-18"}, "sslmode=require"},
		{[]string{"plain-17", "plain-18"}, "sslmode=prefer"},
		{[]string{"scram-tls-16", "scram-tls-17"}, "sslmode=verify-full sslrootcert=" + servers["scram-tls-17"].CAFile},
		{[]string{"scram-tls-16", "scram-tls-18"}, "sslmode=verify-ca sslrootcert=" + servers["scram-tls-18"].CAFile + " sslnegotiation=direct"},
		{[]string{"plain-17", "plain-18"}, "min_protocol_version=latest"},
		{[]string{"plain-18", "plain-16"}, "min_protocol_version=3.2 max_protocol_version=latest"},
	} {
		hosts, ports := make([]string, len(c.order)), make([]string, len(c.order))
		for i, n := range c.order {
			hosts[i], ports[i] = "localhost", strconv.Itoa(servers[n].Port)
		}
		conninfo := fmt.Sprintf("host=%s port=%s user=app dbname=app password=%s connect_timeout=5 %s", strings.Join(hosts, ","), strings.Join(ports, ","), pw, c.extra)
		name := strings.Join(c.order, ",") + " " + strings.ReplaceAll(c.extra, servers["scram-tls-17"].CAFile, "<ca-17>")
		name = strings.ReplaceAll(name, servers["scram-tls-18"].CAFile, "<ca-18>")
		t.Run(name, func(t *testing.T) {
			want, psqlMsg := psqlOutcome(t, names, env, conninfo)
			got, msg := connectorOutcome(t, names, conninfo)
			want, got = strings.Fields(want + " x")[0], strings.Fields(got + " x")[0]
			results = append(results, result{name, want, got})
			if got != want {
				t.Errorf("connector %s (%s), libpq 18 %s (%s)", got, msg, want, psqlMsg)
			}
		})
	}
	for _, r := range results {
		t.Logf("%-70s libpq 18 %-14s connector %s", r.name, r.psql, r.connector)
	}
}
