package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector/internal/harness"
)

// exampleService is the service.name of the examples/jaeger program.
const exampleService = "pgconnector-example"

// TestJaegerExample runs examples/jaeger as built (one request to GET /users, then flush and
// exit) against a harness PostgreSQL server and a harness Jaeger, and checks through Jaeger's
// query API that the request is one trace: the otelhttp server span as root and, under it, one
// postgresql.connect per query with its steps, the first probing with SSLRequest and the second
// using the remembered answer.
func TestJaegerExample(t *testing.T) {
	jaeger := harness.StartJaegerT(t) // may build Jaeger first: see the package comment
	pg := harness.StartT(t, harness.Options{})
	bin := buildExample(t, "github.com/pgconnector/pgconnector/examples/jaeger")

	since := time.Now().Add(-time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-once", "-listen", "127.0.0.1:0", "-otlp", jaeger.OTLPHTTPEndpoint())
	cmd.Env = append(environ(), "DATABASE_URL="+pg.DSN())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("examples/jaeger -once:\n%s", strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatalf("examples/jaeger -once: %v", err)
	}

	// The program flushed its spans before exiting; poll anyway, Jaeger stores them on its own time.
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	spans, err := jaeger.WaitForSpans(wctx, exampleService, since, func(spans []harness.Span) bool {
		n := 0
		for _, s := range spans {
			if s.Name == "postgresql.startup" {
				n++
			}
		}
		return n >= 2 && slices.ContainsFunc(spans, func(s harness.Span) bool { return s.Kind == trace.SpanKindServer })
	})
	if err != nil {
		t.Fatalf("%v\nspans:\n%s", err, dump(spans))
	}
	t.Logf("spans in Jaeger:\n%s", dump(spans))

	traces := map[string]bool{}
	for _, s := range spans {
		traces[s.TraceID] = true
	}
	if len(traces) != 1 {
		t.Fatalf("the request left %d traces, want 1:\n%s", len(traces), dump(spans))
	}
	byID := map[string]harness.Span{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}

	// The root: otelhttp's server span for the request.
	var roots []harness.Span
	for _, s := range spans {
		if s.ParentSpanID == "" {
			roots = append(roots, s)
		}
	}
	if len(roots) != 1 {
		t.Fatalf("want one root span, got %d:\n%s", len(roots), dump(spans))
	}
	root := roots[0]
	if root.Kind != trace.SpanKindServer || root.Name != "GET /users" {
		t.Errorf("root span %q of kind %v, want the SERVER span \"GET /users\"", root.Name, root.Kind)
	}
	wantAttrs(t, root, map[string]any{"http.request.method": "GET", "http.response.status_code": int64(200), "url.path": "/users"})
	for _, s := range spans {
		if s.Service != exampleService {
			t.Errorf("span %q of service %q, want %q", s.Name, s.Service, exampleService)
		}
		if s.ParentSpanID != "" {
			if _, ok := byID[s.ParentSpanID]; !ok {
				t.Errorf("span %q has parent %s, which is not in the trace", s.Name, s.ParentSpanID)
			}
		}
		if s.Status.Code == codes.Error {
			t.Errorf("span %q has status error: %s", s.Name, s.Status.Message)
		}
	}

	// Two queries with no idle connections kept: two connects, each under the request.
	connects := named(spans, "postgresql.connect")
	if len(connects) != 2 {
		t.Fatalf("want 2 postgresql.connect spans (one per query), got %d:\n%s", len(connects), dump(spans))
	}
	for i, c := range connects {
		t.Run(fmt.Sprintf("connect%d", i+1), func(t *testing.T) {
			if c.Kind != trace.SpanKindClient {
				t.Errorf("kind %v, want CLIENT", c.Kind)
			}
			if !descendsFrom(c, root, byID) {
				t.Errorf("not under the server span: ancestors %v", ancestors(c, byID))
			}
			wantAttrs(t, c, map[string]any{
				"db.system.name":        "postgresql",
				"server.address":        pg.Host,
				"server.port":           int64(pg.Port),
				"db.namespace":          pg.Database,
				"pgconnector.transport": "plain",
				"pgconnector.cache.hit": i > 0, // the first connect probes, the second uses its answer
			})
			children := childrenOf(c, spans)
			want := []string{"postgresql.tcp_connect", "postgresql.startup"}
			if i == 0 {
				// sslmode=prefer against a server without TLS: SSLRequest, 'N', plaintext on
				// the same socket.
				want = []string{"postgresql.tcp_connect", "postgresql.ssl_request", "postgresql.startup"}
			}
			for _, name := range want {
				if n := len(named(children, name)); n != 1 {
					t.Errorf("%d %s children, want 1 (children: %v)", n, name, spanNames(children))
				}
			}
			for _, name := range []string{"postgresql.ssl_request", "postgresql.tls_handshake", "postgresql.gssenc_request"} {
				if !slices.Contains(want, name) && len(named(children, name)) > 0 {
					t.Errorf("unexpected %s child (children: %v)", name, spanNames(children))
				}
			}
			for _, tcp := range named(children, "postgresql.tcp_connect") {
				wantAttrs(t, tcp, map[string]any{
					"server.address":       pg.Host,
					"network.peer.address": pg.Host,
					"network.peer.port":    int64(pg.Port),
					"network.transport":    "tcp",
				})
				if tcp.Kind != trace.SpanKindInternal {
					t.Errorf("%s: kind %v, want INTERNAL", tcp.Name, tcp.Kind)
				}
			}
			for _, st := range named(children, "postgresql.startup") {
				wantAttrs(t, st, map[string]any{"db.namespace": pg.Database, "pgconnector.method": "plain"})
				if tcp := named(children, "postgresql.tcp_connect"); len(tcp) == 1 && st.Start.Before(tcp[0].End) {
					t.Errorf("postgresql.startup starts before postgresql.tcp_connect ends")
				}
			}
			for _, ssl := range named(children, "postgresql.ssl_request") {
				wantAttrs(t, ssl, map[string]any{"pgconnector.ssl.answer": "N"})
			}
		})
	}
	// The handler's two statements: CLIENT spans under the request, one per query, each after
	// the connect that opened its connection, with the database conventions' attributes.
	// Each is named by its db.query.summary: the operation and the table.
	selects := named(spans, "SELECT pgconnector_example_users")
	if len(selects) != 2 {
		t.Fatalf("want 2 SELECT statement spans, got %d:\n%s", len(selects), dump(spans))
	}
	for i, s := range selects {
		if s.Kind != trace.SpanKindClient {
			t.Errorf("statement %d: kind %v, want CLIENT", i+1, s.Kind)
		}
		if !descendsFrom(s, root, byID) {
			t.Errorf("statement %d: not under the server span: ancestors %v", i+1, ancestors(s, byID))
		}
		wantAttrs(t, s, map[string]any{
			"db.system.name":     "postgresql",
			"db.namespace":       pg.Database,
			"server.address":     pg.Host,
			"server.port":        int64(pg.Port),
			"db.operation.name":  "SELECT",
			"db.query.summary":   "SELECT pgconnector_example_users",
			"db.collection.name": "pgconnector_example_users",
		})
		if q, _ := s.Attributes["db.query.text"].(string); !strings.HasPrefix(q, "SELECT ") {
			t.Errorf("statement %d: db.query.text = %q", i+1, q)
		}
		if i < len(connects) && s.Start.Before(connects[i].End) {
			t.Errorf("statement %d starts before its connect ends", i+1)
		}
	}

	if len(connects) == 2 && !connects[0].End.Before(connects[1].Start) && !connects[0].End.Equal(connects[1].Start) {
		t.Errorf("the connects overlap; the handler runs its queries one after the other")
	}
}

// buildExample builds the main package pkg into the test's temporary directory.
func buildExample(t *testing.T, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// environ is this process's environment without the OpenTelemetry SDK variables, so that the
// program's flags alone say where its spans go.
func environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			env = append(env, kv)
		}
	}
	return env
}

