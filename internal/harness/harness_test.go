package harness

import (
	"context"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// connect opens a pgx connection and closes it when the test ends.
func connect(t *testing.T, ctx context.Context, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// superuserDSN is the harness's own way in: the unix socket, trusted.
func superuserDSN(p *Postgres) string {
	return "host=" + p.SocketDir + " port=" + strconv.Itoa(p.Port) + " user=postgres dbname=postgres"
}

type session struct {
	User, Database string
	SSL            bool
	Addr           string
}

func describe(t *testing.T, ctx context.Context, conn *pgx.Conn) session {
	t.Helper()
	var s session
	err := conn.QueryRow(ctx, `SELECT current_user, current_database(),
		(SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()),
		coalesce(host(inet_server_addr()), '')`).Scan(&s.User, &s.Database, &s.SSL, &s.Addr)
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	return s
}

func TestTrustOverTCP(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{})

	if p.Host != "127.0.0.1" || p.Port == 0 || p.User != AppUser || p.Database != AppDatabase || p.Password == "" {
		t.Fatalf("unexpected fields: host=%q port=%d user=%q db=%q password set=%v", p.Host, p.Port, p.User, p.Database, p.Password != "")
	}
	if p.CAFile != "" {
		t.Errorf("CAFile = %q without TLS", p.CAFile)
	}
	if p.Version < 15 {
		t.Errorf("Version = %d", p.Version)
	}
	if v, err := ServerVersion(ctx); err != nil || v != p.Version {
		t.Errorf("ServerVersion = %d, %v; the server's Version is %d", v, err, p.Version)
	}

	got := describe(t, ctx, connect(t, ctx, p.DSN("sslmode=disable")))
	want := session{User: "app", Database: "app", SSL: false, Addr: "127.0.0.1"}
	if got != want {
		t.Errorf("DSN session = %+v, want %+v", got, want)
	}
	// With TLS off, sslmode=prefer (the default) falls back to plain text.
	if got := describe(t, ctx, connect(t, ctx, p.DSN())); got != want {
		t.Errorf("DSN (prefer) session = %+v, want %+v", got, want)
	}
	if got := describe(t, ctx, connect(t, ctx, p.URL()+"?sslmode=disable")); got != want {
		t.Errorf("URL session = %+v, want %+v", got, want)
	}
	// The unix socket works for the application role too.
	unix := describe(t, ctx, connect(t, ctx, p.DSN("host="+p.SocketDir)))
	if unix.User != "app" || unix.Addr != "" {
		t.Errorf("unix socket session = %+v", unix)
	}
	// Trust means any password, or none, is accepted.
	connect(t, ctx, p.DSN("password=wrong", "sslmode=disable"))

	if !strings.HasPrefix(p.URL(), "postgres://app:"+p.Password+"@127.0.0.1:"+strconv.Itoa(p.Port)+"/app") {
		t.Errorf("URL has an unexpected form")
	}
}

func TestSettingsAndConfiguration(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{Settings: map[string]string{"work_mem": "7MB", "application_name": "it's set"}})
	conn := connect(t, ctx, superuserDSN(p))
	for name, want := range map[string]string{
		"work_mem":                "7MB",
		"fsync":                   "off",
		"synchronous_commit":      "off",
		"full_page_writes":        "off",
		"max_connections":         "200",
		"listen_addresses":        "127.0.0.1",
		"log_connections":         "on",
		"log_disconnections":      "off",
		"logging_collector":       "off",
		"ssl":                     "off",
		"server_encoding":         "UTF8",
		"unix_socket_directories": p.SocketDir,
	} {
		var got string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	var prefix string
	if err := conn.QueryRow(ctx, "SELECT current_setting('log_line_prefix')").Scan(&prefix); err != nil || !strings.Contains(prefix, "%p") {
		t.Errorf("log_line_prefix = %q (%v), want one with the pid", prefix, err)
	}

	// The data directory keeps initdb's modes, and belongs to the account
	// the server runs as.
	fi, err := os.Stat(p.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("data directory mode %v, want 0700", fi.Mode().Perm())
	}
	if os.Geteuid() == 0 {
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid == 0 {
			t.Errorf("data directory owned by root; the server must not run as root")
		}
	}
	var collate string
	if err := conn.QueryRow(ctx, "SELECT datcollate FROM pg_database WHERE datname = 'app'").Scan(&collate); err != nil || collate != "C" {
		t.Errorf("database app collation %q (%v), want C", collate, err)
	}

	for _, bad := range []Options{{Auth: "ident"}, {Settings: map[string]string{"x\ny": "1"}}, {HBA: []string{"host all all 127.0.0.1/32 trust\nlocal all all reject"}}} {
		if p, err := Start(ctx, bad); err == nil {
			_ = p.Stop()
			t.Errorf("Start(%+v) succeeded", bad)
		}
	}
}

func TestTLSWithScram(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{TLS: true, Auth: "scram-sha-256"})

	if p.CAFile == "" {
		t.Fatal("CAFile not set")
	}
	pemBytes, err := os.ReadFile(p.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		t.Fatal("CAFile holds no PEM block")
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil || !ca.IsCA {
		t.Fatalf("CAFile is not a CA certificate (%v)", err)
	}
	key, err := os.Stat(filepath.Join(p.DataDir, "server.key"))
	if err != nil {
		t.Fatal(err)
	}
	if key.Mode().Perm() != 0o600 {
		t.Errorf("server.key mode %v, want 0600", key.Mode().Perm())
	}
	dataOwner := statUID(t, p.DataDir)
	if got := statUID(t, filepath.Join(p.DataDir, "server.key")); got != dataOwner {
		t.Errorf("server.key owned by uid %d, the server runs as uid %d", got, dataOwner)
	}

	for _, host := range []string{"localhost", "127.0.0.1"} {
		conn := connect(t, ctx, p.DSN("host="+host, "sslmode=verify-full", "sslrootcert="+p.CAFile))
		got := describe(t, ctx, conn)
		if !got.SSL || got.User != "app" {
			t.Errorf("host=%s: session %+v, want TLS as app", host, got)
		}
	}

	// The password is really checked.
	_, err = pgx.Connect(ctx, p.DSN("password=wrong", "sslmode=verify-full", "sslrootcert="+p.CAFile))
	if !isSQLState(err, "28P01") {
		t.Errorf("wrong password: err = %v, want SQLSTATE 28P01", err)
	}
	// The certificate does not verify against the system roots.
	if _, err := pgx.Connect(ctx, p.DSN("sslmode=verify-full", "sslrootcert=system")); err == nil {
		t.Error("verify-full against the system roots succeeded")
	}
	// The stored password is a SCRAM verifier.
	var stored string
	if err := connect(t, ctx, superuserDSN(p)).QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = 'app'").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stored, "SCRAM-SHA-256$") {
		t.Errorf("stored password has the wrong form")
	}
}

