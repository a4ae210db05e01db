// Command httpservice is the smallest net/http service on pgconnector with OpenTelemetry: otelhttp
// around the handler and the connector tracing into the same TracerProvider, so that a request's
// trace holds the connects it caused. Spans go to standard output, or with -otlp to an OTLP/HTTP
// receiver such as Jaeger.
//
// In examples/ (the examples' module):
//
//	DATABASE_URL=postgres://... go run ./httpservice
//	DATABASE_URL=postgres://... go run ./httpservice -otlp 127.0.0.1:4318
//	curl http://127.0.0.1:8081/now
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "`address` to serve HTTP on")
	otlp := flag.String("otlp", "", "OTLP/HTTP receiver `host:port`; empty: spans go to standard output")
	flag.Parse()
	log.SetFlags(0)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *listen, *otlp); err != nil {
		log.Fatalf("httpservice: %v", err)
	}
}

func run(ctx context.Context, listen, otlp string) error {
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		return errors.New("set DATABASE_URL to a PostgreSQL connection string")
	}
	tp, err := newTracerProvider(ctx, otlp, os.Stdout)
	if err != nil {
		return err
	}
	defer tp.Shutdown(context.Background())

	connector, err := pgconnector.New(dsn, pgconnector.WithTracerProvider(tp))
	if err != nil {
		return err
	}
	db := connector.OpenDB() // with the pool metrics (db.Stats) beside the connect metrics
	defer db.Close()

	srv := &http.Server{Addr: listen, Handler: newHandler(db, tp), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Printf("serving http://%s/now", listen)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newTracerProvider returns a TracerProvider for service "pgconnector-httpservice" that batches
// spans to the OTLP/HTTP receiver at otlp (host:port, plaintext), or writes them to w as JSON
// when otlp is empty.
func newTracerProvider(ctx context.Context, otlp string, w io.Writer) (*sdktrace.TracerProvider, error) {
	var exp sdktrace.SpanExporter
	var err error
	if otlp != "" {
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(otlp), otlptracehttp.WithInsecure())
	} else {
		exp, err = stdouttrace.New(stdouttrace.WithWriter(w))
	}
	if err != nil {
		return nil, err
	}
	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName("pgconnector-httpservice"))
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// newHandler serves GET /now (the server's clock) with a server span per request.
func newHandler(db *sql.DB, tp trace.TracerProvider) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /now", func(w http.ResponseWriter, r *http.Request) {
		var now time.Time
		if err := db.QueryRowContext(r.Context(), "SELECT now()").Scan(&now); err != nil {
			log.Printf("GET /now: %v", err)
			http.Error(w, "database error", http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, now.UTC().Format(time.RFC3339Nano))
	})
	return otelhttp.NewHandler(mux, "httpservice", otelhttp.WithTracerProvider(tp))
}
