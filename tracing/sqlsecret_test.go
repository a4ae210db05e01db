package tracing

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// The marks of the secret literal FuzzSecretLiteral embeds: a string literal's content is
// secretMark, fuzzed bytes, secretMark, fuzzed bytes, secretMark (so that a literal cut short or
// started late shows one), a number holds numberMark. Nothing else the generator writes holds
// either.
const (
	secretMark = "SeKrEt"
	numberMark = "7350981"
)

// secretGen builds statement texts around one secret literal, from the fuzzer's choices:
// every literal form ('...', N'...', E'...' with either quote escape, U&'...' with or without
// UESCAPE, B'...', X'...', dollar quotes with and without a tag, numbers, strings continued over
// a newline), nested in DO bodies, PREPARE, EXECUTE, CALL and function bodies, among comments,
// quoted and unicode identifiers, placeholders and decoy literals; or after a mistake, an
// unterminated comment or quoted identifier.
type secretGen struct {
	choices []byte
	i       int
	content string // the secret string literal's content, unescaped
	noise   string // fuzzed bytes for comments and quoted identifiers, without a mark
	placed  bool   // the secret literal is in the text
	need    int    // the highest $n written where it is a placeholder of the call
}

func (g *secretGen) pick(n int) int {
	if g.i >= len(g.choices) {
		return 0
	}
	c := int(g.choices[g.i]) % n
	g.i++
	return c
}

func (g *secretGen) one(options ...string) string { return options[g.pick(len(options))] }

// text returns one to three statements separated by ';'. The secret literal is in one of them.
func (g *secretGen) text() string {
	var b strings.Builder
	b.WriteString(g.leading())
	for n := 1 + g.pick(3); n > 0; n-- {
		b.WriteString(g.statement(0, true))
		if n > 1 || g.pick(2) == 0 {
			b.WriteString(g.sep() + ";" + g.sep())
		}
	}
	if !g.placed {
		b.WriteString(";" + g.sep() + "ALTER ROLE r PASSWORD" + g.sep() + g.secret())
	}
	if g.pick(8) == 0 {
		// A mistake: the text ends in an unterminated comment or quoted identifier. Nothing after
		// it may end it (a '"' or "*/" of the secret's content would): the secret would then be
		// no literal, by PostgreSQL's reading too.
		content, noise := g.content, g.noise
		g.content, g.noise = removeAll(content, `"`, "*/"), removeAll(noise, `"`, "*/")
		b.WriteString(g.sep() + g.one("/* ", "/* a /* b */ ", `"`, `ALTER ROLE "r `) + "PASSWORD" + g.sep() + g.secret())
		g.content, g.noise = content, noise
	}
	return b.String()
}

func (g *secretGen) leading() string {
	return g.one("", " ", "\n", "-- "+g.lineNoise()+"\n", "/* "+g.blockNoise()+" */ ")
}

// sep is what separates two tokens: white space or comments, never nothing.
func (g *secretGen) sep() string {
	switch g.pick(9) {
	case 0, 1:
		return " "
	case 2:
		return "\n"
	case 3:
		return "\t \r\n"
	case 4:
		return " /* " + g.blockNoise() + " */ "
	case 5:
		return " -- " + g.lineNoise() + "\n"
	case 6:
		return "/* a /* nested ' */ $$ */"
	case 7:
		return "\f"
	default:
		return " --'\n"
	}
}

// tight is what may follow an opening parenthesis or a comma: nothing too.
func (g *secretGen) tight() string {
	if g.pick(2) == 0 {
		return ""
	}
	return g.sep()
}

