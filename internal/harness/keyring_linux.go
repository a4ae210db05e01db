package harness

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
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

// Keyrings shared by every process of a uid (the user keyring, persistent keyrings) outlive a
// test. The caches a test makes there are registered in the per-process directory, in
// keyringsDir: t.Cleanup destroys them, and reap (Cleanup, or the guardian after a test binary
// that was killed) destroys whatever is still registered.
const keyringsDir = "keyrings"

// UserKeyringCache returns the name of a new credential cache collection in the user keyring,
// KEYRING:user:pgctest<random>, destroyed at the end of the test (its collection keyring
// cleared and unlinked), or by the guardian if the test binary is killed.
func UserKeyringCache(t testing.TB) string {
	t.Helper()
	coll := "pgctest" + randomHexT(t)
	registerKeyring(t, "user-"+coll, func() error { return destroyUserCollection(coll) })
	return "KEYRING:user:" + coll
}

// PersistentKeyringCache returns KEYRING:persistent:<uid> for a uid that no account uses, so
// that no one's persistent keyring is touched; its persistent keyring is invalidated at the
// end of the test, or by the guardian if the test binary is killed. It needs root (another
// uid's persistent keyring): the test fails otherwise.
func PersistentKeyringCache(t testing.TB) (name string, uid int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("harness: PersistentKeyringCache needs root, for the persistent keyring of an unused uid")
	}
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	uid = int(binary.BigEndian.Uint32(b)>>2) + 1<<30 // above every uid an account has
	registerKeyring(t, "persistent-"+strconv.Itoa(uid), func() error { return destroyPersistent(uid) })
	return "KEYRING:persistent:" + strconv.Itoa(uid), uid
}

func randomHexT(t testing.TB) string {
	s, err := randomHex(6)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// registerKeyring records a keyring to destroy in the per-process directory and destroys it at
// the end of the test.
func registerKeyring(t testing.TB, entry string, destroy func() error) {
	t.Helper()
	base, err := processDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, keyringsDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, entry)
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := destroy(); err != nil {
			t.Errorf("harness: %v", err)
		}
		_ = os.Remove(f)
	})
}

// lockThread locks the goroutine to its thread for a sequence of keyctl(2) calls. A process
// keyring belongs to the thread's credentials (keyrings(7): each thread of a process may have
// its own), and possession, which gives the rights on a persistent keyring or on a collection
// linked there, holds only on the thread whose keyring got the link: without the lock, the
// keyctl call after KEYCTL_GET_PERSISTENT may run on another thread and get EACCES.
func lockThread() { runtime.LockOSThread() }

// destroyKeyrings destroys the keyrings registered in base: what reap does for them.
func destroyKeyrings(base string) error {
	entries, _ := os.ReadDir(filepath.Join(base, keyringsDir))
	var errs []error
	for _, e := range entries {
		if coll, ok := strings.CutPrefix(e.Name(), "user-"); ok {
			errs = append(errs, destroyUserCollection(coll))
		} else if v, ok := strings.CutPrefix(e.Name(), "persistent-"); ok {
			if uid, err := strconv.Atoi(v); err == nil {
				errs = append(errs, destroyPersistent(uid))
			}
		}
	}
	return errors.Join(errs...)
}

// destroyUserCollection clears the collection keyring _krb_<coll> of the user keyring (its
// caches go with their last link) and unlinks it from the user keyring and, where MIT's kinit
// linked it for possession, the process keyring. A collection that is not there is no error.
func destroyUserCollection(coll string) error {
	lockThread()
	defer runtime.UnlockOSThread()
	id, err := unix.KeyctlSearch(unix.KEY_SPEC_USER_KEYRING, "keyring", "_krb_"+coll, 0)
	if err != nil {
		return nil
	}
	_, _ = unix.KeyctlInt(unix.KEYCTL_CLEAR, id, 0, 0, 0)
	if _, err := unix.KeyctlInt(unix.KEYCTL_UNLINK, id, unix.KEY_SPEC_USER_KEYRING, 0, 0); err != nil {
		return fmt.Errorf("unlinking the keyring _krb_%s from the user keyring: %w", coll, err)
	}
	_, _ = unix.KeyctlInt(unix.KEYCTL_UNLINK, id, unix.KEY_SPEC_PROCESS_KEYRING, 0, 0)
	return nil
}

// destroyPersistent invalidates the persistent keyring of uid, with every cache in it.
func destroyPersistent(uid int) error {
	lockThread()
	defer runtime.UnlockOSThread()
	id, err := unix.KeyctlInt(unix.KEYCTL_GET_PERSISTENT, uid, unix.KEY_SPEC_PROCESS_KEYRING, 0, 0)
	if err != nil {
		return nil // none, or no persistent keyrings on this kernel
	}
	if _, err := unix.KeyctlInt(unix.KEYCTL_INVALIDATE, id, 0, 0, 0); err != nil {
		return fmt.Errorf("invalidating the persistent keyring of uid %d: %w", uid, err)
	}
	return nil
}
