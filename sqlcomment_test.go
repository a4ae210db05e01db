package pgconnector_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgconnector/pgconnector"
	"github.com/pgconnector/pgconnector/tracing"
)

// traceparent is the sqlcommenter comment of span s.
func traceparent(s sdktrace.ReadOnlySpan) string {
	sc := s.SpanContext()
	return fmt.Sprintf("/*traceparent='00-%s-%s-01'*/", sc.TraceID(), sc.SpanID())
}

// commentConn is one connection of a connector with WithSQLCommenter(mode) and a temporary table
// cq for what current_query() returned inside a multi-statement text.
func commentConn(t *testing.T, mode tracing.SQLCommentMode, dsn string) (*observed, *sql.Conn) {
	t.Helper()
	o := newObserved(t, dsn, pgconnector.WithSQLCommenter(mode))
	conn, err := o.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.ExecContext(context.Background(), "create temporary table cq (n serial, q text)"); err != nil {
		t.Fatal(err)
	}
	return o, conn
}

// serverStatements returns how many statements the server holds prepared on conn's session
// (pgx's statement cache prepares each statement it caches).
func serverStatements(t *testing.T, conn *sql.Conn) (prepared int) {
	t.Helper()
	err := pgconnector.PgxConn(conn, func(pc *pgx.Conn) error {
		return pc.QueryRow(context.Background(), "select count(*) from pg_prepared_statements", pgx.QueryExecModeSimpleProtocol).Scan(&prepared)
	})
	if err != nil {
		t.Fatal(err)
	}
	return prepared
}

// The text the server received (current_query(), as the backend holds it for
// pg_stat_activity) ends with the comment of the statement's span, placed where it changes
// nothing; which statements are commented depends on the mode, and SQLCommentAll leaves pgx's
// statement cache and the server's prepared statements as they were.
func TestSQLCommenter(t *testing.T) {
	plain, _ := servers(t)
	// current returns what current_query() said of a query, and its span.
	current := func(t *testing.T, o *observed, conn *sql.Conn, query string, args ...any) (string, sdktrace.ReadOnlySpan) {
		t.Helper()
		var text string
		got := o.under(t, func(ctx context.Context) {
			if err := conn.QueryRowContext(ctx, query, args...).Scan(&text); err != nil {
				t.Fatal(err)
			}
		})
		if len(got) != 1 {
			t.Fatalf("spans %s, want one", spanNames(got))
		}
		return text, got[0]
	}
	// stored runs exec (it saves current_query() into cq) and returns what it saved, and the
	// exec's span.
	stored := func(t *testing.T, o *observed, conn *sql.Conn, exec string, args ...any) ([]string, sdktrace.ReadOnlySpan) {
		t.Helper()
		got := o.under(t, func(ctx context.Context) {
			if _, err := conn.ExecContext(ctx, exec, args...); err != nil {
				t.Fatal(err)
			}
		})
		if len(got) != 1 {
			t.Fatalf("spans %s, want one", spanNames(got))
		}
		rows, err := conn.QueryContext(context.Background(), "select q from cq order by n")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var saved []string
		for rows.Next() {
			var q string
			if err := rows.Scan(&q); err != nil {
				t.Fatal(err)
			}
			saved = append(saved, q)
		}
		if _, err := conn.ExecContext(context.Background(), "truncate cq"); err != nil {
			t.Fatal(err)
		}
		return saved, got[0]
	}

	t.Run("all", func(t *testing.T) {
		o, conn := commentConn(t, tracing.SQLCommentAll, plain.DSN())
		text, span := current(t, o, conn, "select current_query()")
		if want := "select current_query() " + traceparent(span); text != want {
			t.Errorf("the server got %q, want %q", text, want)
		}
		// A query pgx would run from its statement cache, three times: commented each time,
		// nothing more prepared.
		const q = "select current_query() where $1::int = 1"
		prepared := serverStatements(t, conn)
		for range 3 {
			text, span := current(t, o, conn, q, 1)
			if want := q + " " + traceparent(span); text != want {
				t.Errorf("the server got %q, want %q", text, want)
			}
		}
		if p := serverStatements(t, conn); p != prepared {
			t.Errorf("%d statements prepared on the server, %d before", p, prepared)
		}
		// The call's own mode is kept when it caches nothing.
		text, span = current(t, o, conn, "select current_query() where $1::int = 1", pgx.QueryExecModeSimpleProtocol, 1)
		if !strings.HasSuffix(text, " "+traceparent(span)) || !strings.HasPrefix(text, "select current_query() where ") {
			t.Errorf("the server got %q", text)
		}
		// A text that ends with a block comment already is sent as written.
		text, _ = current(t, o, conn, "select current_query() /* mine */")
		if text != "select current_query() /* mine */" {
			t.Errorf("the server got %q, want the text as written", text)
		}
	})

	t.Run("uncached", func(t *testing.T) {
		o, conn := commentConn(t, tracing.SQLCommentUncached, plain.DSN())
		// From pgx's statement cache: as written.
		const q = "select current_query() where $1::int = 1"
		if text, _ := current(t, o, conn, q, 1); text != q {
			t.Errorf("the server got %q, want %q", text, q)
		}
		// Simple protocol, exec mode: commented.
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
			text, span := current(t, o, conn, "select current_query()", mode)
			if want := "select current_query() " + traceparent(span); text != want {
				t.Errorf("%v: the server got %q, want %q", mode, text, want)
			}
		}
		// An exec without values runs with the simple protocol: several statements, a trailing
		// semicolon, a line comment at the end. Every statement runs; the comment ends the text.
		for _, tt := range []struct{ exec, before, after string }{
			{"insert into cq (q) select current_query(); insert into cq (q) values ('second')", "", ""},
			{"insert into cq (q) select current_query(); insert into cq (q) values ('second');", "", ";"},
			{"insert into cq (q) select current_query(); insert into cq (q) values ('second') -- done", "\n", ""},
		} {
			saved, span := stored(t, o, conn, tt.exec)
			body := strings.TrimSuffix(tt.exec, tt.after)
			sep := tt.before
			if sep == "" {
				sep = " "
			}
			want := body + sep + traceparent(span) + tt.after
			if len(saved) != 2 || saved[0] != want || saved[1] != "second" {
				t.Errorf("%q: saved %q, want [%q second]", tt.exec, saved, want)
			}
		}
	})

	t.Run("unsampled", func(t *testing.T) {
		o, conn := commentConn(t, tracing.SQLCommentAll, plain.DSN())
		ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, // not sampled: neither is the statement's span
		}))
		var text string
		if err := conn.QueryRowContext(ctx, "select current_query()").Scan(&text); err != nil {
			t.Fatal(err)
		}
		if text != "select current_query()" {
			t.Errorf("the server got %q for an unsampled span", text)
		}
		_ = o
	})

	t.Run("off", func(t *testing.T) {
		o, conn := commentConn(t, tracing.SQLCommentOff, plain.DSN())
		if text, _ := current(t, o, conn, "select current_query()", pgx.QueryExecModeSimpleProtocol); text != "select current_query()" {
			t.Errorf("the server got %q", text)
		}
	})
}

