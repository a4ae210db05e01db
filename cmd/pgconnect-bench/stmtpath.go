package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/XSAM/otelsql"
	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/ngrok/sqlmw"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// Scenario 11, the statement path: one traced query with one argument on one pooled connection
// to the fake server, through database/sql and through pgxpool, untraced, with the usual
// instrumentation library of each, and with the connector.

// stmtQuery is the statement of scenario 11, run with the argument 1.
const stmtQuery = "select $1::int + 1"

// Go peer kinds of scenario 11 (clientSpec.Kind), besides kindPgx (pgx's stdlib, untraced) and
// kindPgconnector (the connector's OpenDB).
const (
	kindOtelsql  = "pgx-otelsql"      // pgx's stdlib connector wrapped by otelsql.OpenDB
	kindPgxpool  = "pgxpool"          // pgxpool, untraced
	kindOtelpgx  = "pgxpool-otelpgx"  // pgxpool with otelpgx's tracer in ConnConfig.Tracer
	kindPcPool   = "pgconnector-pool" // the connector's OpenPool
	workStmt     = "stmt"             // Conns iterations of stmtQuery, after WarmConns unmeasured ones
	stmtPoolSize = " pool_max_conns=1"
)

// kindPcSqlmw is the connector's OpenDB with a sqlmw interceptor (WithInterceptor),
// kindOtelsqlSqlmw pgx's stdlib driver wrapped by sqlmw.Driver, then by otelsql.OpenDB: each
// with sqlmw.NullInterceptor, what an interceptor costs before its own work.
const (
	kindPcSqlmw      = "pgconnector-sqlmw"
	kindOtelsqlSqlmw = "pgx-sqlmw-otelsql"
)

// Peer names of scenario 11.
const (
	peerStmtStdlib  = "pgx stdlib (database/sql), untraced"
	peerStmtOtelsql = "pgx stdlib + otelsql " + otelsqlVersion
	peerStmtPcSQL   = "pgconnector OpenDB"
	peerStmtPcSqlmw = "pgconnector OpenDB + sqlmw interceptor"
	peerStmtSqlmw   = "pgx stdlib + sqlmw + otelsql " + otelsqlVersion
	peerStmtPgxpool = "pgxpool, untraced"
	peerStmtOtelpgx = "pgxpool + otelpgx " + otelpgxVersion
	peerStmtPcPool  = "pgconnector OpenPool"

	otelsqlVersion = "v0.44.0"
	otelpgxVersion = "v0.13.0"
)

// stmtPeers are scenario 11's peers, database/sql first, given the fake server's DSN.
func stmtPeers(dsn string) []peer {
	// gssencmode=disable: nothing for the connector to probe (pgx has no GSS encryption to try).
	pc := dsn + " gssencmode=disable"
	return []peer{
		{Name: peerStmtStdlib, Family: "database/sql", Kind: kindPgx, DSN: dsn},
		{Name: peerStmtOtelsql, Family: "database/sql", Kind: kindOtelsql, DSN: dsn},
		{Name: peerStmtPcSQL, Family: "database/sql", Kind: kindPgconnector, DSN: pc},
		{Name: peerStmtSqlmw, Family: "database/sql", Kind: kindOtelsqlSqlmw, DSN: dsn},
		{Name: peerStmtPcSqlmw, Family: "database/sql", Kind: kindPcSqlmw, DSN: pc},
		{Name: peerStmtPgxpool, Family: "pgx", Kind: kindPgxpool, DSN: dsn + stmtPoolSize},
		{Name: peerStmtOtelpgx, Family: "pgx", Kind: kindOtelpgx, DSN: dsn + stmtPoolSize},
		{Name: peerStmtPcPool, Family: "pgx", Kind: kindPcPool, DSN: pc + stmtPoolSize},
	}
}

// stmtTraced says whether a kind of scenario 11 is given the SDK's providers.
func stmtTraced(kind string) bool {
	return kind == kindOtelsql || kind == kindPgconnector || kind == kindOtelpgx || kind == kindPcPool ||
		kind == kindPcSqlmw || kind == kindOtelsqlSqlmw
}

// stmtTelemetry is the OpenTelemetry SDK of one client process of scenario 11.
type stmtTelemetry struct {
	tp       *sdktrace.TracerProvider
	mp       *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
	recorder *tracetest.SpanRecorder // with spans: the span processor
}

