package tracing

import (
	"strings"
	"testing"
)

func TestDescribeQuery(t *testing.T) {
	for _, tt := range []struct {
		query string
		op    string
		need  int
	}{
		{"select 1", "SELECT", 0},
		{"SELECT * FROM t WHERE id = $1", "SELECT", 1},
		{"  \n\tInsert into t values ($1, $2)", "INSERT", 2},
		{"-- comment\nupdate t set a = 1", "UPDATE", 0},
		{"/* a /* nested */ comment */ delete from t", "DELETE", 0},
		{"(select 1) union (select 2)", "SELECT", 0},
		{"with x as (select 1) select * from x", "WITH", 0},
		{"select 1;", "SELECT", 0},
		{"select 1; ; -- trailing\n", "SELECT", 0},
		{"; select 1", "SELECT", 0},
		{"select 1; select 2", "", 0},                      // several statements: no operation
		{"begin; insert into t values (1); commit", "", 0}, // idem
		{"select ';' as semicolon, $1", "SELECT", 1},       // in a string
		{`select "a;b" from t`, "SELECT", 0},               // in a quoted identifier
		{"select $$a;b$$, $tag$ ; $$ $tag$", "SELECT", 0},  // in dollar quotes
		{"select E'\\'; select 1'", "SELECT", 0},           // escaped quote in E''
		{"select 'it''s; fine'", "SELECT", 0},              // doubled quote
		{"select 1 -- ; select 2", "SELECT", 0},            // in a comment
		{"select a$1 from t", "SELECT", 0},                 // $ inside an identifier
		{"listen chan", "LISTEN", 0},
		{"frobnicate the database", "", 0}, // not a command
		{"", "", 0},
		{"   ", "", 0},
		{"'string first'", "", 0},
		{"averyveryverylongidentifierthatisnotakeyword", "", 0},
		{"select $2, $10, $3", "SELECT", 10},                      // the highest n
		{"select $01", "SELECT", 1},                               // as PostgreSQL reads it
		{"select $0", "SELECT", unfillable},                       // no value fills $0
		{"select $65535", "SELECT", 65535},                        // the protocol's limit
		{"select $65536, $1", "SELECT", unfillable},               // beyond it
		{"select $99999999999999999999999", "SELECT", unfillable}, // no overflow
		{"select '$1', $$ $2 $$, \"$3\" -- $4\n/* $5 */", "SELECT", 0},
		{"prepare p(int) as select $1 + 1", "PREPARE", 0},                 // $1 is p's
		{"PREPARE p AS select $1; execute p($2)", "", 2},                  // $2 is the call's
		{"create function f(int) returns int return $1 + 1", "CREATE", 0}, // $1 is f's
		{"create table t as select 1; select $1", "", 1},
		{"(prepare p as select $1)", "PREPARE", 0}, // the first keyword after the parentheses
	} {
		op, need := describeQuery(tt.query)
		if op != tt.op || need != tt.need {
			t.Errorf("describeQuery(%q) = %q, %d; want %q, %d", tt.query, op, need, tt.op, tt.need)
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
		{"select t.true, t. false, true from s.true", "select t.true, t. false, ? from s.true"}, // a name's part
		{"select 0x1F, 0o17, 0b101, 1_000_000", "select ?, ?, ?, ?"},
		{`select "col 1", t1.c2 from t1 -- 'comment' kept`, `select "col 1", t1.c2 from t1 -- 'comment' kept`},
		{"select interval '1 day', date '2020-01-01'", "select interval ?, date ?"},
		{"select -5, a-1 from t", "select -?, a-? from t"},
		{"select 'unterminated", "select ?"},
		{"select $1, 'x'", "select $1, ?"}, // sanitizeQuery itself does not look for placeholders
		{"select a from t", "select a from t"},
		// A string continued over a newline is one constant, read in the mode of its first part.
		{"select 'a'\n'b', 'c'", "select ?, ?"},
		{"select E'a' \n\t'\\' secret'", "select ?"},
		{"select E'a' -- c'\r\n-- d\n'\\' secret'", "select ?"},
		{"select e'a'\n'b'\n'\\' secret'", "select ?"},
		{"select U&'a'\n'\\' UESCAPE '!'", "select ? UESCAPE ?"},
		{"select 'a' 'b'", "select ? ?"},                    // no newline: two tokens (an error)
		{"select E'a' /* c */\n'b'", "select ? /* c */\n?"}, // a block comment does not continue it
		{"select 'a' --\n", "select ? --\n"},
		// A text ending inside a quoted token or comment: only what precedes the first one is kept.
		{"select 1 /* a /* b */ alter role r password 'secret'", "select ? ?"},
		{`alter role "r password 'secret'`, "alter role ?"},
		{`select "a"""`, `select "a"""`},
		{`select "a""`, "select ?"},
		{"select 'a' /* c", "select ?"},
		{"select 1, 'abc, x = 'secret', y = 'z'", "select ?, ?"}, // a quote left out
		{"alter role r password 'a'; /* password 'b*/secret'", "alter role r password ?"},
		{"do $$ begin", "do ?"},
		{"select E'abc\\", "select ?"},
		{"select /* c */ 1", "select /* c */ ?"},
		{"/* c */ select 'a' -- d", "/* c */ select ? -- d"},
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
