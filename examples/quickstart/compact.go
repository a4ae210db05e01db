package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
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

// compact prints the comparison with pgx's driver (on the throwaway server pg only), the connect
// waterfall of the first (cold) pgconnector connection and the median of the warm ones, and one request's span
// tree.
func compact(ctx context.Context, w io.Writer, pg *harness.Postgres, dsn string, n int, tpOpts []sdktrace.TracerProviderOption) error {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(append(tpOpts, sdktrace.WithSpanProcessor(rec))...)
	var connector *pgconnector.Connector
	var proxy *harness.Proxy
	var err error
	if pg != nil {
		// The comparison's connections go through a proxy that counts what each driver sends.
		if proxy, err = harness.NewProxy(pg.Addr()); err != nil {
			return err
		}
		defer proxy.Close()
		_, port := proxy.Addr()
		dsn = pg.DSN("port=" + strconv.Itoa(port))
		if connector, err = pgconnector.New(dsn, pgconnector.WithTracerProvider(tp)); err != nil {
			return err
		}
	} else if connector, err = pgconnector.New(dsn, pgconnector.WithTracerProvider(tp)); err != nil {
		return err
	}
	// One pool for the comparison, the waterfall and the request: closing it closes the
	// connector, so it is closed once, at the end.
	db := sql.OpenDB(connector)
	defer db.Close()
	db.SetMaxIdleConns(0) // every Conn is a new connection
	if pg != nil {
		if err := compare(ctx, w, pg, proxy, dsn, db, n); err != nil {
			return err
		}
	} else {
		// Another server: n connections, for the waterfall.
		for range n {
			conn, err := db.Conn(ctx)
			if err != nil {
				return err
			}
			conn.Close()
		}
	}
	spans := rec.Ended()
	connects := named(spans, tracing.SpanConnect)
	if len(connects) < 2 {
		return fmt.Errorf("%d connect spans recorded, want 2", len(connects))
	}
	// The warm connect shown is the median of the warm ones: a single one is at the mercy of the
	// server's fork and the scheduler.
	warm := append([]sdktrace.ReadOnlySpan(nil), connects[1:]...)
	sort.SliceStable(warm, func(i, j int) bool { return dur(warm[i]) < dur(warm[j]) })
	waterfall(w, spans, connects[0], warm[len(warm)/2], len(warm))
	db.SetMaxIdleConns(2) // database/sql's default: the request's statements share a connection, as in a service
	return request(ctx, w, tp, rec, db)
}

// compare opens n new connections with each driver, alternately, through proxy in front of pg,
// with the same connection string dsn (sslmode unset: prefer), and prints the table.
func compare(ctx context.Context, w io.Writer, pg *harness.Postgres, proxy *harness.Proxy, dsn string, pc *sql.DB, n int) error {
	// Warm the server up (first backend, catalog caches) on a connection of neither driver.
	warm, err := sql.Open("pgx", pg.DSN("sslmode=disable"))
	if err != nil {
		return err
	}
	err = warm.PingContext(ctx)
	warm.Close()
	if err != nil {
		return err
	}

	px, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer px.Close()
	px.SetMaxIdleConns(0) // every Conn is a new connection, as with pc

	rows := []*tally{{name: "pgconnector"}, {name: "pgx stdlib"}}
	for range n {
		if err := rows[0].one(ctx, pc, pg, proxy); err != nil {
			return err
		}
		if err := rows[1].one(ctx, px, pg, proxy); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "\n%d new connections per driver, one after the other, same DSN (sslmode unset =\n", n)
	fmt.Fprintf(w, "prefer), PostgreSQL %d on %s without TLS; per connection:\n", pg.Version, pg.Host)
	fmt.Fprintf(w, "%-12s %9s %10s %12s %12s %15s\n", "", "backends", "TCP conns", "SSLRequests", "round trips", "median connect")
	per := func(v, n int) string { return fmt.Sprintf("%.2f", float64(v)/float64(n)) }
	for _, r := range rows {
		fmt.Fprintf(w, "%-12s %9s %10s %12s %12s %15s\n", r.name, per(r.backends, r.conns), per(r.tcp, r.conns),
			per(r.ssl, r.conns), per(r.roundTrips(), r.conns), ms(r.median()))
	}
	fmt.Fprintln(w, "(backends: the server log's \"connection received\"; TCP conns, SSLRequests: a proxy;")
	fmt.Fprintln(w, " round trips before the first query: TCP handshakes + SSLRequests + startups)")
	return nil
}

