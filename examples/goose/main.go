// Command goose runs pressly/goose migrations, embedded in the program, on a pgconnector pool:
// up (each migration in a transaction, recorded in goose's version table), a query of the
// migrated table, then down to version 0. Each statement, goose's own and the migrations', is a
// span under the caller's span; the span tree is printed at the end.
//
// goose passes its context to every statement (UpContext, DownToContext, ...). The statements of
// a migration file run without parameters, so the connector records them with their literals
// replaced by ?; goose's own statements use $1, $2. On a database without its version table,
// goose's first query of it fails (a SELECT span with error.type 42P01) before it makes the table.
//
// In examples/ (the examples' module):
//
//	go run ./goose                               # on a throwaway local PostgreSQL cluster
//	DATABASE_URL=postgres://... go run ./goose   # migrates up and down again, then drops goose_example_version
package main

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/pressly/goose/v3"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/examples/internal/demo"
)

//go:embed migrations/*.sql
var migrations embed.FS

// versionTable is goose's version table here (goose_db_version by default).
const versionTable = "goose_example_version"

func init() {
	goose.SetBaseFS(migrations)
	goose.SetTableName(versionTable)
	if err := goose.SetDialect("postgres"); err != nil {
		panic(err)
	}
}

func main() { demo.Main("goose", run) }

func run(ctx context.Context, dsn string, tp trace.TracerProvider) error {
	c, err := pgconnector.New(dsn, pgconnector.WithTracerProvider(tp))
	if err != nil {
		return err
	}
	db := c.OpenDB()
	defer db.Close()
	tracer := tp.Tracer("github.com/pgconnector/pgconnector/examples/goose")
	ctx, root := tracer.Start(ctx, "goose example")
	defer root.End()

	uctx, span := tracer.Start(ctx, "migrate up")
	version, err := up(uctx, db)
	span.End()
	if err != nil {
		return err
	}
	fmt.Printf("migrated to version %d\n", version)

	rows, err := db.QueryContext(ctx, `SELECT name, email FROM goose_example_users ORDER BY id`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var name, email string
		if err := rows.Scan(&name, &email); err != nil {
			rows.Close()
			return err
		}
		fmt.Printf("user %s <%s>\n", name, email)
	}
	rows.Close()

	dctx, span := tracer.Start(ctx, "migrate down")
	err = down(dctx, db)
	span.End()
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, `DROP TABLE `+versionTable)
	return err
}

// up applies every migration not applied yet and returns the version reached.
func up(ctx context.Context, db *sql.DB) (int64, error) {
	if err := goose.UpContext(ctx, db, "migrations"); err != nil {
		return 0, err
	}
	return goose.GetDBVersionContext(ctx, db)
}

// down rolls every migration back, to version 0.
func down(ctx context.Context, db *sql.DB) error {
	return goose.DownToContext(ctx, db, "migrations", 0)
}
