package main

import (
	"os"
	"testing"

	"github.com/pgconnector/pgconnector/examples/internal/spancheck"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// The harness removes what it made (clusters, the initdb template) once the tests ran.
func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

// TestStatementSpans runs the example's statements through ent's driver under a span of the test
// and checks the spans they made: each statement a child of the test's span, with the SQL ent's
// builder generated ($n placeholders, no value), and the connect in the same trace.
func TestStatementSpans(t *testing.T) {
	pg := harness.StartT(t, harness.Options{})
	tp, exp := spancheck.New(t)
	drv, err := open(pg.DSN(), tp)
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()

	ctx, parent := tp.Tracer("test").Start(t.Context(), "caller")
	users, err := work(ctx, drv)
	parent.End()
	if err != nil {
		t.Fatal(err)
	}
	if len(users) != 2 || users[0].Email != "alice@example.org" || users[1].Name != "bob" {
		t.Errorf("read back %+v", users)
	}

	spans := exp.GetSpans()
	stmts := spancheck.Under(t, spans, parent.SpanContext(),
		spancheck.Stmt{Op: "CREATE", Text: `CREATE TABLE IF NOT EXISTS ent_example_users \(.*\)`},
		spancheck.Stmt{Op: "INSERT", Text: `INSERT INTO "ent_example_users" \("name", "email"\) VALUES \(\$1, \$2\), \(\$3, \$4\) RETURNING "id"`},
		spancheck.Stmt{Op: "SELECT", Text: `SELECT "id", "name", "email" FROM "ent_example_users" WHERE "name" = \$1`},
		spancheck.Stmt{Op: "BEGIN"},
		spancheck.Stmt{Op: "UPDATE", Text: `UPDATE "ent_example_users" SET "email" = \$1 WHERE "id" = \$2`},
		spancheck.Stmt{Op: "COMMIT"},
		spancheck.Stmt{Op: "SELECT", Text: `SELECT "id", "name", "email" FROM "ent_example_users" WHERE "name" IN \(\$1, \$2\) ORDER BY "id"`},
		spancheck.Stmt{Op: "DROP", Text: `DROP TABLE ent_example_users`},
	)
	t.Logf("statement spans:\n%s", spancheck.List(stmts))
	spancheck.NoValues(t, spans, "alice", "bob")
	spancheck.ConnectUnder(t, spans, parent.SpanContext())
}
