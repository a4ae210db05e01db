// Command interceptor plugs sqlmw interceptors (github.com/ngrok/sqlmw), written as sqlmw's
// users write them, into a Connector with WithInterceptor: one logs every statement with its
// duration (log/slog), the other prepends a comment naming the route of the request that runs
// it, taken from the context, so that what the server shows of a statement (pg_stat_activity,
// its log) says where it came from. The first given is the outermost: the logger sees the text
// as the application wrote it, and its time includes the rewriter's.
//
// The statements run on a throwaway local cluster, or on DATABASE_URL when it is set. In
// examples/ (the examples' module):
//
//	go run ./interceptor
package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ngrok/sqlmw"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// logInterceptor logs each query and exec with its duration and error, never its arguments.
type logInterceptor struct {
	sqlmw.NullInterceptor
	log *slog.Logger
}

func (l logInterceptor) ConnQueryContext(ctx context.Context, conn driver.QueryerContext, query string, args []driver.NamedValue) (context.Context, driver.Rows, error) {
	start := time.Now()
	rows, err := conn.QueryContext(ctx, query, args)
	l.log.InfoContext(ctx, "query", "text", query, "args", len(args), "duration", time.Since(start), "error", err)
	return ctx, rows, err
}

func (l logInterceptor) ConnExecContext(ctx context.Context, conn driver.ExecerContext, query string, args []driver.NamedValue) (driver.Result, error) {
	start := time.Now()
	res, err := conn.ExecContext(ctx, query, args)
	l.log.InfoContext(ctx, "exec", "text", query, "args", len(args), "duration", time.Since(start), "error", err)
	return res, err
}

// routeKey holds the route of the request a context belongs to.
type routeKey struct{}

// withRoute returns ctx for the statements of a request to route.
func withRoute(ctx context.Context, route string) context.Context {
	return context.WithValue(ctx, routeKey{}, route)
}

// routeInterceptor prepends /* route='...' */ to the text of each query and exec whose context
// names a route (the route is the application's own: it must not hold "*/").
type routeInterceptor struct {
	sqlmw.NullInterceptor
}

func commented(ctx context.Context, query string) string {
	if route, ok := ctx.Value(routeKey{}).(string); ok {
		return "/* route='" + route + "' */ " + query
	}
	return query
}

func (routeInterceptor) ConnQueryContext(ctx context.Context, conn driver.QueryerContext, query string, args []driver.NamedValue) (context.Context, driver.Rows, error) {
	rows, err := conn.QueryContext(ctx, commented(ctx, query), args)
	return ctx, rows, err
}

func (routeInterceptor) ConnExecContext(ctx context.Context, conn driver.ExecerContext, query string, args []driver.NamedValue) (driver.Result, error) {
	return conn.ExecContext(ctx, commented(ctx, query), args)
}

// open returns a pool whose statements are logged to logger and commented with their route.
func open(dsn string, logger *slog.Logger) (*sql.DB, error) {
	c, err := pgconnector.New(dsn,
		pgconnector.WithInterceptor(logInterceptor{log: logger}), // outermost
		pgconnector.WithInterceptor(routeInterceptor{}))
	if err != nil {
		return nil, err
	}
	return c.OpenDB(), nil
}

// run runs a request's statement on db and returns what the server shows of it.
func run(ctx context.Context, db *sql.DB) (string, error) {
	ctx = withRoute(ctx, "GET /orders")
	var seen string
	err := db.QueryRowContext(ctx, "select query from pg_stat_activity where pid = pg_backend_pid()").Scan(&seen)
	return seen, err
}

func main() {
	log.SetFlags(0)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var pg *harness.Postgres
	dsn := os.Getenv("DATABASE_URL")
	var err error
	if dsn == "" {
		fmt.Println("starting a throwaway PostgreSQL cluster...")
		if pg, err = harness.Start(ctx, harness.Options{}); err == nil {
			dsn = pg.DSN()
		}
	}
	if err == nil {
		err = openAndRun(ctx, dsn)
	}
	if pg != nil {
		pg.Stop()
	}
	harness.Cleanup() // removes the initdb template too
	if ctx.Err() != nil {
		log.Print("interceptor: interrupted; the throwaway cluster is stopped and removed")
		os.Exit(130)
	}
	if err != nil {
		log.Fatalf("interceptor: %v", err)
	}
}

// openAndRun opens the pool on dsn, runs the request's statement and prints what the server ran.
func openAndRun(ctx context.Context, dsn string) error {
	db, err := open(dsn, slog.New(slog.NewTextHandler(os.Stdout, nil)))
	if err != nil {
		return err
	}
	defer db.Close()
	seen, err := run(ctx, db)
	if err != nil {
		return err
	}
	fmt.Printf("the server ran: %s\n", seen)
	return nil
}
