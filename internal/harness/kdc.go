package harness

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The encryption types a harness KDC supports: every principal gets keys of
// all four unless it is created with a narrower list, and krb5.conf permits
// exactly these.
const (
	EnctypeAES256SHA1   = "aes256-cts-hmac-sha1-96"    // RFC 3962, etype 18
	EnctypeAES128SHA1   = "aes128-cts-hmac-sha1-96"    // RFC 3962, etype 17
	EnctypeAES128SHA256 = "aes128-cts-hmac-sha256-128" // RFC 8009, etype 19
	EnctypeAES256SHA384 = "aes256-cts-hmac-sha384-192" // RFC 8009, etype 20
)

// SupportedEnctypes returns the encryption types of a harness KDC, in the
// order of preference of krb5.conf's permitted_enctypes and of the KDC's
// supported_enctypes.
func SupportedEnctypes() []string {
	return []string{EnctypeAES256SHA1, EnctypeAES128SHA1, EnctypeAES256SHA384, EnctypeAES128SHA256}
}

// DefaultRealm is the realm of a KDC started with an empty KDCOptions.Realm.
const DefaultRealm = "PGCONNECTOR.TEST"

// KDC is a throwaway MIT Kerberos KDC (krb5kdc) on 127.0.0.1, with its own
// database, configuration and log in Dir. Its exported fields are set by
// StartKDC and must not be changed by the caller.
//
// Clients use it through Krb5Conf, a krb5.conf for the realm alone: no DNS
// lookups, dns_canonicalize_hostname = false and rdns = false (so the service
// principal for host=127.0.0.1 is <service>/127.0.0.1, for host=localhost
// <service>/localhost), the KDC at 127.0.0.1:Port over TCP first
// (udp_preference_limit = 1) and UDP, and permitted_enctypes set to
// SupportedEnctypes. Env gives the environment of a client program (psql,
// kinit, or the connector itself) that must use this realm and nothing else.
//
// Principals are managed with kadmin.local on the database directly; kadmind
// does not run. Passwords and the master key reach kadmin.local and kdb5_util
// on their standard input, never on a command line. The methods may be called
// from several goroutines.
//
// A KDC lives in the harness's per-process directory (see the package
// comment), so a test process that dies without stopping it leaves it
// running only until the next process that uses the harness stops it by its
// pid file. Never start two KDCs on one port: krb5kdc binds with
// SO_REUSEPORT, so a second one on a busy port starts without complaint and
// clients then get answers from either ("Decrypt integrity check failed").
// StartKDC checks that its KDC is the only listener on its port.
//
// The KDC log (Dir/kdc.log, logged by StartKDCT when a test fails) starts
// with "preauth spake failed to initialize: No SPAKE preauth groups
// configured": harmless, SPAKE is left off as in a default MIT realm.
type KDC struct {
	Realm    string // for example "PGCONNECTOR.TEST"
	Port     int    // TCP and UDP port on 127.0.0.1
	Dir      string // directory of the KDC's files, removed by Stop
	Krb5Conf string // krb5.conf for clients (and servers) of this realm

	kdcConf   string // the KDC profile (KRB5_KDC_PROFILE)
	dbDir     string // database, stash and ACL (0700)
	keytabs   string // client keytabs written for Kinit (0700)
	rcache    string // KRB5RCACHEDIR of clients and of the KDC tools
	pidFile   string
	logFile   string
	lifetime  time.Duration
	clockSkew time.Duration // of krb5.conf; 0: MIT's default
	progs     *krb5Programs

	kadminMu  sync.Mutex // one kadmin.local at a time
	serviceMu sync.Mutex // one AddServicePrincipals* (check, then create) at a time

	pid      int           // of the krb5kdc started last
	exited   chan struct{} // closed once that krb5kdc has exited and been reaped
	stopOnce sync.Once
	stopErr  error
}

// KDCOptions configures a KDC. The zero value is a realm "PGCONNECTOR.TEST"
// with tickets of up to 10 hours.
type KDCOptions struct {
	// Realm is the realm name; empty means DefaultRealm. Upper case letters,
	// digits, dots and hyphens.
	Realm string
	// TicketLifetime is the longest ticket the KDC issues and the lifetime
	// clients ask for by default; 0 means 10 hours. Kinit can ask for less.
	TicketLifetime time.Duration
	// ClockSkew is the clockskew of krb5.conf, that is how long the KDC and
	// an acceptor (the PostgreSQL server) still take a ticket after it has
	// expired; 0 leaves MIT's default of 5 minutes. Tests of expired tickets
	// that go past the MIT client library (which refuses an expired ticket by
	// itself) set it to a second or so. It must be a whole number of seconds.
	ClockSkew time.Duration
}