// statement returns one statement; counts tells whether its $n are placeholders of the call.
func (g *secretGen) statement(depth int, counts bool) string {
	kinds := 12
	if depth >= 3 {
		kinds = 4 // no more nesting
	}
	s := g.sep
	switch g.pick(kinds) {
	case 0:
		return "ALTER ROLE " + g.ident() + s() + "PASSWORD" + s() + g.expr(depth, counts)
	case 1:
		return "SELECT" + s() + g.expr(depth, counts) + "," + g.tight() + g.expr(depth, counts) + s() + "FROM" + s() + g.ident()
	case 2:
		return "INSERT INTO " + g.ident() + s() + "(a, b)" + s() + "VALUES" + s() + "(" + g.tight() +
			g.expr(depth, counts) + "," + g.tight() + g.expr(depth, counts) + ")"
	case 3:
		return "UPDATE " + g.ident() + s() + "SET" + s() + g.ident() + s() + "=" + s() + g.expr(depth, counts) +
			s() + "WHERE" + s() + "id" + s() + "=" + s() + g.expr(depth, counts)
	case 4:
		return "DO" + s() + g.one("", "LANGUAGE plpgsql"+s()) + g.body(depth)
	case 5: // p's parameters, not the call's
		return "PREPARE p" + g.one("", "(text, int)") + s() + "AS" + s() + g.statement(depth+1, false)
	case 6:
		return "EXECUTE p(" + g.tight() + g.expr(depth, counts) + g.one("", ", 1") + ")"
	case 7:
		return "CALL set_password(" + g.tight() + g.expr(depth, counts) + "," + g.tight() + g.expr(depth, counts) + ")"
	case 8:
		return "CREATE " + g.one("", "OR REPLACE ") + "FUNCTION f(text) RETURNS text LANGUAGE " +
			g.one("sql", "plpgsql") + s() + "AS" + s() + g.body(depth)
	case 9: // f's parameter, not the call's
		return "CREATE FUNCTION f(a text) RETURNS text LANGUAGE sql" + s() + "RETURN" + s() + "$1 ||" + s() + g.expr(depth, false)
	case 10:
		return "COMMENT ON ROLE " + g.ident() + " IS" + s() + g.expr(depth, counts)
	default:
		return "SET password_encryption =" + s() + g.expr(depth, counts)
	}
}

// body returns a DO or function body: statements quoted as one literal.
func (g *secretGen) body(depth int) string {
	var b strings.Builder
	b.WriteString(g.one("BEGIN ", "", "begin\n"))
	for n := 1 + g.pick(2); n > 0; n-- {
		b.WriteString(g.statement(depth+1, false) + ";" + g.sep())
	}
	b.WriteString(g.one("END", "", "end;"))
	return g.quote(b.String())
}

// quote returns s as a string literal of a form the choices pick.
func (g *secretGen) quote(s string) string {
	switch g.pick(5) {
	case 0:
		return "'" + strings.ReplaceAll(s, "'", "''") + "'"
	case 1:
		return g.one("E", "e") + "'" + escapeE(s, g.pick(2) == 0) + "'"
	case 2:
		return dollarQuote("", s)
	default:
		return dollarQuote(g.one("body", "q", "ü", "_1", "Tag9"), s)
	}
}

// expr returns an expression; a placeholder it writes counts when counts is set.
func (g *secretGen) expr(depth int, counts bool) string {
	if depth < 4 && !g.placed && g.pick(3) == 0 {
		return g.secret()
	}
	switch g.pick(12) {
	case 0, 1:
		return g.secret()
	case 2:
		return g.one("'x'", "42", "1.5", "$$y$$", "E'z'", "TRUE", "NULL", "B'1'", "'it''s'")
	case 3:
		return g.ident()
	case 4:
		n := 1 + g.pick(2)
		if counts {
			g.need = max(g.need, n)
		}
		return "$" + string(rune('0'+n))
	case 5:
		return "upper(" + g.tight() + g.expr(depth+1, counts) + ")"
	case 6:
		return g.expr(depth+1, counts) + "::text"
	case 7:
		return "interval" + g.sep() + g.secret()
	case 8:
		return "ARRAY[" + g.tight() + g.expr(depth+1, counts) + "," + g.tight() + g.expr(depth+1, counts) + "]"
	case 9:
		return "(" + g.tight() + "SELECT" + g.sep() + g.expr(depth+1, counts) + ")"
	case 10:
		return g.expr(depth+1, counts) + g.sep() + "||" + g.sep() + g.expr(depth+1, counts)
	default:
		return "quote_literal(" + g.tight() + g.secret() + ")"
	}
}

func (g *secretGen) ident() string {
	switch g.pick(8) {
	case 0:
		return `"` + strings.ReplaceAll(g.noise, `"`, `""`) + `"`
	case 1:
		return `"we""ird $$ ' -- id"`
	default:
		return g.one("r", "t", "tëst", "数据", "_x1", "a$b", "users", "ünï$")
	}
}

// lineNoise and blockNoise return the fuzzed noise fit for a comment.
func (g *secretGen) lineNoise() string {
	return strings.NewReplacer("\n", " ", "\r", " ").Replace(g.noise)
}

func (g *secretGen) blockNoise() string {
	return removeAll(g.noise, "/*", "*/")
}