// newStmtTelemetry is the SDK that every traced peer gets: a tracer provider that samples every
// span, whose span processor is a batcher to an exporter that discards what it is given (or,
// with record, a tracetest.SpanRecorder that keeps every ended span, to see what they hold),
// and a meter provider whose ManualReader is never collected during the loop.
func newStmtTelemetry(record bool) *stmtTelemetry {
	t := &stmtTelemetry{reader: sdkmetric.NewManualReader()}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSampler(sdktrace.AlwaysSample())}
	if record {
		t.recorder = tracetest.NewSpanRecorder()
		opts = append(opts, sdktrace.WithSpanProcessor(t.recorder))
	} else {
		opts = append(opts, sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	}
	t.tp = sdktrace.NewTracerProvider(opts...)
	t.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(t.reader))
	return t
}

// openStmtPeer opens the pool of a kind of scenario 11 and returns one iteration of the loop
// (QueryRow of stmtQuery with the argument 1, then Scan) and how to close the pool.
func openStmtPeer(ctx context.Context, kind, dsn string, tel *stmtTelemetry) (func(context.Context) error, func(), error) {
	var db *sql.DB
	switch kind {
	case kindPgx, kindOtelsql:
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, nil, err
		}
		if kind == kindPgx {
			db = sql.OpenDB(stdlib.GetConnector(*cfg))
		} else {
			// otelsql's defaults, with the db.system.name attribute its documentation has the
			// application add.
			db = otelsql.OpenDB(stdlib.GetConnector(*cfg), otelsql.WithTracerProvider(tel.tp),
				otelsql.WithMeterProvider(tel.mp), otelsql.WithAttributes(attribute.String("db.system.name", "postgresql")))
		}
	case kindOtelsqlSqlmw:
		// sqlmw wraps a driver: its connector parses dsn with pgx's driver.
		connector, err := sqlmw.Driver(stdlib.GetDefaultDriver(), sqlmw.NullInterceptor{}).(driver.DriverContext).OpenConnector(dsn)
		if err != nil {
			return nil, nil, err
		}
		db = otelsql.OpenDB(connector, otelsql.WithTracerProvider(tel.tp),
			otelsql.WithMeterProvider(tel.mp), otelsql.WithAttributes(attribute.String("db.system.name", "postgresql")))
	case kindPgconnector, kindPcSqlmw:
		opts := []pgconnector.Option{pgconnector.WithTracerProvider(tel.tp), pgconnector.WithMeterProvider(tel.mp)}
		if kind == kindPcSqlmw {
			opts = append(opts, pgconnector.WithInterceptor(sqlmw.NullInterceptor{}))
		}
		c, err := pgconnector.New(dsn, opts...)
		if err != nil {
			return nil, nil, err
		}
		db = c.OpenDB()
	case kindPgxpool, kindOtelpgx, kindPcPool:
		var (
			pool *pgxpool.Pool
			err  error
		)
		closePool := func() { pool.Close() }
		if kind == kindPcPool {
			c, err := pgconnector.New(dsn, pgconnector.WithTracerProvider(tel.tp), pgconnector.WithMeterProvider(tel.mp))
			if err != nil {
				return nil, nil, err
			}
			if pool, err = c.OpenPool(ctx); err != nil {
				c.Close()
				return nil, nil, err
			}
			closePool = func() { pool.Close(); c.Close() } // the pool before the connector
		} else {
			var cfg *pgxpool.Config
			if cfg, err = pgxpool.ParseConfig(dsn); err != nil {
				return nil, nil, err
			}
			if kind == kindOtelpgx {
				cfg.ConnConfig.Tracer = otelpgx.NewTracer(otelpgx.WithTracerProvider(tel.tp), otelpgx.WithMeterProvider(tel.mp))
			}
			if pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
				return nil, nil, err
			}
		}
		var n int
		return func(ctx context.Context) error {
			return pool.QueryRow(ctx, stmtQuery, 1).Scan(&n)
		}, closePool, nil
	default:
		return nil, nil, fmt.Errorf("workload %s: unknown kind %q", workStmt, kind)
	}
	// One pooled connection, kept.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	var n int
	return func(ctx context.Context) error {
		return db.QueryRowContext(ctx, stmtQuery, 1).Scan(&n)
	}, func() { db.Close() }, nil
}

