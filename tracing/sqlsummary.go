package tracing

import "strings"

// What a statement text gives for db.query.summary and db.collection.name: the operations and
// their targets in the order written (semantic conventions, database-spans.md, "Generating a
// summary of the query"), read by the lexer of sqltext.go and a few of PostgreSQL's grammar
// rules (sql-commands.html): never a literal, work linear in the text.

// maxSummary is the longest db.query.summary, in bytes: the conventions truncate the summary to
// 255 characters, never inside an operation or a target (a part that does not fit is left out,
// with every part after it).
const maxSummary = 255

// maxCTENames is how many names of a text's WITH queries are remembered, so that a reference
// to one is not taken for a table. Later ones count as tables: the bound keeps the work per
// target constant.
const maxCTENames = 16

// summarizeQuery returns db.query.summary of a statement text and its db.collection.name.
//
// The summary is each statement's operation followed by its targets, the statements one after
// the other, all separated by single spaces:
//   - SELECT, INSERT, UPDATE, DELETE, MERGE, VALUES and TABLE: the operation in upper case (the
//     value db.operation.name has), then the tables it reads or writes in the order written (FROM
//     and JOIN lists, INTO, UPDATE's and TABLE's table, DELETE's and MERGE's USING). A subquery, a
//     WITH query or a set operation adds its own operation where it starts ("INSERT
//     shipping_details SELECT orders"; "SELECT SELECT orders customers"); a WITH query's name is
//     not a table; a function in FROM (generate_series(...)) is not one either. The operations
//     of INSERT ... ON CONFLICT DO UPDATE, FOR UPDATE and MERGE's WHEN ... THEN UPDATE are parts
//     of their statement, not operations.
//   - CREATE, ALTER and DROP of a known kind of object: the command and the kind ("CREATE
//     TABLE", "DROP MATERIALIZED VIEW"), then the name (DROP: every name); CREATE ... AS
//     followed by a query adds the query's summary. Another kind: the command alone.
//   - COPY: COPY and the table, or the summary of the query in parentheses.
//   - TRUNCATE and LOCK: the command and the tables; CALL: CALL and the procedure; EXPLAIN:
//     EXPLAIN and the summary of the statement explained; PREPARE: PREPARE and that of the
//     statement prepared (its name is not recorded: pgx's are generated).
//   - Any other command: the command alone (SET, SHOW, BEGIN, GRANT, VACUUM, EXECUTE, ...).
//
// Names are kept as written (quotes and case), a qualified name with its parts joined by "."
// whatever spacing or comments separated them. The summary ends before a part that would make
// it longer than maxSummary.
//
// It returns no summary when the text cannot be read so: a statement not starting with one of
// PostgreSQL's command keywords, parentheses that do not balance within a statement, a text
// ending inside a quoted token or a comment (whose token boundaries cannot be trusted), or no
// statement at all. The span is then named by its operation as before.
//
// collection is the one table the text's single statement works on, when all its tables are
// that one (as written) and it has no other target; "" otherwise.
func summarizeQuery(q string) querySummary { return summarize("", q) }

// querySummary is what summarizeQuery returns: db.query.summary and db.collection.name, each ""
// when not known.
type querySummary struct {
	summary    string
	collection string
}

// summarize returns the summary of q after the operation op when op is not empty (PREPARE for
// a prepared text, BATCH for a batch), cut to maxSummary as a whole.
func summarize(op, q string) querySummary {
	sm := summarizer{sc: sqlScanner{s: q}}
	if op != "" {
		sm.add(op, "")
	}
	ok := sm.run()
	if !ok || sm.sc.unterminated {
		return querySummary{}
	}
	qs := querySummary{summary: sm.first}
	if sm.b.Len() > 0 {
		qs.summary = sm.b.String()
	}
	if sm.statements == 1 && sm.collections == 1 && !sm.otherTarget {
		qs.collection = sm.collection
	}
	return qs
}

