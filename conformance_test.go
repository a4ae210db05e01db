package pgconnector_test

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// conformanceQuery tells which server a connection reached (its port, 0 over a Unix socket), over
// which transport, and the application_name the server got.
const conformanceQuery = "select coalesce(inet_server_port(), 0), " +
	"coalesce((select ssl from pg_stat_ssl where pid = pg_backend_pid()), false), " +
	"current_setting('application_name')"

// conformanceOutcome is what a connect gave: "error", or the server's name, the transport and
// the application_name.
func conformanceOutcome(names map[int]string, out string) string {
	f := strings.Split(out, "|")
	if len(f) != 3 {
		return "unreadable " + strconv.Quote(out)
	}
	port, _ := strconv.Atoi(f[0])
	name := names[port]
	if name == "" {
		name = "port " + f[0]
	}
	transport := "plain"
	if f[1] == "t" || f[1] == "true" {
		transport = "tls"
	}
	return name + " " + transport + " app=" + f[2]
}

// psqlOutcome runs psql with conninfo and returns its outcome and, for an error, its message.
func psqlOutcome(t *testing.T, names map[int]string, env []string, conninfo string) (outcome, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// PGAPPNAME set but empty: psql's fallback_application_name, as without the harness's.
	out, err := harness.Psql(ctx, append([]string{"PGAPPNAME="}, env...), conninfo, conformanceQuery)
	if err != nil {
		return "error", err.Error()
	}
	// psql passes fallback_application_name=psql, over the connection string's.
	return strings.TrimSuffix(conformanceOutcome(names, out), "app=psql") + map[bool]string{true: "app="}[strings.HasSuffix(out, "|psql")], ""
}

// connectorOutcome opens one connection with a new connector for dsn, twice (a cold and a warm
// cache), and returns the outcome when both agree.
func connectorOutcome(t *testing.T, names map[int]string, dsn string) (outcome, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgconnector.New(dsn)
	if err != nil {
		return "error", err.Error()
	}
	defer c.Close()
	var first string
	for i := range 2 {
		var got string
		dc, err := c.Connect(ctx)
		if err != nil {
			got, msg = "error", err.Error()
		} else {
			var port int
			var ssl bool
			var app string
			if err := pgconnector.PgxConnOf(dc).QueryRow(ctx, conformanceQuery).Scan(&port, &ssl, &app); err != nil {
				got, msg = "error", "query: "+err.Error()
			} else {
				got = conformanceOutcome(names, fmt.Sprintf("%d|%t|%s", port, ssl, app))
			}
			dc.Close()
		}
		if i == 0 {
			first = got
		} else if got != first {
			return fmt.Sprintf("cold %q, warm %q", first, got), msg
		}
	}
	return first, msg
}

