package negotiate

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// The script's host name: it needs no DNS, every string has hostaddr=127.0.0.1.
const host005 = "enc-test-localhost.postgresql.example.com"

// TestNegotiate005SSL runs 005_negotiate_encryption.pl's tables without GSSAPI in the server
// on PostgreSQL 18 (SSL off, then on), and its Unix-socket rows, beside psql on libpq 18.
func TestNegotiate005SSL(t *testing.T) {
	t.Parallel()
	env := libpq18(t)
	t.Run("ssl-off", func(t *testing.T) {
		t.Parallel()
		l := &lab005{pg: start005(t, harness.Options{Major: 18}), logEvents: true, host: host005, negotiation: true, psqlEnv: env}
		rows, missing := matrix005(tableSSLOff005, []string{"testuser"}, allGSSEncModes, allSSLModes, allSSLNegotiations)
		if len(missing) > 0 {
			t.Fatalf("rows missing from the table: %q", missing)
		}
		runTable(t, l, rows, true)
	})
	t.Run("ssl-on", func(t *testing.T) {
		t.Parallel()
		l := &lab005{pg: start005(t, harness.Options{Major: 18, TLS: true}), logEvents: true, host: host005, negotiation: true, psqlEnv: env}
		rows, missing := matrix005(tableSSLOn005, []string{"testuser", "ssluser", "nossluser"}, []string{"disable"}, allSSLModes, allSSLNegotiations)
		if len(missing) > 0 {
			t.Fatalf("rows missing from the table: %q", missing)
		}
		runTable(t, l, rows, true)
		// The Unix-socket rows, one after the other: their backends are told apart by the
		// order of the log alone.
		for _, r := range tableUnixSocket005 {
			t.Run("unix/"+rowName(r), func(t *testing.T) { checkUnix005(t, l, r) })
		}
	})
}

// checkUnix005 runs a row over the server's Unix-domain socket: psql, then the connector cold
// and warm, each with its events from the log.
func checkUnix005(t *testing.T, l *lab005, r row005) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conninfo := fmt.Sprintf("dbname=postgres host=%s port=%d user=%s gssencmode=%s sslmode=%s",
		l.pg.SocketDir, l.pg.Port, r.user, r.gssencmode, r.sslmode)
	var res result005
	res.conninfo = conninfo
	mark := l.pg.LogMark()
	out, err := harness.Psql(ctx, l.psqlEnv, conninfo, "SELECT current_enc()")
	res.psql = outcomeOf(out, err)
	res.psql.events = unixEvents(l.pg.LogSince(mark))
	c, err := pgconnector.New(conninfo, l.opts...)
	if err != nil {
		res.cold = phase005{outcome: "fail", err: "New: " + err.Error(), events: "-"}
		res.warm = res.cold
	} else {
		for _, p := range []*phase005{&res.cold, &res.warm} {
			mark := l.pg.LogMark()
			*p = connectorOutcome(ctx, c)
			// The backend has logged its events before it answered: they are in the log.
			p.events = unixEvents(l.pg.LogSince(mark))
		}
		c.Close()
	}
	for _, p := range []*phase005{&res.psql, &res.cold, &res.warm} {
		p.conns = countConnects(p.events)
	}
	check005(t, r, res, true)
}

// countConnects is the number of TCP or socket connections in events.
func countConnects(events string) int {
	n := 0
	for _, e := range strings.Split(events, ", ") {
		if e == "connect" || e == "reconnect" {
			n++
		}
	}
	return n
}

// TestNegotiate005GSS runs 005_negotiate_encryption.pl's tables with GSSAPI in the server on
// PostgreSQL 15 (SSL off, then on) with a KDC of the harness, beside psql on libpq 15, without
// sslnegotiation.
func TestNegotiate005GSS(t *testing.T) {
	t.Parallel()
	kdc := harness.StartKDCT(t, harness.KDCOptions{})
	if _, err := kdc.AddPrincipal("gssuser"); err != nil {
		t.Fatal(err)
	}
	ccache := filepath.Join(t.TempDir(), "gssuser.ccache")
	if err := kdc.Kinit(ccache, "gssuser", 0); err != nil {
		t.Fatal(err)
	}
	lab := func(t *testing.T, tls bool) *lab005 {
		pg := start005(t, harness.Options{Major: 15, TLS: tls, GSS: &harness.GSSOptions{KDC: kdc, Keytab: true}})
		return &lab005{pg: pg, host: "localhost", psqlEnv: kdc.Env(ccache),
			opts: []pgconnector.Option{pgconnector.WithKerberos(pgconnector.Kerberos{Krb5Conf: kdc.Krb5Conf, CCache: "FILE:" + ccache})}}
	}
	users := []string{"testuser", "gssuser", "nogssuser"}
	t.Run("gss-on", func(t *testing.T) {
		t.Parallel()
		l := lab(t, false)
		rows, missing := matrix005(tableGSSOn005, users, allGSSEncModes, allSSLModes, []string{"postgres"})
		if len(missing) > 0 {
			t.Fatalf("rows missing from the table: %q", missing)
		}
		s := sanityGSSOn005
		rows = append(rows, s)
		runTable(t, l, rows, false)
	})
	t.Run("both-on", func(t *testing.T) {
		t.Parallel()
		l := lab(t, true)
		rows, missing := matrix005(tableBothOn005, []string{"testuser", "gssuser", "ssluser", "nogssuser", "nossluser"},
			allGSSEncModes, allSSLModes, []string{"postgres"})
		if len(missing) > 0 {
			t.Fatalf("rows missing from the table: %q", missing)
		}
		runTable(t, l, rows, false)
	})
}
