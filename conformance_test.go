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
// connection string, for each libpq keyword with a typical value, against PostgreSQL 15 servers,
// and asserts the same server, transport and application_name, or a failure for both. Keywords
// that libpq 15 does not know (added in 16, 17 or 18) are checked against what
// libpq-connect.html says of them, and psql is asserted to reject them, so that a newer psql on
// the machine would be noticed. TestKeywordsMatchLibpq18 runs the same matrix with libpq 18.
func TestKeywordsMatchPsql(t *testing.T) {
	keywordMatrix(t, 0, nil, false)
}

// keywordCase is one connection string of the keyword matrix.
type keywordCase struct {
	key, conninfo string
	env           []string
	// want, with libpq 15 as the oracle, is the outcome for keys libpq 15 does not know
	// (libpq-connect.html); "" means: as psql.
	want string
	// fixed is the outcome whatever the oracle, where psql hides libpq's (it overrides the key).
	fixed string
	// libpq18 cases run only with libpq 18 as the oracle.
	libpq18 bool
	// versioned cases also run against PostgreSQL 16 and 17: their outcome depends on the
	// server's version (TLS, direct TLS, protocol 3.2, authentication).
	versioned bool
}

// keywordMatrix starts the matrix's servers of PostgreSQL major (trust without TLS, trust with
// TLS, scram-sha-256 without and with TLS) and compares, for each case, the connector's outcome
// with psql's run with env (nil: Debian's libpq 15; harness.Libpq18Env: libpq 18). With libpq
// 18 every case is compared with it, the keys of libpq 16 to 18 included; reduced keeps the
// versioned cases only. It returns the servers, for checks of the caller.
func keywordMatrix(t *testing.T, major int, env []string, reduced bool) (plain, tlsSrv, scram, scramTLS *harness.Postgres) {
	libpq18 := env != nil
	plain = harness.StartT(t, harness.Options{Major: major})
	tlsSrv = harness.StartT(t, harness.Options{Major: major, TLS: true})
	scram = harness.StartT(t, harness.Options{Major: major, Auth: "scram-sha-256"})
	names := map[int]string{plain.Port: "plain", tlsSrv.Port: "tls-server", scram.Port: "scram", 0: "socket"}
	if libpq18 {
		scramTLS = harness.StartT(t, harness.Options{Major: major, TLS: true, Auth: "scram-sha-256"})
		names[scramTLS.Port] = "scram-tls"
	}

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
	// label names a case without its ports and passwords: the servers by name.
	var repl []string
	for _, s := range []*harness.Postgres{plain, tlsSrv, scram, scramTLS} {
		if s != nil {
			repl = append(repl, base(s), names[s.Port]+": ", "password="+s.Password, "password=[password]")
		}
	}
	label := strings.NewReplacer(repl...).Replace
	owner := socketOwner(t, plain)
	keylog := filepath.Join(dir, "keylog")

	cases := []keywordCase{
		{key: "host", conninfo: base(plain)},
		{key: "host", conninfo: fmt.Sprintf("host=%s port=%d user=app dbname=app", plain.SocketDir, plain.Port)},
		{key: "hostaddr", conninfo: fmt.Sprintf("host=localhost hostaddr=127.0.0.1 port=%d user=app dbname=app", plain.Port)},
		// A name that cannot be resolved: only hostaddr reaches the server.
		{key: "hostaddr", conninfo: fmt.Sprintf("host=db.invalid hostaddr=127.0.0.1 port=%d user=app dbname=app", plain.Port)},
		{key: "hostaddr", conninfo: fmt.Sprintf("hostaddr=127.0.0.1 port=%d user=app dbname=app", plain.Port)},
		{key: "hostaddr", conninfo: fmt.Sprintf("host=localhost hostaddr=127.0.0.1 port=%d user=app dbname=app sslmode=verify-full sslrootcert=%s", tlsSrv.Port, tlsSrv.CAFile)},
		{key: "hostaddr", conninfo: fmt.Sprintf("host=localhost,localhost hostaddr=127.0.0.2,127.0.0.1 port=%d,%d user=app dbname=app", scram.Port, plain.Port)},
		{key: "port", conninfo: base(plain)},
		{key: "dbname", conninfo: base(plain) + "dbname=postgres"},
		{key: "user", conninfo: base(plain) + "user=postgres"},
		{key: "password", conninfo: base(scram) + "password=" + scram.Password},
		{key: "password", conninfo: base(scram) + "password=wrong"},
		{key: "passfile", conninfo: base(scram) + "passfile=" + passfile},
		{key: "connect_timeout", conninfo: base(plain) + "connect_timeout=5"},
		{key: "client_encoding", conninfo: base(plain) + "client_encoding=UTF8"},
		{key: "client_encoding", conninfo: base(plain) + "client_encoding=auto", env: []string{"LC_ALL=C.UTF-8"}},
		{key: "options", conninfo: base(plain) + "options='-c search_path=public'"},
		{key: "application_name", conninfo: base(plain) + "application_name=billing"},
		// psql's own fallback_application_name (psql) wins over the string's: psql only shows
		// that the key is accepted.
		{key: "fallback_application_name", conninfo: base(plain) + "fallback_application_name=fallback", fixed: "plain plain app=fallback"},
		{key: "fallback_application_name", conninfo: base(plain) + "application_name=billing fallback_application_name=fallback"},
		{key: "keepalives", conninfo: base(plain) + "keepalives=0"},
		{key: "keepalives_idle", conninfo: base(plain) + "keepalives_idle=30"},
		{key: "keepalives_interval", conninfo: base(plain) + "keepalives_interval=10"},
		{key: "keepalives_count", conninfo: base(plain) + "keepalives_count=3"},
		{key: "tcp_user_timeout", conninfo: base(plain) + "tcp_user_timeout=5000"},
		{key: "keepalives_idle", conninfo: base(plain) + "keepalives_idle=soon"},
		{key: "replication", conninfo: base(plain) + "replication=false"},
		{key: "gssencmode", conninfo: base(plain) + "gssencmode=disable"},
		{key: "gssencmode", conninfo: base(plain) + "gssencmode=prefer"},
		{key: "gssencmode", conninfo: base(plain) + "gssencmode=require"},
		{key: "sslmode", conninfo: base(tlsSrv) + "sslmode=prefer", versioned: true},
		{key: "sslmode", conninfo: base(tlsSrv) + "sslmode=disable", versioned: true},
		{key: "sslmode", conninfo: base(plain) + "sslmode=require", versioned: true},
		{key: "requiressl", conninfo: base(tlsSrv) + "requiressl=1"},
		{key: "requiressl", conninfo: base(plain) + "requiressl=1"},
		{key: "requiressl", conninfo: base(tlsSrv) + "requiressl=1 sslmode=disable"},
		{key: "requiressl", conninfo: base(tlsSrv) + "sslmode=disable requiressl=1"},
		{key: "sslcompression", conninfo: base(tlsSrv) + "sslcompression=1"},
		{key: "sslcert", conninfo: base(tlsSrv) + "sslmode=require sslcert=" + filepath.Join(dir, "none.crt") + " sslkey=" + filepath.Join(dir, "none.key")},
		{key: "sslkey", conninfo: base(tlsSrv) + "sslmode=require sslkey=" + filepath.Join(dir, "none.key")},
		{key: "sslpassword", conninfo: base(tlsSrv) + "sslmode=require sslpassword=secret"},
		{key: "sslrootcert", conninfo: base(tlsSrv) + "sslmode=verify-ca sslrootcert=" + tlsSrv.CAFile},
		{key: "sslrootcert", conninfo: base(tlsSrv) + "sslmode=verify-full sslrootcert=" + tlsSrv.CAFile, versioned: true},
		{key: "sslrootcert", conninfo: base(tlsSrv) + "sslmode=verify-ca sslrootcert=" + passfile},
		{key: "sslsni", conninfo: base(tlsSrv) + "sslmode=require sslsni=0"},
		{key: "requirepeer", conninfo: fmt.Sprintf("host=%s port=%d user=app dbname=app requirepeer=%s", plain.SocketDir, plain.Port, owner)},
		{key: "requirepeer", conninfo: fmt.Sprintf("host=%s port=%d user=app dbname=app requirepeer=nobody-at-all", plain.SocketDir, plain.Port)},
		{key: "requirepeer", conninfo: base(plain) + "requirepeer=nobody-at-all"},
		{key: "ssl_min_protocol_version", conninfo: base(tlsSrv) + "sslmode=require ssl_min_protocol_version=TLSv1.3"},
		{key: "ssl_max_protocol_version", conninfo: base(tlsSrv) + "sslmode=require ssl_max_protocol_version=TLSv1.2"},
		{key: "ssl_min_protocol_version", conninfo: base(tlsSrv) + "sslmode=require ssl_min_protocol_version=SSLv3"},
		{key: "krbsrvname", conninfo: base(plain) + "krbsrvname=postgres"},
		{key: "gsslib", conninfo: base(plain) + "gsslib=gssapi"},
		{key: "service", conninfo: "service=svc user=app dbname=app", env: []string{"PGSERVICEFILE=" + servicefile}},
		{key: "target_session_attrs", conninfo: base(plain) + "target_session_attrs=read-write"},
		{key: "target_session_attrs", conninfo: base(plain) + "target_session_attrs=read-only"},
		{key: "channel_binding", conninfo: base(scram) + "password=" + scram.Password + " channel_binding=require", versioned: true},
		{key: "sslcrl", conninfo: base(tlsSrv) + "sslmode=verify-ca sslrootcert=" + tlsSrv.CAFile + " sslcrl=" + filepath.Join(dir, "none.crl")},
		{key: "sslcrldir", conninfo: base(tlsSrv) + "sslmode=verify-ca sslrootcert=" + tlsSrv.CAFile + " sslcrldir=" + filepath.Join(dir, "nocrls")},

		// libpq 16 and later.
		{key: "require_auth", conninfo: base(plain) + "require_auth=none", want: "plain plain app=", versioned: true},
		{key: "require_auth", conninfo: base(plain) + "require_auth=scram-sha-256", want: "error", versioned: true},
		{key: "require_auth", conninfo: base(scram) + "password=" + scram.Password + " require_auth=scram-sha-256", want: "scram plain app=", versioned: true},
		{key: "require_auth", conninfo: base(scram) + "password=" + scram.Password + " require_auth=!scram-sha-256", want: "error", versioned: true},
		{key: "load_balance_hosts", conninfo: base(plain) + "load_balance_hosts=random", want: "plain plain app="},
		{key: "load_balance_hosts", conninfo: base(plain) + "load_balance_hosts=sometimes", want: "error"},
		{key: "sslcertmode", conninfo: base(tlsSrv) + "sslmode=require sslcertmode=allow", want: "tls-server tls app=", versioned: true},
		{key: "sslcertmode", conninfo: base(tlsSrv) + "sslmode=require sslcertmode=require", want: "error", versioned: true},
		{key: "gssdelegation", conninfo: base(plain) + "gssdelegation=0", want: "plain plain app="},
		{key: "sslnegotiation", conninfo: base(tlsSrv) + "sslnegotiation=postgres", want: "tls-server tls app=", versioned: true},
		{key: "sslnegotiation", conninfo: base(tlsSrv) + "sslnegotiation=direct", want: "error", versioned: true}, // weak sslmode prefer
		{key: "min_protocol_version", conninfo: base(plain) + "min_protocol_version=3.0", want: "plain plain app=", versioned: true},
		{key: "max_protocol_version", conninfo: base(plain) + "max_protocol_version=3.0", want: "plain plain app=", versioned: true},
		{key: "sslkeylogfile", conninfo: base(tlsSrv) + "sslmode=require sslkeylogfile=" + keylog, want: "tls-server tls app="},
		{key: "scram_client_key", conninfo: base(plain) + "scram_client_key=AAAA", want: "error"},
		{key: "scram_server_key", conninfo: base(plain) + "scram_server_key=AAAA", want: "error"},
		{key: "oauth_issuer", conninfo: base(plain) + "oauth_issuer=https://issuer.example", want: "plain plain app="},
		{key: "oauth_client_id", conninfo: base(plain) + "oauth_client_id=app", want: "plain plain app="},
		{key: "oauth_client_secret", conninfo: base(plain) + "oauth_client_secret=s3cret", want: "plain plain app="},
		{key: "oauth_scope", conninfo: base(plain) + "oauth_scope=openid", want: "plain plain app="},
	}
	if libpq18 {
		cases = append(cases, libpq18KeywordCases(base, plain, tlsSrv, scram, scramTLS)...)
	}
	covered := map[string]bool{}
	for _, tc := range cases {
		covered[tc.key] = true
		if reduced && !tc.versioned || tc.libpq18 && !libpq18 {
			continue
		}
		name := tc.key + " " + label(tc.conninfo)
		t.Run(name, func(t *testing.T) {
			for _, kv := range tc.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			want, psqlMsg := psqlOutcome(t, names, append(append([]string(nil), env...), tc.env...), tc.conninfo)
			switch {
			case tc.fixed != "":
				want = tc.fixed
			case tc.want != "" && !libpq18:
				switch {
				case strings.Contains(psqlMsg, "invalid connection option"):
					psqlMsg = "libpq-connect.html; psql 15: " + psqlMsg
				case want == "error":
					t.Fatalf("psql fails (%s): compare with it instead", psqlMsg)
				}
				want = tc.want
			}
			got, msg := connectorOutcome(t, names, tc.conninfo)
			if libpq18 {
				if why, ok := libpq18Differences[name]; ok {
					if got == want {
						t.Errorf("listed in libpq18Differences (%s) but both give %s: remove it from the table", why, got)
					}
					t.Logf("%s: libpq 18 %s (%s), connector %s (%s): known difference: %s", tc.key, want, psqlMsg, got, msg, why)
					return
				}
			}
			if got != want {
				t.Errorf("connector: %s (%s)\npsql: %s (%s)", got, msg, want, psqlMsg)
			}
			t.Logf("%s: psql %s %s, connector %s %s", tc.key, want, psqlMsg, got, msg)
		})
	}
	if !reduced {
		for _, k := range pgconnector.Keywords() {
			if !covered[k.Name] {
				t.Errorf("keyword %s has no case", k.Name)
			}
		}
	}
	return plain, tlsSrv, scram, scramTLS
}

