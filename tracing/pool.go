package tracing

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// SpanAcquire is the span of one pgxpool Acquire (and of the pool calls that acquire: Query,
// Exec, Begin, ...): from the call to the connection handed over or the error.
const SpanAcquire = "pgxpool.acquire"

// PoolTracerConfig configures [NewPoolTracer].
type PoolTracerConfig struct {
	// TracerProvider receives the acquire spans; nil means otel.GetTracerProvider(), read once.
	TracerProvider trace.TracerProvider
	// Metrics receives the acquire measurements (its pool's name labels them); nil: none.
	Metrics *Metrics
	// Database is db.namespace of the acquire spans.
	Database string
	// User is user.name of the acquire spans: the role of the connection string. Empty, none.
	User string
	// NoSpans turns the acquire spans off; the measurements stay.
	NoSpans bool
	// Host and Port, when Host is not empty, are the server of every connection of the pool
	// (a connection string of one host): the acquire spans get server.address and server.port
	// when they start, failed ones too, instead of from the connection handed over.
	Host string
	Port uint16
}

// PoolTracer observes a pgxpool through pgx's pool tracer interfaces: set it as the Tracer of
// the pool's ConnConfig (pgxpool.NewWithConfig takes its pgxpool.AcquireTracer and
// pgxpool.ReleaseTracer sides from there), once per pool. It traces no statement: its
// pgx.QueryTracer methods do nothing. To have statement spans too, compose it with
// [NewPgxTracer] through github.com/jackc/pgx/v5/multitracer, which passes the pool hooks on
// (the configuration of a pgconnector Connector's PgxPoolConfig has both, composed so).
//
//   - Acquire: one span [SpanAcquire] of kind INTERNAL (the client spans are the connect and the
//     statements under it), with db.system.name, db.namespace and user.name (PoolTracerConfig), and server.address and
//     server.port of the connection handed over (the host the connector connected to; with
//     PoolTracerConfig.Host, that host's, from the start). A
//     failed Acquire (the caller's context canceled or past its deadline, a failed connect)
//     has status Error and error.type as the connect span classes it ("timeout", "canceled",
//     a SQLSTATE...). The connect of a new connection the Acquire makes (pgxpool connects
//     under the Acquire's context values) is a child of it. The span is started only under a
//     recording span of the caller: pgxpool acquires for every Query and Exec, and a root span
//     per call would say nothing the statement span does not.
//   - Measurements, labelled with db.client.connection.pool.name: db.client.connection.wait_time
//     (histogram, s: each Acquire, successful or not), db.client.connection.use_time
//     (histogram, s: from the Acquire to the Release of the connection),
//     db.client.connection.timeouts (counter: the Acquires ended by their context's deadline).
//     The number of Acquires under way is read by [Metrics.ObservePgxPool] as
//     db.client.connection.pending_requests.
type PoolTracer struct {
	tracer   trace.Tracer
	spans    bool
	m        *Metrics
	attrs    []attribute.KeyValue // of every acquire span
	fixed    bool                 // attrs has the server (PoolTracerConfig.Host)
	opts     []trace.SpanStartOption
	key      string // of its state in each connection's CustomData
	pending  atomic.Int64
	poolName string
	// poolSet is db.client.connection.pool.name=poolName, built once: the pool's measurements
	// take it as it is, with no attribute set made per Acquire.
	poolSet metric.MeasurementOption
}

// poolTracers numbers the PoolTracers, so that each has its own key in a connection's CustomData.
var poolTracers atomic.Uint64

// NewPoolTracer returns the tracer of one pgxpool.
func NewPoolTracer(cfg PoolTracerConfig) *PoolTracer {
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	attrs := []attribute.KeyValue{semconv.DBSystemNamePostgreSQL}
	if cfg.Database != "" {
		attrs = append(attrs, semconv.DBNamespace(cfg.Database))
	}
	if cfg.User != "" {
		attrs = append(attrs, semconv.UserName(cfg.User))
	}
	attrs = appendServer(attrs, cfg.Host, cfg.Port)
	t := &PoolTracer{
		tracer: tp.Tracer(ScopeName,
			trace.WithInstrumentationVersion(Version),
			trace.WithSchemaURL(semconv.SchemaURL)),
		spans: !cfg.NoSpans,
		m:     cfg.Metrics,
		attrs: attrs,
		fixed: cfg.Host != "",
		key:   "github.com/pgconnector/pgconnector/tracing.PoolTracer#" + strconv.FormatUint(poolTracers.Add(1), 10),
	}
	t.opts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...)}
	if t.m != nil {
		t.poolName = t.m.poolName
		t.poolSet = metric.WithAttributeSet(attribute.NewSet(semconv.DBClientConnectionPoolName(t.poolName)))
	}
	return t
}

// Pending is the number of Acquires under way: started and not yet ended.
func (t *PoolTracer) Pending() int64 { return t.pending.Load() }

// acquireKey marks, in the context TraceAcquireStart returns, its acquire.
type acquireKey struct{ t *PoolTracer }

type acquire struct {
	start time.Time
	span  trace.Span // nil: not traced
}

// poolConn is what a PoolTracer keeps of one connection, in its CustomData.
type poolConn struct {
	server   []attribute.KeyValue // server.address, server.port
	acquired time.Time
}

