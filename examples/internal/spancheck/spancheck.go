// Package spancheck holds the assertions the integration examples' tests make about the spans the
// connector recorded for the statements an ORM or query library ran.
package spancheck

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector/tracing"
)

// New returns a TracerProvider that hands every ended span at once to the returned in-memory
// exporter. It is shut down when the test ends.
func New(t testing.TB) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	return tp, exp
}

// Stmt is a statement span expected under the caller's span.
type Stmt struct {
	Op string // db.operation.name
	// Summary is db.query.summary (operation and tables, as "SELECT users"), which is also the
	// span's name; "" to accept any. A span without a summary (BEGIN, COMMIT, ...) is named Op.
	Summary string
	Text    string // a regular expression (. matches newlines too) that db.query.text must match in full; "" for none (BEGIN, COMMIT, ...)
	// Error is error.type of a statement that fails (a SQLSTATE); "" for one that succeeds.
	Error string
}

// Statements returns the statement spans among spans (the connector's spans other than a connect
// and its steps, and a pgxpool's acquire spans), by start time.
func Statements(spans tracetest.SpanStubs) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.InstrumentationScope.Name == tracing.ScopeName && !strings.HasPrefix(s.Name, "postgresql.") && s.Name != tracing.SpanAcquire {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].StartTime.Before(out[j].StartTime) })
	return out
}

