package tracing

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Operation names (db.operation.name) of the pgx calls that have no statement text of their own
// or run several: CopyFrom, and a batch whose queries do not all have the same operation.
const (
	OperationCopy  = "COPY"
	OperationBatch = "BATCH"
)

// PgxTracer traces the statements run on pgx connections (pgx.Conn, pgxpool) through pgx's own
// tracer interfaces, as [Statements] traces those run through database/sql: the same spans (name,
// kind CLIENT, attributes, status), the same db.client.operation.duration measurement, the same
// rules for db.query.text. Set it as the Tracer of a pgx.ConnConfig (for a pool, of its
// pgxpool.Config's ConnConfig, once): each connection's server.address, server.port and
// db.namespace come from that connection's own config. To run it with a tracer of your own,
// compose them with github.com/jackc/pgx/v5/multitracer.
//
//   - Query, QueryRow, Exec: one span, named and attributed as a database/sql statement of the
//     same text. A query's span ends when its rows are closed (pgx calls TraceQueryEnd then).
//     pgx runs Begin, Commit and Rollback as the statements "begin", "commit" and "rollback":
//     they are BEGIN, COMMIT and ROLLBACK spans with that db.query.text.
//   - Prepare: a PREPARE span with the prepared text, also when pgx answers it from its own map
//     without a round trip (the same name and text prepared before). The prepares pgx makes
//     itself inside Query or Exec (its statement and description caches) make no span: they
//     are part of the query's span, as under database/sql. A statement run by the name it was
//     prepared under is traced with the text it was prepared with (up to 256 names per
//     connection are remembered; a name prepared again is updated).
//   - SendBatch: one span for the batch, from SendBatch to the close of its results. A batch of
//     two or more queries is the semantic conventions' batch operation: db.operation.batch.size,
//     db.operation.name "BATCH <op>" when every query has the same operation and "BATCH"
//     otherwise; db.query.summary (the span's default name) "BATCH <summary>" when every query
//     has the same summary, else the operation name; db.collection.name when every query has
//     the same one; db.query.text the queries' text when they all
//     have the same one, else their texts joined with "; ". Each query whose result is read is
//     also a child span of kind INTERNAL, named and attributed as that query's own statement
//     span, from when pgx began reading its result (TraceBatchQueryData.ReadStartTime) to when it
//     was read (for a query read as rows, when they are closed), with its own status; it is not
//     measured, and it is INTERNAL so that the batch counts as one client call. The batch span
//     fails with the batch's error or, when pgx reports none, with that of the first query that
//     failed. A batch of one query is that query: its span is the statement span. pgx traces no
//     empty batch (it sends nothing).
//   - CopyFrom: a span named by its db.query.summary, "COPY <table>", with db.operation.name COPY
//     and db.collection.name the table as given (its parts joined with "."); there is no
//     db.query.text (the text is pgx's). db.collection.name is not an attribute
//     of the measurement: the measurements of all statements have the same attributes.
//   - Connect (pgx.Connect, pgx.ConnectConfig, a pool's new connections): a postgresql.connect
//     span of kind CLIENT, with db.system.name, server.address and server.port (the first host
//     of the config), db.namespace and, on failure, the error as the connector's connect span
//     records it. It is not measured. When the connect runs inside a connect of a pgconnector
//     Connector (its context belongs to the connector's recording postgresql.connect span), no
//     span is started: the connector's span, with its steps, is that connect. (A Connector's
//     database/sql connections have this tracer only when pgconnector.WithBeforeConnect sets
//     it; with the connector's own statement spans on, statements run through database/sql
//     would then be traced twice. Its pgx configurations, Connector.PgxConfig and
//     Connector.PgxPoolConfig, have one by default, made from the connector's options.) The
//     connections of a Connector's pgxpool or ConnectPgx never call these hooks: pgx's connect
//     there only takes over the session the connector established.
//
// The parent of every span is the span in the caller's context. What pgxpool does on its own
// (health checks, the ping of a connection idle for a while) is not traced.
//
// StatementConfig's SpanFilter, OmitRootSpans, Attributes and CancelNotError apply to the
// statement spans as under database/sql (not to the connect span); PingSpans and SQLComment do
// nothing here: pgx runs no ping through its tracer, and a tracer cannot change a text.
//
// server.address and server.port are the Host and Port of the connection's config: with pgx's
// own fallback to the other hosts of a multi-host connection string, that is the first host,
// not necessarily the one connected to (pgx does not say which).
//
// The arguments of a call are never recorded. They decide only whether the call is
// parameterized, its text then recorded as written, else with its literals replaced (see
// StatementConfig.QueryText). The options pgx takes from the front of the arguments are not
// values: QueryExecMode, QueryResultFormats, QueryResultFormatsByOID (taken as options for Exec
// too, where pgx takes them for values: a tracer cannot tell Exec from Query) and a
// QueryRewriter; for a query of a batch, only a QueryRewriter. pgx hands the tracer a batch
// query's text and values after its NamedArgs rewrite: its child span records the rewritten text.
type PgxTracer struct {
	cfg    StatementConfig
	tracer trace.Tracer
	key    string                  // of its state in each connection's CustomData
	byDB   sync.Map                // dbUser (db.namespace, user.name) -> *Statements
	client []trace.SpanStartOption // of the connect span
}

