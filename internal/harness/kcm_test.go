package harness

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A KCM daemon holds the caches MIT's kinit makes through its private socket, and leaves the
// system's /var/run alone; Stop ends it and removes its directory.
func TestKCMKinitKlist(t *testing.T) {
	sysSocket := "/var/run/" + kcmSocketName
	_, sysBefore := os.Lstat(sysSocket)
	k := StartKDCT(t, KDCOptions{})
	if _, err := k.AddPrincipal("alice"); err != nil {
		t.Fatal(err)
	}
	m := StartKCMT(t)
	if fi, err := os.Stat(m.Socket); err != nil || fi.Mode()&fs.ModeSocket == 0 {
		t.Fatalf("socket %s: %v %v", m.Socket, fi, err)
	}
	if _, err := os.Lstat(sysSocket); (err == nil) != (sysBefore == nil) {
		t.Errorf("%s appeared or vanished with the daemon (before: %v, now: %v)", sysSocket, sysBefore, err)
	}

	if _, err := m.Run(k, "KCM:", "klist"); err == nil {
		t.Error("klist of an empty KCM succeeded")
	}
	if err := m.Kinit(k, "KCM:", "alice", 0); err != nil {
		t.Fatal(err)
	}
	out, err := m.Run(k, "KCM:", "klist")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Ticket cache: KCM:") || !strings.Contains(out, "Default principal: alice@"+k.Realm) ||
		!strings.Contains(out, "krbtgt/"+k.Realm+"@"+k.Realm) {
		t.Errorf("klist after kinit:\n%s", out)
	}
	if _, err := m.Run(k, "KCM:", "kdestroy"); err != nil {
		t.Fatal(err)
	}
	if out, err := m.Run(k, "KCM:", "klist"); err == nil {
		t.Errorf("klist after kdestroy succeeded:\n%s", out)
	}

	pid := readPidFile(m.pidFile)
	if pid != m.pid || procComm(pid) != "kcm" {
		t.Fatalf("pid file %s says %d (%s), started %d", m.pidFile, pid, procComm(pid), m.pid)
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	if !waitGone(pid, 5*time.Second) {
		t.Errorf("kcm (pid %d) still runs after Stop", pid)
	}
	if _, err := os.Stat(m.Dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s is still there after Stop (%v)", m.Dir, err)
	}
}

// kcmChildEnv makes TestKCMChild start a daemon and wait to be killed.
const kcmChildEnv = "PGCONNECTOR_HARNESS_TEST_KCM_CHILD"

// A test binary killed with SIGKILL leaves no KCM daemon and no directory: the guardian stops
// the daemon by its pid file.
func TestKCMGoneWhenProcessDies(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestKCMChild$")
	cmd.Env = append(os.Environ(), kcmChildEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var dir string
	var pid int
	var log strings.Builder
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if _, err := fmt.Sscanf(sc.Text(), "kcm child: dir=%s pid=%d", &dir, &pid); err == nil {
			break
		}
	}
	if pid == 0 || procComm(pid) != "kcm" {
		t.Fatalf("the child did not start kcm (pid %d):\n%s", pid, log.String())
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !waitGone(pid, 30*time.Second) {
		t.Errorf("kcm (pid %d) still runs after its test binary was killed", pid)
	}
	if left := Leftovers(cmd.Process.Pid, 30*time.Second); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s is still there (%v)", dir, err)
	}
}

// TestKCMChild is the child of TestKCMGoneWhenProcessDies; without kcmChildEnv it does nothing.
func TestKCMChild(t *testing.T) {
	if os.Getenv(kcmChildEnv) == "" {
		return
	}
	m := StartKCMT(t)
	fmt.Println("kcm child: dir=" + m.Dir + " pid=" + strconv.Itoa(m.pid))
	time.Sleep(time.Minute) // until SIGKILL
	t.Fatal("still running after a minute")
}
