package main

import (
	"os"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector/examples/internal/spancheck"
	"github.com/pgconnector/pgconnector/internal/harness"
	"github.com/pgconnector/pgconnector/tracing"
)

// The harness removes what it made (clusters, the initdb template) once the tests ran.
func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

// TestStatementSpans runs the example's statements under a span of the test and checks the
// spans: each a child of the test's span, with pgx's text ($n placeholders), no value recorded;
// a pgxpool.acquire span per pool call under the test's span, and the connector's connect spans
// (one per connection, not one more for pgx's own connect) under the acquire spans.
func TestStatementSpans(t *testing.T) {
	pg := harness.StartT(t, harness.Options{})
	tp, exp := spancheck.New(t)
	c, pool, err := open(t.Context(), pg.DSN(), tp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer pool.Close()

	ctx, parent := tp.Tracer("test").Start(t.Context(), "caller")
	names, err := work(ctx, pool)
	parent.End()
	pool.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{"alice", "bob", "carol", "dave"}) {
		t.Errorf("read back %v", names)
	}

	spans := exp.GetSpans()
	// A batch is one CLIENT span; its queries are INTERNAL spans under it.
	var batch tracetest.SpanStub
	var client, inBatch tracetest.SpanStubs
	for _, s := range spans {
		switch {
		case s.Name == tracing.SpanAcquire:
		case s.Name == "BATCH INSERT pgxpool_example_users":
			batch = s
			client = append(client, s)
		case s.SpanKind == trace.SpanKindInternal && s.Parent.SpanID() != parent.SpanContext().SpanID() && s.Parent.IsValid() && spancheck.Attr(s, "db.system.name") == "postgresql":
			inBatch = append(inBatch, s)
		default:
			client = append(client, s)
		}
	}
	if len(inBatch) != 2 {
		t.Errorf("%d spans under the batch, want its 2 queries", len(inBatch))
	}
	for _, s := range inBatch {
		if s.Parent.SpanID() != batch.SpanContext.SpanID() || s.Name != "INSERT pgxpool_example_users" {
			t.Errorf("batch query span %s under %v, want INSERT pgxpool_example_users under the batch span", s.Name, s.Parent.SpanID())
		}
	}
	stmts := spancheck.Under(t, client, parent.SpanContext(),
		spancheck.Stmt{Op: "CREATE", Text: `CREATE TABLE IF NOT EXISTS pgxpool_example_users \(name text PRIMARY KEY\)`},
		spancheck.Stmt{Op: "INSERT", Text: `INSERT INTO pgxpool_example_users \(name\) VALUES \(\$1\)`},
		spancheck.Stmt{Op: "BATCH INSERT", Summary: "BATCH INSERT pgxpool_example_users", Text: `INSERT INTO pgxpool_example_users \(name\) VALUES \(\$1\)`},
		spancheck.Stmt{Op: "COPY", Summary: "COPY pgxpool_example_users"},
		spancheck.Stmt{Op: "BEGIN", Text: `begin`},
		spancheck.Stmt{Op: "SELECT", Text: `SELECT name FROM pgxpool_example_users WHERE name <> \$1 ORDER BY name`},
		spancheck.Stmt{Op: "COMMIT", Text: `commit`},
		spancheck.Stmt{Op: "DROP", Text: `DROP TABLE pgxpool_example_users`},
	)
	t.Logf("statement spans:\n%s", spancheck.List(stmts))
	spancheck.NoValues(t, spans, "alice", "bob", "carol", "dave", "erin")
	// work's pool calls: CREATE, INSERT, the batch, the COPY, BeginFunc's Begin, the DROP.
	if acquires := spancheck.ConnectUnderAcquire(t, spans, parent.SpanContext()); len(acquires) != 6 {
		t.Errorf("%d %s spans under the caller's, want 6 (one per pool call)", len(acquires), tracing.SpanAcquire)
	}
	connects := spancheck.Named(spans, "postgresql.connect")
	startups := spancheck.Named(spans, "postgresql.startup")
	if len(connects) == 0 || len(connects) != len(startups) {
		t.Errorf("%d connect spans for %d startups: one per connection", len(connects), len(startups))
	}
}
