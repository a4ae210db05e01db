package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
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

// Roles that StartPgbouncer creates in the PostgreSQL behind it and that pgbouncer lets in.
const (
	// PgbouncerTrustUser logs in to pgbouncer without a password (pgbouncer's hba method trust).
	PgbouncerTrustUser = "bouncer_trust"
	// PgbouncerScramUser logs in to pgbouncer with SCRAM-SHA-256 (RFC 7677): pgbouncer checks the
	// client's proof against the StoredKey and ServerKey copied from pg_authid.
	PgbouncerScramUser = "bouncer_scram"
)

// PgbouncerOptions configures StartPgbouncer. The zero value gives pool_mode=transaction,
// max_client_conn=1000 and default_pool_size=20.
type PgbouncerOptions struct {
	// PoolMode is pgbouncer's pool_mode: "session", "transaction" (the default when empty) or
	// "statement".
	PoolMode string
	// MaxClientConn is max_client_conn, the client connections pgbouncer accepts at once; 0
	// means 1000.
	MaxClientConn int
	// DefaultPoolSize is default_pool_size, the server connections per database and user; 0
	// means 20.
	DefaultPoolSize int
	// TLS lets clients in over TLS after SSLRequest (client_tls_sslmode = allow), with the
	// server's certificate and key, which the server must have (Options.TLS): a pooler that
	// takes TLS but, like pgbouncer 1.18, no direct TLS and no ALPN.
	TLS bool
}

// Pgbouncer is a throwaway pgbouncer (Debian package pgbouncer, 1.18 on Debian 12) in front of a
// harness server. Its exported fields are set by StartPgbouncer and must not be changed.
//
// It listens on Host:Port over TCP only (unix_socket_dir is empty), on a port below 32768
// (Linux hands out client ports from 32768 up: a client socket left in TIME-WAIT there could
// make a later bind fail). It serves the server's Database to two roles, which it creates in
// the server: TrustUser (hba method trust) and ScramUser, whose password is ScramPassword. The
// auth_file holds ScramUser's SCRAM secret (SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:
// <ServerKey>) as read from pg_authid.rolpassword, not the password, so that pgbouncer only
// checks proofs and the PBKDF2 of a login is the client's alone (pgbouncer's documentation,
// section "Authentication file format"). pgbouncer reaches the server over its unix socket,
// where the harness's pg_hba.conf always says trust, whatever Options.Auth and Options.TLS say
// about TCP.
//
// pgbouncer refuses to run as root: it runs as the server's account, from a directory in the
// harness's per-process directory named pgbouncer-*. Stop, Cleanup or the guardian (when the
// process dies) stops it by its pid file and removes Dir.
type Pgbouncer struct {
	Host          string // "127.0.0.1"
	Port          int    // TCP port on Host, below 32768
	Database      string // the database name pgbouncer serves: the server's Database
	TrustUser     string // PgbouncerTrustUser
	ScramUser     string // PgbouncerScramUser
	ScramPassword string // random password of ScramUser
	Dir           string // pgbouncer's configuration, auth files, pid file and log

	pg      *Postgres
	tls     *certSet // the server's certificate and key, for client TLS (PgbouncerOptions.TLS)
	acct    *serverAccount
	logFile string
	pidFile string
	cmd     *exec.Cmd
	exited  chan struct{}

	stopOnce sync.Once
	stopErr  error
}

// pgbouncerInstallHint tells the reader how to get pgbouncer.
const pgbouncerInstallHint = "run scripts/install-deps.sh (as root, or with sudo) to install the Debian package pgbouncer"

// findPgbouncer locates the pgbouncer program: in $PATH, else in the sbin directories.
func findPgbouncer() (string, error) {
	return findSbinProgram("pgbouncer", "harness: pgbouncer is missing; "+pgbouncerInstallHint)
}

var poolModes = map[string]bool{"session": true, "transaction": true, "statement": true}