// krb5Programs holds the paths of the MIT Kerberos programs the harness runs.
type krb5Programs struct {
	krb5kdc, kdb5Util, kadminLocal string // krb5-kdc, krb5-admin-server
	kinit, klist, kvno             string // krb5-user
}

var (
	krb5ProgsMu sync.Mutex
	krb5Progs   *krb5Programs
)

// krb5InstallHint tells the reader how to get the Kerberos programs.
const krb5InstallHint = "run scripts/install-deps.sh (as root, or with sudo) to install the Debian packages " +
	"krb5-kdc, krb5-admin-server and krb5-user"

// findKrb5Programs locates the MIT Kerberos programs: in $PATH, else in
// /usr/sbin and /usr/bin (a user's $PATH often lacks the sbin directories).
func findKrb5Programs() (*krb5Programs, error) {
	krb5ProgsMu.Lock()
	defer krb5ProgsMu.Unlock()
	if krb5Progs != nil {
		return krb5Progs, nil
	}
	p := &krb5Programs{}
	var missing []string
	for _, x := range []struct {
		name string
		dst  *string
	}{
		{"krb5kdc", &p.krb5kdc}, {"kdb5_util", &p.kdb5Util}, {"kadmin.local", &p.kadminLocal},
		{"kinit", &p.kinit}, {"klist", &p.klist}, {"kvno", &p.kvno},
	} {
		path, err := exec.LookPath(x.name)
		if err != nil {
			for _, dir := range []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"} {
				if cand := filepath.Join(dir, x.name); isExecutable(cand) {
					path, err = cand, nil
					break
				}
			}
		}
		if err != nil {
			missing = append(missing, x.name)
			continue
		}
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
		*x.dst = path
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("harness: MIT Kerberos programs missing: %s; %s", strings.Join(missing, ", "), krb5InstallHint)
	}
	krb5Progs = p
	return p, nil
}

var (
	realmRE     = regexp.MustCompile(`^[A-Z0-9][A-Z0-9.-]{0,62}$`)
	principalRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._:-]*)?(@[A-Z0-9][A-Z0-9.-]*)?$`)
	serviceRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	hostRE      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$`)
)

// kdcStartMu serialises the start of KDCs in this process, so that two of
// them never pick the same port.
var kdcStartMu sync.Mutex

// StartKDC creates a new realm and starts its KDC. It is meant for programs;
// tests use StartKDCT. The caller must call Stop.
//
// It needs the MIT Kerberos programs krb5kdc, kdb5_util and kadmin.local. Its
// files (database, configuration, keytabs, log) are in the harness's
// per-process directory (see Cleanup). A start takes about 50 ms.
func StartKDC(ctx context.Context, opts KDCOptions) (*KDC, error) {
	realm := opts.Realm
	if realm == "" {
		realm = DefaultRealm
	}
	if !realmRE.MatchString(realm) {
		return nil, fmt.Errorf("harness: invalid realm %q (upper case letters, digits, dots and hyphens)", realm)
	}
	lifetime := opts.TicketLifetime
	if lifetime == 0 {
		lifetime = 10 * time.Hour
	}
	if lifetime < time.Second {
		return nil, fmt.Errorf("harness: TicketLifetime %v is under a second", lifetime)
	}
	if opts.ClockSkew < 0 || opts.ClockSkew%time.Second != 0 {
		return nil, fmt.Errorf("harness: ClockSkew %v is not a whole number of seconds", opts.ClockSkew)
	}
	progs, err := findKrb5Programs()
	if err != nil {
		return nil, err
	}
	base, err := processDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(base, "kdc-*")
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	k := &KDC{
		Realm:     realm,
		Dir:       dir,
		Krb5Conf:  filepath.Join(dir, "krb5.conf"),
		kdcConf:   filepath.Join(dir, "kdc.conf"),
		dbDir:     filepath.Join(dir, "db"),
		keytabs:   filepath.Join(dir, "keytabs"),
		rcache:    filepath.Join(dir, "rcache"),
		pidFile:   filepath.Join(dir, "krb5kdc.pid"),
		logFile:   filepath.Join(dir, "kdc.log"),
		lifetime:  lifetime,
		clockSkew: opts.ClockSkew,
		progs:     progs,
	}
	if err := k.start(ctx); err != nil {
		_ = k.Stop()
		return nil, interrupted(ctx, "starting the KDC", err)
	}
	return k, nil
}

