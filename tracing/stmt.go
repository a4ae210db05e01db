package tracing

import (
	"context"
	"database/sql/driver"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/dbconv"
	"go.opentelemetry.io/otel/trace"
)

// Operation names (db.operation.name) of the calls that have no statement text of their own.
// A statement's operation is the first keyword of its text (see [StatementConfig]).
const (
	OperationBegin    = "BEGIN"
	OperationCommit   = "COMMIT"
	OperationRollback = "ROLLBACK"
	OperationPrepare  = "PREPARE"
	OperationPing     = "PING"
	// OperationResetSession is the operation of database/sql's check of a pooled connection
	// (driver.SessionResetter), traced only with StatementConfig.PingSpans.
	OperationResetSession = "RESET_SESSION"
)

// errorTypeOther is error.type for a failed statement whose error is neither a server error
// (SQLSTATE) nor one of the ErrorType classes: the semantic conventions' fallback, "_OTHER".
var errorTypeOther = semconv.ErrorTypeOther.Value.AsString()

// durationBuckets are the explicit bucket boundaries, in seconds, of
// db.client.operation.duration (semantic conventions, database-metrics.md), used for
// db.client.connection.create_time too.
var durationBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10}

// StatementConfig configures [NewStatements]. The zero value gives spans and the metric to the
// global providers, without db.namespace or db.query.text.
type StatementConfig struct {
	// TracerProvider is where the spans go; nil means otel.GetTracerProvider(), read once, now.
	TracerProvider trace.TracerProvider
	// MeterProvider is where db.client.operation.duration goes; nil means otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Database is db.namespace: the database of the connection string.
	Database string
	// User is user.name of the statement spans: the role of the connection string (not of the
	// measurement: its attributes are those of the semantic conventions' metric). Empty, none.
	User string
	// QueryText records db.query.text as the semantic conventions ask: the text of a
	// parameterized call as written, any other text with every literal (strings of every form,
	// dollar-quoted bodies such as DO's, numbers, TRUE and FALSE) replaced by "?". A call is
	// parameterized when values among its arguments fill all the $n placeholders of its text.
	// pgx's options at the front of the arguments (QueryExecMode, QueryRewriter and, for a query,
	// QueryResultFormats and QueryResultFormatsByOID) are not values; with NamedArgs or
	// StrictNamedArgs the text needs @names outside literals and comments, and the placeholders
	// and values are those of their rewrite; with another QueryRewriter the call is not
	// parameterized; the $n of a PREPARE or CREATE statement belong to what it defines, not to
	// the call. A prepared text is parameterized when it has $n placeholders: each execution
	// fills them. Parameter values are never recorded.
	QueryText bool
	// SpanName, when set, names each statement span from its operation (db.operation.name, "" when
	// unknown) and its text (as db.query.text records it, whatever QueryText says; "" for
	// BEGIN, COMMIT, ROLLBACK, PING and RESET_SESSION). An empty result keeps the default name
	// (the statement's db.query.summary, else its operation: see [Statements]).
	SpanName func(ctx context.Context, operation, query string) string

	// The fields below choose which calls make a span and what it holds. None of them changes
	// db.client.operation.duration: every call is measured as before, with the same attributes.

	// PingSpans makes spans of the calls that only check a connection: Ping (PING, as
	// database/sql's DB.PingContext and Conn.PingContext run it) and ResetSession (RESET_SESSION,
	// database/sql's check of a pooled connection before it is reused: pgx's stdlib pings the
	// server there when the connection was idle for more than a second). The zero value makes
	// none: a ping with no span in its context would otherwise be a trace of its own. PING is
	// measured whatever PingSpans says; RESET_SESSION never is. pgx (PgxTracer) runs no ping
	// through its tracer: nothing to trace there.
	PingSpans bool
	// SpanFilter, when set, is asked before each statement span: false makes no span for that
	// call (its measurement is still taken, as otelsql's filter). operation and query are as
	// SpanName receives them. For a pgx batch it is asked for the batch and, when the batch has
	// a span, for each query's child span.
	SpanFilter func(ctx context.Context, operation, query string) bool
	// OmitRootSpans makes no span for a call whose context holds no span (local, or remote from
	// a propagated trace context): such a span would be the root of a trace of its own. The zero
	// value makes them.
	OmitRootSpans bool
	// Attributes, when set, gives attributes of the application to add to each statement span
	// at its start (so that a sampler sees them), after the connector's own; operation and
	// query are as SpanName receives them. They must hold no secret: they are exported as
	// they are. They are not added to the measurement (its attributes are bounded).
	Attributes func(ctx context.Context, operation, query string) []attribute.KeyValue
	// CancelNotError leaves the status of a span whose call was canceled by its context Unset,
	// not Error: the call failed with context.Canceled, or with the server's query_canceled
	// (SQLSTATE 57014, the answer to the cancel request pgx sends when the context ends) while
	// its context was canceled. error.type (canceled or 57014) and db.response.status_code are
	// still recorded, and the measurement is unchanged. A call whose deadline passed
	// (context.DeadlineExceeded) is still an error: a timeout is a failure, a cancel is the
	// caller giving up. The zero value makes a cancel an error, as any other.
	CancelNotError bool
	// SQLComment appends a sqlcommenter comment carrying the trace context of the statement span
	// to the text of the execs and queries run through database/sql (see [SQLCommentMode]). The
	// zero value, SQLCommentOff, sends every text as written. A PgxTracer does not use it: pgx's
	// tracer interfaces see the text but cannot change it.
	SQLComment SQLCommentMode
	// DefaultQueryExecMode is the connections' pgx.ConnConfig.DefaultQueryExecMode, for
	// SQLComment; zero means pgx's default, QueryExecModeCacheStatement.
	DefaultQueryExecMode pgx.QueryExecMode
}

