package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// waitReplay waits (at most 30 seconds) until standby has replayed all the
// WAL that primary had inserted when it was called. The insert position, not
// pg_current_wal_lsn(): with synchronous_commit off a commit record is
// written and sent a moment (wal_writer_delay) after the commit returns.
func waitReplay(t *testing.T, ctx context.Context, primary, standby *Postgres) {
	t.Helper()
	var lsn string
	if err := connect(t, ctx, superuserDSN(primary)).QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		t.Fatalf("primary's WAL position: %v", err)
	}
	conn := connect(t, ctx, superuserDSN(standby))
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	for {
		var done bool
		if err := conn.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn).Scan(&done); err != nil {
			t.Fatalf("standby's replay position: %v", err)
		}
		if done {
			t.Logf("standby replayed up to %s in %v", lsn, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby has not replayed up to %s after 30 s", lsn)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func inRecovery(t *testing.T, ctx context.Context, conn *pgx.Conn) bool {
	t.Helper()
	var rec bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&rec); err != nil {
		t.Fatalf("pg_is_in_recovery: %v", err)
	}
	return rec
}

// sqlState returns the SQLSTATE of a server error, or "".
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// A standby is a copy of its primary in hot standby: the same roles and
// password, its own port, socket and directory, read-only, and it replays
// what the primary writes. The harness's configuration calls work on it, and
// neither server counts the standby's replication connections.
func TestStandby(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{Auth: "scram-sha-256"})
	mark := p.LogMark()
	t0 := time.Now()
	s := StartStandbyT(t, p)
	t.Logf("standby made and started in %v", time.Since(t0).Round(time.Millisecond))

	if s.Host != p.Host || s.User != p.User || s.Password != p.Password || s.Database != p.Database || s.Version != p.Version {
		t.Errorf("standby fields differ from the primary's: host=%q user=%q db=%q version=%d same password=%v",
			s.Host, s.User, s.Database, s.Version, s.Password == p.Password)
	}
	if s.Port == p.Port || s.SocketDir == p.SocketDir || s.DataDir == p.DataDir || s.CAFile != "" {
		t.Errorf("standby shares the primary's port, socket or directory: %d %s %s (CAFile %q)", s.Port, s.SocketDir, s.DataDir, s.CAFile)
	}
	if dir := filepath.Dir(s.DataDir); filepath.Dir(dir) != p.env.base || !strings.HasPrefix(filepath.Base(dir), "cluster-") {
		t.Errorf("standby data directory %s is not in a cluster directory of %s", s.DataDir, p.env.base)
	}
	if s.Addr() != "127.0.0.1:"+strconv.Itoa(s.Port) {
		t.Errorf("Addr = %s", s.Addr())
	}
	if _, err := os.Stat(filepath.Join(s.DataDir, "standby.signal")); err != nil {
		t.Errorf("standby.signal: %v", err)
	}
	if n, err := p.ConnectionsSince(mark); err != nil || n != 0 {
		t.Errorf("the primary counts %d connections (%v) for making its standby, want 0", n, err)
	}

	sMark := s.LogMark()
	for _, dsn := range []string{s.DSN("sslmode=disable"), s.URL() + "?sslmode=disable"} {
		conn := connect(t, ctx, dsn)
		if !inRecovery(t, ctx, conn) {
			t.Error("the standby is not in recovery")
		}
		if got := describe(t, ctx, conn); got != (session{User: "app", Database: "app", Addr: "127.0.0.1"}) {
			t.Errorf("standby session = %+v", got)
		}
	}
	if n, err := s.ConnectionsSince(sMark); err != nil || n != 2 {
		t.Errorf("standby ConnectionsSince = %d, %v; want 2", n, err)
	}
	if !strings.Contains(s.Log(), "database system is ready to accept read-only connections") {
		t.Error("the standby's log does not say it accepts read-only connections")
	}

	pc := connect(t, ctx, p.DSN("sslmode=disable"))
	if inRecovery(t, ctx, pc) {
		t.Error("the primary is in recovery")
	}
	if _, err := pc.Exec(ctx, "CREATE TABLE replicated (v text); INSERT INTO replicated VALUES ('from the primary')"); err != nil {
		t.Fatal(err)
	}
	waitReplay(t, ctx, p, s)
	sc := connect(t, ctx, s.DSN("sslmode=disable"))
	var v string
	if err := sc.QueryRow(ctx, "SELECT v FROM replicated").Scan(&v); err != nil || v != "from the primary" {
		t.Errorf("row on the standby: %q, %v", v, err)
	}
	if _, err := sc.Exec(ctx, "INSERT INTO replicated VALUES ('from the standby')"); sqlState(err) != "25006" {
		t.Errorf("write on the standby: %v, want SQLSTATE 25006 (read-only transaction)", err)
	}

	// SetHBA on the standby changes the standby only, and keeps replication going.
	if err := s.SetHBA("host all all 127.0.0.1/32 reject"); err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.Connect(ctx, s.DSN("sslmode=disable")); err == nil {
		t.Error("the standby let a connection in after SetHBA(reject)")
	}
	connect(t, ctx, p.DSN("sslmode=disable"))
	if _, err := pc.Exec(ctx, "INSERT INTO replicated VALUES ('later')"); err != nil {
		t.Fatal(err)
	}
	waitReplay(t, ctx, p, s)
	if err := s.SetHBA("host all all 127.0.0.1/32 scram-sha-256"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := connect(t, ctx, s.DSN("sslmode=disable")).QueryRow(ctx, "SELECT count(*) FROM replicated").Scan(&n); err != nil || n != 2 {
		t.Errorf("rows on the standby after SetHBA: %d, %v; want 2", n, err)
	}
	// The primary's SetHBA keeps the replication line.
	if err := p.SetHBA("host all all 127.0.0.1/32 scram-sha-256"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(p.DataDir, "pg_hba.conf")); err != nil || !strings.Contains(string(b), "\nlocal replication all trust\n") {
		t.Errorf("the primary's pg_hba.conf after SetHBA has no local replication line (%v)", err)
	}
}