// StartKDCT starts a KDC for a test, fails the test if that does not work,
// and stops the KDC when the test ends (after the servers the test started
// later, as cleanups run last-in first-out). If the test failed, the end of
// the KDC log is logged first.
func StartKDCT(t testing.TB, opts KDCOptions) *KDC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k, err := StartKDC(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, "KDC", k.logFile, k.Stop)
	return k
}

func (k *KDC) start(ctx context.Context) error {
	// Dir must be readable by the account that runs PostgreSQL (krb5.conf);
	// the database and the client keytabs are for root (or us) alone.
	if err := os.Chmod(k.Dir, 0o755); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	for _, d := range []string{k.dbDir, k.keytabs, k.rcache} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return fmt.Errorf("harness: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(k.dbDir, "kadm5.acl"), nil, 0o600); err != nil {
		return fmt.Errorf("harness: %w", err)
	}

	kdcStartMu.Lock()
	defer kdcStartMu.Unlock()
	const attempts = 5
	for i := 1; ; i++ {
		port, err := freeTCPAndUDPPort()
		if err != nil {
			return err
		}
		k.Port = port
		if err := k.writeConfig(); err != nil {
			return err
		}
		if i == 1 {
			if err := k.createDatabase(ctx); err != nil {
				return err
			}
		}
		err = k.startDaemon(ctx)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errPortShared) || i == attempts || ctx.Err() != nil {
			return err
		}
		// Another KDC took the port between the check and the bind: stop
		// ours and try another port.
		if serr := k.stopDaemon(); serr != nil {
			return errors.Join(err, serr)
		}
	}
}

var errPortShared = errors.New("another process listens on the KDC's port")

// krb5ConfParams is what a krb5.conf written by the harness says.
type krb5ConfParams struct {
	realm       string
	kdcs        []string // host:port, in the order listed
	enctypes    []string // permitted_enctypes, default_tkt_enctypes, default_tgs_enctypes
	lifetime    time.Duration
	clockSkew   time.Duration // 0: MIT's default
	dir         string        // names the default keytabs, which never exist, in this directory
	forwardable bool          // forwardable = true; the harness's own krb5.conf says false
}

// krb5ConfText is a krb5.conf for one realm on loopback: no DNS lookups,
// host names used as written, TCP first, and only the given KDCs and
// encryption types.
func krb5ConfText(p krb5ConfParams) string {
	enctypes := strings.Join(p.enctypes, " ")
	life := strconv.Itoa(int(p.lifetime/time.Second)) + "s"
	var skew string
	if p.clockSkew > 0 {
		skew = "    clockskew = " + strconv.Itoa(int(p.clockSkew/time.Second)) + "\n"
	}
	var kdcs string
	for _, addr := range p.kdcs {
		kdcs += "        kdc = " + addr + "\n"
	}
	return "# Written by the pgconnector test harness: a throwaway realm on loopback.\n" +
		"[libdefaults]\n" +
		"    default_realm = " + p.realm + "\n" +
		"    dns_lookup_kdc = false\n" +
		"    dns_lookup_realm = false\n" +
		"    dns_canonicalize_hostname = false\n" +
		"    rdns = false\n" +
		"    udp_preference_limit = 1\n" +
		"    ticket_lifetime = " + life + "\n" +
		"    forwardable = " + strconv.FormatBool(p.forwardable) + "\n" +
		"    permitted_enctypes = " + enctypes + "\n" +
		"    default_tkt_enctypes = " + enctypes + "\n" +
		"    default_tgs_enctypes = " + enctypes + "\n" +
		"    default_client_keytab_name = FILE:" + filepath.Join(p.dir, "no-client.keytab") + "\n" +
		"    default_keytab_name = FILE:" + filepath.Join(p.dir, "no-default.keytab") + "\n" +
		skew +
		"[realms]\n" +
		"    " + p.realm + " = {\n" +
		kdcs +
		"    }\n" +
		"[domain_realm]\n" +
		"    localhost = " + p.realm + "\n" +
		"    127.0.0.1 = " + p.realm + "\n"
}