// StartPgbouncer starts pgbouncer in front of pg, creating (or updating) the roles TrustUser and
// ScramUser in pg. It is meant for programs such as the benchmark command; tests use
// StartPgbouncerT. The caller must call Stop, before stopping pg.
func StartPgbouncer(ctx context.Context, pg *Postgres, opts PgbouncerOptions) (*Pgbouncer, error) {
	if pg == nil || pg.env == nil {
		return nil, errors.New("harness: StartPgbouncer needs a running harness server")
	}
	mode := opts.PoolMode
	if mode == "" {
		mode = "transaction"
	}
	if !poolModes[mode] {
		return nil, fmt.Errorf("harness: unsupported PgbouncerOptions.PoolMode %q (want session, transaction or statement)", opts.PoolMode)
	}
	if opts.MaxClientConn < 0 || opts.DefaultPoolSize < 0 {
		return nil, fmt.Errorf("harness: PgbouncerOptions: MaxClientConn %d and DefaultPoolSize %d must not be negative", opts.MaxClientConn, opts.DefaultPoolSize)
	}
	maxClients, poolSize := orDefault(opts.MaxClientConn, 1000), orDefault(opts.DefaultPoolSize, 20)
	prog, err := findPgbouncer()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(pg.env.base, "pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	b := &Pgbouncer{
		Host:      "127.0.0.1",
		Database:  pg.Database,
		TrustUser: PgbouncerTrustUser,
		ScramUser: PgbouncerScramUser,
		Dir:       dir,
		pg:        pg,
		acct:      pg.env.acct,
		logFile:   filepath.Join(dir, "pgbouncer.log"),
		pidFile:   filepath.Join(dir, "pgbouncer.pid"),
	}
	if opts.TLS {
		if pg.ca == nil {
			return nil, errors.New("harness: PgbouncerOptions.TLS needs a server started with Options.TLS")
		}
		b.tls = pg.ca
	}
	if err := b.start(ctx, prog, mode, maxClients, poolSize); err != nil {
		_ = b.Stop()
		return nil, interrupted(ctx, "starting pgbouncer", err)
	}
	return b, nil
}

// orDefault is v, or def when v is 0.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// StartPgbouncerT starts pgbouncer in front of pg for a test, fails the test if that does not
// work, and stops it when the test ends (before pg, when pg came from StartT earlier in the
// test). If the test failed, the end of pgbouncer's log is logged first.
func StartPgbouncerT(t testing.TB, pg *Postgres, opts PgbouncerOptions) *Pgbouncer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := StartPgbouncer(ctx, pg, opts)
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, "pgbouncer", b.logFile, b.Stop)
	return b
}

func (b *Pgbouncer) start(ctx context.Context, prog, mode string, maxClients, poolSize int) error {
	if err := os.Chmod(b.Dir, 0o755); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	if err := b.acct.chown(b.Dir); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	secret, err := b.createRoles(ctx)
	if err != nil {
		return err
	}
	// auth_file: "user" "secret"; trust still needs the user listed. The secret has no '"'.
	users := fmt.Sprintf("%q %q\n%q \"\"\n", b.ScramUser, secret, b.TrustUser)
	if err := b.acct.writeFile(filepath.Join(b.Dir, "userlist.txt"), []byte(users), 0o600); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	if b.tls != nil {
		if err := b.acct.writeFile(filepath.Join(b.Dir, "client.crt"), b.tls.certPEM, 0o644); err != nil {
			return fmt.Errorf("harness: %w", err)
		}
		if err := b.acct.writeFile(filepath.Join(b.Dir, "client.key"), b.tls.keyPEM, 0o600); err != nil {
			return fmt.Errorf("harness: %w", err)
		}
	}
	hba := "# Written by the pgconnector test harness.\n" +
		"host all " + b.TrustUser + " 127.0.0.1/32 trust\n" +
		"host all " + b.ScramUser + " 127.0.0.1/32 scram-sha-256\n"
	if err := b.acct.writeFile(filepath.Join(b.Dir, "hba.conf"), []byte(hba), 0o600); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	const attempts = 5
	for i := 1; ; i++ {
		port, err := pickBouncerPort()
		if err != nil {
			return err
		}
		b.Port = port
		if err := b.writeConf(mode, maxClients, poolSize); err != nil {
			return err
		}
		mark := fileSize(b.logFile)
		err = b.run(ctx, prog)
		if err == nil {
			return nil
		}
		tail := logFrom(b.logFile, mark)
		if i < attempts && strings.Contains(tail, "in use") && ctx.Err() == nil {
			continue // someone took the port between pickBouncerPort and the bind
		}
		return fmt.Errorf("%w\npgbouncer log:\n%s", err, lastLines(tail, 30))
	}
}

