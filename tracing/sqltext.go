package tracing

import (
	"math"
	"strings"
)

// What the text of a statement tells without a parser: its first command keyword, whether it
// holds more than one statement, how many values its $n placeholders need, and (for
// db.query.text) the text with its literals replaced by "?". A small lexer of PostgreSQL's lexical rules
// (sql-syntax-lexical.html) is enough for that: it knows comments, quoted strings (standard, E'',
// B'', X'', N'', U&''), quoted identifiers, dollar-quoted strings, numbers, $n parameters and ';'.
// Nothing here allocates, except the sanitized text.

// describeQuery returns the operation of a statement text, for db.operation.name: its first
// keyword in upper case when it is one of PostgreSQL's SQL commands and the text holds a single
// statement (semconv: the operation name is not taken from a text that may hold several), else
// "". need is how many values its $n placeholders need: the highest n, 0 when it has none,
// [unfillable] when one of them is $0 or beyond [maxPlaceholder]. The $n of a PREPARE or CREATE
// statement do not count: they are the parameters of the statement or function it defines
// (PREPARE p(int) AS SELECT $1; CREATE FUNCTION f(int) ... RETURN $1), which no value of the call
// fills.
func describeQuery(q string) (op string, need int) {
	sc := sqlScanner{s: q}
	seen, ended, multi := false, false, false
	atStart, defines := true, false // at the start of a statement; a PREPARE or CREATE statement
	for {
		k, a, b := sc.next()
		switch k {
		case tokEOF:
			if multi {
				op = ""
			}
			return op, need
		case tokSemicolon:
			ended = seen
			atStart, defines = true, false
			continue
		}
		if atStart && !(k == tokOther && q[a] == '(') {
			atStart = false
			if k == tokWord {
				kw := commandKeyword(q[a:b])
				defines = kw == "PREPARE" || kw == "CREATE"
			}
		}
		if k == tokParam && !defines {
			need = max(need, placeholderNumber(q[a+1:b]))
		}
		if ended {
			multi = true
		}
		if !seen {
			if k == tokOther && q[a] == '(' { // (SELECT ...) UNION ...
				continue
			}
			seen = true
			if k == tokWord {
				op = commandKeyword(q[a:b])
			}
		}
	}
}

// maxPlaceholder is the highest $n a call can fill: the protocol counts a statement's parameters
// in 16 bits (and pgx refuses more arguments).
const maxPlaceholder = 65535

// unfillable is the need of a text with a placeholder no call fills ($0, $70000).
const unfillable = math.MaxInt

// placeholderNumber returns n of the placeholder $n (digits holds n), or unfillable.
func placeholderNumber(digits string) int {
	n := 0
	for i := 0; i < len(digits); i++ {
		n = n*10 + int(digits[i]-'0')
		if n > maxPlaceholder {
			return unfillable
		}
	}
	if n == 0 {
		return unfillable
	}
	return n
}

// sanitizeQuery returns q with every literal (strings of every form, numbers, TRUE and FALSE
// but not as a name's part after ".", as in t.true) replaced by "?", as the semantic conventions ask of a text that is not parameterized: such a
// text may hold a secret (ALTER ROLE ... PASSWORD '...'). Comments, identifiers, keywords,
// operators and placeholders are kept as written. A string continued over a newline is one
// literal; a dollar-quoted body (DO $$ ... $$, a function's) is one literal, replaced whole.
// Strings are read as PostgreSQL reads them with standard_conforming_strings on (its default
// since 9.1, and what pgx's simple protocol requires): a backslash escapes only in E'...'.
// A text that ends inside a string, a quoted identifier or a /* comment is one PostgreSQL
// rejects, and whose token boundaries cannot be trusted: a quote left out makes the next literal
// code, a comment left open or closed inside a literal hides or shows part of it. Of such a text
// only what precedes its first quoted token or comment is kept, the rest replaced by one "?".
func sanitizeQuery(q string) string {
	sc := sqlScanner{s: q}
	var b strings.Builder
	last := 0
	afterDot := false // the previous token was ".": a word there is a name's part (t.true), not a literal
	for {
		k, start, end := sc.next()
		if k == tokEOF {
			break
		}
		dot := afterDot
		afterDot = k == tokOther && q[start:end] == "."
		if k == tokString || k == tokNumber || (k == tokWord && !dot && isBoolLiteral(q[start:end])) {
			if b.Len() == 0 {
				b.Grow(len(q))
			}
			b.WriteString(q[last:start])
			b.WriteByte('?')
			last = end
		}
	}
	if sc.unterminated {
		return sanitizeQuery(q[:sc.opened]) + "?" // a text without quotes or comments
	}
	if last == 0 {
		return q // no literal
	}
	b.WriteString(q[last:])
	return b.String()
}

type tokKind uint8

