package tracing

import (
	"strings"
	"testing"
)

func TestDescribeQuery(t *testing.T) {
	for _, tt := range []struct {
		query  string
		op     string
		params bool
	}{
		{"select 1", "SELECT", false},
		{"SELECT * FROM t WHERE id = $1", "SELECT", true},
		{"  \n\tInsert into t values ($1, $2)", "INSERT", true},
		{"-- comment\nupdate t set a = 1", "UPDATE", false},
		{"/* a /* nested */ comment */ delete from t", "DELETE", false},
		{"(select 1) union (select 2)", "SELECT", false},
		{"with x as (select 1) select * from x", "WITH", false},
		{"select 1;", "SELECT", false},
		{"select 1; ; -- trailing\n", "SELECT", false},
		{"; select 1", "SELECT", false},
		{"select 1; select 2", "", false},                      // several statements: no operation
		{"begin; insert into t values (1); commit", "", false}, // idem
		{"select ';' as semicolon, $1", "SELECT", true},        // in a string
		{`select "a;b" from t`, "SELECT", false},               // in a quoted identifier
		{"select $$a;b$$, $tag$ ; $$ $tag$", "SELECT", false},  // in dollar quotes
		{"select E'\\'; select 1'", "SELECT", false},           // escaped quote in E''
		{"select 'it''s; fine'", "SELECT", false},              // doubled quote
		{"select 1 -- ; select 2", "SELECT", false},            // in a comment
		{"select a$1 from t", "SELECT", false},                 // $ inside an identifier
		{"listen chan", "LISTEN", false},
		{"frobnicate the database", "", false}, // not a command
		{"", "", false},
		{"   ", "", false},
		{"'string first'", "", false},
		{"averyveryverylongidentifierthatisnotakeyword", "", false},
	} {
		op, params := describeQuery(tt.query)
		if op != tt.op || params != tt.params {
			t.Errorf("describeQuery(%q) = %q, %v; want %q, %v", tt.query, op, params, tt.op, tt.params)
		}
	}
}

func TestSanitizeQuery(t *testing.T) {
	for _, tt := range []struct{ query, want string }{
		{"select 1", "select ?"},
		{"select * from t where a = 'x' and b = 42.5e-3 and c = .5", "select * from t where a = ? and b = ? and c = ?"},
		{"alter role app password 's3cr3t'", "alter role app password ?"},
		{"select E'a\\'b', B'101', X'ff', N'n', U&'d\\0061t', e'x'", "select ?, ?, ?, ?, ?, ?"},
		{"select $$secret$$, $q$ it's $$ $q$", "select ?, ?"},
		{"select 'it''s' || 'x'", "select ? || ?"},
		{"select true, FALSE, null", "select ?, ?, null"},
		{"select 0x1F, 0o17, 0b101, 1_000_000", "select ?, ?, ?, ?"},
		{`select "col 1", t1.c2 from t1 -- 'comment' kept`, `select "col 1", t1.c2 from t1 -- 'comment' kept`},
		{"select interval '1 day', date '2020-01-01'", "select interval ?, date ?"},
		{"select -5, a-1 from t", "select -?, a-? from t"},
		{"select 'unterminated", "select ?"},
		{"select $1, 'x'", "select $1, ?"}, // sanitizeQuery itself does not look for placeholders
		{"select a from t", "select a from t"},
	} {
		if got := sanitizeQuery(tt.query); got != tt.want {
			t.Errorf("sanitizeQuery(%q) = %q, want %q", tt.query, got, tt.want)
		}
	}
}

func TestDescribeQueryAllocatesNothing(t *testing.T) {
	q := "/* c */ select a, 'b', $1 from t where c = 1"
	if n := testing.AllocsPerRun(100, func() { describeQuery(q) }); n != 0 {
		t.Errorf("describeQuery: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { sanitizeQuery("select a from t") }); n != 0 {
		t.Errorf("sanitizeQuery without literals: %v allocations, want 0", n)
	}
}

// FuzzSanitizeQuery checks that the lexer never panics, that sanitizing twice changes nothing,
// and that a string literal (without quote or backslash) after a keyword is always replaced.
func FuzzSanitizeQuery(f *testing.F) {
	for _, s := range []string{"select 1", "select 'a''b'", "select $$x$$", "select E'\\''", "/* /* */", "$1", "0x", "1e+", "u&'", "$a$"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		describeQuery(q)
		s := sanitizeQuery(q)
		if s2 := sanitizeQuery(s); s2 != s {
			t.Errorf("sanitizeQuery(%q) = %q, then %q", q, s, s2)
		}
		if !strings.ContainsAny(q, `'\`) {
			if got := sanitizeQuery("select '" + q + "'"); got != "select ?" {
				t.Errorf("literal %q: %q, want select ?", q, got)
			}
		}
	})
}
