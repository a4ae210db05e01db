package main

import (
	"bufio"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lib/pq"

	"github.com/pgconnector/pgconnector"
)

// childEnv, when set in the environment, makes this program a client process
// of the benchmark instead of the benchmark itself: it reads a clientSpec
// (one JSON line) from standard input, prepares (warm-up), writes "ready",
// waits for "go", runs the workload and writes a clientResult (one JSON line).
// Each Go peer runs in a process of its own, like pgbench and psql, so that
// its CPU time is its own.
const childEnv = "PGCONNECT_BENCH_CHILD"

// Go peer kinds (clientSpec.Kind).
const (
	kindPgconnector     = "pgconnector"      // one Connector for the whole run: warm cache
	kindPgconnectorCold = "pgconnector-cold" // a new Connector (empty cache) per connection
	// kindPgconnectorNoStmt is kindPgconnector with WithStatementSpans(false): the connections
	// are pgx's own, with no statement tracer around them.
	kindPgconnectorNoStmt = "pgconnector-nostmt"
	kindPgx               = "pgx" // pgx v5 stdlib
	kindPq                = "pq"  // lib/pq
)

// Workloads (clientSpec.Workload).
const (
	workConnect = "connect" // Conns times: open, select 1, close
	workHerd    = "herd"    // Clients first connections released at once, one Connector
	workCopy    = "copy"    // one connection: COPY ... TO STDOUT, discarded
	workBytea   = "bytea"   // one connection: the SQL in File (simple protocol), result checked
)

// maxFailures stops a storm that has had this many failures and no success:
// a peer that cannot connect at all is reported with its error, not run for
// minutes.
const maxFailures = 10

type clientSpec struct {
	Kind     string `json:"kind"`
	Peer     string `json:"peer"` // the peer's name in the report, for the profile's file name
	DSN      string `json:"dsn"`
	Workload string `json:"workload"`
	Clients  int    `json:"clients"`
	Conns    int    `json:"conns"`
	Warm     bool   `json:"warm"` // one unmeasured connection before "ready"
	// WarmConns is how many unmeasured connections to make before "ready" (at least one with
	// Warm): enough of them bring the process's heap and runtime to the state a long-running one
	// is in, whose first faults and collections a short storm would otherwise pay for.
	WarmConns int    `json:"warm_conns"`
	Query     string `json:"query"` // workCopy: the COPY statement
	File      string `json:"file"`  // workBytea: the SQL file; workFailover: the file that ends the loop
	Want      int64  `json:"want"`  // workBytea: length of the expected text result
	// Metrics, for workHerd and kindPgconnector: give the Connector a meter provider and report
	// its pgconnector.scram.derivations counter (clientResult.Derivations).
	Metrics bool `json:"metrics"`
	// Spans, for workStmt: record the spans and measurements of one iteration
	// (clientResult.Spans, Metrics) instead of measuring the loop.
	Spans bool `json:"spans,omitempty"`
	// For is how long a workFailover loops at the most; it ends sooner once File exists.
	For time.Duration `json:"for_ns,omitempty"`
}

type clientResult struct {
	Conns     int     `json:"conns"`  // logical connections attempted after "go"
	Errors    int     `json:"errors"` // of which failed
	Error     string  `json:"error"`  // the first failure
	Seconds   float64 `json:"seconds"`
	Latencies []int64 `json:"latencies_ns"` // connect latencies (see measureConnect)
	CPU       int64   `json:"cpu_ns"`       // user+system CPU of this process after "go"
	Bytes     int64   `json:"bytes"`        // workCopy, workBytea: bytes moved
	Transport string  `json:"transport"`    // workCopy, workBytea: "GSS", "TLS" or "plain"
	// Derivations is the connector's pgconnector.scram.derivations after a workHerd with
	// Metrics; nil when not asked for, or when the connector does not export that counter.
	Derivations *int64 `json:"scram_derivations,omitempty"`
	// Ops is the statements a workStmt ran; Allocs and AllocBytes the heap allocations of its loop
	// (runtime.MemStats Mallocs and TotalAlloc), for which CPU and Seconds are measured around the
	// loop alone.
	Ops        int    `json:"ops,omitempty"`
	Allocs     uint64 `json:"allocs,omitempty"`
	AllocBytes uint64 `json:"alloc_bytes,omitempty"`
	// Spans and Metrics are what one iteration of a workStmt with spec.Spans recorded.
	Spans   []SpanShape `json:"spans,omitempty"`
	Metrics []string    `json:"metrics,omitempty"`
	// Lookups is the answers of scenario 12's lookup function in this process, warm-up included.
	Lookups int64 `json:"lookups,omitempty"`
	// Events is a workFailover's connections, in order.
	Events []fleetEvent `json:"events,omitempty"`
}

