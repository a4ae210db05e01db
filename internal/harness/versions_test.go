package harness

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// connectTLS connects to p as its application role with sslmode=verify-full against CAFile and
// returns the server_version it reports and whether the session is encrypted (pg_stat_ssl).
func connectTLS(t *testing.T, ctx context.Context, p *Postgres, extra ...string) (version string, ssl bool) {
	t.Helper()
	conn, err := pgx.Connect(ctx, p.DSN(append([]string{"sslmode=verify-full", "sslrootcert=" + dsnQuote(p.CAFile)}, extra...)...))
	if err != nil {
		t.Fatalf("PostgreSQL %d: %v", p.Version, err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version'), ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&version, &ssl); err != nil {
		t.Fatalf("PostgreSQL %d: %v", p.Version, err)
	}
	return version, ssl
}

// Options.Major picks the registry builds of 16, 17 and 18: each starts with TLS, reports
// its own major in Version and in server_version, encrypts the session with the harness's
// certificate, and runs the programs of its version (pg_ctl stops it: Stop leaves nothing).
func TestMajorVersions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, major := range RegistryMajors {
		t.Run(strconv.Itoa(major), func(t *testing.T) {
			p := StartT(t, Options{Major: major, TLS: true, Auth: "scram-sha-256"})
			if p.Version != major {
				t.Errorf("Version = %d, want %d", p.Version, major)
			}
			version, ssl := connectTLS(t, ctx, p)
			if !strings.HasPrefix(version, strconv.Itoa(major)+".") {
				t.Errorf("server_version = %q, want %d.x", version, major)
			}
			if !ssl {
				t.Errorf("PostgreSQL %d: the session is not encrypted", major)
			}
			got, err := ServerVersionOf(ctx, major)
			if err != nil || got != major {
				t.Errorf("ServerVersionOf(%d) = %d, %v", major, got, err)
			}
		})
	}
	// The default programs are still the default ones (Debian's 15 here), beside the others.
	def := StartT(t, Options{})
	want, err := ServerVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if def.Version != want || def.env.bin.libDir != "" {
		t.Errorf("default server: Version %d (ServerVersion %d), LD_LIBRARY_PATH %q", def.Version, want, def.env.bin.libDir)
	}
}

// A standby of a PostgreSQL 18 primary (a file-level base backup: the registry build has no
// pg_basebackup) is in recovery, streams, replays a row committed on the primary, and is a
// primary after Promote.
func TestMajor18Standby(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := StartT(t, Options{Major: 18, TLS: true})
	if err := p.ExecAdmin(ctx, "CREATE TABLE t (v int); GRANT ALL ON t TO "+AppUser+"; INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	mark := p.LogMark()
	s := StartStandbyT(t, p)
	if s.Version != 18 {
		t.Errorf("standby Version = %d, want 18", s.Version)
	}
	if n, err := p.ConnectionsSince(mark); err != nil || n != 0 {
		t.Errorf("primary's ConnectionsSince after the standby = %d, %v; want 0 (the backup and the WAL receiver are the harness's)", n, err)
	}
	if err := p.ExecAdmin(ctx, "INSERT INTO t VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	var lsn string
	if err := p.admin(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn)
	}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, s.DSN("sslmode=verify-full", "sslrootcert="+dsnQuote(s.CAFile)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for {
		var caught bool
		if err := conn.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn).Scan(&caught); err != nil {
			t.Fatal(err)
		}
		if caught {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the standby did not replay the primary's insert")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var recovery bool
	var sum int
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery(), (SELECT sum(v) FROM t)").Scan(&recovery, &sum); err != nil {
		t.Fatal(err)
	}
	if !recovery || sum != 3 {
		t.Errorf("standby: in recovery %v, sum %d; want true, 3", recovery, sum)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO t VALUES (3)"); err == nil || !strings.Contains(err.Error(), "read-only transaction") {
		t.Errorf("a write on the standby: %v; want the read-only refusal", err)
	}
	if err := s.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.ExecAdmin(ctx, "INSERT INTO t VALUES (3)"); err != nil {
		t.Errorf("the promoted standby: %v", err)
	}
}

// A version that is not installed gets an error naming the install script, wrapping
// ErrNotInstalled; one older than 15 is refused as such; GSS on a build without GSSAPI is
// refused before anything starts.
func TestMajorErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t.Setenv("PGCONNECTOR_PG_ROOT", t.TempDir())
	_, err := Start(ctx, Options{Major: 19})
	if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "PostgreSQL 19 is not installed") ||
		!strings.Contains(err.Error(), "scripts/install-deps.sh") {
		t.Errorf("Major 19: %v; want ErrNotInstalled naming scripts/install-deps.sh", err)
	}
	if _, err := Libpq18Env(); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("Libpq18Env with an empty PGCONNECTOR_PG_ROOT: %v; want ErrNotInstalled", err)
	}
	_, err = Start(ctx, Options{Major: 14})
	if err == nil || !strings.Contains(err.Error(), "Options.Major 14: PostgreSQL 15 or newer required") {
		t.Errorf("Major 14: %v", err)
	}
}

