package pgconnector_test

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/dbconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/tracing"
)

// paramSecret is a parameter value: it must never appear in a span or a metric.
const paramSecret = "param-s3cr3t-value"

// literalSecret is a literal of a statement that is not parameterized: it must not appear either.
const literalSecret = "literal-s3cr3t-value"

// stmtSpan is what a test expects of one statement span: its name, its attributes (all of
// them, compared exactly, values as Emit writes them) and, for a failure, the status
// description.
type stmtSpan struct {
	name  string
	attrs map[string]string
	fail  string // status description of a failed span; "" for status Unset
}

// observed is a connector on the shared TLS-off server with recording tracer and meter
// providers, and its sql.DB.
type observed struct {
	rec    *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
	c      *pgconnector.Connector
	db     *sql.DB
}

func newObserved(t *testing.T, dsn string, opts ...pgconnector.Option) *observed {
	t.Helper()
	rec, tp := newRecorder()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	opts = append([]pgconnector.Option{pgconnector.WithTracerProvider(tp), pgconnector.WithMeterProvider(mp)}, opts...)
	c := newConnector(t, dsn, opts...)
	db := c.OpenDB()
	t.Cleanup(func() { db.Close() })
	return &observed{rec: rec, tp: tp, reader: reader, mp: mp, c: c, db: db}
}

// under runs f in a context holding a new caller span and returns the statement spans (every
// span but the connect spans) that are its children, in the order they ended.
func (o *observed) under(t *testing.T, f func(ctx context.Context)) []sdktrace.ReadOnlySpan {
	t.Helper()
	ctx, parent := o.tp.Tracer("test").Start(context.Background(), "caller")
	f(ctx)
	parent.End()
	return o.children(parent.SpanContext().SpanID())
}

func (o *observed) children(parent trace.SpanID) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range o.rec.Ended() {
		if s.Parent().SpanID() == parent && s.Name() != tracing.SpanConnect {
			out = append(out, s)
		}
	}
	return out
}

// connAttrs is the attributes every statement span of a connection to srv has.
func connAttrs(srv *harness.Postgres) map[string]string {
	return map[string]string{
		string(semconv.DBSystemNameKey):  "postgresql",
		string(semconv.DBNamespaceKey):   srv.Database,
		string(semconv.ServerAddressKey): srv.Host,
		string(semconv.ServerPortKey):    strconv.Itoa(srv.Port),
		string(semconv.UserNameKey):      srv.User,
	}
}

// with returns base plus op (db.operation.name, if not "") and text (db.query.text, if not "").
func with(base map[string]string, op, text string, more ...string) map[string]string {
	m := maps.Clone(base)
	if op != "" {
		m[string(semconv.DBOperationNameKey)] = op
	}
	if text != "" {
		m[string(semconv.DBQueryTextKey)] = text
	}
	for i := 0; i+1 < len(more); i += 2 {
		m[more[i]] = more[i+1]
	}
	return m
}

// checkStmtSpans checks the statement spans got against want. A statement span is named by its
// db.query.summary: the attributes of want get the name as db.query.summary unless they hold one
// (an empty one: none) or the span is one of a database/sql call without a text (BEGIN, COMMIT,
// ROLLBACK, PING, RESET_SESSION and no db.query.text), which has none.
func checkStmtSpans(t *testing.T, got []sdktrace.ReadOnlySpan, want []stmtSpan) {
	t.Helper()
	want = slices.Clone(want)
	for i, w := range want {
		w.attrs = maps.Clone(w.attrs)
		switch summary, ok := w.attrs[string(semconv.DBQuerySummaryKey)]; {
		case ok && summary == "":
			delete(w.attrs, string(semconv.DBQuerySummaryKey))
		case !ok && (w.attrs[string(semconv.DBQueryTextKey)] != "" || !slices.Contains([]string{"BEGIN", "COMMIT", "ROLLBACK", "PING", "RESET_SESSION"}, w.name)):
			w.attrs[string(semconv.DBQuerySummaryKey)] = w.name
		}
		want[i] = w
	}
	var names, wantNames []string
	for _, s := range got {
		names = append(names, s.Name())
	}
	for _, w := range want {
		wantNames = append(wantNames, w.name)
	}
	if !slices.Equal(names, wantNames) {
		t.Fatalf("spans %v, want %v", names, wantNames)
	}
	for i, s := range got {
		w := want[i]
		if s.SpanKind() != trace.SpanKindClient {
			t.Errorf("%s: kind %v, want client", s.Name(), s.SpanKind())
		}
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if !maps.Equal(attrs, w.attrs) {
			t.Errorf("%s: attributes\n %v\nwant\n %v", s.Name(), attrs, w.attrs)
		}
		wantCode := codes.Unset
		if w.fail != "" {
			wantCode = codes.Error
		}
		if st := s.Status(); st.Code != wantCode || st.Description != w.fail {
			t.Errorf("%s: status %v %q, want %v %q", s.Name(), st.Code, st.Description, wantCode, w.fail)
		}
		if s.InstrumentationScope().Name != tracing.ScopeName {
			t.Errorf("%s: scope %q", s.Name(), s.InstrumentationScope().Name)
		}
		checkNoSecrets(t, s)
	}
}