// createRoles creates TrustUser and ScramUser in the server (or updates them), gives ScramUser a
// new random password stored as SCRAM-SHA-256, and returns ScramUser's rolpassword.
func (b *Pgbouncer) createRoles(ctx context.Context) (string, error) {
	var pw [16]byte
	if _, err := rand.Read(pw[:]); err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	b.ScramPassword = hex.EncodeToString(pw[:])
	var secret string
	err := b.pg.admin(ctx, func(conn *pgx.Conn) error {
		for _, role := range []string{b.TrustUser, b.ScramUser} {
			if _, err := conn.Exec(ctx, "DO $$BEGIN CREATE ROLE "+role+" LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END$$"); err != nil {
				return fmt.Errorf("harness: creating role %s: %w", role, err)
			}
		}
		// The statement carries the password: never let the server log it.
		for _, sql := range []string{
			"SET log_min_error_statement = panic",
			"SET log_statement = none",
			"SET password_encryption = 'scram-sha-256'",
			"ALTER ROLE " + b.ScramUser + " PASSWORD '" + b.ScramPassword + "'",
		} {
			if _, err := conn.Exec(ctx, sql); err != nil {
				return fmt.Errorf("harness: setting the password of role %s failed (%s)", b.ScramUser, errorCode(err))
			}
		}
		return conn.QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = $1", b.ScramUser).Scan(&secret)
	})
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(secret, "SCRAM-SHA-256$") || strings.ContainsAny(secret, "\"\n") {
		return "", fmt.Errorf("harness: the password of role %s is not stored as a SCRAM-SHA-256 secret", b.ScramUser)
	}
	return secret, nil
}