// waterfall prints the steps of the cold connect and of the median of warmN warm ones, one line
// each, with a bar on a common time scale.
func waterfall(w io.Writer, spans []sdktrace.ReadOnlySpan, cold, warm sdktrace.ReadOnlySpan, warmN int) {
	const width = 40
	scale := max(dur(cold), dur(warm))
	later := fmt.Sprintf("the median of the %d later ones (warm)", warmN)
	if warmN == 1 {
		later = "the second one (warm)"
	}
	fmt.Fprintf(w, "\nconnect waterfall, pgconnector: the first connect (cold) and\n%s; offset from the\n", later)
	fmt.Fprintln(w, "connect's start, duration, on the slower one's scale:")
	for _, c := range []struct {
		label string
		s     sdktrace.ReadOnlySpan
	}{{"cold", cold}, {"warm", warm}} {
		a := attrMap(c.s.Attributes())
		fmt.Fprintf(w, "%s %8s  transport=%s cache.hit=%s\n", c.label, ms(dur(c.s)),
			a[string(tracing.TransportKey)], a[string(tracing.CacheHitKey)])
		for _, st := range childrenIn(spans, c.s) {
			off := st.StartTime().Sub(c.s.StartTime())
			from := int(float64(width) * float64(off) / float64(scale))
			n := max(1, int(float64(width)*float64(dur(st))/float64(scale)))
			from = min(from, width-1)
			n = min(n, width-from)
			bar := strings.Repeat(" ", from) + strings.Repeat("#", n) + strings.Repeat(" ", width-from-n)
			fmt.Fprintf(w, "  %-15s %8s %8s |%s|%s\n", strings.TrimPrefix(st.Name(), "postgresql."),
				"+"+ms(off), ms(dur(st)), bar, stepNote(st))
		}
	}
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
// and prints that span's tree.
func request(ctx context.Context, w io.Writer, tp *sdktrace.TracerProvider, rec *tracetest.SpanRecorder, db *sql.DB) error {
	rctx, span := tp.Tracer("quickstart").Start(ctx, "request GET /users/42")
	var name string
	var sessions int
	err := db.QueryRowContext(rctx, "select name from (values (42, 'alice')) as users(id, name) where id = $1", 42).Scan(&name)
	if err == nil {
		err = db.QueryRowContext(rctx, "select count(*) from pg_stat_activity where datname = current_database()").Scan(&sessions)
	}
	span.End()
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "\nspans of one request (db.QueryRowContext(ctx) with the request's span in ctx):")
	spans := rec.Ended()
	var walk func(s sdktrace.ReadOnlySpan, prefix, branch string)
	walk = func(s sdktrace.ReadOnlySpan, prefix, branch string) {
		line := fmt.Sprintf("%s%s%s %s", prefix, branch, s.Name(), ms(dur(s)))
		a := attrMap(s.Attributes())
		if s.Name() == tracing.SpanConnect {
			line += fmt.Sprintf("  transport=%s cache.hit=%s, %d steps", a[string(tracing.TransportKey)],
				a[string(tracing.CacheHitKey)], len(childrenIn(spans, s)))
		} else if q := a["db.query.text"]; q != "" {
			line += "  " + q
		}
		if r := []rune(line); len(r) > 96 {
			line = string(r[:95]) + "…"
		}
		fmt.Fprintln(w, line)
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
			walk(k, prefix, b)
		}
	}
	var failed []string
	for _, s := range spans {
		if s.SpanContext().SpanID() == span.SpanContext().SpanID() {
			walk(s, "", "")
		}
		if s.SpanContext().TraceID() == span.SpanContext().TraceID() && status(s) != "" {
			failed = append(failed, s.Name()+status(s))
		}
	}
	if len(failed) > 0 {
		// The request succeeded, but a span under it (a connect step) recorded an error.
		return fmt.Errorf("spans of the request recorded errors: %s", strings.Join(failed, "; "))
	}
	return nil
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

// ms formats d in milliseconds with two decimals.
func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }
