package pgconnector_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/ngrok/sqlmw"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector"
)

// callLog is what recordingInterceptors saw, in order: "name.Hook", and for the hooks that get
// a context of an earlier call of the same interceptor, "name.Hook ctx=<value>".
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(s string) {
	l.mu.Lock()
	l.calls = append(l.calls, s)
	l.mu.Unlock()
}

func (l *callLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.calls
	l.calls = nil
	return c
}

type ctxKey string

// passedKey holds what an interceptor passed on to the next step, to show that the context an
// interceptor hands on is the one used after it.
const passedKey ctxKey = "passed"

// recordingInterceptor logs each hook under its name, returns from each hook that returns a
// context one holding its name's key (the hook and a number), and logs that value where its
// later calls get it back (TxCommit, TxRollback, StmtClose, RowsNext, RowsClose). It hands its
// next step a context with passedKey set to its name, and logs the passedKey it was given.
type recordingInterceptor struct {
	name string
	log  *callLog
	n    int
}

func (r *recordingInterceptor) enter(ctx context.Context, hook string) context.Context {
	from, _ := ctx.Value(passedKey).(string)
	if from != "" {
		r.log.add(r.name + "." + hook + " from " + from)
	} else {
		r.log.add(r.name + "." + hook)
	}
	return context.WithValue(ctx, passedKey, r.name)
}

// mark returns ctx with r's key set to a value naming hook, the value logged later.
func (r *recordingInterceptor) mark(ctx context.Context, hook string) context.Context {
	r.n++
	return context.WithValue(ctx, ctxKey(r.name), fmt.Sprintf("%s#%d", hook, r.n))
}

func (r *recordingInterceptor) later(ctx context.Context, hook string) {
	r.log.add(fmt.Sprintf("%s.%s ctx=%v", r.name, hook, ctx.Value(ctxKey(r.name))))
}

func (r *recordingInterceptor) ConnectorConnect(ctx context.Context, c driver.Connector) (driver.Conn, error) {
	return c.Connect(r.enter(ctx, "ConnectorConnect"))
}

func (r *recordingInterceptor) ConnBeginTx(ctx context.Context, conn driver.ConnBeginTx, opts driver.TxOptions) (context.Context, driver.Tx, error) {
	tx, err := conn.BeginTx(r.enter(ctx, "ConnBeginTx"), opts)
	return r.mark(ctx, "ConnBeginTx"), tx, err
}

func (r *recordingInterceptor) ConnPrepareContext(ctx context.Context, conn driver.ConnPrepareContext, query string) (context.Context, driver.Stmt, error) {
	st, err := conn.PrepareContext(r.enter(ctx, "ConnPrepareContext"), query)
	return r.mark(ctx, "ConnPrepareContext"), st, err
}

func (r *recordingInterceptor) ConnPing(ctx context.Context, conn driver.Pinger) error {
	return conn.Ping(r.enter(ctx, "ConnPing"))
}

func (r *recordingInterceptor) ConnExecContext(ctx context.Context, conn driver.ExecerContext, query string, args []driver.NamedValue) (driver.Result, error) {
	return conn.ExecContext(r.enter(ctx, "ConnExecContext"), query, args)
}

func (r *recordingInterceptor) ConnQueryContext(ctx context.Context, conn driver.QueryerContext, query string, args []driver.NamedValue) (context.Context, driver.Rows, error) {
	rows, err := conn.QueryContext(r.enter(ctx, "ConnQueryContext"), query, args)
	return r.mark(ctx, "ConnQueryContext"), rows, err
}

func (r *recordingInterceptor) ResultLastInsertId(res driver.Result) (int64, error) {
	r.log.add(r.name + ".ResultLastInsertId")
	return res.LastInsertId()
}

func (r *recordingInterceptor) ResultRowsAffected(res driver.Result) (int64, error) {
	r.log.add(r.name + ".ResultRowsAffected")
	return res.RowsAffected()
}

func (r *recordingInterceptor) RowsNext(ctx context.Context, rows driver.Rows, dest []driver.Value) error {
	r.later(ctx, "RowsNext")
	return rows.Next(dest)
}

func (r *recordingInterceptor) RowsClose(ctx context.Context, rows driver.Rows) error {
	r.later(ctx, "RowsClose")
	return rows.Close()
}

func (r *recordingInterceptor) StmtExecContext(ctx context.Context, stmt driver.StmtExecContext, query string, args []driver.NamedValue) (driver.Result, error) {
	return stmt.ExecContext(r.enter(ctx, "StmtExecContext"), args)
}

