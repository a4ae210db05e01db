// Command jaeger is a small HTTP service on pgconnector whose traces go to Jaeger over OTLP/HTTP:
// each request to GET /users is one trace, with the server span of otelhttp as its root and, below
// it, a postgresql.connect span with its steps (postgresql.tcp_connect, postgresql.ssl_request,
// postgresql.startup, ...) for every connection the request opens.
//
// In examples/ (the examples' module):
//
//	go run ./jaeger                       # exports to 127.0.0.1:4318, serves 127.0.0.1:8080
//	go run ./jaeger -jaeger               # starts a local Jaeger first (built on first use)
//	go run ./jaeger -once                 # one request to itself, flush, exit
//	DATABASE_URL=postgres://... go run ./jaeger
//
// Without DATABASE_URL it starts a throwaway PostgreSQL cluster on loopback, as the quickstart
// does. See README.md beside this file for what to look at in Jaeger.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// ServiceName is the service.name of every span this program exports.
const ServiceName = "pgconnector-example"

// defaultOTLP is where spans go when neither -otlp nor OTEL_EXPORTER_OTLP_ENDPOINT says: a
// Jaeger (or any OTLP/HTTP receiver) on this machine.
const defaultOTLP = "127.0.0.1:4318"

// table is the example's own table; it is created (if missing) and filled at start.
const table = "pgconnector_example_users"

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "`address` to serve HTTP on")
	otlp := flag.String("otlp", "", "OTLP/HTTP receiver: host:port, or a URL such as http://host:4318 (default $OTEL_EXPORTER_OTLP_ENDPOINT, else "+defaultOTLP+")")
	once := flag.Bool("once", false, "make one request to GET /users, flush the spans and exit")
	startJaeger := flag.Bool("jaeger", false, "start a local Jaeger "+harness.JaegerVersion+" on loopback (built with the Go toolchain on first use) and export to it")
	flag.Parse()
	log.SetFlags(0)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *listen, *otlp, *once, *startJaeger); err != nil {
		if ctx.Err() != nil { // Ctrl-C before the service was up: what failed, failed because of it
			log.Print("jaeger example: interrupted; what it started is stopped and removed")
			os.Exit(130)
		}
		log.Fatalf("jaeger example: %v", err)
	}
}

func run(ctx context.Context, listen, otlp string, once, startJaeger bool) error {
	// Runs last: stops whatever the harness still runs (Jaeger, the cluster) and removes its
	// files, the initdb template included. A no-op when the harness started nothing.
	defer harness.Cleanup()
	var jaeger *harness.Jaeger
	if startJaeger {
		fmt.Printf("starting Jaeger %s on loopback (the first run builds it: about 16 minutes on two cores)...\n", harness.JaegerVersion)
		j, err := harness.StartJaeger(ctx)
		if err != nil {
			return err
		}
		defer j.Stop()
		jaeger = j
		otlp = j.OTLPHTTPEndpoint()
		fmt.Printf("Jaeger: OTLP/HTTP on %s, query API on %s\n", j.OTLPHTTPEndpoint(), j.QueryURL())
	}

	tp, target, err := newTracerProvider(ctx, otlp)
	if err != nil {
		return err
	}
	defer tp.Shutdown(context.Background())
	fmt.Printf("exporting spans of service %q over OTLP/HTTP to %s\n", ServiceName, target)

	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		fmt.Println("DATABASE_URL is not set: starting a throwaway PostgreSQL cluster (TLS off, trust)...")
		pg, err := harness.Start(ctx, harness.Options{})
		if err != nil {
			return err
		}
		defer pg.Stop()
		dsn = pg.DSN()
		fmt.Printf("PostgreSQL on %s\n", pg.Addr())
	}
	if err := createTable(ctx, dsn); err != nil {
		return err
	}

	connector, err := pgconnector.New(dsn, pgconnector.WithTracerProvider(tp))
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	// No idle connections: every query opens a connection inside the request, so that every
	// request shows connect spans. A real service keeps idle connections, and sees connects in
	// its traces when its pool grows.
	db.SetMaxIdleConns(0)

	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           otelhttp.NewHandler(newMux(db), ServiceName, otelhttp.WithTracerProvider(tp)),
		ReadHeaderTimeout: 10 * time.Second,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	base := "http://" + l.Addr().String()
	fmt.Printf("serving %s/users\n", base)

	if !once {
		select {
		case <-ctx.Done():
		case err := <-served:
			return err
		}
		fmt.Println("stopping")
		return shutdown(srv, tp)
	}

	reqErr := request(ctx, base+"/users")
	// Shutdown returns once the request's handler, and so its server span, has ended.
	if err := shutdown(srv, tp); err != nil {
		return errors.Join(reqErr, err)
	}
	if reqErr != nil {
		return reqErr
	}
	fmt.Println("spans flushed")
	if jaeger != nil {
		return printTraces(ctx, jaeger)
	}
	return nil
}