// childMain is main for a client process. It returns the exit status.
func childMain(stdin io.Reader, stdout io.Writer) int {
	in := bufio.NewScanner(stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "pgconnect-bench client:", err)
		return 1
	}
	if !in.Scan() {
		return fail(errors.New("no spec on standard input"))
	}
	var spec clientSpec
	if err := json.Unmarshal(in.Bytes(), &spec); err != nil {
		return fail(fmt.Errorf("spec: %w", err))
	}
	run, err := prepare(spec)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintln(stdout, "ready")
	if !in.Scan() || in.Text() != "go" {
		return fail(errors.New(`expected "go" on standard input`))
	}
	stopProfile, err := startProfile(spec)
	if err != nil {
		return fail(err)
	}
	cpu0 := cpuTime()
	res := run()
	if spec.Workload != workStmt { // workStmt measures its loop itself
		res.CPU = int64(cpuTime() - cpu0)
	}
	res.Lookups = fleetLookups.Load()
	stopProfile()
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		return fail(err)
	}
	return 0
}

// profileEnv, set by the -cpuprofile flag, is a directory where each Go
// client process writes a CPU profile of its measured part.
const profileEnv = "PGCONNECT_BENCH_CPUPROFILE"

func startProfile(spec clientSpec) (stop func(), err error) {
	dir := os.Getenv(profileEnv)
	if dir == "" {
		return func() {}, nil
	}
	// For example "pgx_sslmode_disable-connect-c8-1234.pprof": the peer, the workload, the
	// clients and the process, so that the profiles of one peer can be merged (go tool pprof).
	peer := spec.Peer
	if peer == "" {
		peer = spec.Kind
	}
	peer = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, peer)
	name := fmt.Sprintf("%s-%s-c%d-%d.pprof", peer, spec.Workload, spec.Clients, os.Getpid())
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// cpuTime is this process's user+system CPU time (getrusage RUSAGE_SELF).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// connectorFor returns a new driver.Connector of the given kind for dsn.
func connectorFor(kind, dsn string) (driver.Connector, error) {
	if c, ok, err := fleetConnector(kind, dsn); ok {
		return c, err
	}
	if c, ok, err := oauthConnector(kind, dsn); ok {
		return c, err
	}
	switch kind {
	case kindPgconnector, kindPgconnectorCold:
		return pgconnector.New(dsn)
	case kindPgconnectorNoStmt:
		return pgconnector.New(dsn, pgconnector.WithStatementSpans(false))
	case kindPgx:
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, err
		}
		return stdlib.GetConnector(*cfg), nil
	case kindPq:
		return pq.NewConnector(dsn)
	}
	return nil, fmt.Errorf("unknown client kind %q", kind)
}

// prepare checks spec, does the warm-up and returns the measured part.
func prepare(spec clientSpec) (func() clientResult, error) {
	if spec.Clients < 1 || spec.Conns < 0 {
		return nil, fmt.Errorf("spec: clients %d, conns %d", spec.Clients, spec.Conns)
	}
	switch spec.Workload {
	case workConnect:
		return prepareConnect(spec)
	case workHerd:
		var (
			c           driver.Connector
			derivations func() *int64
			err         error
		)
		if spec.Metrics {
			if spec.Kind != kindPgconnector {
				return nil, fmt.Errorf("spec: metrics need kind %s, not %s", kindPgconnector, spec.Kind)
			}
			c, derivations, err = meteredConnector(spec.DSN)
		} else {
			c, err = connectorFor(spec.Kind, spec.DSN)
		}
		if err != nil {
			return nil, err
		}
		db := sql.OpenDB(c)
		db.SetMaxIdleConns(0)
		return func() clientResult {
			defer db.Close()
			res := herd(db, spec.Kind, spec.Clients)
			if derivations != nil {
				res.Derivations = derivations()
			}
			return res
		}, nil
	case workCopy, workBytea:
		return prepareBulk(spec)
	case workStmt:
		return prepareStmt(spec)
	case workFailover:
		return prepareFailover(spec)
	}
	return nil, fmt.Errorf("unknown workload %q", spec.Workload)
}

