package main

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/examples/internal/spancheck"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// The harness removes what it made (clusters, the initdb template) once the tests ran.
func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

// TestStatementSpans runs the example's GORM calls under a span of the test and checks the spans
// they made: each statement a child of the test's span with the SQL GORM generated ($n
// placeholders, no value), and every connection the server saw one the connector opened (GORM
// opened none of its own).
func TestStatementSpans(t *testing.T) {
	pg := harness.StartT(t, harness.Options{})
	tp, exp := spancheck.New(t)
	mark := pg.LogMark()
	c, err := pgconnector.New(pg.DSN(), pgconnector.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	db := c.OpenDB()
	defer db.Close()
	gdb, err := gorm.Open(postgres.New(postgres.Config{Conn: db}), &gorm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if pool, err := gdb.DB(); err != nil || pool != db {
		t.Fatalf("gorm's pool is %p (%v), want the connector's %p", pool, err, db)
	}

	// gorm.Open's ping has no context: it makes no span (pgconnector.WithPingSpans), and the
	// connect it caused is a root span.
	opened := exp.GetSpans()
	if s := spancheck.Named(opened, "postgresql.connect"); len(s) != 1 || s[0].Parent.IsValid() {
		t.Errorf("gorm.Open: want one root span postgresql.connect, got %d", len(s))
	}
	if s := spancheck.Named(opened, "PING"); len(s) != 0 {
		t.Errorf("gorm.Open: %d PING spans, want none", len(s))
	}
	exp.Reset()

	ctx, parent := tp.Tracer("test").Start(t.Context(), "caller")
	users, err := work(ctx, gdb)
	parent.End()
	if err != nil {
		t.Fatal(err)
	}
	if len(users) != 2 || users[0].Email != "alice@example.org" || users[1].Name != "bob" {
		t.Errorf("read back %+v", users)
	}

	spans := exp.GetSpans()
	stmts := spancheck.Under(t, spans, parent.SpanContext(),
		// AutoMigrate: is the table there, create it and its index
		spancheck.Stmt{Op: "SELECT", Summary: "SELECT information_schema.tables", Text: `SELECT count\(\*\) FROM information_schema.tables WHERE table_schema = CURRENT_SCHEMA\(\) AND table_name = \$1 AND table_type = \$2`},
		spancheck.Stmt{Op: "CREATE", Summary: `CREATE TABLE "gorm_example_users"`, Text: `CREATE TABLE "gorm_example_users" \(.*\)`},
		spancheck.Stmt{Op: "CREATE", Summary: `CREATE INDEX "idx_gorm_example_users_name"`, Text: `CREATE UNIQUE INDEX IF NOT EXISTS "idx_gorm_example_users_name" ON "gorm_example_users" \("name"\)`},
		spancheck.Stmt{Op: "BEGIN"},
		spancheck.Stmt{Op: "INSERT", Summary: `INSERT "gorm_example_users"`, Text: `INSERT INTO "gorm_example_users" \("name","email"\) VALUES \(\$1,\$2\),\(\$3,\$4\) RETURNING "id"`},
		spancheck.Stmt{Op: "COMMIT"},
		spancheck.Stmt{Op: "SELECT", Summary: `SELECT "gorm_example_users"`, Text: `SELECT \* FROM "gorm_example_users" WHERE name = \$1 ORDER BY "gorm_example_users"."id" LIMIT \$2`},
		spancheck.Stmt{Op: "BEGIN"},
		spancheck.Stmt{Op: "UPDATE", Summary: `UPDATE "gorm_example_users"`, Text: `UPDATE "gorm_example_users" SET "email"=\$1 WHERE "id" = \$2`},
		spancheck.Stmt{Op: "COMMIT"},
		spancheck.Stmt{Op: "SELECT", Text: `SELECT \* FROM "gorm_example_users" WHERE name IN \(\$1,\$2\) ORDER BY id`},
		spancheck.Stmt{Op: "DROP", Summary: `DROP TABLE "gorm_example_users"`, Text: `DROP TABLE IF EXISTS "gorm_example_users" CASCADE`},
	)
	t.Logf("statement spans:\n%s", spancheck.List(stmts))
	spancheck.NoValues(t, spans, "alice", "bob")

	// Every connection the server saw came from the connector: as many as its connect spans say
	// they opened.
	opened = append(opened, spans...)
	sockets := 0
	for _, s := range spancheck.Named(opened, "postgresql.connect") {
		n, _ := strconv.Atoi(spancheck.Attr(s, "pgconnector.attempts"))
		sockets += n
	}
	if got, err := pg.ConnectionsSince(mark); err != nil || got != sockets {
		t.Errorf("the server saw %d connections (%v); the connector's connect spans opened %d", got, err, sockets)
	}
}

// TestTimeZone: GORM reads TimeZone= from a DSN it opens itself (its session time zone, and
// timestamp columns scanned in that location); with the connector's *sql.DB it reads no DSN, and
// a timestamp comes back in UTC. The connection string's timezone key and WithAfterConnect's
// scan location (docs/integrations.md) give what GORM's own DSN gives.
func TestTimeZone(t *testing.T) {
	pg := harness.StartT(t, harness.Options{})
	const zone = "Asia/Tokyo"
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	read := func(t *testing.T, dialector gorm.Dialector) (time.Time, string) {
		t.Helper()
		gdb, err := gorm.Open(dialector, &gorm.Config{})
		if err != nil {
			t.Fatal(err)
		}
		db, _ := gdb.DB()
		defer db.Close()
		var ts time.Time
		var tz string
		if err := gdb.WithContext(t.Context()).Raw(`SELECT '2024-01-02 03:04:05'::timestamp`).Scan(&ts).Error; err != nil {
			t.Fatal(err)
		}
		if err := gdb.WithContext(t.Context()).Raw(`SHOW TimeZone`).Scan(&tz).Error; err != nil {
			t.Fatal(err)
		}
		return ts, tz
	}
	open := func(t *testing.T, dsn string, opts ...pgconnector.Option) gorm.Dialector {
		c, err := pgconnector.New(dsn, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return postgres.New(postgres.Config{Conn: c.OpenDB()})
	}

	// GORM's own DSN, the reference.
	want, wantTZ := read(t, postgres.Open(pg.DSN("TimeZone="+zone)))
	if want.Location().String() != zone || want.Hour() != 3 || wantTZ != zone {
		t.Fatalf("GORM's own DSN: %v in %v, session %q; want 03:04:05 in %s", want, want.Location(), wantTZ, zone)
	}
	// The connector's *sql.DB: GORM sees no DSN, the timestamp is UTC's.
	if got, _ := read(t, open(t, pg.DSN("TimeZone="+zone))); got.Location() != time.UTC {
		t.Errorf("without WithAfterConnect: %v in %v, want UTC (GORM reads no DSN then)", got, got.Location())
	}
	// The fix.
	got, gotTZ := read(t, open(t, pg.DSN("timezone="+zone), pgconnector.WithAfterConnect(func(_ context.Context, conn *pgx.Conn) error {
		conn.TypeMap().RegisterType(&pgtype.Type{Name: "timestamp", OID: pgtype.TimestampOID, Codec: &pgtype.TimestampCodec{ScanLocation: loc}})
		return nil
	})))
	if !got.Equal(want) || got.Location().String() != zone || gotTZ != wantTZ {
		t.Errorf("with WithAfterConnect: %v in %v, session %q; GORM's own DSN: %v in %v, session %q", got, got.Location(), gotTZ, want, want.Location(), wantTZ)
	}
}
