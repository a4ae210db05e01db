package tracing

import (
	"context"
	"database/sql/driver"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
)

// otherRewriter is a QueryRewriter that is not pgx's: what text it sends is unknown.
type otherRewriter struct{}

func (otherRewriter) RewriteQuery(_ context.Context, _ *pgx.Conn, sql string, args []any) (string, []any, error) {
	return sql, args, nil
}

// namedValues returns args as database/sql hands them to the driver: pgx's stdlib checks no
// value, so they come as given.
func namedValues(args []any) []driver.NamedValue {
	nv := make([]driver.NamedValue, len(args))
	for i, a := range args {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	return nv
}

func TestParameterized(t *testing.T) {
	const password = "alter role r password 'secret'"
	type call struct {
		query bool // a query, else an exec
		args  []any
	}
	exec := func(args ...any) call { return call{false, args} }
	query := func(args ...any) call { return call{true, args} }
	for _, tt := range []struct {
		text  string
		calls []call
		want  bool
	}{
		// Options only: no value, whatever the text.
		{password, []call{exec(), query()}, false},
		{password, []call{
			exec(pgx.QueryExecModeSimpleProtocol), query(pgx.QueryExecModeSimpleProtocol),
			exec(pgx.QueryExecModeExec), exec(pgx.QueryExecModeCacheStatement),
			exec(pgx.QueryExecModeCacheDescribe), exec(pgx.QueryExecModeDescribeExec),
			query(pgx.QueryResultFormats{1}), query(pgx.QueryResultFormatsByOID{25: 1}),
			query(pgx.QueryResultFormats{0}, pgx.QueryExecModeSimpleProtocol, pgx.QueryResultFormatsByOID{}),
			exec(pgx.NamedArgs{}), exec(pgx.StrictNamedArgs{}), exec(pgx.NamedArgs{"a": 1}),
			query(pgx.NamedArgs{}), exec(pgx.QueryExecModeSimpleProtocol, pgx.NamedArgs{}),
			exec(otherRewriter{}), exec(pgx.StructArgs(nil)),
		}, false},
		{"select $1", []call{
			exec(pgx.QueryExecModeSimpleProtocol), query(pgx.QueryResultFormats{1}),
			query(pgx.QueryResultFormatsByOID{}), exec(pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol),
		}, false},
		// Values filling the placeholders: parameterized, options or not.
		{"select $1::text", []call{
			exec("v"), query("v"), exec(nil), // NULL is a value
			exec(pgx.QueryExecModeSimpleProtocol, "v"), query(pgx.QueryExecModeSimpleProtocol, "v"),
			query(pgx.QueryResultFormats{1}, "v"), query(pgx.QueryResultFormatsByOID{}, pgx.QueryExecModeExec, "v"),
			exec("v", pgx.QueryExecModeExec), // after a value, pgx takes an option for a value too
		}, true},
		{"select $2, $1, 'lit'", []call{exec(1, 2), query(pgx.QueryExecModeSimpleProtocol, 1, 2), exec(1, 2, 3)}, true},
		{"update t set a = 'x' where id = $1; select $2", []call{exec(1, 2)}, true},
		// Exec takes result formats for values.
		{"select $1::int2[]", []call{exec(pgx.QueryResultFormats{1})}, true},
		{"select $1::int2[]", []call{query(pgx.QueryResultFormats{1})}, false},
		// Placeholders not all filled.
		{"select $1, $2", []call{exec(1), exec(pgx.QueryExecModeSimpleProtocol, 1), query(pgx.QueryResultFormats{}, 1)}, false},
		{"select $0", []call{exec(1)}, false},
		// Values but no placeholder: not parameterized.
		{password, []call{exec("x"), query("x"), exec(pgx.QueryExecModeSimpleProtocol, "x")}, false},
		{"select '$1' -- $1\n/* $1 */, $$ $1 $$, \"$1\"", []call{exec(1), query(1)}, false},
		{"prepare p(text) as select $1 || 'secret'", []call{exec("x"), exec(pgx.QueryExecModeSimpleProtocol, "x")}, false},
		{"create function f(text) returns text return $1 || 'secret'", []call{exec("x")}, false},
		{"do $$ begin perform $1; end $$", []call{exec("x")}, false},
		// Named arguments: the rewrite decides.
		{"select @a::text, 'lit'", []call{
			exec(pgx.NamedArgs{"a": "v"}), query(pgx.NamedArgs{"a": "v"}),
			exec(pgx.NamedArgs{}), // @a becomes $1, NULL
			exec(pgx.StrictNamedArgs{"a": "v"}), exec(pgx.QueryExecModeSimpleProtocol, pgx.NamedArgs{"a": "v"}),
			query(pgx.QueryResultFormats{1}, pgx.StrictNamedArgs{"a": "v"}),
			exec(pgx.StructArgs(struct {
				A string `db:"a"`
			}{"v"})),
		}, true},
		{"select @a::text", []call{
			exec(pgx.StrictNamedArgs{"b": "v"}), // the rewrite fails
			exec(pgx.StrictNamedArgs{"a": "v", "b": "w"}),
			exec(otherRewriter{}), exec(pgx.StructArgs(1)),
		}, false},
		{password, []call{exec(pgx.NamedArgs{"a": "v"}), exec(pgx.NamedArgs{"a": "v"}, "x")}, false},
		{"select $1", []call{exec(pgx.NamedArgs{"a": "v"}, "x")}, false}, // pgx drops the values after it
		{"select '@a', \"@a\" -- @a\n/* @a */, $$ @a $$", []call{exec(pgx.NamedArgs{"a": "v"})}, false},
		{"prepare p(text) as select @a", []call{exec(pgx.NamedArgs{"a": "v"})}, false},
		// pgx finds @b (its lexer reads the continued E'' string as two strings, the second
		// standard) and makes a value that fills $1; PostgreSQL reads @b inside the literal.
		{"select E'a'\n'\\'@b', $1", []call{exec(pgx.NamedArgs{"b": "v"}), exec(pgx.NamedArgs{})}, false},
		{"select E'a'\n'b', @b", []call{exec(pgx.NamedArgs{"b": "v"})}, true},
		{"select a@b, @_c, x @d", []call{exec(pgx.NamedArgs{})}, true},
		{"select @ b, @1", []call{exec(pgx.NamedArgs{})}, false},
	} {
		_, need := describeQuery(tt.text)
		for _, c := range tt.calls {
			opts := execOptions
			if c.query {
				opts = queryOptions
			}
			nv := namedValues(c.args)
			if got := parameterized(tt.text, need, len(nv), func(i int) any { return nv[i].Value }, opts); got != tt.want {
				kind := "exec"
				if c.query {
					kind = "query"
				}
				t.Errorf("%s %q with %s: parameterized %v, want %v", kind, tt.text, fmt.Sprintf("%#v", c.args), got, tt.want)
			}
		}
	}
}

// A query queued in a batch takes only a QueryRewriter as an option.
func TestParameterizedBatch(t *testing.T) {
	for _, tt := range []struct {
		text string
		args []any
		want bool
	}{
		{"select $1", []any{pgx.QueryExecModeSimpleProtocol}, true}, // a value in a batch
		{"select $1", []any{pgx.QueryResultFormats{1}}, true},
		{"select $1", []any{pgx.NamedArgs{}}, false},
		{"select @a", []any{pgx.NamedArgs{"a": 1}}, true},
		{"select 'x'", []any{pgx.QueryExecModeSimpleProtocol}, false},
		{"select $1", []any{1}, true},
	} {
		_, need := describeQuery(tt.text)
		if got := parameterized(tt.text, need, len(tt.args), func(i int) any { return tt.args[i] }, batchOptions); got != tt.want {
			t.Errorf("batch query %q with %#v: parameterized %v, want %v", tt.text, tt.args, got, tt.want)
		}
	}
}
