// Command sqlx runs jmoiron/sqlx on pgconnector: a named batch insert, Get, a query built with
// sqlx.In, and a transaction, each statement a span under the caller's span, then prints the
// span tree.
//
// sqlx picks the bind variable style ($1 or ?) by driver name, and "pgconnector" is not among the
// names it knows: register it once (init below), or wrap the pool as sqlx.NewDb(db, "pgx").
// Without either, named queries, In and Rebind write ? and PostgreSQL answers 42601 (syntax error).
//
// In examples/ (the examples' module):
//
//	go run ./sqlx                               # on a throwaway local PostgreSQL cluster
//	DATABASE_URL=postgres://... go run ./sqlx   # creates and drops the table sqlx_example_users
package main

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/examples/internal/demo"
)

func init() {
	// Named queries, In and Rebind use $1, $2, ... on databases opened as "pgconnector".
	sqlx.BindDriver("pgconnector", sqlx.DOLLAR)
}

func main() { demo.Main("sqlx", run) }

func run(ctx context.Context, dsn string, tp trace.TracerProvider) error {
	db, err := open(dsn, tp)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, span := tp.Tracer("github.com/pgconnector/pgconnector/examples/sqlx").Start(ctx, "sqlx example")
	defer span.End()
	users, err := work(ctx, db)
	if err != nil {
		return err
	}
	for _, u := range users {
		fmt.Printf("user %d: %s <%s>\n", u.ID, u.Name, u.Email)
	}
	return nil
}

// open returns a sqlx handle on a pool of the connector. The name given to NewDb only chooses
// the bind style: "pgconnector" as registered in init (sqlx.Open("pgconnector", dsn) works too,
// without the connector's options).
func open(dsn string, tp trace.TracerProvider) (*sqlx.DB, error) {
	c, err := pgconnector.New(dsn, pgconnector.WithTracerProvider(tp))
	if err != nil {
		return nil, err
	}
	return sqlx.NewDb(c.OpenDB(), "pgconnector"), nil
}

type user struct {
	ID    int64  `db:"id"`
	Name  string `db:"name"`
	Email string `db:"email"`
}

// work creates a table, fills it, reads it back and drops it, all with ctx: each statement is a
// span under ctx's span.
func work(ctx context.Context, db *sqlx.DB) ([]user, error) {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS sqlx_example_users (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name text NOT NULL UNIQUE, email text NOT NULL)`); err != nil {
		return nil, err
	}
	defer db.ExecContext(context.WithoutCancel(ctx), `DROP TABLE sqlx_example_users`)

	// A named batch insert: one INSERT ... VALUES ($1, $2), ($3, $4).
	if _, err := db.NamedExecContext(ctx, `INSERT INTO sqlx_example_users (name, email) VALUES (:name, :email)`,
		[]user{{Name: "alice", Email: "alice@example.com"}, {Name: "bob", Email: "bob@example.com"}}); err != nil {
		return nil, fmt.Errorf("named insert: %w", err)
	}

	var alice user
	if err := db.GetContext(ctx, &alice, `SELECT id, name, email FROM sqlx_example_users WHERE name = $1`, "alice"); err != nil {
		return nil, err
	}

	// A transaction: a named update.
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	alice.Email = "alice@example.org"
	if _, err := tx.NamedExecContext(ctx, `UPDATE sqlx_example_users SET email = :email WHERE id = :id`, alice); err != nil {
		return nil, fmt.Errorf("named update: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}

	// In expands the slice to one ? per element; Rebind makes them $1, $2.
	query, args, err := sqlx.In(`SELECT id, name, email FROM sqlx_example_users WHERE name IN (?) ORDER BY id`, []string{"alice", "bob"})
	if err != nil {
		return nil, err
	}
	var users []user
	if err := db.SelectContext(ctx, &users, db.Rebind(query), args...); err != nil {
		return nil, fmt.Errorf("select with In: %w", err)
	}
	return users, nil
}