func statUID(t *testing.T, path string) uint32 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Uid
}

func isSQLState(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}

func TestMD5(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{Auth: "md5"})

	if got := describe(t, ctx, connect(t, ctx, p.DSN("sslmode=disable"))); got.User != "app" || got.SSL {
		t.Errorf("session %+v", got)
	}
	if _, err := pgx.Connect(ctx, p.DSN("password=wrong", "sslmode=disable")); !isSQLState(err, "28P01") {
		t.Errorf("wrong password: err = %v, want SQLSTATE 28P01", err)
	}
	var stored string
	if err := connect(t, ctx, superuserDSN(p)).QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = 'app'").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stored, "md5") {
		t.Errorf("stored password is not an MD5 hash")
	}
}

func TestPasswordAndRejectMethods(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{Auth: "password"})
	connect(t, ctx, p.DSN("sslmode=disable"))
	if _, err := pgx.Connect(ctx, p.DSN("password=wrong", "sslmode=disable")); !isSQLState(err, "28P01") {
		t.Errorf("wrong password: err = %v, want SQLSTATE 28P01", err)
	}

	r := StartT(t, Options{Auth: "reject"})
	if _, err := pgx.Connect(ctx, r.DSN("sslmode=disable")); !isSQLState(err, "28000") {
		t.Errorf("reject: err = %v, want SQLSTATE 28000", err)
	}
}

