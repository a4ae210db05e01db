package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// JaegerBinary returns the path of a Jaeger v2 executable, building it first if needed.
//
// With $PGCONNECTOR_JAEGER set, that file is used as it is. Otherwise the binary is cached at
// JaegerCacheDir()/jaeger and built there once per machine with the Go toolchain on $PATH, in a
// scratch module of its own (JaegerCacheDir()/src, outside any repository), with the commands
//
//	go mod init scratch
//	go get -tool github.com/jaegertracing/jaeger/cmd/jaeger@v1.76.0   # Jaeger v2.13.0
//	go build -o ../jaeger.tmp-PID github.com/jaegertracing/jaeger/cmd/jaeger
//
// and a rename to jaeger. (go install ...@version does not work: Jaeger's go.mod has replace
// directives.) A cold build downloads a few hundred modules and compiles for about 16 minutes on
// two cores; the binary is about 116 MB. The build runs under an exclusive flock(2) on
// JaegerCacheDir()/build.lock, so concurrent test processes build once and the others wait;
// the same lock can be taken by hand with flock(1). Its output goes to
// JaegerCacheDir()/build.log. logf, when not nil, gets a line of progress every minute.
func JaegerBinary(ctx context.Context, logf func(format string, args ...any)) (string, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return jaegerBinary(ctx, logf)
}

// JaegerCacheDir returns the directory of the cached Jaeger build:
// os.UserCacheDir()/pgconnector/jaeger-v2.13.0, or the same under os.TempDir() when there is no
// user cache directory.
func JaegerCacheDir() string {
	base, err := os.UserCacheDir()
	if err != nil || base == "" {
		base = os.TempDir()
	}
	return filepath.Join(base, "pgconnector", "jaeger-"+JaegerVersion)
}

func jaegerBinary(ctx context.Context, logf func(format string, args ...any)) (string, error) {
	if p := os.Getenv(JaegerBinaryEnv); p != "" {
		if !isExecutable(p) {
			return "", fmt.Errorf("harness: $%s=%s is not an executable file", JaegerBinaryEnv, p)
		}
		return p, nil
	}
	dir := JaegerCacheDir()
	bin := filepath.Join(dir, "jaeger")
	if isExecutable(bin) {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("harness: Jaeger cache: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, "build.lock"), logf)
	if err != nil {
		return "", err
	}
	defer unlock()
	if isExecutable(bin) {
		return bin, nil // built by the process that held the lock
	}
	if err := buildJaeger(ctx, dir, logf); err != nil {
		return "", err
	}
	return bin, nil
}

// lockFile takes an exclusive flock on path, waiting for it as long as ctx allows, and returns
// the function that releases it.
func lockFile(ctx context.Context, path string, logf func(format string, args ...any)) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	start := time.Now()
	nextLog := start
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("harness: locking %s: %w", path, err)
		}
		if now := time.Now(); !now.Before(nextLog) {
			logf("harness: waiting for another process's build of Jaeger %s (lock %s, %v so far)",
				JaegerVersion, path, now.Sub(start).Round(time.Second))
			nextLog = now.Add(time.Minute)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("harness: waiting %v for another process's build of Jaeger: %w (a cold build takes about 16 minutes on two cores: give go test a -timeout that leaves room for it)",
				time.Since(start).Round(time.Second), ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// buildJaeger builds the binary into dir (see JaegerBinary). The caller holds the lock.
func buildJaeger(ctx context.Context, dir string, logf func(format string, args ...any)) error {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("harness: building Jaeger needs the go command on $PATH: %w", err)
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	logPath := filepath.Join(dir, "build.log")
	log, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	defer log.Close()

	// Left by builds that were killed; we hold the lock, so none is running.
	if stale, _ := filepath.Glob(filepath.Join(dir, "jaeger.tmp-*")); len(stale) > 0 {
		for _, f := range stale {
			_ = os.Remove(f)
		}
	}
	tmp := filepath.Join(dir, fmt.Sprintf("jaeger.tmp-%d", os.Getpid()))
	defer os.Remove(tmp)
	steps := [][]string{
		{"get", "-tool", jaegerPackage + "@" + jaegerModuleVersion},
		{"build", "-o", tmp, jaegerPackage},
	}
	if _, err := os.Stat(filepath.Join(src, "go.mod")); err != nil {
		steps = append([][]string{{"mod", "init", "scratch"}}, steps...)
	}
	start := time.Now()
	logf("harness: building Jaeger %s (Go module %s@%s) in %s: about 16 minutes on two cores when nothing is cached; output in %s",
		JaegerVersion, jaegerPackage, jaegerModuleVersion, src, logPath)
	for _, args := range steps {
		if err := runGoStep(ctx, goCmd, src, args, log, logf, start); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("harness: building Jaeger: go %s: stopped after %v: %w (a cold build takes about 16 minutes on two cores: "+
					"give go test a -timeout that leaves room for it; what was compiled is kept in the Go build cache for the next try)",
					strings.Join(args, " "), time.Since(start).Round(time.Second), ctx.Err())
			}
			return fmt.Errorf("harness: building Jaeger: go %s: %w\n%s", strings.Join(args, " "), err, tailFile(logPath, 30))
		}
	}
	if err := os.Rename(tmp, filepath.Join(dir, "jaeger")); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	logf("harness: built Jaeger %s in %v: %s", JaegerVersion, time.Since(start).Round(time.Second), filepath.Join(dir, "jaeger"))
	return nil
}

func runGoStep(ctx context.Context, goCmd, dir string, args []string, log *os.File, logf func(format string, args ...any), start time.Time) error {
	fmt.Fprintf(log, "$ go %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = dir
	// The scratch module alone: no workspace, no flags meant for another module.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			logf("harness: building Jaeger: go %s running, %v since the build started", args[0], time.Since(start).Round(time.Second))
		}
	}
}
