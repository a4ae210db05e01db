package auth

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// row is one connection of a script: its connection string (without host and port), whether
// the script expects it to succeed, and the part of libpq's message the script checks
// (expected_stderr, as plain text), or "" where it checks none.
type row struct {
	conn string
	ok   bool
	msg  string
}

// step is a state of the server (pg_hba.conf, settings) and the rows the script runs in it.
type step struct {
	name  string
	hba   []string // "host" lines; nil keeps the step before's
	setup []string // statements run as the superuser before the rows, each on its own
	rows  []row
}

// hostLine is a pg_hba.conf line for TCP connections from 127.0.0.1 (the scripts' "local" line).
func hostLine(database, role, method string) string {
	return "host " + database + " " + role + " 127.0.0.1/32 " + method
}

// quote is a value of a keyword/value connection string, in single quotes (libpq's
// conninfo_parse: a backslash escapes the next character).
func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

var libpq18 = sync.OnceValues(harness.Libpq18Env)

// runSteps runs setup as the superuser (each statement on its own), then the steps in order on
// srv; a step's rows run in parallel, each through the connector and through psql on libpq 18,
// with base before the row's connection string.
func runSteps(t *testing.T, srv *harness.Postgres, base string, steps []step, setup []string) {
	env, err := libpq18()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range setup {
		if err := srv.ExecAdmin(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	prefix := "host=127.0.0.1 port=" + strconv.Itoa(srv.Port) + " " + base
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.hba != nil {
				if err := srv.SetHBA(st.hba...); err != nil {
					t.Fatal(err)
				}
			}
			for _, s := range st.setup {
				if err := srv.ExecAdmin(context.Background(), s); err != nil {
					t.Fatal(err)
				}
			}
			for _, r := range st.rows {
				t.Run(r.conn, func(t *testing.T) {
					t.Parallel()
					checkRow(t, env, prefix+" "+r.conn, r)
				})
			}
		})
	}
}

// checkRow connects with the connector and with psql and holds both to the row.
func checkRow(t *testing.T, env []string, dsn string, r row) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, who := range []struct {
		name  string
		login func() error
	}{
		{"connector", func() error { return connectorLogin(ctx, dsn) }},
		{"psql (libpq 18)", func() error { return psqlLogin(ctx, env, dsn) }},
	} {
		err := who.login()
		switch {
		case r.ok && err != nil:
			t.Errorf("%s failed, the script expects a connection: %v", who.name, err)
		case !r.ok && err == nil:
			t.Errorf("%s connected, the script expects a failure", who.name)
		case !r.ok && !strings.Contains(err.Error(), r.msg):
			t.Errorf("%s: %v; the script expects %q", who.name, err, r.msg)
		}
	}
}

// psqlLogin runs psql (next to the harness's server programs) with libpq 18 and the
// environment Psql gives it, the error holding psql's standard error as it is: harness.Psql
// replaces the password in it, and the scripts' password ("pass") is part of libpq's words
// ("a cleartext password").
func psqlLogin(ctx context.Context, env []string, dsn string) error {
	psql, err := harness.Program(ctx, "psql")
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, psql, "-X", "-w", "-A", "-t", "-d", dsn, "-c", "SELECT current_user")
	cmd.Env = append(append(harness.CleanEnv(), "PGCONNECT_TIMEOUT=20", "LC_ALL=C", "KRB5_CONFIG=/dev/null",
		"KRB5CCNAME=MEMORY:pgconnector-suite-none", "KRB5_CLIENT_KTNAME="), env...)
	cmd.Dir = "/"
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("psql: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// connectorLogin opens a connection through a new connector and runs a query on it.
func connectorLogin(ctx context.Context, dsn string) error {
	c, err := pgconnector.New(dsn)
	if err != nil {
		return err
	}
	defer c.Close()
	db := sql.OpenDB(c)
	defer db.Close()
	var user string
	return db.QueryRowContext(ctx, "SELECT current_user").Scan(&user)
}