func TestCustomHBA(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{TLS: true, HBA: []string{"hostssl all all 127.0.0.1/32 scram-sha-256"}})
	if _, err := pgx.Connect(ctx, p.DSN("sslmode=disable")); !isSQLState(err, "28000") {
		t.Errorf("plain text: err = %v, want SQLSTATE 28000 (no pg_hba.conf entry)", err)
	}
	connect(t, ctx, p.DSN("sslmode=verify-full", "sslrootcert="+p.CAFile))
}

func TestConnectionsSince(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{Auth: "scram-sha-256"})

	mark := p.LogMark()
	if n, err := p.ConnectionsSince(mark); err != nil || n != 0 {
		t.Fatalf("ConnectionsSince right after LogMark = %d, %v", n, err)
	}
	const ok, failed, unix = 3, 2, 1
	for range ok {
		conn, err := pgx.Connect(ctx, p.DSN("sslmode=disable"))
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.Close(ctx)
	}
	// The harness's own connections (here: a reload) are not counted.
	if err := p.SetHBA("host all all 127.0.0.1/32 scram-sha-256"); err != nil {
		t.Fatal(err)
	}
	// A refused login still forked a backend.
	for range failed {
		if _, err := pgx.Connect(ctx, p.DSN("password=wrong", "sslmode=disable")); err == nil {
			t.Fatal("wrong password accepted")
		}
	}
	for range unix {
		conn, err := pgx.Connect(ctx, p.DSN("host="+p.SocketDir))
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.Close(ctx)
	}
	n, err := p.ConnectionsSince(mark)
	if err != nil {
		t.Fatal(err)
	}
	if n != ok+failed+unix {
		t.Errorf("ConnectionsSince = %d, want %d\n%s", n, ok+failed+unix, p.Log())
	}
	if n2, _ := p.ConnectionsSince(p.LogMark()); n2 != 0 {
		t.Errorf("ConnectionsSince(now) = %d", n2)
	}
	if !strings.Contains(p.Log(), "connection received") {
		t.Error("Log() lacks the connection lines")
	}
}

func TestSetHBA(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{})
	connect(t, ctx, p.DSN("sslmode=disable"))

	if err := p.SetHBA("host all all 127.0.0.1/32 reject"); err != nil {
		t.Fatal(err)
	}
	_, err := pgx.Connect(ctx, p.DSN("sslmode=disable"))
	if !isSQLState(err, "28000") || !strings.Contains(err.Error(), "rejects connection") {
		t.Fatalf("after SetHBA(reject): err = %v, want a pg_hba.conf rejection", err)
	}
	// The unix socket stays open for the superuser.
	connect(t, ctx, superuserDSN(p))

	// A line the server cannot parse is refused and the old rules stay.
	if err := p.SetHBA("host all all 127.0.0.1/32 no-such-method"); err == nil {
		t.Fatal("SetHBA with a bad line succeeded")
	} else if strings.Contains(err.Error(), p.Password) {
		t.Fatal("error message contains the password")
	} else {
		t.Logf("refused as expected: %v", err)
	}
	if _, err := pgx.Connect(ctx, p.DSN("sslmode=disable")); !isSQLState(err, "28000") {
		t.Fatalf("after a refused SetHBA: err = %v, want the previous reject rule", err)
	}

	if err := p.SetHBA("host all all 127.0.0.1/32 trust"); err != nil {
		t.Fatal(err)
	}
	connect(t, ctx, p.DSN("sslmode=disable"))

	// No host lines at all: nothing matches.
	if err := p.SetHBA(); err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.Connect(ctx, p.DSN("sslmode=disable")); !isSQLState(err, "28000") {
		t.Fatalf("without host lines: err = %v, want SQLSTATE 28000", err)
	}
}

