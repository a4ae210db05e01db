//go:build linux

package pgconnector_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// What the child process of a hostile-cache test reads: TestMain sets KRB5CCNAME again there.
const (
	childDSNEnv      = "PGCONNECTOR_TEST_HOSTILE_DSN"
	childCCNameEnv   = "PGCONNECTOR_TEST_HOSTILE_KRB5CCNAME"
	childKrb5ConfEnv = "PGCONNECTOR_TEST_HOSTILE_KRB5_CONFIG"
	childKTNameEnv   = "PGCONNECTOR_TEST_HOSTILE_KRB5_CLIENT_KTNAME"
)

// transportQuery returns how the session is protected, as transport reports it.
const transportQuery = `select case when coalesce((select encrypted from pg_stat_gssapi where pid = pg_backend_pid()), false) then 'gss'
	when coalesce((select ssl from pg_stat_ssl where pid = pg_backend_pid()), false) then 'tls' else 'plain' end`

var childLineRE = regexp.MustCompile(`(?m)^\s*filecache_test.go:\d+: (prefer|require): (.*)$`)

// hostileCacheChild is the part of a hostile-cache test that may crash: in the child process,
// with the default DSN (gssencmode=prefer) and with gssencmode=require, the connector reads
// the cache named by the environment the parent gave. It logs "prefer: <transport>" and
// "require: <error>" for the parent.
func hostileCacheChild(t *testing.T) {
	t.Setenv("KRB5CCNAME", os.Getenv(childCCNameEnv)) // empty: krb5.conf's default_ccache_name
	t.Setenv("KRB5_CONFIG", os.Getenv(childKrb5ConfEnv))
	t.Setenv("KRB5_CLIENT_KTNAME", os.Getenv(childKTNameEnv)) // empty: none, as TestMain sets
	dsn := os.Getenv(childDSNEnv)
	db := sql.OpenDB(newConnector(t, dsn))
	defer db.Close()
	var transport string
	if err := db.QueryRow(transportQuery).Scan(&transport); err != nil {
		t.Fatalf("prefer: %v", err)
	}
	t.Logf("prefer: %s", transport)
	req := sql.OpenDB(newConnector(t, dsn+" gssencmode=require"))
	defer req.Close()
	err := req.Ping()
	if err == nil {
		t.Fatal("gssencmode=require connected")
	}
	t.Logf("require: %v", err)
}

// psqlTransport runs psql with the environment env (KRB5CCNAME unset unless env sets it, unlike
// harness.Psql) and returns the session's transport, or psql's error.
func psqlTransport(t *testing.T, env []string, conninfo string) (string, error) {
	t.Helper()
	psql, err := harness.Program(context.Background(), "psql")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, psql, "-X", "-w", "-A", "-t", "-d", conninfo, "-c", transportQuery)
	cmd.Env = append(append(harness.CleanEnv(), "PGCONNECT_TIMEOUT=20", "KRB5_CLIENT_KTNAME="), env...)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", errors.New(strings.TrimSpace(string(ee.Stderr)))
		}
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// checkHostileCache runs hostileCacheChild in a child process with the cache named ccname
// (empty: the default of krb5Conf) and psql beside it, and checks that they agree: with the
// default DSN both connect without GSS; with gssencmode=require both fail, the connector saying
// what is wrong with the cache (want).
func checkHostileCache(t *testing.T, srv *harness.Postgres, ccname, krb5Conf, want string) {
	t.Helper()
	checkHostile(t, srv, ccname, "", krb5Conf, want)
}

