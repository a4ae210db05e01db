package main

import (
	"errors"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jmoiron/sqlx"

	"github.com/pgconnector/pgconnector/examples/internal/spancheck"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// The harness removes what it made (clusters, the initdb template) once the tests ran.
func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

// TestStatementSpans runs the example's statements under a span of the test and checks the
// spans they made: each a child of the test's span, with the text sqlx sent ($n placeholders,
// also for the named queries and In), no bound value recorded, and the connect in the same trace.
func TestStatementSpans(t *testing.T) {
	pg := harness.StartT(t, harness.Options{})
	tp, exp := spancheck.New(t)
	db, err := open(pg.DSN(), tp)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	ctx, parent := tp.Tracer("test").Start(t.Context(), "caller")
	users, err := work(ctx, db)
	parent.End()
	if err != nil {
		t.Fatal(err)
	}
	if len(users) != 2 || users[0].Email != "alice@example.org" || users[1].Name != "bob" {
		t.Errorf("read back %+v", users)
	}

	spans := exp.GetSpans()
	stmts := spancheck.Under(t, spans, parent.SpanContext(),
		spancheck.Stmt{Op: "CREATE", Text: `CREATE TABLE IF NOT EXISTS sqlx_example_users \(.*\)`},
		spancheck.Stmt{Op: "INSERT", Text: `INSERT INTO sqlx_example_users \(name, email\) VALUES \(\$1, \$2\),\(\$3, \$4\)`},
		spancheck.Stmt{Op: "SELECT", Text: `SELECT id, name, email FROM sqlx_example_users WHERE name = \$1`},
		spancheck.Stmt{Op: "BEGIN"},
		spancheck.Stmt{Op: "UPDATE", Text: `UPDATE sqlx_example_users SET email = \$1 WHERE id = \$2`},
		spancheck.Stmt{Op: "COMMIT"},
		spancheck.Stmt{Op: "SELECT", Text: `SELECT id, name, email FROM sqlx_example_users WHERE name IN \(\$1, \$2\) ORDER BY id`},
		spancheck.Stmt{Op: "DROP", Text: `DROP TABLE sqlx_example_users`},
	)
	t.Logf("statement spans:\n%s", spancheck.List(stmts))
	spancheck.NoValues(t, spans, "alice", "bob")
	spancheck.ConnectUnder(t, spans, parent.SpanContext())
}

// TestBindStyleUnregistered shows what the example's init prevents: sqlx does not know the
// driver name "pgconnector", so a named query and In+Rebind keep ? and PostgreSQL answers 42601.
// sqlx.NewDb(db, "pgx") is the other fix: the name only selects the bind style.
func TestBindStyleUnregistered(t *testing.T) {
	pg := harness.StartT(t, harness.Options{})
	tp, exp := spancheck.New(t)
	db, err := open(pg.DSN(), tp)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := t.Context()

	sqlx.BindDriver("pgconnector", sqlx.UNKNOWN) // as if init had not run
	t.Cleanup(func() { sqlx.BindDriver("pgconnector", sqlx.DOLLAR) })
	_, err = db.NamedExecContext(ctx, `SELECT CAST(:a AS int)`, map[string]any{"a": 1})
	if sqlstate(err) != "42601" {
		t.Errorf("named query without the bind style: %v; want SQLSTATE 42601", err)
	}
	q, args, err := sqlx.In(`SELECT count(*) FROM generate_series(1, 3) g WHERE g IN (?)`, []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	err = db.GetContext(ctx, &n, db.Rebind(q), args...)
	if sqlstate(err) != "42601" {
		t.Errorf("In and Rebind without the bind style: %v; want SQLSTATE 42601", err)
	}
	failed := 0
	for _, s := range spancheck.Statements(exp.GetSpans()) {
		if spancheck.Attr(s, "error.type") == "42601" {
			failed++
		}
	}
	if failed != 2 {
		t.Errorf("%d statement spans with error.type 42601, want 2:\n%s", failed, spancheck.List(spancheck.Statements(exp.GetSpans())))
	}

	// The fixes: the name "pgx", or "pgconnector" registered.
	sqlx.BindDriver("pgconnector", sqlx.DOLLAR)
	for _, x := range []*sqlx.DB{sqlx.NewDb(db.DB, "pgx"), db} {
		if _, err := x.NamedExecContext(ctx, `SELECT CAST(:a AS int)`, map[string]any{"a": 1}); err != nil {
			t.Errorf("named query as %q: %v", x.DriverName(), err)
		}
		if err := x.GetContext(ctx, &n, x.Rebind(q), args...); err != nil || n != 2 {
			t.Errorf("In and Rebind as %q: %d, %v; want 2", x.DriverName(), n, err)
		}
	}
}

func sqlstate(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