// Another session sees the comment, with the statement's trace ID, in pg_stat_activity while
// the statement runs.
func TestSQLCommenterInPgStatActivity(t *testing.T) {
	plain, _ := servers(t)
	o, conn := commentConn(t, tracing.SQLCommentUncached, plain.DSN())
	observer, err := pgx.Connect(context.Background(), plain.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer observer.Close(context.Background())
	marker := fmt.Sprintf("sqlcomment_%d", time.Now().UnixNano())

	seen := make(chan string, 1)
	got := o.under(t, func(ctx context.Context) {
		done := make(chan error, 1)
		go func() {
			_, err := conn.ExecContext(ctx, "select pg_sleep(2) as "+marker)
			done <- err
		}()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			var q string
			err := observer.QueryRow(context.Background(),
				"select query from pg_stat_activity where state = 'active' and pid <> pg_backend_pid() and query like '%' || $1 || '%'", marker).Scan(&q)
			if err == nil {
				seen <- q
				break
			}
			if err != pgx.ErrNoRows {
				t.Error(err)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	if len(got) != 1 {
		t.Fatalf("spans %s, want one", spanNames(got))
	}
	select {
	case q := <-seen:
		if want := "select pg_sleep(2) as " + marker + " " + traceparent(got[0]); q != want {
			t.Errorf("pg_stat_activity.query %q, want %q", q, want)
		}
		if !strings.Contains(q, got[0].SpanContext().TraceID().String()) {
			t.Errorf("pg_stat_activity.query %q does not hold the trace ID", q)
		}
	default:
		t.Fatal("the statement never showed in pg_stat_activity")
	}
}
