// Command quickstart shows what pgconnector saves when it opens PostgreSQL connections for
// database/sql. On a throwaway local PostgreSQL cluster (TLS off, so sslmode=prefer is answered
// 'N'), it opens the same number of new connections with pgconnector and with pgx's database/sql
// driver (github.com/jackc/pgx/v5/stdlib, same connection string) and prints, side by side, the
// backends the server started, the TCP connections and SSLRequests a proxy in front of it counted,
// the round trips before the first query and the median connect time. Then the connect waterfall of
// a cold and a warm pgconnector connection, and the span tree of one request and its statements.
//
// In examples/ (the examples' module; from the repository root, bash scripts/quickstart.sh):
//
//	go run ./quickstart            # on a throwaway local PostgreSQL cluster
//	DATABASE_URL=postgres://... go run ./quickstart   # waterfall and request only
//	go run ./quickstart -v         # also connect from 8 goroutines at once, cold then warm, and print every span
//	go run ./quickstart -json      # the report as one JSON document on stdout (progress on stderr)
//	go run ./quickstart -spans FILE   # also write every span to FILE ("-": stderr), a JSON object a line
//
// When the times of a run cannot be compared (the warm connects slower than the cold one, or
// pgconnector slower than pgx, or the warm connects spread too wide: see noisy), the report says
// so and asks for a re-run: the machine's load decided them. The counts do not depend on it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// options are the command's flags.
type options struct {
	conns     int       // new connections per driver in the comparison
	workers   int       // goroutines connecting at once in the -v rounds
	verbose   bool      // -v: also the concurrent rounds and the full span tree
	json      bool      // -json: the report as one JSON document
	spansPath string    // -spans: the file for every span ("-": stderr, "": none)
	spans     io.Writer // where the spans go (from spansPath); nil: nowhere
}

func main() { os.Exit(quickstart()) }

// quickstart runs the command and returns its exit status: 0, 1 for an error, 2 for bad flags,
// 130 after Ctrl-C.
func quickstart() int {
	var o options
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: bash scripts/quickstart.sh [flags]  (or go run ./quickstart [flags] in examples/)")
		flag.PrintDefaults()
	}
	flag.IntVar(&o.conns, "n", 20, "new connections per driver in the comparison, one after the other (at least 2: a cold one and a warm one)")
	flag.IntVar(&o.workers, "workers", 8, "goroutines connecting at once (with -v)")
	flag.BoolVar(&o.verbose, "v", false, "also connect from -workers goroutines at once, cold then warm, and print every span")
	flag.BoolVar(&o.json, "json", false, "print the report as one JSON document on stdout (what it is doing on stderr)")
	flag.StringVar(&o.spansPath, "spans", "", "also write every span, as the OpenTelemetry stdout exporter does (a JSON object a line), to this file (\"-\": stderr)")
	flag.Parse()
	log.SetFlags(0)
	if flag.NArg() > 0 {
		log.Printf("quickstart: %q: no arguments are taken, only flags (see -h)", flag.Arg(0))
		return 2
	}
	if o.conns < 2 {
		log.Printf("quickstart: -n %d: want at least 2 new connections per driver, a cold one and a warm one", o.conns)
		return 2
	}
	if o.workers < 1 {
		log.Printf("quickstart: -workers %d: want at least 1", o.workers)
		return 2
	}
	switch o.spansPath {
	case "":
	case "-":
		o.spans = os.Stderr
	default:
		f, err := os.Create(o.spansPath)
		if err != nil {
			log.Printf("quickstart: -spans: %v", err)
			return 2
		}
		defer f.Close()
		o.spans = f
	}
	// Ctrl-C, SIGTERM, or a closed stdout (quickstart.sh | head) must not kill the process before
	// the deferred Stop of the throwaway cluster: cancel instead, and let a write to a closed pipe
	// fail (EPIPE) rather than end the program.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	// What the program is doing goes with the report, or to stderr when stdout is one JSON
	// document.
	var progress io.Writer = os.Stdout
	if o.json {
		progress = os.Stderr
	}
	err := run(ctx, os.Stdout, progress, o)
	interrupted := ctx.Err() != nil
	stop()
	if interrupted {
		// What failed after Ctrl-C failed because of it: say so, not what broke.
		log.Print("quickstart: interrupted; the throwaway cluster, if one was started, is stopped and removed")
		return 130
	}
	if err != nil {
		log.Printf("quickstart: %v", err)
		return 1
	}
	return 0
}

// run starts a throwaway cluster unless DATABASE_URL is set, and shows on it: the report on w,
// what it is doing on progress.
func run(ctx context.Context, w, progress io.Writer, o options) error {
	dsn := os.Getenv("DATABASE_URL")
	var pg *harness.Postgres
	if dsn == "" {
		fmt.Fprintln(progress, "DATABASE_URL is not set: starting a throwaway PostgreSQL cluster (TLS off, trust)...")
		defer harness.Cleanup() // runs after pg.Stop: removes the initdb template too
		var err error
		pg, err = harness.Start(ctx, harness.Options{})
		if err != nil {
			return err
		}
		defer pg.Stop()
		dsn = pg.DSN()
		if o.verbose {
			fmt.Fprintf(progress, "cluster on %s:%d, data in %s\n", pg.Host, pg.Port, pg.DataDir)
		}
	}
	if pg == nil {
		fmt.Fprintln(progress, "DATABASE_URL is set: connecting to "+serverOf(dsn))
	}
	return show(ctx, w, pg, dsn, o)
}

// serverOf names the host(s) and port(s) of dsn, without anything else of it (a password).
func serverOf(dsn string) string {
	s, err := pgconnector.ParseSettings(dsn)
	if err != nil {
		return "it (the connect will say what is wrong with it)"
	}
	var hosts []string
	for _, h := range s.Hosts {
		hosts = append(hosts, fmt.Sprintf("%s:%d", h.Host, h.Port))
	}
	return strings.Join(hosts, ",")
}

// show measures and prints the report (compare, waterfall, request and, with -v, the concurrent
// rounds) on w, as text or, with -json, as one JSON document; with o.spans, every span goes there
// as the OpenTelemetry stdout exporter writes it. pg is the throwaway server, nil for a
// DATABASE_URL: then there is no comparison.
func show(ctx context.Context, w io.Writer, pg *harness.Postgres, dsn string, o options) error {
	var tpOpts []sdktrace.TracerProviderOption
	if o.spans != nil {
		exp, err := stdouttrace.New(stdouttrace.WithWriter(o.spans))
		if err != nil {
			return err
		}
		tpOpts = append(tpOpts, sdktrace.WithSyncer(exp))
	}
	rep, err := compact(ctx, pg, dsn, o.conns, tpOpts)
	if err != nil {
		return err
	}
	rep.Server = "throwaway cluster"
	if pg == nil {
		rep.Server = serverOf(dsn)
	}
	if o.verbose {
		if rep.Rounds, err = rounds(ctx, dsn, o.workers, tpOpts); err != nil {
			return err
		}
	}
	if o.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printText(w, rep)
	return nil
}