// Statements traces the statement-level calls of database/sql connections: each exec, query,
// prepare, prepared statement exec and query, begin, commit, rollback and ping is one
// measurement of db.client.operation.duration and, unless the configuration says otherwise (see
// below), one span of kind CLIENT, a child of the span in the caller's context, on the
// connections [Statements.WrapConn] returns.
//
// A span is named by its db.query.summary, as the semantic conventions ask (database-spans.md,
// "Name"): the operations of the text and their tables in the order written ("SELECT orders",
// "INSERT shipping SELECT orders", "CREATE TABLE t"; see summarizeQuery), "PREPARE " and the
// summary of the text for a prepare. A text without one (one the summary cannot read, such as
// an unknown command or unbalanced parentheses) is named by its operation: the first keyword of
// the statement (SELECT, INSERT, ...) in upper case, when the text is a single statement and the
// keyword starts one of PostgreSQL's SQL commands (else "postgresql", the database system);
// PREPARE for a prepare. BEGIN, COMMIT, ROLLBACK and PING, the calls without a text, have no
// summary and are named by their operation. StatementConfig.SpanName, when it returns a name,
// wins. (The conventions recommend against taking the operation name and the collection name
// from the text for PostgreSQL, whose texts can hold several: db.operation.name is the first
// keyword of a single statement, what the connector's users asked for, and db.collection.name
// is set only when the single statement's tables are all one.)
//
// Attributes, all given at the start of the span so that a sampler sees them: db.system.name,
// db.namespace, server.address and server.port of the connection's host (the host as written
// in the connection string, the one this connection went to), db.operation.name,
// db.query.summary, db.collection.name (when the text's single statement works on one table:
// "orders" of "SELECT orders", as written), db.query.text, and user.name
// (StatementConfig.User). A successful call adds its row count: an
// exec's Result.RowsAffected as pgconnector.rows_affected, a query's rows read before its rows
// were closed (all of them, read to the end) as db.response.returned_rows. A failed call adds db.response.status_code (the SQLSTATE of a server error) and
// error.type (the SQLSTATE, else one of the ErrorType classes, else "_OTHER") and sets the
// status Error, described by error.type. The error's own text is not recorded: a server or
// driver message can quote a parameter value (invalid input syntax for type integer: "...").
//
// The span of a query ends when its rows are closed, not when the query returns: reading the
// rows is part of the operation, and its errors are the operation's. database/sql closes the
// rows after the last one, at Rows.Close, at Row.Scan, or when the query's context ends.
//
// A ping makes a span only with StatementConfig.PingSpans, which traces ResetSession
// (database/sql's check of a pooled connection) too. Nothing else of a connection is traced: not
// Close, not the closing of a prepared statement. StatementConfig also chooses
// calls that make no span (SpanFilter, OmitRootSpans), adds attributes of the application
// (Attributes), leaves cancellation out of the error status (CancelNotError) and comments the
// text sent with the span's trace context (SQLComment).
//
// What a statement text gives (operation, summary, table, recorded text, span start options) is
// worked out once per text and server, for the first 256 texts; later ones are worked out at
// each call.
type Statements struct {
	cfg      StatementConfig
	tp       trace.TracerProvider
	tracer   trace.Tracer
	duration dbconv.ClientOperationDuration
	servers  sync.Map // serverKey -> *server
}

