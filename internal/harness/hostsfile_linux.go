package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hostsScript is the shell the child of RunInChildProcessWithHosts starts in, in its new mount
// namespace: mounts made private first (nothing it mounts reaches the machine's namespace,
// whatever the propagation of /), then the hosts file bound on /etc/hosts, then the test
// binary.
const hostsScript = `set -e
mount --make-rprivate /
mount --bind "$0" /etc/hosts
exec "$@"`

// RunInChildProcessWithHosts is RunInChildProcess with hosts (the text of a hosts file, for
// example "127.0.0.1 pg-loadbalancetest\n127.0.0.2 pg-loadbalancetest\n") in place of the
// machine's /etc/hosts for the child: the child runs in a mount namespace of its own (and, when
// this process is not root, a user namespace in which it is) with hosts bound on /etc/hosts,
// so that every lookup of its names in the child (Go's resolver, the getaddrinfo of a psql the
// child starts) sees hosts, as PostgreSQL's 004_load_balance_dns.pl asks an administrator to
// set up, without touching the machine's file. It needs mount(8) and a kernel that lets this
// process make the namespaces; the child fails, saying why, when one is missing. The child must
// start no harness server of its own (a user namespace maps no other account); it gets what it
// needs from env and from the parent's servers.
func RunInChildProcessWithHosts(t *testing.T, timeout time.Duration, hosts string, env ...string) (out string, passed bool) {
	t.Helper()
	mount, err := exec.LookPath("mount")
	if err != nil {
		t.Fatalf("harness: mount(8) is needed for a hosts file of a test's own: %v", err)
	}
	dir, err := TempDir("hosts-*")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "hosts")
	if err := os.WriteFile(file, []byte(hosts), 0o644); err != nil {
		t.Fatalf("harness: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	run := "-test.run=^" + strings.Join(quoteParts(t.Name()), "$/^") + "$"
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", hostsScript, file, os.Args[0], run, "-test.v", "-test.count=1")
	cmd.Env = append(append(os.Environ(), childProcessEnv+"="+t.Name(), "PATH="+filepath.Dir(mount)+":"+os.Getenv("PATH")), env...)
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Cloneflags: syscall.CLONE_NEWNS}
	if uid, gid := os.Geteuid(), os.Getegid(); uid != 0 {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}
	}
	cmd.SysProcAttr = attr
	cmd.WaitDelay = 5 * time.Second
	b, err := cmd.CombinedOutput()
	out = string(b)
	if err != nil && !strings.Contains(out, "--- ") {
		out += fmt.Sprintf("\n(the child did not run its test: %v)", err)
	}
	if ctx.Err() != nil {
		out += "\n(killed after " + timeout.String() + ")"
	}
	return out, err == nil && strings.Contains(out, "--- PASS: "+t.Name())
}