// prepareStmt opens the peer's pool and warms it up (spec.WarmConns iterations, at least one:
// the connection, pgx's prepared statement, the SDK's instruments). The traced peers' loop runs
// in the context of a recording span, as the statements of a traced request do: otelpgx makes
// no span for a statement whose context holds none. The measured part is spec.Conns
// iterations, with getrusage, the wall clock and runtime.ReadMemStats around the loop; with
// spec.Spans, one iteration whose spans and measurements are reported instead of figures.
func prepareStmt(spec clientSpec) (func() clientResult, error) {
	ctx := context.Background()
	traced := stmtTraced(spec.Kind)
	tel := newStmtTelemetry(spec.Spans)
	if spec.Spans && !traced {
		return nil, fmt.Errorf("workload %s: spans of the untraced kind %s", workStmt, spec.Kind)
	}
	query, closePool, err := openStmtPeer(ctx, spec.Kind, spec.DSN, tel)
	if err != nil {
		return nil, err
	}
	var request trace.Span
	if traced {
		ctx, request = tel.tp.Tracer("pgconnect-bench").Start(ctx, "request")
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for range max(spec.WarmConns, 1) {
		if err := query(wctx); err != nil {
			closePool()
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	if spec.Spans {
		return func() clientResult {
			defer closePool()
			before := len(tel.recorder.Ended())
			res := clientResult{Conns: 1, Ops: 1}
			if err := query(ctx); err != nil {
				res.Errors, res.Error = 1, describeError(err)
			}
			for _, s := range tel.recorder.Ended()[before:] {
				res.Spans = append(res.Spans, shapeOf(s))
			}
			res.Metrics = metricShapes(tel.reader)
			return res
		}, nil
	}
	return func() clientResult {
		defer closePool()
		res := clientResult{Conns: 1}
		runtime.GC() // every peer's loop starts from a collected heap
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		cpu0, start := cpuTime(), time.Now()
		for range spec.Conns {
			if err := query(ctx); err != nil {
				res.Errors, res.Error = 1, describeError(err)
				break
			}
			res.Ops++
		}
		res.Seconds = time.Since(start).Seconds()
		res.CPU = int64(cpuTime() - cpu0)
		runtime.ReadMemStats(&m1)
		res.Allocs, res.AllocBytes = m1.Mallocs-m0.Mallocs, m1.TotalAlloc-m0.TotalAlloc
		if request != nil {
			request.End()
		}
		return res
	}, nil
}

// shapeOf is what a span holds, without its values.
func shapeOf(s sdktrace.ReadOnlySpan) SpanShape {
	sh := SpanShape{Name: s.Name(), Kind: s.SpanKind().String(), Scope: s.InstrumentationScope().Name}
	for _, kv := range s.Attributes() {
		sh.Attributes = append(sh.Attributes, string(kv.Key))
	}
	slices.Sort(sh.Attributes)
	sh.Attributes = slices.Compact(sh.Attributes)
	return sh
}

// metricShapes collects reader and returns, for each metric with data, its name and the keys of
// its data points' attributes: "db.client.operation.duration {db.operation.name, ...}".
func metricShapes(reader sdkmetric.Reader) []string {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		return []string{"collect: " + err.Error()}
	}
	var out []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var sets []attribute.Set
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			case metricdata.Sum[float64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			case metricdata.Gauge[float64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			}
			if len(sets) == 0 {
				continue
			}
			var keys []string
			for _, set := range sets {
				for _, kv := range set.ToSlice() {
					keys = append(keys, string(kv.Key))
				}
			}
			slices.Sort(keys)
			keys = slices.Compact(keys)
			out = append(out, fmt.Sprintf("%s {%s}", m.Name, joinNonEmpty(", ", keys...)))
		}
	}
	slices.Sort(out)
	return out
}

// statementPath is scenario 11: the fake server (in this process, on the server CPUs with -pin),
// each traced peer's spans recorded once, then ops iterations per peer over rounds rounds in
// turns, each peer's round in a client process of its own.
func statementPath(ctx context.Context, cfg config, r *runner, rep *Report) error {
	fs, err := harness.StartFakeServer()
	if err != nil {
		return err
	}
	defer fs.Close()
	host, port := fs.Addr()
	dsn := "host=" + host + " port=" + strconv.Itoa(port) + " user=bench dbname=bench sslmode=disable connect_timeout=20"
	peers := stmtPeers(dsn)
	env := r.envWith(nil)
	for _, p := range peers {
		if !stmtTraced(p.Kind) {
			continue
		}
		res, err := r.child(ctx, env, clientSpec{Kind: p.Kind, Peer: p.Name, DSN: p.DSN, Workload: workStmt, Clients: 1, Conns: 1, WarmConns: 3, Spans: true}, func() {})
		if err != nil {
			return fmt.Errorf("scenario 11, spans of %s: %w", p.Name, err)
		}
		rep.StatementSpans = append(rep.StatementSpans, StatementSpans{Peer: p.Name, Family: p.Family, Spans: res.Spans, Metrics: res.Metrics, Error: res.Error})
		log.Printf("scenario 11, spans of %s: %d spans per query, %d metrics", p.Name, len(res.Spans), len(res.Metrics))
	}
	rounds := max(1, cfg.rounds)
	perRound := max(1, cfg.stmtOps/rounds)
	accs := make([]StatementResult, len(peers))
	for i, p := range peers {
		accs[i] = StatementResult{Peer: p.Name, Family: p.Family, Traced: stmtTraced(p.Kind)}
	}
	for round := range rounds {
		for j := range peers {
			i := (j + round) % len(peers)
			p := peers[i]
			spec := clientSpec{Kind: p.Kind, Peer: p.Name, DSN: p.DSN, Workload: workStmt, Clients: 1, Conns: perRound, WarmConns: cfg.stmtWarm}
			res, err := r.child(ctx, env, spec, func() {})
			if err != nil {
				return fmt.Errorf("scenario 11, %s: %w", p.Name, err)
			}
			a := &accs[i]
			a.Ops += res.Ops
			a.Errors += res.Errors
			if a.Error == "" {
				a.Error = res.Error
			}
			a.Seconds += res.Seconds
			a.CPU += time.Duration(res.CPU)
			a.Allocs += res.Allocs
			a.AllocBytes += res.AllocBytes
			if res.Ops > 0 {
				a.RoundNs = append(a.RoundNs, res.Seconds*1e9/float64(res.Ops))
				a.RoundCPU = append(a.RoundCPU, float64(res.CPU)/float64(res.Ops))
			}
			log.Printf("scenario 11 round %d/%d: %-40s %6d queries, %.0f ns/op, CPU %.0f ns/op, %.1f allocs/op",
				round+1, rounds, p.Name, res.Ops, res.Seconds*1e9/float64(max(res.Ops, 1)),
				float64(res.CPU)/float64(max(res.Ops, 1)), float64(res.Allocs)/float64(max(res.Ops, 1)))
		}
	}
	rep.Statement = append(rep.Statement, accs...)
	return nil
}

// stmtRow finds a peer's result of scenario 11, nil when it is missing or failed.
func stmtRow(rows []StatementResult, peer string) *StatementResult {
	for i, s := range rows {
		if s.Peer == peer && s.Ops > 0 && s.Errors == 0 {
			return &rows[i]
		}
	}
	return nil
}

// mergeStatement replaces rep's scenario 11 with the one of the report at path, a run of that
// scenario alone, and records when it ran (Report.StatementMeasured); the targets are checked
// again.
func mergeStatement(rep *Report, path string) error {
	other, err := readReport(path)
	if err != nil {
		return err
	}
	if len(other.Statement) == 0 {
		return errors.New("-merge-statement: " + path + " has no scenario 11")
	}
	rep.Statement, rep.StatementSpans = other.Statement, other.StatementSpans
	rep.StatementMeasured = other.Started
	rep.Targets = checkTargets(rep)
	return nil
}

// spansOf is the recorded spans of a peer of scenario 11, nil when not recorded.
func spansOf(r *Report, peer string) *StatementSpans {
	for i, s := range r.StatementSpans {
		if s.Peer == peer {
			return &r.StatementSpans[i]
		}
	}
	return nil
}

// attributeKeys is the union of the attribute keys of s's spans, sorted.
func attributeKeys(s *StatementSpans) []string {
	var keys []string
	for _, sp := range s.Spans {
		keys = append(keys, sp.Attributes...)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// missingKeys is the attribute keys that other's spans carry and none of pc's does.
func missingKeys(pc, other *StatementSpans) []string {
	have := attributeKeys(pc)
	var out []string
	for _, k := range attributeKeys(other) {
		if !slices.Contains(have, k) && !slices.ContainsFunc(sameInformation[k], func(s string) bool { return slices.Contains(have, s) }) {
			out = append(out, k)
		}
	}
	return out
}

// codeQuoted returns each of keys in backquotes.
func codeQuoted(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = "`" + k + "`"
	}
	return out
}

// sameInformation maps an attribute key of an instrumentation library to the connector's keys
// that carry the same information. otelpgx's pgx.rows_affected is pgx's CommandTag.RowsAffected
// of every statement; the connector records that count as db.response.returned_rows (semantic
// conventions) for a SELECT and as pgconnector.rows_affected for another command.
var sameInformation = map[string][]string{
	"pgx.rows_affected": {"db.response.returned_rows", "pgconnector.rows_affected"},
}

// stmtComparisons are the pairs of scenario 11 that the targets and the span comparison hold
// side by side: the connector and the instrumentation library of the same API.
var stmtComparisons = []struct{ api, pc, other, otherName string }{
	{"database/sql", peerStmtPcSQL, peerStmtOtelsql, "otelsql"},
	{"pgx", peerStmtPcPool, peerStmtOtelpgx, "otelpgx"},
}

// writeStatement writes the section of scenario 11: each peer's figures, then each traced
// peer's spans and measurements, and which attribute keys of the instrumentation libraries'
// spans the connector's lack.
func writeStatement(b *strings.Builder, r *Report) {
	if len(r.Statement) == 0 {
		return
	}
	fmt.Fprintf(b, "## Scenario 11: %s\n\n", scenarioTitles[11])
	b.WriteString("`QueryRow(ctx, \"" + stmtQuery + "\", 1).Scan(&n)` in a loop on one pooled connection " +
		"(database/sql with `SetMaxOpenConns(1)`, pgxpool with `pool_max_conns=1`) to the fake server, which " +
		"answers every statement at once from the server CPU: what the figures measure is the client's " +
		"path. pgx's statement cache prepares the statement in the warm-up, so each iteration is one " +
		"Bind/Execute/Sync round trip. Each traced peer has the same OpenTelemetry SDK: a tracer provider " +
		"that samples every span and batches it to an exporter that discards it, and a meter provider " +
		"with a manual reader (never collected during the loop); the loop runs in the context of a " +
		"recording span, as the statements of a traced request do (otelpgx makes no span for a statement " +
		"whose context holds none). otelsql and otelpgx run with their defaults (otelsql with the " +
		"`db.system.name` attribute its documentation has the application add), the connector with its " +
		"defaults. ns/op is wall time, CPU/op the client process's user+system time, allocs/op and B/op " +
		"the Go heap's, all around the measured loops alone. The range of CPU/op over the rounds shows how noisy the " +
		"machine was; the targets compare the median of the per-round ratios.")
	if stmtRow(r.Statement, peerStmtPcSqlmw) != nil {
		b.WriteString(" The sqlmw rows add one `sqlmw.NullInterceptor` (an interceptor's cost before its own work): " +
			"the connector's through `WithInterceptor`, inside its statement span; otelsql's as `sqlmw.Driver` around " +
			"pgx's driver, under otelsql.")
	}
	if !r.StatementMeasured.IsZero() {
		fmt.Fprintf(b, " Measured %s UTC in a run of this scenario alone, on the same machine; the other "+
			"scenarios come from the run this report starts with.", r.StatementMeasured.UTC().Format("2006-01-02 15:04"))
	}
	b.WriteString("\n\n")
	t := table{
		head:  []string{"Peer", "API", "ns/op", "Client CPU ns/op", "CPU ns/op, rounds", "allocs/op", "B/op", "Spans/op", "Failed rounds"},
		right: []bool{false, false, true, true, true, true, true, true, false},
	}
	for _, s := range r.Statement {
		ok := s.Ops > 0 && s.Errors == 0
		spans := "0"
		if s.Traced {
			spans = dash
			if sp := spansOf(r, s.Peer); sp != nil {
				spans = strconv.Itoa(len(sp.Spans))
			}
		}
		rounds := dash
		if len(s.RoundCPU) > 0 {
			rounds = fmt.Sprintf("%.0f–%.0f", slices.Min(s.RoundCPU), slices.Max(s.RoundCPU))
		}
		t.add(cell(s.Peer), s.Family, figure(ok, "%.0f", s.per(s.Seconds*1e9)), figure(ok, "%.0f", s.per(float64(s.CPU))), ifOK(ok, rounds),
			figure(ok, "%.1f", s.per(float64(s.Allocs))), figure(ok, "%.0f", s.per(float64(s.AllocBytes))), spans,
			errorsCell(s.Errors, len(s.RoundCPU)+s.Errors, s.Error))
	}
	t.write(b)
	if len(r.StatementSpans) == 0 {
		return
	}
	b.WriteString("What one iteration of each traced peer records: its spans, in the order they end (the " +
		"request span around the loop left out), and the measurements that hold data afterwards, with their " +
		"attribute keys (the pool gauges are read at the collection).\n\n")
	st := table{head: []string{"Peer", "Span", "Kind", "Scope", "Attribute keys"}}
	for _, s := range r.StatementSpans {
		if s.Error != "" {
			st.add(cell(s.Peer), dash, dash, dash, errorText(s.Error))
		}
		for _, sp := range s.Spans {
			st.add(cell(s.Peer), cell(sp.Name), sp.Kind, cell(sp.Scope), cell(codeList(sp.Attributes)))
		}
	}
	st.write(b)
	mt := table{head: []string{"Peer", "Measurements"}}
	for _, s := range r.StatementSpans {
		mt.add(cell(s.Peer), cell(codeList(s.Metrics)))
	}
	mt.write(b)
	for _, c := range stmtComparisons {
		pc, other := spansOf(r, c.pc), spansOf(r, c.other)
		if pc == nil || other == nil || len(other.Spans) == 0 {
			continue
		}
		missing := "none"
		if m := missingKeys(pc, other); len(m) > 0 {
			missing = codeList(m)
		}
		fmt.Fprintf(b, "- %s: attribute keys of %s's spans that none of %s's spans carries: %s.\n", c.api, c.otherName, c.pc, missing)
		for _, k := range attributeKeys(other) {
			if same := sameInformation[k]; len(same) > 0 && !slices.Contains(attributeKeys(pc), k) {
				fmt.Fprintf(b, "- %s: %s's `%s` is carried as %s.\n", c.api, c.otherName, k, strings.Join(codeQuoted(same), " or "))
			}
		}
	}
	b.WriteString("\n")
}

// codeList formats names as `a`, `b`; a dash for none.
func codeList(names []string) string {
	if len(names) == 0 {
		return dash
	}
	return "`" + strings.Join(names, "`, `") + "`"
}

// usOne formats ns as microseconds with one decimal.
func usOne(ns float64) string {
	return fmt.Sprintf("%.1f µs", ns/1e3)
}

// stmtTargets are scenario 11's targets: for each API, the connector's allocs/op and client
// CPU/op at most the instrumentation library's. The CPU ratio is the median of the per-round
// ratios (round i of one peer ran next to round i of the other), with their range.
func stmtTargets(r *Report) []Target {
	var ts []Target
	for _, c := range stmtComparisons {
		pc, other := stmtRow(r.Statement, c.pc), stmtRow(r.Statement, c.other)
		if pc == nil || other == nil {
			continue
		}
		allocsPC, allocsOther := pc.per(float64(pc.Allocs)), other.per(float64(other.Allocs))
		x, lo, hi := medianRatio(pc.RoundCPU, other.RoundCPU)
		if x == 0 {
			x = pc.per(float64(pc.CPU)) / other.per(float64(other.CPU))
			lo, hi = x, x
		}
		got := fmt.Sprintf("allocs/op %.1f vs %.1f; CPU/op %s vs %s, %s", allocsPC, allocsOther,
			usOne(pc.per(float64(pc.CPU))), usOne(other.per(float64(other.CPU))), ratioText(x, 1))
		if hi > lo {
			got += fmt.Sprintf(" (rounds %.2f-%.2f)", lo, hi)
		}
		name := "Statement path, database/sql: allocs/op and client CPU/op of the connector ≤ otelsql's"
		if c.api == "pgx" {
			name = "Statement path, pgx: allocs/op and client CPU/op of the connector's OpenPool ≤ otelpgx's"
		}
		ts = append(ts, Target{Name: name, Want: "allocs/op ≤, CPU/op ≤ 1.00x", Got: got, Met: allocsPC <= allocsOther && x <= 1})
	}
	return ts
}

// medianRatio is the median of a[i]/b[i] and its range; 0 when the rounds do not pair up.
func medianRatio(a, b []float64) (median, lo, hi float64) {
	if len(a) == 0 || len(a) != len(b) {
		return 0, 0, 0
	}
	var rs []float64
	for i := range a {
		if a[i] > 0 && b[i] > 0 {
			rs = append(rs, a[i]/b[i])
		}
	}
	if len(rs) == 0 {
		return 0, 0, 0
	}
	slices.Sort(rs)
	median = rs[len(rs)/2]
	if len(rs)%2 == 0 {
		median = (rs[len(rs)/2-1] + rs[len(rs)/2]) / 2
	}
	return median, rs[0], rs[len(rs)-1]
}
