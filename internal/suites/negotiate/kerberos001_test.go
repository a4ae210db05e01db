package negotiate

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// The client cases of PostgreSQL's src/test/kerberos/t/001_auth.pl, as data: the server's
// pg_hba.conf and pg_ident.conf at each step of the script, and for each connection the
// script makes, the keys it adds, the query, and what it expects (a connection whose query
// prints want, or a failure; the messages the server must log for it).
//
// They run on PostgreSQL 15 (the only server here built with GSSAPI), which changes them in
// three ways, each in the case's data: pg_stat_gssapi has no credentials_delegated and the
// "connection authorized" line no deleg_credentials (PostgreSQL 16), so the queries and
// messages leave delegation out; libpq 15 knows no gssdeleg, so the strings leave it out; and
// SYSTEM_USER (PostgreSQL 16) is not asked. Left out with them: the cases of delegated
// credentials themselves (gss_accept_deleg, dblink and postgres_fdw through the server,
// which test the server's use of them) and the SYSTEM_USER cases. The require_auth cases are
// run against the script's expectation alone: libpq 15 has no require_auth and the libpq 18
// here has no GSSAPI, so no psql here can run them.

// The script's realm, and the one its last step names wrongly.
const (
	realm001      = "EXAMPLE.COM"
	wrongRealm001 = "EXAMPLE.ORG"
)

// A step001 is one set-up of the server in the script, with the cases run on it.
type step001 struct {
	name  string
	hba   []string
	ident []string
	cases []case001
}

// A case001 is one connection of the script.
type case001 struct {
	name   string // the script's test name
	ticket bool   // the client has test1's ticket (kinit test1)
	keys   string // what the script adds to the string: "gssencmode=require"
	query  string
	ok     bool
	want   string // for ok: a regexp psql's and the connector's output must match (anchored)
	// stderr is, for a failure the script checks the message of, a regexp the connector's
	// error must match (libpq's words).
	stderr string
	// logLike are messages the server must log for the connection (the script's log_like).
	logLike []string
	// noPsql: no psql here can run the case (see above); it is checked against the script's
	// expectation alone.
	noPsql bool
	// copyLines: the script's "sending 100K lines" case, a COPY FROM STDIN of the numbers 1 to
	// copyLines into a temporary table, then its count (query).
	copyLines int
	// after names the case whose Connector this one also runs on, after its own cold and warm
	// connects: a client that connected in the earlier step and connects again once the
	// administrator changed the server.
	after string
}

// The script's queries, without credentials_delegated (PostgreSQL 16).
const (
	qEncrypted001   = "SELECT gss_authenticated AND encrypted FROM pg_stat_gssapi WHERE pid = pg_backend_pid();"
	qUnencrypted001 = "SELECT gss_authenticated AND NOT encrypted FROM pg_stat_gssapi WHERE pid = pg_backend_pid();"
)

var (
	identity001     = `connection authenticated: identity="test1@` + realm001 + `" method=gss`
	authorizedEnc   = `connection authorized: user=test1 database=postgres application_name=001_auth.pl GSS (authenticated=yes, encrypted=yes, principal=test1@` + realm001 + `)`
	authorizedNoEnc = `connection authorized: user=test1 database=postgres application_name=001_auth.pl GSS (authenticated=yes, encrypted=no, principal=test1@` + realm001 + `)`
)

