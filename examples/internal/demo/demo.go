// Package demo is what the integration examples (examples/sqlx, gorm, bun, ent, goose) share: a
// database to run on (DATABASE_URL, else a throwaway local cluster), an in-memory span recorder,
// Ctrl-C handling as in examples/quickstart, and the span tree printed at the end.
package demo

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// Main runs the example called name: run gets a connection string and a TracerProvider that
// records every span, and once it returned the spans are printed as a tree. Ctrl-C and SIGTERM
// cancel run's context (the throwaway cluster, if one was started, is still stopped and removed)
// and the program exits 130.
func Main(name string, run func(ctx context.Context, dsn string, tp trace.TracerProvider) error) {
	log.SetFlags(0)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE) // | head: a failed write, not death
	err := start(ctx, name, run)
	interrupted := ctx.Err() != nil
	stop()
	if interrupted {
		log.Printf("%s: interrupted; the throwaway cluster, if one was started, is stopped and removed", name)
		os.Exit(130)
	}
	if err != nil {
		log.Fatalf("%s: %v", name, err)
	}
}

func start(ctx context.Context, name string, run func(ctx context.Context, dsn string, tp trace.TracerProvider) error) error {
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		fmt.Println("DATABASE_URL is not set: starting a throwaway PostgreSQL cluster (TLS off, trust)...")
		defer harness.Cleanup() // after pg.Stop: removes the initdb template too
		pg, err := harness.Start(ctx, harness.Options{})
		if err != nil {
			return err
		}
		defer pg.Stop()
		dsn = pg.DSN()
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	if err := run(ctx, dsn, tp); err != nil {
		return err
	}
	fmt.Printf("\n== spans of %s\n", name)
	PrintTree(os.Stdout, rec.Ended())
	return nil
}

// PrintTree writes spans as a tree (children under their parent, by start time), each with its
// duration and the attributes that tell statements and connects apart.
func PrintTree(w io.Writer, spans []sdktrace.ReadOnlySpan) {
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext().SpanID()] = true
	}
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if p := s.Parent(); p.IsValid() && ids[p.SpanID()] {
			children[p.SpanID()] = append(children[p.SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(ss []sdktrace.ReadOnlySpan) {
		sort.SliceStable(ss, func(i, j int) bool { return ss[i].StartTime().Before(ss[j].StartTime()) })
	}
	var walk func(s sdktrace.ReadOnlySpan, depth int)
	walk = func(s sdktrace.ReadOnlySpan, depth int) {
		fmt.Fprintf(w, "%s%s %v%s%s\n", strings.Repeat("  ", depth), s.Name(),
			s.EndTime().Sub(s.StartTime()).Round(10*time.Microsecond), attrs(s.Attributes()), status(s))
		kids := children[s.SpanContext().SpanID()]
		byStart(kids)
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	byStart(roots)
	for _, r := range roots {
		walk(r, 0)
	}
}

var shown = map[attribute.Key]bool{"pgconnector.transport": true, "pgconnector.cache.hit": true}

// attrs shows a few attributes as key=value, then a statement's db.query.text on one line.
func attrs(kv []attribute.KeyValue) string {
	var b strings.Builder
	text := ""
	for _, a := range kv {
		if shown[a.Key] {
			fmt.Fprintf(&b, " %s=%s", strings.TrimPrefix(string(a.Key), "pgconnector."), a.Value.Emit())
		}
		if a.Key == "db.query.text" {
			text = strings.Join(strings.Fields(a.Value.AsString()), " ")
		}
	}
	if text != "" {
		b.WriteString(": " + text)
	}
	return b.String()
}

func status(s sdktrace.ReadOnlySpan) string {
	if s.Status().Code.String() == "Error" {
		return "  ERROR: " + s.Status().Description
	}
	return ""
}
