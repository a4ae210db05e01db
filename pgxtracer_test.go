package pgconnector_test

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/dbconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/tracing"
)

// pgxObserved is a pgx connection config for the shared TLS-off server whose Tracer is a
// tracing.PgxTracer recording to SDK providers.
type pgxObserved struct {
	rec    *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	cfg    *pgx.ConnConfig
}

func newPgxObserved(t *testing.T, dsn string) *pgxObserved {
	t.Helper()
	rec, tp := newRecorder()
	reader := sdkmetric.NewManualReader()
	cfg := mustParsePgx(t, dsn)
	cfg.Tracer = tracing.NewPgxTracer(tracing.StatementConfig{
		TracerProvider: tp,
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		QueryText:      true, // the connector's default
	})
	return &pgxObserved{rec: rec, tp: tp, reader: reader, cfg: cfg}
}

func (o *pgxObserved) connect(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.ConnectConfig(context.Background(), o.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// under runs f in a context holding a new caller span and returns the spans other than connects
// that are its children, in the order they ended.
func (o *pgxObserved) under(t *testing.T, f func(ctx context.Context)) []sdktrace.ReadOnlySpan {
	t.Helper()
	ctx, caller := o.tp.Tracer("test").Start(context.Background(), "caller")
	f(ctx)
	caller.End()
	return o.children(caller.SpanContext().SpanID())
}

func (o *pgxObserved) children(parent trace.SpanID) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range o.rec.Ended() {
		if s.Parent().SpanID() == parent && s.Name() != tracing.SpanConnect {
			out = append(out, s)
		}
	}
	return out
}

// untracedDB is a pool of pgx's own connector, for setting tables up without spans or
// measurements.
func untracedDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db := sql.OpenDB(stdlib.GetConnector(*mustParsePgx(t, dsn)))
	t.Cleanup(func() { db.Close() })
	return db
}