// summarizer builds the summary of one text.
type summarizer struct {
	sc sqlScanner

	first string          // the first part, the summary when b is empty
	b     strings.Builder // the parts, once there are two or a part is made of two words
	n     int             // parts added
	size  int             // the summary's length
	full  bool            // a part did not fit: no more are added

	statements  int
	collection  string // the first table
	collections int    // distinct tables: 0, 1 or 2 (two or more)
	otherTarget bool   // a target that is not a table (a procedure, an index)

	ctes  [maxCTENames]string
	nctes int

	// The token after sc, when peeked: the scanner after it, its kind and bounds.
	peeked       bool
	after        sqlScanner
	peekK        tokKind
	peekA, peekB int
	afterDot     bool // the token last read was "."

	// scanned counts the bytes the lexer went over, a text read again counting again: the
	// measure of the work (see TestSummarizeQueryLinear).
	scanned int
}

// next returns the next token and its text.
func (sm *summarizer) next() (tokKind, string) {
	k, w := sm.peek()
	sm.sc, sm.peeked = sm.after, false
	sm.afterDot = k == tokOther && w == "."
	return k, w
}

// peek returns the next token and its text without reading it.
func (sm *summarizer) peek() (tokKind, string) {
	if !sm.peeked {
		sm.after = sm.sc
		sm.peekK, sm.peekA, sm.peekB = sm.after.next()
		sm.scanned += sm.after.i - sm.sc.i
		sm.peeked = true
		if sm.peekK == tokWord && !sm.afterDot && isBoolLiteral(sm.sc.s[sm.peekA:sm.peekB]) {
			sm.peekK = tokOther // TRUE or FALSE: a literal, read as its sanitized "?" is (sanitizeQuery)
		}
	}
	return sm.peekK, sm.sc.s[sm.peekA:sm.peekB]
}

// add appends a part to the summary, a or, when b is not empty, a and b separated by a space
// (CREATE TABLE), unless it would pass maxSummary. A summary of one part of one word is that
// word: no allocation.
func (sm *summarizer) add(a, b string) bool {
	size := len(a)
	if b != "" {
		size += 1 + len(b)
	}
	if sm.n > 0 {
		size++
	}
	if sm.full || sm.size+size > maxSummary {
		sm.full = true
		return false
	}
	sm.size += size
	if sm.n == 0 && b == "" {
		sm.first, sm.n = a, 1
		return true
	}
	if sm.b.Len() == 0 {
		// The parts are words of the text, in the same order (ops added before it: PREPARE).
		sm.b.Grow(min(maxSummary, len(sm.first)+len(sm.sc.s)+len(b)+2))
		sm.b.WriteString(sm.first)
	}
	if sm.n > 0 {
		sm.b.WriteByte(' ')
	}
	sm.b.WriteString(a)
	if b != "" {
		sm.b.WriteByte(' ')
		sm.b.WriteString(b)
	}
	sm.n++
	return true
}

// addTarget appends a target, a table when table is set.
func (sm *summarizer) addTarget(name string, table bool) {
	if !sm.add(name, "") {
		return
	}
	switch {
	case !table:
		sm.otherTarget = true
	case sm.collections == 0:
		sm.collection, sm.collections = name, 1
	case name != sm.collection:
		sm.collections = 2
	}
}

// run reads the statements of the text; false when one cannot be read.
func (sm *summarizer) run() bool {
	for {
		k, w := sm.peek()
		switch {
		case k == tokEOF:
			sm.next() // notes a text ending inside a comment
			return sm.statements > 0
		case k == tokSemicolon:
			sm.next()
			continue
		}
		sm.statements++
		var ok bool
		if k == tokOther && w == "(" || k == tokWord && queryKeyword(w) != "" {
			ok = sm.query()
		} else {
			ok = sm.command()
		}
		if !ok {
			return false
		}
	}
}

// queryKeyword returns w in upper case when it starts a query (a statement of its own, a
// subquery, a WITH query), else "".
func queryKeyword(w string) string {
	switch kw := commandKeyword(w); kw {
	case "SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "VALUES", "TABLE", "WITH":
		return kw
	}
	return ""
}