// checkNoSecrets fails if a span holds a parameter value or a literal anywhere: attributes,
// events, status.
func checkNoSecrets(t *testing.T, s sdktrace.ReadOnlySpan) {
	t.Helper()
	for _, text := range spanTexts(s) {
		if strings.Contains(text, paramSecret) || strings.Contains(text, literalSecret) {
			t.Errorf("span %s holds a secret: %q", s.Name(), text)
		}
	}
}

// spanTexts returns every text a span carries: its name, status, attribute values, event names
// and event attribute values.
func spanTexts(s sdktrace.ReadOnlySpan) []string {
	texts := []string{s.Name(), s.Status().Description}
	for _, kv := range s.Attributes() {
		texts = append(texts, kv.Value.Emit())
	}
	for _, ev := range s.Events() {
		texts = append(texts, ev.Name)
		for _, kv := range ev.Attributes {
			texts = append(texts, kv.Value.Emit())
		}
	}
	return texts
}

// newTable creates a table of the shared server for one test and drops it at the end.
func newTable(t *testing.T, db *sql.DB) string {
	t.Helper()
	name := fmt.Sprintf("obs_%d", time.Now().UnixNano())
	if _, err := db.Exec("create table " + name + " (id int primary key, note text)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Exec("drop table " + name) })
	return name
}

func TestStatementSpans(t *testing.T) {
	plain, _ := servers(t)
	o := newObserved(t, plain.DSN())
	table := newTable(t, o.db)
	base := connAttrs(plain)
	fails := func(code string) []string {
		return []string{string(semconv.ErrorTypeKey), code, string(semconv.DBResponseStatusCodeKey), code}
	}
	insert := "insert into " + table + " (id, note) values ($1, $2)"

	for _, tt := range []struct {
		name string
		run  func(t *testing.T, ctx context.Context, db *sql.DB)
		want []stmtSpan
	}{
		{
			name: "exec with arguments",
			run: func(t *testing.T, ctx context.Context, db *sql.DB) {
				mustExec(t, ctx, db, insert, 1, paramSecret)
			},
			want: []stmtSpan{{"INSERT " + table, with(base, "INSERT", insert, string(semconv.DBCollectionNameKey), table, string(tracing.RowsAffectedKey), "1"), ""}},
		},
		{
			name: "query: the span ends when the rows are closed",
			run: func(t *testing.T, ctx context.Context, db *sql.DB) {
				rows, err := db.QueryContext(ctx, "select i from generate_series(1, $1::int) i", 3)
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
			run: func(t *testing.T, ctx context.Context, db *sql.DB) {
				var s string
				if err := db.QueryRowContext(ctx, "SELECT $1::text", paramSecret).Scan(&s); err != nil || s != paramSecret {
					t.Fatalf("%q, %v", s, err)
				}
			},
			want: []stmtSpan{{"SELECT", with(base, "SELECT", "SELECT $1::text", string(semconv.DBResponseReturnedRowsKey), "1"), ""}},
		},
		{
			name: "text without parameters: literals replaced",
			run: func(t *testing.T, ctx context.Context, db *sql.DB) {
				var s string
				var n int
				if err := db.QueryRowContext(ctx, "select '"+literalSecret+"', 42").Scan(&s, &n); err != nil {
					t.Fatal(err)
				}
			},
			want: []stmtSpan{{"SELECT", with(base, "SELECT", "select ?, ?", string(semconv.DBResponseReturnedRowsKey), "1"), ""}},
		},
		{
			name: "several statements: no operation, the summary of each",
			run: func(t *testing.T, ctx context.Context, db *sql.DB) {
				mustExec(t, ctx, db, "update "+table+" set note = 'x' where id = 0; delete from "+table+" where id = 0")
			},
			want: []stmtSpan{{"UPDATE " + table + " DELETE " + table, with(base, "", "update "+table+" set note = ? where id = ?; delete from "+table+" where id = ?", string(tracing.RowsAffectedKey), "0"), ""}},
		},
		{
			name: "prepared statement",
			run: func(t *testing.T, ctx context.Context, db *sql.DB) {
				conn, err := db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				stmt, err := conn.PrepareContext(ctx, "select note from "+table+" where id = $1")
				if err != nil {
					t.Fatal(err)
				}
				var note string
				if err := stmt.QueryRowContext(ctx, 1).Scan(&note); err != nil {
					t.Fatal(err)
				}
				if _, err := stmt.ExecContext(ctx, 2); err != nil {
					t.Fatal(err)
				}
				stmt.Close()
			},
			want: []stmtSpan{
				{"PREPARE SELECT " + table, with(base, "PREPARE", "select note from "+table+" where id = $1", string(semconv.DBCollectionNameKey), table), ""},
				{"SELECT " + table, with(base, "SELECT", "select note from "+table+" where id = $1", string(semconv.DBCollectionNameKey), table, string(semconv.DBResponseReturnedRowsKey), "1"), ""},
				{"SELECT " + table, with(base, "SELECT", "select note from "+table+" where id = $1", string(semconv.DBCollectionNameKey), table, string(semconv.DBResponseReturnedRowsKey), "0"), ""}, // an exec: its result's count
			},
		},
		{
			name: "join and WITH query: the tables in order, a WITH query's name is not one",
			run: func(t *testing.T, ctx context.Context, db *sql.DB) {
				rows, err := db.QueryContext(ctx, "with recent as (select id from "+table+" where id > 1000) select t.note from "+table+" t join recent using (id)")
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
				}
				rows.Close()
			},
			want: []stmtSpan{{"SELECT " + table + " SELECT " + table, with(base, "WITH", "with recent as (select id from "+table+" where id > ?) select t.note from "+table+" t join recent using (id)",
				string(semconv.DBCollectionNameKey), table, string(semconv.DBResponseReturnedRowsKey), "0"), ""}},
		},
		{
			name: "DDL: the command, the kind of object and its name",
			run: func(t *testing.T, ctx context.Context, db *sql.DB) {
				mustExec(t, ctx, db, "create table "+table+"_ddl (a int)")
				mustExec(t, ctx, db, "drop table "+table+"_ddl")
			},
			want: []stmtSpan{
				{"CREATE TABLE " + table + "_ddl", with(base, "CREATE", "create table "+table+"_ddl (a int)", string(semconv.DBCollectionNameKey), table+"_ddl", string(tracing.RowsAffectedKey), "0"), ""},
				{"DROP TABLE " + table + "_ddl", with(base, "DROP", "drop table "+table+"_ddl", string(semconv.DBCollectionNameKey), table+"_ddl", string(tracing.RowsAffectedKey), "0"), ""},
			},
		},
		{
			name: "a text the summary cannot read: the operation, no summary",
			run: func(t *testing.T, ctx context.Context, db *sql.DB) {
				if _, err := db.ExecContext(ctx, "select ('"+literalSecret+"' from "+table); err == nil {
					t.Fatal("no error")
				}
			},
			want: []stmtSpan{{"SELECT", with(base, "SELECT", "select (? from "+table, append([]string{string(semconv.DBQuerySummaryKey), ""}, fails("42601")...)...), "42601"}},
		},
		{
			name: "transaction committed",
			run: func(t *testing.T, ctx context.Context, db *sql.DB) {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.ExecContext(ctx, insert, 2, "two"); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			},
			want: []stmtSpan{
				{"BEGIN", with(base, "BEGIN", ""), ""},
				{"INSERT " + table, with(base, "INSERT", insert, string(semconv.DBCollectionNameKey), table, string(tracing.RowsAffectedKey), "1"), ""},
				{"COMMIT", with(base, "COMMIT", ""), ""},
			},
		},
		{
			name: "transaction rolled back",
			run: func(t *testing.T, ctx context.Context, db *sql.DB) {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := tx.Rollback(); err != nil {
					t.Fatal(err)
				}
			},
			want: []stmtSpan{{"BEGIN", with(base, "BEGIN", ""), ""}, {"ROLLBACK", with(base, "ROLLBACK", ""), ""}},
		},
		{
			name: "ping: no span by default (WithPingSpans)",
			run: func(t *testing.T, ctx context.Context, db *sql.DB) {
				if err := db.PingContext(ctx); err != nil {
					t.Fatal(err)
				}
			},
			want: nil,
		},
		{
			name: "server error",
			run: func(t *testing.T, ctx context.Context, db *sql.DB) {
				if _, err := db.ExecContext(ctx, insert, 1, "duplicate"); err == nil {
					t.Fatal("no error")
				}
			},
			want: []stmtSpan{{"INSERT " + table, with(base, "INSERT", insert, append([]string{string(semconv.DBCollectionNameKey), table}, fails("23505")...)...), "23505"}},
		},
		{
			name: "server error quoting a parameter value",
			run: func(t *testing.T, ctx context.Context, db *sql.DB) {
				err := db.QueryRowContext(ctx, "select $1::int", paramSecret).Scan(new(int))
				if err == nil || !strings.Contains(err.Error(), paramSecret) {
					t.Fatalf("error %v, want one quoting the value", err)
				}
			},
			want: []stmtSpan{{"SELECT", with(base, "SELECT", "select $1::int", fails("22P02")...), "22P02"}},
		},
		{
			name: "error while reading the rows",
			run: func(t *testing.T, ctx context.Context, db *sql.DB) {
				rows, err := db.QueryContext(ctx, "select 1/(3-i) from generate_series(1, 5) i")
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
			name: "canceled",
			run: func(t *testing.T, ctx context.Context, db *sql.DB) {
				conn, err := db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
				if _, err := conn.ExecContext(cctx, "select pg_sleep(5)"); err == nil {
					t.Fatal("no error")
				}
			},
			want: []stmtSpan{{"SELECT", with(base, "SELECT", "select pg_sleep(?)",
				string(semconv.ErrorTypeKey), tracing.ErrorTypeTimeout), tracing.ErrorTypeTimeout}},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := o.under(t, func(ctx context.Context) { tt.run(t, ctx, o.db) })
			checkStmtSpans(t, got, tt.want)
		})
	}
}

func mustExec(t *testing.T, ctx context.Context, db *sql.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(ctx, query, args...); err != nil {
		t.Fatal(err)
	}
}

// A connection's life in the pool (reuse after ResetSession, idle time, IsValid, close) makes no
// span: only the statements and the connect do.
func TestNoSpansForThePool(t *testing.T) {
	plain, _ := servers(t)
	o := newObserved(t, plain.DSN())
	o.db.SetMaxIdleConns(1)
	for i := range 2 {
		if err := o.db.QueryRow("select 1").Scan(new(int)); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			time.Sleep(1100 * time.Millisecond) // pgx's ResetSession pings after 1s idle
		}
	}
	conn, err := o.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Raw(func(any) error { return nil }); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	o.db.Close()
	var stmts []string
	for _, s := range o.rec.Ended() {
		if !strings.HasPrefix(s.Name(), "postgresql.") {
			stmts = append(stmts, s.Name())
		}
	}
	if want := []string{"SELECT", "SELECT"}; !slices.Equal(stmts, want) {
		t.Errorf("statement spans %v, want %v", stmts, want)
	}
	if n := strings.Count(spanNames(o.rec.Ended()), tracing.SpanConnect); n != 1 {
		t.Errorf("%d connects, want 1", n)
	}
}