// A standby of a server with TLS has the same certificate, and a CAFile of
// its own; SetSSL turns its TLS off and on.
func TestStandbyTLS(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{TLS: true})
	s := StartStandbyT(t, p)
	if s.CAFile == "" || s.CAFile == p.CAFile || filepath.Dir(s.CAFile) != s.SocketDir {
		t.Fatalf("standby CAFile = %q (primary's %q)", s.CAFile, p.CAFile)
	}
	pca, _ := os.ReadFile(p.CAFile)
	sca, err := os.ReadFile(s.CAFile)
	if err != nil || string(sca) != string(pca) {
		t.Errorf("the standby's CAFile is not a copy of the primary's (%v)", err)
	}
	got := describe(t, ctx, connect(t, ctx, s.DSN("sslmode=verify-full", "sslrootcert="+s.CAFile)))
	if !got.SSL {
		t.Error("sslmode=verify-full to the standby without TLS")
	}
	if err := s.SetSSL(false); err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.Connect(ctx, s.DSN("sslmode=require")); err == nil {
		t.Error("sslmode=require connected after SetSSL(false)")
	}
	if !describe(t, ctx, connect(t, ctx, p.DSN("sslmode=verify-full", "sslrootcert="+p.CAFile))).SSL {
		t.Error("the primary lost TLS with its standby's SetSSL(false)")
	}
	if err := s.SetSSL(true); err != nil {
		t.Fatal(err)
	}
	connect(t, ctx, s.DSN("sslmode=verify-full", "sslrootcert="+s.CAFile))
}