// command reads a statement that is not a query, from its first keyword.
func (sm *summarizer) command() bool {
	k, w := sm.next()
	op := ""
	if k == tokWord {
		op = commandKeyword(w)
	}
	if op == "" {
		return false
	}
	switch op {
	case "CREATE", "ALTER", "DROP":
		return sm.ddl(op)
	case "EXPLAIN", "PREPARE":
		return sm.leading(op)
	}
	sm.add(op, "")
	switch op {
	case "COPY":
		if k, w := sm.peek(); k == tokOther && w == "(" {
			sm.next()
			if !sm.parse(true) {
				return false
			}
		} else {
			sm.names(true, false)
		}
	case "TRUNCATE", "LOCK":
		sm.names(true, true)
	case "CALL":
		sm.names(false, false)
	}
	return sm.skipStatement()
}

// leading reads an EXPLAIN (its options) or a PREPARE (its name, parameter types and AS), then
// the statement explained or prepared when it is a query.
func (sm *summarizer) leading(op string) bool {
	sm.add(op, "")
	if op == "PREPARE" {
		if k, _ := sm.peek(); k == tokWord || k == tokQuotedIdent {
			sm.next()
		}
		if k, w := sm.peek(); k == tokOther && w == "(" {
			sm.next()
			if !sm.skipParens() {
				return false
			}
		}
		if k, w := sm.peek(); k != tokWord || !strings.EqualFold(w, "as") {
			return sm.skipStatement()
		}
		sm.next()
	}
	for {
		k, w := sm.peek()
		switch {
		case k == tokWord && queryKeyword(w) != "":
			return sm.parse(false)
		case k == tokWord && op == "EXPLAIN": // ANALYZE, VERBOSE
			sm.next()
		case k == tokOther && w == "(" && op == "EXPLAIN":
			sm.next()
			if !sm.skipParens() {
				return false
			}
		default:
			return sm.skipStatement()
		}
	}
}

// objectKinds are the kinds of object whose CREATE, ALTER and DROP summaries name the object
// (sql-commands.html), in upper case, with whether the object is a table (db.collection.name).
// A kind of -1 is one whose next word is not the object's name: the summary is the command alone.
var objectKinds = func() map[string]objectKind {
	m := map[string]objectKind{}
	for kind, table := range map[string]int{
		"TABLE": 1, "FOREIGN TABLE": 1, "VIEW": 1, "MATERIALIZED VIEW": 1,
		"INDEX": 0, "SEQUENCE": 0, "SCHEMA": 0, "FUNCTION": 0, "PROCEDURE": 0, "ROUTINE": 0,
		"AGGREGATE": 0, "TRIGGER": 0, "EVENT TRIGGER": 0, "TYPE": 0, "DOMAIN": 0, "EXTENSION": 0,
		"DATABASE": 0, "ROLE": 0, "USER": 0, "GROUP": 0, "POLICY": 0, "RULE": 0, "PUBLICATION": 0,
		"SUBSCRIPTION": 0, "SERVER": 0, "STATISTICS": 0, "TABLESPACE": 0, "COLLATION": 0,
		"CONVERSION": 0, "LANGUAGE": 0, "OPERATOR": 0,
		"USER MAPPING": -1, "OPERATOR CLASS": -1, "OPERATOR FAMILY": -1,
	} {
		m[kind] = objectKind{kind, table}
	}
	return m
}()

type objectKind struct {
	name  string
	table int
}

// ddlModifiers are the words that may stand between CREATE, ALTER or DROP and the kind of
// object, or between the kind and the name.
var ddlModifiers = map[string]bool{
	"OR": true, "REPLACE": true, "TEMP": true, "TEMPORARY": true, "UNLOGGED": true, "GLOBAL": true,
	"LOCAL": true, "UNIQUE": true, "RECURSIVE": true, "TRUSTED": true, "PROCEDURAL": true,
	"CONSTRAINT": true, "DEFAULT": true, "IF": true, "NOT": true, "EXISTS": true,
	"CONCURRENTLY": true, "ONLY": true,
}