func spanNames(spans []sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	for _, s := range spans {
		b.WriteString(s.Name() + " ")
	}
	return b.String()
}

func TestStatementSpanOptions(t *testing.T) {
	plain, _ := servers(t)
	base := connAttrs(plain)
	query := func(t *testing.T, o *observed) []sdktrace.ReadOnlySpan {
		t.Helper()
		return o.under(t, func(ctx context.Context) {
			if err := o.db.QueryRowContext(ctx, "select $1::int + 1", 1).Scan(new(int)); err != nil {
				t.Fatal(err)
			}
			if err := o.db.PingContext(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}

	t.Run("WithQueryText(false)", func(t *testing.T) {
		o := newObserved(t, plain.DSN(), pgconnector.WithQueryText(false), pgconnector.WithPingSpans(true))
		// The ping reuses the query's connection: database/sql resets its session first.
		checkStmtSpans(t, query(t, o), []stmtSpan{{"SELECT", with(base, "SELECT", "", string(semconv.DBResponseReturnedRowsKey), "1"), ""},
			{"RESET_SESSION", with(base, "RESET_SESSION", ""), ""}, {"PING", with(base, "PING", ""), ""}})
	})

	t.Run("WithSpanNameFunc", func(t *testing.T) {
		var mu sync.Mutex
		var calls []string
		o := newObserved(t, plain.DSN(), pgconnector.WithQueryText(false), pgconnector.WithPingSpans(true),
			pgconnector.WithSpanNameFunc(func(ctx context.Context, op, query string) string {
				mu.Lock()
				defer mu.Unlock()
				calls = append(calls, op+"|"+query)
				if !trace.SpanContextFromContext(ctx).IsValid() {
					t.Error("the caller's context has no span")
				}
				if op == "PING" {
					return "" // the default name
				}
				return "custom " + op
			}))
		checkStmtSpans(t, query(t, o), []stmtSpan{{"custom SELECT", with(base, "SELECT", "", string(semconv.DBQuerySummaryKey), "SELECT", string(semconv.DBResponseReturnedRowsKey), "1"), ""},
			{"custom RESET_SESSION", with(base, "RESET_SESSION", "", string(semconv.DBQuerySummaryKey), ""), ""}, {"PING", with(base, "PING", ""), ""}})
		if want := []string{"SELECT|select $1::int + 1", "RESET_SESSION|", "PING|"}; !slices.Equal(calls, want) {
			t.Errorf("the name function was called with %q, want %q", calls, want)
		}
	})

	t.Run("WithStatementSpans(false)", func(t *testing.T) {
		o := newObserved(t, plain.DSN(), pgconnector.WithStatementSpans(false))
		if got := query(t, o); len(got) != 0 {
			t.Errorf("spans %s, want none", spanNames(got))
		}
		if _, ok := collect(t, o.reader)[dbconv.ClientOperationDuration{}.Name()]; ok {
			t.Errorf("%s measured without the interceptor", dbconv.ClientOperationDuration{}.Name())
		}
		dc, err := o.c.Connect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer dc.Close()
		if _, ok := dc.(*stdlib.Conn); !ok {
			t.Errorf("Connect returned %T, want pgx's *stdlib.Conn", dc)
		}
	})
}

// server.address and server.port are those of the host the connection went to, not the first
// one of the connection string; the pool's name is made of the first one.
func TestStatementSpansNameTheHostConnectedTo(t *testing.T) {
	plain, _ := servers(t)
	dead := harness.FreePort(t)
	dsn := fmt.Sprintf("host=127.0.0.1,%s port=%d,%d user=%s dbname=%s", plain.Host, dead, plain.Port, plain.User, plain.Database)
	o := newObserved(t, dsn)
	got := o.under(t, func(ctx context.Context) {
		if err := o.db.QueryRowContext(ctx, "select 1").Scan(new(int)); err != nil {
			t.Fatal(err)
		}
	})
	checkStmtSpans(t, got, []stmtSpan{{"SELECT", with(connAttrs(plain), "SELECT", "select ?", string(semconv.DBResponseReturnedRowsKey), "1"), ""}})
	create := points(t, collect(t, o.reader)[dbconv.ClientConnectionCreateTime{}.Name()])
	pool := fmt.Sprintf("db.client.connection.pool.name=127.0.0.1:%d/%s", dead, plain.Database)
	if want := map[string]float64{pool + ",pgconnector.outcome=success,pgconnector.transport=plain": 1}; !maps.Equal(create, want) {
		t.Errorf("create_time %v, want %v", create, want)
	}
}

// PgxConn reaches the *pgx.Conn under a database/sql connection, with and without the statement
// tracer between them: CopyFrom, and LISTEN with WaitForNotification.
func TestPgxConn(t *testing.T) {
	plain, _ := servers(t)
	for _, spans := range []bool{true, false} {
		t.Run(fmt.Sprintf("statement spans %v", spans), func(t *testing.T) {
			o := newObserved(t, plain.DSN(), pgconnector.WithStatementSpans(spans))
			table := newTable(t, o.db)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conn, err := o.db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()

			rows := [][]any{{1, "one"}, {2, "two"}, {3, "three"}}
			err = pgconnector.PgxConn(conn, func(pc *pgx.Conn) error {
				n, err := pc.CopyFrom(ctx, pgx.Identifier{table}, []string{"id", "note"}, pgx.CopyFromRows(rows))
				if err == nil && n != int64(len(rows)) {
					err = fmt.Errorf("copied %d rows", n)
				}
				return err
			})
			if err != nil {
				t.Fatalf("CopyFrom: %v", err)
			}
			var count int
			if err := o.db.QueryRowContext(ctx, "select count(*) from "+table).Scan(&count); err != nil || count != len(rows) {
				t.Fatalf("%d rows after CopyFrom, %v", count, err)
			}

			channel := table + "_events"
			if _, err := conn.ExecContext(ctx, "listen "+channel); err != nil {
				t.Fatal(err)
			}
			if _, err := o.db.ExecContext(ctx, "select pg_notify($1, $2)", channel, "hello"); err != nil {
				t.Fatal(err)
			}
			err = pgconnector.PgxConn(conn, func(pc *pgx.Conn) error {
				n, err := pc.WaitForNotification(ctx)
				if err == nil && (n.Channel != channel || n.Payload != "hello") {
					err = fmt.Errorf("notification %+v", n)
				}
				return err
			})
			if err != nil {
				t.Fatalf("WaitForNotification: %v", err)
			}

			// A pool of pgx's own connector works too.
			db := sql.OpenDB(stdlib.GetConnector(*mustParsePgx(t, plain.DSN())))
			defer db.Close()
			other, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			if err := pgconnector.PgxConn(other, func(pc *pgx.Conn) error { return pc.Ping(ctx) }); err != nil {
				t.Error(err)
			}
		})
	}
}

// sql.DB.Close reaches Connector.Close, which stops the pool metrics of OpenDB.
func TestDBCloseClosesConnector(t *testing.T) {
	plain, _ := servers(t)
	o := newObserved(t, plain.DSN())
	if err := o.db.Ping(); err != nil {
		t.Fatal(err)
	}
	count := dbconv.ClientConnectionCountObservable{}.Name()
	if got := points(t, collect(t, o.reader)[count]); len(got) != 2 {
		t.Fatalf("%s: %v, want idle and used", count, got)
	}
	if err := o.db.Close(); err != nil {
		t.Fatal(err)
	}
	if m, ok := collect(t, o.reader)[count]; ok && len(points(t, m)) != 0 {
		t.Errorf("%s still observed after DB.Close: %v", count, points(t, m))
	}
}

// collect returns what reader holds, by metric name.
func collect(t testing.TB, reader *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	m := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != tracing.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, tracing.ScopeName)
		}
		for _, mm := range sm.Metrics {
			m[mm.Name] = mm
		}
	}
	return m
}