// krb5ConfParams returns what the KDC's own krb5.conf says.
func (k *KDC) krb5ConfParams() krb5ConfParams {
	return krb5ConfParams{
		realm:     k.Realm,
		kdcs:      []string{k.Addr()},
		enctypes:  SupportedEnctypes(),
		lifetime:  k.lifetime,
		clockSkew: k.clockSkew,
		dir:       k.Dir,
	}
}

// Addr returns the KDC's address, 127.0.0.1:Port, as krb5.conf names it.
func (k *KDC) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(k.Port))
}

// writeConfig writes krb5.conf (clients, servers, and the KDC programs) and
// kdc.conf (the KDC programs).
func (k *KDC) writeConfig() error {
	addr := k.Addr()
	life := strconv.Itoa(int(k.lifetime/time.Second)) + "s"
	var keysalts []string
	for _, e := range SupportedEnctypes() {
		keysalts = append(keysalts, e+":normal")
	}
	kdc := "# Written by the pgconnector test harness.\n" +
		"[kdcdefaults]\n" +
		"    kdc_listen = " + addr + "\n" +
		"    kdc_tcp_listen = " + addr + "\n" +
		"[realms]\n" +
		"    " + k.Realm + " = {\n" +
		"        database_name = " + filepath.Join(k.dbDir, "principal") + "\n" +
		"        key_stash_file = " + filepath.Join(k.dbDir, "stash") + "\n" +
		"        acl_file = " + filepath.Join(k.dbDir, "kadm5.acl") + "\n" +
		"        max_life = " + life + "\n" +
		"        max_renewable_life = 0s\n" +
		"        master_key_type = " + EnctypeAES256SHA1 + "\n" +
		"        supported_enctypes = " + strings.Join(keysalts, " ") + "\n" +
		"    }\n" +
		"[logging]\n" +
		"    kdc = FILE:" + k.logFile + "\n" +
		"    admin_server = FILE:" + k.logFile + "\n" +
		"    default = FILE:" + k.logFile + "\n"
	if err := writeKrb5Conf(k.Krb5Conf, k.krb5ConfParams()); err != nil {
		return err
	}
	if err := os.WriteFile(k.kdcConf, []byte(kdc), 0o644); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	return nil
}

// adminEnv is the environment of the KDC programs: ours without any Kerberos
// or PostgreSQL variables, in the C locale, pointed at this realm.
func (k *KDC) adminEnv() []string {
	return append(CleanEnv(),
		"KRB5_CONFIG="+k.Krb5Conf,
		"KRB5_KDC_PROFILE="+k.kdcConf,
		"KRB5RCACHEDIR="+k.rcache,
		"KRB5CCNAME=FILE:"+filepath.Join(k.Dir, "no-credentials.ccache"),
		"KRB5_CLIENT_KTNAME=",
	)
}

// CleanEnv returns this process's environment without PG*, KRB5*, LC_* and
// LANG variables, plus LC_ALL=C and LANG=C: the base environment of every
// program the harness runs, and of clients that must see only what they are
// given (a connection string, KDC.Env).
func CleanEnv() []string {
	env := []string{"LC_ALL=C", "LANG=C"}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "KRB5") || strings.HasPrefix(k, "LC_") || k == "LANG" || k == "LANGUAGE" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// runKrb5 runs one of the Kerberos programs with env and stdin and returns
// its standard output and standard error. Error messages name the program
// and its arguments, never stdin (which may carry a password).
func runKrb5(ctx context.Context, env []string, stdin string, prog string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 10 * time.Second
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("harness: %s %s: %w: %s", filepath.Base(prog), strings.Join(args, " "), err,
			strings.TrimSpace(errb.String()))
	}
	return out.String(), errb.String(), err
}

// createDatabase creates the realm's database and stash file with a random
// master key, given to kdb5_util on its standard input.
func (k *KDC) createDatabase(ctx context.Context) error {
	pw, err := randomHex(24)
	if err != nil {
		return err
	}
	_, _, err = runKrb5(ctx, k.adminEnv(), pw+"\n"+pw+"\n", k.progs.kdb5Util, "-r", k.Realm, "create", "-s", "-W")
	return err
}