// pgxTracers numbers the PgxTracers, so that each has its own key in a connection's CustomData.
var pgxTracers atomic.Uint64

// NewPgxTracer returns a tracer for pgx connections. cfg is read as by [NewStatements];
// cfg.Database, when set, is db.namespace for every connection, else each connection's database;
// cfg.User likewise is user.name, else each connection's user.
func NewPgxTracer(cfg StatementConfig) *PgxTracer {
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	return &PgxTracer{
		cfg: cfg,
		tracer: cfg.TracerProvider.Tracer(ScopeName,
			trace.WithInstrumentationVersion(Version),
			trace.WithSchemaURL(semconv.SchemaURL)),
		key:    "github.com/pgconnector/pgconnector/tracing.PgxTracer#" + strconv.FormatUint(pgxTracers.Add(1), 10),
		client: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)},
	}
}

// statements returns the statement tracer of the connections to database as user.
func (t *PgxTracer) statements(database, user string) *Statements {
	if t.cfg.Database != "" {
		database = t.cfg.Database
	}
	if t.cfg.User != "" {
		user = t.cfg.User
	}
	key := dbUser{database, user}
	if s, ok := t.byDB.Load(key); ok {
		return s.(*Statements)
	}
	cfg := t.cfg
	cfg.Database, cfg.User = database, user
	s, _ := t.byDB.LoadOrStore(key, NewStatements(cfg))
	return s.(*Statements)
}

// dbUser is a database and a role, which the statement tracers of PgxTracer are per.
type dbUser struct{ database, user string }

// pgxConn is what a PgxTracer keeps of one connection, in its CustomData (a pgx connection is
// used by one goroutine at a time).
type pgxConn struct {
	ic    interceptor       // the statement tracer and server of the connection
	copy  *statement        // COPY, made at the first CopyFrom
	names map[string]string // prepared statement name -> its text
}

func (t *PgxTracer) conn(conn *pgx.Conn) *pgxConn {
	data := conn.PgConn().CustomData()
	if pc, ok := data[t.key].(*pgxConn); ok {
		return pc
	}
	cfg := conn.Config() // a copy: once per connection
	s := t.statements(cfg.Database, cfg.User)
	pc := &pgxConn{ic: interceptor{s: s, srv: s.server(cfg.Host, cfg.Port)}}
	data[t.key] = pc
	return pc
}

// text returns the text a call of sql runs: the prepared text when sql is a name given to
// Prepare.
func (pc *pgxConn) text(sql string) string {
	if text, ok := pc.names[sql]; ok {
		return text
	}
	return sql
}

// statement returns what a call of sql with args, taking the pgx options opts, gives.
func (pc *pgxConn) statement(sql string, args []any, opts pgxOptions) *statement {
	return pc.ic.s.run(pc.ic.srv, pc.text(sql), len(args), func(i int) any { return args[i] }, opts)
}

// pgxCallKey marks, in the context a Start method returns, the call it started. Each PgxTracer
// has its own key, so that two composed ones end their own calls.
type pgxCallKey struct{ t *PgxTracer }

type pgxCallKind uint8

const (
	pgxQuery pgxCallKind = iota + 1
	pgxPrepare
	pgxBatch
	pgxCopy
	pgxConnect
)

// pgxCall is one traced pgx call.
type pgxCall struct {
	call
	kind      pgxCallKind
	conn      *pgx.Conn
	pc        *pgxConn
	name, sql string // Prepare: the name and the text
	batchSize int
	batchErr  error // the first error of a batch's queries
}

func (t *PgxTracer) start(ctx context.Context, c *pgxCall, st *statement) context.Context {
	ctx, c.call = c.pc.ic.begin(ctx, st)
	return context.WithValue(ctx, pgxCallKey{t}, c)
}