// secret returns the secret literal, in a form the choices pick.
func (g *secretGen) secret() string {
	g.placed = true
	c := g.content
	switch g.pick(14) {
	case 0:
		return "'" + strings.ReplaceAll(c, "'", "''") + "'"
	case 1:
		return g.one("N", "n") + "'" + strings.ReplaceAll(c, "'", "''") + "'"
	case 2:
		return g.one("E", "e") + "'" + escapeE(c, g.pick(2) == 0) + "'"
	case 3:
		return g.one("U&", "u&") + "'" + escapeU(c, '\\') + "'"
	case 4:
		esc := "!#%~"[g.pick(4)]
		return "U&'" + escapeU(c, esc) + "'" + g.sep() + "UESCAPE" + g.sep() + "'" + string(esc) + "'"
	case 5:
		return g.one("B", "b") + "'" + strings.ReplaceAll(c, "'", "''") + "'"
	case 6:
		return g.one("X", "x") + "'" + strings.ReplaceAll(c, "'", "''") + "'"
	case 7:
		return dollarQuote("", c)
	case 8:
		return dollarQuote(g.one("q", "secret", "ü", "_", "T1"), c)
	case 9:
		return g.one(numberMark, numberMark+".25", "."+numberMark, numberMark+"e+5", numberMark+"E-3",
			"0x"+numberMark, numberMark+"_"+numberMark, "-"+numberMark, "1."+numberMark, "0"+numberMark)
	case 10, 11: // continued over a newline: one literal, the second part in the first's mode
		half := len(c) / 2
		a, b := c[:half], c[half:]
		cont := g.one("\n", " \n\t", " -- c'\n", "\r\n-- x\n  ", "\n\n")
		if g.pick(2) == 0 {
			return "'" + strings.ReplaceAll(a, "'", "''") + "'" + cont + "'" + strings.ReplaceAll(b, "'", "''") + "'"
		}
		bs := g.pick(2) == 0
		return "E'" + escapeE(a, bs) + "'" + cont + "'" + escapeE(b, bs) + "'"
	default: // a typed literal
		return g.one("text ", "date ", "interval ") + "'" + strings.ReplaceAll(c, "'", "''") + "'"
	}
}