const (
	tokEOF         tokKind = iota
	tokWord                // identifier or keyword
	tokQuotedIdent         // "..."
	tokString              // '...', E'...', B'...', X'...', N'...', U&'...', $tag$...$tag$
	tokNumber
	tokParam // $1
	tokSemicolon
	tokOther // operators, punctuation
)

// sqlScanner returns the tokens of a statement text, skipping white space and comments.
type sqlScanner struct {
	s            string
	i            int
	quoted       bool // a comment or quoted token was met, the first one at opened
	opened       int
	unterminated bool // the text ends inside a quoted token or a /* comment
}

// open notes a comment or quoted token at i, ending the text unterminated unless closed.
func (sc *sqlScanner) open(i int, closed bool) {
	if !sc.quoted {
		sc.quoted, sc.opened = true, i
	}
	if !closed {
		sc.unterminated = true
	}
}

// quotedToken returns the quoted token of kind k from start to end, noting it.
func (sc *sqlScanner) quotedToken(k tokKind, start, end int, closed bool) (tokKind, int, int) {
	sc.open(start, closed)
	sc.i = end
	return k, start, end
}

// next returns the next token and its bounds in s.
func (sc *sqlScanner) next() (tokKind, int, int) {
	s := sc.s
	sc.skipSpaceAndComments()
	start := sc.i
	if start >= len(s) {
		return tokEOF, len(s), len(s)
	}
	c := s[start]
	switch {
	case c == '\'':
		end, closed := endString(s, start+1, false)
		return sc.quotedToken(tokString, start, end, closed)
	case c == '"':
		end, closed := endQuoted(s, start+1, '"', false)
		return sc.quotedToken(tokQuotedIdent, start, end, closed)
	case c == '$':
		if start+1 < len(s) && isDigit(s[start+1]) {
			j := start + 1
			for j < len(s) && isDigit(s[j]) {
				j++
			}
			sc.i = j
			return tokParam, start, j
		}
		if end, ok, closed := endDollarQuoted(s, start); ok {
			return sc.quotedToken(tokString, start, end, closed)
		}
	case isDigit(c) || (c == '.' && start+1 < len(s) && isDigit(s[start+1])):
		sc.i = endNumber(s, start)
		return tokNumber, start, sc.i
	case isIdentStart(c):
		j := start + 1
		for j < len(s) && isIdentCont(s[j]) {
			j++
		}
		if j-start == 1 && j < len(s) {
			switch lower := c | 0x20; {
			case s[j] == '\'' && lower == 'e': // escape string: backslashes escape
				end, closed := endString(s, j+1, true)
				return sc.quotedToken(tokString, start, end, closed)
			case s[j] == '\'' && (lower == 'b' || lower == 'x' || lower == 'n'):
				end, closed := endString(s, j+1, false)
				return sc.quotedToken(tokString, start, end, closed)
			case s[j] == '&' && lower == 'u' && j+1 < len(s) && s[j+1] == '\'':
				end, closed := endString(s, j+2, false)
				return sc.quotedToken(tokString, start, end, closed)
			}
		}
		sc.i = j
		return tokWord, start, j
	case c == ';':
		sc.i++
		return tokSemicolon, start, sc.i
	}
	sc.i++
	return tokOther, start, sc.i
}

func (sc *sqlScanner) skipSpaceAndComments() {
	s := sc.s
	for sc.i < len(s) {
		switch c := s[sc.i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			sc.i++
		case c == '-' && sc.i+1 < len(s) && s[sc.i+1] == '-':
			if j := strings.IndexByte(s[sc.i:], '\n'); j >= 0 {
				sc.i += j + 1
			} else {
				sc.i = len(s)
			}
		case c == '/' && sc.i+1 < len(s) && s[sc.i+1] == '*':
			end, closed := endBlockComment(s, sc.i+2)
			sc.open(sc.i, closed)
			sc.i = end
		default:
			return
		}
	}
}

// endBlockComment returns the end of a /* comment whose body starts at i (they nest), and false
// when the text ends first.
func endBlockComment(s string, i int) (int, bool) {
	depth := 1
	for i < len(s) {
		switch {
		case s[i] == '*' && i+1 < len(s) && s[i+1] == '/':
			depth--
			i += 2
			if depth == 0 {
				return i, true
			}
		case s[i] == '/' && i+1 < len(s) && s[i+1] == '*':
			depth++
			i += 2
		default:
			i++
		}
	}
	return len(s), false
}

// endQuoted returns the end of a quoted token whose body starts at i: a doubled quote is part of
// it, and so is a character after a backslash when backslash is set (E'...'). It returns false
// when the text ends first.
func endQuoted(s string, i int, quote byte, backslash bool) (int, bool) {
	for i < len(s) {
		switch s[i] {
		case '\\':
			if backslash {
				i += 2
				continue
			}
		case quote:
			if i+1 < len(s) && s[i+1] == quote {
				i += 2
				continue
			}
			return i + 1, true
		}
		i++
	}
	return len(s), false
}