func steps001() []step001 {
	mapped := []string{"mymap  /^(.*)@" + realm001 + "$  \\1"}
	encOK := func(name, keys string) case001 {
		return case001{name: name, ticket: true, keys: keys, query: qEncrypted001, ok: true, want: "t",
			logLike: []string{identity001, authorizedEnc}}
	}
	var lines []string
	for i := 1; i <= 100000; i++ {
		lines = append(lines, strconv.Itoa(i))
	}
	return []step001{{
		name: "host gss map=mymap, no map",
		hba:  []string{"host all all 127.0.0.1/32 gss map=mymap"},
		cases: []case001{
			{name: "fails without ticket", query: "SELECT true"},
			{name: "fails without mapping", ticket: true, query: "SELECT true",
				logLike: []string{identity001, `no match in usermap "mymap" for user "test1"`}},
		},
	}, {
		name:  "host gss map=mymap, mapped",
		hba:   []string{"host all all 127.0.0.1/32 gss map=mymap"},
		ident: mapped,
		cases: []case001{
			func() case001 {
				c := encOK("succeeds with mapping with default gssencmode and host hba, ticket not forwardable", "")
				c.after = "fails without mapping"
				return c
			}(),
			encOK("succeeds with GSS-encrypted access preferred with host hba, ticket not forwardable", "gssencmode=prefer"),
			encOK("succeeds with GSS-encrypted access required with host hba, ticket not forwardable", "gssencmode=require"),
			{name: "receiving 100K lines works", ticket: true, keys: "gssencmode=require", ok: true,
				query: "SELECT * FROM generate_series(1, 100000);", want: `1\n(?s:.*)\n1024\n(?s:.*)\n9999\n(?s:.*)\n100000`},
			{name: "sending 100K lines works", ticket: true, keys: "gssencmode=require", ok: true,
				copyLines: 100000, query: "SELECT COUNT(*) FROM mytab;", want: "100000"},
			{name: "GSS authentication requested, works with non-encrypted GSS", ticket: true, noPsql: true,
				keys: "gssencmode=disable require_auth=gss", query: "SELECT true", ok: true, want: "t"},
			{name: "GSS authentication requested, works with encrypted GSS auth", ticket: true, noPsql: true,
				keys: "gssencmode=require require_auth=gss", query: "SELECT true", ok: true, want: "t"},
			{name: "SSPI authentication requested, fails with non-encrypted GSS", ticket: true, noPsql: true,
				keys: "gssencmode=disable require_auth=sspi", query: "SELECT true",
				stderr: `authentication method requirement "sspi" failed: server requested GSSAPI authentication`},
			{name: "SSPI authentication requested, fails with encrypted GSS", ticket: true, noPsql: true,
				keys: "gssencmode=require require_auth=sspi", query: "SELECT true",
				stderr: `authentication method requirement "sspi" failed: server did not complete authentication`},
		},
	}, {
		name:  "hostgssenc gss map=mymap",
		hba:   []string{"hostgssenc all all 127.0.0.1/32 gss map=mymap"},
		ident: mapped,
		cases: []case001{
			encOK("succeeds with GSS-encrypted access preferred and hostgssenc hba and credentials not forwarded", "gssencmode=prefer"),
			encOK("succeeds with GSS-encrypted access required and hostgssenc hba and credentials explicitly not forwarded", "gssencmode=require"),
			{name: "fails with GSS encryption disabled and hostgssenc hba", ticket: true, keys: "gssencmode=disable", query: "SELECT true"},
			{name: "GSS authentication requested, works with GSS encryption", ticket: true, noPsql: true,
				keys: "gssencmode=require require_auth=gss", query: "SELECT true", ok: true, want: "t"},
			{name: "multiple authentication types requested, works with GSS encryption", ticket: true, noPsql: true,
				keys: "gssencmode=require require_auth=gss,scram-sha-256", query: "SELECT true", ok: true, want: "t"},
		},
	}, {
		name:  "hostnogssenc gss map=mymap",
		hba:   []string{"hostnogssenc all all 127.0.0.1/32 gss map=mymap"},
		ident: mapped,
		cases: []case001{
			{name: "succeeds with GSS-encrypted access preferred and hostnogssenc hba, but no encryption", ticket: true,
				keys: "gssencmode=prefer", query: qUnencrypted001, ok: true, want: "t", logLike: []string{identity001, authorizedNoEnc}},
			{name: "fails with GSS-encrypted access required and hostnogssenc hba", ticket: true, keys: "gssencmode=require", query: "SELECT true"},
			{name: "succeeds with GSS encryption disabled and hostnogssenc hba", ticket: true,
				keys: "gssencmode=disable", query: qUnencrypted001, ok: true, want: "t", logLike: []string{identity001, authorizedNoEnc}},
		},
	}, {
		name: "host gss include_realm=0",
		hba:  []string{"host all all 127.0.0.1/32 gss include_realm=0"},
		cases: []case001{
			encOK("succeeds with include_realm=0 and defaults", ""),
		},
	}, {
		name: "host gss include_realm=0 krb_realm=" + wrongRealm001,
		hba:  []string{"host all all 127.0.0.1/32 gss include_realm=0 krb_realm=" + wrongRealm001},
		cases: []case001{
			{name: "fails with wrong krb_realm, but still authenticates", ticket: true, query: "SELECT true",
				logLike: []string{identity001}},
		},
	}}
}

