package tracing

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/semconv/v1.43.0/dbconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/negotiation"
)

// pgxFixture is a pgx connection to a fake server (every statement answers one row, 1) whose
// config has a PgxTracer recording to an SDK TracerProvider and MeterProvider.
type pgxFixture struct {
	rec    *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	tracer *PgxTracer
	cfg    *pgx.ConnConfig
	host   string
	port   int
}

func newPgxFixture(t *testing.T) *pgxFixture {
	t.Helper()
	srv := harness.FakeServerT(t)
	host, port := srv.Addr()
	f := &pgxFixture{rec: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), host: host, port: port}
	f.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f.rec))
	f.tracer = NewPgxTracer(StatementConfig{
		TracerProvider: f.tp,
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(f.reader)),
		QueryText:      true,
	})
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=u dbname=%s sslmode=disable", host, port, testDB))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tracer = f.tracer
	f.cfg = cfg
	return f
}

func (f *pgxFixture) connect(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.ConnectConfig(context.Background(), f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// under runs fn in a context holding a new caller span and returns the spans that are its
// children, in the order they ended.
func (f *pgxFixture) under(t *testing.T, fn func(ctx context.Context)) []sdktrace.ReadOnlySpan {
	t.Helper()
	ctx, caller := f.tp.Tracer("test").Start(context.Background(), "caller")
	fn(ctx)
	caller.End()
	return childrenOf(f.rec.Ended(), caller.SpanContext().SpanID())
}

func childrenOf(spans []sdktrace.ReadOnlySpan, parent trace.SpanID) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Parent().SpanID() == parent {
			out = append(out, s)
		}
	}
	return out
}

// base is the attributes of every statement span of the fixture's connections: those of their
// measurements and user.name.
func (f *pgxFixture) base() map[string]string {
	return plus(f.metricBase(), "user.name", f.cfg.User)
}

// metricBase is the attributes of every measurement of the fixture's connections.
func (f *pgxFixture) metricBase() map[string]string {
	return map[string]string{
		"db.system.name": "postgresql",
		"db.namespace":   testDB,
		"server.address": f.host,
		"server.port":    strconv.Itoa(f.port),
	}
}

// measured returns the attributes of a measurement of op on the fixture's connection, with the
// pairs of kv, encoded as points encodes them.
func (f *pgxFixture) measured(op string, kv ...string) string {
	m := plus(f.metricBase(), append([]string{"db.operation.name", op}, kv...)...)
	keys := slices.Sorted(maps.Keys(m))
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + m[k])
	}
	return b.String()
}

// failure returns the pairs error.type and db.response.status_code of a server error code.
func failure(code string) []string {
	return []string{"error.type", code, "db.response.status_code", code}
}

// wantSpan is what a test expects of a span: name, kind, every attribute, status description
// ("" for Unset).
type wantSpan struct {
	name   string
	kind   trace.SpanKind
	attrs  map[string]string
	fail   string
	events int // exception events: only connect spans have one
}

// plus returns base with the pairs of kv added ("" values left out).
func plus(base map[string]string, kv ...string) map[string]string {
	m := maps.Clone(base)
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			m[kv[i]] = kv[i+1]
		}
	}
	return m
}

func stmt(base map[string]string, op, text string, kv ...string) wantSpan {
	w := wantSpan{kind: trace.SpanKindClient, attrs: plus(base, append([]string{"db.operation.name", op, "db.query.text", text}, kv...)...)}
	return w.summary(op, "")
}

// summary sets the span's db.query.summary, its name, and its db.collection.name ("": none).
// stmt's span has its operation as summary (a statement without a table).
func (w wantSpan) summary(summary, collection string) wantSpan {
	w.attrs = maps.Clone(w.attrs)
	delete(w.attrs, "db.query.summary")
	delete(w.attrs, "db.collection.name")
	w.name = summary
	if summary != "" {
		w.attrs["db.query.summary"] = summary
	} else if w.name = w.attrs["db.operation.name"]; w.name == "" {
		w.name = "postgresql"
	}
	if collection != "" {
		w.attrs["db.collection.name"] = collection
	}
	return w
}

func (w wantSpan) failed(code string) wantSpan {
	w.attrs = plus(w.attrs, "error.type", code, "db.response.status_code", code)
	w.fail = code
	return w
}