func named(spans []harness.Span, name string) []harness.Span {
	var out []harness.Span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func childrenOf(parent harness.Span, spans []harness.Span) []harness.Span {
	var out []harness.Span
	for _, s := range spans {
		if s.ParentSpanID == parent.SpanID {
			out = append(out, s)
		}
	}
	return out
}

func spanNames(spans []harness.Span) []string {
	names := make([]string, len(spans))
	for i, s := range spans {
		names[i] = s.Name
	}
	return names
}

// ancestors returns the names of s's ancestors, nearest first.
func ancestors(s harness.Span, byID map[string]harness.Span) []string {
	var names []string
	for p, ok := byID[s.ParentSpanID]; ok && len(names) < 64; p, ok = byID[p.ParentSpanID] {
		names = append(names, p.Name)
	}
	return names
}

// descendsFrom reports whether root is an ancestor of s (its parent, or the parent's, ...).
func descendsFrom(s, root harness.Span, byID map[string]harness.Span) bool {
	for i, p := 0, s.ParentSpanID; p != "" && i < 64; i++ {
		if p == root.SpanID {
			return true
		}
		p = byID[p].ParentSpanID
	}
	return false
}

func wantAttrs(t *testing.T, s harness.Span, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if got, ok := s.Attributes[k]; !ok {
			t.Errorf("%s: no attribute %s (want %v)", s.Name, k, v)
		} else if got != v {
			t.Errorf("%s: %s = %v (%T), want %v (%T)", s.Name, k, got, got, v, v)
		}
	}
}

// dump formats spans one per line, indented under their parents when those are present.
func dump(spans []harness.Span) string {
	byID := map[string]harness.Span{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s%s [%v] span=%s parent=%s %v\n", strings.Repeat("  ", len(ancestors(s, byID))),
			s.Name, s.Kind, s.SpanID, s.ParentSpanID, s.Attributes)
	}
	return b.String()
}
