package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// KCM is a throwaway Heimdal KCM daemon (kcm(8), Debian package heimdal-kcm): a credential
// cache server that MIT's libkrb5 reaches for cache names KCM:... through the Unix socket of
// [libdefaults] kcm_socket. Its exported fields are set by StartKCM and must not be changed.
//
// Heimdal's kcm (7.8) ignores its --socket-path option: it binds
// /var/run/.heim_org.h5l.kcm-socket and writes /var/run/kcm.pid (lib/ipc/server.c
// heim_sipc_service_unix, kcm/main.c rk_pidfile). The harness therefore starts it in a mount
// namespace of its own in which Dir/run is bind-mounted on /var/run: the socket, pid file,
// configuration and log all land in Dir/run, and the system's /var/run is never touched. That
// needs root (CAP_SYS_ADMIN), or else unprivileged user namespaces (the daemon then runs in
// one that maps only the caller's uid and gid to themselves).
//
// Caches live in the daemon's memory and go with it. Heimdal's default name constraints
// stay on: a client may create caches named after its uid ("0", "0:anything" for root, as
// MIT's ccache_def.rst recommends) and no others.
//
// A KCM lives in the harness's per-process directory: Stop, Cleanup or the guardian (when the
// test binary dies) stops it by its pid file and removes Dir.
type KCM struct {
	Socket   string // the daemon's Unix socket, for kcm_socket
	Dir      string // directory of the daemon's files, removed by Stop
	Krb5Conf string // a krb5.conf with only [libdefaults] kcm_socket = Socket

	runDir  string // Dir/run, /var/run inside the daemon's mount namespace
	logFile string
	pidFile string
	pid     int
	exited  chan struct{}

	stopOnce sync.Once
	stopErr  error
}

// kcmSocketName is the socket's name inside /var/run: "/var/run/.heim_%s-socket" with the
// service name "org.h5l.kcm" (Heimdal kcm/main.c, lib/ipc/server.c).
const kcmSocketName = ".heim_org.h5l.kcm-socket"

// kcmExecEnv makes this executable, started by StartKCM, the daemon's launcher: it bind-mounts
// the directory of its first argument on /var/run in its private mount namespace and execs kcm
// with the remaining arguments (see kcmLauncher).
const kcmExecEnv = "PGCONNECTOR_HARNESS_KCM"

func init() {
	if _, ok := os.LookupEnv(kcmExecEnv); ok {
		os.Exit(kcmLauncher(os.Args[1:]))
	}
}

// kcmLauncher runs in the new mount namespace: args are the run directory, the kcm program and
// its arguments. It returns only on failure.
func kcmLauncher(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "harness kcm launcher: missing arguments")
		return 2
	}
	if err := syscall.Mount(args[0], "/var/run", "", syscall.MS_BIND, ""); err != nil {
		fmt.Fprintf(os.Stderr, "harness kcm launcher: bind-mounting %s on /var/run: %v\n", args[0], err)
		return 1
	}
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, kcmExecEnv+"=") {
			env = append(env, kv)
		}
	}
	err := syscall.Exec(args[1], args[1:], env)
	fmt.Fprintf(os.Stderr, "harness kcm launcher: exec %s: %v\n", args[1], err)
	return 1
}

// kcmInstallHint tells the reader how to get kcm.
const kcmInstallHint = "run scripts/install-deps.sh (as root, or with sudo) to install the Debian package heimdal-kcm"

// findKCMProgram locates Heimdal's kcm: in $PATH, else in the sbin directories.
func findKCMProgram() (string, error) {
	return findSbinProgram("kcm", "harness: the KCM daemon kcm is missing; "+kcmInstallHint)
}

// findSbinProgram locates a daemon's program: in $PATH, else in the sbin directories, which a
// user's $PATH often leaves out; missing is the error when it is in neither.
func findSbinProgram(name, missing string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return filepath.Abs(p)
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin"} {
		if cand := filepath.Join(dir, name); isExecutable(cand) {
			return cand, nil
		}
	}
	return "", errors.New(missing)
}

// StartKCM starts a KCM daemon on a private socket. It is meant for programs; tests use
// StartKCMT. The caller must call Stop. A start takes about 20 ms.
func StartKCM(ctx context.Context) (*KCM, error) {
	prog, err := findKCMProgram()
	if err != nil {
		return nil, err
	}
	base, err := processDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(base, "kcm-")
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	m := &KCM{Dir: dir, runDir: filepath.Join(dir, "run")}
	m.Socket = filepath.Join(m.runDir, kcmSocketName)
	m.logFile = filepath.Join(m.runDir, "kcm.log")
	m.pidFile = filepath.Join(m.runDir, "kcm.pid")
	m.Krb5Conf = filepath.Join(dir, "krb5-kcm.conf")
	if len(m.Socket) >= 108 { // sizeof(sun_path)
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("harness: KCM socket path %s is too long for a Unix socket; set TMPDIR to a shorter directory", m.Socket)
	}
	if err := m.start(ctx, prog); err != nil {
		_ = m.Stop()
		return nil, err
	}
	return m, nil
}

// StartKCMT starts a KCM daemon for a test, fails the test if that does not work, and stops it
// when the test ends. If the test failed, the end of the daemon's log is logged first.
func StartKCMT(t testing.TB) *KCM {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := StartKCM(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("harness: end of the KCM log (%s):\n%s", m.logFile, tailFile(m.logFile, 40))
		}
		if err := m.Stop(); err != nil {
			t.Errorf("harness: %v", err)
		}
	})
	return m
}

