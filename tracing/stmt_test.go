package tracing

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// queryText returns db.query.text of s, or "".
func queryText(s sdktrace.ReadOnlySpan) string {
	for _, kv := range s.Attributes() {
		if kv.Key == semconv.DBQueryTextKey {
			return kv.Value.AsString()
		}
	}
	return ""
}

// What a text gives is remembered for a bounded number of texts; the others are worked out at
// each call, with the same result. A text whose placeholders the call's values fill is recorded
// as written, the same text without values with its literals replaced.
func TestStatementCache(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := NewStatements(StatementConfig{TracerProvider: tp, Database: testDB, QueryText: true})
	db := sql.OpenDB(fakeConnector{func(c driver.Conn) driver.Conn { return s.WrapConn(c, testHost, testPort) }})
	defer db.Close()
	ctx := context.Background()
	const n = maxCachedStatements + 10
	for round := range 2 {
		for i := range n {
			if err := db.QueryRowContext(ctx, fmt.Sprintf("select %d", i)).Scan(new(int)); err != nil {
				t.Fatal(err)
			}
		}
		for i, sp := range rec.Ended()[round*n:] {
			if got, want := queryText(sp), "select ?"; got != want || sp.Name() != "SELECT" {
				t.Fatalf("round %d, text %d: span %q, db.query.text %q; want SELECT, %q", round, i, sp.Name(), got, want)
			}
		}
	}
	srv := s.server(testHost, testPort)
	cached := 0
	srv.texts.Range(func(any, any) bool { cached++; return true })
	if cached != maxCachedStatements {
		t.Errorf("%d texts remembered, want %d", cached, maxCachedStatements)
	}

	const text = "select 'a' = $1"
	for _, args := range [][]any{{"a"}, nil} {
		db.QueryRowContext(ctx, text, args...).Scan(new(int))
	}
	ended := rec.Ended()
	if got := []string{queryText(ended[len(ended)-2]), queryText(ended[len(ended)-1])}; got[0] != text || got[1] != "select ? = $1" {
		t.Errorf("db.query.text %q, want %q with a value for $1 and %q without", got, text, "select ? = $1")
	}
	const literal = "select 'a'"
	for _, args := range [][]any{{"a"}, nil} {
		db.QueryRowContext(ctx, literal, args...).Scan(new(int))
	}
	ended = rec.Ended()
	if got := []string{queryText(ended[len(ended)-2]), queryText(ended[len(ended)-1])}; got[0] != "select ?" || got[1] != "select ?" {
		t.Errorf("db.query.text %q, want %q both times (no placeholder for the value)", got, "select ?")
	}
}