// TraceAcquireStart starts the acquire span (under a recording span of the caller) and counts
// the Acquire as pending.
func (t *PoolTracer) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	t.pending.Add(1)
	a := &acquire{start: time.Now()}
	if t.spans && trace.SpanFromContext(ctx).IsRecording() {
		ctx, a.span = t.tracer.Start(ctx, SpanAcquire, t.opts...)
	}
	return context.WithValue(ctx, acquireKey{t}, a)
}

// TraceAcquireEnd ends the acquire span and records the wait.
func (t *PoolTracer) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, data pgxpool.TraceAcquireEndData) {
	a, _ := ctx.Value(acquireKey{t}).(*acquire)
	if a == nil {
		return
	}
	t.pending.Add(-1)
	now := time.Now()
	var pc *poolConn
	if data.Conn != nil {
		pc = t.conn(data.Conn)
		pc.acquired = now
	}
	if t.m != nil {
		if h := t.m.waitTime.Inst(); h.Enabled(ctx) { // dbconv's Record, with the set built once
			h.Record(ctx, now.Sub(a.start).Seconds(), t.poolSet)
		}
		if data.Err != nil && errors.Is(data.Err, context.DeadlineExceeded) {
			t.m.timeouts.Add(ctx, 1, t.poolName)
		}
	}
	if a.span == nil {
		return
	}
	if pc != nil && !t.fixed {
		a.span.SetAttributes(pc.server...)
	}
	if data.Err != nil {
		fail(a.span, data.Err, "", ErrorTypeConnectFailed)
	}
	a.span.End()
}

// TraceRelease records how long the connection was used.
func (t *PoolTracer) TraceRelease(_ *pgxpool.Pool, data pgxpool.TraceReleaseData) {
	if t.m == nil || data.Conn == nil {
		return
	}
	pc := t.conn(data.Conn)
	if pc.acquired.IsZero() {
		return
	}
	if h := t.m.useTime.Inst(); h.Enabled(context.Background()) {
		h.Record(context.Background(), time.Since(pc.acquired).Seconds(), t.poolSet)
	}
	pc.acquired = time.Time{}
}

// conn returns the state of conn, made at its first Acquire.
func (t *PoolTracer) conn(conn *pgx.Conn) *poolConn {
	data := conn.PgConn().CustomData()
	if pc, ok := data[t.key].(*poolConn); ok {
		return pc
	}
	cfg := conn.Config() // a copy: once per connection
	pc := &poolConn{server: appendServer(nil, cfg.Host, cfg.Port)}
	data[t.key] = pc
	return pc
}

// TraceQueryStart does nothing: statements are [PgxTracer]'s.
func (t *PoolTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd does nothing.
func (t *PoolTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// ObservePgxPool reports the pool metrics of p at each collection, until unregister is called,
// read from p.Stat() and p.Config() and, when t is not nil (the PoolTracer of p's
// configuration), the Acquires under way:
//
//   - db.client.connection.count{db.client.connection.state=idle|used}: Stat's IdleConns and
//     AcquiredConns (connections being opened are neither, as database/sql does not count them);
//   - db.client.connection.max: MaxConns;
//   - db.client.connection.idle.min: MinIdleConns (pgxpool has no maximum of idle connections:
//     db.client.connection.idle.max is not emitted);
//   - db.client.connection.pending_requests: the Acquires under way (t);
//   - pgconnector.connection.waits and pgconnector.connection.wait_time: the successful
//     Acquires that waited for a connection to be released or opened, and their total wait
//     (EmptyAcquireCount, EmptyAcquireWaitTime), as database/sql's WaitCount and WaitDuration.
//
// The measurements of t (wait_time, use_time, timeouts) are made as they happen.
func (m *Metrics) ObservePgxPool(p *pgxpool.Pool, t *PoolTracer) (unregister func()) {
	idle := metric.WithAttributeSet(attribute.NewSet(m.pool, semconv.DBClientConnectionStateIdle))
	used := metric.WithAttributeSet(attribute.NewSet(m.pool, semconv.DBClientConnectionStateUsed))
	pool := metric.WithAttributeSet(attribute.NewSet(m.pool))
	minIdle := int64(p.Config().MinIdleConns)
	insts := []metric.Observable{m.count.Inst(), m.max.Inst(), m.idleMin.Inst(), m.waits, m.waitTotal}
	if t != nil {
		insts = append(insts, m.pending.Inst())
	}
	return m.observe(func(_ context.Context, o metric.Observer) error {
		s := p.Stat()
		o.ObserveInt64(m.count.Inst(), int64(s.IdleConns()), idle)
		o.ObserveInt64(m.count.Inst(), int64(s.AcquiredConns()), used)
		o.ObserveInt64(m.max.Inst(), int64(s.MaxConns()), pool)
		o.ObserveInt64(m.idleMin.Inst(), minIdle, pool)
		if t != nil {
			o.ObserveInt64(m.pending.Inst(), t.Pending(), pool)
		}
		o.ObserveInt64(m.waits, s.EmptyAcquireCount(), pool)
		o.ObserveFloat64(m.waitTotal, s.EmptyAcquireWaitTime().Seconds(), pool)
		return nil
	}, insts...)
}

var (
	_ pgxpool.AcquireTracer = (*PoolTracer)(nil)
	_ pgxpool.ReleaseTracer = (*PoolTracer)(nil)
	_ pgx.QueryTracer       = (*PoolTracer)(nil)
)
