package stdlibsuite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/ngrok/sqlmw"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

func TestMain(m *testing.M) {
	// No Kerberos credentials from the machine: the servers here take trust, and the
	// connector must not find a credential cache to try.
	os.Setenv("KRB5CCNAME", "FILE:/nonexistent/pgconnector-test-ccache")
	os.Setenv("KRB5_CLIENT_KTNAME", "")
	os.Exit(harness.Run(m)) // stops the servers too
}

// majors are the PostgreSQL major versions every case runs against: the oldest and the newest
// the project supports.
var majors = []int{15, 18}

// A server is one of the throwaway servers the cases share, named for subtests ("pg15").
type server struct {
	name string
	*harness.Postgres
}

var (
	serversOnce sync.Once
	shared      []server
	serversErr  error
)

// servers starts, once per process, a server of each of majors (trust, no TLS). The cases
// make only temporary objects or objects named after the subtest, so they share them.
func servers(t *testing.T) []server {
	t.Helper()
	serversOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		for _, major := range majors {
			p, err := harness.Start(ctx, harness.Options{Major: major})
			if errors.Is(err, harness.ErrNotInstalled) {
				serversErr = fmt.Errorf("PostgreSQL %d is not installed: run scripts/install-deps.sh: %w", major, err)
				return
			}
			if err != nil {
				serversErr = err
				return
			}
			shared = append(shared, server{name: fmt.Sprintf("pg%d", major), Postgres: p})
		}
	})
	if serversErr != nil {
		t.Fatalf("starting servers: %v", serversErr)
	}
	return shared
}

// tracerProvider records every statement span of the connector (and exports none): with a
// span that records, the statement tracer hands database/sql its own rows, not pgx's, so the
// cases go through all of its wrappers.
var tracerProvider = sdktrace.NewTracerProvider()

// A driverUnderTest is one of the ways a database/sql pool is opened here: pgx's own driver,
// the reference, and the connector, the driver under test, also with sqlmw interceptors.
type driverUnderTest struct {
	name string
	open func(t *testing.T, dsn string) *sql.DB
}

var drivers = []driverUnderTest{
	{"pgx", openPgx},
	{"pgconnector", func(t *testing.T, dsn string) *sql.DB { return openConnector(t, dsn) }},
	// Two sqlmw interceptors that pass every call on: their wrappers hide nothing either.
	{"pgconnector+sqlmw", func(t *testing.T, dsn string) *sql.DB {
		return openConnector(t, dsn, pgconnector.WithInterceptor(sqlmw.NullInterceptor{}), pgconnector.WithInterceptor(sqlmw.NullInterceptor{}))
	}},
}

