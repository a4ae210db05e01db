package harness

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// privateSessionEnv names, in the child process InPrivateSessionKeyring starts, the test it
// runs.
const privateSessionEnv = "PGCONNECTOR_TEST_PRIVATE_SESSION_KEYRING"

// InPrivateSessionKeyring reports whether the test t runs in a session keyring of its own, for
// credential caches named KEYRING:session:... If not, it runs t again in a child process of
// the test binary that has a new anonymous session keyring, fails t if the child's run fails,
// and returns false: the caller returns at once.
//
// The child is started from a thread that joined that keyring (KEYCTL_JOIN_SESSION_KEYRING;
// a child inherits the credentials of the thread that forks it) and that is never given back
// to the scheduler, so the thread ends with its goroutine. The keyring, with every cache the
// test makes in it, goes when the child and its own children end, also when they are killed
// (the child has Pdeathsig). Only t's own name is run in the child, with -test.v.
func InPrivateSessionKeyring(t *testing.T) bool {
	t.Helper()
	if os.Getenv(privateSessionEnv) == t.Name() {
		return true
	}
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked
		// KEYCTL_JOIN_SESSION_KEYRING with a NULL name: a new anonymous keyring.
		if _, _, e := unix.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0); e != 0 {
			done <- result{err: fmt.Errorf("joining a new session keyring: %w", e)}
			return
		}
		run := "-test.run=^" + strings.Join(quoteParts(t.Name()), "$/^") + "$"
		cmd := exec.Command(os.Args[0], run, "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), privateSessionEnv+"="+t.Name())
		cmd.SysProcAttr = &unix.SysProcAttr{Pdeathsig: unix.SIGKILL}
		out, err := cmd.CombinedOutput()
		done <- result{out, err}
	}()
	r := <-done
	t.Logf("in a private session keyring:\n%s", r.out)
	if r.err != nil {
		t.Fatalf("the test in a private session keyring: %v", r.err)
	}
	if !strings.Contains(string(r.out), "--- PASS: "+t.Name()) {
		t.Fatal("the test did not run in the child process")
	}
	return false
}

// quoteParts splits a test name at its subtest slashes and quotes each part for -test.run.
func quoteParts(name string) []string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return parts
}