// points returns the data points of m by their attributes ("k=v,k=v", keys sorted): the value
// of a sum, the count of a histogram.
func points(t testing.TB, m metricdata.Metrics) map[string]float64 {
	t.Helper()
	enc := attribute.DefaultEncoder()
	p := map[string]float64{}
	switch d := m.Data.(type) {
	case nil:
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			p[dp.Attributes.Encoded(enc)] = float64(dp.Value)
		}
	case metricdata.Sum[float64]:
		for _, dp := range d.DataPoints {
			p[dp.Attributes.Encoded(enc)] = dp.Value
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			p[dp.Attributes.Encoded(enc)] = float64(dp.Count)
			want := []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10} // semconv
			if m.Name == tracing.MetricConnectStepDuration {
				want = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
			}
			if !slices.Equal(dp.Bounds, want) {
				t.Errorf("%s: bounds %v", m.Name, dp.Bounds)
			}
		}
	default:
		t.Fatalf("%s: data of type %T", m.Name, m.Data)
	}
	return p
}

// After n connections one after the other on a TLS-off server with a default DSN: one miss (the
// first connect probes), n-1 hits, and n-1 round trips avoided (the SSLRequest libpq sends every
// time); no backend avoided. Then one more connection for a failing statement, and a failed
// connect of another connector (its own cache: a miss).
func TestConnectMetrics(t *testing.T) {
	plain, _ := servers(t)
	const n = 5
	o := newObserved(t, plain.DSN())
	o.db.SetMaxIdleConns(0) // a new connection per query
	for range n {
		if err := o.db.QueryRow("select $1::int", 1).Scan(new(int)); err != nil {
			t.Fatal(err)
		}
	}
	// One failing statement and one failed connect.
	if _, err := o.db.Exec("select 1/0"); err == nil {
		t.Fatal("no error")
	}
	if _, err := newConnectorWithMeter(t, plain.DSN("dbname=nosuchdb"), o).Connect(context.Background()); err == nil {
		t.Fatal("connected to a database that does not exist")
	}

	got := collect(t, o.reader)
	server := fmt.Sprintf("server.address=%s,server.port=%d", plain.Host, plain.Port)
	pool := fmt.Sprintf("db.client.connection.pool.name=%s:%d", plain.Host, plain.Port)
	op := fmt.Sprintf("db.namespace=%s,db.operation.name=SELECT,db.system.name=postgresql,%s", plain.Database, server)
	for _, tt := range []struct {
		name string
		want map[string]float64
	}{
		{tracing.MetricCacheHits, map[string]float64{server: n - 1 + 1}},
		{tracing.MetricCacheMisses, map[string]float64{server: 1 + 1}},
		{tracing.MetricAttemptsAvoided, map[string]float64{"pgconnector.avoided.kind=round_trip," + server: n - 1 + 1}},
		{dbconv.ClientConnectionCreateTime{}.Name(), map[string]float64{
			pool + "/" + plain.Database + ",pgconnector.outcome=success,pgconnector.transport=plain": n + 1,
			pool + "/nosuchdb,error.type=3D000,pgconnector.outcome=error":                            1,
		}},
		// Seven connects (n+1 of o, one of the other connector), each with its steps; an
		// SSLRequest only for the first connect of each connector (the 'N' is remembered).
		{tracing.MetricConnectStepDuration, map[string]float64{
			"pgconnector.outcome=success,pgconnector.step=gss_credentials":                          n + 2,
			"pgconnector.outcome=success,pgconnector.step=tcp_connect,server.address=" + plain.Host: n + 2,
			"pgconnector.outcome=success,pgconnector.step=ssl_request,server.address=" + plain.Host: 2,
			"pgconnector.outcome=success,pgconnector.step=startup,server.address=" + plain.Host:     n + 1,
			"pgconnector.outcome=error,pgconnector.step=startup,server.address=" + plain.Host:       1,
		}},
		{dbconv.ClientOperationDuration{}.Name(), map[string]float64{
			op: n,
			fmt.Sprintf("db.namespace=%s,db.operation.name=SELECT,db.response.status_code=22012,db.system.name=postgresql,error.type=22012,%s",
				plain.Database, server): 1,
		}},
	} {
		if p := points(t, got[tt.name]); !maps.Equal(p, tt.want) {
			t.Errorf("%s:\n %v\nwant\n %v", tt.name, p, tt.want)
		}
	}
	if d := got[dbconv.ClientOperationDuration{}.Name()]; d.Unit != "s" {
		t.Errorf("%s: unit %q", d.Name, d.Unit)
	}
}