func TestSetSSL(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{Auth: "scram-sha-256"})
	if _, err := pgx.Connect(ctx, p.DSN("sslmode=require")); err == nil {
		t.Fatal("sslmode=require succeeded with TLS off")
	}
	if err := p.SetSSL(true); err != nil {
		t.Fatal(err)
	}
	if p.CAFile == "" {
		t.Fatal("SetSSL(true) did not set CAFile")
	}
	if got := describe(t, ctx, connect(t, ctx, p.DSN("host=localhost", "sslmode=verify-full", "sslrootcert="+p.CAFile))); !got.SSL {
		t.Errorf("session %+v, want TLS", got)
	}
	if err := p.SetSSL(false); err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.Connect(ctx, p.DSN("sslmode=require")); err == nil {
		t.Fatal("sslmode=require succeeded after SetSSL(false)")
	}
	if err := p.SetSSL(true); err != nil {
		t.Fatal(err)
	}
	connect(t, ctx, p.DSN("sslmode=verify-full", "sslrootcert="+p.CAFile))
}

// A TLS setup the server cannot load must not be reported as done.
func TestSetSSLReportsAFailedReload(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{TLS: true})
	if err := p.SetSSL(false); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(p.DataDir, "server.key")
	if err := os.WriteFile(key, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := p.SetSSL(true)
	if err == nil || !strings.Contains(err.Error(), "not reloaded") {
		t.Fatalf("SetSSL(true) with a broken key: err = %v, want a report that the TLS setup was not reloaded", err)
	}
	t.Logf("refused as expected: %v", err)
	if _, err := pgx.Connect(ctx, p.DSN("sslmode=require")); err == nil {
		t.Error("TLS works with a broken key")
	}
}

func TestStopIsIdempotentAndRemovesDirectories(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p, err := Start(ctx, Options{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	connect(t, ctx, p.DSN("sslmode=require"))
	pid := postmasterPID(filepath.Join(p.DataDir, "postmaster.pid"))
	if pid <= 0 {
		t.Fatal("no postmaster pid")
	}

	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := p.Stop(); err != nil {
				t.Errorf("Stop: %v", err)
			}
		})
	}
	wg.Wait()
	if err := p.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	for _, dir := range []string{p.DataDir, p.SocketDir, filepath.Dir(p.CAFile)} {
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still exists (%v)", dir, err)
		}
	}
	// Gone, or a zombie waiting for init to reap it.
	if !waitGone(pid, 0) {
		t.Errorf("postmaster %d still running", pid)
	}
	if _, err := pgx.Connect(ctx, p.DSN("sslmode=disable", "connect_timeout=5")); err == nil {
		t.Error("connected to a stopped server")
	}
}