// The statement spans of a pgx connection: the same as database/sql's (TestStatementSpans),
// plus batches and CopyFrom; Begin, Commit and Rollback are statements in pgx.
func TestPgxTracerSpans(t *testing.T) {
	plain, _ := servers(t)
	o := newPgxObserved(t, plain.DSN())
	conn := o.connect(t)
	table := newTable(t, untracedDB(t, plain.DSN()))
	base := connAttrs(plain)
	fails := func(code string) []string {
		return []string{string(semconv.ErrorTypeKey), code, string(semconv.DBResponseStatusCodeKey), code}
	}
	insert := "insert into " + table + " (id, note) values ($1, $2)"
	selectByID := "select note from " + table + " where id = $1"
	count := "select count(*) from " + table

	for _, tt := range []struct {
		name string
		run  func(t *testing.T, ctx context.Context)
		want []stmtSpan
	}{
		{
			name: "exec with arguments",
			run: func(t *testing.T, ctx context.Context) {
				if _, err := conn.Exec(ctx, insert, 1, paramSecret); err != nil {
					t.Fatal(err)
				}
			},
			want: []stmtSpan{{"INSERT " + table, with(base, "INSERT", insert, string(semconv.DBCollectionNameKey), table, string(tracing.RowsAffectedKey), "1"), ""}},
		},
		{
			name: "query: the span ends when the rows are closed",
			run: func(t *testing.T, ctx context.Context) {
				rows, err := conn.Query(ctx, "select i from generate_series(1, $1::int) i", 3)
				if err != nil {
					t.Fatal(err)
				}
				defer rows.Close()
				n := 0
				for rows.Next() {
					n++
					if n == 2 && len(o.children(trace.SpanContextFromContext(ctx).SpanID())) != 0 {
						t.Error("the query span ended before its rows were read")
					}
				}
				if err := rows.Err(); err != nil || n != 3 {
					t.Fatalf("%d rows, %v", n, err)
				}
			},
			want: []stmtSpan{{"SELECT", with(base, "SELECT", "select i from generate_series(1, $1::int) i", string(semconv.DBResponseReturnedRowsKey), "3"), ""}},
		},
		{
			name: "query row",
			run: func(t *testing.T, ctx context.Context) {
				var s string
				if err := conn.QueryRow(ctx, "SELECT $1::text", paramSecret).Scan(&s); err != nil || s != paramSecret {
					t.Fatalf("%q, %v", s, err)
				}
			},
			want: []stmtSpan{{"SELECT", with(base, "SELECT", "SELECT $1::text", string(semconv.DBResponseReturnedRowsKey), "1"), ""}},
		},
		{
			name: "text without parameters: literals replaced",
			run: func(t *testing.T, ctx context.Context) {
				var s string
				var n int
				if err := conn.QueryRow(ctx, "select '"+literalSecret+"', 42").Scan(&s, &n); err != nil {
					t.Fatal(err)
				}
			},
			want: []stmtSpan{{"SELECT", with(base, "SELECT", "select ?, ?", string(semconv.DBResponseReturnedRowsKey), "1"), ""}},
		},
		{
			name: "several statements: no operation",
			run: func(t *testing.T, ctx context.Context) {
				if _, err := conn.Exec(ctx, "update "+table+" set note = 'x' where id = 0; delete from "+table+" where id = 0"); err != nil {
					t.Fatal(err)
				}
			},
			want: []stmtSpan{{"UPDATE " + table + " DELETE " + table, with(base, "", "update "+table+" set note = ? where id = ?; delete from "+table+" where id = ?", string(tracing.RowsAffectedKey), "0"), ""}},
		},
		{
			name: "prepared statement, run by its name",
			run: func(t *testing.T, ctx context.Context) {
				if _, err := conn.Prepare(ctx, "by_id", selectByID); err != nil {
					t.Fatal(err)
				}
				var note string
				if err := conn.QueryRow(ctx, "by_id", 1).Scan(&note); err != nil {
					t.Fatal(err)
				}
				if _, err := conn.Exec(ctx, "by_id", 2); err != nil {
					t.Fatal(err)
				}
			},
			want: []stmtSpan{
				{"PREPARE SELECT " + table, with(base, "PREPARE", selectByID, string(semconv.DBCollectionNameKey), table), ""},
				{"SELECT " + table, with(base, "SELECT", selectByID, string(semconv.DBCollectionNameKey), table, string(semconv.DBResponseReturnedRowsKey), "1"), ""},
				{"SELECT " + table, with(base, "SELECT", selectByID, string(semconv.DBCollectionNameKey), table, string(semconv.DBResponseReturnedRowsKey), "0"), ""},
			},
		},
		{
			name: "transaction committed",
			run: func(t *testing.T, ctx context.Context) {
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, insert, 2, "two"); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			},
			want: []stmtSpan{
				{"BEGIN", with(base, "BEGIN", "begin"), ""},
				{"INSERT " + table, with(base, "INSERT", insert, string(semconv.DBCollectionNameKey), table, string(tracing.RowsAffectedKey), "1"), ""},
				{"COMMIT", with(base, "COMMIT", "commit"), ""},
			},
		},
		{
			name: "transaction rolled back",
			run: func(t *testing.T, ctx context.Context) {
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := tx.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
			},
			want: []stmtSpan{{"BEGIN", with(base, "BEGIN", "begin"), ""}, {"ROLLBACK", with(base, "ROLLBACK", "rollback"), ""}},
		},
		{
			name: "server error",
			run: func(t *testing.T, ctx context.Context) {
				if _, err := conn.Exec(ctx, insert, 1, "duplicate"); err == nil {
					t.Fatal("no error")
				}
			},
			want: []stmtSpan{{"INSERT " + table, with(base, "INSERT", insert, append([]string{string(semconv.DBCollectionNameKey), table}, fails("23505")...)...), "23505"}},
		},
		{
			name: "server error quoting a parameter value",
			run: func(t *testing.T, ctx context.Context) {
				err := conn.QueryRow(ctx, "select $1::int", paramSecret).Scan(new(int))
				if err == nil || !strings.Contains(err.Error(), paramSecret) {
					t.Fatalf("error %v, want one quoting the value", err)
				}
			},
			want: []stmtSpan{{"SELECT", with(base, "SELECT", "select $1::int", fails("22P02")...), "22P02"}},
		},
		{
			name: "error while reading the rows",
			run: func(t *testing.T, ctx context.Context) {
				rows, err := conn.Query(ctx, "select 1/(3-i) from generate_series(1, 5) i")
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
				}
				if err := rows.Err(); err == nil {
					t.Fatal("no error")
				}
				rows.Close()
			},
			want: []stmtSpan{{"SELECT", with(base, "SELECT", "select ?/(?-i) from generate_series(?, ?) i", fails("22012")...), "22012"}},
		},
		{
			name: "batch",
			run: func(t *testing.T, ctx context.Context) {
				b := &pgx.Batch{}
				b.Queue(insert, 3, paramSecret)
				b.Queue(insert, 4, "four")
				b.Queue(count)
				if err := conn.SendBatch(ctx, b).Close(); err != nil {
					t.Fatal(err)
				}
			},
			want: []stmtSpan{{"BATCH", with(base, "BATCH", insert+"; "+insert+"; "+count,
				string(semconv.DBOperationBatchSizeKey), "3", string(semconv.DBCollectionNameKey), table), ""}}, // one table, summaries differ
		},
		{
			name: "batch failing",
			run: func(t *testing.T, ctx context.Context) {
				b := &pgx.Batch{}
				b.Queue(insert, 5, "five")
				b.Queue(insert, 5, "again")
				if err := conn.SendBatch(ctx, b).Close(); err == nil {
					t.Fatal("no error")
				}
			},
			want: []stmtSpan{{"BATCH INSERT " + table, with(base, "BATCH INSERT", insert,
				append([]string{string(semconv.DBOperationBatchSizeKey), "2", string(semconv.DBCollectionNameKey), table}, fails("23505")...)...), "23505"}},
		},
		{
			name: "copy",
			run: func(t *testing.T, ctx context.Context) {
				rows := [][]any{{10, paramSecret}, {11, "eleven"}}
				if n, err := conn.CopyFrom(ctx, pgx.Identifier{table}, []string{"id", "note"}, pgx.CopyFromRows(rows)); err != nil || n != 2 {
					t.Fatalf("%d rows, %v", n, err)
				}
			},
			want: []stmtSpan{{"COPY " + table, with(base, "COPY", "", string(semconv.DBCollectionNameKey), table, string(tracing.RowsAffectedKey), "2"), ""}},
		},
		{
			name: "copy failing",
			run: func(t *testing.T, ctx context.Context) {
				rows := [][]any{{10, "again"}}
				if _, err := conn.CopyFrom(ctx, pgx.Identifier{"public", table}, []string{"id", "note"}, pgx.CopyFromRows(rows)); err == nil {
					t.Fatal("no error")
				}
			},
			want: []stmtSpan{{"COPY public." + table, with(base, "COPY", "", append([]string{string(semconv.DBCollectionNameKey), "public." + table}, fails("23505")...)...), "23505"}},
		},
		{
			name: "canceled",
			run: func(t *testing.T, ctx context.Context) {
				other := o.connect(t) // a connection pgx closes when its context ends mid-statement
				cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
				if _, err := other.Exec(cctx, "select pg_sleep(5)"); err == nil {
					t.Fatal("no error")
				}
			},
			want: []stmtSpan{{"SELECT", with(base, "SELECT", "select pg_sleep(?)",
				string(semconv.ErrorTypeKey), tracing.ErrorTypeTimeout), tracing.ErrorTypeTimeout}},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := o.under(t, func(ctx context.Context) { tt.run(t, ctx) })
			checkStmtSpans(t, got, tt.want)
			if !strings.HasPrefix(tt.name, "batch") || len(got) != 1 {
				return
			}
			// Each query of a batch: an INTERNAL child of the batch span, attributed as its own
			// statement span would be.
			queries := o.children(got[0].SpanContext().SpanID())
			var names []string
			for _, q := range queries {
				names = append(names, q.Name())
				if q.SpanKind() != trace.SpanKindInternal {
					t.Errorf("batch query %s: kind %v, want internal", q.Name(), q.SpanKind())
				}
				checkNoSecrets(t, q)
			}
			want := []string{"INSERT " + table, "INSERT " + table, "SELECT " + table}
			if tt.name != "batch" {
				want = want[:2]
			}
			if !slices.Equal(names, want) {
				t.Errorf("batch queries %v, want %v", names, want)
			}
		})
	}

	d := points(t, collect(t, o.reader)[dbconv.ClientOperationDuration{}.Name()])
	op := func(name string, kv ...string) string {
		m := map[string]string{
			"db.system.name": "postgresql", "db.namespace": plain.Database,
			"server.address": plain.Host, "server.port": strconv.Itoa(plain.Port),
		}
		if name != "" {
			m["db.operation.name"] = name
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(m)) {
			parts = append(parts, k+"="+m[k])
		}
		return strings.Join(parts, ",")
	}
	want := map[string]float64{
		op("INSERT"):                          2,
		op("SELECT"):                          5,
		op(""):                                1,
		op("PREPARE"):                         1,
		op("BEGIN"):                           2,
		op("COMMIT"):                          1,
		op("ROLLBACK"):                        1,
		op("INSERT", fails("23505")...):       1,
		op("SELECT", fails("22P02")...):       1,
		op("SELECT", fails("22012")...):       1,
		op("BATCH"):                           1,
		op("BATCH INSERT", fails("23505")...): 1,
		op("COPY"):                            1,
		op("COPY", fails("23505")...):         1,
		op("SELECT", "error.type", "timeout"): 1,
	}
	if !maps.Equal(d, want) {
		t.Errorf("db.client.operation.duration:\n %v\nwant\n %v", d, want)
	}
}

