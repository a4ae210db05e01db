package tracing

import (
	"strings"
	"testing"
)

func TestSummarizeQuery(t *testing.T) {
	long := strings.Repeat("x", 120)
	for _, tt := range []struct {
		name, query         string
		summary, collection string
	}{
		// The examples of the conventions (database-spans.md, "Generating a summary of the query").
		{"one table", "SELECT * FROM wuser_table WHERE username = $1", "SELECT wuser_table", "wuser_table"},
		{"insert from a query", "INSERT INTO shipping_details (order_id, address) SELECT order_id, address FROM orders WHERE order_id = 1",
			"INSERT shipping_details SELECT orders", ""},
		{"two tables", "SELECT * FROM songs, artists WHERE songs.artist_id = artists.id", "SELECT songs artists", ""},
		{"anonymous table", "SELECT order_date FROM (SELECT * FROM orders o JOIN customers c ON o.customer_id = c.customer_id)",
			"SELECT SELECT orders customers", ""},
		{"quoted names", `SELECT * FROM "song list", artists`, `SELECT "song list" artists`, ""},

		{"no table", "select 1", "SELECT", ""},
		{"TRUE is a literal, not a name", "drop table true", "DROP TABLE", ""},
		{"TRUE after a dot is a name's part", "merge into tr. true using s on true when matched then delete", "MERGE tr.true s", ""},
		{"operation in upper case, names as written", "select a from Public.T", "SELECT Public.T", "Public.T"},
		{"qualified name with spaces and comments", `select * from "My Schema" . /* c */ "T"`, `SELECT "My Schema"."T"`, `"My Schema"."T"`},
		{"joins", "select * from a left outer join b on a.id = b.id cross join c natural join d join e using (id)", "SELECT a b c d e", ""},
		{"comma after a join condition", "select * from a join b on a.x = b.x and f(a.y, 1), c", "SELECT a b c", ""},
		{"alias", "select * from t as x, u y where x.a = y.a", "SELECT t u", ""},
		{"same table twice", "select * from t a join t b on a.id = b.parent", "SELECT t t", "t"},
		{"function in FROM", "select * from generate_series(1, 3) g, pg_catalog.unnest(array[1]) u, t", "SELECT t", "t"},
		{"ONLY and LATERAL", "select * from only t, lateral (select * from u where u.a = t.a) x", "SELECT t SELECT u", ""},
		{"FROM inside functions", "select extract(year from d), substring(s from 1 for 2), trim(both 'x' from s) from t", "SELECT t", "t"},
		{"IS DISTINCT FROM", "select * from t where a is distinct from b", "SELECT t", "t"},
		{"subquery in WHERE", "select * from t where a in (select b from u) and exists (select 1 from v)", "SELECT t SELECT u SELECT v", ""},
		{"scalar subquery", "select (select max(x) from t) from u", "SELECT SELECT t u", ""},
		{"set operation", "select a from t union all select a from u except (select a from v)", "SELECT t SELECT u SELECT v", ""},
		{"parenthesized set operation", "(select 1) union (select 2)", "SELECT SELECT", ""},
		{"locking clause", "select * from t for update of t skip locked", "SELECT t", "t"},
		{"SELECT INTO", "select * into new_t from t", "SELECT new_t t", ""},

		{"WITH: its queries then the main statement", "with x as (select * from a), y as materialized (select * from b) select * from x join y using (id)",
			"SELECT a SELECT b SELECT", ""},
		{"WITH RECURSIVE", "with recursive t(n) as (select 1 union all select n + 1 from t where n < 5) select * from t", "SELECT SELECT SELECT", ""},
		{"WITH around a change", "with gone as (delete from a where x returning *) insert into b select * from gone", "DELETE a INSERT b SELECT", ""},
		{"WITH of one table", `with r as (select id from "T") select * from "T" join r using (id)`, `SELECT "T" SELECT "T"`, `"T"`},
		{"WITH ORDINALITY is no WITH query", "select * from unnest(array[1]) with ordinality u, t", "SELECT t", "t"},

		{"INSERT VALUES", "insert into t (a, b) values (1, 'x'), (2, 'y')", "INSERT t", "t"},
		{"INSERT ON CONFLICT DO UPDATE", "insert into t as x (a) values (1) on conflict (a) do update set a = excluded.a returning a", "INSERT t", "t"},
		{"INSERT DEFAULT VALUES", "insert into s.t default values", "INSERT s.t", "s.t"},
		{"UPDATE FROM", "update only t set a = u.a, b = 2 from u where u.id = t.id", "UPDATE t u", ""},
		{"UPDATE with a subquery", "update t set a = (select max(a) from u)", "UPDATE t SELECT u", ""},
		{"DELETE USING", "delete from t using u, v where t.id = u.id", "DELETE t u v", ""},
		{"MERGE", "merge into t using s on t.id = s.id when matched then update set a = s.a when not matched then insert (a) values (s.a)", "MERGE t s", ""},
		{"MERGE from a query", "merge into t using (select * from s) x on t.id = x.id when matched then delete", "MERGE t SELECT s", ""},
		{"VALUES", "values (1), (2)", "VALUES", ""},
		{"TABLE", "table t", "TABLE t", "t"},
		{"VALUES in FROM", "select * from (values (1)) v(a)", "SELECT VALUES", ""},

		{"several statements", "select * from a; insert into b values (1);", "SELECT a INSERT b", ""},
		{"several statements of one table", "begin; update t set a = 1; commit", "BEGIN UPDATE t COMMIT", ""},
		{"empty statements", ";; select 1 ;", "SELECT", ""},

		{"CREATE TABLE", "create table if not exists public.t (a int references u (a), b text default 'x')", "CREATE TABLE public.t", "public.t"},
		{"CREATE TEMP TABLE AS", "create temp table t2 as select * from t", "CREATE TABLE t2 SELECT t", ""},
		{"CREATE VIEW", "CREATE OR REPLACE VIEW v (a) AS SELECT a FROM t", "CREATE VIEW v SELECT t", ""},
		{"CREATE MATERIALIZED VIEW", "create materialized view if not exists mv as table t with no data", "CREATE MATERIALIZED VIEW mv TABLE t", ""},
		{"CREATE INDEX", "create unique index concurrently if not exists i on t (a)", "CREATE INDEX i", ""},
		{"CREATE INDEX without a name", "create index on t (a)", "CREATE INDEX", ""},
		{"CREATE FUNCTION", "create function f(int) returns int as $$ select a from secret_table $$ language sql", "CREATE FUNCTION f", ""},
		{"CREATE ROLE", "create role r login password 'p'", "CREATE ROLE r", ""},
		{"CREATE of another kind", "create text search configuration c (copy = english)", "CREATE", ""},
		{"CREATE USER MAPPING", "create user mapping for r server s", "CREATE", ""},
		{"ALTER TABLE", "alter table only t add column b int default 5", "ALTER TABLE t", "t"},
		{"ALTER ROLE", "ALTER ROLE app PASSWORD 'hunter2'", "ALTER ROLE app", ""},
		{"ALTER SYSTEM", "alter system set work_mem = '64MB'", "ALTER", ""},
		{"DROP", "drop table if exists a, s.b cascade", "DROP TABLE a s.b", ""},
		{"DROP one table", "drop table t", "DROP TABLE t", "t"},
		{"DROP FUNCTION", "drop function f(int), g(text)", "DROP FUNCTION f g", ""},

		{"COPY table", "copy t (a, b) from stdin with (format csv)", "COPY t", "t"},
		{"COPY query", "copy (select * from t join u on true) to stdout", "COPY SELECT t u", ""},
		{"TRUNCATE", "truncate table a, only b restart identity", "TRUNCATE a b", ""},
		{"LOCK", "lock table t in access exclusive mode", "LOCK t", "t"},
		{"CALL", "call s.p(1, 'x')", "CALL s.p", ""},
		{"EXPLAIN", "explain (analyze, buffers) select * from t", "EXPLAIN SELECT t", "t"},
		{"EXPLAIN ANALYZE", "explain analyze verbose update t set a = 1", "EXPLAIN UPDATE t", "t"},
		{"PREPARE: not its name", "prepare stmtcache_1234(int) as select * from t where a = $1", "PREPARE SELECT t", "t"},
		{"EXECUTE: not its name", "execute stmtcache_1234(1)", "EXECUTE", ""},
		{"other commands", "set search_path = public, app", "SET", ""},
		{"LISTEN", "listen chan", "LISTEN", ""},
		{"DO", "do $$ begin perform 1; end $$", "DO", ""},

		// Literals never: strings of every form, numbers, booleans, dollar-quoted bodies.
		{"strings", "select * from t where a = 'x' and b = E'y\\'z' and c = U&'d\\0061t' and d = $q$ from secret $q$", "SELECT t", "t"},
		{"a string where a table would be", "select * from 'secret', t", "SELECT t", "t"},
		{"a quote in a quoted name", `select * from "it's"`, `SELECT "it's"`, `"it's"`},
		{"booleans and numbers", "select * from true, 42, t", "SELECT t", "t"},
		{"comments", "/* from secret */ select * -- from secret\n from t", "SELECT t", "t"},

		// A text the summary cannot read: no summary.
		{"not a command", "frobnicate t", "", ""},
		{"one statement not a command", "select 1; frobnicate t", "", ""},
		{"a parenthesis too many", "select * from t)", "", ""},
		{"a parenthesis open", "select * from (select 1", "", ""},
		{"ending inside a string", "select * from t where a = 'secret", "", ""},
		{"ending inside a quoted name", `select * from "t where a = 'secret'`, "", ""},
		{"ending inside a comment", "select * from t /* where a = 'secret'", "", ""},
		{"empty", "", "", ""},
		{"only a comment", "-- nothing", "", ""},

		// At most 255 characters, never cut inside a part.
		{"long", "select * from a" + long + ", b" + long + ", c" + long, "SELECT a" + long + " b" + long, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := summarizeQuery(tt.query)
			if got.summary != tt.summary || got.collection != tt.collection {
				t.Errorf("summarizeQuery(%q) = %q, %q; want %q, %q", tt.query, got.summary, got.collection, tt.summary, tt.collection)
			}
			if len(got.summary) > maxSummary {
				t.Errorf("summary of %d bytes", len(got.summary))
			}
		})
	}
}