// TestStartTime measures a cluster start (template copy + pg_ctl start +
// setting the password); run with -v to see it.
func TestStartTime(t *testing.T) {
	ctx := testCtx(t)
	t0 := time.Now()
	StartT(t, Options{}) // the first start in a process also runs initdb (unless another test did)
	t.Logf("first start in this test: %v", time.Since(t0).Round(time.Millisecond))
	var total time.Duration
	const n = 3
	for i := range n {
		t0 := time.Now()
		p, err := Start(ctx, Options{TLS: i == n-1})
		if err != nil {
			t.Fatal(err)
		}
		d := time.Since(t0)
		total += d
		t1 := time.Now()
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
		t.Logf("start %d (TLS %v): %v, stop: %v", i+1, i == n-1, d.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	}
	t.Logf("mean start: %v", (total / n).Round(time.Millisecond))
}

func TestProxyPreferToPlainServer(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{})
	px := ProxyT(t, p.Addr())
	host, port := px.Addr()

	conn := connect(t, ctx, p.DSN("host="+host, "port="+strconv.Itoa(port), "sslmode=prefer"))
	if got := describe(t, ctx, conn); got.SSL {
		t.Errorf("session %+v, want plain text", got)
	}
	// pgx sends an SSLRequest, gets 'N', and then does not go on in the
	// clear on that socket: it closes it and dials again without TLS (its
	// sslmode=prefer is a fallback configuration). So two TCP connections
	// reach the proxy, the first carrying only the SSLRequest and the second
	// only the StartupMessage. (libpq would send both on one socket.)
	want := ProxyStats{Connections: 2, SSLRequests: 1, StartupMessages: 1}
	if got := px.Stats(); got != want {
		t.Errorf("prefer: stats %+v, want %+v", got, want)
	}

	// sslmode=disable: one socket, one StartupMessage.
	px2 := ProxyT(t, p.Addr())
	h2, p2 := px2.Addr()
	connect(t, ctx, p.DSN("host="+h2, "port="+strconv.Itoa(p2), "sslmode=disable"))
	if got, want := px2.Stats(), (ProxyStats{Connections: 1, StartupMessages: 1}); got != want {
		t.Errorf("disable: stats %+v, want %+v", got, want)
	}
}

func TestProxyTLSServer(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{TLS: true})
	px := ProxyT(t, p.Addr())
	host, port := px.Addr()
	dsn := p.DSN("host="+host, "port="+strconv.Itoa(port), "sslmode=require")

	conn := connect(t, ctx, dsn)
	// The StartupMessage travels inside TLS, where the proxy does not look.
	if got, want := px.Stats(), (ProxyStats{Connections: 1, SSLRequests: 1}); got != want {
		t.Errorf("require: stats %+v, want %+v", got, want)
	}
	if !describe(t, ctx, conn).SSL {
		t.Error("not TLS through the proxy")
	}

	// A cancel request of a TLS connection: pgx opens a new socket and, as
	// the primary connection is encrypted, wraps the cancel in TLS too, so the
	// proxy sees an SSLRequest, not a CancelRequest.
	before := px.Stats()
	if err := conn.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	got := px.Stats()
	if got.Connections != before.Connections+1 || got.SSLRequests != before.SSLRequests+1 || got.CancelRequests != 0 {
		t.Errorf("cancel over TLS: stats %+v, before %+v", got, before)
	}
}

func TestProxyCancelRequest(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{})
	px := ProxyT(t, p.Addr())
	host, port := px.Addr()
	conn := connect(t, ctx, p.DSN("host="+host, "port="+strconv.Itoa(port), "sslmode=disable"))

	// Cancel a running query through the proxy.
	errc := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, "SELECT pg_sleep(60)")
		errc <- err
	}()
	// Wait until the query runs, seen from another session.
	admin := connect(t, ctx, superuserDSN(p))
	for {
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)' AND state = 'active'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := conn.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !isSQLState(err, "57014") {
		t.Errorf("query error %v, want SQLSTATE 57014 (canceled)", err)
	}
	if got, want := px.Stats(), (ProxyStats{Connections: 2, StartupMessages: 1, CancelRequests: 1}); got != want {
		t.Errorf("stats %+v, want %+v", got, want)
	}
}

// rawNegotiate speaks the start of the protocol by hand, as libpq does: an
// SSLRequest or GSSENCRequest, and after an 'N' a StartupMessage on the same
// socket.
func rawNegotiate(t *testing.T, addr string, code uint32) (answer byte, authCode int32) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	req := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 8), code)
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	var a [1]byte
	if _, err := io.ReadFull(c, a[:]); err != nil {
		t.Fatal(err)
	}
	if a[0] != 'N' {
		return a[0], -1
	}
	body := binary.BigEndian.AppendUint32(nil, 196608)
	for _, s := range []string{"user", AppUser, "database", AppDatabase} {
		body = append(append(body, s...), 0)
	}
	body = append(body, 0)
	msg := binary.BigEndian.AppendUint32(nil, uint32(len(body)+4))
	if _, err := c.Write(append(msg, body...)); err != nil {
		t.Fatal(err)
	}
	var hdr [9]byte // 'R', length, auth code
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		t.Fatal(err)
	}
	if hdr[0] != 'R' {
		t.Fatalf("unexpected message %q after the StartupMessage", hdr[0])
	}
	_, _ = c.Write([]byte{'X', 0, 0, 0, 4}) // Terminate
	return 'N', int32(binary.BigEndian.Uint32(hdr[5:9]))
}