// copyScript001 is the script's input for the "sending 100K lines" case.
func copyScript001(n int) string {
	var b strings.Builder
	b.WriteString("CREATE TEMP TABLE mytab (f1 int primary key);\nCOPY mytab FROM STDIN;\n")
	for i := 1; i <= n; i++ {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	b.WriteString("\\.\nSELECT COUNT(*) FROM mytab;\n")
	return b.String()
}

// A kerberosLab is the script's node and KDC.
type kerberosLab struct {
	pg       *harness.Postgres
	kdc      *harness.KDC
	ccache   string // test1's ticket, once kinit ran
	noTicket string // a credential cache that does not exist
	// carry is the proxy of the Connectors that live from one case to a later one (case001.
	// after), kept by the name of the case they were made in.
	carry    *harness.NegotiationProxy
	carriers map[string]*pgconnector.Connector
}

func (l *kerberosLab) conninfo(c case001, port int) string {
	s := fmt.Sprintf("dbname=postgres application_name=001_auth.pl user=test1 host=localhost hostaddr=127.0.0.1 port=%d", port)
	if c.keys != "" {
		s += " " + c.keys
	}
	return s
}

func (l *kerberosLab) cache(c case001) string {
	if c.ticket {
		return l.ccache
	}
	return l.noTicket
}

// A phase001 is what one connect of a case gave.
type phase001 struct {
	ok     bool
	out    string
	err    string
	conns  int
	events string
	log    string // the server's lines for its connections
}

// connectorRun001 connects with c, runs the case's query (after its COPY) and closes.
func connectorRun001(ctx context.Context, c *pgconnector.Connector, k case001) phase001 {
	dc, err := c.Connect(ctx)
	if err != nil {
		return phase001{err: err.Error()}
	}
	defer dc.Close()
	pc, ok := dc.(interface{ Conn() *pgx.Conn })
	if !ok {
		return phase001{err: fmt.Sprintf("%T has no Conn method", dc)}
	}
	conn := pc.Conn()
	if k.copyLines > 0 {
		if _, err := conn.Exec(ctx, "CREATE TEMP TABLE mytab (f1 int primary key)"); err != nil {
			return phase001{err: "create: " + err.Error()}
		}
		rows := make([][]any, k.copyLines)
		for i := range rows {
			rows[i] = []any{int32(i + 1)}
		}
		if _, err := conn.CopyFrom(ctx, pgx.Identifier{"mytab"}, []string{"f1"}, pgx.CopyFromRows(rows)); err != nil {
			return phase001{err: "copy: " + err.Error()}
		}
	}
	out, err := queryText(ctx, conn, k.query)
	if err != nil {
		return phase001{err: "query: " + err.Error()}
	}
	return phase001{ok: true, out: out}
}

// queryText runs query and prints its rows as psql -A -t does: columns joined by "|", rows by
// newlines, booleans as t and f.
func queryText(ctx context.Context, conn *pgx.Conn, query string) (string, error) {
	rows, err := conn.Query(ctx, query, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return "", err
		}
		cols := make([]string, len(vals))
		for i, v := range vals {
			switch v := v.(type) {
			case bool:
				cols[i] = map[bool]string{true: "t", false: "f"}[v]
			case nil:
				cols[i] = ""
			default:
				cols[i] = fmt.Sprint(v)
			}
		}
		lines = append(lines, strings.Join(cols, "|"))
	}
	return strings.Join(lines, "\n"), rows.Err()
}