// socketOwner is the operating-system user that owns a server's Unix socket: the one SO_PEERCRED
// reports for it.
func socketOwner(t *testing.T, srv *harness.Postgres) string {
	t.Helper()
	fi, err := os.Stat(filepath.Join(srv.SocketDir, fmt.Sprintf(".s.PGSQL.%d", srv.Port)))
	if err != nil {
		t.Fatal(err)
	}
	u, err := user.LookupId(strconv.Itoa(int(fi.Sys().(*syscall.Stat_t).Uid)))
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

// TestKeywordsMatchPsql connects with psql (libpq 15) and with the connector, with the same
// connection string, for each libpq keyword with a typical value, and asserts the same server,
// transport and application_name, or a failure for both. Keywords that libpq 15 does not know
// (added in 16, 17 or 18) are checked against what libpq-connect.html says of them, and psql
// is asserted to reject them, so that a newer psql on the machine would be noticed.
func TestKeywordsMatchPsql(t *testing.T) {
	plain := harness.StartT(t, harness.Options{})
	tlsSrv := harness.StartT(t, harness.Options{TLS: true})
	scram := harness.StartT(t, harness.Options{Auth: "scram-sha-256"})
	names := map[int]string{plain.Port: "plain", tlsSrv.Port: "tls-server", scram.Port: "scram", 0: "socket"}

	dir := t.TempDir()
	passfile := filepath.Join(dir, "pgpass")
	if err := os.WriteFile(passfile, []byte(fmt.Sprintf("127.0.0.1:%d:%s:%s:%s\n", scram.Port, scram.Database, scram.User, scram.Password)), 0o600); err != nil {
		t.Fatal(err)
	}
	servicefile := filepath.Join(dir, "pg_service.conf")
	if err := os.WriteFile(servicefile, []byte(fmt.Sprintf("[svc]\nhost=127.0.0.1\nport=%d\nkeepalives_idle=30\n", plain.Port)), 0o600); err != nil {
		t.Fatal(err)
	}
	base := func(s *harness.Postgres) string {
		return fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s ", s.Port, s.User, s.Database)
	}
	owner := socketOwner(t, plain)
	keylog := filepath.Join(dir, "keylog")

	// want is the outcome for keys psql 15 does not know; "" means: as psql.
	cases := []struct {
		key, conninfo string
		env           []string
		want          string
	}{
		{"host", base(plain), nil, ""},
		{"host", fmt.Sprintf("host=%s port=%d user=app dbname=app", plain.SocketDir, plain.Port), nil, ""},
		{"hostaddr", fmt.Sprintf("host=localhost hostaddr=127.0.0.1 port=%d user=app dbname=app", plain.Port), nil, ""},
		// A name that cannot be resolved: only hostaddr reaches the server.
		{"hostaddr", fmt.Sprintf("host=db.invalid hostaddr=127.0.0.1 port=%d user=app dbname=app", plain.Port), nil, ""},
		{"hostaddr", fmt.Sprintf("hostaddr=127.0.0.1 port=%d user=app dbname=app", plain.Port), nil, ""},
		{"hostaddr", fmt.Sprintf("host=localhost hostaddr=127.0.0.1 port=%d user=app dbname=app sslmode=verify-full sslrootcert=%s", tlsSrv.Port, tlsSrv.CAFile), nil, ""},
		{"hostaddr", fmt.Sprintf("host=localhost,localhost hostaddr=127.0.0.2,127.0.0.1 port=%d,%d user=app dbname=app", scram.Port, plain.Port), nil, ""},
		{"port", base(plain), nil, ""},
		{"dbname", base(plain) + "dbname=postgres", nil, ""},
		{"user", base(plain) + "user=postgres", nil, ""},
		{"password", base(scram) + "password=" + scram.Password, nil, ""},
		{"password", base(scram) + "password=wrong", nil, ""},
		{"passfile", base(scram) + "passfile=" + passfile, nil, ""},
		{"connect_timeout", base(plain) + "connect_timeout=5", nil, ""},
		{"client_encoding", base(plain) + "client_encoding=UTF8", nil, ""},
		{"client_encoding", base(plain) + "client_encoding=auto", []string{"LC_ALL=C.UTF-8"}, ""},
		{"options", base(plain) + "options='-c search_path=public'", nil, ""},
		{"application_name", base(plain) + "application_name=billing", nil, ""},
		// psql's own fallback_application_name (psql) wins over the string's: psql only shows
		// that the key is accepted.
		{"fallback_application_name", base(plain) + "fallback_application_name=fallback", nil, "plain plain app=fallback"},
		{"fallback_application_name", base(plain) + "application_name=billing fallback_application_name=fallback", nil, ""},
		{"keepalives", base(plain) + "keepalives=0", nil, ""},
		{"keepalives_idle", base(plain) + "keepalives_idle=30", nil, ""},
		{"keepalives_interval", base(plain) + "keepalives_interval=10", nil, ""},
		{"keepalives_count", base(plain) + "keepalives_count=3", nil, ""},
		{"tcp_user_timeout", base(plain) + "tcp_user_timeout=5000", nil, ""},
		{"keepalives_idle", base(plain) + "keepalives_idle=soon", nil, ""},
		{"replication", base(plain) + "replication=false", nil, ""},
		{"gssencmode", base(plain) + "gssencmode=disable", nil, ""},
		{"gssencmode", base(plain) + "gssencmode=prefer", nil, ""},
		{"gssencmode", base(plain) + "gssencmode=require", nil, ""},
		{"sslmode", base(tlsSrv) + "sslmode=prefer", nil, ""},
		{"sslmode", base(tlsSrv) + "sslmode=disable", nil, ""},
		{"sslmode", base(plain) + "sslmode=require", nil, ""},
		{"requiressl", base(tlsSrv) + "requiressl=1", nil, ""},
		{"requiressl", base(plain) + "requiressl=1", nil, ""},
		{"requiressl", base(tlsSrv) + "requiressl=1 sslmode=disable", nil, ""},
		{"requiressl", base(tlsSrv) + "sslmode=disable requiressl=1", nil, ""},
		{"sslcompression", base(tlsSrv) + "sslcompression=1", nil, ""},
		{"sslcert", base(tlsSrv) + "sslmode=require sslcert=" + filepath.Join(dir, "none.crt") + " sslkey=" + filepath.Join(dir, "none.key"), nil, ""},
		{"sslkey", base(tlsSrv) + "sslmode=require sslkey=" + filepath.Join(dir, "none.key"), nil, ""},
		{"sslpassword", base(tlsSrv) + "sslmode=require sslpassword=secret", nil, ""},
		{"sslrootcert", base(tlsSrv) + "sslmode=verify-ca sslrootcert=" + tlsSrv.CAFile, nil, ""},
		{"sslrootcert", base(tlsSrv) + "sslmode=verify-full sslrootcert=" + tlsSrv.CAFile, nil, ""},
		{"sslrootcert", base(tlsSrv) + "sslmode=verify-ca sslrootcert=" + passfile, nil, ""},
		{"sslsni", base(tlsSrv) + "sslmode=require sslsni=0", nil, ""},
		{"requirepeer", fmt.Sprintf("host=%s port=%d user=app dbname=app requirepeer=%s", plain.SocketDir, plain.Port, owner), nil, ""},
		{"requirepeer", fmt.Sprintf("host=%s port=%d user=app dbname=app requirepeer=nobody-at-all", plain.SocketDir, plain.Port), nil, ""},
		{"requirepeer", base(plain) + "requirepeer=nobody-at-all", nil, ""},
		{"ssl_min_protocol_version", base(tlsSrv) + "sslmode=require ssl_min_protocol_version=TLSv1.3", nil, ""},
		{"ssl_max_protocol_version", base(tlsSrv) + "sslmode=require ssl_max_protocol_version=TLSv1.2", nil, ""},
		{"ssl_min_protocol_version", base(tlsSrv) + "sslmode=require ssl_min_protocol_version=SSLv3", nil, ""},
		{"krbsrvname", base(plain) + "krbsrvname=postgres", nil, ""},
		{"gsslib", base(plain) + "gsslib=gssapi", nil, ""},
		{"service", "service=svc user=app dbname=app", []string{"PGSERVICEFILE=" + servicefile}, ""},
		{"target_session_attrs", base(plain) + "target_session_attrs=read-write", nil, ""},
		{"target_session_attrs", base(plain) + "target_session_attrs=read-only", nil, ""},
		{"channel_binding", base(scram) + "password=" + scram.Password + " channel_binding=require", nil, ""},
		{"sslcrl", base(tlsSrv) + "sslmode=verify-ca sslrootcert=" + tlsSrv.CAFile + " sslcrl=" + filepath.Join(dir, "none.crl"), nil, ""},
		{"sslcrldir", base(tlsSrv) + "sslmode=verify-ca sslrootcert=" + tlsSrv.CAFile + " sslcrldir=" + filepath.Join(dir, "nocrls"), nil, ""},

		// libpq 16 and later.
		{"require_auth", base(plain) + "require_auth=none", nil, "plain plain app="},
		{"require_auth", base(plain) + "require_auth=scram-sha-256", nil, "error"},
		{"require_auth", base(scram) + "password=" + scram.Password + " require_auth=scram-sha-256", nil, "scram plain app="},
		{"require_auth", base(scram) + "password=" + scram.Password + " require_auth=!scram-sha-256", nil, "error"},
		{"load_balance_hosts", base(plain) + "load_balance_hosts=random", nil, "plain plain app="},
		{"load_balance_hosts", base(plain) + "load_balance_hosts=sometimes", nil, "error"},
		{"sslcertmode", base(tlsSrv) + "sslmode=require sslcertmode=allow", nil, "tls-server tls app="},
		{"sslcertmode", base(tlsSrv) + "sslmode=require sslcertmode=require", nil, "error"},
		{"gssdelegation", base(plain) + "gssdelegation=0", nil, "plain plain app="},
		{"sslnegotiation", base(tlsSrv) + "sslnegotiation=postgres", nil, "tls-server tls app="},
		{"sslnegotiation", base(tlsSrv) + "sslnegotiation=direct", nil, "error"}, // weak sslmode prefer
		{"min_protocol_version", base(plain) + "min_protocol_version=3.0", nil, "plain plain app="},
		{"max_protocol_version", base(plain) + "max_protocol_version=3.0", nil, "plain plain app="},
		{"sslkeylogfile", base(tlsSrv) + "sslmode=require sslkeylogfile=" + keylog, nil, "tls-server tls app="},
		{"scram_client_key", base(plain) + "scram_client_key=AAAA", nil, "error"},
		{"scram_server_key", base(plain) + "scram_server_key=AAAA", nil, "error"},
		{"oauth_issuer", base(plain) + "oauth_issuer=https://issuer.example", nil, "error"},
		{"oauth_client_id", base(plain) + "oauth_client_id=app", nil, "error"},
		{"oauth_client_secret", base(plain) + "oauth_client_secret=s3cret", nil, "error"},
		{"oauth_scope", base(plain) + "oauth_scope=openid", nil, "error"},
	}
	covered := map[string]bool{}
	for _, tc := range cases {
		covered[tc.key] = true
		t.Run(tc.key+"/"+strings.TrimPrefix(tc.conninfo, base(plain)), func(t *testing.T) {
			for _, kv := range tc.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			want, psqlMsg := psqlOutcome(t, names, tc.env, tc.conninfo)
			if tc.want != "" {
				switch {
				case strings.Contains(psqlMsg, "invalid connection option"):
					psqlMsg = "libpq-connect.html; psql 15: " + psqlMsg
				case want == "error":
					t.Fatalf("psql fails (%s): compare with it instead", psqlMsg)
				}
				want = tc.want
			}
			got, msg := connectorOutcome(t, names, tc.conninfo)
			if got != want {
				t.Errorf("connector: %s (%s)\npsql: %s (%s)", got, msg, want, psqlMsg)
			}
			t.Logf("%s: psql %s, connector %s %s", tc.key, want, got, msg)
		})
	}
	for _, k := range pgconnector.Keywords() {
		if !covered[k.Name] {
			t.Errorf("keyword %s has no case", k.Name)
		}
	}
}

// TestMultiHostMatchesPsql connects with psql and with the connector to lists of servers: a
// primary, its hot standby made with pg_basebackup, a primary with default_transaction_read_only
// on, a server whose pg_hba rejects the user (28000) and a port where nothing listens, in several
// orders and with every target_session_attrs, and asserts that both reach the same server or
// both fail (libpq-connect.html, "Specifying Multiple Hosts"; fe-connect.c, PQconnectPoll).
func TestMultiHostMatchesPsql(t *testing.T) {
	primary := harness.StartT(t, harness.Options{})
	standby := harness.StartStandbyT(t, primary)
	readOnly := harness.StartT(t, harness.Options{Settings: map[string]string{"default_transaction_read_only": "on"}})
	reject := harness.StartT(t, harness.Options{Auth: "reject"})
	down := harness.FreePort(t)
	names := map[int]string{primary.Port: "primary", standby.Port: "standby", readOnly.Port: "read-only", reject.Port: "reject", 0: "socket"}
	servers := map[string]int{"primary": primary.Port, "standby": standby.Port, "read-only": readOnly.Port, "reject": reject.Port, "down": down}
	// Servers that misbehave at startup, which a real one cannot do on demand.
	for name, f := range map[string]harness.Fault{
		"closes-at-startup": {Step: harness.StepStartup, Kind: harness.FaultClose},
		"resets-at-startup": {Step: harness.StepStartup, Kind: harness.FaultReset},
		"57P03":             {Step: harness.StepStartup, Kind: harness.FaultErrorResponse, SQLState: "57P03"},
		"53300":             {Step: harness.StepStartup, Kind: harness.FaultErrorResponse, SQLState: "53300"},
		"28P01":             {Step: harness.StepStartup, Kind: harness.FaultErrorResponse, SQLState: "28P01"},
	} {
		_, port := harness.FaultServerT(t, harness.FaultServerOptions{Fault: f}).Addr()
		servers[name], names[port] = port, name
	}

	dsn := func(order []string, extra string) string {
		hosts, ports := make([]string, len(order)), make([]string, len(order))
		for i, n := range order {
			hosts[i], ports[i] = "127.0.0.1", strconv.Itoa(servers[n])
			if n == "socket" {
				hosts[i], ports[i] = primary.SocketDir, strconv.Itoa(primary.Port)
			}
		}
		return fmt.Sprintf("host=%s port=%s user=app dbname=app connect_timeout=5 %s", strings.Join(hosts, ","), strings.Join(ports, ","), extra)
	}
	type result struct{ name, psql, connector string }
	var results []result
	check := func(t *testing.T, order []string, extra string) {
		t.Helper()
		conninfo := dsn(order, extra)
		want, psqlMsg := psqlOutcome(t, names, nil, conninfo)
		got, msg := connectorOutcome(t, names, conninfo)
		want, got = strings.Fields(want + " x")[0], strings.Fields(got + " x")[0] // the server, or "error"
		results = append(results, result{strings.Join(order, ",") + " " + extra, want, got})
		if got != want {
			t.Errorf("%v %s: connector %s (%s), psql %s (%s)", order, extra, got, msg, want, psqlMsg)
		}
	}
	orders := [][]string{
		{"primary", "standby"}, {"standby", "primary"}, {"primary"}, {"standby"},
		{"read-only", "standby"}, {"standby", "read-only"}, {"read-only", "primary"},
		{"down", "standby", "primary"},
	}
	for _, tsa := range []string{"any", "read-write", "read-only", "primary", "standby", "prefer-standby"} {
		for _, order := range orders {
			t.Run(tsa+"/"+strings.Join(order, ","), func(t *testing.T) {
				check(t, order, "target_session_attrs="+tsa)
			})
		}
	}
	for _, c := range []struct {
		order []string
		extra string
	}{
		{[]string{"reject", "primary"}, ""},                             // authentication failed: stop
		{[]string{"reject", "primary"}, "sslmode=disable"},              // the same without an SSLRequest
		{[]string{"down", "primary"}, ""},                               // not reached: next host
		{[]string{"socket", "primary"}, "gssencmode=require"},           // GSS encryption is impossible on the socket: stop
		{[]string{"socket", "primary"}, "gssencmode=prefer"},            // the socket, in plaintext
		{[]string{"primary", "reject"}, "target_session_attrs=standby"}, // primary left, reject stops
		{[]string{"closes-at-startup", "primary"}, ""},                  // server closed the connection: stop
		{[]string{"resets-at-startup", "primary"}, "sslmode=disable"},
		{[]string{"57P03", "primary"}, ""}, // the only error response that moves on
		{[]string{"53300", "primary"}, ""},
		{[]string{"28P01", "primary"}, "sslmode=disable"},
		{[]string{"down", "standby"}, "target_session_attrs=prefer-standby"},
		{[]string{"down", "primary"}, "target_session_attrs=prefer-standby"}, // second pass after a host that was down
	} {
		t.Run(strings.Join(c.order, ",")+"/"+c.extra, func(t *testing.T) { check(t, c.order, c.extra) })
	}
	for _, r := range results {
		t.Logf("%-60s psql %-10s connector %s", r.name, r.psql, r.connector)
	}
}

// TestTargetSessionAttrsSockets counts the connections that the primary and the standby see for
// target_session_attrs=prefer-standby with the primary listed first: the connector, warm, opens
// no more than psql does, and none more than one per server it tries.
func TestTargetSessionAttrsSockets(t *testing.T) {
	primary := harness.StartT(t, harness.Options{})
	standby := harness.StartStandbyT(t, primary)
	conninfo := fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=app dbname=app target_session_attrs=prefer-standby", primary.Port, standby.Port)
	count := func(connect func()) (p, s int) {
		mp, ms := primary.LogMark(), standby.LogMark()
		const n = 5
		for range n {
			connect()
		}
		cp, err := primary.ConnectionsSince(mp)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := standby.ConnectionsSince(ms)
		if err != nil {
			t.Fatal(err)
		}
		return cp, cs
	}
	names := map[int]string{standby.Port: "standby"}
	pp, ps := count(func() {
		if got, msg := psqlOutcome(t, names, nil, conninfo); !strings.HasPrefix(got, "standby") {
			t.Fatalf("psql: %s %s", got, msg)
		}
	})
	c, err := pgconnector.New(conninfo)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	connect := func() {
		dc, err := c.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		dc.Close()
	}
	connect() // cold
	cp, cs := count(connect)
	t.Logf("5 connects: psql %d+%d connections, connector (warm) %d+%d", pp, ps, cp, cs)
	if cp+cs > pp+ps || cp > 5 || cs > 5 {
		t.Errorf("connector (warm) opened %d+%d connections for 5 connects, psql %d+%d", cp, cs, pp, ps)
	}
}

// TestLoadBalanceHosts: load_balance_hosts=random (libpq 16) spreads connects over the hosts;
// without it the first host takes them all.
func TestLoadBalanceHosts(t *testing.T) {
	a := harness.StartT(t, harness.Options{})
	b := harness.StartT(t, harness.Options{})
	hosts := fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=app dbname=app sslmode=disable ", a.Port, b.Port)
	for _, tc := range []struct {
		extra    string
		balanced bool
	}{{"", false}, {"load_balance_hosts=disable", false}, {"load_balance_hosts=random", true}} {
		c := newConnector(t, hosts+tc.extra)
		ma, mb := a.LogMark(), b.LogMark()
		const n = 40
		for range n {
			dc, err := c.Connect(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			dc.Close()
		}
		na, err := a.ConnectionsSince(ma)
		if err != nil {
			t.Fatal(err)
		}
		nb, err := b.ConnectionsSince(mb)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%q: %d connections to the first host, %d to the second", tc.extra, na, nb)
		if na+nb != n {
			t.Errorf("%q: %d+%d connections for %d connects", tc.extra, na, nb, n)
		}
		// With random order each host is first with probability 1/2: fewer than 5 of 40 happens
		// about once in 10^7 runs.
		if tc.balanced && (na < 5 || nb < 5) || !tc.balanced && nb != 0 {
			t.Errorf("%q: %d and %d connections", tc.extra, na, nb)
		}
	}
}

// TestErrorNamesTheStep: a refused SSLRequest under sslmode=require and a server that
// target_session_attrs does not accept name their own step, without pgx's wording.
func TestErrorNamesTheStep(t *testing.T) {
	srv := harness.StartT(t, harness.Options{})
	for extra, want := range map[string]string{
		"sslmode=require":                "SSLRequest: server does not support SSL",
		"target_session_attrs=read-only": "target_session_attrs: session is not read-only",
	} {
		_, err := newConnector(t, srv.DSN(extra)).Connect(context.Background())
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "ValidateConnect") {
			t.Errorf("%s: %v, want %q", extra, err, want)
		}
	}
}