func checkSpans(t *testing.T, got []sdktrace.ReadOnlySpan, want []wantSpan) {
	t.Helper()
	if names, wantNames := spanNames(got), func() (n []string) {
		for _, w := range want {
			n = append(n, w.name)
		}
		return n
	}(); !slices.Equal(names, wantNames) {
		t.Fatalf("spans %q, want %q", names, wantNames)
	}
	for i, s := range got {
		w := want[i]
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if !maps.Equal(attrs, w.attrs) {
			t.Errorf("span %d %s: attributes\n %v\nwant\n %v", i, s.Name(), attrs, w.attrs)
		}
		if s.SpanKind() != w.kind {
			t.Errorf("span %d %s: kind %v, want %v", i, s.Name(), s.SpanKind(), w.kind)
		}
		wantCode := codes.Unset
		if w.fail != "" {
			wantCode = codes.Error
		}
		if st := s.Status(); st.Code != wantCode || st.Description != w.fail {
			t.Errorf("span %d %s: status %v %q, want %v %q", i, s.Name(), st.Code, st.Description, wantCode, w.fail)
		}
		if len(s.Events()) != w.events {
			t.Errorf("span %d %s: events %v, want %d", i, s.Name(), s.Events(), w.events)
		}
	}
}

// Query, QueryRow, Exec and Prepare through pgx: the spans of database/sql's statements, as
// children of the caller's span; pgx's own prepares for its statement cache make none.
func TestPgxTracerStatements(t *testing.T) {
	f := newPgxFixture(t)
	conn := f.connect(t)
	base := f.base()
	got := f.under(t, func(ctx context.Context) {
		// No arguments: the default exec mode prepares the text first (statement cache).
		if err := conn.QueryRow(ctx, "select 42").Scan(new(int)); err != nil {
			t.Fatal(err)
		}
		// Options are not arguments: the text is not taken as parameterized.
		if _, err := conn.Exec(ctx, "update t set a = 'x'", pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatal(err)
		}
		// With arguments the text is recorded as given.
		if _, err := conn.Exec(ctx, "insert into t values ('k', $1)", pgx.QueryExecModeSimpleProtocol, 1); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, "select @n::int", pgx.QueryExecModeSimpleProtocol, pgx.NamedArgs{"n": 1}).Scan(new(int)); err != nil {
			t.Fatal(err)
		}
		rows, err := conn.Query(ctx, "select 1; select 2")
		if err != nil {
			t.Fatal(err)
		}
		if !rows.Next() {
			t.Fatal(rows.Err())
		}
		if slices.Contains(spanNames(f.rec.Ended()), "postgresql") {
			t.Error("the query's span ended before its rows were read")
		}
		for rows.Next() { // pgx closes the rows after the last one
		}
		rows.Close()
		if _, err := conn.Prepare(ctx, "one", "select 1"); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Prepare(ctx, "one", "select 1"); err != nil { // pgx answers from its map
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, "one").Scan(new(int)); err != nil {
			t.Fatal(err)
		}
	})
	// The fake server's command tag is SELECT 1 for every statement: a row count of 1.
	rows := []string{"db.response.returned_rows", "1"}
	checkSpans(t, got, []wantSpan{
		stmt(base, "SELECT", "select ?", rows...),
		stmt(base, "UPDATE", "update t set a = ?", rows...).summary("UPDATE t", "t"),
		stmt(base, "INSERT", "insert into t values ('k', $1)", rows...).summary("INSERT t", "t"),
		stmt(base, "SELECT", "select @n::int", rows...),
		stmt(base, "", "select ?; select ?", rows...).summary("SELECT SELECT", ""), // several statements: no operation
		stmt(base, "PREPARE", "select ?").summary("PREPARE SELECT", ""),
		stmt(base, "PREPARE", "select ?").summary("PREPARE SELECT", ""),
		stmt(base, "SELECT", "select ?", rows...), // the prepared text, not the name
	})

	d := points(t, collect(t, f.reader)[dbconv.ClientOperationDuration{}.Name()])
	want := map[string]float64{
		f.measured("SELECT"):  3,
		f.measured("UPDATE"):  1,
		f.measured("INSERT"):  1,
		f.measured("PREPARE"): 2,
		f.measured(""):        1, // several statements: no operation
	}
	if !maps.Equal(d, want) {
		t.Errorf("db.client.operation.duration\n %v, want\n %v", d, want)
	}
}

