package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
)

// basePrefix names the per-process directory (under /dev/shm or
// os.TempDir(), see makeBase) that holds everything the process's harness
// makes: the template cluster, every cluster, KDC and Jaeger (guardian.go).
const basePrefix = "pgconnector-harness-"

// env is the per-process state of the PostgreSQL part: the programs, the
// account that runs them, the base directory and the initdb template.
type env struct {
	bin      *binaries
	acct     *serverAccount
	base     string // 0755 directory, owned by the current process's user
	template string // data directory made by initdb, never started again after setup
}

var (
	procMu    sync.Mutex
	procBase  string       // the base directory; "" until the first start, and after Cleanup
	procGuard *os.File     // write end of the guardian's pipe
	procEnvs  map[int]*env // by Options.Major; 0 is the default server programs
)

// processDir returns the base directory, creating it (and its guardian) on first use.
func processDir() (string, error) {
	procMu.Lock()
	defer procMu.Unlock()
	return processDirLocked()
}

func processDirLocked() (string, error) {
	if procBase != "" {
		return procBase, nil
	}
	sweepStale()
	base, err := makeBase()
	if err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	// MkdirTemp makes 0700 directories; the server account must be able to
	// traverse this one to reach its clusters.
	if err := os.Chmod(base, 0o755); err != nil {
		_ = os.RemoveAll(base)
		return "", fmt.Errorf("harness: %w", err)
	}
	if err := writeOwner(base); err != nil {
		_ = os.RemoveAll(base)
		return "", fmt.Errorf("harness: %w", err)
	}
	guard, err := startGuardian(base)
	if err != nil {
		_ = os.RemoveAll(base)
		return "", fmt.Errorf("harness: %w", err)
	}
	procBase, procGuard = base, guard
	return base, nil
}

// setup prepares the PostgreSQL part of the per-process state for the default
// server programs (Options.Major 0); see setupMajor.
func setup(ctx context.Context) (*env, error) {
	return setupMajor(ctx, 0)
}

// setupMajor prepares the PostgreSQL part of the per-process state for the server
// programs of one major version (0: the default ones, see findMajor) once. Unlike
// sync.Once it retries after a failure (a cancelled context in the first caller
// must not poison every later test), but after one success it is never run
// again: initdb runs once per process and per set of programs (two majors that
// find the same programs share one template).
func setupMajor(ctx context.Context, major int) (*env, error) {
	procMu.Lock()
	defer procMu.Unlock()
	if e := procEnvs[major]; e != nil {
		return e, nil
	}
	bin, err := findMajor(ctx, major)
	if err != nil {
		return nil, err
	}
	for _, e := range procEnvs {
		if e.bin.dir == bin.dir {
			procEnvs[major] = e
			return e, nil
		}
	}
	acct, err := lookupServerAccount()
	if err != nil {
		return nil, err
	}
	base, err := processDirLocked()
	if err != nil {
		return nil, err
	}
	if err := acct.canTraverse(filepath.Dir(base)); err != nil {
		return nil, err
	}
	name := "template"
	if major != 0 {
		name = "template-" + strconv.Itoa(major)
	}
	e := &env{bin: bin, acct: acct, base: base, template: filepath.Join(base, name)}
	if err := e.makeTemplate(ctx); err != nil {
		_ = os.RemoveAll(e.template)
		return nil, err
	}
	if procEnvs == nil {
		procEnvs = map[int]*env{}
	}
	procEnvs[major] = e
	return e, nil
}

// command is acct.command with, for a registry build, LD_LIBRARY_PATH set to its lib/
// directory (only in the environment of this child).
func (e *env) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := e.acct.command(ctx, name, args...)
	if e.bin.libDir != "" {
		cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+e.bin.libDir)
	}
	return cmd
}

// run runs a program as the server account, with the environment of command, and returns a
// descriptive error (with its combined output) on failure.
func (e *env) run(ctx context.Context, name string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := e.command(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	text := strings.TrimSpace(out.String())
	if err != nil {
		return text, fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, text)
	}
	return text, nil
}

// TempDir creates a new directory in the harness's per-process directory, for
// files that must go when the harness's servers go: Cleanup, or the guardian
// when the process ends without it, removes it. pattern is as for os.MkdirTemp.
func TempDir(pattern string) (string, error) {
	base, err := processDir()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(base, "tmp-"+pattern)
	if err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	return dir, nil
}

