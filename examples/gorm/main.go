// Command gorm runs GORM on a pgconnector pool: AutoMigrate, a batch Create, First, a
// transaction and Find, each statement a span under the caller's span, then prints the span
// tree.
//
// postgres.New(postgres.Config{Conn: db}) makes GORM use the given *sql.DB as it is: it opens no
// pgx connection of its own, so DSN, DriverName, PreferSimpleProtocol and the time zone of the
// DSN are not used (session settings belong in the connection string, or in
// pgconnector.WithAfterConnect). gorm.Open pings the pool without a context: the ping makes no
// span (pgconnector.WithPingSpans), the connect it causes is the root span of a trace of its own.
// Use db.WithContext(ctx) for everything else: GORM passes ctx to database/sql, and the
// statements become children of ctx's span.
//
// In examples/ (the examples' module):
//
//	go run ./gorm                               # on a throwaway local PostgreSQL cluster
//	DATABASE_URL=postgres://... go run ./gorm   # creates and drops the table gorm_example_users
package main

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/trace"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/examples/internal/demo"
)

func main() { demo.Main("gorm", run) }

func run(ctx context.Context, dsn string, tp trace.TracerProvider) error {
	c, err := pgconnector.New(dsn, pgconnector.WithTracerProvider(tp))
	if err != nil {
		return err
	}
	db := c.OpenDB()
	defer db.Close()
	gdb, err := gorm.Open(postgres.New(postgres.Config{Conn: db}), &gorm.Config{})
	if err != nil {
		return err
	}
	ctx, span := tp.Tracer("github.com/pgconnector/pgconnector/examples/gorm").Start(ctx, "gorm example")
	defer span.End()
	users, err := work(ctx, gdb)
	if err != nil {
		return err
	}
	for _, u := range users {
		fmt.Printf("user %d: %s <%s>\n", u.ID, u.Name, u.Email)
	}
	return nil
}

type User struct {
	ID    int64
	Name  string `gorm:"not null;uniqueIndex"`
	Email string `gorm:"not null"`
}

func (User) TableName() string { return "gorm_example_users" }

// work creates the table, fills it, reads it back and drops it, all with ctx.
func work(ctx context.Context, gdb *gorm.DB) ([]User, error) {
	db := gdb.WithContext(ctx)
	if err := db.AutoMigrate(&User{}); err != nil {
		return nil, err
	}
	defer gdb.WithContext(context.WithoutCancel(ctx)).Migrator().DropTable(&User{})

	users := []User{{Name: "alice", Email: "alice@example.com"}, {Name: "bob", Email: "bob@example.com"}}
	if err := db.Create(&users).Error; err != nil { // BEGIN, INSERT ... RETURNING "id", COMMIT
		return nil, err
	}
	var alice User
	if err := db.Where("name = ?", "alice").First(&alice).Error; err != nil {
		return nil, err
	}
	err := db.Transaction(func(tx *gorm.DB) error { // tx carries ctx
		return tx.Model(&alice).Update("email", "alice@example.org").Error
	})
	if err != nil {
		return nil, err
	}
	var all []User
	if err := db.Where("name IN ?", []string{"alice", "bob"}).Order("id").Find(&all).Error; err != nil {
		return nil, err
	}
	return all, nil
}