// A batch of two or more queries is one span with db.operation.batch.size and a child per
// query; a batch of one is that query's statement span.
func TestPgxTracerBatch(t *testing.T) {
	f := newPgxFixture(t)
	conn := f.connect(t)
	base := f.base()
	send := func(ctx context.Context, queries ...string) {
		b := &pgx.Batch{}
		for _, q := range queries {
			b.Queue(q)
		}
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
	}
	var batches []trace.SpanID
	got := f.under(t, func(ctx context.Context) {
		send(ctx, "select 1", "select 2", "insert into t values (3)")
		send(ctx, "select 1", "select 1")
		send(ctx, "select 'one'")
	})
	checkSpans(t, got, []wantSpan{
		stmt(base, "BATCH", "select ?; select ?; insert into t values (?)", "db.operation.batch.size", "3"),
		stmt(base, "BATCH SELECT", "select ?", "db.operation.batch.size", "2"),
		stmt(base, "SELECT", "select ?", "db.response.returned_rows", "1"),
	})
	for _, s := range got[:2] {
		batches = append(batches, s.SpanContext().SpanID())
	}
	query := func(op, text string) wantSpan {
		w := stmt(base, op, text, "db.response.returned_rows", "1") // the fake server's SELECT 1
		w.kind = trace.SpanKindInternal
		return w
	}
	checkSpans(t, childrenOf(f.rec.Ended(), batches[0]), []wantSpan{query("SELECT", "select ?"), query("SELECT", "select ?"), query("INSERT", "insert into t values (?)").summary("INSERT t", "t")})
	checkSpans(t, childrenOf(f.rec.Ended(), batches[1]), []wantSpan{query("SELECT", "select ?"), query("SELECT", "select ?")})
	if n := len(childrenOf(f.rec.Ended(), got[2].SpanContext().SpanID())); n != 0 {
		t.Errorf("the batch of one query has %d children", n)
	}

	d := points(t, collect(t, f.reader)[dbconv.ClientOperationDuration{}.Name()])
	if want := map[string]float64{f.measured("BATCH"): 1, f.measured("BATCH SELECT"): 1, f.measured("SELECT"): 1}; !maps.Equal(d, want) {
		t.Errorf("db.client.operation.duration %v, want %v (one per batch)", d, want)
	}
}

// Failures, CopyFrom, and a batch whose query failed, with the data pgx hands the tracer.
func TestPgxTracerFailuresAndCopy(t *testing.T) {
	f := newPgxFixture(t)
	conn := f.connect(t)
	base := f.base()
	dup := &pgconn.PgError{Code: "23505", Message: "duplicate key value violates unique constraint"}
	got := f.under(t, func(ctx context.Context) {
		qctx := f.tracer.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: "insert into t values ($1)", Args: []any{1}})
		f.tracer.TraceQueryEnd(qctx, conn, pgx.TraceQueryEndData{Err: fmt.Errorf("wrapped: %w", dup)})

		qctx = f.tracer.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: "select pg_sleep(5)"})
		f.tracer.TraceQueryEnd(qctx, conn, pgx.TraceQueryEndData{Err: context.Canceled})

		pctx := f.tracer.TracePrepareStart(ctx, conn, pgx.TracePrepareStartData{Name: "bad", SQL: "selec 1"})
		f.tracer.TracePrepareEnd(pctx, conn, pgx.TracePrepareEndData{Err: &pgconn.PgError{Code: "42601"}})

		cctx := f.tracer.TraceCopyFromStart(ctx, conn, pgx.TraceCopyFromStartData{TableName: pgx.Identifier{"public", "t"}, ColumnNames: []string{"a"}})
		f.tracer.TraceCopyFromEnd(cctx, conn, pgx.TraceCopyFromEndData{CommandTag: pgconn.NewCommandTag("COPY 3")})

		cctx = f.tracer.TraceCopyFromStart(ctx, conn, pgx.TraceCopyFromStartData{TableName: pgx.Identifier{"t"}})
		f.tracer.TraceCopyFromEnd(cctx, conn, pgx.TraceCopyFromEndData{Err: errors.New("copy failed")})

		b := &pgx.Batch{}
		b.Queue("insert into t values ($1)", 1)
		b.Queue("insert into t values ($1)", 1)
		bctx := f.tracer.TraceBatchStart(ctx, conn, pgx.TraceBatchStartData{Batch: b})
		f.tracer.TraceBatchQuery(bctx, conn, pgx.TraceBatchQueryData{SQL: "insert into t values ($1)", Args: []any{1}})
		f.tracer.TraceBatchQuery(bctx, conn, pgx.TraceBatchQueryData{SQL: "insert into t values ($1)", Args: []any{1}, Err: dup})
		f.tracer.TraceBatchEnd(bctx, conn, pgx.TraceBatchEndData{})
	})
	other := stmt(base, "SELECT", "select pg_sleep(?)", "error.type", ErrorTypeCanceled)
	other.fail = ErrorTypeCanceled
	copyFailed := stmt(base, "COPY", "", "error.type", errorTypeOther).summary("COPY t", "t")
	copyFailed.fail = errorTypeOther
	checkSpans(t, got, []wantSpan{
		stmt(base, "INSERT", "insert into t values ($1)").summary("INSERT t", "t").failed("23505"),
		other,
		stmt(base, "PREPARE", "selec ?").summary("", "").failed("42601"), // not a command: no summary
		stmt(base, "COPY", "", "pgconnector.rows_affected", "3").summary("COPY public.t", "public.t"),
		copyFailed,
		stmt(base, "BATCH INSERT", "insert into t values ($1)", "db.operation.batch.size", "2").summary("BATCH INSERT t", "t").failed("23505"),
	})
	query := stmt(base, "INSERT", "insert into t values ($1)").summary("INSERT t", "t")
	query.kind = trace.SpanKindInternal
	checkSpans(t, childrenOf(f.rec.Ended(), got[5].SpanContext().SpanID()), []wantSpan{query, query.failed("23505")})

	d := points(t, collect(t, f.reader)[dbconv.ClientOperationDuration{}.Name()])
	want := map[string]float64{
		f.measured("INSERT", failure("23505")...):       1,
		f.measured("SELECT", "error.type", "canceled"):  1,
		f.measured("PREPARE", failure("42601")...):      1,
		f.measured("COPY"):                              1,
		f.measured("COPY", "error.type", "_OTHER"):      1,
		f.measured("BATCH INSERT", failure("23505")...): 1,
	}
	if !maps.Equal(d, want) {
		t.Errorf("db.client.operation.duration\n %v, want\n %v", d, want)
	}
}