// openPgx opens dsn with pgx's driver, registered as "pgx" by its stdlib package.
func openPgx(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// openConnector opens dsn with a Connector whose statement spans record, and checks that the
// connections database/sql gets are the statement tracer's, not pgx's.
func openConnector(t *testing.T, dsn string, opts ...pgconnector.Option) *sql.DB {
	t.Helper()
	c, err := pgconnector.New(dsn, append([]pgconnector.Option{pgconnector.WithTracerProvider(tracerProvider)}, opts...)...)
	if err != nil {
		t.Fatalf("pgconnector.New: %v", err)
	}
	db := c.OpenDB()
	t.Cleanup(func() {
		db.Close()
		c.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		if _, ok := dc.(*stdlib.Conn); ok {
			return errors.New("the connector handed database/sql pgx's *stdlib.Conn: the statement tracer is not in the way")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// defaultMode stands for the connection string without default_query_exec_mode: pgx's
// default, cache_statement.
const defaultMode pgx.QueryExecMode = 0

// allModes are pgx's query exec modes; upstream runs most cases in each as the connection's
// default. knownOIDModes are those that learn the parameter types from the server before
// sending the values.
var (
	allModes = []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement,
		pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec,
		pgx.QueryExecModeExec,
		pgx.QueryExecModeSimpleProtocol,
	}
	knownOIDModes = allModes[:3]
	onlyDefault   = []pgx.QueryExecMode{defaultMode}
)

// modeKey is a mode as the value of default_query_exec_mode ("cache_statement").
func modeKey(m pgx.QueryExecMode) string { return strings.ReplaceAll(m.String(), " ", "_") }

// modeName names a mode's subtest.
func modeName(m pgx.QueryExecMode) string {
	if m == defaultMode {
		return "default"
	}
	return modeKey(m)
}

// bothDrivers runs a case on every server, in each of modes as the connection string's
// default_query_exec_mode: on a pool of pgx's driver, then on one of the connector, each in a
// subtest named after its driver that fails on its own when the case does not see what
// upstream expects. It then fails the mode's subtest when the two results differ. After the
// case each pool must still run a query (upstream's ensureDBValid). The pools are closed when
// their subtest ends.
func bothDrivers[R any](t *testing.T, modes []pgx.QueryExecMode, run func(t *testing.T, db *sql.DB) R) {
	t.Helper()
	for _, srv := range servers(t) {
		t.Run(srv.name, func(t *testing.T) {
			for _, mode := range modes {
				t.Run(modeName(mode), func(t *testing.T) {
					dsn := srv.DSN()
					if mode != defaultMode {
						dsn = srv.DSN("default_query_exec_mode=" + modeKey(mode))
					}
					results := make([]R, len(drivers))
					ran := true
					for i, d := range drivers {
						ok := t.Run(d.name, func(t *testing.T) {
							db := d.open(t, dsn)
							results[i] = run(t, db)
							ensureValid(t, db)
						})
						ran = ran && ok
					}
					if !ran {
						t.Errorf("results not compared: a driver's run failed")
						return
					}
					for i := 1; i < len(drivers); i++ {
						if !reflect.DeepEqual(results[0], results[i]) {
							t.Errorf("%s and %s differ:%s", drivers[0].name, drivers[i].name,
								differences(drivers[0].name, drivers[i].name, reflect.ValueOf(results[0]), reflect.ValueOf(results[i]), ""))
						}
					}
				})
			}
		})
	}
}

// differences lists where the results a (of driver an) and b (of bn) differ: the elements of
// slices of one length and the fields of structs one by one, else the values whole.
func differences(an, bn string, a, b reflect.Value, path string) string {
	if a.IsValid() && b.IsValid() && a.Type() == b.Type() {
		switch a.Kind() {
		case reflect.Slice, reflect.Array:
			if a.Len() == b.Len() && (a.Kind() == reflect.Array || a.IsNil() == b.IsNil()) {
				var out strings.Builder
				for i := range a.Len() {
					if !reflect.DeepEqual(a.Index(i).Interface(), b.Index(i).Interface()) {
						out.WriteString(differences(an, bn, a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i)))
					}
				}
				return out.String()
			}
		case reflect.Struct:
			var out strings.Builder
			for i := range a.NumField() {
				f := a.Type().Field(i)
				if f.IsExported() && !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
					out.WriteString(differences(an, bn, a.Field(i), b.Field(i), path+"."+f.Name))
				}
			}
			if out.Len() > 0 {
				return out.String()
			}
		}
	}
	if path == "" {
		path = "result"
	}
	return fmt.Sprintf("\n%s:\n\t%s: %s\n\t%s: %s", path, an, show(a), bn, show(b))
}

// show prints a value of a result for a failure message, with its type.
func show(v reflect.Value) string {
	if !v.IsValid() {
		return "nil"
	}
	return fmt.Sprintf("%#v", v.Interface())
}

// ensureValid runs a query that returns ten rows on db, as upstream does after each case: the
// pool must not be left with a broken connection it would hand out.
func ensureValid(t *testing.T, db *sql.DB) {
	t.Helper()
	ctx := caseContext(t)
	rows, err := db.QueryContext(ctx, "select generate_series(1, $1)", 10)
	if err != nil {
		t.Fatalf("the pool after the case: %v", err)
	}
	defer rows.Close()
	var sum, count int
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			t.Fatalf("the pool after the case: %v", err)
		}
		sum += n
		count++
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("the pool after the case: %v", err)
	}
	if count != 10 || sum != 55 {
		t.Fatalf("the pool after the case: %d rows summing to %d, want 10 summing to 55", count, sum)
	}
}

// caseTimeout bounds what one driver's run of a case waits for the server.
const caseTimeout = 30 * time.Second

// caseContext returns a context for the calls of a case, canceled when its test ends or after
// caseTimeout, so that a case that would wait forever fails instead.
func caseContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), caseTimeout)
	t.Cleanup(cancel)
	return ctx
}

// returnsWithin runs f, which must not call t's methods, on another goroutine and returns its
// error; it fails t at once when f panics or has not returned after d. For calls that take no
// context (Scan), whose regression would be a hang or a panic.
func returnsWithin(t *testing.T, d time.Duration, what string, f func() error) error {
	t.Helper()
	type outcome struct {
		err   error
		panic any
	}
	done := make(chan outcome, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- outcome{panic: p}
			}
		}()
		done <- outcome{err: f()}
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case o := <-done:
		if o.panic != nil {
			t.Fatalf("%s panicked: %v", what, o.panic)
		}
		return o.err
	case <-timer.C:
		t.Fatalf("%s has not returned after %v", what, d)
		return nil
	}
}

// errText is err's message for a result, or "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// mustConn returns a connection of db of its own, closed when the test ends: for cases that
// need one session (temporary tables, prepared statements, the backend's pid).
func mustConn(t *testing.T, ctx context.Context, db *sql.DB) *sql.Conn {
	t.Helper()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatalf("db.Conn: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// execer and queryer are what *sql.DB, *sql.Conn and *sql.Tx share.
type (
	execer interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	}
	queryer interface {
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	}
)

// mustExec runs statements on conn, failing the test on an error.
func mustExec(t *testing.T, ctx context.Context, conn execer, query string, args ...any) sql.Result {
	t.Helper()
	res, err := conn.ExecContext(ctx, query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return res
}

var nameSeq atomic.Int64

// uniqueName returns an identifier no other case or run uses, for the objects a case cannot
// make temporary (a table several connections see).
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), nameSeq.Add(1))
}