// ddl reads a CREATE, ALTER or DROP statement after its command keyword.
func (sm *summarizer) ddl(op string) bool {
	for {
		k, w := sm.peek()
		if k != tokWord || !ddlModifier(w) {
			break
		}
		sm.next()
	}
	kind, table := sm.objectKind()
	if kind == "" {
		sm.add(op, "")
		return sm.skipStatement()
	}
	sm.add(op, kind)
	for {
		k, w := sm.peek()
		if k != tokWord || !ddlModifier(w) {
			break
		}
		sm.next()
	}
	sm.names(table, op == "DROP")
	if op != "CREATE" {
		return sm.skipStatement()
	}
	return sm.rest(true) // CREATE TABLE ... AS query, CREATE VIEW ... AS query
}

// ddlModifier reports whether w is one of ddlModifiers.
func ddlModifier(w string) bool {
	m, _ := lookupUpper(ddlModifiers, w, "")
	return m
}

// objectKind reads the kind of object of a CREATE, ALTER or DROP statement: its name in upper
// case and whether it is a table, or "" when it is not one of objectKinds.
func (sm *summarizer) objectKind() (string, bool) {
	k1, w1 := sm.peek()
	if k1 != tokWord {
		return "", false
	}
	sc := sm.after // after w1
	k2, a, b := sc.next()
	sm.scanned += sc.i - sm.after.i
	if k2 == tokWord {
		if kind, ok := lookupUpper(objectKinds, w1, sm.sc.s[a:b]); ok {
			if kind.table < 0 {
				return "", false
			}
			sm.sc, sm.peeked, sm.afterDot = sc, false, false
			return kind.name, kind.table == 1
		}
	}
	if kind, ok := lookupUpper(objectKinds, w1, ""); ok && kind.table >= 0 {
		sm.next()
		return kind.name, kind.table == 1
	}
	return "", false
}

// lookupUpper returns the value of m at w1, or at w1 and w2 separated by a space, in upper case.
// It does not allocate.
func lookupUpper[T any](m map[string]T, w1, w2 string) (T, bool) {
	var buf [24]byte
	n := len(w1)
	if w2 != "" {
		n += 1 + len(w2)
	}
	if n > len(buf) {
		var zero T
		return zero, false
	}
	b := append(buf[:0], w1...)
	if w2 != "" {
		b = append(append(b, ' '), w2...)
	}
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - ('a' - 'A')
		}
	}
	v, ok := m[string(b)]
	return v, ok
}

// names reads the name after a command (COPY's table, CALL's procedure, the object of CREATE,
// ALTER and DROP, TRUNCATE's and LOCK's tables) as a target, and when list is set the names
// after it separated by commas. The arguments of a name ("f(int)", "t (a, b)") are skipped.
func (sm *summarizer) names(table, list bool) {
	for {
		for {
			k, w := sm.peek()
			if k != tokWord || (keyword(w) != "TABLE" && keyword(w) != "ONLY") {
				break
			}
			sm.next()
		}
		k, w := sm.peek()
		if k != tokWord && k != tokQuotedIdent || k == tokWord && keyword(w) != "" {
			return
		}
		sm.next()
		name, _ := sm.name(w)
		sm.addTarget(name, table)
		if k, w := sm.peek(); k == tokOther && w == "*" {
			sm.next()
		}
		if k, w := sm.peek(); k == tokOther && w == "(" {
			sm.next()
			if !sm.skipParens() {
				return
			}
		}
		if k, w := sm.peek(); !list || k != tokOther || w != "," {
			return
		}
		sm.next()
	}
}