// The same statements through database/sql on a Connector and through pgx with PgxTracer give
// the same spans (name, kind, attributes, status, parent) and the same measurements.
func TestPgxTracerMatchesDatabaseSQL(t *testing.T) {
	plain, _ := servers(t)
	table := newTable(t, untracedDB(t, plain.DSN()))
	insert := "insert into " + table + " (id, note) values ($1, $2)"
	type step struct {
		how   string // exec, row, rows, prepare
		query string
		args  []any
	}
	// dests are the destinations of a row of one column, or of two for the literal one.
	dests := func(s step) []any {
		if strings.Contains(s.query, ", 42") {
			return []any{new(any), new(any)}
		}
		return []any{new(any)}
	}
	steps := []step{
		{"exec", insert, []any{1, paramSecret}},
		{"exec", insert, []any{1, "duplicate"}},
		{"row", "select $1::int + 1", []any{1}},
		{"row", "select '" + literalSecret + "', 42", nil},
		{"row", "select $1::int", []any{paramSecret}},
		{"rows", "select i from generate_series(1, $1::int) i", []any{3}},
		{"rows", "select 1/(3-i) from generate_series(1, 5) i", nil},
		{"exec", "update " + table + " set note = 'x' where id = 0; delete from " + table + " where id = 0", nil},
		{"exec", "delete from " + table + " where id = 1", nil},
		{"prepare", "select note from " + table + " where id = $1", []any{1}},
		{"exec", "selec 1", nil},
	}

	o := newObserved(t, plain.DSN())
	sqlConn, err := o.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer sqlConn.Close()
	viaSQL := o.under(t, func(ctx context.Context) {
		for _, s := range steps {
			switch s.how {
			case "exec":
				sqlConn.ExecContext(ctx, s.query, s.args...)
			case "row":
				sqlConn.QueryRowContext(ctx, s.query, s.args...).Scan(dests(s)...)
			case "rows":
				if rows, err := sqlConn.QueryContext(ctx, s.query, s.args...); err == nil {
					for rows.Next() {
					}
					rows.Close()
				}
			case "prepare":
				stmt, err := sqlConn.PrepareContext(ctx, s.query)
				if err != nil {
					t.Fatal(err)
				}
				stmt.QueryRowContext(ctx, s.args...).Scan(new(any))
				stmt.Close()
			}
		}
	})

	p := newPgxObserved(t, plain.DSN())
	conn := p.connect(t)
	viaPgx := p.under(t, func(ctx context.Context) {
		for i, s := range steps {
			switch s.how {
			case "exec":
				conn.Exec(ctx, s.query, s.args...)
			case "row":
				conn.QueryRow(ctx, s.query, s.args...).Scan(dests(s)...)
			case "rows":
				if rows, err := conn.Query(ctx, s.query, s.args...); err == nil {
					for rows.Next() {
					}
					rows.Close()
				}
			case "prepare":
				name := fmt.Sprintf("s%d", i)
				if _, err := conn.Prepare(ctx, name, s.query); err != nil {
					t.Fatal(err)
				}
				conn.QueryRow(ctx, name, s.args...).Scan(new(any))
			}
		}
	})

	describe := func(spans []sdktrace.ReadOnlySpan) []string {
		var out []string
		for _, s := range spans {
			attrs := map[string]string{}
			for _, kv := range s.Attributes() {
				attrs[string(kv.Key)] = kv.Value.Emit()
			}
			out = append(out, fmt.Sprintf("%s %v %v %v %q", s.Name(), s.SpanKind(), attrs, s.Status().Code, s.Status().Description))
		}
		return out
	}
	sqlSpans, pgxSpans := describe(viaSQL), describe(viaPgx)
	if len(sqlSpans) != len(steps)+1 { // the prepare step is two spans
		t.Errorf("%d database/sql spans for %d steps", len(sqlSpans), len(steps))
	}
	for i := range max(len(sqlSpans), len(pgxSpans)) {
		var a, b string
		if i < len(sqlSpans) {
			a = sqlSpans[i]
		}
		if i < len(pgxSpans) {
			b = pgxSpans[i]
		}
		if a != b {
			t.Errorf("span %d:\n database/sql %s\n pgx          %s", i, a, b)
		}
	}
	for _, s := range viaPgx {
		checkNoSecrets(t, s)
	}

	duration := dbconv.ClientOperationDuration{}.Name()
	sqlPoints, pgxPoints := points(t, collect(t, o.reader)[duration]), points(t, collect(t, p.reader)[duration])
	if !maps.Equal(sqlPoints, pgxPoints) || len(pgxPoints) == 0 {
		t.Errorf("%s:\n database/sql %v\n pgx          %v", duration, sqlPoints, pgxPoints)
	}
}