// writeConf writes pgbouncer.ini.
func (b *Pgbouncer) writeConf(mode string, maxClients, poolSize int) error {
	lines := []string{
		"; Written by the pgconnector test harness.",
		"[databases]",
		fmt.Sprintf("%s = host=%s port=%d dbname=%s", b.Database, b.pg.SocketDir, b.pg.Port, b.pg.Database),
		"",
		"[pgbouncer]",
		"listen_addr = " + b.Host,
		"listen_port = " + strconv.Itoa(b.Port),
		"unix_socket_dir =",
		"auth_type = hba",
		"auth_hba_file = " + filepath.Join(b.Dir, "hba.conf"),
		"auth_file = " + filepath.Join(b.Dir, "userlist.txt"),
		"pool_mode = " + mode,
		"max_client_conn = " + strconv.Itoa(maxClients),
		"default_pool_size = " + strconv.Itoa(poolSize),
		"listen_backlog = 1024",
		"logfile = " + b.logFile,
		"pidfile = " + b.pidFile,
		"log_connections = 1",
		"log_disconnections = 0",
		"log_stats = 0",
		// Sent by some drivers (lib/pq, JDBC); pgbouncer refuses unknown startup parameters.
		"ignore_startup_parameters = extra_float_digits",
		"",
	}
	if b.tls != nil {
		lines = append(lines,
			"client_tls_sslmode = allow",
			"client_tls_cert_file = "+filepath.Join(b.Dir, "client.crt"),
			"client_tls_key_file = "+filepath.Join(b.Dir, "client.key"),
			"")
	}
	if err := b.acct.writeFile(filepath.Join(b.Dir, "pgbouncer.ini"), []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	return nil
}

// run starts pgbouncer in the foreground (as the server's account, in a process group of its
// own) and returns once it accepts connections on Port, or with an error when it exits first.
func (b *Pgbouncer) run(ctx context.Context, prog string) error {
	out, err := os.OpenFile(filepath.Join(b.Dir, "pgbouncer.out"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	defer out.Close()
	// Not CommandContext: pgbouncer outlives ctx, which only bounds the start.
	cmd := b.acct.command(context.Background(), prog, "-q", filepath.Join(b.Dir, "pgbouncer.ini"))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("harness: starting pgbouncer: %w", err)
	}
	exited := make(chan struct{})
	b.cmd, b.exited = cmd, exited
	go func() { _ = cmd.Wait(); close(exited) }()

	addr := net.JoinHostPort(b.Host, strconv.Itoa(b.Port))
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		// Ours once its pid file names it: a connection alone could reach another listener.
		if readPidFile(b.pidFile) == cmd.Process.Pid {
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				_ = c.Close()
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("harness: pgbouncer exited at start (%v): %s", cmd.ProcessState, strings.TrimSpace(tailFile(filepath.Join(b.Dir, "pgbouncer.out"), 10)))
		case <-ctx.Done():
			b.kill()
			return fmt.Errorf("harness: waiting for pgbouncer: %w", ctx.Err())
		case <-deadline:
			b.kill()
			return fmt.Errorf("harness: pgbouncer did not accept connections on %s within 30 s", addr)
		case <-tick.C:
		}
	}
}

// Addr returns pgbouncer's TCP address as "127.0.0.1:PORT".
func (b *Pgbouncer) Addr() string {
	return net.JoinHostPort(b.Host, strconv.Itoa(b.Port))
}

// DSN returns a keyword/value connection string for user through pgbouncer,
//
//	host=127.0.0.1 port=N user=USER dbname=app
//
// with password=ScramPassword when user is ScramUser, followed by the extra "key=value" items
// verbatim (a later key overrides an earlier one). It may hold the password: never put it in an
// error message.
func (b *Pgbouncer) DSN(user string, extra ...string) string {
	parts := []string{
		"host=" + b.Host,
		"port=" + strconv.Itoa(b.Port),
		"user=" + dsnQuote(user),
		"dbname=" + dsnQuote(b.Database),
	}
	if user == b.ScramUser {
		parts = append(parts, "password="+dsnQuote(b.ScramPassword))
	}
	return strings.Join(append(parts, extra...), " ")
}

// TrustDSN is DSN(TrustUser, extra...).
func (b *Pgbouncer) TrustDSN(extra ...string) string { return b.DSN(b.TrustUser, extra...) }

// ScramDSN is DSN(ScramUser, extra...): it holds the password.
func (b *Pgbouncer) ScramDSN(extra ...string) string { return b.DSN(b.ScramUser, extra...) }

// Logins returns how many client logins pgbouncer has logged since it started: its "login
// attempt" lines (log_connections), one per startup packet of a client it let in to the
// authentication step, whether the authentication then succeeded or not. Take it before and
// after to count the logins in between.
func (b *Pgbouncer) Logins() (int, error) {
	data, err := os.ReadFile(b.logFile)
	if err != nil {
		return 0, fmt.Errorf("harness: %w", err)
	}
	return strings.Count(string(data), " login attempt: "), nil
}

// Log returns pgbouncer's whole log, for test failure messages.
func (b *Pgbouncer) Log() string {
	data, err := os.ReadFile(b.logFile)
	if err != nil {
		return fmt.Sprintf("(pgbouncer log unavailable: %v)", err)
	}
	return string(data)
}

// Pid is pgbouncer's process id, or 0 before it started.
func (b *Pgbouncer) Pid() int {
	if b.cmd == nil || b.cmd.Process == nil {
		return 0
	}
	return b.cmd.Process.Pid
}

// Stop stops pgbouncer (SIGTERM: pgbouncer 1.18's immediate shutdown, closing its clients'
// and its server connections) and removes Dir. It is safe to call more than once and from
// several goroutines; every call returns the result of the first. The roles stay in the server.
func (b *Pgbouncer) Stop() error {
	b.stopOnce.Do(func() {
		var errs []error
		if b.exited != nil {
			_ = syscall.Kill(b.cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-b.exited:
			case <-time.After(15 * time.Second):
				b.kill()
				select {
				case <-b.exited:
				case <-time.After(10 * time.Second):
					errs = append(errs, fmt.Errorf("harness: pgbouncer (pid %d) did not stop", b.cmd.Process.Pid))
				}
			}
		}
		if err := os.RemoveAll(b.Dir); err != nil {
			errs = append(errs, fmt.Errorf("harness: %w", err))
		}
		b.stopErr = errors.Join(errs...)
	})
	return b.stopErr
}

// kill ends pgbouncer at once.
func (b *Pgbouncer) kill() {
	if b.cmd != nil && b.cmd.Process != nil {
		_ = b.cmd.Process.Kill()
	}
}

// pickBouncerPort chooses pgbouncer's port (below 32768: see ports.go); a variable so that a
// test can make the first choice collide.
var pickBouncerPort = freePort

// errorCode is "SQLSTATE xxxxx" for a server error, else "no SQLSTATE": what a message may say
// of an error whose text could hold the statement.
func errorCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return "SQLSTATE " + pgErr.Code
	}
	return "no SQLSTATE"
}

// fileSize is the size of the file at path, or 0.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logFrom returns what the file at path holds after offset, or "".
func logFrom(path string, offset int64) string {
	data, err := os.ReadFile(path)
	if err != nil || offset > int64(len(data)) {
		return ""
	}
	return string(data[offset:])
}