// checkHostile is checkHostileCache with the client keytab ktname (KRB5_CLIENT_KTNAME; empty:
// none) as well.
func checkHostile(t *testing.T, srv *harness.Postgres, ccname, ktname, krb5Conf, want string) {
	t.Helper()
	dsn := aliceDSN(srv, "localhost")
	out, passed := harness.RunInChildProcess(t, 2*time.Minute,
		childDSNEnv+"="+dsn, childCCNameEnv+"="+ccname, childKrb5ConfEnv+"="+krb5Conf, childKTNameEnv+"="+ktname)
	if !passed {
		if i := strings.Index(out, "fatal error"); i >= 0 {
			out = out[i:min(len(out), i+400)]
		}
		t.Fatalf("the connector in a child process failed:\n%s", out)
	}
	got := map[string]string{}
	for _, m := range childLineRE.FindAllStringSubmatch(out, -1) {
		got[m[1]] = m[2]
	}
	env := []string{"KRB5_CONFIG=" + krb5Conf, "KRB5_CLIENT_KTNAME=" + ktname}
	if ccname != "" {
		env = append(env, "KRB5CCNAME="+ccname)
	}
	psql, err := psqlTransport(t, env, dsn)
	if err != nil {
		t.Fatalf("psql: %v", err)
	}
	if got["prefer"] != psql || psql == "gss" {
		t.Fatalf("default DSN: the connector's session is %q, psql's %q; want the same, without GSS", got["prefer"], psql)
	}
	if _, err := psqlTransport(t, env, dsn+" gssencmode=require"); err == nil {
		t.Fatal("psql with gssencmode=require connected")
	} else {
		t.Logf("psql, gssencmode=require: %v", err)
	}
	if !strings.Contains(got["require"], "gssencmode=require") || !strings.Contains(got["require"], want) {
		t.Fatalf("gssencmode=require: %q, want an error saying %q", got["require"], want)
	}
	if strings.Contains(got["require"], "alice") {
		t.Fatalf("gssencmode=require: %q names the cache's principal", got["require"])
	}
	t.Logf("connector: prefer %s; require: %s", got["prefer"], got["require"])
}

// hostileLab is a server that offers GSS encryption (hostgssenc, with its keytab) and takes
// the rest with trust, and a 179-byte FILE cache whose first credential claims 2^31-1
// addresses (harness.HugeAddressCountCCache).
func hostileLab(t *testing.T) (*kerberosLab, *harness.Postgres, []byte) {
	lab := newKerberosLab(t)
	srv := lab.server(t, true, lab.gssHBA(), "hostnogssenc all all 127.0.0.1/32 trust")
	return lab, srv, harness.HugeAddressCountCCache()
}

// A FILE cache at KRB5CCNAME whose first credential claims 2^31-1 addresses: with the default
// DSN the connector connects without GSS, as psql does (the cache holds no usable ticket);
// gssencmode=require fails, saying what is wrong. The connector runs in a child process: a
// reader that sizes its address list by the count dies of a fatal out-of-memory error.
func TestHostileFileCacheAtKRB5CCNAME(t *testing.T) {
	if harness.IsChildProcess(t) {
		hostileCacheChild(t)
		return
	}
	lab, srv, huge := hostileLab(t)
	path := filepath.Join(t.TempDir(), "krb5cc_hostile")
	if err := os.WriteFile(path, huge, 0o600); err != nil {
		t.Fatal(err)
	}
	checkHostileCache(t, srv, "FILE:"+path, lab.kdc.Krb5Conf, "2147483647 addresses")
}

