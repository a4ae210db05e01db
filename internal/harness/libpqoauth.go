package harness

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// libpqOAuthTokenEnv names the environment variable that hands the OAuth oracle its token (not
// the command line, which other accounts can read in /proc).
const libpqOAuthTokenEnv = "PGCONNECTOR_ORACLE_OAUTH_TOKEN"

// libpqOAuthSource is the OAuth oracle program: it installs a PQAUTHDATA_OAUTH_BEARER_TOKEN hook
// (libpq-fe.h of PostgreSQL 18: PQsetAuthDataHook, PGauthData, PGoauthBearerRequest, declared
// here) that returns the token of libpqOAuthTokenEnv, or declines (0: libpq's own flow) when
// that is unset, then connects argv[2] times with PQconnectdb(argv[1]). For each connect it
// writes 'O' or 'E' followed by PQerrorMessage, a NUL byte, the hook's calls during that
// connect in decimal and a NUL byte; then the loop's elapsed nanoseconds (CLOCK_MONOTONIC) and
// a NUL byte.
const libpqOAuthSource = libpqCPrelude + `#include <string.h>
#include <time.h>

typedef struct pg_conn PGconn;
typedef enum { PGRES_POLLING_FAILED = 0 } PostgresPollingStatusType;
typedef enum {
	PQAUTHDATA_PROMPT_OAUTH_DEVICE,
	PQAUTHDATA_OAUTH_BEARER_TOKEN
} PGauthData;

typedef struct PGoauthBearerRequest {
	const char *openid_configuration;
	const char *scope;
	PostgresPollingStatusType (*async)(PGconn *conn, struct PGoauthBearerRequest *request, int *altsock);
	void (*cleanup)(PGconn *conn, struct PGoauthBearerRequest *request);
	char *token;
	void *user;
} PGoauthBearerRequest;

typedef int (*PQauthDataHook_type)(PGauthData type, PGconn *conn, void *data);

extern void PQsetAuthDataHook(PQauthDataHook_type hook);
extern PGconn *PQconnectdb(const char *conninfo);
extern int PQstatus(const PGconn *conn);
extern char *PQerrorMessage(const PGconn *conn);
extern void PQfinish(PGconn *conn);

static char *token;
static long calls;

static void cleanup(PGconn *conn, PGoauthBearerRequest *request)
{
	(void) conn;
	(void) request;
}

static int hook(PGauthData type, PGconn *conn, void *data)
{
	PGoauthBearerRequest *request = data;

	(void) conn;
	if (type != PQAUTHDATA_OAUTH_BEARER_TOKEN)
		return 0;
	calls++;
	if (token == NULL)
		return 0;
	request->token = token;
	request->cleanup = cleanup;
	return 1;
}

int main(int argc, char **argv)
{
	struct timespec t0, t1;
	char num[32];
	long i, n, before;

	if (argc != 3 || (n = atol(argv[2])) < 1)
		return 3;
	token = getenv("` + libpqOAuthTokenEnv + `");
	PQsetAuthDataHook(hook);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < n; i++) {
		PGconn *conn;

		before = calls;
		if ((conn = PQconnectdb(argv[1])) == NULL)
			return 2;
		putchar(PQstatus(conn) == 0 ? 'O' : 'E');
		put(PQstatus(conn) == 0 ? "" : PQerrorMessage(conn));
		PQfinish(conn);
		snprintf(num, sizeof(num), "%ld", calls - before);
		put(num);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	snprintf(num, sizeof(num), "%lld",
			 (long long) (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
	put(num);
	return fflush(stdout) == 0 ? 0 : 4;
}
`

var libpqOAuthProg string // the built OAuth oracle; "" until built (libpqProgMu)

// LibpqOAuthResult is what the OAuth oracle (LibpqOAuthConnect) saw.
type LibpqOAuthResult struct {
	// Connects has one entry per PQconnectdb, in order.
	Connects []LibpqOAuthAttempt
	// HookCalls is the number of PQAUTHDATA_OAUTH_BEARER_TOKEN hook calls of the whole loop.
	HookCalls int
	// Elapsed is the time of the loop (connects and PQfinish; not the program's start).
	Elapsed time.Duration
}

// LibpqOAuthAttempt is one connect of the OAuth oracle.
type LibpqOAuthAttempt struct {
	// Err is PQerrorMessage without its final line break when the connection failed, else "".
	Err string
	// HookCalls is the number of token hook calls during this connect.
	HookCalls int
}

// OK reports whether every connect succeeded.
func (r LibpqOAuthResult) OK() bool {
	for _, c := range r.Connects {
		if c.Err != "" {
			return false
		}
	}
	return len(r.Connects) > 0
}

// LibpqOAuthConnect connects n times (1 to 10000) with libpq 18's PQconnectdb(conninfo) in a
// program of its own, with a PQAUTHDATA_OAUTH_BEARER_TOKEN hook (libpq-fe.h, PostgreSQL 18) that
// hands libpq token, or, when token is "", declines so that libpq falls back to its own flow
// (the registry build has none: "no OAuth flows are available"). libpq calls the hook after the
// server's discovery answer, so each connect of a server with an oauth line costs two backends
// unless oauth_issuer is the discovery URI itself (see docs of OAuthOptions). The program runs
// with CleanEnv() and PGCONNECT_TIMEOUT=20; conninfo needs oauth_issuer and oauth_client_id
// (libpq 18 insists on the latter even with a hook). The error means the oracle could not run
// (libpq 18 not installed, wrapping ErrNotInstalled; no C compiler); a refused connect is in
// Connects. The program is built once per process in the harness's directory (see TempDir).
func LibpqOAuthConnect(ctx context.Context, conninfo, token string, n int) (LibpqOAuthResult, error) {
	var res LibpqOAuthResult
	if n < 1 || n > 10000 {
		return res, fmt.Errorf("harness: LibpqOAuthConnect: n %d out of 1..10000", n)
	}
	if strings.IndexByte(conninfo, 0) >= 0 || strings.IndexByte(token, 0) >= 0 {
		return res, errors.New("harness: LibpqOAuthConnect: a NUL byte in the connection string or the token (libpq reads C strings)")
	}
	prog, libpqEnv, err := libpqProgram(ctx, "libpqoauth", libpqOAuthSource, &libpqOAuthProg)
	if err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute+time.Duration(n)*100*time.Millisecond)
	defer cancel()
	var env []string
	if token != "" {
		env = []string{libpqOAuthTokenEnv + "=" + token}
	}
	fields, err := runLibpqProgram(ctx, "OAuth", prog, []string{conninfo, strconv.Itoa(n)}, conninfo, env, libpqEnv)
	if err != nil {
		return res, err
	}
	bad := malformed("OAuth")
	if len(fields) != 2*n+1 {
		return res, bad
	}
	for k := 0; k < n; k++ {
		msg, calls := fields[2*k], fields[2*k+1]
		c, err := strconv.Atoi(calls)
		if err != nil || msg == "" || (msg[0] != 'O' && msg[0] != 'E') {
			return res, bad
		}
		a := LibpqOAuthAttempt{HookCalls: c}
		if msg[0] == 'E' {
			a.Err = strings.TrimSuffix(msg[1:], "\n")
			if a.Err == "" {
				a.Err = "(libpq gave no message)"
			}
		}
		res.Connects = append(res.Connects, a)
		res.HookCalls += c
	}
	ns, err := strconv.ParseInt(fields[2*n], 10, 64)
	if err != nil || ns < 0 {
		return res, bad
	}
	res.Elapsed = time.Duration(ns)
	return res, nil
}