// TestMultiHostMatchesPsql connects with psql and with the connector to lists of servers: a
// primary, its hot standby made with pg_basebackup, a primary with default_transaction_read_only
// on, a server whose pg_hba rejects the user (28000) and a port where nothing listens, in several
// orders and with every target_session_attrs, and asserts that both reach the same server or
// both fail (libpq-connect.html, "Specifying Multiple Hosts"; fe-connect.c, PQconnectPoll).
func TestMultiHostMatchesPsql(t *testing.T) {
	multiHostMatrix(t, 0, nil)
}

// multiHostMatrix runs the multi-host matrix against servers of PostgreSQL major (0: the
// default ones) with psql run with env as the oracle (nil: libpq 15; harness.Libpq18Env: libpq
// 18, which adds the load_balance_hosts=random cases whose outcome does not depend on the order).
func multiHostMatrix(t *testing.T, major int, env []string) {
	primary := harness.StartT(t, harness.Options{Major: major})
	standby := harness.StartStandbyT(t, primary)
	readOnly := harness.StartT(t, harness.Options{Major: major, Settings: map[string]string{"default_transaction_read_only": "on"}})
	reject := harness.StartT(t, harness.Options{Major: major, Auth: "reject"})
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
		want, psqlMsg := psqlOutcome(t, names, env, conninfo)
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
	type multiHostCase struct {
		order []string
		extra string
	}
	var random []multiHostCase
	if env != nil {
		// load_balance_hosts=random (libpq 16): the order is random, the outcome is not.
		random = []multiHostCase{
			{[]string{"standby", "primary"}, "load_balance_hosts=random target_session_attrs=primary"},
			{[]string{"primary", "standby"}, "load_balance_hosts=random target_session_attrs=standby"},
			{[]string{"down", "primary"}, "load_balance_hosts=random"},
			{[]string{"standby", "read-only"}, "load_balance_hosts=random target_session_attrs=read-write"},
			{[]string{"read-only", "standby", "primary"}, "load_balance_hosts=random target_session_attrs=read-write"},
		}
	}
	for _, c := range append([]multiHostCase{
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
	}, random...) {
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