// maxCachedStatements is how many statement texts per server Statements remembers what it
// worked out of.
const maxCachedStatements = 256

// NewStatements returns the statement tracer of cfg.
func NewStatements(cfg StatementConfig) *Statements {
	tp, mp := cfg.TracerProvider, cfg.MeterProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	duration, err := dbconv.NewClientOperationDuration(meter(mp), metric.WithExplicitBucketBoundaries(durationBuckets...))
	if err != nil {
		otel.Handle(err)
	}
	return &Statements{
		cfg: cfg,
		tp:  tp,
		tracer: tp.Tracer(ScopeName,
			trace.WithInstrumentationVersion(Version),
			trace.WithSchemaURL(semconv.SchemaURL)),
		duration: duration,
	}
}

// meter is the meter of this package's instruments.
func meter(mp metric.MeterProvider) metric.Meter {
	return mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version), metric.WithSchemaURL(semconv.SchemaURL))
}

// WrapConn returns conn with its statement-level calls traced. host and port are those of the
// server conn is connected to, as written in the connection string: they become server.address
// and server.port of its spans and measurements.
//
// The returned connection, and the statements, rows and transactions it hands out, have the
// methods of pgx's driver types (stdlib.Conn, stdlib.Stmt, stdlib.Rows and its transaction) and
// no other: database/sql sees the optional interfaces of database/sql/driver that pgx's types
// implement, those of the Go release the program is built with (driver.RowsColumnScanner from Go
// 1.27), and no other. A method that conn (or what it hands out) lacks answers as database/sql
// does without it: driver.ErrSkip for ExecContext, QueryContext and CheckNamedValue, Prepare for
// PrepareContext, Begin for BeginTx, nil for Ping and ResetSession. Conn returns the *pgx.Conn
// under conn, or nil when conn has none.
func (s *Statements) WrapConn(conn driver.Conn, host string, port uint16) driver.Conn {
	return &sqlConn{conn: conn, ic: s.server(host, port).ic}
}

type serverKey struct {
	host string
	port uint16
}

// server is what the connections to one host share: their attributes, and what was worked out
// of the statements they ran.
type server struct {
	base  []attribute.KeyValue // db.system.name, db.namespace, server.address, server.port
	user  []attribute.KeyValue // user.name of the spans, or none
	calls map[string]*statement
	texts sync.Map // textKey -> *textInfo
	n     atomic.Int32
	sets  sync.Map // operation -> attribute.Set of a success's measurement
	// ic traces the calls of this server's connections (WrapConn).
	ic *interceptor
}

type textKey struct {
	text    string
	prepare bool // prepared (operation PREPARE), else run
}

// textInfo is what one text, run or prepared, gives: its operation, the values its placeholders
// need, and the statement of each way it is recorded, made when first needed.
type textInfo struct {
	op        string
	need      int // see describeQuery
	sum       querySummary
	asWritten atomic.Pointer[statement]
	sanitized atomic.Pointer[statement]
}

// statement is what a call of one text (or a call without one) gives.
type statement struct {
	op   string // db.operation.name; "" when unknown
	text string // as db.query.text records it (for the span name function too); "" when not needed
	name string // the default span name
	sum  querySummary
	opts []trace.SpanStartOption
	// check: a call that only checks the connection (PING, RESET_SESSION), traced only with
	// StatementConfig.PingSpans.
	check bool
}

func (s *Statements) server(host string, port uint16) *server {
	key := serverKey{host, port}
	if srv, ok := s.servers.Load(key); ok {
		return srv.(*server)
	}
	srv := &server{base: []attribute.KeyValue{semconv.DBSystemNamePostgreSQL}}
	if s.cfg.Database != "" {
		srv.base = append(srv.base, semconv.DBNamespace(s.cfg.Database))
	}
	srv.base = appendServer(srv.base, host, port)
	if s.cfg.User != "" {
		srv.user = []attribute.KeyValue{semconv.UserName(s.cfg.User)}
	}
	srv.calls = map[string]*statement{}
	for _, op := range []string{OperationBegin, OperationCommit, OperationRollback, OperationPing, OperationResetSession} {
		srv.calls[op] = s.newStatement(srv, op, "", querySummary{})
	}
	srv.ic = &interceptor{s: s, srv: srv}
	got, _ := s.servers.LoadOrStore(key, srv)
	return got.(*server)
}