func (r *recordingInterceptor) StmtQueryContext(ctx context.Context, stmt driver.StmtQueryContext, query string, args []driver.NamedValue) (context.Context, driver.Rows, error) {
	rows, err := stmt.QueryContext(r.enter(ctx, "StmtQueryContext"), args)
	return r.mark(ctx, "StmtQueryContext"), rows, err
}

func (r *recordingInterceptor) StmtClose(ctx context.Context, stmt driver.Stmt) error {
	r.later(ctx, "StmtClose")
	return stmt.Close()
}

func (r *recordingInterceptor) TxCommit(ctx context.Context, tx driver.Tx) error {
	r.later(ctx, "TxCommit")
	return tx.Commit()
}

func (r *recordingInterceptor) TxRollback(ctx context.Context, tx driver.Tx) error {
	r.later(ctx, "TxRollback")
	return tx.Rollback()
}

var _ sqlmw.Interceptor = (*recordingInterceptor)(nil)

// Two interceptors, a outermost, see every driver call database/sql makes, in order: each hook
// of a first, then b's with what a passed on; the later calls of each get the context that
// interceptor returned (RowsNext and RowsClose its query's, StmtClose its prepare's, TxCommit
// and TxRollback its BeginTx's). Once with statement spans, once without.
//
// The same calls through nested sqlmw drivers, sqlmw.Driver(sqlmw.Driver(pgx's driver, b), a),
// log the same.
func TestInterceptorsSeeEveryCall(t *testing.T) {
	plain, _ := servers(t)
	for _, spans := range []bool{true, false} {
		t.Run(fmt.Sprintf("spans=%v", spans), func(t *testing.T) {
			log := &callLog{}
			a, b := &recordingInterceptor{name: "a", log: log}, &recordingInterceptor{name: "b", log: log}
			_, tp := newRecorder()
			c := newConnector(t, plain.DSN(), pgconnector.WithTracerProvider(tp), pgconnector.WithStatementSpans(spans),
				pgconnector.WithInterceptor(a), pgconnector.WithInterceptor(b))
			db := sql.OpenDB(c)
			defer db.Close()
			runInterceptedCalls(t, db, log)
		})
	}
	t.Run("sqlmw", func(t *testing.T) {
		log := &callLog{}
		a, b := &recordingInterceptor{name: "a", log: log}, &recordingInterceptor{name: "b", log: log}
		name := "pgx-sqlmw-nested-" + t.Name()
		sql.Register(name, sqlmw.Driver(sqlmw.Driver(stdlib.GetDefaultDriver(), b), a))
		db, err := sql.Open(name, plain.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		runInterceptedCalls(t, db, log)
	})
}

// runInterceptedCalls makes every kind of driver call on one connection of db and checks what
// the interceptors a (outermost) and b logged.
func runInterceptedCalls(t *testing.T, db *sql.DB, log *callLog) {
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	both := func(calls ...string) []string {
		var out []string
		for _, call := range calls {
			out = append(out, strings.ReplaceAll(call, "@", "a"), strings.ReplaceAll(strings.ReplaceAll(call, "@", "b"), "from -", "from a"))
		}
		for i, s := range out {
			out[i] = strings.TrimSuffix(s, " from -")
		}
		return out
	}
	check := func(what string, want []string) {
		t.Helper()
		if got := log.take(); !slices.Equal(got, want) {
			t.Errorf("%s:\n got  %q\n want %q", what, got, want)
		}
	}
	check("connect", both("@.ConnectorConnect from -"))

	if err := conn.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	check("ping", both("@.ConnPing from -"))

	if _, err := conn.ExecContext(ctx, "create temporary table t (n int)"); err != nil {
		t.Fatal(err)
	}
	log.take()
	res, err := conn.ExecContext(ctx, "insert into t values (1), (2)")
	if err != nil {
		t.Fatal(err)
	}
	check("exec", both("@.ConnExecContext from -"))
	if n, err := res.RowsAffected(); err != nil || n != 2 {
		t.Errorf("RowsAffected: %d, %v", n, err)
	}
	res.LastInsertId() // pgx's error: none
	check("result", append(both("@.ResultRowsAffected"), both("@.ResultLastInsertId")...))

	rows, err := conn.QueryContext(ctx, "select n from t order by n")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil || n != 2 {
		t.Fatalf("%d rows, %v", n, err)
	}
	next := []string{"a.RowsNext ctx=ConnQueryContext#1", "b.RowsNext ctx=ConnQueryContext#1"}
	want := append(both("@.ConnQueryContext from -"), slices.Concat(next, next, next)...) // two rows and the end
	check("query", append(want, "a.RowsClose ctx=ConnQueryContext#1", "b.RowsClose ctx=ConnQueryContext#1"))

	st, err := conn.PrepareContext(ctx, "select n from t where n = $1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ExecContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := st.QueryRowContext(ctx, 2).Scan(&n); err != nil || n != 2 {
		t.Fatalf("prepared query: %d, %v", n, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	check("prepared", slices.Concat(both("@.ConnPrepareContext from -", "@.StmtExecContext from -", "@.StmtQueryContext from -"),
		[]string{"a.RowsNext ctx=StmtQueryContext#3", "b.RowsNext ctx=StmtQueryContext#3",
			"a.RowsClose ctx=StmtQueryContext#3", "b.RowsClose ctx=StmtQueryContext#3",
			"a.StmtClose ctx=ConnPrepareContext#2", "b.StmtClose ctx=ConnPrepareContext#2"}))

	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	tx, err = conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	check("transactions", slices.Concat(both("@.ConnBeginTx from -"), []string{"a.TxCommit ctx=ConnBeginTx#4", "b.TxCommit ctx=ConnBeginTx#4"},
		both("@.ConnBeginTx from -"), []string{"a.TxRollback ctx=ConnBeginTx#5", "b.TxRollback ctx=ConnBeginTx#5"}))
}

// rewriteInterceptor replaces from with to in the text of each query and prepare, and records
// the span of the context its query hook got; its query hook takes at least delay.
type rewriteInterceptor struct {
	sqlmw.NullInterceptor
	from, to string
	delay    time.Duration
	spans    []trace.SpanContext
}

func (r *rewriteInterceptor) ConnQueryContext(ctx context.Context, conn driver.QueryerContext, query string, args []driver.NamedValue) (context.Context, driver.Rows, error) {
	r.spans = append(r.spans, trace.SpanContextFromContext(ctx))
	time.Sleep(r.delay)
	rows, err := conn.QueryContext(ctx, strings.ReplaceAll(query, r.from, r.to), args)
	return ctx, rows, err
}

func (r *rewriteInterceptor) ConnPrepareContext(ctx context.Context, conn driver.ConnPrepareContext, query string) (context.Context, driver.Stmt, error) {
	st, err := conn.PrepareContext(ctx, strings.ReplaceAll(query, r.from, r.to))
	return ctx, st, err
}

// The text an interceptor rewrites is the one the server runs (its own pg_stat_activity.query
// shows it), for a query and a prepared statement; the statement's span records the text as
// the application wrote it, is the child of the application's span, holds the interceptor's
// time (its delay) and is the span in the context the interceptor gets.
func TestInterceptorRewritesText(t *testing.T) {
	plain, _ := servers(t)
	rec, tp := newRecorder()
	const delay = 50 * time.Millisecond
	rw := &rewriteInterceptor{from: "/*app*/", to: "/*rewritten*/", delay: delay}
	c := newConnector(t, plain.DSN(), pgconnector.WithTracerProvider(tp), pgconnector.WithInterceptor(rw))
	db := sql.OpenDB(c)
	defer db.Close()
	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	const text = "select /*app*/ query from pg_stat_activity where pid = pg_backend_pid()"
	var seen string
	if err := db.QueryRowContext(ctx, text).Scan(&seen); err != nil {
		t.Fatal(err)
	}
	if want := "select /*rewritten*/ query"; !strings.HasPrefix(seen, want) {
		t.Errorf("the server ran %q, want the rewritten text %q...", seen, want)
	}
	st, err := db.PrepareContext(ctx, text)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.QueryRowContext(ctx).Scan(&seen); err != nil {
		t.Fatal(err)
	}
	if want := "select /*rewritten*/ query"; !strings.HasPrefix(seen, want) {
		t.Errorf("the prepared statement ran %q, want the rewritten text %q...", seen, want)
	}
	parent.End()

	var query sdktrace.ReadOnlySpan // the first query's
	for _, s := range rec.Ended() {
		if spanAttrs(s)["db.operation.name"] == "SELECT" && query == nil {
			query = s
		}
	}
	if query == nil {
		t.Fatalf("no SELECT span among %d", len(rec.Ended()))
	}
	if got := query.Parent().SpanID(); got != parent.SpanContext().SpanID() {
		t.Errorf("the SELECT span's parent is %v, want the application's span %v", got, parent.SpanContext().SpanID())
	}
	if d := query.EndTime().Sub(query.StartTime()); d < delay {
		t.Errorf("the SELECT span lasted %v, less than the interceptor's %v", d, delay)
	}
	if len(rw.spans) == 0 || !rw.spans[0].Equal(query.SpanContext()) {
		t.Errorf("the interceptor's context held span %v, want the SELECT span %v", rw.spans, query.SpanContext())
	}
	if got := queryTextOf(query); got != text {
		t.Errorf("db.query.text %q, want the application's %q", got, text)
	}
}
