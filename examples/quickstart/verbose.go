package main

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/pgconnector/pgconnector"
)

// rounds is what -v adds: a new connector (cold decision cache) connects from workers goroutines at
// once, then again (warm cache); it returns what was decided in each round and, with the last,
// the span tree of every connect, statement and step, with every project attribute.
func rounds(ctx context.Context, dsn string, workers int, opts []sdktrace.TracerProviderOption) ([]roundView, error) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithSpanProcessor(rec))...)
	tracer := tp.Tracer("quickstart")

	connector, err := pgconnector.New(dsn, pgconnector.WithTracerProvider(tp))
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	db.SetMaxIdleConns(0) // every query opens a new connection, so that each round shows connects

	var out []roundView
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
			return nil, err
		}
		out = append(out, roundView{Name: round, Workers: workers, DurationMS: msf(time.Since(start)),
			Decisions: decisions(rec.Ended(), span.SpanContext().SpanID().String())})
	}
	out[len(out)-1].tree = spanTree(rec.Ended())
	return out, nil
}

// decisions summarises the connects of one round from their spans' attributes.
func decisions(spans []sdktrace.ReadOnlySpan, parent string) []decisionCount {
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
	var out []decisionCount
	for _, k := range keys {
		out = append(out, decisionCount{Count: counts[k], Decision: k})
	}
	return out
}

// spanTree draws the recorded spans as a tree, a line each, with its project and connection
// attributes.
func spanTree(spans []sdktrace.ReadOnlySpan) []string {
	var lines []string
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
		lines = append(lines, fmt.Sprintf("%s%s %v%s%s", strings.Repeat("  ", depth), s.Name(),
			s.EndTime().Sub(s.StartTime()).Round(10*time.Microsecond), attrs(s.Attributes()), status(s)))
		for _, ev := range s.Events() {
			if ev.Name == "decision" { // one per host tried, with its plan
				lines = append(lines, fmt.Sprintf("%s(event) decision%s", strings.Repeat("  ", depth+1), attrs(ev.Attributes)))
			}
		}
		kids := children[s.SpanContext().SpanID().String()]
		byStart(kids)
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	byStart(roots)
	for _, r := range roots {
		walk(r, 0)
	}
	return lines
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