// Connect: a postgresql.connect span for a plain pgx connect, none inside a connect of the
// connector (which has its own).
func TestPgxTracerConnect(t *testing.T) {
	f := newPgxFixture(t)
	closed := uint16(harness.FreePort(t))
	var connector trace.SpanID
	got := f.under(t, func(ctx context.Context) {
		conn, err := pgx.ConnectConfig(ctx, f.cfg)
		if err != nil {
			t.Fatal(err)
		}
		conn.Close(ctx)

		bad := f.cfg.Copy()
		bad.Port = closed
		if _, err := pgx.ConnectConfig(ctx, bad); err == nil {
			t.Fatal("connected to a closed port")
		}

		// Inside the connector's connect: its span is the connect.
		cctx := NewTrace(f.tp).ConnectStart(ctx, negotiation.ConnectStartInfo{Host: f.host, Port: uint16(f.port), Database: testDB})
		if conn, err = pgx.ConnectConfig(cctx, f.cfg); err != nil {
			t.Fatal(err)
		}
		conn.Close(ctx)
		connector = trace.SpanFromContext(cctx).SpanContext().SpanID()
		trace.SpanFromContext(cctx).End()
	})
	base := map[string]string{"db.system.name": "postgresql", "db.namespace": testDB, "server.address": f.host, "user.name": f.cfg.User}
	if len(got) != 3 {
		t.Fatalf("spans %q, want three connects", spanNames(got))
	}
	checkSpans(t, got[:2], []wantSpan{
		{name: SpanConnect, kind: trace.SpanKindClient, attrs: plus(base, "server.port", strconv.Itoa(f.port))},
		{name: SpanConnect, kind: trace.SpanKindClient, attrs: plus(base, "server.port", strconv.Itoa(int(closed)), "error.type", ErrorTypeDial),
			fail: got[1].Status().Description, events: 1},
	})
	if got[1].Status().Description == "" {
		t.Error("the failed connect has no status description")
	}
	if got[2].SpanContext().SpanID() != connector {
		t.Errorf("third span %s is not the connector's connect", got[2].Name())
	}
	if n := len(childrenOf(f.rec.Ended(), connector)); n != 0 {
		t.Errorf("the connector's connect span has %d children, want none from the pgx tracer", n)
	}
}

