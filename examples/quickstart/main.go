// Command quickstart opens a database/sql pool on pgconnector, connects from several goroutines at
// once (cold decision cache), then again (warm cache), and prints what was decided and the span
// tree of every connect.
//
// In examples/ (the examples' module; from the repository root, bash scripts/quickstart.sh):
//
//	go run ./quickstart            # on a throwaway local PostgreSQL cluster
//	DATABASE_URL=postgres://... go run ./quickstart
//	go run ./quickstart -json      # also print the spans as the OpenTelemetry stdout exporter writes them
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

func main() {
	workers := flag.Int("workers", 8, "goroutines connecting at once")
	jsonOut := flag.Bool("json", false, "also print every span with the OpenTelemetry stdout exporter")
	flag.Parse()
	log.SetFlags(0)
	// Ctrl-C, SIGTERM, or a closed stdout (quickstart.sh | head) must not kill the process before
	// the deferred Stop of the throwaway cluster: cancel instead, and let a write to a closed pipe
	// fail (EPIPE) rather than end the program.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	err := run(ctx, *workers, *jsonOut)
	interrupted := ctx.Err() != nil
	stop()
	if interrupted {
		// What failed after Ctrl-C failed because of it: say so, not what broke.
		log.Print("quickstart: interrupted; the throwaway cluster, if one was started, is stopped and removed")
		os.Exit(130)
	}
	if err != nil {
		log.Fatalf("quickstart: %v", err)
	}
}

func run(ctx context.Context, workers int, jsonOut bool) error {
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		fmt.Println("DATABASE_URL is not set: starting a throwaway PostgreSQL cluster (TLS off, trust)...")
		defer harness.Cleanup() // runs after pg.Stop: removes the initdb template too
		pg, err := harness.Start(ctx, harness.Options{})
		if err != nil {
			return err
		}
		defer pg.Stop()
		dsn = pg.DSN()
		fmt.Printf("cluster on %s:%d, data in %s\n", pg.Host, pg.Port, pg.DataDir)
	}

	// Spans go to an in-memory recorder (printed as a tree below) and, with -json, to the
	// OpenTelemetry stdout exporter.
	rec := tracetest.NewSpanRecorder()
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(rec)}
	if jsonOut {
		exp, err := stdouttrace.New(stdouttrace.WithPrettyPrint())
		if err != nil {
			return err
		}
		tpOpts = append(tpOpts, sdktrace.WithSyncer(exp))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	defer tp.Shutdown(ctx)
	tracer := tp.Tracer("quickstart")

	connector, err := pgconnector.New(dsn, pgconnector.WithTracerProvider(tp))
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	db.SetMaxIdleConns(0) // every query opens a new connection, so that each round shows connects

	for _, round := range []string{"cold cache", "warm cache"} {
		rctx, span := tracer.Start(ctx, "round: "+round)
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		start := time.Now()
		for i := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var backend int
				if err := db.QueryRowContext(rctx, "select pg_backend_pid()").Scan(&backend); err != nil {
					errs <- fmt.Errorf("worker %d: %w", i, err)
				}
			}()
		}
		wg.Wait()
		span.End()
		close(errs)
		for err := range errs {
			return err
		}
		fmt.Printf("\n== %s: %d goroutines connected in %v\n", round, workers, time.Since(start).Round(time.Millisecond))
		printDecisions(rec.Ended(), span.SpanContext().SpanID().String())
	}

	printTree(rec.Ended())
	return nil
}

// printDecisions summarises the connects of one round from their spans' attributes.
func printDecisions(spans []sdktrace.ReadOnlySpan, parent string) {
	counts := map[string]int{}
	var keys []string
	for _, s := range spans {
		if s.Name() != "postgresql.connect" || s.Parent().SpanID().String() != parent {
			continue
		}
		a := map[string]string{}
		for _, kv := range s.Attributes() {
			a[string(kv.Key)] = kv.Value.Emit()
		}
		// The plan is on the decision event of the host connected to (one event per host tried).
		plan := map[string]string{}
		for _, ev := range s.Events() {
			if ev.Name != "decision" {
				continue
			}
			e := map[string]string{}
			for _, kv := range ev.Attributes {
				e[string(kv.Key)] = kv.Value.Emit()
			}
			if e["server.address"] == a["server.address"] && e["server.port"] == a["server.port"] {
				plan = e
			}
		}
		d := fmt.Sprintf("plan %-9s transport %-5s cache hit %-5s", plan["pgconnector.plan"], a["pgconnector.transport"], a["pgconnector.cache.hit"])
		if sk := plan["pgconnector.plan.skipped"]; sk != "" {
			d += " skipped " + sk
		}
		if plan["pgconnector.probe.waited"] == "true" {
			d += " (waited for another connection's probe)"
		}
		if counts[d] == 0 {
			keys = append(keys, d)
		}
		counts[d]++
	}
	sort.Slice(keys, func(i, j int) bool { // the probe first, then the connects that waited for it
		return counts[keys[i]] < counts[keys[j]] || counts[keys[i]] == counts[keys[j]] && keys[i] < keys[j]
	})
	for _, k := range keys {
		fmt.Printf("   %2d connect(s): %s\n", counts[k], k)
	}
}

// printTree prints the recorded spans as a tree, each with its project and connection attributes.
func printTree(spans []sdktrace.ReadOnlySpan) {
	children := map[string][]sdktrace.ReadOnlySpan{}
	var roots []sdktrace.ReadOnlySpan
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.SpanContext().SpanID().String()] = true
	}
	for _, s := range spans {
		p := s.Parent().SpanID().String()
		if s.Parent().IsValid() && ids[p] {
			children[p] = append(children[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(ss []sdktrace.ReadOnlySpan) {
		sort.Slice(ss, func(i, j int) bool { return ss[i].StartTime().Before(ss[j].StartTime()) })
	}
	var walk func(s sdktrace.ReadOnlySpan, depth int)
	walk = func(s sdktrace.ReadOnlySpan, depth int) {
		fmt.Printf("%s%s %v%s%s\n", strings.Repeat("  ", depth), s.Name(),
			s.EndTime().Sub(s.StartTime()).Round(10*time.Microsecond), attrs(s.Attributes()), status(s))
		for _, ev := range s.Events() {
			if ev.Name == "decision" { // one per host tried, with its plan
				fmt.Printf("%s(event) decision%s\n", strings.Repeat("  ", depth+1), attrs(ev.Attributes))
			}
		}
		kids := children[s.SpanContext().SpanID().String()]
		byStart(kids)
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	byStart(roots)
	fmt.Println("\n== span tree")
	for _, r := range roots {
		walk(r, 0)
	}
}

func attrs(kv []attribute.KeyValue) string {
	var b strings.Builder
	for _, a := range kv {
		k := string(a.Key)
		if strings.HasPrefix(k, "pgconnector.") || k == "server.address" || k == "server.port" || k == "network.peer.address" {
			fmt.Fprintf(&b, " %s=%s", strings.TrimPrefix(k, "pgconnector."), a.Value.Emit())
		}
	}
	return b.String()
}

func status(s sdktrace.ReadOnlySpan) string {
	if s.Status().Code.String() == "Error" {
		return "  ERROR: " + s.Status().Description
	}
	return ""
}