func (m *KCM) start(ctx context.Context, prog string) error {
	if err := os.Mkdir(m.runDir, 0o755); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	// The daemon's own profile, seen at /var/run/kcm.conf inside its namespace: a realm it
	// never uses, and its log.
	conf := "# Written by the pgconnector test harness: the profile of a throwaway KCM daemon.\n" +
		"[libdefaults]\n    default_realm = " + DefaultRealm + "\n    dns_lookup_kdc = false\n" +
		"[logging]\n    kcm = FILE:/var/run/kcm.log\n    default = FILE:/var/run/kcm.log\n"
	if err := os.WriteFile(filepath.Join(m.runDir, "kcm.conf"), []byte(conf), 0o644); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	client := "# Written by the pgconnector test harness: the socket of a throwaway KCM daemon.\n" +
		"[libdefaults]\n    kcm_socket = " + m.Socket + "\n"
	if err := os.WriteFile(m.Krb5Conf, []byte(client), 0o644); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	out, err := os.OpenFile(filepath.Join(m.Dir, "kcm.out"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	defer out.Close()

	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	cmd := exec.Command(self, m.runDir, prog, "--config-file=/var/run/kcm.conf")
	cmd.Args[0] = "pgconnector-harness-kcm"
	cmd.Env = append(CleanEnv(), kcmExecEnv+"=1", "KRB5_CONFIG=/var/run/kcm.conf")
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = out, out
	attr := &syscall.SysProcAttr{
		// Go makes the new namespace's mounts private before it execs the launcher, so the
		// bind mount is seen by the daemon alone.
		Unshareflags: syscall.CLONE_NEWNS,
		Setpgid:      true, // the terminal's Ctrl-C is for the test binary; Stop ends the daemon
	}
	if os.Geteuid() != 0 {
		uid, gid := os.Getuid(), os.Getgid()
		attr.Cloneflags = syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("harness: starting kcm in a private mount namespace: %w", err)
	}
	m.pid = cmd.Process.Pid
	m.exited = make(chan struct{})
	go func() { _ = cmd.Wait(); close(m.exited) }()

	// Ready once the socket accepts a connection.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for {
		if c, err := net.DialTimeout("unix", m.Socket, time.Second); err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-m.exited:
			return fmt.Errorf("harness: kcm exited at start:\n%s%s", tailFile(filepath.Join(m.Dir, "kcm.out"), 20), tailFile(m.logFile, 20))
		case <-ctx.Done():
			return fmt.Errorf("harness: waiting for kcm: %w", ctx.Err())
		case <-deadline:
			return fmt.Errorf("harness: kcm did not open %s within 20 s", m.Socket)
		case <-tick.C:
		}
	}
}

// Pid is the daemon's process id: the peer (SO_PEERCRED) of every connection to Socket.
func (m *KCM) Pid() int { return m.pid }

// Stop stops the daemon and removes Dir. It may be called more than once.
func (m *KCM) Stop() error {
	m.stopOnce.Do(func() {
		var errs []error
		if m.pid > 0 {
			if err := stopKCMProcess(m.pid); err != nil {
				errs = append(errs, err)
			}
			select {
			case <-m.exited:
			case <-time.After(10 * time.Second):
				errs = append(errs, errors.New("harness: kcm did not exit"))
			}
		}
		if err := os.RemoveAll(m.Dir); err != nil {
			errs = append(errs, fmt.Errorf("harness: %w", err))
		}
		m.stopErr = errors.Join(errs...)
	})
	return m.stopErr
}

// stopKCMProcess stops process pid if it is a kcm (a launcher that failed to exec kcm has
// exited by itself).
func stopKCMProcess(pid int) error {
	if procComm(pid) != "kcm" {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if waitGone(pid, 10*time.Second) {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if !waitGone(pid, 10*time.Second) {
		return fmt.Errorf("harness: kcm (pid %d) did not stop", pid)
	}
	return nil
}

// Env returns the environment variables an MIT Kerberos client (kinit, klist, kdestroy,
// kswitch, psql) needs to use the realm of kdc with the credential cache ccname (any type,
// for example "KCM:" or "KCM:0:other") through this daemon, to append to its environment:
// kdc.Env's, with KRB5_CONFIG listing kdc's krb5.conf and then Krb5Conf, and KRB5CCNAME =
// ccname as given.
func (m *KCM) Env(kdc *KDC, ccname string) []string {
	env := kdc.Env("")
	for i, kv := range env {
		switch {
		case strings.HasPrefix(kv, "KRB5_CONFIG="):
			env[i] = kv + ":" + m.Krb5Conf
		case strings.HasPrefix(kv, "KRB5CCNAME="):
			env[i] = "KRB5CCNAME=" + ccname
		}
	}
	return env
}

// Kinit gets a ticket-granting ticket for principal (realm of kdc appended when missing) into
// the credential cache ccname through this daemon, as KDC.Kinit does for a file: kinit with a
// client keytab the harness writes, no password. A lifetime of 0 asks for the KDC's
// TicketLifetime.
func (m *KCM) Kinit(kdc *KDC, ccname, principal string, lifetime time.Duration) error {
	return kdc.kinit(m.Env(kdc, ccname), principal, lifetime)
}

// Run runs the MIT client program prog ("klist", "kdestroy", "kswitch", "kvno": a name looked
// up in $PATH and /usr/bin) with args, in the environment of Env(kdc, ccname), and returns its
// standard output. The error includes its standard error.
func (m *KCM) Run(kdc *KDC, ccname, prog string, args ...string) (string, error) {
	path, err := exec.LookPath(prog)
	if err != nil {
		if cand := filepath.Join("/usr/bin", prog); isExecutable(cand) {
			path, err = cand, nil
		}
	}
	if err != nil {
		return "", fmt.Errorf("harness: %s not found; %s", prog, krb5InstallHint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, _, err := runKrb5(ctx, append(CleanEnv(), m.Env(kdc, ccname)...), "", path, args...)
	return out, err
}
