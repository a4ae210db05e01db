package pgconnector_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/tracing"
)

// passThrough is a pgx.QueryRewriter that is not pgx's own: the connector cannot know what text
// it sends, so the call is not parameterized.
type passThrough struct{}

func (passThrough) RewriteQuery(_ context.Context, _ *pgx.Conn, sql string, args []any) (string, []any, error) {
	return sql, args, nil
}

// Issue 12: a call whose arguments are only pgx options (not values) used to count as
// parameterized and record its text verbatim, password included. Each statement runs on a server
// of its own (it changes the password of its role), with the span name function naming the span
// after the recorded text: neither db.query.text nor the name may hold a literal of a text that
// is not parameterized, nor a parameter value.
func TestQueryTextPgxOptions(t *testing.T) {
	srv := harness.StartT(t, harness.Options{}) // trust: the new password does not matter
	o := newObserved(t, srv.DSN(), pgconnector.WithSpanNameFunc(func(_ context.Context, _, query string) string {
		return "q " + query
	}))
	o.db.SetMaxOpenConns(1) // one connection: PREPARE, then EXECUTE
	ctx := context.Background()
	alter := "ALTER ROLE " + srv.User + " PASSWORD '" + literalSecret + "'"
	alterSanitized := "ALTER ROLE " + srv.User + " PASSWORD ?"
	exec := func(query string, args ...any) func(context.Context, *sql.Conn) error {
		return func(ctx context.Context, c *sql.Conn) error {
			_, err := c.ExecContext(ctx, query, args...)
			return err
		}
	}
	query := func(query string, args ...any) func(context.Context, *sql.Conn) error {
		return func(ctx context.Context, c *sql.Conn) error {
			rows, err := c.QueryContext(ctx, query, args...)
			if err != nil {
				return err
			}
			for rows.Next() {
			}
			return rows.Close()
		}
	}
	const proc = "CREATE OR REPLACE PROCEDURE set_password(p text) LANGUAGE plpgsql AS $body$ " +
		"BEGIN EXECUTE format('ALTER ROLE app PASSWORD %L', p); END $body$"
	doBlock := "DO $$ BEGIN EXECUTE 'ALTER ROLE app PASSWORD ''" + literalSecret + "'''; END $$"
	for _, tt := range []struct {
		name string
		run  func(context.Context, *sql.Conn) error
		want string // db.query.text
		fail bool   // the statement fails
	}{
		{"no argument", exec(alter), alterSanitized, false},
		{"QueryExecModeSimpleProtocol", exec(alter, pgx.QueryExecModeSimpleProtocol), alterSanitized, false},
		{"QueryExecModeExec", exec(alter, pgx.QueryExecModeExec), alterSanitized, false},
		{"QueryExecModeCacheStatement", exec(alter, pgx.QueryExecModeCacheStatement), alterSanitized, false},
		{"QueryExecModeCacheDescribe", exec(alter, pgx.QueryExecModeCacheDescribe), alterSanitized, false},
		{"QueryExecModeDescribeExec", exec(alter, pgx.QueryExecModeDescribeExec), alterSanitized, false},
		{"query QueryExecModeSimpleProtocol", query(alter, pgx.QueryExecModeSimpleProtocol), alterSanitized, false},
		{"query QueryResultFormats", query(alter, pgx.QueryResultFormats{1}), alterSanitized, false},
		{"query QueryResultFormatsByOID", query(alter, pgx.QueryResultFormatsByOID{25: 1}), alterSanitized, false},
		{"query all options", query(alter, pgx.QueryResultFormats{}, pgx.QueryExecModeSimpleProtocol,
			pgx.QueryResultFormatsByOID{}, pgx.NamedArgs{}), alterSanitized, false},
		{"NamedArgs", exec(alter, pgx.NamedArgs{"unused": paramSecret}), alterSanitized, false},
		{"StrictNamedArgs", exec(alter, pgx.StrictNamedArgs{}), alterSanitized, false},
		{"NamedArgs, simple protocol", exec(alter, pgx.QueryExecModeSimpleProtocol, pgx.NamedArgs{}), alterSanitized, false},
		{"another QueryRewriter", exec(alter, passThrough{}), alterSanitized, false},
		// pgx takes QueryResultFormats for a value in an exec, and a value with no placeholder
		// to fill fails the call.
		{"exec QueryResultFormats", exec(alter, pgx.QueryResultFormats{1}), alterSanitized, true},
		{"a value but no placeholder", exec(alter, paramSecret), alterSanitized, true},
		{"a value but no placeholder, simple protocol", exec(alter, pgx.QueryExecModeSimpleProtocol, paramSecret), alterSanitized, true},
		// Literals inside DO, PREPARE, EXECUTE, CREATE and CALL.
		{"DO", exec(doBlock, pgx.QueryExecModeSimpleProtocol), "DO ?", false},
		{"PREPARE", exec("PREPARE pw(text) AS SELECT $1 || '"+literalSecret+"'", pgx.QueryExecModeSimpleProtocol),
			"PREPARE pw(text) AS SELECT $1 || ?", false},
		{"EXECUTE", exec("EXECUTE pw('"+literalSecret+"')", pgx.QueryExecModeExec), "EXECUTE pw(?)", false},
		{"CREATE PROCEDURE", exec(proc, pgx.QueryExecModeSimpleProtocol),
			"CREATE OR REPLACE PROCEDURE set_password(p text) LANGUAGE plpgsql AS ?", false},
		{"CALL", exec("CALL set_password(E'"+literalSecret+"')", pgx.QueryExecModeSimpleProtocol), "CALL set_password(?)", false},
		// Parameterized: kept as written, the values interpolated by pgx recorded nowhere.
		{"values, simple protocol", exec("SELECT $1::text, 'kept'", pgx.QueryExecModeSimpleProtocol, paramSecret),
			"SELECT $1::text, 'kept'", false},
		{"CALL with a value, simple protocol", exec("CALL set_password($1)", pgx.QueryExecModeSimpleProtocol, paramSecret),
			"CALL set_password($1)", false},
		{"query NamedArgs", query("SELECT @v::text, 'kept'", pgx.NamedArgs{"v": paramSecret}), "SELECT @v::text, 'kept'", false},
		{"StrictNamedArgs, simple protocol", exec("SELECT @v::text, 'kept'", pgx.QueryExecModeSimpleProtocol,
			pgx.StrictNamedArgs{"v": paramSecret}), "SELECT @v::text, 'kept'", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := o.db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			spans := o.under(t, func(ctx context.Context) {
				if err := tt.run(ctx, conn); (err != nil) != tt.fail {
					t.Errorf("error %v, want failure %v", err, tt.fail)
				}
			})
			if len(spans) != 1 {
				t.Fatalf("spans %s, want one", spanNames(spans))
			}
			s := spans[0]
			if got := attr(s.Attributes(), semconv.DBQueryTextKey); got != tt.want {
				t.Errorf("db.query.text %q, want %q", got, tt.want)
			}
			if s.Name() != "q "+tt.want {
				t.Errorf("span name %q, want %q", s.Name(), "q "+tt.want)
			}
			checkNoSecrets(t, s)
		})
	}

	// The same through pgx's own tracer, with a batch: pgx hands the tracer each query of a batch
	// after its NamedArgs rewrite, and takes only a QueryRewriter for an option there.
	t.Run("PgxTracer batch", func(t *testing.T) {
		cfg, err := pgx.ParseConfig(srv.DSN())
		if err != nil {
			t.Fatal(err)
		}
		cfg.Tracer = tracing.NewPgxTracer(tracing.StatementConfig{TracerProvider: o.tp, QueryText: true,
			SpanName: func(_ context.Context, _, query string) string { return "q " + query }})
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var batch []sdktrace.ReadOnlySpan
		spans := o.under(t, func(ctx context.Context) {
			b := &pgx.Batch{}
			b.Queue(alter)
			b.Queue(alter, pgx.NamedArgs{"unused": paramSecret})
			b.Queue("SELECT $1::text, 'kept'", paramSecret)
			b.Queue("SELECT @v::text, 'kept'", pgx.NamedArgs{"v": paramSecret})
			if err := conn.SendBatch(ctx, b).Close(); err != nil {
				t.Fatal(err)
			}
		})
		if len(spans) != 1 {
			t.Fatalf("spans %s, want the batch's", spanNames(spans))
		}
		batch = append(batch, spans[0])
		batch = append(batch, o.children(spans[0].SpanContext().SpanID())...)
		want := []string{
			alterSanitized + "; " + alterSanitized + "; SELECT $1::text, 'kept'; SELECT @v::text, 'kept'",
			alterSanitized, alterSanitized, "SELECT $1::text, 'kept'", "SELECT $1::text, 'kept'",
		}
		if len(batch) != len(want) {
			t.Fatalf("spans %s, want the batch's and one per query", spanNames(batch))
		}
		for i, s := range batch {
			if got := attr(s.Attributes(), semconv.DBQueryTextKey); got != want[i] || s.Name() != "q "+want[i] {
				t.Errorf("span %d: %q, db.query.text %q; want %q", i, s.Name(), got, want[i])
			}
			checkNoSecrets(t, s)
		}
	})
}