func TestProxySameSocketNegotiation(t *testing.T) {
	t.Parallel()
	p := StartT(t, Options{})
	px := ProxyT(t, p.Addr())
	host, port := px.Addr()
	addr := net.JoinHostPort(host, strconv.Itoa(port))

	answer, auth := rawNegotiate(t, addr, codeSSLRequest)
	if answer != 'N' || auth != 0 {
		t.Fatalf("SSLRequest answer %q, auth %d; want 'N' then AuthenticationOk", answer, auth)
	}
	if got, want := px.Stats(), (ProxyStats{Connections: 1, SSLRequests: 1, StartupMessages: 1}); got != want {
		t.Errorf("SSLRequest+StartupMessage on one socket: stats %+v, want %+v", got, want)
	}

	// A server built with GSSAPI answers 'G' over TCP even without
	// hostgssenc lines; then the proxy stops looking. After an 'N' the
	// StartupMessage on the same socket is counted.
	answer, _ = rawNegotiate(t, addr, codeGSSENCRequest)
	t.Logf("server answered %q to a GSSENCRequest", answer)
	want := ProxyStats{Connections: 2, SSLRequests: 1, GSSENCRequests: 1, StartupMessages: 1}
	if answer == 'N' {
		want.StartupMessages++
	} else if answer != 'G' {
		t.Fatalf("GSSENCRequest answer %q", answer)
	}
	if got := px.Stats(); got != want {
		t.Errorf("GSSENCRequest (answer %q): stats %+v, want %+v", answer, got, want)
	}
}

func TestProxyCloseWithOpenConnections(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p := StartT(t, Options{})
	px, err := NewProxy(p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	host, port := px.Addr()
	conn := connect(t, ctx, p.DSN("host="+host, "port="+strconv.Itoa(port), "sslmode=disable"))
	// A client that connects and sends nothing.
	idle, err := net.Dial("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()

	done := make(chan error, 1)
	go func() { done <- px.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return")
	}
	if err := px.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Error("query through a closed proxy succeeded")
	}
	_ = idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err == nil {
		t.Error("idle client socket still open")
	}
	if _, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), time.Second); err == nil {
		t.Error("proxy still accepts connections")
	}
}

func TestParallelStarts(t *testing.T) {
	t.Parallel()
	for i := range 3 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			p := StartT(t, Options{TLS: i%2 == 0, Auth: "scram-sha-256"})
			var one int
			if err := connect(t, ctx, p.DSN("sslmode=prefer")).QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
				t.Fatalf("SELECT 1 = %d, %v", one, err)
			}
		})
	}
}

// Not parallel: it changes pickPort.
func TestStartRetriesOnPortClash(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	calls := 0
	pickPort = func() (int, error) {
		calls++
		if calls == 1 {
			return taken, nil
		}
		return freePort()
	}
	defer func() { pickPort = freePort }()

	p := StartT(t, Options{})
	if p.Port == taken || calls != 2 {
		t.Errorf("port %d after %d choices; the taken port was %d", p.Port, calls, taken)
	}
	if !strings.Contains(p.Log(), "already in use") {
		t.Error("the first attempt did not run into the taken port")
	}
	connect(t, testCtx(t), p.DSN("sslmode=disable"))
}