// started returns the call of kind the Start method of t put in ctx, for conn.
func (t *PgxTracer) started(ctx context.Context, kind pgxCallKind, conn *pgx.Conn) *pgxCall {
	c, _ := ctx.Value(pgxCallKey{t}).(*pgxCall)
	if c == nil || c.kind != kind || c.conn != conn {
		return nil
	}
	return c
}

// TraceQueryStart starts the span of Query, QueryRow or Exec.
func (t *PgxTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	pc := t.conn(conn)
	return t.start(ctx, &pgxCall{kind: pgxQuery, conn: conn, pc: pc}, pc.statement(data.SQL, data.Args, queryOptions))
}

// TraceQueryEnd ends the span of Query (when its rows are closed), QueryRow or Exec.
func (t *PgxTracer) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	if c := t.started(ctx, pgxQuery, conn); c != nil {
		if data.Err == nil {
			c.setTag(data.CommandTag)
		}
		c.pc.ic.end(ctx, &c.call, data.Err)
	}
}

// TracePrepareStart starts the span of Prepare, unless pgx prepares for a call being traced.
func (t *PgxTracer) TracePrepareStart(ctx context.Context, conn *pgx.Conn, data pgx.TracePrepareStartData) context.Context {
	if c, _ := ctx.Value(pgxCallKey{t}).(*pgxCall); c != nil && c.conn == conn {
		return ctx // the statement cache of Query or Exec: part of that call
	}
	pc := t.conn(conn)
	c := &pgxCall{kind: pgxPrepare, conn: conn, pc: pc, name: data.Name, sql: data.SQL}
	return t.start(ctx, c, pc.ic.s.prepare(pc.ic.srv, data.SQL))
}

// TracePrepareEnd ends the span of Prepare and remembers the text of a named statement.
func (t *PgxTracer) TracePrepareEnd(ctx context.Context, conn *pgx.Conn, data pgx.TracePrepareEndData) {
	c := t.started(ctx, pgxPrepare, conn)
	if c == nil {
		return
	}
	c.pc.ic.end(ctx, &c.call, data.Err)
	if data.Err == nil && c.name != "" && c.name != c.sql {
		names := c.pc.names
		if names == nil {
			names = map[string]string{}
			c.pc.names = names
		}
		if _, ok := names[c.name]; ok || len(names) < maxCachedStatements {
			names[c.name] = c.sql
		}
	}
}

// TraceBatchStart starts the span of SendBatch.
func (t *PgxTracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	pc := t.conn(conn)
	var queries []*pgx.QueuedQuery
	if data.Batch != nil {
		queries = data.Batch.QueuedQueries
	}
	c := &pgxCall{kind: pgxBatch, conn: conn, pc: pc, batchSize: len(queries)}
	return t.start(ctx, c, pc.batchStatement(queries))
}

// batchStatement returns what a batch of queries gives: that of its query when it has one, else
// a batch operation's (see PgxTracer).
func (pc *pgxConn) batchStatement(queries []*pgx.QueuedQuery) *statement {
	if len(queries) == 1 {
		return pc.statement(queries[0].SQL, queries[0].Arguments, batchOptions)
	}
	s := pc.ic.s
	texts := s.needText()
	sameOp, sameText, sameSum, sameTable := true, true, true, true
	var first *statement
	var b strings.Builder
	for i, q := range queries {
		st := pc.statement(q.SQL, q.Arguments, batchOptions)
		if i == 0 {
			first = st
		} else {
			sameOp = sameOp && st.op == first.op
			sameText = sameText && st.text == first.text
			sameSum = sameSum && st.sum.summary == first.sum.summary
			sameTable = sameTable && st.sum.collection == first.sum.collection
			if texts {
				b.WriteString("; ")
			}
		}
		if texts {
			b.WriteString(st.text)
		}
	}
	op := OperationBatch
	if first != nil && sameOp && first.op != "" {
		op += " " + first.op
	}
	text := ""
	if texts {
		text = b.String()
		if sameText {
			text = first.text
		}
	}
	sum := querySummary{summary: op}
	if first != nil && sameSum && first.sum.summary != "" {
		if sum.summary = OperationBatch + " " + first.sum.summary; len(sum.summary) > maxSummary {
			sum.summary = summarize(OperationBatch, pc.text(queries[0].SQL)).summary
		}
	}
	if first != nil && sameTable {
		sum.collection = first.sum.collection
	}
	st := s.newStatement(pc.ic.srv, op, text, sum)
	st.opts = append(st.opts, trace.WithAttributes(semconv.DBOperationBatchSize(len(queries))))
	return st
}

