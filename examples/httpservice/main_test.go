package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/internal/harness"
)

// stdoutSpan is the part of a span as the stdout exporter writes it that the test reads.
type stdoutSpan struct {
	Name        string
	SpanKind    int
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
}

// TestRequestTraceHoldsConnect serves one request against a real server and reads the spans the
// stdout exporter wrote: the server span is the root, and the connect the request caused is its
// child in the same trace.
func TestRequestTraceHoldsConnect(t *testing.T) {
	pg := harness.StartT(t, harness.Options{})
	ctx := context.Background()
	var out bytes.Buffer
	tp, err := newTracerProvider(ctx, "", &out)
	if err != nil {
		t.Fatal(err)
	}
	connector, err := pgconnector.New(pg.DSN(), pgconnector.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	db := connector.OpenDB() // with the pool metrics (db.Stats) beside the connect metrics
	defer db.Close()

	srv := httptest.NewServer(newHandler(db, tp)) // 127.0.0.1
	resp, err := http.Get(srv.URL + "/now")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	srv.Close() // waits for the handler, and so the server span, to end
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /now: %s %s", resp.Status, body)
	}
	if _, err := time.Parse(time.RFC3339Nano, string(bytes.TrimSpace(body))); err != nil {
		t.Errorf("GET /now answered %q: %v", body, err)
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	byName := map[string][]stdoutSpan{}
	dec := json.NewDecoder(bufio.NewReader(&out))
	for dec.More() {
		var s stdoutSpan
		if err := dec.Decode(&s); err != nil {
			t.Fatalf("stdout exporter output: %v", err)
		}
		byName[s.Name] = append(byName[s.Name], s)
	}
	servers, connects := byName["GET /now"], byName["postgresql.connect"]
	if len(servers) != 1 || len(connects) != 1 {
		t.Fatalf("want one span GET /now and one postgresql.connect, got %d and %d (all: %v)", len(servers), len(connects), names(byName))
	}
	root, connect := servers[0], connects[0]
	if root.SpanKind != 2 || root.Parent.SpanID != "0000000000000000" {
		t.Errorf("GET /now: kind %d, parent %s; want a root SERVER span (kind 2)", root.SpanKind, root.Parent.SpanID)
	}
	if connect.SpanContext.TraceID != root.SpanContext.TraceID || connect.Parent.SpanID != root.SpanContext.SpanID {
		t.Errorf("postgresql.connect is in trace %s under %s; want trace %s under the server span %s",
			connect.SpanContext.TraceID, connect.Parent.SpanID, root.SpanContext.TraceID, root.SpanContext.SpanID)
	}
	if len(byName["postgresql.startup"]) != 1 {
		t.Errorf("want one postgresql.startup span, got %v", names(byName))
	}
}

func names(m map[string][]stdoutSpan) map[string]int {
	n := map[string]int{}
	for k, v := range m {
		n[k] = len(v)
	}
	return n
}
