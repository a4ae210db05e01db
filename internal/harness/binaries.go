package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// minMajorVersion is the oldest PostgreSQL major version the harness accepts.
const minMajorVersion = 15

// installHint tells the reader how to get the server binaries.
const installHint = "run scripts/install-deps.sh (as root, or with sudo) to install the PostgreSQL server, " +
	"or set PG_BINDIR to a directory containing initdb, pg_ctl and postgres of version 15 or newer"

// binaries holds the absolute paths of the server programs the harness runs.
type binaries struct {
	dir     string // directory that held initdb
	initdb  string
	pgCtl   string
	postgre string // the postgres server executable
	major   int    // major version reported by postgres --version
	version string // full version string, for messages
}

// findBinaries locates initdb, pg_ctl and postgres (version 15 or newer).
//
// Order: $PG_BINDIR if set (and then only it); the directory printed by
// `pg_config --bindir` if it has initdb; the highest-numbered
// /usr/lib/postgresql/*/bin that has initdb; finally $PATH.
func findBinaries(ctx context.Context) (*binaries, error) {
	if dir := os.Getenv("PG_BINDIR"); dir != "" {
		b, err := binariesIn(ctx, dir)
		if err != nil {
			return nil, fmt.Errorf("harness: PG_BINDIR=%s: %w; %s", dir, err, installHint)
		}
		return b, nil
	}

	var tried []string
	var errs []error
	try := func(dir string) *binaries {
		tried = append(tried, dir)
		b, err := binariesIn(ctx, dir)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", dir, err))
			return nil
		}
		return b
	}

	if pgConfig, err := exec.LookPath("pg_config"); err == nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := exec.CommandContext(cctx, pgConfig, "--bindir").Output()
		cancel()
		if dir := strings.TrimSpace(string(out)); err == nil && dir != "" && isExecutable(filepath.Join(dir, "initdb")) {
			if b := try(dir); b != nil {
				return b, nil
			}
		}
	}

	for _, dir := range debianBinDirs() {
		if b := try(dir); b != nil {
			return b, nil
		}
	}

	// Last resort: each program from $PATH (symlinks resolved, so that
	// a /usr/local/bin/pg_ctl pointing into a versioned directory works).
	if initdb, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(initdb); err == nil {
			initdb = real
		}
		if b := try(filepath.Dir(initdb)); b != nil {
			return b, nil
		}
	}
	b, err := binariesFromPath(ctx)
	if err == nil {
		return b, nil
	}
	errs = append(errs, fmt.Errorf("$PATH: %w", err))

	if len(tried) == 0 {
		tried = append(tried, "(no candidate directory)")
	}
	return nil, fmt.Errorf("harness: no usable PostgreSQL %d+ server binaries (initdb, pg_ctl, postgres) found; looked in %s: %w; %s",
		minMajorVersion, strings.Join(tried, ", "), errors.Join(errs...), installHint)
}

// debianBinDirs returns /usr/lib/postgresql/<major>/bin directories that have
// initdb, highest version first.
func debianBinDirs() []string {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	type cand struct {
		dir string
		ver float64
	}
	var cands []cand
	for _, m := range matches {
		v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(m)), 64)
		if err != nil || !isExecutable(filepath.Join(m, "initdb")) {
			continue
		}
		cands = append(cands, cand{m, v})
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].ver > cands[j].ver })
	dirs := make([]string, len(cands))
	for i, c := range cands {
		dirs[i] = c.dir
	}
	return dirs
}

// binariesIn checks that dir holds all three programs and that their version
// is recent enough.
func binariesIn(ctx context.Context, dir string) (*binaries, error) {
	b := &binaries{
		dir:     dir,
		initdb:  filepath.Join(dir, "initdb"),
		pgCtl:   filepath.Join(dir, "pg_ctl"),
		postgre: filepath.Join(dir, "postgres"),
	}
	var missing []string
	for _, p := range []string{b.initdb, b.pgCtl, b.postgre} {
		if !isExecutable(p) {
			missing = append(missing, filepath.Base(p))
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	if err := b.checkVersion(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// binariesFromPath looks each program up in $PATH separately.
func binariesFromPath(ctx context.Context) (*binaries, error) {
	b := &binaries{}
	var missing []string
	for _, x := range []struct {
		name string
		dst  *string
	}{{"initdb", &b.initdb}, {"pg_ctl", &b.pgCtl}, {"postgres", &b.postgre}} {
		p, err := exec.LookPath(x.name)
		if err != nil {
			missing = append(missing, x.name)
			continue
		}
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		*x.dst = p
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	b.dir = filepath.Dir(b.initdb)
	if err := b.checkVersion(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

var versionRE = regexp.MustCompile(`\(PostgreSQL\) (\d+)(?:\.\d+)?`)

// checkVersion runs `postgres --version` and requires minMajorVersion or newer.
func (b *binaries) checkVersion(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(cctx, b.postgre, "--version")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s --version: %w: %s", b.postgre, err, strings.TrimSpace(out.String()))
	}
	m := versionRE.FindStringSubmatch(out.String())
	if m == nil {
		return fmt.Errorf("cannot parse version from %q", strings.TrimSpace(out.String()))
	}
	major, _ := strconv.Atoi(m[1])
	if major < minMajorVersion {
		return fmt.Errorf("PostgreSQL %d found, %d or newer required", major, minMajorVersion)
	}
	b.major = major
	b.version = strings.TrimSpace(out.String())
	return nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// ServerVersion returns the major version (for example 15) of the server programs Start runs,
// so that a test can choose Options.Settings that the server knows before starting it
// (PostgreSQL refuses to start with an unknown setting). It finds the programs and makes the
// template cluster as the first Start does, and returns the same errors.
func ServerVersion(ctx context.Context) (int, error) {
	e, err := setup(ctx)
	if err != nil {
		return 0, interrupted(ctx, "finding the PostgreSQL server", err)
	}
	return e.bin.major, nil
}
