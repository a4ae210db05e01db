// Command pgxpool runs a pgxpool.Pool of Connector.OpenPool, whose connections the connector
// opens (the same negotiation, cache, GSS transport and connect spans as database/sql), with the
// statement spans the connector's options shape (as for database/sql) and the pool's acquire
// spans: an insert, a query, a batch, a COPY and a transaction, each a span under the caller's
// span, the connects under the acquire spans of the calls that opened them, then prints the
// span tree.
//
// In examples/ (the examples' module):
//
//	go run ./pgxpool                               # on a throwaway local PostgreSQL cluster
//	DATABASE_URL=postgres://... go run ./pgxpool   # creates and drops the table pgxpool_example_users
package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/examples/internal/demo"
)

func main() { demo.Main("pgxpool", run) }

func run(ctx context.Context, dsn string, tp trace.TracerProvider) error {
	c, pool, err := open(ctx, dsn, tp)
	if err != nil {
		return err
	}
	defer c.Close()
	defer pool.Close() // the pool first, then the connector
	ctx, span := tp.Tracer("github.com/pgconnector/pgconnector/examples/pgxpool").Start(ctx, "pgxpool example")
	defer span.End()
	names, err := work(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Println("users:", names)
	return nil
}

// open returns a connector and a pool of its connections, traced by tp: the pool's tracer, from
// the connector, makes the statement and acquire spans.
func open(ctx context.Context, dsn string, tp trace.TracerProvider) (*pgconnector.Connector, *pgxpool.Pool, error) {
	c, err := pgconnector.New(dsn, pgconnector.WithTracerProvider(tp))
	if err != nil {
		return nil, nil, err
	}
	pool, err := c.OpenPool(ctx)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, pool, nil
}

// work creates a table, fills it (an insert, a batch, a COPY), reads it back in a transaction and
// drops it, all with ctx: each statement is a span under ctx's span.
func work(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS pgxpool_example_users (name text PRIMARY KEY)`); err != nil {
		return nil, err
	}
	defer pool.Exec(context.WithoutCancel(ctx), `DROP TABLE pgxpool_example_users`)

	if _, err := pool.Exec(ctx, `INSERT INTO pgxpool_example_users (name) VALUES ($1)`, "alice"); err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO pgxpool_example_users (name) VALUES ($1)`, "bob")
	b.Queue(`INSERT INTO pgxpool_example_users (name) VALUES ($1)`, "carol")
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"pgxpool_example_users"}, []string{"name"},
		pgx.CopyFromRows([][]any{{"dave"}, {"erin"}})); err != nil {
		return nil, fmt.Errorf("copy: %w", err)
	}

	var names []string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT name FROM pgxpool_example_users WHERE name <> $1 ORDER BY name`, "erin")
		if err != nil {
			return err
		}
		names, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return names, err
}
