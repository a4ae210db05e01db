package harness

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// childEnv makes TestHarnessChild, in a test binary started by TestNothingLeftBehind, start a
// cluster and a KDC and then end the way the variable says.
const childEnv = "PGCONNECTOR_HARNESS_TEST_CHILD"

// However a process that used the harness ends, nothing of the harness is left afterwards: no
// directory in /dev/shm or the temporary directory (the initdb template, clusters, KDC state,
// TempDir), no PostgreSQL shared memory file in /dev/shm, no postmaster, no krb5kdc, no pgbouncer, no keyring
// registered with UserKeyringCache or PersistentKeyringCache.
func TestNothingLeftBehind(t *testing.T) {
	for _, tt := range []struct {
		end    string // how the child ends
		failed bool   // the child's exit status says it failed
	}{
		{end: "pass"},                  // TestMain calls Cleanup
		{end: "fail", failed: true},    // t.Fatal; TestMain calls Cleanup
		{end: "exit"},                  // os.Exit in a test: no Cleanup, the guardian cleans up
		{end: "panic", failed: true},   // a panicking test
		{end: "timeout", failed: true}, // a panic outside the test's goroutine, as -timeout makes
		{end: "sigint", failed: true},  // Ctrl-C
		{end: "sigkill", failed: true}, // kill -9: nothing runs in the process
	} {
		// One after the other: a child's start sweeps what a dead one left, which would hide
		// a failure of the guardian.
		t.Run(tt.end, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHarnessChild$")
			cmd.Env = append(os.Environ(), childEnv+"="+tt.end)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			// The child waits for a line on its standard input before it ends, so that its
			// servers are looked at before its end stops them.
			goOn, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = cmd.Stdout
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			var base, coll string
			var postmaster, kdc, bouncer, uid int
			var log strings.Builder
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				log.WriteString(sc.Text() + "\n")
				if _, err := fmt.Sscanf(sc.Text(), "harness child: base=%s postmaster=%d kdc=%d pgbouncer=%d collection=%s uid=%d", &base, &postmaster, &kdc, &bouncer, &coll, &uid); err == nil {
					break
				}
			}
			if base == "" {
				t.Fatalf("the child did not start its servers:\n%s", log.String())
			}
			if _, err := os.Stat(filepath.Join(base, "template")); err != nil {
				t.Errorf("the child's template: %v", err)
			}
			// The postmaster's shared memory segments are in its data directory.
			if maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", postmaster)); err != nil {
				t.Errorf("the postmaster's mappings: %v", err)
			} else if strings.Contains(string(maps), shmDir+"/PostgreSQL.") {
				t.Errorf("the postmaster maps a segment in %s:\n%s", shmDir, maps)
			} else if !strings.Contains(string(maps), base) {
				t.Errorf("the postmaster maps nothing in %s:\n%s", base, maps)
			}
			if _, err := io.WriteString(goOn, "end\n"); err != nil {
				t.Errorf("telling the child to end: %v", err)
			}
			switch tt.end {
			case "sigint":
				_ = cmd.Process.Signal(os.Interrupt)
			case "sigkill":
				_ = cmd.Process.Kill()
			}
			for sc.Scan() {
				log.WriteString(sc.Text() + "\n")
			}
			err = cmd.Wait()
			if failed := err != nil; failed != tt.failed {
				t.Errorf("child exit: %v, want failed=%v; its output:\n%s", err, tt.failed, log.String())
			}

			if left := Leftovers(cmd.Process.Pid, 30*time.Second); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
			if _, err := os.Stat(base); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s is still there (%v)", base, err)
			}
			for name, pid := range map[string]int{"postmaster": postmaster, "krb5kdc": kdc, "pgbouncer": bouncer} {
				if !waitGone(pid, 10*time.Second) {
					t.Errorf("%s (pid %d) still runs", name, pid)
				}
			}
			// The keyrings shared by the uid's processes: gone once the kernel has collected
			// what was unlinked or invalidated.
			if !keyGone("_krb_"+coll, 10*time.Second) {
				t.Errorf("keyring _krb_%s is still there", coll)
			}
			if !persistentEmpty(t, uid) {
				t.Errorf("the persistent keyring of uid %d still holds the child's key", uid)
			}
		})
	}
}

