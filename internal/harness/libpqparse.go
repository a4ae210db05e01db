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

// libpqParseSource is the oracle program. It reads connection strings from standard input, each
// ended by a NUL byte, parses each with libpq's PQconninfoParse (libpq-fe.h; fe-connect.c,
// parse_connection_string without defaults: no environment, no service file) and writes, per
// string, 'P' then each keyword whose value is not NULL and its value, each followed by a NUL
// byte, then a NUL byte (no keyword is empty); or, when libpq refuses the string, 'E', libpq's
// errmsg and a NUL byte.
const libpqParseSource = libpqCPrelude + `#include <string.h>

extern conninfo_option *PQconninfoParse(const char *conninfo, char **errmsg);
extern void PQfreemem(void *ptr);

int main(void)
{
	size_t len = 0, cap = 1 << 16, n, start;
	char *in = malloc(cap);

	if (in == NULL)
		return 2;
	while ((n = fread(in + len, 1, cap - len, stdin)) > 0) {
		len += n;
		if (len == cap && (in = realloc(in, cap *= 2)) == NULL)
			return 2;
	}
	if (ferror(stdin))
		return 3;
	for (start = 0; start < len; start += strlen(in + start) + 1) {
		char *errmsg = NULL;
		conninfo_option *options, *o;

		if (memchr(in + start, '\0', len - start) == NULL)
			return 3; /* the last string is not ended */
		options = PQconninfoParse(in + start, &errmsg);
		if (options == NULL) {
			if (errmsg == NULL)
				return 2; /* out of memory */
			putchar('E');
			put(errmsg);
			PQfreemem(errmsg);
			continue;
		}
		putchar('P');
		for (o = options; o->keyword != NULL; o++) {
			if (o->val != NULL) {
				put(o->keyword);
				put(o->val);
			}
		}
		putchar('\0');
		PQconninfoFree(options);
	}
	return fflush(stdout) == 0 ? 0 : 4;
}
`

// libpqCPrelude begins the oracle programs. libpq's headers are not installed: the declarations
// they share are written here, the option struct as libpq-fe.h lays it out, with put, which
// writes a string and a NUL byte.
const libpqCPrelude = `#include <stdio.h>
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

extern void PQconninfoFree(conninfo_option *options);

static void put(const char *s)
{
	fputs(s, stdout);
	putchar('\0');
}

`

var (
	libpqProgMu    sync.Mutex
	libpqParseProg string // the built parse program, in the per-process directory; "" until built
)

// libpqParseProgram returns the parse oracle program (see libpqProgram).
func libpqParseProgram(ctx context.Context) (prog string, env []string, err error) {
	return libpqProgram(ctx, "libpqparse", libpqParseSource, &libpqParseProg)
}

// libpqProgram returns the program named name built from the C source src against libpq 18,
// with the C compiler (CC, else gcc, else cc), on first use in the process and again after
// Cleanup removed it; *built caches its path. env is the environment the program needs to find
// libpq 18. The error wraps ErrNotInstalled when libpq 18 is not installed.
func libpqProgram(ctx context.Context, name, src string, built *string) (prog string, env []string, err error) {
	env, err = Libpq18Env()
	if err != nil {
		return "", nil, err
	}
	libpqProgMu.Lock()
	defer libpqProgMu.Unlock()
	if *built != "" {
		if _, err := os.Stat(*built); err == nil {
			return *built, env, nil
		}
		*built = ""
	}
	cc, err := cCompiler("the libpq 18 program " + name)
	if err != nil {
		return "", nil, err
	}
	dir, err := TempDir(name + "-*")
	if err != nil {
		return "", nil, err
	}
	file, prog := filepath.Join(dir, name+".c"), filepath.Join(dir, name)
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		return "", nil, fmt.Errorf("harness: %w", err)
	}
	lib := filepath.Join(majorRoot(18), "lib")
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	// libpq's own libraries (OpenSSL 1.1) are beside it, not the system's: -rpath-link lets the
	// linker find them; the program finds them at run time through LD_LIBRARY_PATH.
	cmd := exec.CommandContext(cctx, cc, "-O1", "-o", prog, file, "-L"+lib, "-Wl,-rpath-link,"+lib, "-lpq")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("harness: building the libpq 18 program %s: %s: %w\n%s", name, strings.Join(cmd.Args, " "), err, out)
	}
	*built = prog
	return prog, env, nil
}