// run returns what a call running text with n arguments gives (arg(i) is the i-th); opts are
// the pgx options the call takes (see parameterized).
func (s *Statements) run(srv *server, text string, n int, arg func(i int) any, opts pgxOptions) *statement {
	ti := s.text(srv, text, false)
	return s.statement(srv, ti, text, parameterized(text, ti.need, n, arg, opts))
}

// runSQL returns what a call through database/sql running text with args gives: pgx's driver
// runs an exec with Conn.Exec, a query with Conn.Query.
func (s *Statements) runSQL(srv *server, text string, args []driver.NamedValue, opts pgxOptions) *statement {
	return s.run(srv, text, len(args), func(i int) any { return args[i].Value }, opts)
}

// prepare returns what preparing text gives: the text is parameterized when it has placeholders,
// which the values of each execution fill.
func (s *Statements) prepare(srv *server, text string) *statement {
	ti := s.text(srv, text, true)
	return s.statement(srv, ti, text, ti.need <= maxPlaceholder && ti.need > 0)
}

// text returns what was worked out of text, remembering it for the first texts of a server.
func (s *Statements) text(srv *server, text string, prepare bool) *textInfo {
	key := textKey{text, prepare}
	if ti, ok := srv.texts.Load(key); ok {
		return ti.(*textInfo)
	}
	op, need := describeQuery(text)
	sumOp := ""
	if prepare {
		op, sumOp = OperationPrepare, OperationPrepare
	}
	ti := &textInfo{op: op, need: need, sum: summarize(sumOp, text)}
	if srv.n.Load() < maxCachedStatements && srv.n.Add(1) <= maxCachedStatements {
		got, _ := srv.texts.LoadOrStore(key, ti)
		ti = got.(*textInfo)
	}
	return ti
}

// statement returns the statement of ti recording text as written (a parameterized call) or
// sanitized.
func (s *Statements) statement(srv *server, ti *textInfo, text string, asWritten bool) *statement {
	p := &ti.sanitized
	if asWritten {
		p = &ti.asWritten
	}
	if st := p.Load(); st != nil {
		return st
	}
	recorded := ""
	if s.needText() {
		recorded = text
		if !asWritten {
			recorded = sanitizeQuery(text)
		}
	}
	st := s.newStatement(srv, ti.op, recorded, ti.sum)
	if !p.CompareAndSwap(nil, st) {
		st = p.Load()
	}
	return st
}

// needText reports whether a statement's text is needed beyond db.query.text: for the functions
// of the configuration that receive it.
func (s *Statements) needText() bool {
	return s.cfg.QueryText || s.cfg.SpanName != nil || s.cfg.SpanFilter != nil || s.cfg.Attributes != nil
}

// newStatement returns the statement of a call of operation op recording text, with the summary
// and table of sum: the span is named by the summary, else by op, else "postgresql".
func (s *Statements) newStatement(srv *server, op, text string, sum querySummary) *statement {
	st := &statement{op: op, text: text, name: sum.summary, sum: sum, check: op == OperationPing || op == OperationResetSession}
	if st.name == "" {
		st.name = op
	}
	if st.name == "" {
		st.name = semconv.DBSystemNamePostgreSQL.Value.AsString()
	}
	kv := make([]attribute.KeyValue, len(srv.base), len(srv.base)+len(srv.user)+4)
	copy(kv, srv.base)
	kv = append(kv, srv.user...)
	if op != "" {
		kv = append(kv, semconv.DBOperationName(op))
	}
	if sum.summary != "" {
		kv = append(kv, semconv.DBQuerySummary(sum.summary))
	}
	if sum.collection != "" {
		kv = append(kv, semconv.DBCollectionName(sum.collection))
	}
	if s.cfg.QueryText && text != "" {
		kv = append(kv, semconv.DBQueryText(text))
	}
	st.opts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(kv...)}
	return st
}

// interceptor traces the calls of the connections to one server (sqlconn.go).
type interceptor struct {
	s   *Statements
	srv *server
}

// call is one traced operation.
type call struct {
	op       string
	span     trace.Span
	start    time.Time // zero when the operation is not measured
	rowsErr  error     // the first error reading the rows of a query
	finished bool
}