// Promote makes a standby a primary of its own.
func TestPromote(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{})
	s := StartStandbyT(t, p)
	if _, err := connect(t, ctx, p.DSN("sslmode=disable")).Exec(ctx, "CREATE TABLE before_promote (v int); INSERT INTO before_promote VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	waitReplay(t, ctx, p, s)

	t0 := time.Now()
	if err := s.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("promoted in %v", time.Since(t0).Round(time.Millisecond))
	conn := connect(t, ctx, s.DSN("sslmode=disable"))
	if inRecovery(t, ctx, conn) {
		t.Error("still in recovery after Promote")
	}
	if _, err := conn.Exec(ctx, "INSERT INTO before_promote VALUES (2)"); err != nil {
		t.Errorf("write after Promote: %v", err)
	}
	var n int
	if err := connect(t, ctx, p.DSN("sslmode=disable")).QueryRow(ctx, "SELECT count(*) FROM before_promote").Scan(&n); err != nil || n != 1 {
		t.Errorf("rows on the old primary: %d, %v; want 1", n, err)
	}

	err := p.Promote(ctx)
	if err == nil || !strings.Contains(err.Error(), "not in standby mode") {
		t.Errorf("Promote of a primary: %v, want pg_ctl's \"not in standby mode\"", err)
	}
}

// Settings can make a primary read-only (default_transaction_read_only):
// libpq takes it as read-only but not as a standby. The harness's own
// sessions still write.
func TestReadOnlyPrimary(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{Auth: "scram-sha-256", Settings: map[string]string{"default_transaction_read_only": "on"}})
	conn := connect(t, ctx, p.DSN("sslmode=disable")) // the password was set despite the setting
	if inRecovery(t, ctx, conn) {
		t.Error("a read-only primary is in recovery")
	}
	var ro string
	if err := conn.QueryRow(ctx, "SHOW transaction_read_only").Scan(&ro); err != nil || ro != "on" {
		t.Errorf("transaction_read_only = %q, %v", ro, err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE t (v int)"); sqlState(err) != "25006" {
		t.Errorf("write on a read-only primary: %v, want SQLSTATE 25006", err)
	}
	if err := p.ExecAdmin(ctx, "CREATE TABLE t (v int); GRANT SELECT ON t TO app"); err != nil {
		t.Errorf("ExecAdmin on a read-only primary: %v", err)
	}
	if _, err := conn.Exec(ctx, "SELECT * FROM t"); err != nil {
		t.Error(err)
	}

	s := StartStandbyT(t, p)
	for _, tc := range []struct {
		server *Postgres
		attrs  string
		ok     bool
	}{
		{p, "read-only", true},
		{p, "read-write", false},
		{p, "standby", false},
		{p, "primary", true},
		{s, "standby", true},
		{s, "read-only", true},
		{s, "primary", false},
	} {
		_, err := Psql(ctx, nil, tc.server.DSN("sslmode=disable", "target_session_attrs="+tc.attrs), "select 1")
		if (err == nil) != tc.ok {
			t.Errorf("psql target_session_attrs=%s to the read-only %s: %v, want success %v",
				tc.attrs, map[bool]string{true: "primary", false: "standby"}[tc.server == p], err, tc.ok)
		}
	}
}

// StartStandbyT's cleanup stops the standby and removes its directory, and
// leaves the primary running.
func TestStandbyTCleanup(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{})
	var s *Postgres
	var pid int
	t.Run("standby", func(t *testing.T) {
		s = StartStandbyT(t, p)
		pid = postmasterPID(filepath.Join(s.DataDir, "postmaster.pid"))
		if pid <= 0 {
			t.Fatal("no postmaster pid")
		}
	})
	if s == nil {
		t.FailNow()
	}
	if !waitGone(pid, 0) {
		t.Errorf("standby postmaster %d still runs", pid)
	}
	if _, err := os.Stat(filepath.Dir(s.DataDir)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s still exists (%v)", filepath.Dir(s.DataDir), err)
	}
	if _, err := pgx.Connect(ctx, s.DSN("sslmode=disable", "connect_timeout=5")); err == nil {
		t.Error("connected to a stopped standby")
	}
	connect(t, ctx, p.DSN("sslmode=disable"))
}

// standbyChildEnv makes TestStandbyChild, in a test binary started by
// TestStandbyNothingLeftBehind, start a primary and its standby and then end
// the way the variable says.
const standbyChildEnv = "PGCONNECTOR_HARNESS_TEST_STANDBY_CHILD"

