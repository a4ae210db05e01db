package tracing

import (
	"database/sql/driver"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"
)

// SQLCommentMode says which statements StatementConfig.SQLComment comments. A commented
// statement carries the W3C trace context of its span in a sqlcommenter comment
// (https://google.github.io/sqlcommenter/spec/), appended to its text:
//
//	select note from t where id = $1 /*traceparent='00-<trace id>-<span id>-<flags>'*/
//
// The server shows it where it shows the text: pg_stat_activity.query, the log's %q/statement
// lines, auto_explain, current_query(). Only traceparent is written (no tracestate), and only for
// a sampled span: an unsampled one is never exported, its trace could not be found.
//
// The comment goes at the end of the text, before a final ';' that only white space follows, on
// a new line when the last line of the text holds "--" (a line comment would swallow it). A
// text is sent as written when the comment could change what it means or is not wanted there: a
// text that ends inside a quoted token or an unclosed /* comment, one that ends with a block
// comment already (another commenter's: the specification says not to comment a commented
// statement; a comment elsewhere in the text, such as sqlc's leading "-- name: ...", does not
// stop it), one that is a single word (maybe the name of a statement prepared on the pgx
// connection, which pgx looks up by that text), an empty one.
//
// Prepared statements (DB.Prepare, Conn.PrepareContext) are not commented: the server shows the
// prepared text for every execution, which would name the span of the prepare, not of the
// execution. BEGIN, COMMIT, ROLLBACK and PING have no text.
//
// What it costs: pgx keys its statement cache (QueryExecModeCacheStatement, the default) and its
// description cache (QueryExecModeCacheDescribe) by the text; a text made unique by each call's
// comment would be prepared anew at every call (one more round trip), fill the cache with
// statements used once, and keep up to the cache's capacity (512) of them prepared on the server
// per connection. See the modes.
type SQLCommentMode uint8

const (
	// SQLCommentOff sends every text as written.
	SQLCommentOff SQLCommentMode = iota
	// SQLCommentUncached comments the statements whose text pgx sends to the server at every
	// call anyway, and only them: those run with QueryExecModeSimpleProtocol,
	// QueryExecModeExec or QueryExecModeDescribeExec (as the call's first arguments or the
	// connection's default_query_exec_mode say), and every exec without values (pgx runs it
	// with the simple protocol). A query run from pgx's statement or description cache is sent
	// as written. It costs the comment's bytes and nothing else: no prepare, no round trip.
	SQLCommentUncached
	// SQLCommentAll comments every exec and query. Those pgx would run from its statement or
	// description cache run with QueryExecModeDescribeExec instead: the unnamed statement is
	// parsed and described, then executed, two round trips where a cached statement takes one,
	// and a parse and plan on the server at every call, but pgx's caches and the server's
	// prepared statements stay as they were. DescribeExec encodes the values as the cached
	// modes do (the parameter types come from the server). Behind a pooler that may move a
	// session between transactions (pgbouncer's pool_mode=transaction), the describe and the
	// execution of a statement outside a transaction may land on different servers.
	SQLCommentAll
)

// sqlComment returns the text and arguments a call of st (an exec when exec is set, else a
// query) sends with its span c: query and args as they are unless cfg.SQLComment comments it.
func (ic *interceptor) sqlComment(c *call, query string, args []driver.NamedValue, exec bool) (string, []driver.NamedValue) {
	cfg := &ic.s.cfg
	if cfg.SQLComment == SQLCommentOff || !c.span.SpanContext().IsSampled() {
		return query, args
	}
	n, mode, rewriter := leadingOptions(args, exec)
	if mode == 0 {
		mode = cfg.DefaultQueryExecMode
	}
	if exec && !rewriter && n == len(args) {
		mode = pgx.QueryExecModeSimpleProtocol // pgx's Conn.exec without values
	}
	cached := mode == 0 || mode == pgx.QueryExecModeCacheStatement || mode == pgx.QueryExecModeCacheDescribe
	if cached && cfg.SQLComment != SQLCommentAll {
		return query, args
	}
	text, ok := withSQLComment(query, c.span.SpanContext())
	if !ok {
		return query, args
	}
	if cached {
		// After the call's own options: pgx takes the last QueryExecMode it finds there.
		out := make([]driver.NamedValue, 0, len(args)+1)
		out = append(out, args[:n]...)
		out = append(out, driver.NamedValue{Value: pgx.QueryExecModeDescribeExec})
		out = append(out, args[n:]...)
		for i := range out {
			out[i].Ordinal = i + 1
		}
		args = out
	}
	return text, args
}

// leadingOptions returns how many of args are pgx options at their front (those of Conn.Exec
// when exec is set, else of Conn.Query), the last QueryExecMode among them (0 if none), and
// whether a QueryRewriter is among them.
func leadingOptions(args []driver.NamedValue, exec bool) (n int, mode pgx.QueryExecMode, rewriter bool) {
	for _, a := range args {
		switch v := a.Value.(type) {
		case pgx.QueryExecMode:
			mode = v
		case pgx.QueryRewriter:
			rewriter = true
		case pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
			if exec {
				return n, mode, rewriter
			}
		default:
			return n, mode, rewriter
		}
		n++
	}
	return n, mode, rewriter
}

// withSQLComment returns text with the sqlcommenter comment of sc, and false when text is not
// to be commented (see SQLCommentMode).
func withSQLComment(text string, sc trace.SpanContext) (string, bool) {
	at, newline, ok := sqlCommentPlace(text)
	if !ok {
		return text, false
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	var b strings.Builder
	b.Grow(len(text) + 72)
	b.WriteString(text[:at])
	if newline {
		b.WriteByte('\n')
	} else if at > 0 && !isSpace(text[at-1]) {
		b.WriteByte(' ')
	}
	b.WriteString("/*traceparent='00-")
	b.WriteString(tid.String())
	b.WriteByte('-')
	b.WriteString(sid.String())
	b.WriteByte('-')
	const hexDigits = "0123456789abcdef"
	f := byte(sc.TraceFlags())
	b.WriteByte(hexDigits[f>>4])
	b.WriteByte(hexDigits[f&0xf])
	b.WriteString("'*/")
	b.WriteString(text[at:])
	return b.String(), true
}

// sqlCommentPlace returns where in text the comment goes, whether a newline must come first,
// and false when the text is not to be commented.
func sqlCommentPlace(text string) (at int, newline, ok bool) {
	sc := sqlScanner{s: text}
	tokens := 0
	lastKind, lastStart := tokEOF, 0
	for {
		k, a, _ := sc.next()
		if k == tokEOF {
			break
		}
		tokens++
		lastKind, lastStart = k, a
	}
	if sc.unterminated || tokens < 2 {
		return 0, false, false
	}
	at = len(text)
	if lastKind == tokSemicolon && strings.TrimLeft(text[lastStart+1:], " \t\n\r\f\v") == "" {
		at = lastStart
	}
	before := text[:at]
	if strings.HasSuffix(strings.TrimRight(before, " \t\n\r\f\v"), "*/") {
		return 0, false, false
	}
	lastLine := before[strings.LastIndexByte(before, '\n')+1:]
	return at, strings.Contains(lastLine, "--"), true
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}