// TraceBatchQuery records one query of a batch whose result was read: a child span of the
// batch's when it has two queries or more.
func (t *PgxTracer) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	c := t.started(ctx, pgxBatch, conn)
	if c == nil {
		return
	}
	if data.Err != nil && c.batchErr == nil {
		c.batchErr = data.Err
	}
	if c.batchSize < 2 {
		if data.Err == nil {
			c.setTag(data.CommandTag) // the span of the batch is that of its one query
		}
		return
	}
	if !c.span.IsRecording() {
		return
	}
	st := *c.pc.statement(data.SQL, data.Args, batchOptions)
	start := data.ReadStartTime
	if start.IsZero() {
		start = time.Now()
	}
	st.opts = append(slices.Clip(st.opts), trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(start))
	qctx, q := c.pc.ic.begin(trace.ContextWithSpan(ctx, c.span), &st)
	q.start = time.Time{} // not measured: the batch is
	if data.Err == nil {
		q.setTag(data.CommandTag)
	}
	c.pc.ic.end(qctx, &q, data.Err)
}

// TraceBatchEnd ends the span of SendBatch, when its results are closed.
func (t *PgxTracer) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchEndData) {
	c := t.started(ctx, pgxBatch, conn)
	if c == nil {
		return
	}
	err := data.Err
	if err == nil {
		err = c.batchErr
	}
	c.pc.ic.end(ctx, &c.call, err)
}

// TraceCopyFromStart starts the span of CopyFrom.
func (t *PgxTracer) TraceCopyFromStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceCopyFromStartData) context.Context {
	pc := t.conn(conn)
	if pc.copy == nil {
		pc.copy = pc.ic.s.newStatement(pc.ic.srv, OperationCopy, "", querySummary{})
	}
	st := *pc.copy
	table := strings.Join(data.TableName, ".")
	kv := []attribute.KeyValue{semconv.DBCollectionName(table)}
	if len(OperationCopy)+1+len(table) <= maxSummary {
		st.name = OperationCopy + " " + table
		kv = append(kv, semconv.DBQuerySummary(st.name))
	}
	st.opts = append(slices.Clip(st.opts), trace.WithAttributes(kv...))
	return t.start(ctx, &pgxCall{kind: pgxCopy, conn: conn, pc: pc}, &st)
}

// TraceCopyFromEnd ends the span of CopyFrom.
func (t *PgxTracer) TraceCopyFromEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceCopyFromEndData) {
	if c := t.started(ctx, pgxCopy, conn); c != nil {
		if data.Err == nil {
			c.setTag(data.CommandTag)
		}
		c.pc.ic.end(ctx, &c.call, data.Err)
	}
}

// TraceConnectStart starts the postgresql.connect span of a connect, unless the connect belongs
// to one of a pgconnector Connector, which has its own.
func (t *PgxTracer) TraceConnectStart(ctx context.Context, data pgx.TraceConnectStartData) context.Context {
	if connect(ctx) != nil {
		return ctx
	}
	cfg := data.ConnConfig
	var a [6]attribute.KeyValue
	kv := append(a[:0], semconv.DBSystemNamePostgreSQL)
	database, user := t.cfg.Database, t.cfg.User
	if cfg != nil {
		kv = appendServer(kv, cfg.Host, cfg.Port)
		if database == "" {
			database = cfg.Database
		}
		if user == "" {
			user = cfg.User
		}
	}
	if database != "" {
		kv = append(kv, semconv.DBNamespace(database))
	}
	if user != "" {
		kv = append(kv, semconv.UserName(user))
	}
	opts := [2]trace.SpanStartOption{t.client[0], trace.WithAttributes(kv...)}
	ctx, span := t.tracer.Start(ctx, SpanConnect, opts[:]...)
	return context.WithValue(ctx, pgxCallKey{t}, &pgxCall{kind: pgxConnect, call: call{span: span}})
}

// TraceConnectEnd ends the postgresql.connect span of a connect.
func (t *PgxTracer) TraceConnectEnd(ctx context.Context, data pgx.TraceConnectEndData) {
	c := t.started(ctx, pgxConnect, nil)
	if c == nil {
		return
	}
	if data.Err != nil && c.span.IsRecording() {
		fail(c.span, data.Err, "", ErrorTypeConnectFailed)
	}
	c.span.End()
}

var (
	_ pgx.QueryTracer    = (*PgxTracer)(nil)
	_ pgx.BatchTracer    = (*PgxTracer)(nil)
	_ pgx.CopyFromTracer = (*PgxTracer)(nil)
	_ pgx.PrepareTracer  = (*PgxTracer)(nil)
	_ pgx.ConnectTracer  = (*PgxTracer)(nil)
)