// Run runs the tests of m, then Cleanup, and returns the exit code for os.Exit;
// a Cleanup that fails fails a run that passed. It is the TestMain of a package
// whose tests use the harness:
//
//	func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }
func Run(m *testing.M) int {
	code := m.Run()
	if err := Cleanup(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Cleanup stops every server, KDC and Jaeger of this process that still runs
// and removes the per-process directory (the initdb template, KDC state, all
// that TempDir made). Programs call it at their end and test binaries at the
// end of TestMain; a later Start sets up again. Without it the guardian does
// the same once the process has ended, a moment later.
func Cleanup() error {
	procMu.Lock()
	defer procMu.Unlock()
	if procBase == "" {
		return nil
	}
	err := reap(procBase)
	_ = procGuard.Close() // the guardian finds the directory gone and exits
	procBase, procGuard, procEnvs = "", nil, nil
	return err
}

// makeTemplate runs initdb once, then starts the new cluster briefly (unix
// socket only) to create the application role and database, and shuts it down
// cleanly so that copies start without recovery.
func (e *env) makeTemplate(ctx context.Context) error {
	if err := e.acct.mkdir(e.template, 0o700); err != nil {
		return fmt.Errorf("harness: template directory: %w", err)
	}
	if _, err := e.run(ctx, e.bin.initdb, "-D", e.template, "-U", superUser, "-A", "trust",
		"-E", "UTF8", "--locale=C", "-N"); err != nil {
		return fmt.Errorf("harness: initdb: %w", err)
	}
	// Every cluster's own settings live in harness.conf next to postgresql.conf.
	f, err := os.OpenFile(filepath.Join(e.template, "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	_, err = io.WriteString(f, "\n# Settings of the pgconnector test harness.\ninclude_if_exists 'harness.conf'\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}

	run := e.template + "-run"
	if err := e.acct.mkdir(run, 0o755); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	defer os.RemoveAll(run)
	conf := filepath.Join(e.template, "harness.conf")
	if err := e.acct.writeFile(conf, []byte(strings.Join([]string{
		"listen_addresses = ''",
		"port = 5432",
		"unix_socket_directories = " + confQuote(run),
		"fsync = off",
		"synchronous_commit = off",
		"full_page_writes = off",
		"dynamic_shared_memory_type = mmap", // as for every cluster: see writeConf
		"logging_collector = off",
		"",
	}, "\n")), 0o600); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	logFile := filepath.Join(run, "template.log")
	if _, err := e.run(ctx, e.bin.pgCtl, "start", "-w", "-t", "60", "-s", "-D", e.template, "-l", logFile); err != nil {
		return fmt.Errorf("harness: starting the template cluster: %w\n%s", err, tailFile(logFile, 30))
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = e.run(context.Background(), e.bin.pgCtl, "stop", "-m", "immediate", "-w", "-s", "-D", e.template)
		}
	}()
	cfg, err := adminConfig(run, 5432)
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("harness: connecting to the template cluster: %w", err)
	}
	for _, sql := range []string{
		"CREATE ROLE " + AppUser + " LOGIN",
		"CREATE DATABASE " + AppDatabase + " OWNER " + AppUser,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			_ = conn.Close(context.Background())
			return fmt.Errorf("harness: template cluster: %w", err)
		}
	}
	_ = conn.Close(ctx)
	if _, err := e.run(ctx, e.bin.pgCtl, "stop", "-m", "fast", "-w", "-t", "60", "-s", "-D", e.template); err != nil {
		return fmt.Errorf("harness: stopping the template cluster: %w", err)
	}
	stopped = true
	for _, name := range []string{"harness.conf", "postmaster.opts"} {
		if err := os.Remove(filepath.Join(e.template, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("harness: %w", err)
		}
	}
	return nil
}

// shmDir is a memory file system on most Linux machines.
const shmDir = "/dev/shm"

// minShmFree is the free space /dev/shm needs to be used for clusters
// (container runtimes often make it only 64 MiB).
const minShmFree = 2 << 30

// tempRoots lists the directories that may hold base directories: /dev/shm
// (when it is a large enough tmpfs and $TMPDIR is not set) and os.TempDir().
func tempRoots() []string {
	roots := []string{os.TempDir()}
	if os.Getenv("TMPDIR") == "" && roots[0] != shmDir {
		var st syscall.Statfs_t
		const tmpfsMagic = 0x01021994
		if syscall.Statfs(shmDir, &st) == nil && st.Type == tmpfsMagic && st.Bavail*uint64(st.Bsize) >= minShmFree {
			roots = append([]string{shmDir}, roots...)
		}
	}
	return roots
}

// makeBase creates this process's base directory, preferring a memory file
// system: creating the thousand-odd files of a data directory on a disk file
// system can cost a second per cluster, on tmpfs a few milliseconds. Set
// $TMPDIR to choose the place.
func makeBase() (string, error) {
	var firstErr error
	for _, root := range tempRoots() {
		base, err := os.MkdirTemp(root, basePrefix+"*")
		if err == nil {
			return base, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return "", firstErr
}

// copyTree copies the template data directory to dst, keeping every file's
// and directory's permission bits, owned by the server account. Files are
// copied by a few goroutines at once, which halves the time on tmpfs.
func (e *env) copyTree(dst string) error {
	return e.copyDir(e.template, dst, nil)
}

// copyDir copies the directory src to dst as copyTree does. With skip (a copy of a
// running cluster's data directory) a file or directory for which skip(rel, isDir) is true
// is left out (a directory's contents only: the directory itself is made, empty), and a
// file that vanishes while the copy runs is no error.
func (e *env) copyDir(src, dst string, skip func(rel string, isDir bool) bool) error {
	type job struct {
		src, dst string
		perm     fs.FileMode
	}
	jobs := make(chan job, 64)
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
	}
	for range 4 {
		wg.Go(func() {
			for j := range jobs {
				if err := e.copyFile(j.src, j.dst, j.perm); err != nil && !(skip != nil && errors.Is(err, fs.ErrNotExist)) {
					fail(err)
				}
			}
		})
	}
	walkErr := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if skip != nil && errors.Is(err, fs.ErrNotExist) && path != src {
				return nil // removed by the server while the copy ran
			}
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			if skip != nil && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		perm := info.Mode().Perm()
		switch {
		case d.IsDir():
			// Walked before its contents, so it exists before they are copied.
			if err := e.acct.mkdir(target, perm); err != nil {
				return err
			}
			if skip != nil && rel != "." && skip(rel, true) {
				return fs.SkipDir
			}
			return nil
		case skip != nil && skip(rel, false):
			return nil
		case info.Mode().IsRegular():
			jobs <- job{path, target, perm}
			return nil
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
			return e.acct.chown(target)
		default:
			return nil // sockets and the like are not part of a stopped cluster
		}
	})
	close(jobs)
	wg.Wait()
	if walkErr != nil {
		return walkErr
	}
	return firstErr
}

func (e *env) copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in) // copy_file_range on Linux
	if err == nil {
		err = out.Chmod(perm) // undo the umask
	}
	if err == nil && e.acct.switched {
		err = out.Chown(e.acct.uid, e.acct.gid)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// ownerFile, inside a base directory, names the process that owns it, so that
// a later process can clean up after one that died without stopping its
// clusters (for example a test binary killed by -timeout).
const ownerFile = "owner"

func writeOwner(base string) error {
	host, _ := os.Hostname()
	content := fmt.Sprintf("pid=%d start=%s host=%s\n", os.Getpid(), procStartTime(os.Getpid()), host)
	return os.WriteFile(filepath.Join(base, ownerFile), []byte(content), 0o644)
}

// procStartTime returns the start time of a process in clock ticks since boot
// (field 22 of /proc/PID/stat), or "" if unknown. Together with the pid it
// identifies a process even after pid reuse.
func procStartTime(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state), so field 22 is fields[19].
	if len(fields) < 20 {
		return ""
	}
	return fields[19]
}