// TestHarnessChild is the child of TestNothingLeftBehind; without childEnv it does nothing.
func TestHarnessChild(t *testing.T) {
	end := os.Getenv(childEnv)
	if end == "" {
		return
	}
	pg := StartT(t, Options{})
	k := StartKDCT(t, KDCOptions{})
	b := StartPgbouncerT(t, pg, PgbouncerOptions{})
	if _, err := TempDir("child-"); err != nil {
		t.Fatal(err)
	}
	// A credential cache collection in the user keyring and a persistent keyring, as kinit
	// would make them.
	coll := strings.TrimPrefix(UserKeyringCache(t), "KEYRING:user:")
	if _, err := unix.AddKey("keyring", "_krb_"+coll, nil, unix.KEY_SPEC_USER_KEYRING); err != nil {
		t.Fatal(err)
	}
	_, uid := PersistentKeyringCache(t)
	lockThread() // for the rest of the test: the key is added through the possessed link
	pid, err := unix.KeyctlInt(unix.KEYCTL_GET_PERSISTENT, uid, unix.KEY_SPEC_PROCESS_KEYRING, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.AddKey("user", "pgconnector-harness-test", []byte("x"), pid); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("harness child: base=%s postmaster=%d kdc=%d pgbouncer=%d collection=%s uid=%d\n",
		pg.env.base, postmasterPID(filepath.Join(pg.DataDir, "postmaster.pid")), readPidFile(k.pidFile), readPidFile(b.pidFile), coll, uid)
	// Until TestNothingLeftBehind has looked at the servers (a stop begun at once would race
	// with its reading of the postmaster's mappings).
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	switch end {
	case "pass":
	case "fail":
		t.Fatal("failing on purpose")
	case "exit":
		os.Exit(0)
	case "panic":
		panic("panicking on purpose")
	case "timeout":
		go panic("test timed out (on purpose)")
		time.Sleep(time.Minute)
	case "sigint", "sigkill":
		time.Sleep(time.Minute) // until the signal
		t.Fatal("still running after a minute")
	default:
		t.Fatalf("unknown %s=%s", childEnv, end)
	}
}

// The guardian leaves alone a directory that is not a harness directory of the process named.
func TestGuardianChecksItsDirectory(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, basePrefix+"x")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeOwner(other); err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{
		fmt.Sprintf("%d:%s", os.Getpid(), dir),     // not a base directory
		fmt.Sprintf("%d:%s", os.Getpid()+1, other), // owned by another process
		other, // no pid
	} {
		cmd := exec.Command("/proc/self/exe")
		cmd.Env = append(os.Environ(), guardianEnv+"="+arg)
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("guardian %q: %v, want exit status 2", arg, err)
		}
	}
	if _, err := os.Stat(filepath.Join(other, ownerFile)); err != nil {
		t.Errorf("the guardian touched %s: %v", other, err)
	}
}

// persistentEmpty reports whether the persistent keyring of uid is empty: invalidated, since a
// new one is made on demand. It invalidates the keyring it looked at.
func persistentEmpty(t *testing.T, uid int) bool {
	lockThread()
	defer runtime.UnlockOSThread()
	id, err := unix.KeyctlInt(unix.KEYCTL_GET_PERSISTENT, uid, unix.KEY_SPEC_PROCESS_KEYRING, 0, 0)
	if err != nil {
		t.Fatalf("the persistent keyring of uid %d: %v", uid, err)
	}
	defer unix.KeyctlInt(unix.KEYCTL_INVALIDATE, id, 0, 0, 0)
	n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, id, nil, 0)
	if err != nil {
		t.Fatalf("reading the persistent keyring of uid %d: %v", uid, err)
	}
	return n == 0
}

// keyGone waits up to wait for no key described desc to be listed in /proc/keys.
func keyGone(desc string, wait time.Duration) bool {
	for deadline := time.Now().Add(wait); ; time.Sleep(100 * time.Millisecond) {
		b, err := os.ReadFile("/proc/keys")
		if err != nil || !strings.Contains(string(b), " "+desc+":") {
			return err == nil
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