// A process that made a standby leaves nothing behind, also when it is killed.
func TestStandbyNothingLeftBehind(t *testing.T) {
	for _, end := range []string{"pass", "sigkill"} {
		t.Run(end, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestStandbyChild$")
			cmd.Env = append(os.Environ(), standbyChildEnv+"="+end)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = cmd.Stdout
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			var base string
			var primary, standby int
			var log strings.Builder
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				log.WriteString(sc.Text() + "\n")
				if _, err := fmt.Sscanf(sc.Text(), "standby child: base=%s primary=%d standby=%d", &base, &primary, &standby); err == nil {
					break
				}
			}
			if base == "" {
				t.Fatalf("the child did not start its servers:\n%s", log.String())
			}
			if end == "sigkill" {
				_ = cmd.Process.Kill()
			}
			for sc.Scan() {
				log.WriteString(sc.Text() + "\n")
			}
			if err := cmd.Wait(); (err != nil) != (end == "sigkill") {
				t.Errorf("child exit: %v; its output:\n%s", err, log.String())
			}
			if left := Leftovers(cmd.Process.Pid, 30*time.Second); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
			if _, err := os.Stat(base); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s is still there (%v)", base, err)
			}
			for name, pid := range map[string]int{"primary": primary, "standby": standby} {
				if !waitGone(pid, 10*time.Second) {
					t.Errorf("%s postmaster (pid %d) still runs", name, pid)
				}
			}
		})
	}
}

// TestStandbyChild is the child of TestStandbyNothingLeftBehind; without
// standbyChildEnv it does nothing.
func TestStandbyChild(t *testing.T) {
	end := os.Getenv(standbyChildEnv)
	if end == "" {
		return
	}
	p := StartT(t, Options{})
	s := StartStandbyT(t, p)
	fmt.Printf("standby child: base=%s primary=%d standby=%d\n", p.env.base,
		postmasterPID(filepath.Join(p.DataDir, "postmaster.pid")), postmasterPID(filepath.Join(s.DataDir, "postmaster.pid")))
	if end == "sigkill" {
		time.Sleep(time.Minute) // until the signal
		t.Fatal("still running after a minute")
	}
}

// Psql answers with psql's output, or with psql's message, never with a
// password it was given.
func TestPsqlOracle(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{Auth: "scram-sha-256"})
	out, err := Psql(ctx, nil, p.DSN("sslmode=disable"), "select current_setting('application_name'), 6 * 7")
	if err != nil || out != "pgconnector-harness|42" {
		t.Errorf("psql: %q, %v; want %q", out, err, "pgconnector-harness|42")
	}
	out, err = Psql(ctx, []string{"PGAPPNAME=mine"}, p.DSN("sslmode=disable"), "select current_setting('application_name')")
	if err != nil || out != "mine" {
		t.Errorf("psql with PGAPPNAME=mine: %q, %v", out, err)
	}

	const secret = "s3cret-Pw"
	port := strconv.Itoa(FreePort(t))
	for _, tc := range []struct {
		conninfo string
		env      []string
		want     string
	}{
		{"host=127.0.0.1 port=" + port + " user=app dbname=app sslmode=disable password=" + secret, nil, "Connection refused"},
		{"host=127.0.0.1 port=" + port + " user=app dbname=app sslmode=disable", []string{"PGPASSWORD=" + secret}, "Connection refused"},
		// libpq quotes the token, or the whole URI, that it cannot parse.
		{"postgres://app:" + secret + "%zz@127.0.0.1:" + port + "/app", nil, `invalid percent-encoded token: "[password]"`},
		{"postgresql://app:" + secret + "@[::1/app", nil, `matching "]" in IPv6 host address in URI: "postgresql://app:[password]@[::1/app"`},
		{"postgres://app@127.0.0.1:" + port + "/app?password=" + secret + "%zz", nil, `invalid percent-encoded token: "[password]"`},
	} {
		_, err := Psql(ctx, tc.env, tc.conninfo, "select 1")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("psql %s: %v, want an error with %q", strings.ReplaceAll(tc.conninfo, secret, "[password]"), err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Error("the error holds the password")
		}
	}
}

