package harness

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Everything the harness makes lives in one directory per process (the base directory, see
// makeBase): the initdb template, every cluster, every KDC, KCM daemon and pgbouncer, every Jaeger's
// files, the directories of TempDir. Three things remove it, whichever comes first:
//
//   - Cleanup, called by a program or a TestMain at its end;
//   - the guardian, a process started with the base directory that waits for the harness's
//     process to end, however it ends (a return from main without Cleanup, a failed or panicking
//     test, -timeout, SIGINT, SIGKILL), and then stops what still runs from the directory and
//     removes it;
//   - the sweep of the next process that uses the harness, should the guardian itself have been
//     killed.
//
// The guardian is this same executable (/proc/self/exe), started with guardianEnv set: the
// harness package's init runs it instead of the program. It reads a pipe whose only writer is
// the harness process; end of file means that process has ended (or called Cleanup). It runs in
// a process group of its own, so that the terminal's Ctrl-C, which ends the program, does not
// end it too, and writes nothing: its standard streams are /dev/null.

// guardianEnv names the environment variable that makes this executable a guardian: its value
// is "PID:BASE", the harness process and its base directory.
const guardianEnv = "PGCONNECTOR_HARNESS_GUARDIAN"

func init() {
	if v, ok := os.LookupEnv(guardianEnv); ok {
		os.Exit(guard(v))
	}
}

// startGuardian starts the guardian of base and returns the write end of its pipe: closing it,
// or the end of this process, makes the guardian clean base up.
func startGuardian(base string) (*os.File, error) {
	r, w, err := os.Pipe() // close-on-exec: no other child inherits w
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"pgconnector-harness-guardian"}
	cmd.Env = append(os.Environ(), guardianEnv+"="+strconv.Itoa(os.Getpid())+":"+base)
	cmd.Dir = "/"
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("starting the guardian: %w", err)
	}
	go func() { _ = cmd.Wait() }() // after Cleanup it exits while this process goes on
	return w, nil
}

// guard is the guardian's main: it waits for the end of its standard input, then reaps the
// base directory. arg is guardianEnv's value; a directory that is not a harness base directory
// owned by the process it names is left alone.
func guard(arg string) int {
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
	pid, base, _ := strings.Cut(arg, ":")
	if !strings.HasPrefix(filepath.Base(base), basePrefix) || strconv.Itoa(ownerPID(base)) != pid {
		return 2
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	if _, err := os.Lstat(base); err != nil {
		return 0 // Cleanup removed it
	}
	if err := reap(base); err != nil {
		return 1
	}
	return 0
}

// ownerPID returns the pid in a base directory's owner file, or 0.
func ownerPID(base string) int {
	b, err := os.ReadFile(filepath.Join(base, ownerFile))
	if err != nil {
		return 0
	}
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, "pid="); ok {
			pid, _ := strconv.Atoi(v)
			return pid
		}
	}
	return 0
}

// reap stops every process started from base that still runs, then removes base. Processes are
// found through their pid files and checked before they are signalled (a pid file can outlive
// its process, and the pid be reused): postmasters get SIGQUIT (pg_ctl stop -m immediate: the
// postmaster ends its backends, then itself), krb5kdc, kcm, pgbouncer and Jaeger SIGTERM; whatever still runs
// after 15 seconds gets SIGKILL. Keyrings registered by UserKeyringCache and
// PersistentKeyringCache are destroyed.
func reap(base string) error {
	var pids []int
	stop := func(pid int, sig syscall.Signal, ours func(pid int) bool) {
		if pid > 0 && ours(pid) && syscall.Kill(pid, sig) == nil {
			pids = append(pids, pid)
		}
	}
	postmasters, _ := filepath.Glob(filepath.Join(base, "cluster-*", "data", "postmaster.pid"))
	templates, _ := filepath.Glob(filepath.Join(base, "template*", "postmaster.pid"))
	postmasters = append(postmasters, templates...)
	for _, f := range postmasters {
		stop(postmasterPID(f), syscall.SIGQUIT, func(pid int) bool { return procComm(pid) == "postgres" })
	}
	kdcs, _ := filepath.Glob(filepath.Join(base, "kdc-*", "krb5kdc.pid"))
	for _, f := range kdcs {
		stop(readPidFile(f), syscall.SIGTERM, func(pid int) bool { return procComm(pid) == "krb5kdc" })
	}
	kcms, _ := filepath.Glob(filepath.Join(base, "kcm-*", "run", "kcm.pid"))
	for _, f := range kcms {
		stop(readPidFile(f), syscall.SIGTERM, func(pid int) bool { return procComm(pid) == "kcm" })
	}
	bouncers, _ := filepath.Glob(filepath.Join(base, "pgbouncer-*", "pgbouncer.pid"))
	for _, f := range bouncers {
		stop(readPidFile(f), syscall.SIGTERM, func(pid int) bool { return procComm(pid) == "pgbouncer" })
	}
	jaegers, _ := filepath.Glob(filepath.Join(base, "jaeger-*", "jaeger.pid"))
	for _, f := range jaegers {
		dir := filepath.Dir(f)
		stop(readPidFile(f), syscall.SIGTERM, func(pid int) bool { return procCwd(pid) == dir })
	}
	var errs []error
	for _, pid := range pids {
		if waitGone(pid, 15*time.Second) {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		if !waitGone(pid, 10*time.Second) {
			errs = append(errs, fmt.Errorf("harness: process %d (%s) did not stop", pid, procComm(pid)))
		}
	}
	if err := destroyKeyrings(base); err != nil {
		errs = append(errs, fmt.Errorf("harness: %w", err))
	}
	if err := os.RemoveAll(base); err != nil {
		errs = append(errs, fmt.Errorf("harness: %w", err))
	}
	return errors.Join(errs...)
}

// procCwd returns the working directory of a process, or "".
func procCwd(pid int) string {
	dir, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	if err != nil {
		return ""
	}
	return dir
}

// Leftovers lists what the harness of process pid left behind: base directories in /dev/shm and
// os.TempDir() whose owner file names pid. It waits up to wait for the list to become empty, as
// a guardian may still be at work just after its process ended. A process that used the harness
// and has ended must leave nothing.
func Leftovers(pid int, wait time.Duration) []string {
	deadline := time.Now().Add(wait)
	for {
		var left []string
		for _, root := range append(tempRoots(), shmDir) {
			dirs, _ := filepath.Glob(filepath.Join(root, basePrefix+"*"))
			for _, d := range dirs {
				if ownerPID(d) == pid && !slices.Contains(left, d) {
					left = append(left, d)
				}
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}