// LibpqConninfoParse returns libpq 18's reading of conninfo (a keyword/value string or a
// postgresql:// URI), as PQconninfoParse gives it (fe-connect.c: conninfo_parse,
// conninfo_uri_parse): the keywords whose values are not NULL, with their values. It applies no
// defaults: neither the environment nor a service file is read, and a key written twice has its
// last value. When libpq refuses the string the error is a *LibpqRefusal holding libpq's message;
// other errors (libpq 18 not installed, wrapping ErrNotInstalled; no C compiler) mean the oracle
// could not run. The program is built once per process in the harness's directory (see TempDir),
// which Cleanup removes. Safe for concurrent use; LibpqConninfoParseAll reads many strings with
// one run of the program.
func LibpqConninfoParse(ctx context.Context, conninfo string) (map[string]string, error) {
	all, err := LibpqConninfoParseAll(ctx, []string{conninfo})
	if err != nil {
		return nil, err
	}
	if all[0].Refusal != nil {
		return nil, all[0].Refusal
	}
	return all[0].Keys, nil
}

// LibpqParse is libpq 18's reading of one connection string: Keys as LibpqConninfoParse returns
// them, or Refusal when libpq refuses the string.
type LibpqParse struct {
	Keys    map[string]string
	Refusal *LibpqRefusal
}

// LibpqConninfoParseAll is LibpqConninfoParse for each of conninfos, in their order, with one run
// of the oracle program. The error means the oracle could not run (see LibpqConninfoParse).
func LibpqConninfoParseAll(ctx context.Context, conninfos []string) ([]LibpqParse, error) {
	var in bytes.Buffer
	for i, s := range conninfos {
		if strings.IndexByte(s, 0) >= 0 {
			return nil, fmt.Errorf("harness: LibpqConninfoParse: connection string %d holds a NUL byte (libpq reads a C string)", i)
		}
		in.WriteString(s)
		in.WriteByte(0)
	}
	prog, env, err := libpqParseProgram(ctx)
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, prog)
	cmd.Env = env // PQconninfoParse reads no environment variable
	cmd.Dir = filepath.Dir(prog)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = &in, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("harness: the libpq 18 parse program: %w (%s)", err, strings.TrimSpace(stderr.String()))
	}
	out := stdout.Bytes()
	field := func() (string, bool) {
		i := bytes.IndexByte(out, 0)
		if i < 0 {
			return "", false
		}
		f := string(out[:i])
		out = out[i+1:]
		return f, true
	}
	bad := errors.New("harness: the libpq 18 parse program's output is cut short or malformed")
	parses := make([]LibpqParse, len(conninfos))
	for i := range parses {
		if len(out) == 0 {
			return nil, bad
		}
		kind := out[0]
		out = out[1:]
		switch kind {
		case 'E':
			msg, ok := field()
			if !ok {
				return nil, bad
			}
			parses[i].Refusal = &LibpqRefusal{Message: strings.TrimSuffix(msg, "\n")}
		case 'P':
			keys := map[string]string{}
			for {
				k, ok := field()
				if !ok {
					return nil, bad
				}
				if k == "" {
					break
				}
				v, ok := field()
				if !ok {
					return nil, bad
				}
				keys[k] = v
			}
			parses[i].Keys = keys
		default:
			return nil, bad
		}
	}
	if len(out) != 0 {
		return nil, bad
	}
	return parses, nil
}

// cCompiler returns the C compiler: $CC, else gcc, else cc; what names what it is for in the
// error.
func cCompiler(what string) (string, error) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
		if _, err := exec.LookPath(cc); err != nil {
			cc = "cc"
		}
	}
	if _, err := exec.LookPath(cc); err != nil {
		return "", fmt.Errorf("harness: no C compiler (%s) to build %s: %w; run scripts/install-deps.sh", cc, what, err)
	}
	return cc, nil
}