// name reads a name whose first part, w, was just read: the parts separated by ".", joined with
// "." (a slice of the text when nothing separates them). call reports a "(" after it: a
// function's name.
func (sm *summarizer) name(w string) (name string, call bool) {
	s := sm.sc.s
	start := sm.sc.i - len(w)
	end := sm.sc.i
	var b strings.Builder // the parts joined, once something separates two of them
	for {
		if k, d := sm.peek(); k != tokOther || d != "." {
			break
		}
		dot := sm.peekA
		sm.next()
		k, part := sm.peek()
		if k != tokWord && k != tokQuotedIdent {
			break
		}
		a := sm.peekA
		sm.next()
		if b.Len() == 0 && (dot != end || a != dot+1) {
			b.WriteString(s[start:end])
		}
		if b.Len() > 0 && b.Len() <= maxSummary {
			b.WriteByte('.')
			b.WriteString(part)
		}
		end = a + len(part)
	}
	name = s[start:end]
	if b.Len() > 0 {
		name = b.String()
	}
	k, d := sm.peek()
	return name, k == tokOther && d == "("
}

// skipParens reads up to the ")" that closes a "(" just read; false when the statement ends
// first.
func (sm *summarizer) skipParens() bool {
	for depth := 1; depth > 0; {
		k, w := sm.peek()
		if k == tokEOF || k == tokSemicolon {
			return false
		}
		sm.next()
		switch {
		case k == tokOther && w == "(":
			depth++
		case k == tokOther && w == ")":
			depth--
		}
	}
	return true
}

// skipStatement reads up to the end of the statement; false when its parentheses do not balance.
func (sm *summarizer) skipStatement() bool { return sm.rest(false) }

// rest reads up to the end of the statement, as skipStatement; with asQuery an AS outside
// parentheses followed by a query keyword goes on as that query.
func (sm *summarizer) rest(asQuery bool) bool {
	for {
		k, w := sm.peek()
		switch {
		case k == tokEOF || k == tokSemicolon:
			return true
		case k == tokOther && w == ")":
			return false
		}
		sm.next()
		switch {
		case k == tokOther && w == "(":
			if !sm.skipParens() {
				return false
			}
		case asQuery && k == tokWord && strings.EqualFold(w, "as"):
			if k, w := sm.peek(); k == tokWord && queryKeyword(w) != "" {
				return sm.parse(false)
			}
		}
	}
}

// query reads a query statement: SELECT, INSERT, UPDATE, DELETE, MERGE, VALUES, TABLE, WITH.
func (sm *summarizer) query() bool { return sm.parse(false) }

