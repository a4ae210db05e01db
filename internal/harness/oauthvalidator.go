package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The OAuth validator module of the harness's PostgreSQL 18 clusters (Options.OAuth). PostgreSQL
// 18 hands every bearer token a client sends to a validator library (oauth_validator_libraries;
// src/include/libpq/oauth.h, doc/src/sgml/oauth-validators.sgml); this one looks the token up in
// a file the test process writes (OAuthIssuer), so tokens can be minted and revoked while the
// server runs.
//
// The registry builds of PostgreSQL have no server headers, so the module declares the structures
// it shares with the server itself, as PostgreSQL 18 lays them out on x86_64 (src/include/fmgr.h:
// Pg_magic_struct with the name and version of PG_MODULE_MAGIC_EXT; src/include/libpq/oauth.h:
// OAuthValidatorCallbacks, ValidatorModuleState, ValidatorModuleResult); pstrdup resolves from
// the postgres binary when the server loads the module.

const (
	// oauthValidatorName is the module's file name without ".so", the value of
	// oauth_validator_libraries and of the hba option validator=.
	oauthValidatorName = "pgconnector_oauth_validator"
	// oauthTokenFileEnv names the postmaster's environment variable that holds the path of the
	// token file; backends inherit it.
	oauthTokenFileEnv = "PGCONNECTOR_OAUTH_TOKEN_FILE"
	// oauthDelegateEnv names the postmaster's environment variable that is "1" when the oauth
	// lines have delegate_ident_mapping=1: the module then authorizes only a token whose
	// identity is the requested role.
	oauthDelegateEnv = "PGCONNECTOR_OAUTH_DELEGATE"
	// oauthTokenFileMax bounds the token file the module reads (bytes): a larger file authorizes
	// nothing.
	oauthTokenFileMax = 1 << 20
)

// oauthValidatorSource is the module's C source. Each line of the token file is
// "TOKEN IDENTITY EXPIRY": the token (no space), the identity that becomes the connection's
// authn_id (may hold spaces), and the expiry in unix seconds (0: never). validate reads the file
// again at each call, so a line written or removed applies to the next connection. It returns
// true (the module worked) with authorized false for an unknown, expired or oversized case, as
// PostgreSQL expects of a refusal; false would be an internal error.
const oauthValidatorSource = `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

typedef struct {
	int len;
	struct {
		int version;
		int funcmaxargs;
		int indexmaxkeys;
		int namedatalen;
		int float8byval;
		char abi_extra[32];
	} abi;
	const char *name;
	const char *version;
} Pg_magic_struct;

static const Pg_magic_struct magic = {
	sizeof(Pg_magic_struct),
	{1800, 100, 32, 64, 1, "PostgreSQL"},
	"` + oauthValidatorName + `",
	"1",
};

const Pg_magic_struct *Pg_magic_func(void) { return &magic; }

typedef struct { int sversion; void *private_data; } ValidatorModuleState;
typedef struct { bool authorized; char *authn_id; } ValidatorModuleResult;

typedef struct {
	uint32_t magic;
	void (*startup_cb)(ValidatorModuleState *state);
	void (*shutdown_cb)(ValidatorModuleState *state);
	bool (*validate_cb)(const ValidatorModuleState *state, const char *token, const char *role,
						ValidatorModuleResult *result);
} OAuthValidatorCallbacks;

extern char *pstrdup(const char *in);

static void startup(ValidatorModuleState *state) { (void) state; }
static void shutdown(ValidatorModuleState *state) { (void) state; }

static bool validate(const ValidatorModuleState *state, const char *token, const char *role,
					 ValidatorModuleResult *result)
{
	const char *path = getenv("` + oauthTokenFileEnv + `");
	const char *delegate = getenv("` + oauthDelegateEnv + `");
	static char buf[` + "1048577" + `];
	size_t n, tlen = strlen(token);
	char *line, *next;
	FILE *f;

	(void) state;
	result->authorized = false;
	result->authn_id = NULL;
	if (path == NULL || tlen == 0 || (f = fopen(path, "r")) == NULL)
		return true;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	if (n >= sizeof(buf) - 1)
		return true; /* oversized: authorize nothing */
	buf[n] = '\0';
	for (line = buf; *line != '\0'; line = next) {
		char *sp1, *sp2, *end = strchr(line, '\n');
		long long expiry;

		next = end != NULL ? end + 1 : line + strlen(line);
		if (end != NULL)
			*end = '\0';
		sp1 = strchr(line, ' ');
		sp2 = strrchr(line, ' ');
		if (sp1 == NULL || sp2 == sp1 || (size_t) (sp1 - line) != tlen || memcmp(line, token, tlen) != 0)
			continue;
		*sp2 = '\0';
		expiry = atoll(sp2 + 1);
		if (expiry != 0 && (long long) time(NULL) >= expiry)
			return true;
		if (delegate != NULL && strcmp(delegate, "1") == 0 && strcmp(sp1 + 1, role) != 0)
			return true;
		result->authn_id = pstrdup(sp1 + 1);
		result->authorized = true;
		return true;
	}
	return true;
}

static const OAuthValidatorCallbacks callbacks = {0x20250220, startup, shutdown, validate};

const OAuthValidatorCallbacks *_PG_oauth_validator_module_init(void) { return &callbacks; }
`

var (
	oauthValidatorMu  sync.Mutex
	oauthValidatorDir string // directory of the built module; "" until built (oauthValidatorMu)
)

// oauthValidatorModule returns the directory that holds the validator module
// (oauthValidatorName + ".so"), building it with the C compiler (CC, else gcc, else cc) on first
// use in the process and again after Cleanup removed it. The directory and the module are
// readable by every account, so that a server run as another account loads it.
func oauthValidatorModule(ctx context.Context) (string, error) {
	oauthValidatorMu.Lock()
	defer oauthValidatorMu.Unlock()
	if oauthValidatorDir != "" {
		if _, err := os.Stat(filepath.Join(oauthValidatorDir, oauthValidatorName+".so")); err == nil {
			return oauthValidatorDir, nil
		}
		oauthValidatorDir = ""
	}
	cc, err := cCompiler("the OAuth validator module")
	if err != nil {
		return "", err
	}
	dir, err := TempDir("oauthvalidator-*")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	src, so := filepath.Join(dir, oauthValidatorName+".c"), filepath.Join(dir, oauthValidatorName+".so")
	if err := os.WriteFile(src, []byte(oauthValidatorSource), 0o644); err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, cc, "-O1", "-shared", "-fPIC", "-o", so, src)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("harness: building the OAuth validator module: %s: %w\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	if err := os.Chmod(so, 0o755); err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	oauthValidatorDir = dir
	return dir, nil
}