// Composed with multitracer, each tracer ends its own spans: a second PgxTracer's are children
// of the first's (multitracer hands each tracer the context the one before returned).
func TestPgxTracerComposed(t *testing.T) {
	f := newPgxFixture(t)
	second := NewPgxTracer(StatementConfig{TracerProvider: f.tp})
	f.cfg.Tracer = multitracer.New(f.tracer, second)
	conn := f.connect(t)
	got := f.under(t, func(ctx context.Context) {
		if err := conn.QueryRow(ctx, "select 1").Scan(new(int)); err != nil {
			t.Fatal(err)
		}
		if err := conn.SendBatch(ctx, &pgx.Batch{QueuedQueries: []*pgx.QueuedQuery{{SQL: "select 1"}, {SQL: "select 2"}}}).Close(); err != nil {
			t.Fatal(err)
		}
	})
	base := f.base()
	checkSpans(t, got, []wantSpan{
		stmt(base, "SELECT", "select ?", "db.response.returned_rows", "1"),
		stmt(base, "BATCH SELECT", "select ?", "db.operation.batch.size", "2"),
	})
	ended := f.rec.Ended()
	checkSpans(t, childrenOf(ended, got[0].SpanContext().SpanID()), []wantSpan{stmt(base, "SELECT", "", "db.response.returned_rows", "1")})
	inner := childrenOf(ended, got[1].SpanContext().SpanID())
	if names := spanNames(inner); !slices.Equal(names, []string{"SELECT", "SELECT", "BATCH SELECT"}) {
		t.Fatalf("children of the batch %q, want its two queries and the second tracer's batch", names)
	}
	if n := len(childrenOf(ended, inner[2].SpanContext().SpanID())); n != 2 {
		t.Errorf("the second tracer's batch has %d children, want 2", n)
	}
	if n := strings.Count(strings.Join(spanNames(ended), " "), SpanConnect); n != 2 {
		t.Errorf("%d connect spans, want one per tracer", n)
	}
}

// Issue 12 through pgx: db.query.text keeps a text as written only when values fill its
// placeholders; pgx's options, a NamedArgs whose rewrite makes no placeholder and values with no
// placeholder to fill leave it sanitized.
func TestPgxTracerQueryText(t *testing.T) {
	f := newPgxFixture(t)
	conn := f.connect(t)
	const alter = "ALTER ROLE r PASSWORD 'secret'"
	const sanitized = "ALTER ROLE r PASSWORD ?"
	exec := func(ctx context.Context, sql string, args ...any) {
		conn.Exec(ctx, sql, args...) // some fail: only the recorded text matters
	}
	query := func(ctx context.Context, sql string, args ...any) {
		if rows, err := conn.Query(ctx, sql, args...); err == nil {
			rows.Close()
		}
	}
	got := f.under(t, func(ctx context.Context) {
		exec(ctx, alter, pgx.QueryExecModeSimpleProtocol)
		exec(ctx, alter, pgx.QueryExecModeExec)
		exec(ctx, alter, pgx.NamedArgs{"x": 1})
		exec(ctx, alter, pgx.StrictNamedArgs{})
		exec(ctx, alter, pgx.QueryExecModeSimpleProtocol, pgx.NamedArgs{"x": 1})
		query(ctx, alter, pgx.QueryResultFormats{1})
		query(ctx, alter, pgx.QueryResultFormatsByOID{25: 1}, pgx.QueryExecModeSimpleProtocol)
		exec(ctx, alter, "value")                                                  // no placeholder to fill
		exec(ctx, alter, pgx.QueryResultFormats{1})                                // Exec: a value, taken for an option
		exec(ctx, "select $1::text, 'kept'", pgx.QueryExecModeSimpleProtocol, "v") // parameterized
		query(ctx, "select @a::int, 'kept'", pgx.NamedArgs{"a": 1})
		b := &pgx.Batch{}
		b.Queue(alter, pgx.QueryExecModeSimpleProtocol)          // in a batch, a value
		b.Queue("select $1::int, 'kept'", pgx.QueryExecModeExec) // which fills $1
		b.Queue("select @a::int, 'kept'", pgx.NamedArgs{"a": 1})
		conn.SendBatch(ctx, b).Close() // fails: the fake server describes no parameter
	})
	var texts []string
	for _, s := range got {
		texts = append(texts, queryText(s))
	}
	want := []string{sanitized, sanitized, sanitized, sanitized, sanitized, sanitized, sanitized, sanitized, sanitized,
		"select $1::text, 'kept'", "select @a::int, 'kept'",
		sanitized + "; select $1::int, 'kept'; select @a::int, 'kept'"}
	if !slices.Equal(texts, want) {
		t.Errorf("db.query.text\n %q\nwant\n %q", texts, want)
	}
}