// newConnectorWithMeter is a new connector (a new cache) reporting to o's providers.
func newConnectorWithMeter(t *testing.T, dsn string, o *observed) *pgconnector.Connector {
	t.Helper()
	return newConnector(t, dsn, pgconnector.WithTracerProvider(o.tp), pgconnector.WithMeterProvider(o.mp))
}

// The pool metrics of OpenDB: an idle connection, the maximum, and a caller that waited.
func TestPoolMetrics(t *testing.T) {
	plain, _ := servers(t)
	o := newObserved(t, plain.DSN())
	o.db.SetMaxOpenConns(1)
	if err := o.db.QueryRow("select 1").Scan(new(int)); err != nil {
		t.Fatal(err)
	}
	pool := fmt.Sprintf("db.client.connection.pool.name=%s:%d/%s", plain.Host, plain.Port, plain.Database)
	count, max := dbconv.ClientConnectionCountObservable{}.Name(), dbconv.ClientConnectionMaxObservable{}.Name()
	check := func(name string, want map[string]float64) {
		t.Helper()
		if p := points(t, collect(t, o.reader)[name]); !maps.Equal(p, want) {
			t.Errorf("%s:\n %v\nwant\n %v", name, p, want)
		}
	}
	check(count, map[string]float64{pool + ",db.client.connection.state=idle": 1, pool + ",db.client.connection.state=used": 0})
	check(max, map[string]float64{pool: 1})
	check(tracing.MetricConnectionWaits, map[string]float64{pool: 0})

	// Hold the only connection while another caller asks for one.
	conn, err := o.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	check(count, map[string]float64{pool + ",db.client.connection.state=idle": 0, pool + ",db.client.connection.state=used": 1})
	done := make(chan error)
	go func() { done <- o.db.QueryRow("select 1").Scan(new(int)) }()
	for o.db.Stats().WaitCount == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	conn.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	check(tracing.MetricConnectionWaits, map[string]float64{pool: 1})
	waited := points(t, collect(t, o.reader)[tracing.MetricConnectionWaitTime])[pool]
	if waited < 0.02 || waited > 10 {
		t.Errorf("%s = %vs, want the wait (at least 20ms)", tracing.MetricConnectionWaitTime, waited)
	}
	if u := collect(t, o.reader)[tracing.MetricConnectionWaitTime].Unit; u != "s" {
		t.Errorf("%s: unit %q", tracing.MetricConnectionWaitTime, u)
	}
}

