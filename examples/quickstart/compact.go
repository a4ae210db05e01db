package main

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", the comparison's baseline
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/tracing"
)

// tally is what n new connections of one driver cost, counted per connection.
type tally struct {
	name     string
	conns    int
	backends int // "connection received" lines in the server log: backends the server started
	tcp      int // TCP connections the proxy accepted
	ssl      int // SSLRequests the proxy saw
	gssenc   int // GSSENCRequests the proxy saw
	startups int // StartupMessages the proxy saw
	connect  []time.Duration
}

// one opens a new connection on db (whose idle pool is off), runs a query on it and closes it,
// and adds what the server and the proxy counted meanwhile.
func (t *tally) one(ctx context.Context, db *sql.DB, pg *harness.Postgres, proxy *harness.Proxy) error {
	mark, before := pg.LogMark(), proxy.Stats()
	start := time.Now()
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", t.name, err)
	}
	t.connect = append(t.connect, time.Since(start))
	var one int
	err = conn.QueryRowContext(ctx, "select 1").Scan(&one)
	conn.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", t.name, err)
	}
	backends, err := pg.ConnectionsSince(mark)
	if err != nil {
		return err
	}
	after := proxy.Stats()
	t.conns++
	t.backends += backends
	t.tcp += after.Connections - before.Connections
	t.ssl += after.SSLRequests - before.SSLRequests
	t.gssenc += after.GSSENCRequests - before.GSSENCRequests
	t.startups += after.StartupMessages - before.StartupMessages
	return nil
}

// roundTrips counts the exchanges before the first query: a TCP handshake per socket, one per
// SSLRequest and GSSENCRequest, and one per StartupMessage (with trust authentication the server
// answers it at once with AuthenticationOk ... ReadyForQuery).
func (t *tally) roundTrips() int { return t.tcp + t.ssl + t.gssenc + t.startups }

func (t *tally) median() time.Duration {
	d := append([]time.Duration(nil), t.connect...)
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	if len(d) == 0 {
		return 0
	}
	return d[len(d)/2]
}

// compact measures what the report shows: the comparison with pgx's driver (on the throwaway
// server pg only), the connect waterfall of the first (cold) pgconnector connection and the median
// of the warm ones, whether the run was too noisy to compare times, and one request's span tree.
func compact(ctx context.Context, pg *harness.Postgres, dsn string, n int, tpOpts []sdktrace.TracerProviderOption) (*report, error) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(append(tpOpts, sdktrace.WithSpanProcessor(rec))...)
	var connector *pgconnector.Connector
	var proxy *harness.Proxy
	var err error
	if pg != nil {
		// The comparison's connections go through a proxy that counts what each driver sends.
		if proxy, err = harness.NewProxy(pg.Addr()); err != nil {
			return nil, err
		}
		defer proxy.Close()
		_, port := proxy.Addr()
		dsn = pg.DSN("port=" + strconv.Itoa(port))
		if connector, err = pgconnector.New(dsn, pgconnector.WithTracerProvider(tp)); err != nil {
			return nil, err
		}
	} else if connector, err = pgconnector.New(dsn, pgconnector.WithTracerProvider(tp)); err != nil {
		return nil, err
	}
	rep := &report{}
	// One pool for the comparison, the waterfall and the request: closing it closes the
	// connector, so it is closed once, at the end.
	db := sql.OpenDB(connector)
	defer db.Close()
	db.SetMaxIdleConns(0) // every Conn is a new connection
	var pgxTimes []time.Duration
	if pg != nil {
		rows, err := compare(ctx, pg, proxy, dsn, db, n)
		if err != nil {
			return nil, err
		}
		rep.Compare = &comparison{Connections: n, Version: pg.Version, Host: pg.Host}
		for _, r := range rows {
			rep.Compare.Drivers = append(rep.Compare.Drivers, r.row())
		}
		pgxTimes = rows[1].connect
	} else {
		// Another server: n connections, for the waterfall.
		for range n {
			conn, err := db.Conn(ctx)
			if err != nil {
				return nil, err
			}
			conn.Close()
		}
	}
	spans := rec.Ended()
	connects := named(spans, tracing.SpanConnect)
	if len(connects) < 2 {
		return nil, fmt.Errorf("%d connect spans recorded, want 2", len(connects))
	}
	// The warm connect shown is the median of the warm ones: a single one is at the mercy of the
	// server's fork and the scheduler.
	warm := append([]sdktrace.ReadOnlySpan(nil), connects[1:]...)
	sort.SliceStable(warm, func(i, j int) bool { return dur(warm[i]) < dur(warm[j]) })
	rep.Cold = connectOf(spans, connects[0])
	rep.Warm = connectOf(spans, warm[len(warm)/2])
	rep.WarmConnects = len(warm)
	t := timings{Cold: dur(connects[0]), Pgx: pgxTimes}
	for _, s := range warm {
		t.Warm = append(t.Warm, dur(s))
	}
	rep.Noise = noisy(t)
	rep.TooNoisy = len(rep.Noise) > 0
	db.SetMaxIdleConns(2) // database/sql's default: the request's statements share a connection, as in a service
	if rep.Request, err = request(ctx, tp, rec, db); err != nil {
		return nil, err
	}
	return rep, nil
}