// escapeE returns s escaped for E'...': backslashes doubled, each quote as \' or as two quotes.
func escapeE(s string, backslashQuote bool) string {
	q := "''"
	if backslashQuote {
		q = `\'`
	}
	return strings.NewReplacer(`\`, `\\`, "'", q).Replace(s)
}

// escapeU returns s escaped for U&'...' with escape character esc.
func escapeU(s string, esc byte) string {
	return strings.NewReplacer(string(esc), string(esc)+string(esc), "'", "''").Replace(s)
}

// dollarQuote returns s between $tag$, with each '$' that would end it early made '_'.
func dollarQuote(tag, s string) string {
	delim := "$" + tag + "$"
	for {
		i := strings.Index(s+delim, delim)
		if i >= len(s) {
			return delim + s + delim
		}
		s = s[:i] + "_" + s[i+1:]
	}
}

// removeAll removes every occurrence of the olds from s, also those the removal makes.
func removeAll(s string, olds ...string) string {
	for {
		t := s
		for _, o := range olds {
			t = strings.ReplaceAll(t, o, "")
		}
		if t == s {
			return s
		}
		s = t
	}
}

// lastSpan is a span processor that keeps the last span ended.
type lastSpan struct {
	mu sync.Mutex
	s  sdktrace.ReadOnlySpan
}

func (l *lastSpan) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (l *lastSpan) OnEnd(s sdktrace.ReadOnlySpan)                   { l.mu.Lock(); l.s = s; l.mu.Unlock() }
func (l *lastSpan) Shutdown(context.Context) error                  { return nil }
func (l *lastSpan) ForceFlush(context.Context) error                { return nil }

func (l *lastSpan) get() sdktrace.ReadOnlySpan {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s
}

// secretArgs are the argument lists FuzzSecretLiteral calls with: values tells how many values
// fill placeholders (-1: the call is never parameterized).
var secretArgs = []struct {
	args   []any
	values int
}{
	{nil, 0},
	{[]any{pgx.QueryExecModeSimpleProtocol}, 0},
	{[]any{pgx.QueryExecModeExec}, 0},
	{[]any{pgx.QueryResultFormats{1}}, -2}, // a value for an exec, an option for a query
	{[]any{pgx.QueryResultFormatsByOID{25: 1}, pgx.QueryExecModeCacheDescribe}, -2},
	{[]any{pgx.NamedArgs{"a": "v"}}, -1}, // the text has no @name
	{[]any{pgx.StrictNamedArgs{}}, -1},
	{[]any{pgx.QueryExecModeSimpleProtocol, pgx.NamedArgs{}, "dropped"}, -1},
	{[]any{pgx.QueryExecModeSimpleProtocol, "v"}, 1},
	{[]any{"v", "w"}, 2},
	{[]any{pgx.QueryExecModeDescribeExec, nil}, 1},
}

// FuzzSecretLiteral builds statement texts around a secret literal and checks what a call of
// each records: no call records the secret in db.query.summary or db.collection.name; a call
// that is not parameterized records, in db.query.text and in the span name (default: the
// summary, and from a span name function given the recorded text), no part of the secret, and
// the same text whatever the secret's content; a parameterized call records the text as
// written. Whether the call is parameterized is known from the generator: the placeholders it
// wrote outside literals, PREPARE and CREATE, and the values of the arguments.
func FuzzSecretLiteral(f *testing.F) {
	for _, seed := range []struct {
		choices        []byte
		content, noise string
	}{
		{[]byte{}, "hunter2", "comment"},
		{[]byte{0, 0, 0, 0, 1, 2, 3}, "it's", "it's"},
		{[]byte{4, 0, 2, 9, 2, 1, 1, 0, 2}, `a\'b`, "*/ x /*"},
		{[]byte{1, 7, 3, 11, 5, 2, 1, 10, 1, 1, 3}, "$$ $q$ ü", `"`},
		{[]byte{2, 5, 4, 9, 0, 2, 4, 3, 1, 8, 3}, "\\'; select 1; --", "\n--'"},
		{[]byte{3, 11, 8, 0, 9, 1, 3, 10, 2, 13, 7}, "ab\\", "'\\"},
		{[]byte{5, 6, 0, 3, 4, 2, 10, 2, 0, 11, 1, 5}, "'\n'", "$1"},
	} {
		f.Add(seed.choices, seed.content, seed.noise)
	}
	var mu sync.Mutex
	last := new(lastSpan)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(last))
	named := NewStatements(StatementConfig{TracerProvider: tp, QueryText: true,
		SpanName: func(_ context.Context, _, query string) string { return "q " + query }})
	plain := NewStatements(StatementConfig{TracerProvider: tp, QueryText: true})
	f.Fuzz(func(t *testing.T, choices []byte, content, noise string) {
		if len(choices) > 200 || len(content) > 200 || len(noise) > 100 {
			return
		}
		noise = removeAll(noise, secretMark, numberMark)
		gen := func(content string) (string, *secretGen) {
			g := &secretGen{choices: choices, content: secretMark + content[:len(content)/2] + secretMark +
				content[len(content)/2:] + secretMark, noise: noise}
			return g.text(), g
		}
		text, g := gen(removeAll(content, secretMark, numberMark))
		if !strings.Contains(text, secretMark) && !strings.Contains(text, numberMark) {
			t.Fatalf("no secret in %q", text)
		}
		bare, _ := gen("")
		argsAt := g.pick(len(secretArgs))
		query := g.pick(2) == 0
		a := secretArgs[argsAt]
		values := a.values
		if values == -2 { // result formats: options for a query, values (all the args) for an exec
			values = -1
			if !query {
				values = len(a.args)
			}
		}
		want := values > 0 && g.need > 0 && values >= g.need

		mu.Lock()
		defer mu.Unlock()
		for _, s := range []*Statements{named, plain} {
			ic := &interceptor{s: s, srv: s.server(testHost, testPort)}
			opts := execOptions
			if query {
				opts = queryOptions
			}
			ctx, c := ic.begin(context.Background(), s.runSQL(ic.srv, text, namedValues(a.args), opts))
			ic.end(ctx, &c, nil)
			span := last.get()
			recorded := ""
			for _, kv := range span.Attributes() {
				switch kv.Key {
				case semconv.DBQueryTextKey:
					recorded = kv.Value.AsString()
				case semconv.DBQuerySummaryKey, semconv.DBCollectionNameKey: // parameterized or not
					if v := kv.Value.AsString(); strings.Contains(v, secretMark) || strings.Contains(v, numberMark) {
						t.Fatalf("call of %q: %s %q holds the secret", text, kv.Key, v)
					}
				}
			}
			if want {
				if recorded != text {
					t.Fatalf("parameterized call (args %d, query %v, need %d) of %q: db.query.text %q, want it as written",
						argsAt, query, g.need, text, recorded)
				}
				continue
			}
			for _, got := range []string{recorded, span.Name()} {
				if strings.Contains(got, secretMark) || strings.Contains(got, numberMark) {
					t.Fatalf("call (args %d, query %v) of %q: %q holds the secret", argsAt, query, text, got)
				}
			}
			if recorded != sanitizeQuery(text) {
				t.Fatalf("call (args %d, query %v) of %q: db.query.text %q, want %q", argsAt, query, text, recorded, sanitizeQuery(text))
			}
			if s == named && span.Name() != "q "+recorded {
				t.Fatalf("span name %q, want %q", span.Name(), "q "+recorded)
			}
		}
		if !want {
			if got, other := sanitizeQuery(text), sanitizeQuery(bare); got != other {
				t.Fatalf("the sanitized text depends on the secret:\n%q\n-> %q\n%q\n-> %q", text, got, bare, other)
			}
		}
	})
}