// The summary of a prepared text follows PREPARE, as that of a PREPARE statement does.
func TestSummarizePrepared(t *testing.T) {
	const text = "select * from t where a = $1"
	if got, want := summarize(OperationPrepare, text), summarizeQuery("prepare p as "+text); got != want {
		t.Errorf("prepared %q: %+v, want %+v", text, got, want)
	}
	if got := summarize(OperationPrepare, "selec 1"); got != (querySummary{}) {
		t.Errorf("prepared text the summary cannot read: %+v, want none", got)
	}
}

func TestSummarizeQueryAllocations(t *testing.T) {
	for _, tt := range []struct {
		query string
		want  float64
	}{
		{"select 1", 0},                            // an operation alone
		{"select * from t where a = $1", 1},        // the summary
		{"select * from s.t where a = $1", 2},      // and the qualified name
		{"create table t (a int)", 1},              // the summary
		{"copy (select 1 from t) to stdout", 1},    // the summary
		{"select * from t where a = 'x' and b", 1}, // literals cost nothing
	} {
		if n := testing.AllocsPerRun(100, func() { summarizeQuery(tt.query) }); n > tt.want {
			t.Errorf("summarizeQuery(%q): %v allocations, want at most %v", tt.query, n, tt.want)
		}
	}
}

// The work is linear in the text: the lexer goes over each byte a few times at most, whatever
// the text (nested parentheses, long lists, names of many parts, WITH queries, quotes).
func TestSummarizeQueryLinear(t *testing.T) {
	for _, tt := range []struct{ name, head, unit, tail string }{
		{"tables", "select * from ", "t, ", "u"},
		{"parentheses", "select ", "(", ""},
		{"subqueries", "select * from t where a in ", "(select a from t where a in ", ""},
		{"WITH queries", "with ", "x as (select 1), ", "y as (select 1) select * from t"},
		{"references to WITH queries", "with x as (select 1) select * from t", ", x", ""},
		{"qualified names", "select * from ", "a.", "b"},
		{"qualified names with spaces", "select * from ", "a . ", "b"},
		{"dollar quotes", "select ", "$a", "$"},
		{"unterminated dollar quotes", "select * from t where a = ", "$a$ ", ""},
		{"DROP list", "drop table ", "t, ", "u"},
		{"CREATE", "create ", "or ", "table t"},
		{"statements", "", "select * from t;", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := tt.head + strings.Repeat(tt.unit, 10000) + tt.tail
			if n := scanned(q); n > maxScanned(q) {
				t.Errorf("%d bytes scanned for a text of %d", n, len(q))
			}
		})
	}
}

