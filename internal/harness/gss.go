package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// GSSOptions prepares a server for Kerberos with a harness KDC (Options.GSS).
//
// With Keytab, the harness creates the service principals
// <Service>/localhost and <Service>/127.0.0.1 in the KDC (unless they exist),
// writes their keys into a keytab in the cluster's directory (Postgres.
// KeytabFile, owned by the account that runs the server, mode 0600) and sets
//
//	krb_server_keyfile = 'FILE:<KeytabFile>'
//	krb_caseins_users = off
//
// Without Keytab, krb_server_keyfile names a file that does not exist: the
// server is built with GSSAPI (it answers 'G' to a GSSENCRequest over TCP)
// but cannot accept a security context, whatever keytab the machine has.
//
// Either way the server is started with KRB5_CONFIG=<KDC.Krb5Conf> and a
// private KRB5RCACHEDIR (its replay cache), and no other KRB5* variable. The
// server does not talk to the KDC: an acceptor needs only its keytab.
//
// pg_hba.conf is up to the test (Options.HBA, SetHBA). Typical lines:
//
//	hostgssenc   all all 127.0.0.1/32 gss include_realm=0 krb_realm=PGCONNECTOR.TEST
//	hostnogssenc all all 127.0.0.1/32 trust
//
// The first lets in a GSS-encrypted connection of the principal
// <role>@PGCONNECTOR.TEST as <role> (create the role with CreateRole); the
// second lets in every connection without GSS encryption, so that a client's
// fallback is measurable (write reject to forbid them). Without Options.HBA
// the usual "host all all 127.0.0.1/32 <Auth>" line applies, to GSS-encrypted
// connections too.
type GSSOptions struct {
	// KDC is the realm's KDC; required.
	KDC *KDC
	// Keytab gives the server a keytab with its service principals; false
	// leaves it without one.
	Keytab bool
	// Service is the service name of the server's principals (libpq's
	// krbsrvname); empty means "postgres".
	Service string
	// Enctypes, when non-nil, restricts the keys of the service principals
	// (and the session keys of their tickets) to these encryption types (see
	// SupportedEnctypes), so that a client's service ticket and GSS context
	// use them; the principals must not exist yet with other keys (use a
	// Service name of its own per combination on a shared KDC). Nil means
	// every supported type.
	Enctypes []string
}

// DefaultService is the Kerberos service name of a server when
// GSSOptions.Service is empty, as libpq's default krbsrvname.
const DefaultService = "postgres"

func (g *GSSOptions) check() error {
	if g == nil {
		return nil
	}
	if g.KDC == nil {
		return errors.New("harness: GSSOptions without a KDC")
	}
	if g.Service != "" && !serviceRE.MatchString(g.Service) {
		return fmt.Errorf("harness: invalid GSS service name %q", g.Service)
	}
	if g.Enctypes != nil {
		if err := checkEnctypes(g.Enctypes); err != nil {
			return err
		}
	}
	return nil
}

func (g *GSSOptions) service() string {
	if g.Service == "" {
		return DefaultService
	}
	return g.Service
}

// gssHosts are the host names of the service principals of a server with a
// keytab, as a client names the server in host=.
var gssHosts = []string{"localhost", "127.0.0.1"}

// setupGSS writes the keytab (if wanted), makes the replay cache directory
// and sets the server's Kerberos configuration and environment.
func (p *Postgres) setupGSS(g *GSSOptions) error {
	k, acct := g.KDC, p.env.acct
	service := g.service()
	keytab := filepath.Join(p.dir, "server.keytab")
	rcache := filepath.Join(p.dir, "krb5rcache")
	if err := acct.mkdir(rcache, 0o700); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	if g.Keytab {
		var err error
		if g.Enctypes != nil {
			err = k.AddServicePrincipalsEnctypes(service, g.Enctypes, gssHosts...)
		} else {
			err = k.AddServicePrincipals(service, gssHosts...)
		}
		if err != nil {
			return err
		}
		principals := make([]string, len(gssHosts))
		for i, h := range gssHosts {
			principals[i] = service + "/" + h
		}
		if err := k.Keytab(keytab, principals...); err != nil {
			return err
		}
		if err := acct.chown(keytab); err != nil {
			return fmt.Errorf("harness: %w", err)
		}
		p.KeytabFile = keytab
	}
	p.KrbSrvName = service
	p.krbKeyfile = keytab
	p.serverEnv = []string{"KRB5_CONFIG=" + k.Krb5Conf, "KRB5RCACHEDIR=" + rcache}
	return nil
}

