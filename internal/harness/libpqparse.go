package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// LibpqRefusal is the error of LibpqConninfoParse when libpq 18 refuses the connection string:
// Message is libpq's errmsg as PQconninfoParse returns it, without its final line break (for
// example `invalid URI query parameter: "uzer"`).
type LibpqRefusal struct {
	Message string
}

func (e *LibpqRefusal) Error() string { return "libpq refuses the connection string: " + e.Message }

// libpqParseSource is the oracle program: it parses its one argument with libpq's
// PQconninfoParse (libpq-fe.h; fe-connect.c, parse_connection_string without defaults: no
// environment, no service file) and writes each keyword whose value is not NULL, then its value,
// each followed by a NUL byte; or, when libpq refuses the string, libpq's errmsg on standard error
// with the exit status 1. libpq's headers are not installed: the few declarations it needs are
// written here, the option struct as libpq-fe.h lays it out.
const libpqParseSource = `#include <stdio.h>
#include <stdlib.h>

typedef struct {
	char *keyword;
	char *envvar;
	char *compiled;
	char *val;
	char *label;
	char *dispchar;
	int dispsize;
} conninfo_option;

extern conninfo_option *PQconninfoParse(const char *conninfo, char **errmsg);
extern void PQconninfoFree(conninfo_option *options);
extern void PQfreemem(void *ptr);

int main(int argc, char **argv)
{
	char *errmsg = NULL;
	conninfo_option *options, *o;

	if (argc != 2)
		return 3;
	options = PQconninfoParse(argv[1], &errmsg);
	if (options == NULL) {
		if (errmsg == NULL)
			return 2; /* out of memory */
		fputs(errmsg, stderr);
		PQfreemem(errmsg);
		return 1;
	}
	for (o = options; o->keyword != NULL; o++) {
		if (o->val == NULL)
			continue;
		fputs(o->keyword, stdout);
		putchar('\0');
		fputs(o->val, stdout);
		putchar('\0');
	}
	PQconninfoFree(options);
	return fflush(stdout) == 0 ? 0 : 4;
}
`

var (
	libpqParseMu   sync.Mutex
	libpqParseProg string // the built program, in the per-process directory; "" until built
)

// libpqParseProgram returns the oracle program, built with the C compiler (CC, else gcc, else
// cc) against libpq 18 on first use in the process, and again after Cleanup removed it. The
// error wraps ErrNotInstalled when libpq 18 is not installed.
func libpqParseProgram(ctx context.Context) (prog string, env []string, err error) {
	env, err = Libpq18Env()
	if err != nil {
		return "", nil, err
	}
	libpqParseMu.Lock()
	defer libpqParseMu.Unlock()
	if libpqParseProg != "" {
		if _, err := os.Stat(libpqParseProg); err == nil {
			return libpqParseProg, env, nil
		}
		libpqParseProg = ""
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
		if _, err := exec.LookPath(cc); err != nil {
			cc = "cc"
		}
	}
	if _, err := exec.LookPath(cc); err != nil {
		return "", nil, fmt.Errorf("harness: no C compiler (%s) to build the libpq 18 parse program: %w; run scripts/install-deps.sh", cc, err)
	}
	dir, err := TempDir("libpqparse-*")
	if err != nil {
		return "", nil, err
	}
	src, prog := filepath.Join(dir, "libpqparse.c"), filepath.Join(dir, "libpqparse")
	if err := os.WriteFile(src, []byte(libpqParseSource), 0o600); err != nil {
		return "", nil, fmt.Errorf("harness: %w", err)
	}
	lib := filepath.Join(majorRoot(18), "lib")
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	// libpq's own libraries (OpenSSL 1.1) are beside it, not the system's: -rpath-link lets the
	// linker find them; the program finds them at run time through LD_LIBRARY_PATH.
	cmd := exec.CommandContext(cctx, cc, "-O1", "-o", prog, src, "-L"+lib, "-Wl,-rpath-link,"+lib, "-lpq")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("harness: building the libpq 18 parse program: %s: %w\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	libpqParseProg = prog
	return prog, env, nil
}

// LibpqConninfoParse returns libpq 18's reading of conninfo (a keyword/value string or a
// postgresql:// URI), as PQconninfoParse gives it (fe-connect.c: conninfo_parse,
// conninfo_uri_parse): the keywords whose values are not NULL, with their values. It applies no
// defaults: neither the environment nor a service file is read, and a key written twice has its
// last value. When libpq refuses the string the error is a *LibpqRefusal holding libpq's message;
// other errors (libpq 18 not installed, wrapping ErrNotInstalled; no C compiler) mean the oracle
// could not run. The program is built once per process in the harness's directory (see TempDir),
// which Cleanup removes. Safe for concurrent use.
func LibpqConninfoParse(ctx context.Context, conninfo string) (map[string]string, error) {
	if strings.IndexByte(conninfo, 0) >= 0 {
		return nil, errors.New("harness: LibpqConninfoParse: a connection string cannot hold a NUL byte (libpq reads a C string)")
	}
	prog, env, err := libpqParseProgram(ctx)
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, prog, conninfo)
	cmd.Env = env // PQconninfoParse reads no environment variable
	cmd.Dir = filepath.Dir(prog)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.ExitCode() == 1 && ctx.Err() == nil:
		return nil, &LibpqRefusal{Message: strings.TrimSuffix(stderr.String(), "\n")}
	default:
		return nil, fmt.Errorf("harness: the libpq 18 parse program: %w (%s)", err, strings.TrimSpace(stderr.String()))
	}
	fields := strings.Split(stdout.String(), "\x00")
	if len(fields)%2 != 1 || fields[len(fields)-1] != "" {
		return nil, fmt.Errorf("harness: the libpq 18 parse program wrote %d fields, not keyword and value pairs", len(fields)-1)
	}
	parsed := make(map[string]string, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		parsed[fields[i]] = fields[i+1]
	}
	return parsed, nil
}
