package tracing

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Whether a call's text is parameterized decides how db.query.text records it (semantic
// conventions, "Sanitization of db.query.text"): parameterized text as written, anything else
// with its literals replaced. The arguments are read as pgx reads them: the options it takes
// from their front are not values. pgx's database/sql driver (pgx/v5/stdlib) hands them on
// unchanged.

// pgxOptions is which of pgx's option types a call takes from the front of its arguments.
type pgxOptions uint8

const (
	optExecMode      pgxOptions = 1 << iota // QueryExecMode
	optResultFormats                        // QueryResultFormats, QueryResultFormatsByOID
	optRewriter                             // QueryRewriter
)

const (
	// execOptions are those of Conn.Exec, which takes result formats for values.
	execOptions = optExecMode | optRewriter
	// queryOptions are those of Conn.Query (and, since a pgx tracer cannot tell them apart, of
	// any call a PgxTracer sees start).
	queryOptions = optExecMode | optResultFormats | optRewriter
	// batchOptions are those of a query queued in a batch (Batch.Queue).
	batchOptions = optRewriter
)

// parameterized reports whether a call of text, whose $n placeholders need need values (see
// describeQuery), with n arguments (arg(i) is the i-th), is parameterized: its placeholders are
// all filled by values among its arguments. opts are the options the call takes.
//
// The options pgx takes from the front of the arguments are not values (when a QueryRewriter is
// among them, the last one is used). With QueryExecModeSimpleProtocol pgx interpolates the
// values into the text it sends; the text as written, with its $n, holds none of them.
//
// A NamedArgs or StrictNamedArgs rewriter turns each @name of the text into $n and makes the
// values from its map, dropping the arguments after it: the call is parameterized when the text
// has @name placeholders where PostgreSQL reads code, and the rewritten text has placeholders
// the rewrite fills (a StrictNamedArgs that does not match the text fails the call). pgx's own
// lexer does not know every form of literal (a string continued over a newline in E'...' mode):
// an @name it finds inside one does not make the call parameterized. Any other rewriter sends a
// text this cannot know: not parameterized.
func parameterized(text string, need, n int, arg func(i int) any, opts pgxOptions) bool {
	values, rewriter := n, pgx.QueryRewriter(nil)
options:
	for i := 0; i < n; i++ {
		switch v := arg(i).(type) {
		case pgx.QueryExecMode:
			if opts&optExecMode == 0 {
				break options
			}
		case pgx.QueryRewriter:
			if opts&optRewriter == 0 {
				break options
			}
			rewriter = v
		case pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
			if opts&optResultFormats == 0 {
				break options
			}
		default:
			break options
		}
		values--
	}
	switch rewriter.(type) {
	case nil:
		return need > 0 && values >= need
	case pgx.NamedArgs, pgx.StrictNamedArgs:
		if !namedPlaceholders(text) {
			return false // pgx's values, if any, are for @names it found where PostgreSQL reads none
		}
		rewritten, newArgs, err := rewriter.RewriteQuery(context.Background(), nil, text, nil)
		if err != nil {
			return false
		}
		_, need := describeQuery(rewritten)
		return need > 0 && len(newArgs) >= need
	default:
		return false
	}
}

// namedPlaceholders reports whether text has an @name placeholder (pgx's: '@' then an ASCII
// letter or '_') outside literals, quoted identifiers and comments.
func namedPlaceholders(text string) bool {
	sc := sqlScanner{s: text}
	at := -1 // where a name right after '@' would start
	for {
		k, a, _ := sc.next()
		switch {
		case k == tokEOF:
			return false
		case k == tokWord && a == at && (isLetter(text[a]) || text[a] == '_'):
			return true
		}
		at = -1
		if k == tokOther && text[a] == '@' {
			at = a + 1
		}
	}
}