// A pgxpool whose ConnConfig has the tracer: statements are children of the caller's span, a
// new connection is a postgresql.connect span, and the measurements are recorded.
func TestPgxTracerPool(t *testing.T) {
	plain, _ := servers(t)
	o := newPgxObserved(t, plain.DSN())
	cfg, err := pgxpool.ParseConfig(plain.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = o.cfg.Tracer
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	base := connAttrs(plain)
	got := o.under(t, func(ctx context.Context) {
		if err := pool.QueryRow(ctx, "select $1::int + 1", 1).Scan(new(int)); err != nil {
			t.Fatal(err)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "select pg_sleep(0)"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		b := &pgx.Batch{}
		b.Queue("select 1")
		b.Queue("select 2")
		if err := pool.SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
	})
	checkStmtSpans(t, got, []stmtSpan{
		{"SELECT", with(base, "SELECT", "select $1::int + 1", string(semconv.DBResponseReturnedRowsKey), "1"), ""},
		{"BEGIN", with(base, "BEGIN", "begin"), ""},
		{"SELECT", with(base, "SELECT", "select pg_sleep(?)", string(semconv.DBResponseReturnedRowsKey), "1"), ""},
		{"COMMIT", with(base, "COMMIT", "commit"), ""},
		{"BATCH SELECT", with(base, "BATCH SELECT", "select ?", string(semconv.DBOperationBatchSizeKey), "2"), ""},
	})
	var connects int
	for _, s := range o.rec.Ended() {
		if s.Name() != tracing.SpanConnect {
			continue
		}
		connects++
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if !maps.Equal(attrs, base) || s.SpanKind() != trace.SpanKindClient {
			t.Errorf("connect span: kind %v, attributes %v, want client, %v", s.SpanKind(), attrs, base)
		}
	}
	if connects == 0 {
		t.Error("no connect span for the pool's connection")
	}
	d := points(t, collect(t, o.reader)[dbconv.ClientOperationDuration{}.Name()])
	sel := fmt.Sprintf("db.namespace=%s,db.operation.name=SELECT,db.system.name=postgresql,server.address=%s,server.port=%d", plain.Database, plain.Host, plain.Port)
	if d[sel] != 2 || len(d) != 4 {
		t.Errorf("db.client.operation.duration %v, want 2 SELECT and BEGIN, COMMIT, BATCH SELECT", d)
	}
}

// The tracer on a Connector's connections (set by WithBeforeConnect, statement spans of the
// interceptor off): the connector's connect span is the only one, with its steps, and the
// statements, through database/sql and on PgxConn's *pgx.Conn, are the pgx tracer's.
func TestPgxTracerOnConnectorConnections(t *testing.T) {
	plain, _ := servers(t)
	p := newPgxObserved(t, plain.DSN())
	table := newTable(t, untracedDB(t, plain.DSN()))
	c := newConnector(t, plain.DSN(), pgconnector.WithTracerProvider(p.tp), pgconnector.WithStatementSpans(false),
		pgconnector.WithBeforeConnect(func(_ context.Context, cfg *pgx.ConnConfig) error {
			cfg.Tracer = p.cfg.Tracer
			return nil
		}))
	db := sql.OpenDB(c)
	defer db.Close()
	ctx, caller := p.tp.Tracer("test").Start(context.Background(), "caller")
	if err := db.QueryRowContext(ctx, "select $1::int + 1", 1).Scan(new(int)); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = pgconnector.PgxConn(conn, func(pc *pgx.Conn) error {
		_, err := pc.CopyFrom(ctx, pgx.Identifier{table}, []string{"id"}, pgx.CopyFromRows([][]any{{1}}))
		return err
	})
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	caller.End()

	var connects []sdktrace.ReadOnlySpan
	for _, s := range p.rec.Ended() {
		if s.Name() == tracing.SpanConnect {
			connects = append(connects, s)
		}
	}
	if len(connects) != 1 {
		t.Fatalf("%d connect spans, want the connector's only", len(connects))
	}
	if steps := p.children(connects[0].SpanContext().SpanID()); !slices.ContainsFunc(steps, func(s sdktrace.ReadOnlySpan) bool {
		return s.Name() == tracing.SpanStartup
	}) {
		t.Errorf("the connect span has no startup step: it is not the connector's (%v)", spanNames(steps))
	}
	base := connAttrs(plain)
	checkStmtSpans(t, p.children(caller.SpanContext().SpanID()), []stmtSpan{
		{"SELECT", with(base, "SELECT", "select $1::int + 1", string(semconv.DBResponseReturnedRowsKey), "1"), ""},
		{"COPY " + table, with(base, "COPY", "", string(semconv.DBCollectionNameKey), table, string(tracing.RowsAffectedKey), "1"), ""},
	})
}
