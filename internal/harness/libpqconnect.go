package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// libpqConnectSource is the connect oracle program. It connects with libpq's PQconnectdb(argv[1])
// (fe-connect.c: the string, then the service file, then the environment, conninfo_add_defaults;
// the checks of pqConnectOptions2; then the connection) and writes 'E', PQerrorMessage and a NUL
// byte when the connection fails; else 'O', then "1" or "0" (PQsslInUse) and a NUL byte, then
// each keyword of PQconninfo, its environment variable (or nothing), then "=" and its value or
// nothing when its value is NULL, each followed by a NUL byte, then a NUL byte, then, when
// argv[2] is given, the fields of the first row of that query's result, each followed by a NUL
// byte.
const libpqConnectSource = libpqCPrelude + `typedef struct pg_conn PGconn;
typedef struct pg_result PGresult;

extern PGconn *PQconnectdb(const char *conninfo);
extern int PQstatus(const PGconn *conn); /* CONNECTION_OK is 0 */
extern char *PQerrorMessage(const PGconn *conn);
extern int PQsslInUse(PGconn *conn);
extern conninfo_option *PQconninfo(PGconn *conn);
extern PGresult *PQexec(PGconn *conn, const char *query);
extern int PQresultStatus(const PGresult *res); /* PGRES_TUPLES_OK is 2 */
extern int PQntuples(const PGresult *res);
extern int PQnfields(const PGresult *res);
extern char *PQgetvalue(const PGresult *res, int row, int field);
extern void PQclear(PGresult *res);
extern void PQfinish(PGconn *conn);

int main(int argc, char **argv)
{
	PGconn *conn;
	conninfo_option *options, *o;

	if (argc < 2 || argc > 3)
		return 3;
	conn = PQconnectdb(argv[1]);
	if (conn == NULL)
		return 2; /* out of memory */
	if (PQstatus(conn) != 0) {
		putchar('E');
		put(PQerrorMessage(conn));
		PQfinish(conn);
		return fflush(stdout) == 0 ? 0 : 4;
	}
	putchar('O');
	put(PQsslInUse(conn) ? "1" : "0");
	if ((options = PQconninfo(conn)) == NULL)
		return 2;
	for (o = options; o->keyword != NULL; o++) {
		put(o->keyword);
		put(o->envvar != NULL ? o->envvar : "");
		if (o->val != NULL)
			putchar('=');
		put(o->val != NULL ? o->val : "");
	}
	putchar('\0');
	PQconninfoFree(options);
	if (argc == 3) {
		PGresult *res = PQexec(conn, argv[2]);
		int i;

		if (PQresultStatus(res) != 2 || PQntuples(res) < 1) {
			fprintf(stderr, "%s", PQerrorMessage(conn));
			return 5;
		}
		for (i = 0; i < PQnfields(res); i++)
			put(PQgetvalue(res, 0, i));
		PQclear(res);
	}
	PQfinish(conn);
	return fflush(stdout) == 0 ? 0 : 4;
}
`

var libpqConnectProg string // the built connect program; "" until built (libpqProgMu)

// LibpqConnection is a connection libpq 18 opened (LibpqConnect).
type LibpqConnection struct {
	// SSL is PQsslInUse: the connection is encrypted with TLS.
	SSL bool
	// Keywords are PQconninfo's keywords, in libpq's order: every keyword libpq knows.
	Keywords []string
	// Env are the environment variables libpq reads for the keywords that have one.
	Env map[string]string
	// Options are the keywords whose values are not NULL, with the values the connection used
	// (after the environment, the service file and libpq's defaults).
	Options map[string]string
	// Row is the first row of the query's result, one string per field; nil without a query.
	Row []string
}

// LibpqConnect connects with libpq 18's PQconnectdb(conninfo) in a program of its own, run with
// the environment CleanEnv() (no PG* variable), PGCONNECT_TIMEOUT=20 and then env, and, when
// query is not "", runs query and returns its first row; the connection is then closed. When
// libpq fails the connection (refused before connecting, such as `invalid sslmode value: ""`, or
// failed at the server) the error is a *LibpqRefusal holding PQerrorMessage without its final
// line break; other errors (libpq 18 not installed, wrapping ErrNotInstalled; no C compiler; a
// query that fails) mean the oracle could not run. The program is built once per process in the
// harness's directory (see TempDir), which Cleanup removes.
func LibpqConnect(ctx context.Context, env []string, conninfo, query string) (*LibpqConnection, error) {
	if strings.IndexByte(conninfo, 0) >= 0 || strings.IndexByte(query, 0) >= 0 {
		return nil, errors.New("harness: LibpqConnect: a NUL byte in the connection string or the query (libpq reads C strings)")
	}
	prog, libpqEnv, err := libpqProgram(ctx, "libpqconnect", libpqConnectSource, &libpqConnectProg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	args := []string{conninfo}
	if query != "" {
		args = append(args, query)
	}
	fields, err := runLibpqProgram(ctx, "connect", prog, args, conninfo, env, libpqEnv)
	if err != nil {
		return nil, err
	}
	bad := malformed("connect")
	if len(fields) < 1 {
		return nil, bad
	}
	kind, first := fields[0][:min(1, len(fields[0]))], fields[0][min(1, len(fields[0])):]
	switch kind {
	case "E":
		if len(fields) != 1 {
			return nil, bad
		}
		return nil, &LibpqRefusal{Message: strings.TrimSuffix(first, "\n")}
	case "O":
	default:
		return nil, bad
	}
	c := &LibpqConnection{SSL: first == "1", Env: map[string]string{}, Options: map[string]string{}}
	rest := fields[1:]
	for {
		if len(rest) == 0 {
			return nil, bad
		}
		if rest[0] == "" {
			rest = rest[1:]
			break
		}
		if len(rest) < 3 {
			return nil, bad
		}
		c.Keywords = append(c.Keywords, rest[0])
		if rest[1] != "" {
			c.Env[rest[0]] = rest[1]
		}
		if v, ok := strings.CutPrefix(rest[2], "="); ok {
			c.Options[rest[0]] = v
		} else if rest[2] != "" {
			return nil, bad
		}
		rest = rest[3:]
	}
	if query != "" {
		c.Row = rest
	} else if len(rest) != 0 {
		return nil, bad
	}
	return c, nil
}

// runLibpqProgram runs the oracle program prog (what names it in errors) with args, in the
// environment CleanEnv(), PGCONNECT_TIMEOUT=20, env, then libpqEnv, and returns its standard
// output split at NUL bytes, without the empty string after the last one. A failed run's error
// holds its standard error with the passwords of conninfo and env redacted.
func runLibpqProgram(ctx context.Context, what, prog string, args []string, conninfo string, env, libpqEnv []string) ([]string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(append(append(CleanEnv(), "PGCONNECT_TIMEOUT=20"), env...), libpqEnv...)
	cmd.Dir = filepath.Dir(prog)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		msg := redactPasswords(strings.TrimSpace(stderr.String()), conninfo, env)
		return nil, fmt.Errorf("harness: the libpq 18 %s program: %w (%s)", what, err, msg)
	}
	fields := strings.Split(stdout.String(), "\x00")
	if fields[len(fields)-1] != "" {
		return nil, malformed(what)
	}
	return fields[:len(fields)-1], nil
}

// malformed is the error of an oracle program's output that is cut short or malformed.
func malformed(what string) error {
	return fmt.Errorf("harness: the libpq 18 %s program's output is cut short or malformed", what)
}