// pool opens connections for one client of a storm.
type pool interface {
	conn(ctx context.Context) (*sql.Conn, func(), error) // a new connection and how to release it
}

// warmPool is one database/sql pool with no idle connections: every Conn
// opens a new connection, and closing it closes the connection.
type warmPool struct{ db *sql.DB }

func (p warmPool) conn(ctx context.Context) (*sql.Conn, func(), error) {
	c, err := p.db.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	return c, func() { c.Close() }, nil
}

// coldPool makes a new connector, and so an empty decision cache, for every
// connection: the cost of a process or pool that starts from nothing.
type coldPool struct{ kind, dsn string }

func (p coldPool) conn(ctx context.Context) (*sql.Conn, func(), error) {
	c, err := connectorFor(p.kind, p.dsn)
	if err != nil {
		return nil, nil, err
	}
	db := sql.OpenDB(c)
	db.SetMaxIdleConns(0)
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return conn, func() { conn.Close(); db.Close() }, nil
}

// selectOne runs "select 1" on c in the simple query protocol (one round
// trip), as pgbench does by default: pgx's stdlib would otherwise prepare
// the statement on every new connection (Parse/Describe, then Bind/Execute:
// two round trips), which is not a cost of opening the connection. lib/pq
// uses the simple protocol for a query without arguments by itself.
func selectOne(ctx context.Context, kind string, c *sql.Conn) error {
	var args []any
	if kind != kindPq {
		args = append(args, pgx.QueryExecModeSimpleProtocol)
	}
	var n int
	if err := c.QueryRowContext(ctx, "select 1", args...).Scan(&n); err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("select 1 returned %d", n)
	}
	return nil
}

func prepareConnect(spec clientSpec) (func() clientResult, error) {
	var p pool
	if spec.Kind == kindPgconnectorCold {
		p = coldPool{kind: spec.Kind, dsn: spec.DSN}
	} else {
		c, err := connectorFor(spec.Kind, spec.DSN)
		if err != nil {
			return nil, err
		}
		db := sql.OpenDB(c)
		db.SetMaxIdleConns(0)
		p = warmPool{db: db}
	}
	warm := spec.WarmConns
	if spec.Warm {
		warm = max(warm, 1)
	}
	if warm > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for range warm {
			c, release, err := p.conn(ctx)
			if err != nil {
				return nil, fmt.Errorf("warm-up connection: %w", err)
			}
			err = selectOne(ctx, spec.Kind, c)
			release()
			if err != nil {
				return nil, fmt.Errorf("warm-up connection: %w", err)
			}
		}
	}
	return func() clientResult { return storm(p, spec.Kind, spec.Clients, spec.Conns) }, nil
}

// storm runs conns connections over clients goroutines. Each client loops:
// open a connection, select 1, close it. Its connect latency, as pgbench's
// per-transaction log gives it for libpq (see pgbenchLatencies), is the time
// from the end of one select 1 to the start of the next: closing the old
// connection and opening the new one (TCP, negotiation, startup, auth). A
// client's first connection has no predecessor and no latency.
func storm(p pool, kind string, clients, conns int) clientResult {
	var (
		mu       sync.Mutex
		res      clientResult
		failures atomic.Int64
		success  atomic.Int64
		wg       sync.WaitGroup
	)
	start := time.Now()
	for i := range clients {
		n := conns / clients
		if i < conns%clients {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]int64, 0, n)
			var attempted, errs int
			var first error
			var lastEnd time.Time // end of the previous select 1
			var closeTook time.Duration
			for range n {
				if failures.Load() >= maxFailures && success.Load() == 0 {
					break
				}
				attempted++
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				t0 := time.Now()
				c, release, err := p.conn(ctx)
				opened := time.Since(t0)
				if err == nil {
					err = selectOne(ctx, kind, c)
				}
				end := time.Now()
				if err != nil {
					failures.Add(1)
					errs++
					if first == nil {
						first = err
					}
					lastEnd = time.Time{}
				} else {
					success.Add(1)
					if !lastEnd.IsZero() {
						lat = append(lat, int64(closeTook+opened))
					}
					lastEnd = end
				}
				t1 := time.Now()
				if release != nil {
					release()
				}
				closeTook = time.Since(t1)
				cancel()
			}
			mu.Lock()
			defer mu.Unlock()
			res.Conns += attempted
			res.Errors += errs
			if first != nil && res.Error == "" {
				res.Error = describeError(first)
			}
			res.Latencies = append(res.Latencies, lat...)
		}()
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	return res
}