// Not parallel: it changes PG_BINDIR.
func TestFindBinaries(t *testing.T) {
	ctx := testCtx(t)
	b, err := findBinaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.major < minMajorVersion {
		t.Fatalf("found PostgreSQL %d", b.major)
	}
	t.Logf("using %s: %s", b.dir, b.version)

	t.Setenv("PG_BINDIR", b.dir)
	if b2, err := findBinaries(ctx); err != nil || b2.dir != b.dir {
		t.Errorf("PG_BINDIR=%s: %v, %v", b.dir, b2, err)
	}

	t.Setenv("PG_BINDIR", t.TempDir())
	_, err = findBinaries(ctx)
	if err == nil {
		t.Fatal("an empty PG_BINDIR was accepted")
	}
	for _, want := range []string{"initdb", "pg_ctl", "postgres", "scripts/install-deps.sh"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}

	for line, want := range map[string]string{
		"postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)": "15",
		"postgres (PostgreSQL) 17.2":                           "17",
		"postgres (PostgreSQL) 18beta1":                        "18",
	} {
		if m := versionRE.FindStringSubmatch(line); m == nil || m[1] != want {
			t.Errorf("version of %q: %v, want %s", line, m, want)
		}
	}
}

func TestDSNQuoting(t *testing.T) {
	p := &Postgres{Host: "127.0.0.1", Port: 5432, User: "app", Password: "it's a \\secret", Database: "app"}
	cfg, err := pgx.ParseConfig(p.DSN("application_name=x"))
	if err != nil {
		t.Fatal("DSN does not parse")
	}
	if cfg.Password != p.Password || cfg.Host != "127.0.0.1" || cfg.Port != 5432 || cfg.Database != "app" || cfg.RuntimeParams["application_name"] != "x" {
		t.Error("DSN does not round-trip")
	}
	cfg, err = pgx.ParseConfig(p.URL())
	if err != nil || cfg.Password != p.Password || cfg.User != "app" || cfg.Database != "app" {
		t.Error("URL does not round-trip")
	}
}

func TestWriteCRL(t *testing.T) {
	t.Parallel()
	p := StartT(t, Options{})
	if _, err := p.WriteCRL(t.TempDir(), true); !errors.Is(err, errNoCA) {
		t.Fatalf("WriteCRL without TLS: %v, want errNoCA", err)
	}
	if err := p.SetSSL(true); err != nil {
		t.Fatal(err)
	}
	read := func(path string) *pem.Block {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			t.Fatalf("%s: no PEM", path)
		}
		return blk
	}
	ca, err := x509.ParseCertificate(read(p.CAFile).Bytes)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := x509.ParseCertificate(read(filepath.Join(p.DataDir, "server.crt")).Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if ca.KeyUsage&x509.KeyUsageCRLSign == 0 || len(ca.SubjectKeyId) == 0 {
		t.Errorf("CA key usage %v, subject key id %x: OpenSSL needs both to check a CRL", ca.KeyUsage, ca.SubjectKeyId)
	}
	dir := t.TempDir()
	for _, revoke := range []bool{true, false} {
		path, err := p.WriteCRL(dir, revoke)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(path) != dir {
			t.Errorf("%s is not in %s", path, dir)
		}
		blk := read(path)
		if blk.Type != "X509 CRL" {
			t.Errorf("PEM type %q", blk.Type)
		}
		crl, err := x509.ParseRevocationList(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if err := crl.CheckSignatureFrom(ca); err != nil {
			t.Errorf("not signed by the CA: %v", err)
		}
		if now := time.Now(); crl.ThisUpdate.After(now) || crl.NextUpdate.Before(now) {
			t.Errorf("valid from %v to %v", crl.ThisUpdate, crl.NextUpdate)
		}
		revoked := len(crl.RevokedCertificateEntries) == 1 && crl.RevokedCertificateEntries[0].SerialNumber.Cmp(srv.SerialNumber) == 0
		if revoked != revoke || !revoke && len(crl.RevokedCertificateEntries) != 0 {
			t.Errorf("revokeServer=%v: entries %+v, server serial %v", revoke, crl.RevokedCertificateEntries, srv.SerialNumber)
		}
	}
}