// Named returns the spans called name.
func Named(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Attr returns the value of attribute key of s, "" when it has none.
func Attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// Under checks the statement spans among spans: every one is a CLIENT span of PostgreSQL and a
// direct child of parent, and want is among them in this order (other statements may come
// between). It returns them.
func Under(t testing.TB, spans tracetest.SpanStubs, parent trace.SpanContext, want ...Stmt) []tracetest.SpanStub {
	t.Helper()
	stmts := Statements(spans)
	for _, s := range stmts {
		if s.Parent.SpanID() != parent.SpanID() || s.SpanContext.TraceID() != parent.TraceID() {
			t.Errorf("statement span %s %q: parent %s in trace %s; want the caller's span %s in trace %s",
				s.Name, Attr(s, "db.query.text"), s.Parent.SpanID(), s.SpanContext.TraceID(), parent.SpanID(), parent.TraceID())
		}
		if s.SpanKind != trace.SpanKindClient || Attr(s, "db.system.name") != "postgresql" {
			t.Errorf("statement span %s: kind %v, db.system.name %q; want CLIENT, postgresql", s.Name, s.SpanKind, Attr(s, "db.system.name"))
		}
		if want := name(s); s.Name != want {
			t.Errorf("statement span %s: want it named %q (db.query.summary, else db.operation.name)", s.Name, want)
		}
	}
	i := 0
	for _, s := range stmts {
		if i < len(want) && want[i].matches(s) {
			i++
		}
	}
	if i < len(want) {
		t.Errorf("no statement span %s %q error.type=%q (in this order after the ones before it); the statement spans:\n%s", want[i].Op, want[i].Text, want[i].Error, List(stmts))
	}
	return stmts
}

// name returns the name of a statement span: its db.query.summary, else its db.operation.name,
// else "postgresql".
func name(s tracetest.SpanStub) string {
	for _, key := range []string{"db.query.summary", "db.operation.name"} {
		if v := Attr(s, key); v != "" {
			return v
		}
	}
	return "postgresql"
}

func (w Stmt) matches(s tracetest.SpanStub) bool {
	if Attr(s, "db.operation.name") != w.Op || Attr(s, "error.type") != w.Error ||
		w.Summary != "" && (Attr(s, "db.query.summary") != w.Summary || s.Name != w.Summary) {
		return false
	}
	text := Attr(s, "db.query.text")
	if w.Text == "" {
		return text == ""
	}
	return regexp.MustCompile(`(?s)^(?:` + w.Text + `)$`).MatchString(text)
}

// List formats statement spans one a line, for failure messages and logs.
func List(stmts []tracetest.SpanStub) string {
	var b strings.Builder
	for _, s := range stmts {
		fmt.Fprintf(&b, "\t%s %q", s.Name, Attr(s, "db.query.text"))
		if e := Attr(s, "error.type"); e != "" {
			fmt.Fprintf(&b, " error.type=%s", e)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// NoValues checks that none of values is in any attribute of any span or event: the values a
// program bound as parameters, or that an ORM wrote into its SQL as literals, are not recorded.
func NoValues(t testing.TB, spans tracetest.SpanStubs, values ...string) {
	t.Helper()
	for _, s := range spans {
		kvs := s.Attributes
		for _, ev := range s.Events {
			kvs = append(kvs, ev.Attributes...)
		}
		for _, kv := range kvs {
			for _, v := range values {
				if strings.Contains(kv.Value.Emit(), v) {
					t.Errorf("span %s: %s=%q holds the value %q", s.Name, kv.Key, kv.Value.Emit(), v)
				}
			}
		}
	}
}

// ConnectUnder checks that a postgresql.connect span, with its postgresql.startup step, is a
// child of parent: the connection the first statement needed was opened in the caller's trace.
func ConnectUnder(t testing.TB, spans tracetest.SpanStubs, parent trace.SpanContext) {
	t.Helper()
	for _, c := range Named(spans, "postgresql.connect") {
		if c.Parent.SpanID() != parent.SpanID() {
			continue
		}
		for _, st := range Named(spans, "postgresql.startup") {
			if st.Parent.SpanID() == c.SpanContext.SpanID() {
				return
			}
		}
		t.Errorf("postgresql.connect under the caller's span has no postgresql.startup step")
		return
	}
	t.Errorf("no postgresql.connect span under the caller's span %s (%d connect spans)", parent.SpanID(), len(Named(spans, "postgresql.connect")))
}

// ConnectUnderAcquire checks the spans of a pgxpool of the connector: a pgxpool.acquire span
// (kind INTERNAL, db.system.name postgresql) for the pool calls under parent, every
// postgresql.connect span a child of one of them, and at least one connect with its
// postgresql.startup step: a connection the pool opened for a call of the caller's was opened
// under that call's Acquire. It returns the acquire spans under parent.
func ConnectUnderAcquire(t testing.TB, spans tracetest.SpanStubs, parent trace.SpanContext) []tracetest.SpanStub {
	t.Helper()
	acquires := map[trace.SpanID]bool{}
	var out []tracetest.SpanStub
	for _, s := range Named(spans, tracing.SpanAcquire) {
		if s.Parent.SpanID() != parent.SpanID() || s.SpanContext.TraceID() != parent.TraceID() {
			t.Errorf("%s span under %s, not the caller's span %s", s.Name, s.Parent.SpanID(), parent.SpanID())
			continue
		}
		if s.SpanKind != trace.SpanKindInternal || Attr(s, "db.system.name") != "postgresql" {
			t.Errorf("%s span: kind %v, db.system.name %q; want INTERNAL, postgresql", s.Name, s.SpanKind, Attr(s, "db.system.name"))
		}
		acquires[s.SpanContext.SpanID()] = true
		out = append(out, s)
	}
	if len(out) == 0 {
		t.Errorf("no %s span under the caller's span %s", tracing.SpanAcquire, parent.SpanID())
		return nil
	}
	connects := Named(spans, "postgresql.connect")
	started := 0
	for _, c := range connects {
		if !acquires[c.Parent.SpanID()] {
			t.Errorf("postgresql.connect under %s, not under an acquire span of the caller's", c.Parent.SpanID())
			continue
		}
		for _, st := range Named(spans, "postgresql.startup") {
			if st.Parent.SpanID() == c.SpanContext.SpanID() {
				started++
				break
			}
		}
	}
	if started == 0 {
		t.Errorf("no postgresql.connect with a postgresql.startup step under an acquire span (%d connect spans)", len(connects))
	}
	return out
}