// newTracerProvider returns a TracerProvider that batches spans to the OTLP/HTTP receiver at
// otlp (host:port or URL), or where the OTEL_EXPORTER_OTLP_* variables say, or at defaultOTLP;
// and a description of that target.
func newTracerProvider(ctx context.Context, otlp string) (*sdktrace.TracerProvider, string, error) {
	var opts []otlptracehttp.Option
	target := otlp
	switch {
	case strings.Contains(otlp, "://"):
		u, err := url.Parse(otlp)
		if err != nil {
			return nil, "", fmt.Errorf("-otlp: %w", err)
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces" // a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT
		}
		target = u.String()
		opts = append(opts, otlptracehttp.WithEndpointURL(target))
	case otlp != "":
		opts = append(opts, otlptracehttp.WithEndpoint(otlp), otlptracehttp.WithInsecure())
	case os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "":
		target = "$OTEL_EXPORTER_OTLP_ENDPOINT" // the exporter reads the variables itself
	default:
		target = defaultOTLP
		opts = append(opts, otlptracehttp.WithEndpoint(defaultOTLP), otlptracehttp.WithInsecure())
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, "", err
	}
	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(ServiceName))
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), target, nil
}

// createTable creates and fills the example's table over a connector of its own, which traces
// nothing: the service's connector then starts with a cold decision cache, so that the first
// request shows the first connect's probe.
func createTable(ctx context.Context, dsn string) error {
	c, err := pgconnector.New(dsn, pgconnector.WithTracerProvider(noop.NewTracerProvider()))
	if err != nil {
		return err
	}
	db := sql.OpenDB(c)
	defer db.Close()
	for _, stmt := range []string{
		"CREATE TABLE IF NOT EXISTS " + table + " (id integer PRIMARY KEY, name text NOT NULL)",
		"INSERT INTO " + table + " VALUES (1, 'Ada'), (2, 'Grace'), (3, 'Edsger') ON CONFLICT (id) DO NOTHING",
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("creating table %s: %w", table, err)
		}
	}
	return nil
}

type user struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
}

// newMux serves GET /users: two queries, each on a connection opened for it (see
// SetMaxIdleConns in run).
func newMux(db *sql.DB) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /users", func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		var count int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&count); err != nil {
			fail(w, err)
			return
		}
		rows, err := db.QueryContext(ctx, "SELECT id, name FROM "+table+" ORDER BY id")
		if err != nil {
			fail(w, err)
			return
		}
		defer rows.Close()
		users := make([]user, 0, count)
		for rows.Next() {
			var u user
			if err := rows.Scan(&u.ID, &u.Name); err != nil {
				fail(w, err)
				return
			}
			users = append(users, u)
		}
		if err := rows.Err(); err != nil {
			fail(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"count": count, "users": users})
	})
	return mux
}

func fail(w http.ResponseWriter, err error) {
	log.Printf("GET /users: %v", err) // pgx and the connector keep passwords out of errors
	http.Error(w, "database error", http.StatusInternalServerError)
}

// request makes one GET request, without trace context, so that the server span is a root.
func request(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	fmt.Printf("GET %s: %s %s\n", u, resp.Status, strings.TrimSpace(string(body)))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return nil
}

// exportErrors counts the errors the OpenTelemetry SDK reported on its own (a batch that failed
// to export in the background, say); see main.
var exportErrors atomic.Int64

func init() {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		exportErrors.Add(1)
		log.Printf("opentelemetry: %v", err)
	}))
}

// shutdown stops the server, waiting for requests in flight, then flushes and stops the
// TracerProvider; its error says whether every span reached the receiver.
func shutdown(srv *http.Server, tp *sdktrace.TracerProvider) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := srv.Shutdown(ctx)
	if ferr := tp.ForceFlush(ctx); ferr != nil {
		err = errors.Join(err, fmt.Errorf("exporting spans: %w", ferr))
	}
	if serr := tp.Shutdown(ctx); serr != nil {
		err = errors.Join(err, fmt.Errorf("stopping the exporter: %w", serr))
	}
	if n := exportErrors.Load(); n > 0 {
		err = errors.Join(err, fmt.Errorf("the OpenTelemetry SDK reported %d error(s), see above", n))
	}
	return err
}

// printTraces prints, as trees, the traces of this service that Jaeger holds.
func printTraces(ctx context.Context, j *harness.Jaeger) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	traces, err := j.Traces(ctx, ServiceName, time.Now().Add(-time.Hour))
	if err != nil {
		return err
	}
	for _, t := range traces {
		fmt.Printf("\n== trace %s (%s/api/v3/traces/%s)\n", t.TraceID, j.QueryURL(), t.TraceID)
		children := map[string][]harness.Span{}
		ids := map[string]bool{}
		for _, s := range t.Spans {
			ids[s.SpanID] = true
		}
		var roots []harness.Span
		for _, s := range t.Spans {
			if s.ParentSpanID != "" && ids[s.ParentSpanID] {
				children[s.ParentSpanID] = append(children[s.ParentSpanID], s)
			} else {
				roots = append(roots, s)
			}
		}
		var walk func(s harness.Span, depth int)
		walk = func(s harness.Span, depth int) {
			fmt.Printf("%s%s %s %v%s\n", strings.Repeat("  ", depth), s.Name, s.Kind, s.End.Sub(s.Start).Round(10*time.Microsecond), attrs(s))
			for _, c := range children[s.SpanID] {
				walk(c, depth+1)
			}
		}
		for _, r := range roots {
			walk(r, 0)
		}
	}
	return nil
}

// attrs formats the attributes worth a glance in a tree line.
func attrs(s harness.Span) string {
	var keys []string
	for k := range s.Attributes {
		if strings.HasPrefix(k, "pgconnector.") || strings.HasPrefix(k, "server.") || k == "db.namespace" || k == "db.query.text" || k == "http.response.status_code" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%v", k, s.Attributes[k])
	}
	return b.String()
}