// ownerAlive reports whether the process recorded in a base directory's owner
// file may still be running. When in doubt it answers true.
func ownerAlive(base string) bool {
	b, err := os.ReadFile(filepath.Join(base, ownerFile))
	if err != nil {
		return true // being created right now, or not ours
	}
	kv := map[string]string{}
	for _, f := range strings.Fields(string(b)) {
		k, v, _ := strings.Cut(f, "=")
		kv[k] = v
	}
	pid, err := strconv.Atoi(kv["pid"])
	if err != nil || pid <= 0 {
		return true
	}
	if host, _ := os.Hostname(); kv["host"] != host {
		return true // another machine or container sharing the directory
	}
	if procStartTime(os.Getpid()) == "" {
		return true // no /proc: cannot tell
	}
	start := procStartTime(pid)
	if start == "" {
		return false // no such process
	}
	return kv["start"] == "" || start == kv["start"]
}

// sweepStale reaps the base directories whose owning process is gone (and
// whose guardian could not clean up: it was killed too). Errors are ignored:
// this is only housekeeping.
func sweepStale() {
	var dirs []string
	for _, root := range append(tempRoots(), shmDir) {
		m, _ := filepath.Glob(filepath.Join(root, basePrefix+"*"))
		dirs = append(dirs, m...)
	}
	seen := map[string]bool{}
	for _, base := range dirs {
		if seen[base] {
			continue
		}
		seen[base] = true
		if fi, err := os.Lstat(base); err != nil || !fi.IsDir() || ownerAlive(base) {
			continue
		}
		_ = reap(base)
	}
}

// stopAtCleanup stops a daemon the test started (what names it) when the test ends, logging the
// end of its log first if the test failed.
func stopAtCleanup(t testing.TB, what, logFile string, stop func() error) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("harness: end of the %s log (%s):\n%s", what, logFile, tailFile(logFile, 40))
		}
		if err := stop(); err != nil {
			t.Errorf("harness: %v", err)
		}
	})
}
