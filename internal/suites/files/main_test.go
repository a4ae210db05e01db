package files

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

func TestMain(m *testing.M) {
	// No Kerberos credentials from the machine: the connector must not find a credential
	// cache to try, as psql here has none (harness.Psql).
	os.Setenv("KRB5CCNAME", "FILE:/nonexistent/pgconnector-test-ccache")
	os.Setenv("KRB5_CLIENT_KTNAME", "")
	os.Exit(harness.Run(m)) // stops the servers too
}

// outcome is what a connect came to: ok with the query's answer, or the error's text.
type outcome struct {
	ok     bool
	answer string
	err    string
}

// viaConnector connects with conninfo through the connector (the process's environment, as
// the test set it) and runs query.
func viaConnector(t *testing.T, conninfo, query string) outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgconnector.New(conninfo)
	if err != nil {
		return outcome{err: err.Error()}
	}
	db := sql.OpenDB(c)
	defer db.Close()
	var answer string
	if err := db.QueryRowContext(ctx, query).Scan(&answer); err != nil {
		return outcome{err: err.Error()}
	}
	return outcome{ok: true, answer: answer}
}

// viaPsql connects with conninfo through psql on libpq 18, with env beside harness.Psql's
// clean environment, and runs query.
func viaPsql(t *testing.T, env []string, conninfo, query string) outcome {
	t.Helper()
	libpq18, err := harness.Libpq18Env()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := harness.Psql(ctx, append(libpq18, env...), conninfo, query)
	if err != nil {
		var exit interface{ ExitCode() int }
		if !errors.As(err, &exit) {
			t.Fatalf("psql did not run: %v", err)
		}
		return outcome{err: err.Error()}
	}
	return outcome{ok: true, answer: out}
}

// check asserts that the connector and psql came to want: both connected and answered
// answer, or both failed, the connector's error matching connectorErr and psql's libpqErr
// (upstream's expected_stderr, where it has one).
func check(t *testing.T, connector, psql outcome, ok bool, answer string, connectorErr, libpqErr *regexp.Regexp) {
	t.Helper()
	if ok {
		if !psql.ok || psql.answer != answer {
			t.Errorf("psql (libpq 18): %+v, want %q as upstream", psql, answer)
		}
		if !connector.ok || connector.answer != answer {
			t.Errorf("connector: %+v, want %q as libpq", connector, answer)
		}
		return
	}
	if psql.ok {
		t.Errorf("psql (libpq 18) connected, upstream expects a failure")
	} else if libpqErr != nil && !libpqErr.MatchString(psql.err) {
		t.Errorf("psql (libpq 18): %s; want %s", psql.err, libpqErr)
	}
	if connector.ok {
		t.Errorf("connector connected, libpq fails: %s", psql.err)
	} else if connectorErr != nil && !connectorErr.MatchString(connector.err) {
		t.Errorf("connector: %s; want %s", connector.err, connectorErr)
	}
}