// compare opens n new connections with each driver, alternately, through proxy in front of pg,
// with the same connection string dsn (sslmode unset: prefer), and returns what each cost:
// pgconnector's, then pgx's.
func compare(ctx context.Context, pg *harness.Postgres, proxy *harness.Proxy, dsn string, pc *sql.DB, n int) ([]*tally, error) {
	// Warm the server up (first backend, catalog caches) on a connection of neither driver.
	warm, err := sql.Open("pgx", pg.DSN("sslmode=disable"))
	if err != nil {
		return nil, err
	}
	err = warm.PingContext(ctx)
	warm.Close()
	if err != nil {
		return nil, err
	}

	px, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	defer px.Close()
	px.SetMaxIdleConns(0) // every Conn is a new connection, as with pc

	rows := []*tally{{name: "pgconnector"}, {name: "pgx stdlib"}}
	for range n {
		if err := rows[0].one(ctx, pc, pg, proxy); err != nil {
			return nil, err
		}
		if err := rows[1].one(ctx, px, pg, proxy); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// row is t per connection, as the table shows it.
func (t *tally) row() driverRow {
	per := func(v int) float64 { return float64(v) / float64(t.conns) }
	return driverRow{Name: t.name, Backends: per(t.backends), TCPConns: per(t.tcp), SSLRequests: per(t.ssl),
		RoundTrips: per(t.roundTrips()), MedianConnectMS: msf(t.median())}
}

// connectOf is a connect span's view: its duration, transport, cache hit and steps.
func connectOf(spans []sdktrace.ReadOnlySpan, c sdktrace.ReadOnlySpan) connectView {
	a := attrMap(c.Attributes())
	v := connectView{DurationMS: msf(dur(c)), Transport: a[string(tracing.TransportKey)], CacheHit: a[string(tracing.CacheHitKey)] == "true"}
	for _, st := range childrenIn(spans, c) {
		v.Steps = append(v.Steps, stepView{Name: strings.TrimPrefix(st.Name(), "postgresql."),
			StartMS: msf(st.StartTime().Sub(c.StartTime())), DurationMS: msf(dur(st)), Note: strings.TrimSpace(stepNote(st))})
	}
	return v
}

// stepNote is the one attribute of a step worth a glance.
func stepNote(s sdktrace.ReadOnlySpan) string {
	a := attrMap(s.Attributes())
	switch s.Name() {
	case tracing.SpanSSLRequest:
		return " answer " + a[string(tracing.SSLAnswerKey)]
	case tracing.SpanFallback:
		if a["pgconnector.fallback.new_connection"] == "false" {
			return " same socket"
		}
		return " new socket"
	case tracing.SpanStartup:
		return " auth " + a["pgconnector.auth.method"]
	}
	return ""
}

// request runs one request's statements under a span of its own, as a service's handler would,
// and returns that span's tree, a line per span.
func request(ctx context.Context, tp *sdktrace.TracerProvider, rec *tracetest.SpanRecorder, db *sql.DB) ([]spanLine, error) {
	rctx, span := tp.Tracer("quickstart").Start(ctx, "request GET /users/42")
	var name string
	var sessions int
	err := db.QueryRowContext(rctx, "select name from (values (42, 'alice')) as users(id, name) where id = $1", 42).Scan(&name)
	if err == nil {
		err = db.QueryRowContext(rctx, "select count(*) from pg_stat_activity where datname = current_database()").Scan(&sessions)
	}
	span.End()
	if err != nil {
		return nil, err
	}
	spans := rec.Ended()
	var lines []spanLine
	// prefix and branch draw the tree in the text report: "├─ " or "└─ " before a span, under
	// "│  " or "   " for each ancestor that has a sibling after it or not.
	var walk func(s sdktrace.ReadOnlySpan, depth int, prefix, branch string)
	walk = func(s sdktrace.ReadOnlySpan, depth int, prefix, branch string) {
		l := spanLine{Depth: depth, Name: s.Name(), DurationMS: msf(dur(s)), tree: prefix + branch}
		a := attrMap(s.Attributes())
		if s.Name() == tracing.SpanConnect {
			l.Detail = fmt.Sprintf("transport=%s cache.hit=%s, %d steps", a[string(tracing.TransportKey)],
				a[string(tracing.CacheHitKey)], len(childrenIn(spans, s)))
		} else if q := a["db.query.text"]; q != "" {
			l.Detail = q
		}
		lines = append(lines, l)
		if s.Name() == tracing.SpanConnect {
			return // its steps are in the waterfall
		}
		kids := childrenIn(spans, s)
		switch branch {
		case "├─ ":
			prefix += "│  "
		case "└─ ":
			prefix += "   "
		}
		for i, k := range kids {
			b := "├─ "
			if i == len(kids)-1 {
				b = "└─ "
			}
			walk(k, depth+1, prefix, b)
		}
	}
	var failed []string
	for _, s := range spans {
		if s.SpanContext().SpanID() == span.SpanContext().SpanID() {
			walk(s, 0, "", "")
		}
		if s.SpanContext().TraceID() == span.SpanContext().TraceID() && status(s) != "" {
			failed = append(failed, s.Name()+status(s))
		}
	}
	if len(failed) > 0 {
		// The request succeeded, but a span under it (a connect step) recorded an error.
		return nil, fmt.Errorf("spans of the request recorded errors: %s", strings.Join(failed, "; "))
	}
	return lines, nil
}

func named(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	byStart(out)
	return out
}

// childrenIn returns the spans among spans whose parent is parent, by start time.
func childrenIn(spans []sdktrace.ReadOnlySpan, parent sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Parent().SpanID() == parent.SpanContext().SpanID() && s.Parent().TraceID() == parent.SpanContext().TraceID() {
			out = append(out, s)
		}
	}
	byStart(out)
	return out
}

func byStart(ss []sdktrace.ReadOnlySpan) {
	sort.SliceStable(ss, func(i, j int) bool { return ss[i].StartTime().Before(ss[j].StartTime()) })
}

func attrMap(kv []attribute.KeyValue) map[string]string {
	m := make(map[string]string, len(kv))
	for _, a := range kv {
		m[string(a.Key)] = a.Value.Emit()
	}
	return m
}

func dur(s sdktrace.ReadOnlySpan) time.Duration { return s.EndTime().Sub(s.StartTime()) }

// msf is d in milliseconds, to the microsecond.
func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
