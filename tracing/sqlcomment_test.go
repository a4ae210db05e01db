package tracing

import (
	"database/sql/driver"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"
)

// Where the sqlcommenter comment goes in a text, and which texts are left as written.
func TestWithSQLComment(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	const c = "/*traceparent='00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'*/"
	for _, tt := range []struct{ in, want string }{
		{"select 1", "select 1 " + c},
		{"select 1 ", "select 1 " + c},
		{"select 1;", "select 1 " + c + ";"},
		{"select 1 ;\n", "select 1 " + c + ";\n"},
		{"select 1; select 2", "select 1; select 2 " + c},
		{"select 1; select 2;", "select 1; select 2 " + c + ";"},
		// A line comment at the end would swallow the comment: a newline first.
		{"select 1 -- the end", "select 1 -- the end\n" + c},
		{"select 1; -- done", "select 1; -- done\n" + c},
		{"select 1 -- x\n;", "select 1 -- x\n" + c + ";"},
		{"-- name: One :one\nselect 1", "-- name: One :one\nselect 1 " + c},
		// "--" inside a literal of the last line: a newline, which changes nothing there either.
		{"select '--'", "select '--'\n" + c},
		{"select ';'", "select ';' " + c},
		{"select $$ a; $$", "select $$ a; $$ " + c},
		// Left as written.
		{"", ""},
		{"   ", "   "},
		{"-- only a comment", "-- only a comment"},
		{"stmt_name", "stmt_name"},
		{"select 'unterminated", "select 'unterminated"},
		{"select 1 /* open", "select 1 /* open"},
		{"select $$ open", "select $$ open"},
		{"select 1 /*traceparent='00-aa-bb-01'*/", "select 1 /*traceparent='00-aa-bb-01'*/"},
		{"select 1 /* mine */;", "select 1 /* mine */;"},
	} {
		got, ok := withSQLComment(tt.in, sc)
		if got != tt.want || ok != (tt.in != tt.want) {
			t.Errorf("%q: %q, %v; want %q", tt.in, got, ok, tt.want)
		}
	}
}

// The options at the front of a call's arguments, as pgx's Conn.Exec and Conn.Query take them.
func TestLeadingOptions(t *testing.T) {
	nv := func(vs ...any) []driver.NamedValue {
		out := make([]driver.NamedValue, len(vs))
		for i, v := range vs {
			out[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
		}
		return out
	}
	for _, tt := range []struct {
		args     []driver.NamedValue
		exec     bool
		n        int
		mode     pgx.QueryExecMode
		rewriter bool
	}{
		{nil, true, 0, 0, false},
		{nv(1), false, 0, 0, false},
		{nv(pgx.QueryExecModeExec, 1), true, 1, pgx.QueryExecModeExec, false},
		{nv(pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol), false, 2, pgx.QueryExecModeSimpleProtocol, false},
		{nv(pgx.QueryResultFormats{1}, pgx.QueryExecModeExec), false, 2, pgx.QueryExecModeExec, false},
		{nv(pgx.QueryResultFormats{1}, pgx.QueryExecModeExec), true, 0, 0, false}, // Exec: a value
		{nv(pgx.NamedArgs{"a": 1}), true, 1, 0, true},
	} {
		n, mode, rw := leadingOptions(tt.args, tt.exec)
		if n != tt.n || mode != tt.mode || rw != tt.rewriter {
			t.Errorf("%v (exec %v): %d, %v, %v; want %d, %v, %v", tt.args, tt.exec, n, mode, rw, tt.n, tt.mode, tt.rewriter)
		}
	}
}