// CreateRole creates a login role named exactly name (case kept), for example
// for the Kerberos principal name@REALM under "include_realm=0". It can log
// into AppDatabase (CONNECT is granted to PUBLIC) and has no password.
func (p *Postgres) CreateRole(name string) error {
	if name == "" || strings.ContainsRune(name, 0) {
		return errors.New("harness: CreateRole: invalid role name")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return p.admin(ctx, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, "CREATE ROLE "+pgx.Identifier{name}.Sanitize()+" LOGIN"); err != nil {
			return fmt.Errorf("harness: creating role %q: %w", name, err)
		}
		return nil
	})
}

// Psql runs the real psql (next to the server programs, else from $PATH) with
// the connection string conninfo and one query, and returns what it printed,
// unaligned and without headers (psql -X -w -A -t), without the final
// newline. The environment is ours without PG*, KRB5* and locale variables,
// with PGCONNECT_TIMEOUT=20, PGAPPNAME=pgconnector-harness, LC_ALL=C and no
// Kerberos credentials (an empty MEMORY: ccache, no client keytab,
// KRB5_CONFIG=/dev/null, so that the machine's tickets never make libpq try
// GSSAPI), then env (for example KDC.Env, whose entries replace those, or
// Libpq18Env, which makes psql load libpq 18).
// psql never prompts for a password (-w) and is killed when ctx ends or after
// a minute. On failure the error holds psql's standard error and wraps its
// *exec.ExitError (exit status 2: no connection; 1 or 3: the query failed);
// the conninfo is left out, and the passwords of conninfo and of PGPASSWORD
// in env are replaced by "[password]" in psql's message (libpq quotes a
// connection string it cannot parse).
func Psql(ctx context.Context, env []string, conninfo, query string) (string, error) {
	return runPsql(ctx, env, conninfo, nil, "-c", query)
}

// runPsql runs psql as Psql describes, with the last arguments args (-c QUERY, or -f - and
// the script on stdin).
func runPsql(ctx context.Context, env []string, conninfo string, stdin io.Reader, args ...string) (string, error) {
	psql, err := psqlPath(ctx)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, psql, append([]string{"-X", "-w", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", conninfo}, args...)...)
	cmd.Stdin = stdin
	cmd.Env = append(append(CleanEnv(), "PGCONNECT_TIMEOUT=20", "PGAPPNAME=pgconnector-harness",
		"KRB5_CONFIG=/dev/null", "KRB5CCNAME=MEMORY:pgconnector-harness-none", "KRB5_CLIENT_KTNAME="), env...)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		msg := redactPasswords(strings.TrimSpace(errb.String()), conninfo, env)
		return strings.TrimSuffix(out.String(), "\n"), fmt.Errorf("harness: psql: %w: %s", err, msg)
	}
	return strings.TrimSuffix(out.String(), "\n"), nil
}

// psqlPath finds psql: next to the server programs the harness uses, else
// in $PATH.
func psqlPath(ctx context.Context) (string, error) {
	return Program(ctx, "psql")
}

// Program returns the path of the PostgreSQL client program name (psql,
// pgbench, ...): the one next to the server programs the harness uses (the
// same version), else the one in $PATH. The error names the Debian package
// and the install script.
func Program(ctx context.Context, name string) (string, error) {
	e, err := setup(ctx)
	if err != nil {
		return "", err
	}
	if p := filepath.Join(e.bin.dir, name); isExecutable(p) {
		return p, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("harness: %s not found next to %s nor in $PATH; run scripts/install-deps.sh (packages postgresql and postgresql-client)", name, e.bin.dir)
	}
	return p, nil
}