// startDaemon starts krb5kdc in the foreground (-n) as our child, with a pid
// file, and waits until it says "commencing operation" in its log.
func (k *KDC) startDaemon(ctx context.Context) error {
	_ = os.Remove(k.pidFile)
	log, err := os.OpenFile(k.logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	defer log.Close()
	mark, _ := log.Seek(0, 2)
	// Not CommandContext: the KDC outlives ctx.
	cmd := exec.Command(k.progs.krb5kdc, "-n", "-r", k.Realm, "-P", k.pidFile)
	cmd.Env = k.adminEnv()
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("harness: starting krb5kdc: %w", err)
	}
	exited := make(chan struct{})
	k.pid, k.exited = cmd.Process.Pid, exited
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()

	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-exited:
			return fmt.Errorf("harness: krb5kdc exited at start:\n%s", lastLines(readFrom(k.logFile, mark), 20))
		case <-deadline.C:
			return fmt.Errorf("harness: krb5kdc did not start within 30 s:\n%s", lastLines(readFrom(k.logFile, mark), 20))
		case <-ctx.Done():
			return fmt.Errorf("harness: starting krb5kdc: %w", ctx.Err())
		case <-tick.C:
		}
		if !strings.Contains(readFrom(k.logFile, mark), "commencing operation") || readPidFile(k.pidFile) <= 0 {
			continue
		}
		if tcp, udp, ok := listenersOn(k.Port); ok && (tcp != 1 || udp != 1) {
			return fmt.Errorf("harness: krb5kdc on port %d: %w (%d TCP listeners, %d UDP sockets)", k.Port, errPortShared, tcp, udp)
		}
		return nil
	}
}

// readFrom returns the content of path from offset on, or "".
func readFrom(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil || offset > int64(len(b)) {
		return ""
	}
	return string(b[offset:])
}

