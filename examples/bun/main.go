// Command bun runs uptrace/bun on a pgconnector pool (bun.NewDB with pgdialect): create table, a
// batch insert, a select, a transaction and a select with IN, each statement a span under the
// caller's span, then prints the span tree.
//
// bun formats values into the SQL text itself and sends no parameters; the connector records
// such a text with every literal replaced by ?, so no value reaches a span.
//
// In examples/ (the examples' module):
//
//	go run ./bun                               # on a throwaway local PostgreSQL cluster
//	DATABASE_URL=postgres://... go run ./bun   # creates and drops the table bun_example_users
package main

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/examples/internal/demo"
)

func main() { demo.Main("bun", run) }

func run(ctx context.Context, dsn string, tp trace.TracerProvider) error {
	db, err := open(dsn, tp)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, span := tp.Tracer("github.com/pgconnector/pgconnector/examples/bun").Start(ctx, "bun example")
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

// open returns bun on a pool of the connector.
func open(dsn string, tp trace.TracerProvider) (*bun.DB, error) {
	c, err := pgconnector.New(dsn, pgconnector.WithTracerProvider(tp))
	if err != nil {
		return nil, err
	}
	return bun.NewDB(c.OpenDB(), pgdialect.New()), nil
}

type User struct {
	bun.BaseModel `bun:"table:bun_example_users"`
	ID            int64  `bun:",pk,autoincrement"`
	Name          string `bun:",notnull,unique"`
	Email         string `bun:",notnull"`
}

// work creates the table, fills it, reads it back and drops it, all with ctx.
func work(ctx context.Context, db *bun.DB) ([]User, error) {
	if _, err := db.NewCreateTable().Model((*User)(nil)).IfNotExists().Exec(ctx); err != nil {
		return nil, err
	}
	defer db.NewDropTable().Model((*User)(nil)).IfExists().Exec(context.WithoutCancel(ctx))

	users := []User{{Name: "alice", Email: "alice@example.com"}, {Name: "bob", Email: "bob@example.com"}}
	if _, err := db.NewInsert().Model(&users).Exec(ctx); err != nil { // INSERT ... RETURNING "id"
		return nil, err
	}
	var alice User
	if err := db.NewSelect().Model(&alice).Where("name = ?", "alice").Scan(ctx); err != nil {
		return nil, err
	}
	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		alice.Email = "alice@example.org"
		_, err := tx.NewUpdate().Model(&alice).Column("email").WherePK().Exec(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	var all []User
	if err := db.NewSelect().Model(&all).Where("name IN (?)", bun.In([]string{"alice", "bob"})).Order("id").Scan(ctx); err != nil {
		return nil, err
	}
	return all, nil
}