// scanned returns how many bytes the summary of q went over.
func scanned(q string) int {
	sm := summarizer{sc: sqlScanner{s: q}}
	sm.run()
	return sm.scanned
}

// maxScanned is the most the summary of q may go over: each byte 3 times.
func maxScanned(q string) int { return 3*len(q) + 16 }

// FuzzSummarizeQuery checks that the summary never panics, is at most maxSummary bytes long,
// holds no literal (it is that of the text with its literals replaced by "?", whatever they
// held), that a literal after a table never reaches it, and that its work is linear (the bytes
// the lexer goes over, as TestSummarizeQueryLinear counts them).
func FuzzSummarizeQuery(f *testing.F) {
	for _, s := range []string{
		"select * from t", "with x as (select 1) select * from x, y", "insert into t select * from u",
		"copy (select 1) to stdout", "create table t as select 1", "drop table a, b", "select 1; select 2",
		"select * from t where a = 'x'", "select $$x$$ from t", `select * from "a""b".c`, "explain (analyze) select 1",
		"prepare p(int) as select $1", "merge into t using s on true when matched then delete", "(((", "drop table true", "merge into tr. true",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		got := summarizeQuery(q)
		if len(got.summary) > maxSummary {
			t.Fatalf("summary of %q: %d bytes", q, len(got.summary))
		}
		if n := scanned(q); n > maxScanned(q) {
			t.Fatalf("summary of %q: %d bytes scanned", q, n)
		}
		if got.collection != "" && !strings.Contains(got.summary, got.collection) {
			t.Fatalf("summary of %q: collection %q not in %q", q, got.collection, got.summary)
		}
		if got.summary != "" {
			if s := sanitizeQuery(q); summarizeQuery(s) != got {
				t.Fatalf("summary of %q: %+v, but of its sanitized text %q: %+v", q, got, s, summarizeQuery(s))
			}
		}
		if !strings.ContainsAny(q, `'\`) {
			const table = "select * from t where a = '"
			if got := summarizeQuery(table + q + "'"); got.summary != "SELECT t" || got.collection != "t" {
				t.Fatalf("literal %q: %+v, want SELECT t", q, got)
			}
		}
	})
}