// The same cache planted as the default cache, FILE:/tmp/krb5cc_<uid> in MIT's build: here
// krb5.conf's default_ccache_name points the default into a directory of the test, KRB5CCNAME
// unset, so that the machine's own /tmp/krb5cc_<uid> is never touched.
func TestHostileFileCacheAsDefault(t *testing.T) {
	if harness.IsChildProcess(t) {
		hostileCacheChild(t)
		return
	}
	lab, srv, huge := hostileLab(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "krb5cc_"+strconv.Itoa(os.Getuid())), huge, 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "krb5.conf")
	if err := os.WriteFile(conf, []byte("[libdefaults]\n\tdefault_ccache_name = FILE:"+filepath.Join(dir, "krb5cc_%{uid}")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	checkHostileCache(t, srv, "", conf+":"+lab.kdc.Krb5Conf, "2147483647 addresses")
}

// A FIFO as FILE cache (KRB5CCNAME=FILE:/path/to/fifo): the connect does not wait for a writer
// that never comes. (psql, like MIT's library, blocks in open(2) on it: nothing to compare with.)
func TestFIFOFileCache(t *testing.T) {
	lab := newKerberosLab(t)
	srv := lab.server(t, true, lab.gssHBA(), "hostnogssenc all all 127.0.0.1/32 trust")
	fifo := newFIFO(t)
	t.Setenv("KRB5CCNAME", "FILE:"+fifo)
	t.Setenv("KRB5_CONFIG", lab.kdc.Krb5Conf)
	db := checkFIFONotWaitedOn(t, srv, fifo, "the credential cache", time.Minute)
	// Later connects are not blocked either.
	if got := transport(t, db); got == "gss" || strings.HasPrefix(got, "error") {
		t.Fatalf("a later connect: %s", got)
	}
}

// newFIFO makes a FIFO that no writer opens. At the end of the test its write end is opened and
// closed, so that a reader blocked in open(2) goes on.
func newFIFO(t *testing.T) string {
	t.Helper()
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releaseFIFO(fifo) })
	return fifo
}

// releaseFIFO opens and closes the write end of fifo: a reader blocked in open(2) goes on.
func releaseFIFO(fifo string) {
	if fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
		unix.Close(fd)
	}
}

// checkFIFONotWaitedOn connects three times at once while the Kerberos environment names fifo
// (what says as what): twice through one connector with the default DSN and once with
// gssencmode=require. All three return long before deadline, the first two without GSS
// encryption, the third with an error naming the FIFO. It returns the default DSN's pool.
func checkFIFONotWaitedOn(t *testing.T, srv *harness.Postgres, fifo, what string, deadline time.Duration) *sql.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	connectTimeout := "connect_timeout=" + strconv.Itoa(int(deadline*3/4/time.Second))
	db := sql.OpenDB(newConnector(t, aliceDSN(srv, "localhost", connectTimeout)))
	t.Cleanup(func() { db.Close() })
	req := sql.OpenDB(newConnector(t, aliceDSN(srv, "localhost", "gssencmode=require", connectTimeout)))
	defer req.Close()

	type result struct {
		what, transport string
		err             error
	}
	results := make(chan result, 3)
	for i := range 2 { // two connects of one connector at once: neither waits on the other
		go func() {
			var tr string
			err := db.QueryRowContext(ctx, transportQuery).Scan(&tr)
			results <- result{"connect " + strconv.Itoa(i+1), tr, err}
		}()
	}
	go func() { results <- result{what: "gssencmode=require", err: req.PingContext(ctx)} }()
	var got []result
	timeout := time.After(deadline + 5*time.Second)
	for len(got) < 3 {
		select {
		case r := <-results:
			got = append(got, r)
		case <-timeout:
			releaseFIFO(fifo) // let the blocked reads end before the connectors close
			t.Fatalf("after %v, %d of 3 connects returned: %s, a FIFO, blocked them", deadline+5*time.Second, len(got), what)
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("the connects returned only at their deadline (%v)", deadline)
	}
	for _, r := range got {
		switch {
		case r.what == "gssencmode=require":
			if r.err == nil || !strings.Contains(r.err.Error(), "named pipe (FIFO)") || !strings.Contains(r.err.Error(), fifo) {
				t.Errorf("%s: %v, want an error naming the FIFO", r.what, r.err)
			} else {
				t.Logf("%s: %v", r.what, r.err)
			}
		case r.err != nil:
			t.Errorf("%s: %v", r.what, r.err)
		case r.transport == "gss":
			t.Errorf("%s: GSS-encrypted with a FIFO as %s", r.what, what)
		}
	}
	return db
}
