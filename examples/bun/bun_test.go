package main

import (
	"os"
	"testing"

	"github.com/pgconnector/pgconnector/examples/internal/spancheck"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// The harness removes what it made (clusters, the initdb template) once the tests ran.
func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

// TestStatementSpans runs the example's bun queries under a span of the test and checks the spans
// they made: each statement a child of the test's span, with the SQL bun generated. bun writes
// values into the text as literals; the spans have ? in their place.
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
		spancheck.Stmt{Op: "CREATE", Text: `CREATE TABLE IF NOT EXISTS "bun_example_users" \(.*\)`},
		spancheck.Stmt{Op: "INSERT", Text: `INSERT INTO "bun_example_users" \("id", "name", "email"\) VALUES \(DEFAULT, \?, \?\), \(DEFAULT, \?, \?\) RETURNING "id"`},
		spancheck.Stmt{Op: "SELECT", Text: `SELECT "user"."id", "user"."name", "user"."email" FROM "bun_example_users" AS "user" WHERE \(name = \?\)`},
		spancheck.Stmt{Op: "BEGIN"},
		spancheck.Stmt{Op: "UPDATE", Text: `UPDATE "bun_example_users" AS "user" SET "email" = \? WHERE \("user"."id" = \?\)`},
		spancheck.Stmt{Op: "COMMIT"},
		spancheck.Stmt{Op: "SELECT", Text: `SELECT "user"."id", "user"."name", "user"."email" FROM "bun_example_users" AS "user" WHERE \(name IN \(\?, \?\)\) ORDER BY "id"`},
		spancheck.Stmt{Op: "DROP", Text: `DROP TABLE IF EXISTS "bun_example_users"`},
	)
	t.Logf("statement spans:\n%s", spancheck.List(stmts))
	spancheck.NoValues(t, spans, "alice", "bob")
	spancheck.ConnectUnder(t, spans, parent.SpanContext())
}