// parse reads a query up to the end of its statement or, with inParen, up to the ")" closing
// the "(" just read (COPY (query)), adding its operations and targets.
//
// Parentheses are tracked to depth 63: bit d of the masks holds the state of the parentheses
// at depth d (0: the statement itself). Deeper ones are read as expressions.
func (sm *summarizer) parse(inParen bool) bool {
	var (
		depth    int
		queries  uint64 = 1 // the parentheses hold a query (a subquery), not an expression
		fromList uint64     // a FROM, JOIN or USING list is open: a comma there starts a table
		withList uint64     // a WITH list is open: a comma there starts a WITH query
		expectOp = true     // an INSERT, UPDATE, DELETE, MERGE, VALUES or TABLE here is an operation
		target   bool       // the next name is a table
		inFrom   bool       // the table is one of a FROM, JOIN or USING list, where a function may stand
		cteName  bool       // the next name is a WITH query's
		prevKind tokKind
		prevKw   string
	)
	if inParen {
		depth, queries = 1, 3
	}
	bit := func(d int) uint64 {
		if d > 63 {
			return 0
		}
		return 1 << d
	}
	for {
		k, w := sm.peek()
		if k == tokEOF || k == tokSemicolon {
			return depth == 0 && !inParen
		}
		sm.next()
		wasExpect, wasTarget, wasCTE, wasFrom := expectOp, target, cteName, inFrom
		expectOp, target, cteName, inFrom = false, false, false, false
		kw := ""
		if k == tokWord {
			kw = keyword(w)
		}
		inQuery := queries&bit(depth) != 0
		switch {
		case k == tokOther && w == "(":
			depth++
			nk, nw := sm.peek()
			q := nk == tokWord && queryKeyword(nw) != "" || nk == tokOther && nw == "(" && prevKind != tokWord
			b := bit(depth)
			queries, fromList, withList = queries&^b, fromList&^b, withList&^b
			if q {
				queries |= b
			}
			expectOp = q && b != 0
		case k == tokOther && w == ")":
			if depth == 0 {
				return false
			}
			wasQuery := queries&bit(depth) != 0
			depth--
			if inParen && depth == 0 {
				return true
			}
			expectOp = wasQuery
		case k == tokOther && w == ",":
			switch {
			case withList&bit(depth) != 0:
				cteName = true
			case fromList&bit(depth) != 0:
				target, inFrom = true, true
			}
		case wasCTE && k == tokWord && kw == "RECURSIVE":
			cteName = true
		case wasCTE && (k == tokQuotedIdent || k == tokWord && kw == ""):
			if sm.nctes < maxCTENames {
				sm.ctes[sm.nctes] = w
				sm.nctes++
			}
		case wasTarget && (kw == "ONLY" || kw == "LATERAL"):
			target, inFrom = true, wasFrom
		case wasTarget && (k == tokQuotedIdent || k == tokWord && kw == ""):
			if name, call := sm.name(w); !(call && wasFrom) && !sm.isCTE(name) {
				sm.addTarget(name, true)
			}
		case kw == "SELECT":
			sm.add(kw, "")
			withList &^= bit(depth)
		case kw == "INSERT" || kw == "UPDATE" || kw == "DELETE" || kw == "MERGE" || kw == "VALUES" || kw == "TABLE":
			if wasExpect {
				sm.add(kw, "")
				withList &^= bit(depth)
				target = kw == "UPDATE" || kw == "TABLE"
			}
		case kw == "WITH":
			if wasExpect {
				withList |= bit(depth)
				cteName = true
			}
		case kw == "FROM" || kw == "JOIN" || kw == "USING":
			if inQuery && prevKw != "DISTINCT" { // IS DISTINCT FROM
				fromList |= bit(depth)
				target, inFrom = true, true
			}
		case kw == "INTO":
			target = inQuery
		case kw == "UNION" || kw == "INTERSECT" || kw == "EXCEPT":
			fromList &^= bit(depth)
			expectOp = true
		case kw == "ALL" || kw == "DISTINCT":
			expectOp = wasExpect
		case closesFrom(kw):
			fromList &^= bit(depth)
		}
		prevKind, prevKw = k, kw
	}
}

// closesFrom reports whether the keyword kw ends a FROM, JOIN or USING list.
func closesFrom(kw string) bool {
	switch kw {
	case "WHERE", "GROUP", "HAVING", "WINDOW", "ORDER", "LIMIT", "OFFSET", "FETCH", "FOR",
		"RETURNING", "SET", "WHEN", "VALUES", "SELECT", "INTO":
		return true
	}
	return false
}

// isCTE reports whether name is that of one of the WITH queries read so far.
func (sm *summarizer) isCTE(name string) bool {
	for _, c := range sm.ctes[:sm.nctes] {
		if c == name || c[0] != '"' && strings.EqualFold(c, name) {
			return true
		}
	}
	return false
}

// keywords are the words the summary's grammar rules look at (sql-keywords-appendix.html).
var keywords = wordSet(
	"SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "VALUES", "TABLE", "WITH", "RECURSIVE",
	"ONLY", "LATERAL", "FROM", "JOIN", "USING", "INTO", "UNION", "INTERSECT", "EXCEPT", "ALL",
	"DISTINCT", "WHERE", "GROUP", "HAVING", "WINDOW", "ORDER", "LIMIT", "OFFSET", "FETCH",
	"FOR", "RETURNING", "SET", "WHEN", "ON", "AS", "NOT", "MATERIALIZED",
)

// keyword returns w in upper case if it is one of keywords, else "". It does not allocate.
func keyword(w string) string {
	kw, _ := lookupUpper(keywords, w, "")
	return kw
}