// herd releases clients first connections at once on one pool (a cold
// decision cache when the pool is pgconnector's) and waits for all of them.
func herd(db *sql.DB, kind string, clients int) clientResult {
	var (
		mu    sync.Mutex
		res   clientResult
		wg    sync.WaitGroup
		ready sync.WaitGroup
	)
	gate := make(chan struct{})
	start := time.Now()
	for range clients {
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ready.Done()
			<-gate
			t0 := time.Now()
			c, err := db.Conn(ctx)
			took := time.Since(t0)
			if err == nil {
				err = selectOne(ctx, kind, c)
				c.Close()
			}
			mu.Lock()
			defer mu.Unlock()
			res.Conns++
			if err != nil {
				res.Errors++
				if res.Error == "" {
					res.Error = describeError(err)
				}
				return
			}
			res.Latencies = append(res.Latencies, int64(took))
		}()
	}
	ready.Wait()
	close(gate)
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	return res
}

// prepareBulk opens the one connection of a throughput workload (not
// measured) and returns the transfer.
func prepareBulk(spec clientSpec) (func() clientResult, error) {
	if spec.Kind != kindPgconnector {
		return nil, fmt.Errorf("workload %s: only kind %s", spec.Workload, kindPgconnector)
	}
	ctx := context.Background()
	c, err := connectorFor(spec.Kind, spec.DSN)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(c)
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	transport, err := transportOf(ctx, conn)
	if err != nil {
		return nil, err
	}
	var body []byte
	if spec.Workload == workBytea {
		if body, err = os.ReadFile(spec.File); err != nil {
			return nil, err
		}
	}
	return func() clientResult {
		defer db.Close()
		defer conn.Close()
		res := clientResult{Conns: 1, Transport: transport}
		start := time.Now()
		err := pgconnector.PgxConn(conn, func(pc *pgx.Conn) error {
			if spec.Workload == workCopy {
				var w countingWriter
				if _, err := pc.PgConn().CopyTo(ctx, &w, spec.Query); err != nil {
					return err
				}
				res.Bytes = int64(w)
				return nil
			}
			results, err := pc.PgConn().Exec(ctx, string(body)).ReadAll()
			if err != nil {
				return err
			}
			if len(results) != 1 || len(results[0].Rows) != 1 || len(results[0].Rows[0]) != 1 {
				return errors.New("bytea round trip: expected one row of one column")
			}
			got := int64(len(results[0].Rows[0][0]))
			if got != spec.Want {
				return fmt.Errorf("bytea round trip: %d bytes back, want %d", got, spec.Want)
			}
			res.Bytes = int64(len(body)) + got
			return nil
		})
		res.Seconds = time.Since(start).Seconds()
		if err != nil {
			res.Errors, res.Error = 1, err.Error()
		}
		return res
	}, nil
}

// transportOf asks the server how conn is protected: "GSS" (pg_stat_gssapi),
// "TLS" (pg_stat_ssl) or "plain".
func transportOf(ctx context.Context, conn *sql.Conn) (string, error) {
	var gss, tls bool
	err := conn.QueryRowContext(ctx, `select
		coalesce((select encrypted from pg_stat_gssapi where pid = pg_backend_pid()), false),
		coalesce((select ssl from pg_stat_ssl where pid = pg_backend_pid()), false)`).Scan(&gss, &tls)
	switch {
	case err != nil:
		return "", fmt.Errorf("asking the server for the transport: %w", err)
	case gss:
		return "GSS", nil
	case tls:
		return "TLS", nil
	}
	return "plain", nil
}

// describeError is err's text for a table: the server's error when there is
// one (pgx wraps it in the address and user of the attempt), else all of it.
func describeError(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return fmt.Sprintf("%s: %s (SQLSTATE %s)", pgErr.Severity, pgErr.Message, pgErr.Code)
	}
	return err.Error()
}

// countingWriter discards what it is given and counts it.
type countingWriter int64

func (w *countingWriter) Write(p []byte) (int, error) {
	*w += countingWriter(len(p))
	return len(p), nil
}

// shortError is err's text on one line, at most 200 bytes.
func shortError(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