// endString returns the end of a string constant whose body starts at i, read as endQuoted
// reads it. A closing quote followed by white space holding a newline and another quote does not
// end it: PostgreSQL continues the constant there, in the same mode ('a'<newline>'b' is 'ab', and
// in E'a'<newline>'\'x' the second part is read as an E'...' string too).
func endString(s string, i int, backslash bool) (int, bool) {
	for {
		end, closed := endQuoted(s, i, '\'', backslash)
		j, ok := continued(s, end)
		if !ok {
			return end, closed
		}
		i = j + 1
	}
}

// continued reports whether a string constant that ended at i goes on: white space and --
// comments holding a newline, then a quote, at j (PostgreSQL's quotecontinue; a /* */ comment
// does not continue a string).
func continued(s string, i int) (j int, ok bool) {
	newline := false
	for i < len(s) {
		switch c := s[i]; {
		case c == '\n' || c == '\r':
			newline = true
			i++
		case c == ' ' || c == '\t' || c == '\f' || c == '\v':
			i++
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			k := strings.IndexAny(s[i:], "\n\r")
			if k < 0 {
				return 0, false
			}
			i += k
		case c == '\'' && newline:
			return i, true
		default:
			return 0, false
		}
	}
	return 0, false
}

// endDollarQuoted returns the end of the dollar-quoted string starting at s[i] ('$'), or false
// when s[i] does not open one ($tag$ where the tag is empty or an identifier without '$').
// closed is false when the text ends first.
func endDollarQuoted(s string, i int) (end int, ok, closed bool) {
	j := i + 1
	for j < len(s) && s[j] != '$' {
		if !isIdentCont(s[j]) || (j == i+1 && !isIdentStart(s[j])) {
			return 0, false, false
		}
		j++
	}
	if j >= len(s) {
		return 0, false, false
	}
	delim := s[i : j+1]
	if k := strings.Index(s[j+1:], delim); k >= 0 {
		return j + 1 + k + len(delim), true, true
	}
	return len(s), true, false
}

// endNumber returns the end of the numeric constant starting at s[i]: decimal with a fraction
// and an exponent, 0x, 0o, 0b, and '_' separators (PostgreSQL 16).
func endNumber(s string, i int) int {
	for i < len(s) {
		c := s[i]
		switch {
		case (c == 'e' || c == 'E') && i+1 < len(s) && (s[i+1] == '+' || s[i+1] == '-'):
			i += 2
		case isDigit(c) || isLetter(c) || c == '_' || c == '.':
			i++
		default:
			return i
		}
	}
	return i
}

func isDigit(c byte) bool      { return '0' <= c && c <= '9' }
func isLetter(c byte) bool     { return 'a' <= c|0x20 && c|0x20 <= 'z' }
func isIdentStart(c byte) bool { return isLetter(c) || c == '_' || c >= 0x80 }
func isIdentCont(c byte) bool  { return isIdentStart(c) || isDigit(c) || c == '$' }

func isBoolLiteral(w string) bool {
	return strings.EqualFold(w, "true") || strings.EqualFold(w, "false")
}

// commands are the keywords that start PostgreSQL's SQL commands (sql-commands.html). Only these
// become db.operation.name, so that a malformed text cannot add a value to the metric's attributes.
var commands = wordSet(
	"ABORT", "ALTER", "ANALYSE", "ANALYZE", "BEGIN", "CALL", "CHECKPOINT", "CLOSE", "CLUSTER",
	"COMMENT", "COMMIT", "COPY", "CREATE", "DEALLOCATE", "DECLARE", "DELETE", "DISCARD", "DO",
	"DROP", "END", "EXECUTE", "EXPLAIN", "FETCH", "GRANT", "IMPORT", "INSERT", "LISTEN", "LOAD",
	"LOCK", "MERGE", "MOVE", "NOTIFY", "PREPARE", "REASSIGN", "REFRESH", "REINDEX", "RELEASE",
	"RESET", "REVOKE", "ROLLBACK", "SAVEPOINT", "SECURITY", "SELECT", "SET", "SHOW", "START",
	"TABLE", "TRUNCATE", "UNLISTEN", "UPDATE", "VACUUM", "VALUES", "WITH",
)

// wordSet returns a map of each word to itself.
func wordSet(words ...string) map[string]string {
	m := make(map[string]string, len(words))
	for _, w := range words {
		m[w] = w
	}
	return m
}

// commandKeyword returns w in upper case if it is a command keyword, else "". It does not allocate.
func commandKeyword(w string) string {
	kw, _ := lookupUpper(commands, w, "")
	return kw
}