// TestKerberos001 runs 001_auth.pl's client cases on PostgreSQL 15 with a KDC of the harness
// (the script's realm), beside psql on libpq 15, through a proxy per case. Each case: psql's
// outcome and output are the script's; the connector's, on a new Connector and again on the
// same one, are psql's, with the server's log holding the script's messages for each, and the
// second connect opens no more TCP connections than the first.
func TestKerberos001(t *testing.T) {
	t.Parallel()
	kdc := harness.StartKDCT(t, harness.KDCOptions{Realm: realm001})
	if _, err := kdc.AddPrincipal("test1"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	l := &kerberosLab{kdc: kdc, ccache: filepath.Join(dir, "krb5cc"), noTicket: filepath.Join(dir, "none", "krb5cc")}
	steps := steps001()
	l.pg = harness.StartT(t, harness.Options{Major: 15, GSS: &harness.GSSOptions{KDC: kdc, Keytab: true}, HBA: steps[0].hba})
	if err := l.pg.CreateRole("test1"); err != nil {
		t.Fatal(err)
	}
	l.carry = harness.NegotiationProxyT(t, l.pg.Addr())
	l.carriers = map[string]*pgconnector.Connector{}
	for _, step := range steps {
		for _, c := range step.cases {
			if c.after != "" {
				l.carriers[c.after] = nil
			}
		}
	}
	defer func() {
		for _, c := range l.carriers {
			if c != nil {
				c.Close()
			}
		}
	}()
	for _, step := range steps {
		if err := l.pg.SetHBA(step.hba...); err != nil {
			t.Fatal(err)
		}
		if err := l.pg.SetIdent(step.ident...); err != nil {
			t.Fatal(err)
		}
		for _, c := range step.cases {
			if c.ticket {
				if _, err := kdc.Klist(l.ccache); err != nil {
					if err := kdc.Kinit(l.ccache, "test1", 0); err != nil {
						t.Fatal(err)
					}
				}
			}
			t.Run(c.name, func(t *testing.T) { l.check(t, c) })
		}
	}
}

// check runs a case: psql, the connector on a new Connector twice; and the carried Connector
// (see case001.after) made here, or made in c.after; then asserts.
func (l *kerberosLab) check(t *testing.T, c case001) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	px := harness.NegotiationProxyT(t, l.pg.Addr())
	conninfo := l.conninfo(c, px.Port())
	mark := l.pg.LogMark()
	var bounds []int
	endPhase := func() {
		t.Helper()
		if err := px.WaitDone(ctx); err != nil {
			t.Fatal(err)
		}
		bounds = append(bounds, len(px.Conns()))
	}

	var psql phase001
	if !c.noPsql {
		var out string
		var err error
		if c.copyLines > 0 {
			out, err = harness.PsqlScript(ctx, l.kdc.Env(l.cache(c)), conninfo, copyScript001(c.copyLines))
		} else {
			out, err = harness.Psql(ctx, l.kdc.Env(l.cache(c)), conninfo, c.query)
		}
		psql = phase001{ok: err == nil, out: out}
		if err != nil {
			psql.err = err.Error()
		}
	}
	endPhase()

	opts := []pgconnector.Option{pgconnector.WithKerberos(pgconnector.Kerberos{Krb5Conf: l.kdc.Krb5Conf, CCache: "FILE:" + l.cache(c)})}
	conn, err := pgconnector.New(conninfo, opts...)
	if err != nil {
		t.Fatalf("New(%q): %v", conninfo, err)
	}
	defer conn.Close()
	cold := connectorRun001(ctx, conn, c)
	endPhase()
	warm := connectorRun001(ctx, conn, c)
	endPhase()
	// A Connector that lives on to a later case: made here, through the lab's own proxy.
	var carried *phase001
	carrier := ""
	if prev, ok := l.carriers[c.name]; ok && prev == nil {
		cc, err := pgconnector.New(l.conninfo(c, l.carry.Port()), opts...)
		if err != nil {
			t.Fatal(err)
		}
		l.carriers[c.name] = cc
		p := connectorRun001(ctx, cc, c)
		carried, carrier = &p, "a Connector made here"
	}
	if c.after != "" {
		prev := l.carriers[c.after]
		if prev == nil {
			t.Fatalf("no Connector of the case %q", c.after)
		}
		p := connectorRun001(ctx, prev, c)
		carried, carrier = &p, "the Connector of "+strconv.Quote(c.after)+", connecting again"
	}

	backends := backendLines(l.pg.LogSince(mark))
	conns := px.Conns()
	phases := []*phase001{&psql, &cold, &warm}
	from := 0
	for i, p := range phases {
		p.conns = bounds[i] - from
		var lines []string
		var ev []string
		for j, pc := range conns[from:bounds[i]] {
			if j == 0 {
				ev = append(ev, "connect")
			} else {
				ev = append(ev, "reconnect")
			}
			ev = append(ev, pc.Steps...)
			lines = append(lines, backends[pc.ServerPort]...)
		}
		p.events = strings.Join(ev, ", ")
		p.log = strings.Join(lines, "")
		from = bounds[i]
	}
	t.Logf("%s\n  psql: ok=%v %q (%s) [%s]\n  cold: ok=%v %q (%s) [%s]\n  warm: ok=%v %q (%s) [%s]",
		conninfo, psql.ok, trim(psql.out), psql.err, psql.events, cold.ok, trim(cold.out), cold.err, cold.events,
		warm.ok, trim(warm.out), warm.err, warm.events)

	var want *regexp.Regexp
	if c.ok {
		want = regexp.MustCompile("^(?:" + c.want + ")$")
	}
	check := func(who string, p phase001) {
		t.Helper()
		switch {
		case p.ok != c.ok:
			t.Errorf("%s: connected=%v, the script expects %v (%s)", who, p.ok, c.ok, p.err)
		case c.ok && !want.MatchString(p.out):
			t.Errorf("%s: printed %q, the script expects %q", who, trim(p.out), c.want)
		}
	}
	if !c.noPsql {
		check("psql", psql)
	}
	for _, x := range []struct {
		who string
		p   phase001
	}{{"connector (cold)", cold}, {"connector (warm)", warm}} {
		check(x.who, x.p)
		if !c.noPsql && (x.p.ok != psql.ok || x.p.out != psql.out) {
			t.Errorf("%s: connected=%v %q, psql: connected=%v %q", x.who, x.p.ok, trim(x.p.out), psql.ok, trim(psql.out))
		}
		if c.stderr != "" && !regexp.MustCompile(c.stderr).MatchString(x.p.err) {
			t.Errorf("%s: error %q, the script expects %q", x.who, x.p.err, c.stderr)
		}
		if !x.p.ok && strings.TrimSpace(x.p.err) == "" {
			t.Errorf("%s: a failed connect with an empty error", x.who)
		}
	}
	for _, x := range []struct {
		who string
		p   phase001
	}{{"psql", psql}, {"connector (cold)", cold}, {"connector (warm)", warm}} {
		if x.who == "psql" && c.noPsql {
			continue
		}
		for _, m := range c.logLike {
			if !strings.Contains(x.p.log, m) {
				t.Errorf("%s: the server logged no %q for its connections:\n%s", x.who, m, x.p.log)
			}
		}
	}
	if warm.conns > cold.conns {
		t.Errorf("connector (warm): %d TCP connections [%s], cold: %d [%s]", warm.conns, warm.events, cold.conns, cold.events)
	}
	if carried != nil {
		t.Logf("  %s: ok=%v %q (%s)", carrier, carried.ok, trim(carried.out), carried.err)
		check(carrier, *carried)
		if carried.ok != psql.ok || carried.out != psql.out {
			t.Errorf("%s: connected=%v %q, psql: connected=%v %q (%s)",
				carrier, carried.ok, trim(carried.out), psql.ok, trim(psql.out), carried.err)
		}
	}
}

// trim shortens a long output for a message.
func trim(s string) string {
	if len(s) > 80 {
		return s[:40] + " ... " + s[len(s)-30:]
	}
	return s
}