func TestMajor18GSSRefused(t *testing.T) {
	k := StartKDCT(t, KDCOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := Start(ctx, Options{Major: 18, GSS: &GSSOptions{KDC: k, Keytab: true}})
	if err == nil {
		_ = p.Stop()
		t.Fatal("Start with GSS on PostgreSQL 18 (registry build) succeeded")
	}
	if !strings.Contains(err.Error(), "built without GSSAPI") || !strings.Contains(err.Error(), "Kerberos stays on PG 15") {
		t.Errorf("error: %v", err)
	}
}

// Debian's psql 15 with Libpq18Env loads libpq 18: it knows sslnegotiation (libpq 15 calls it
// an invalid option), connects with direct TLS and sslmode=require to a PostgreSQL 18 server,
// and refuses sslmode=prefer with it, in libpq 18's words (fe-connect.c). pgbench 15 runs with
// the same environment, over direct TLS too.
func TestLibpq18Env(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, err := Libpq18Env()
	if err != nil {
		t.Fatal(err)
	}
	p := StartT(t, Options{Major: 18, TLS: true, Auth: "scram-sha-256"})
	direct := p.DSN("sslnegotiation=direct", "sslmode=require")
	const query = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"

	if _, err := Psql(ctx, nil, direct, query); err == nil || !strings.Contains(err.Error(), `invalid connection option "sslnegotiation"`) {
		t.Errorf("psql with its own libpq: %v; want libpq 15's refusal of sslnegotiation", err)
	}
	out, err := Psql(ctx, env, direct, query)
	if err != nil || out != "t" {
		t.Errorf("psql with libpq 18, sslnegotiation=direct sslmode=require: %q, %v; want t", out, err)
	}
	_, err = Psql(ctx, env, p.DSN("sslnegotiation=direct", "sslmode=prefer"), query)
	if err == nil || !strings.Contains(err.Error(), `weak sslmode "prefer" may not be used with sslnegotiation=direct`) {
		t.Errorf("psql with libpq 18, sslnegotiation=direct sslmode=prefer: %v", err)
	}
	if strings.Contains(err.Error(), p.Password) {
		t.Error("psql's error holds the password")
	}

	pgbench, err := Program(ctx, "pgbench")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-i", "-q", "-s", "1"}, {"-n", "-S", "-t", "20", "-c", "2"}} {
		cmd := exec.CommandContext(ctx, pgbench, append(args, direct)...)
		cmd.Env = append(append(CleanEnv(), "PGCONNECT_TIMEOUT=20"), env...)
		cmd.Dir = os.TempDir()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("pgbench %s with libpq 18 and sslnegotiation=direct: %v\n%s", strings.Join(args, " "),
				err, strings.ReplaceAll(string(out), p.Password, "[password]"))
		}
		if args[0] == "-n" && !strings.Contains(string(out), "number of transactions actually processed: 40/40") {
			t.Errorf("pgbench: %s", strings.ReplaceAll(string(out), p.Password, "[password]"))
		}
	}
}

// pgbouncer (Debian's) in front of PostgreSQL 18: the trust and the SCRAM user get in and
// reach the PostgreSQL 18 server.
func TestPgbouncerMajor18(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pg := StartT(t, Options{Major: 18, Auth: "scram-sha-256"})
	b := StartPgbouncerT(t, pg, PgbouncerOptions{})
	for _, dsn := range []string{b.TrustDSN("sslmode=disable"), b.ScramDSN("sslmode=disable")} {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatalf("through pgbouncer to PostgreSQL 18: %v", err)
		}
		var v string
		err = conn.QueryRow(ctx, "SELECT current_setting('server_version')").Scan(&v)
		conn.Close(context.Background())
		if err != nil || !strings.HasPrefix(v, "18.") {
			t.Errorf("server_version through pgbouncer: %q, %v", v, err)
		}
	}
}