// readPidFile returns the pid in a pid file, or 0.
func readPidFile(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// procComm returns the command name of a process, or "".
func procComm(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// listenersOn counts the listening TCP sockets and the UDP sockets bound to
// port on any IPv4 address, from /proc/net; ok is false when those files
// cannot be read.
func listenersOn(port int) (tcp, udp int, ok bool) {
	count := func(path, state string) (int, bool) {
		f, err := os.Open(path)
		if err != nil {
			return 0, false
		}
		defer f.Close()
		n := 0
		s := bufio.NewScanner(f)
		for s.Scan() {
			fields := strings.Fields(s.Text())
			if len(fields) < 4 || fields[3] != state {
				continue
			}
			_, hexPort, found := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); found && err == nil && int(p) == port {
				n++
			}
		}
		return n, s.Err() == nil
	}
	tcp, ok1 := count("/proc/net/tcp", "0A") // TCP_LISTEN
	udp, ok2 := count("/proc/net/udp", "07") // TCP_CLOSE, as unconnected UDP sockets show
	return tcp, udp, ok1 && ok2
}

// freeTCPAndUDPPort returns a port on 127.0.0.1 that was free for both TCP
// and UDP a moment ago.
func freeTCPAndUDPPort() (int, error) {
	for range 20 {
		l, err := listenLow()
		if err != nil {
			return 0, fmt.Errorf("harness: finding a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		_ = l.Close()
		if err != nil {
			continue
		}
		_ = u.Close()
		return port, nil
	}
	return 0, errors.New("harness: found no port free for both TCP and UDP")
}

// Stop stops the KDC (the process named in its pid file) and removes Dir. It
// is safe to call more than once and from several goroutines; every call
// returns the result of the first.
func (k *KDC) Stop() error {
	k.stopOnce.Do(func() {
		var errs []error
		if err := k.stopDaemon(); err != nil {
			errs = append(errs, err)
		}
		if err := os.RemoveAll(k.Dir); err != nil {
			errs = append(errs, fmt.Errorf("harness: %w", err))
		}
		k.stopErr = errors.Join(errs...)
	})
	return k.stopErr
}

// stopDaemon stops the krb5kdc of the pid file, if it runs.
func (k *KDC) stopDaemon() error {
	pid := readPidFile(k.pidFile)
	if pid <= 0 {
		pid = k.pid // it died, or was stopped, before writing the pid file
	}
	err := stopKDCProcess(pid)
	if k.exited != nil {
		select {
		case <-k.exited:
		case <-time.After(10 * time.Second):
			if err == nil {
				err = errors.New("harness: krb5kdc did not exit")
			}
		}
		k.exited = nil
	}
	_ = os.Remove(k.pidFile)
	return err
}

// stopKDCProcess stops process pid if it is a krb5kdc (a pid file may outlive
// its process, and the pid be reused): SIGTERM, then SIGKILL.
func stopKDCProcess(pid int) error {
	if pid <= 0 || procComm(pid) != "krb5kdc" {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if waitGone(pid, 10*time.Second) {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if !waitGone(pid, 10*time.Second) {
		return fmt.Errorf("harness: krb5kdc (pid %d) did not stop", pid)
	}
	return nil
}

// Principal returns name with the realm appended ("alice" becomes
// "alice@PGCONNECTOR.TEST"); a name that has a realm is returned as it is.
func (k *KDC) Principal(name string) string {
	if strings.Contains(name, "@") {
		return name
	}
	return name + "@" + k.Realm
}

// kadmin runs one kadmin.local query. kadmin.local exits with status 0 after
// most failed queries, so its standard error decides: anything there but its
// chatter is an error.
func (k *KDC) kadmin(ctx context.Context, query, stdin string) (string, error) {
	k.kadminMu.Lock()
	defer k.kadminMu.Unlock()
	out, errOut, err := runKrb5(ctx, k.adminEnv(), stdin, k.progs.kadminLocal, "-r", k.Realm, "-q", query)
	if err != nil {
		return out, err
	}
	var problems []string
	for _, line := range strings.Split(errOut, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "No policy specified for ") || strings.HasPrefix(line, "Authenticating as principal ") {
			continue
		}
		problems = append(problems, line)
	}
	if len(problems) > 0 {
		return out, fmt.Errorf("harness: kadmin.local %q: %s", query, strings.Join(problems, "; "))
	}
	return out, nil
}

func checkPrincipal(name string) error {
	if !principalRE.MatchString(name) {
		return fmt.Errorf("harness: invalid principal name %q", name)
	}
	return nil
}

func checkEnctypes(enctypes []string) error {
	if len(enctypes) == 0 {
		return errors.New("harness: no encryption type given")
	}
	for _, e := range enctypes {
		if !slices.Contains(SupportedEnctypes(), e) {
			return fmt.Errorf("harness: unsupported encryption type %q (want one of %s)", e, strings.Join(SupportedEnctypes(), ", "))
		}
	}
	return nil
}

// keysalts turns encryption types into kadmin's -e argument.
func keysalts(enctypes []string) string {
	ks := make([]string, len(enctypes))
	for i, e := range enctypes {
		ks[i] = e + ":normal"
	}
	return strings.Join(ks, ",")
}

// AddPrincipal creates a principal (usually a user such as "alice"; the realm
// is appended when missing) with keys of every supported encryption type,
// derived from a new random password, which it returns. Kinit does not need
// the password.
func (k *KDC) AddPrincipal(name string) (password string, err error) {
	return k.addPrincipal(name, nil)
}

// AddPrincipalEnctypes is AddPrincipal with keys of the given encryption
// types only (see SupportedEnctypes). The principal's session_enctypes
// attribute is set to the same list, so that the KDC also chooses the
// session keys of tickets for this principal (as a service) among them.
func (k *KDC) AddPrincipalEnctypes(name string, enctypes ...string) (password string, err error) {
	if err := checkEnctypes(enctypes); err != nil {
		return "", err
	}
	return k.addPrincipal(name, enctypes)
}

func (k *KDC) addPrincipal(name string, enctypes []string) (string, error) {
	if err := checkPrincipal(name); err != nil {
		return "", err
	}
	pw, err := randomHex(16)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	query := "addprinc"
	if enctypes != nil {
		query += " -e " + keysalts(enctypes)
	}
	// No -pw: kadmin.local prompts twice and reads the answers from stdin.
	if _, err := k.kadmin(ctx, query+" "+k.Principal(name), pw+"\n"+pw+"\n"); err != nil {
		return "", err
	}
	if enctypes != nil {
		if err := k.setSessionEnctypes(ctx, name, enctypes); err != nil {
			return "", err
		}
	}
	return pw, nil
}

func (k *KDC) setSessionEnctypes(ctx context.Context, name string, enctypes []string) error {
	_, err := k.kadmin(ctx, "setstr "+k.Principal(name)+" session_enctypes "+strings.Join(enctypes, ","), "")
	return err
}

// AddServicePrincipals creates the principals <service>/<host> for each host
// (for example "postgres", "localhost", "127.0.0.1") with random keys of every
// supported encryption type. A principal that exists already is left as it
// is.
func (k *KDC) AddServicePrincipals(service string, hosts ...string) error {
	return k.addServicePrincipals(service, nil, hosts)
}

// AddServicePrincipalsEnctypes is AddServicePrincipals with keys of the given
// encryption types only, and session_enctypes set to them, so that both the
// tickets for these services and their session keys are of those types. A
// principal that exists already must have keys of exactly these types.
func (k *KDC) AddServicePrincipalsEnctypes(service string, enctypes []string, hosts ...string) error {
	if err := checkEnctypes(enctypes); err != nil {
		return err
	}
	return k.addServicePrincipals(service, enctypes, hosts)
}

func (k *KDC) addServicePrincipals(service string, enctypes []string, hosts []string) error {
	if !serviceRE.MatchString(service) {
		return fmt.Errorf("harness: invalid service name %q", service)
	}
	if len(hosts) == 0 {
		return errors.New("harness: no host given for the service principals")
	}
	k.serviceMu.Lock()
	defer k.serviceMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, h := range hosts {
		if !hostRE.MatchString(h) {
			return fmt.Errorf("harness: invalid host name %q", h)
		}
		name := k.Principal(service + "/" + h)
		have, err := k.Enctypes(name)
		if err != nil {
			return err
		}
		if have != nil {
			if enctypes != nil && !sameSet(have, enctypes) {
				return fmt.Errorf("harness: principal %s exists with keys of %s, not %s", name,
					strings.Join(have, ", "), strings.Join(enctypes, ", "))
			}
			continue
		}
		query := "addprinc -randkey"
		if enctypes != nil {
			query += " -e " + keysalts(enctypes)
		}
		if _, err := k.kadmin(ctx, query+" "+name, ""); err != nil {
			return err
		}
		if enctypes != nil {
			if err := k.setSessionEnctypes(ctx, name, enctypes); err != nil {
				return err
			}
		}
	}
	return nil
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

var keyLineRE = regexp.MustCompile(`(?m)^Key: vno \d+, (\S+)`)

// Enctypes returns the encryption types of a principal's keys, or nil (and
// no error) if there is no such principal.
func (k *KDC) Enctypes(principal string) ([]string, error) {
	if err := checkPrincipal(principal); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := k.kadmin(ctx, "getprinc "+k.Principal(principal), "")
	if err != nil {
		if strings.Contains(err.Error(), "Principal does not exist") {
			return nil, nil
		}
		return nil, err
	}
	var types []string
	for _, m := range keyLineRE.FindAllStringSubmatch(out, -1) {
		types = append(types, m[1])
	}
	if types == nil {
		types = []string{} // a principal without keys
	}
	return types, nil
}

// Keytab writes the current keys of the principals (realm appended when
// missing) into the keytab file path, without changing them (ktadd
// -norandkey), and makes the file mode 0600. Entries are added to an existing
// file. The file belongs to the caller: a server that reads it may need a
// chown.
func (k *KDC) Keytab(path string, principals ...string) error {
	if len(principals) == 0 {
		return errors.New("harness: no principal given for the keytab")
	}
	if strings.ContainsAny(path, "\n\r\"\\\x00") {
		return fmt.Errorf("harness: keytab path %q has a character kadmin cannot take", path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	names := make([]string, len(principals))
	for i, p := range principals {
		if err := checkPrincipal(p); err != nil {
			return err
		}
		names[i] = k.Principal(p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// kadmin splits its query at blanks, except inside double quotes.
	if _, err := k.kadmin(ctx, `ktadd -norandkey -k "FILE:`+abs+`" `+strings.Join(names, " "), ""); err != nil {
		return err
	}
	if err := os.Chmod(abs, 0o600); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	return nil
}

// Kinit gets a ticket-granting ticket for principal (realm appended when
// missing) into the credential cache file ccache (a path; FILE: is added),
// with kinit and a client keytab the harness writes for it, so no password is
// involved. A lifetime of 0 asks for the KDC's TicketLifetime; a shorter one
// (down to a second, rounded up to whole seconds) gives a ticket that expires
// soon, for tests of expired credentials. The ccache file is replaced.
func (k *KDC) Kinit(ccache string, principal string, lifetime time.Duration) error {
	return k.kinitFile(ccache, principal, lifetime)
}

// KinitForwardable is Kinit with a forwardable ticket-granting ticket (kinit -f), which the
// harness's krb5.conf does not ask for by default (forwardable = false): what credential
// delegation needs.
func (k *KDC) KinitForwardable(ccache string, principal string, lifetime time.Duration) error {
	return k.kinitFile(ccache, principal, lifetime, "-f")
}

func (k *KDC) kinitFile(ccache string, principal string, lifetime time.Duration, opts ...string) error {
	if err := checkPrincipal(principal); err != nil {
		return err
	}
	if ccache == "" {
		return errors.New("harness: Kinit: no ccache file given")
	}
	return k.kinit(k.Env(ccache), principal, lifetime, opts...)
}

// kinit runs kinit for principal with a client keytab and the kinit options opts, in the
// environment CleanEnv plus env.
func (k *KDC) kinit(env []string, principal string, lifetime time.Duration, opts ...string) error {
	if err := checkPrincipal(principal); err != nil {
		return err
	}
	if lifetime < 0 || lifetime > 0 && lifetime < time.Second {
		return fmt.Errorf("harness: Kinit: lifetime %v is under a second", lifetime)
	}
	name := k.Principal(principal)
	kt, err := os.CreateTemp(k.keytabs, "kinit-*.keytab")
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	ktPath := kt.Name()
	_ = kt.Close()
	_ = os.Remove(ktPath) // ktadd creates it
	defer os.Remove(ktPath)
	if err := k.Keytab(ktPath, name); err != nil {
		return err
	}
	args := append([]string{"-k", "-t", "FILE:" + ktPath}, opts...)
	if lifetime > 0 {
		secs := (lifetime + time.Second - 1) / time.Second
		args = append(args, "-l", strconv.Itoa(int(secs))+"s")
	}
	args = append(args, name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _, err = runKrb5(ctx, append(CleanEnv(), env...), "", k.progs.kinit, args...)
	return err
}

// Env returns the environment variables a Kerberos client (psql, kinit, klist,
// or the connector with gokrb5) needs to use this realm with the credential
// cache file ccache, to append to its environment (later entries win in
// os/exec):
//
//	KRB5_CONFIG=<Krb5Conf>
//	KRB5CCNAME=FILE:<ccache>
//	KRB5_CLIENT_KTNAME=
//	KRB5RCACHEDIR=<a directory of the KDC>
//
// An empty ccache names a file that never exists: a client without
// credentials. KRB5_CLIENT_KTNAME is set empty so that MIT's library finds no
// client keytab: with one, it would get credentials by itself even with an
// empty ccache.
func (k *KDC) Env(ccache string) []string {
	cc := filepath.Join(k.Dir, "no-credentials.ccache")
	if ccache != "" {
		cc = strings.TrimPrefix(ccache, "FILE:")
		if abs, err := filepath.Abs(cc); err == nil {
			cc = abs
		}
	}
	return []string{
		"KRB5_CONFIG=" + k.Krb5Conf,
		"KRB5CCNAME=FILE:" + cc,
		"KRB5_CLIENT_KTNAME=",
		"KRB5RCACHEDIR=" + k.rcache,
	}
}

// Klist returns the output of klist -e for the credential cache file ccache:
// its tickets with their session key and ticket encryption types.
func (k *KDC) Klist(ccache string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, _, err := runKrb5(ctx, append(CleanEnv(), k.Env(ccache)...), "", k.progs.klist, "-e")
	return out, err
}

var klistTicketRE = regexp.MustCompile(`(?m)^\S+ \S+\s+\S+ \S+\s+(\S+)\s*\n(?:\s+renew until [^\n]*\n)?\s+Etype \(skey, tkt\): (\S+), (\S+)`)

// TicketEnctypes returns the encryption types of the session key and of the
// ticket for the service principal (realm appended when missing) in the
// credential cache file ccache, as klist -e shows them. A ticket cached under
// the empty (referral) realm, as MIT caches those for a numeric host such as
// postgres/127.0.0.1, counts too.
func (k *KDC) TicketEnctypes(ccache, principal string) (session, ticket string, err error) {
	out, err := k.Klist(ccache)
	if err != nil {
		return "", "", err
	}
	want := k.Principal(principal)
	// MIT does not look numeric host names up in [domain_realm]: it asks for
	// postgres/127.0.0.1 in the client's realm as a referral and caches the
	// ticket under the empty realm, "postgres/127.0.0.1@".
	referral := strings.TrimSuffix(want, k.Realm)
	var have []string
	for _, m := range klistTicketRE.FindAllStringSubmatch(out, -1) {
		if m[1] == want || m[1] == referral {
			return m[2], m[3], nil
		}
		have = append(have, m[1])
	}
	return "", "", fmt.Errorf("harness: no ticket for %s in %s (tickets for: %s)", want, ccache, strings.Join(have, ", "))
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	return hex.EncodeToString(b), nil
}
