package harness

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// childProcessEnv names, in the child process InChildProcess starts, the test it runs.
const childProcessEnv = "PGCONNECTOR_TEST_CHILD"

// IsChildProcess reports whether this is the child process that RunInChildProcess started for
// the test t.
func IsChildProcess(t *testing.T) bool { return os.Getenv(childProcessEnv) == t.Name() }

// RunInChildProcess runs the test t again in a child process of the test binary, with env
// added to its environment (after the parent's: TestMain runs again in the child, so the child
// reads what it needs from variables of its own), and waits for it timeout at most. There
// IsChildProcess(t) is true, and t does the part that may crash or hang. It returns the
// child's combined output and whether its t passed: a child that dies (a fatal error of the
// runtime, such as an out-of-memory that recover cannot catch) or hangs (killed at timeout)
// did not pass, and its output says why. The child has Pdeathsig; only t's own name is run in
// it, with -test.v. t must be a top-level test (IsChildProcess of its parent is false).
func RunInChildProcess(t *testing.T, timeout time.Duration, env ...string) (out string, passed bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	run := "-test.run=^" + strings.Join(quoteParts(t.Name()), "$/^") + "$"
	cmd := exec.CommandContext(ctx, os.Args[0], run, "-test.v", "-test.count=1")
	cmd.Env = append(append(os.Environ(), childProcessEnv+"="+t.Name()), env...)
	cmd.SysProcAttr = &unix.SysProcAttr{Pdeathsig: unix.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	b, err := cmd.CombinedOutput()
	out = string(b)
	if ctx.Err() != nil {
		out += "\n(killed after " + timeout.String() + ")"
	}
	return out, err == nil && strings.Contains(out, "--- PASS: "+t.Name())
}