// Connects at once on a cold cache: one probes (a miss), the others wait for it and decide from
// its answer (hits), each avoiding the SSLRequest libpq would send.
func TestConnectMetricsColdHerd(t *testing.T) {
	plain, _ := servers(t)
	const herd = 8
	o := newObserved(t, plain.DSN())
	var wg sync.WaitGroup
	errs := make(chan error, herd)
	for range herd {
		wg.Go(func() {
			conn, err := o.c.Connect(context.Background())
			if err == nil {
				conn.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got := collect(t, o.reader)
	server := fmt.Sprintf("server.address=%s,server.port=%d", plain.Host, plain.Port)
	for name, want := range map[string]map[string]float64{
		tracing.MetricCacheHits:       {server: herd - 1},
		tracing.MetricCacheMisses:     {server: 1},
		tracing.MetricAttemptsAvoided: {"pgconnector.avoided.kind=round_trip," + server: herd - 1},
	} {
		if p := points(t, got[name]); !maps.Equal(p, want) {
			t.Errorf("%s: %v, want %v", name, p, want)
		}
	}
}

// With a ticket and gssencmode=prefer, against a server where GSS encryption cannot succeed,
// each connection after the first avoids the backend (and the round trips) libpq spends on GSS.
func TestConnectMetricsGSSFailureRemembered(t *testing.T) {
	lab := newKerberosLab(t)
	srv := lab.server(t, false, lab.gssHBA(), "hostnogssenc all all 127.0.0.1/32 trust")
	const n = 4
	reader := sdkmetric.NewManualReader()
	c := lab.connector(t, aliceDSN(srv, "localhost", "sslmode=disable"),
		pgconnector.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	for range n {
		conn, err := c.Connect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		conn.Close()
	}
	got := collect(t, reader)
	server := fmt.Sprintf("server.address=localhost,server.port=%d", srv.Port)
	for name, want := range map[string]map[string]float64{
		tracing.MetricCacheHits:   {server: n - 1},
		tracing.MetricCacheMisses: {server: 1},
		tracing.MetricAttemptsAvoided: {
			"pgconnector.avoided.kind=backend," + server:    n - 1,
			"pgconnector.avoided.kind=round_trip," + server: n - 1,
		},
	} {
		if p := points(t, got[name]); !maps.Equal(p, want) {
			t.Errorf("%s: %v, want %v", name, p, want)
		}
	}
}