// begin starts the span of a call of st and, when the metric is enabled, its measurement.
func (ic *interceptor) begin(ctx context.Context, st *statement) (context.Context, call) {
	c := call{op: st.op}
	if ic.s.duration.Enabled(ctx) {
		c.start = time.Now()
	}
	cfg := &ic.s.cfg
	if unsetGlobal(ic.s.tp) || // no provider yet: the span would not record
		(st.check && !cfg.PingSpans) ||
		(cfg.OmitRootSpans && !trace.SpanContextFromContext(ctx).IsValid()) ||
		(cfg.SpanFilter != nil && !cfg.SpanFilter(ctx, st.op, st.text)) {
		c.span = noopSpan
		return ctx, c
	}
	name := st.name
	if f := cfg.SpanName; f != nil {
		if n := f(ctx, st.op, st.text); n != "" {
			name = n
		}
	}
	opts := st.opts
	if f := cfg.Attributes; f != nil {
		if kv := f(ctx, st.op, st.text); len(kv) > 0 {
			opts = append(slices.Clip(opts), trace.WithAttributes(kv...))
		}
	}
	ctx, c.span = ic.s.tracer.Start(ctx, name, opts...)
	return ctx, c
}

// setRows records n, the rows a successful call returned or changed (key: db.response.returned_rows
// or pgconnector.rows_affected), on c's span.
func (c *call) setRows(key attribute.Key, n int64) {
	if c.span.IsRecording() {
		c.span.SetAttributes(key.Int64(n))
	}
}

// setTag records the row count of tag, PostgreSQL's command tag of a successful call, on c's
// span: db.response.returned_rows for SELECT, pgconnector.rows_affected for another command
// whose tag ends with a count (INSERT 0 n, UPDATE n, DELETE n, MERGE n, COPY n, ...), nothing
// for a tag without one (CREATE TABLE).
func (c *call) setTag(tag pgconn.CommandTag) {
	s := tag.String()
	if !c.span.IsRecording() || s == "" || s[len(s)-1] < '0' || s[len(s)-1] > '9' {
		return
	}
	key := RowsAffectedKey
	if tag.Select() {
		key = semconv.DBResponseReturnedRowsKey
	}
	c.span.SetAttributes(key.Int64(tag.RowsAffected()))
}

// end ends the span and records the measurement of c, with err as its outcome.
func (ic *interceptor) end(ctx context.Context, c *call, err error) {
	if c.finished {
		return
	}
	c.finished = true
	var code, errType string
	if err != nil {
		code = sqlState(err)
		errType = code
		if errType == "" {
			errType = errorType(err, errorTypeOther)
		}
	}
	if err != nil && c.span.IsRecording() {
		var a [2]attribute.KeyValue
		kv := append(a[:0], semconv.ErrorTypeKey.String(errType))
		if code != "" {
			kv = append(kv, semconv.DBResponseStatusCode(code))
		}
		c.span.SetAttributes(kv...)
		if !ic.s.cfg.CancelNotError || !canceled(ctx, err, code) {
			c.span.SetStatus(codes.Error, errType)
		}
	}
	c.span.End()
	if !c.start.IsZero() {
		ic.s.duration.RecordSet(ctx, time.Since(c.start).Seconds(), ic.measurementSet(c.op, code, errType))
	}
}

// canceled reports whether err, the error of a call whose context is ctx (or one derived from
// it), comes from the cancellation of that context: context.Canceled, or the server's
// query_canceled (code, 57014) while ctx is canceled (pgx sends a cancel request when the
// context of a running query ends).
func canceled(ctx context.Context, err error, code string) bool {
	return errors.Is(err, context.Canceled) ||
		(code == sqlStateQueryCanceled && errors.Is(ctx.Err(), context.Canceled))
}

// sqlStateQueryCanceled is query_canceled (PostgreSQL's src/backend/utils/errcodes.txt).
const sqlStateQueryCanceled = "57014"

// measurementSet returns the attributes of a measurement: those of the connection, the operation
// and, for a failure, error.type and db.response.status_code. A success's set is made once per
// server and operation name (a bounded set: see commandKeyword).
func (ic *interceptor) measurementSet(op, code, errType string) attribute.Set {
	if errType == "" {
		if set, ok := ic.srv.sets.Load(op); ok {
			return set.(attribute.Set)
		}
	}
	kv := make([]attribute.KeyValue, 0, len(ic.srv.base)+3)
	kv = append(kv, ic.srv.base...)
	if op != "" {
		kv = append(kv, semconv.DBOperationName(op))
	}
	if errType != "" {
		kv = append(kv, semconv.ErrorTypeKey.String(errType))
		if code != "" {
			kv = append(kv, semconv.DBResponseStatusCode(code))
		}
		return attribute.NewSet(kv...)
	}
	set := attribute.NewSet(kv...)
	ic.srv.sets.Store(op, set)
	return set
}