// OSUser names the owner of the postmaster process, which is what libpq's
// requirepeer checks over the unix socket.
func TestOSUser(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{})
	pid := postmasterPID(filepath.Join(p.DataDir, "postmaster.pid"))
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var uid string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			uid = f[1]
		}
	}
	u, err := user.LookupId(uid)
	if err != nil {
		t.Fatalf("uid %q of the postmaster: %v", uid, err)
	}
	if p.OSUser() != u.Username {
		t.Errorf("OSUser = %q, the postmaster runs as %q (uid %s)", p.OSUser(), u.Username, uid)
	}

	unix := "host=" + p.SocketDir + " port=" + strconv.Itoa(p.Port) + " user=app dbname=app"
	if out, err := Psql(ctx, nil, unix+" requirepeer="+p.OSUser(), "select 1"); err != nil || out != "1" {
		t.Errorf("psql requirepeer=%s: %q, %v", p.OSUser(), out, err)
	}
	_, err = Psql(ctx, nil, unix+" requirepeer=not-"+p.OSUser(), "select 1")
	if err == nil || !strings.Contains(err.Error(), "requirepeer") {
		t.Errorf("psql requirepeer=not-%s: %v, want libpq's requirepeer error", p.OSUser(), err)
	}
}

// A standby of a server with Kerberos has a copy of its keytab and a replay
// cache of its own, and accepts the same GSS-encrypted connections.
func TestStandbyGSS(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	k, ccache := kdcWithAlice(t, KDCOptions{})
	p := gssServer(t, &GSSOptions{KDC: k, Keytab: true}, gssHBA(k))
	s := StartStandbyT(t, p)
	if s.KrbSrvName != p.KrbSrvName || s.KeytabFile == "" || filepath.Dir(s.KeytabFile) != s.SocketDir {
		t.Errorf("standby KrbSrvName %q, KeytabFile %q", s.KrbSrvName, s.KeytabFile)
	}
	environ, err := os.ReadFile("/proc/" + strconv.Itoa(postmasterPID(filepath.Join(s.DataDir, "postmaster.pid"))) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	if want := "KRB5RCACHEDIR=" + filepath.Join(s.SocketDir, "krb5rcache"); !slices.Contains(strings.Split(string(environ), "\x00"), want) {
		t.Errorf("the standby's environment lacks %s", want)
	}
	out, err := Psql(ctx, k.Env(ccache), conninfo("localhost", s.Port, "alice", "gssencmode=require"),
		"select encrypted, pg_is_in_recovery() from pg_stat_gssapi where pid = pg_backend_pid()")
	if err != nil || out != "t|t" {
		t.Errorf("psql to the standby: %q, %v; want t|t", out, err)
	}
}

// redactPasswords finds a password however the connection string spells it.
func TestRedactPasswords(t *testing.T) {
	for _, tc := range []struct {
		conninfo string
		env      []string
		secret   string
	}{
		{"host=h password=pw-1 user=u", nil, "pw-1"},
		{"host=h password = 'pw 2' user=u", nil, "pw 2"},
		{`host=h password='it\'s\\3'`, nil, `it's\3`},
		{`host=h password=it\ s4`, nil, "it s4"},
		{"host=h password='unterminated 5", nil, "unterminated 5"},
		{"host=h oops password=pw-6", nil, ""}, // libpq stops at oops: nothing to find, nothing to say
		{"host=h", []string{"PGPASSWORD=pw-7"}, "pw-7"},
		{"postgres://u:pw%2F8@h/db", nil, "pw/8"},
		{"postgresql://u:pw-9@h:5432,h2/db?sslmode=disable", nil, "pw-9"},
		{"postgres://u@h/db?sslmode=disable&password=pw%2010", nil, "pw 10"},
		{"postgres://u@h/db?passw%6Frd=pw-11", nil, "pw-11"},
	} {
		got := conninfoPasswords(tc.conninfo)
		if tc.secret == "" {
			if len(got) != 0 {
				t.Errorf("%s: found %q", tc.conninfo, got)
			}
			continue
		}
		msg := "error: bad " + tc.secret + " in " + tc.conninfo
		red := redactPasswords(msg, tc.conninfo, tc.env)
		if strings.Contains(red, tc.secret) || !strings.Contains(red, redactedPassword) {
			t.Errorf("%s: %q redacted to %q", tc.conninfo, msg, red)
		}
	}
}
