package stdlibsuite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// fooRow is a row of fooSeries.
type fooRow struct {
	S string
	N int64
}

// fooSeries selects 'foo' beside each number from $1 to $2.
const fooSeries = "select 'foo', n from generate_series($1::int, $2::int) n"

// scanFoo reads rows of fooSeries to the end and closes them.
func scanFoo(t *testing.T, rows *sql.Rows, err error) []fooRow {
	t.Helper()
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	defer rows.Close()
	var got []fooRow
	for rows.Next() {
		var r fooRow
		if err := rows.Scan(&r.S, &r.N); err != nil {
			t.Fatalf("Scan: %v", err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("rows.Err: %v", err)
	}
	if err := rows.Close(); err != nil {
		t.Fatalf("rows.Close: %v", err)
	}
	return got
}

// wantFoo checks that got holds the rows "foo", 1 to "foo", n.
func wantFoo(t *testing.T, got []fooRow, n int) {
	t.Helper()
	if len(got) != n {
		t.Errorf("%d rows, want %d", len(got), n)
	}
	for i, r := range got {
		if r != (fooRow{"foo", int64(i + 1)}) {
			t.Errorf("row %d: %+v, want {foo %d}", i, r, i+1)
		}
	}
}

// A prepared statement's query returns its rows and closes (upstream TestNormalLifeCycle).
func TestPreparedQuery(t *testing.T) {
	t.Parallel()
	bothDrivers(t, onlyDefault, func(t *testing.T, db *sql.DB) []fooRow {
		ctx := caseContext(t)
		stmt, err := db.PrepareContext(ctx, fooSeries)
		if err != nil {
			t.Fatal(err)
		}
		defer stmt.Close()
		rowsGot, err := stmt.QueryContext(ctx, int32(1), int32(10))
		got := scanFoo(t, rowsGot, err)
		wantFoo(t, got, 10)
		if err := stmt.Close(); err != nil {
			t.Errorf("stmt.Close: %v", err)
		}
		return got
	})
}

// Statements prepared in a transaction execute (upstream TestStmtExec), and one prepared
// outside with ExecContext (TestStmtExecContextSuccess).
func TestPreparedExec(t *testing.T) {
	t.Parallel()
	bothDrivers(t, onlyDefault, func(t *testing.T, db *sql.DB) []int64 {
		ctx := caseContext(t)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		create, err := tx.PrepareContext(ctx, "create temporary table t(a varchar not null)")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := create.ExecContext(ctx); err != nil {
			t.Fatal(err)
		}
		if err := create.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		insert, err := tx.PrepareContext(ctx, "insert into t values($1::text)")
		if err != nil {
			t.Fatal(err)
		}
		res, err := insert.ExecContext(ctx, "foo")
		if err != nil {
			t.Fatal(err)
		}
		inTx, err := res.RowsAffected()
		if err != nil || inTx != 1 {
			t.Errorf("RowsAffected in the transaction: %d, %v; want 1", inTx, err)
		}
		if err := insert.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := tx.Rollback(); err != nil {
			t.Errorf("Rollback: %v", err)
		}

		conn := mustConn(t, ctx, db)
		mustExec(t, ctx, conn, "create temporary table t(id int primary key)")
		stmt, err := conn.PrepareContext(ctx, "insert into t(id) values ($1::int4)")
		if err != nil {
			t.Fatal(err)
		}
		defer stmt.Close()
		res, err = stmt.ExecContext(ctx, 42)
		if err != nil {
			t.Fatal(err)
		}
		outside, err := res.RowsAffected()
		if err != nil || outside != 1 {
			t.Errorf("RowsAffected: %d, %v; want 1", outside, err)
		}
		return []int64{inTx, outside}
	})
}

// Rows closed before they are read leave the statement and connection usable (upstream
// TestQueryCloseRowsEarly).
func TestQueryCloseRowsEarly(t *testing.T) {
	t.Parallel()
	bothDrivers(t, onlyDefault, func(t *testing.T, db *sql.DB) []fooRow {
		ctx := caseContext(t)
		stmt, err := db.PrepareContext(ctx, fooSeries)
		if err != nil {
			t.Fatal(err)
		}
		defer stmt.Close()
		rows, err := stmt.QueryContext(ctx, int32(1), int32(10))
		if err != nil {
			t.Fatal(err)
		}
		if err := rows.Close(); err != nil {
			t.Fatalf("closing unread rows: %v", err)
		}
		rowsGot, err := stmt.QueryContext(ctx, int32(1), int32(10))
		got := scanFoo(t, rowsGot, err)
		wantFoo(t, got, 10)
		return got
	})
}

// Exec on the pool, in each mode, reports the rows affected (upstream TestConnExec,
// TestConnExecContextSuccess).
func TestExec(t *testing.T) {
	t.Parallel()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) int64 {
		ctx := caseContext(t)
		conn := mustConn(t, ctx, db)
		mustExec(t, ctx, conn, "create temporary table t(a varchar not null)")
		n, err := mustExec(t, ctx, conn, "insert into t values('hey')").RowsAffected()
		if err != nil || n != 1 {
			t.Errorf("RowsAffected: %d, %v; want 1", n, err)
		}
		return n
	})
}

// Queries with arguments in each mode return their rows (upstream TestConnQuery,
// TestQueryLifeCycle, TestConnQueryContextSuccess), an empty result none.
func TestQuery(t *testing.T) {
	t.Parallel()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) [][]fooRow {
		ctx := caseContext(t)
		rowsInt32s, err := db.QueryContext(ctx, fooSeries, int32(1), int32(10))
		int32s := scanFoo(t, rowsInt32s, err)
		wantFoo(t, int32s, 10)
		rowsInts, err := db.QueryContext(ctx, "select 'foo', n from generate_series($1::int, $2::int) n where 3 = $3", 1, 10, 3)
		ints := scanFoo(t, rowsInts, err)
		wantFoo(t, ints, 10)
		rowsNone, err := db.QueryContext(ctx, "select 'foo', 1::int8 where false")
		none := scanFoo(t, rowsNone, err)
		wantFoo(t, none, 0)
		return [][]fooRow{int32s, ints, none}
	})
}

// Fifty goroutines insert, update and read back rows through one pool (upstream
// TestConnConcurrency), here with at most ten connections.
func TestConcurrency(t *testing.T) {
	t.Parallel()
	const goroutines = 50
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []string {
		ctx := caseContext(t)
		db.SetMaxOpenConns(10)
		table := uniqueName("concurrency")
		mustExec(t, ctx, db, "create table "+table+" (id integer primary key, str text, dur_str interval)")
		t.Cleanup(func() { db.Exec("drop table " + table) })

		errs := make(chan error, goroutines)
		var wg sync.WaitGroup
		for i := 1; i <= goroutines; i++ {
			wg.Go(func() {
				if _, err := db.ExecContext(ctx, "insert into "+table+" values($1)", i); err != nil {
					errs <- fmt.Errorf("insert %d: %w", i, err)
					return
				}
				if _, err := db.ExecContext(ctx, "update "+table+" set str = $1 where id = $2", strconv.Itoa(i), i); err != nil {
					errs <- fmt.Errorf("update %d: %w", i, err)
					return
				}
				if _, err := db.ExecContext(ctx, "update "+table+" set dur_str = $1 where id = $2", time.Duration(i)*time.Second, i); err != nil {
					errs <- fmt.Errorf("update %d: %w", i, err)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}

		got := make([]string, goroutines)
		errs = make(chan error, goroutines)
		for i := 1; i <= goroutines; i++ {
			wg.Go(func() {
				var id int
				var str string
				var d pgtype.Interval
				err := db.QueryRowContext(ctx, "select id, str, dur_str from "+table+" where id = $1", i).Scan(&id, &str, &d)
				if err != nil {
					errs <- fmt.Errorf("select %d: %w", i, err)
					return
				}
				want := pgtype.Interval{Microseconds: int64(i) * time.Second.Microseconds(), Valid: true}
				if id != i || str != strconv.Itoa(i) || d != want {
					errs <- fmt.Errorf("row %d: %d, %q, %+v", i, id, str, d)
				}
				got[i-1] = fmt.Sprintf("%d %s %dus", id, str, d.Microseconds)
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		return got
	})
}

// Each column gets a scan plan of its own (upstream TestConnQueryDifferentScanPlansIssue781).
func TestScanPlanPerColumn(t *testing.T) {
	t.Parallel()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []any {
		var b bool
		var s string
		if err := db.QueryRowContext(caseContext(t), "select true, 'foo'").Scan(&b, &s); err != nil {
			t.Fatal(err)
		}
		if !b || s != "foo" {
			t.Errorf("got %v, %q; want true, foo", b, s)
		}
		return []any{b, s}
	})
}

// A NULL argument comes back as a NULL (upstream TestConnQueryNull).
func TestQueryNull(t *testing.T) {
	t.Parallel()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []sql.NullInt64 {
		rows, err := db.QueryContext(caseContext(t), "select $1::int", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var got []sql.NullInt64
		for rows.Next() {
			var n sql.NullInt64
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			got = append(got, n)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Valid {
			t.Errorf("got %+v, want one NULL", got)
		}
		return got
	})
}

// bytea and text scan into []byte and sql.RawBytes (upstream TestConnQueryRowByteSlice, and
// the byte cases of TestScanScalarPreservesDatabaseSQLConversions).
func TestByteSlices(t *testing.T) {
	t.Parallel()
	cases := []struct {
		query string
		want  []byte
	}{
		{`select E'\\xdeadbeef'::bytea`, []byte{0xde, 0xad, 0xbe, 0xef}},
		{"select decode('6162', 'hex')", []byte("ab")},
		{"select 'text'::text", []byte("text")},
		{"select ''::bytea", []byte{}},
	}
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) [][]byte {
		ctx := caseContext(t)
		var got [][]byte
		for _, c := range cases {
			var b []byte
			if err := db.QueryRowContext(ctx, c.query).Scan(&b); err != nil {
				t.Errorf("%s into []byte: %v", c.query, err)
			} else if !bytesEqual(b, c.want) {
				t.Errorf("%s into []byte: %q, want %q", c.query, b, c.want)
			}
			got = append(got, b)

			rows, err := db.QueryContext(ctx, c.query)
			if err != nil {
				t.Fatal(err)
			}
			if !rows.Next() {
				t.Fatalf("%s: no row: %v", c.query, rows.Err())
			}
			var raw sql.RawBytes
			if err := rows.Scan(&raw); err != nil {
				t.Errorf("%s into sql.RawBytes: %v", c.query, err)
			} else if !bytesEqual(raw, c.want) {
				t.Errorf("%s into sql.RawBytes: %q, want %q", c.query, raw, c.want)
			}
			got = append(got, slices.Clone([]byte(raw)))
			if err := rows.Close(); err != nil {
				t.Errorf("rows.Close: %v", err)
			}
		}
		var null []byte
		if err := db.QueryRowContext(ctx, "select null::bytea").Scan(&null); err != nil || null != nil {
			t.Errorf("NULL into []byte: %v, %v; want nil", null, err)
		}
		return append(got, null)
	})
}

// bytesEqual is bytes.Equal that also tells nil from empty.
func bytesEqual(a, b []byte) bool { return slices.Equal(a, b) && (a == nil) == (b == nil) }

// A syntax error is the server's *pgconn.PgError (upstream TestConnQueryFailure).
func TestQueryFailure(t *testing.T) {
	t.Parallel()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) string {
		rows, err := db.QueryContext(caseContext(t), "select 'foo")
		if err == nil {
			rows.Close()
			t.Fatal("no error")
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			t.Fatalf("%T %v, want a *pgconn.PgError", err, err)
		}
		if pgErr.Code != "42601" {
			t.Errorf("SQLSTATE %s, want 42601", pgErr.Code)
		}
		return pgErr.Code + " " + pgErr.Message
	})
}

// Go slices pass as array arguments, NULL elements included (upstream
// TestConnSimpleSlicePassThrough, and the argument half of TestGoArray).
func TestSliceArguments(t *testing.T) {
	t.Parallel()
	a, c := "a", "c"
	cases := []struct {
		query string
		arg   any
		want  string
	}{
		{"select cardinality($1::text[])::text", []string{"a", "b", "c"}, "3"},
		{"select $1::text[]::text", []string{"John", "Jane"}, "{John,Jane}"},
		{"select $1::int8[]::text", []int64{1, 2, 3}, "{1,2,3}"},
		{"select $1::text[]::text", []*string{&a, nil, &c}, "{a,NULL,c}"},
		{"select $1::text[]::text", []string{}, "{}"},
		{"select coalesce($1::text[]::text, 'null')", []string(nil), "null"},
	}
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []string {
		ctx := caseContext(t)
		var got []string
		for _, c := range cases {
			var s string
			if err := db.QueryRowContext(ctx, c.query, c.arg).Scan(&s); err != nil {
				t.Errorf("%s with %#v: %v", c.query, c.arg, err)
			} else if s != c.want {
				t.Errorf("%s with %#v: %q, want %q", c.query, c.arg, s, c.want)
			}
			got = append(got, s)
		}
		return got
	})
}

// Arrays and ranges scan into Go and pgtype values through pgx's type map as an sql.Scanner,
// on every Go release (upstream TestConnQueryScanGoArray, TestConnQueryScanArray,
// TestConnQueryScanRange).
func TestScanThroughTypeMap(t *testing.T) {
	t.Parallel()
	type result struct {
		Slice     []int64
		Array     pgtype.Array[int64]
		NullArray pgtype.Array[int64]
		Range     pgtype.Range[pgtype.Int4]
	}
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) result {
		ctx := caseContext(t)
		m := pgtype.NewMap()
		var r result
		if err := db.QueryRowContext(ctx, "select '{1,2,3}'::bigint[]").Scan(m.SQLScanner(&r.Slice)); err != nil {
			t.Error(err)
		}
		if !slices.Equal(r.Slice, []int64{1, 2, 3}) {
			t.Errorf("[]int64: %v", r.Slice)
		}
		if err := db.QueryRowContext(ctx, "select '{1,2,3}'::bigint[]").Scan(m.SQLScanner(&r.Array)); err != nil {
			t.Error(err)
		}
		want := pgtype.Array[int64]{Elements: []int64{1, 2, 3}, Dims: []pgtype.ArrayDimension{{Length: 3, LowerBound: 1}}, Valid: true}
		if !deepEqual(r.Array, want) {
			t.Errorf("pgtype.Array: %+v, want %+v", r.Array, want)
		}
		r.NullArray = want
		if err := db.QueryRowContext(ctx, "select null::bigint[]").Scan(m.SQLScanner(&r.NullArray)); err != nil {
			t.Error(err)
		}
		if !deepEqual(r.NullArray, pgtype.Array[int64]{}) {
			t.Errorf("NULL into pgtype.Array: %+v", r.NullArray)
		}
		if err := db.QueryRowContext(ctx, "select int4range(1, 5)").Scan(m.SQLScanner(&r.Range)); err != nil {
			t.Error(err)
		}
		if r.Range != int4Range(1, 5) {
			t.Errorf("pgtype.Range: %+v", r.Range)
		}
		return r
	})
}

// deepEqual is reflect.DeepEqual.
func deepEqual(a, b any) bool { return reflect.DeepEqual(a, b) }

// int4Range is [lower, upper) as pgx scans it.
func int4Range(lower, upper int32) pgtype.Range[pgtype.Int4] {
	return pgtype.Range[pgtype.Int4]{
		Lower:     pgtype.Int4{Int32: lower, Valid: true},
		Upper:     pgtype.Int4{Int32: upper, Valid: true},
		LowerType: pgtype.Inclusive,
		UpperType: pgtype.Exclusive,
		Valid:     true,
	}
}

// Types database/sql has no value for come as their text (upstream TestConnQueryRowPgxBinary,
// TestConnQueryRowUnknownType).
func TestTypesAsText(t *testing.T) {
	t.Parallel()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []string {
		ctx := caseContext(t)
		var got []string
		for _, c := range []struct{ query, value string }{
			{"select $1::int4[]", "{1,2,3}"},
			{"select $1::point", "(1,2)"},
		} {
			var s string
			if err := db.QueryRowContext(ctx, c.query, c.value).Scan(&s); err != nil {
				t.Errorf("%s: %v", c.query, err)
			} else if s != c.value {
				t.Errorf("%s: %q, want %q", c.query, s, c.value)
			}
			got = append(got, s)
		}
		return got
	})
}

// json comes as its bytes, into []byte and json.RawMessage (upstream
// TestConnQueryJSONIntoByteSlice, TestScanJSONIntoJSONRawMessage).
func TestJSONOut(t *testing.T) {
	t.Parallel()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []string {
		ctx := caseContext(t)
		conn := mustConn(t, ctx, db)
		mustExec(t, ctx, conn, `create temporary table docs(body json not null);
			insert into docs(body) values('{"foo": "bar"}');`)
		var body []byte
		if err := conn.QueryRowContext(ctx, "select * from docs").Scan(&body); err != nil {
			t.Error(err)
		} else if string(body) != `{"foo": "bar"}` {
			t.Errorf("json into []byte: %q", body)
		}
		var msg json.RawMessage
		if err := conn.QueryRowContext(ctx, "select '{}'::json").Scan(&msg); err != nil {
			t.Error(err)
		} else if string(msg) != "{}" {
			t.Errorf("json into json.RawMessage: %q", msg)
		}
		return []string{string(body), string(msg)}
	})
}

// A []byte argument goes into a json column as its text in the modes that learn the
// parameter's type from the server; the exec mode and the simple protocol send it as bytea
// text, which json refuses (upstream TestConnExecInsertByteSliceIntoJSON runs in the default
// mode only).
func TestJSONIn(t *testing.T) {
	t.Parallel()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) string {
		ctx := caseContext(t)
		conn := mustConn(t, ctx, db)
		mustExec(t, ctx, conn, "create temporary table docs(body json not null)")
		_, err := conn.ExecContext(ctx, "insert into docs(body) values($1)", []byte(`{"foo": "bar"}`))
		var pgErr *pgconn.PgError
		if known := slices.Contains(knownOIDModes, defaultModeOf(t, conn)); !known && (!errors.As(err, &pgErr) || pgErr.Code != "22P02") {
			t.Errorf("insert: %v; want the server's refusal of the bytea text (SQLSTATE 22P02)", err)
		} else if known && err != nil {
			t.Errorf("insert: %v", err)
		}
		var body []byte
		if err == nil {
			if err := conn.QueryRowContext(ctx, "select body from docs").Scan(&body); err != nil {
				t.Fatal(err)
			}
			if string(body) != `{"foo": "bar"}` {
				t.Errorf("read back %q", body)
			}
		}
		return fmt.Sprintf("%q %v", body, err)
	})
}

// A deferred constraint trigger's error reaches QueryRow's Scan (upstream
// TestConnQueryRowConstraintErrors, pgx issue 958).
func TestDeferredConstraintError(t *testing.T) {
	t.Parallel()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) string {
		ctx := caseContext(t)
		conn := mustConn(t, ctx, db)
		mustExec(t, ctx, conn, `create temporary table defer_test (
			id text primary key,
			n int not null, unique (n),
			unique (n) deferrable initially deferred)`)
		mustExec(t, ctx, conn, `create function pg_temp.refuse_four() returns trigger language plpgsql as $$
			begin
				if new.n = 4 then
					raise exception 'n can''t be 4!';
				end if;
				return new;
			end$$`)
		mustExec(t, ctx, conn, `create constraint trigger refuse_four
			after insert or update on defer_test
			deferrable initially deferred
			for each row
			execute function pg_temp.refuse_four()`)
		mustExec(t, ctx, conn, "insert into defer_test (id, n) values ('a', 1), ('b', 2), ('c', 3)")
		var id string
		err := conn.QueryRowContext(ctx, "insert into defer_test (id, n) values ('e', 4) returning id").Scan(&id)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Message != "n can't be 4!" {
			t.Errorf("got %q, %v; want the trigger's error", id, err)
		}
		return errText(err)
	})
}

// Each pgx.QueryExecMode passed as the first argument of a query or exec overrides the
// connection's default (pgx's driver hands the arguments to pgx.Conn, which takes its options
// first): on a pool of each default mode, each mode as an argument. A prepared statement has
// its own parameters: there database/sql counts the mode as one argument too many.
func TestQueryExecModeArgument(t *testing.T) {
	t.Parallel()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []string {
		ctx := caseContext(t)
		conn := mustConn(t, ctx, db)
		mustExec(t, ctx, conn, "create temporary table t(n int)")
		var got []string
		for _, mode := range allModes {
			var n int
			if err := conn.QueryRowContext(ctx, "select $1::int + 1", mode, 41).Scan(&n); err != nil || n != 42 {
				t.Errorf("%v: query: %d, %v; want 42", mode, n, err)
			}
			res, err := conn.ExecContext(ctx, "insert into t values ($1)", mode, n)
			var affected int64
			if err == nil {
				affected, err = res.RowsAffected()
			}
			if err != nil || affected != 1 {
				t.Errorf("%v: exec: %d rows, %v; want 1", mode, affected, err)
			}
			noArgs, err := conn.ExecContext(ctx, "delete from t", mode)
			var deleted int64
			if err == nil {
				deleted, err = noArgs.RowsAffected()
			}
			if err != nil || deleted != 1 {
				t.Errorf("%v: exec without values: %d rows, %v; want 1", mode, deleted, err)
			}
			got = append(got, fmt.Sprintf("%v: %d, %d, %d", mode, n, affected, deleted))
		}
		rowsSeries, err := conn.QueryContext(ctx, fooSeries, pgx.QueryExecModeSimpleProtocol, 1, 3)
		series := scanFoo(t, rowsSeries, err)
		wantFoo(t, series, 3)

		stmt, err := conn.PrepareContext(ctx, "select $1::int")
		if err != nil {
			t.Fatal(err)
		}
		defer stmt.Close()
		var n int
		err = stmt.QueryRowContext(ctx, pgx.QueryExecModeSimpleProtocol, 7).Scan(&n)
		if err == nil || err.Error() != "sql: expected 1 arguments, got 2" {
			t.Errorf("prepared statement with a mode: %v; want database/sql's count error", err)
		}
		return append(got, errText(err))
	})
}

// pgx.NamedArgs, an argument pgx's driver hands on as it is, rewrite @name placeholders.
func TestNamedArgs(t *testing.T) {
	t.Parallel()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []int {
		ctx := caseContext(t)
		var sum int
		if err := db.QueryRowContext(ctx, "select @a::int + @b::int", pgx.NamedArgs{"a": 40, "b": 2}).Scan(&sum); err != nil || sum != 42 {
			t.Errorf("query: %d, %v; want 42", sum, err)
		}
		res, err := db.ExecContext(ctx, "select generate_series(1, @n::int)", pgx.NamedArgs{"n": 3})
		var n int64
		if err == nil {
			n, err = res.RowsAffected()
		}
		if err != nil || n != 3 {
			t.Errorf("exec: %d, %v; want 3 rows", n, err)
		}
		return []int{sum, int(n)}
	})
}

// Several statements in one text: pgx's driver returns the rows of the first and no other
// result set (its rows have no NextResultSet, so database/sql reports none), in the simple
// protocol, as an argument or as the default; the extended protocol refuses the text. An exec
// without values runs them all in the simple protocol whatever the mode, with the last one's
// rows affected. A column's Nullable is unknown.
func TestMultipleStatements(t *testing.T) {
	t.Parallel()
	type result struct {
		Columns   [][]string
		Rows      [][]int64
		Next      []bool
		QueryErr  string
		Affected  int64
		Nullables []string
	}
	const twoSelects = "select 1::int8 as a union all select 10; select 2::int8 as b, 3::int8 as c"
	read := func(t *testing.T, rows *sql.Rows) ([]string, []int64, bool) {
		t.Helper()
		defer rows.Close()
		cols, err := rows.Columns()
		if err != nil {
			t.Fatal(err)
		}
		var vals []int64
		for rows.Next() {
			var v int64
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			vals = append(vals, v)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return cols, vals, rows.NextResultSet()
	}
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) result {
		ctx := caseContext(t)
		conn := mustConn(t, ctx, db)
		var r result
		rows, err := conn.QueryContext(ctx, twoSelects, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatal(err)
		}
		cols, vals, next := read(t, rows)
		r.Columns, r.Rows, r.Next = append(r.Columns, cols), append(r.Rows, vals), append(r.Next, next)
		if !slices.Equal(cols, []string{"a"}) || !slices.Equal(vals, []int64{1, 10}) || next {
			t.Errorf("simple protocol as an argument: %v %v, next result set %v; want [a] [1 10], none", cols, vals, next)
		}

		rows, err = conn.QueryContext(ctx, twoSelects)
		simple := defaultModeOf(t, conn) == pgx.QueryExecModeSimpleProtocol
		switch {
		case simple && err != nil:
			t.Errorf("simple protocol by default: %v", err)
		case simple:
			cols, vals, next = read(t, rows)
			r.Columns, r.Rows, r.Next = append(r.Columns, cols), append(r.Rows, vals), append(r.Next, next)
			if !slices.Equal(vals, []int64{1, 10}) || next {
				t.Errorf("simple protocol by default: %v, next result set %v; want [1 10], none", vals, next)
			}
		case err == nil:
			rows.Close()
			t.Errorf("the extended protocol ran two statements")
		default:
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "42601" {
				t.Errorf("extended protocol: %v; want SQLSTATE 42601", err)
			}
			r.QueryErr = errText(err)
		}

		res, err := conn.ExecContext(ctx, `create temporary table t(n int);
			insert into t values (1), (2);
			insert into t select n from t`)
		if err != nil {
			t.Fatal(err)
		}
		if r.Affected, err = res.RowsAffected(); err != nil || r.Affected != 2 {
			t.Errorf("RowsAffected: %d, %v; want the last insert's 2", r.Affected, err)
		}

		rows, err = conn.QueryContext(ctx, "select 1::int as a, null::text as b")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		types, err := rows.ColumnTypes()
		if err != nil {
			t.Fatal(err)
		}
		for _, ct := range types {
			nullable, ok := ct.Nullable()
			if nullable || ok {
				t.Errorf("%s: Nullable %v, %v; want unknown", ct.Name(), nullable, ok)
			}
			r.Nullables = append(r.Nullables, fmt.Sprintf("%s %v %v", ct.Name(), nullable, ok))
		}
		return r
	})
}

// defaultModeOf returns the default exec mode of conn's pgx connection.
func defaultModeOf(t *testing.T, conn *sql.Conn) pgx.QueryExecMode {
	t.Helper()
	var mode pgx.QueryExecMode
	err := conn.Raw(func(dc any) error {
		pc, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			return fmt.Errorf("%T has no Conn method", dc)
		}
		mode = pc.Conn().Config().DefaultQueryExecMode
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return mode
}

// A context canceled while rows are read ends them with context.Canceled; pgx closes the
// connection under them (its context watcher), so database/sql discards it and the pool
// opens another.
func TestCancelWhileReadingRows(t *testing.T) {
	t.Parallel()
	type result struct {
		RowsErr         string
		SameConnErr     string
		SameConnPID     bool
		PoolReusedConn  bool
		ReadBeforeClose int
	}
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) result {
		ctx := caseContext(t)
		conn := mustConn(t, ctx, db)
		var pid int
		if err := conn.QueryRowContext(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		qctx, cancel := context.WithCancel(ctx)
		defer cancel()
		rows, err := conn.QueryContext(qctx, "select generate_series(1, 10000000) as n")
		if err != nil {
			t.Fatal(err)
		}
		var r result
		for r.ReadBeforeClose < 10 && rows.Next() {
			var n int
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			r.ReadBeforeClose++
		}
		cancel()
		start := time.Now()
		for rows.Next() { // what database/sql still holds, if anything
		}
		rowsErr := rows.Err()
		rows.Close()
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("the rows ended %v after the cancel", d)
		}
		if !errors.Is(rowsErr, context.Canceled) {
			t.Errorf("rows.Err: %v; want context.Canceled", rowsErr)
		}
		r.RowsErr = errText(rowsErr)

		var again int
		err = conn.QueryRowContext(ctx, "select pg_backend_pid()").Scan(&again)
		r.SameConnErr, r.SameConnPID = errText(err), err == nil && again == pid
		if !errors.Is(err, driver.ErrBadConn) {
			t.Errorf("the connection after the cancel: pid %d (was %d), %v; want driver.ErrBadConn", again, pid, err)
		}
		conn.Close()

		if err := db.QueryRowContext(ctx, "select pg_backend_pid()").Scan(&again); err != nil {
			t.Fatalf("the pool after the cancel: %v", err)
		}
		r.PoolReusedConn = again == pid
		if r.PoolReusedConn {
			t.Errorf("the pool handed out the canceled connection (pid %d) again", pid)
		}
		return r
	})
}

// A prepared statement's exec ended by its context's deadline is a timeout, and the pool
// stays usable (upstream TestStmtExecContextCancel).
func TestStmtExecTimeout(t *testing.T) {
	t.Parallel()
	bothDrivers(t, onlyDefault, func(t *testing.T, db *sql.DB) bool {
		ctx := caseContext(t)
		conn := mustConn(t, ctx, db)
		mustExec(t, ctx, conn, "create temporary table t(id int primary key)")
		stmt, err := conn.PrepareContext(ctx, "insert into t(id) select $1::int4 from pg_sleep(20)")
		if err != nil {
			t.Fatal(err)
		}
		defer stmt.Close()
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = stmt.ExecContext(short, 42)
		if !pgconn.Timeout(err) {
			t.Errorf("got %v, want a timeout", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("the exec returned after %v", d)
		}
		return pgconn.Timeout(err)
	})
}

// Ping, a prepare and its close succeed in each mode (upstream TestConnPingContextSuccess,
// TestConnPrepareContextSuccess).
func TestPingAndPrepare(t *testing.T) {
	t.Parallel()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []string {
		ctx := caseContext(t)
		ping := db.PingContext(ctx)
		if ping != nil {
			t.Errorf("Ping: %v", ping)
		}
		stmt, err := db.PrepareContext(ctx, "select now()")
		if err != nil {
			t.Fatal(err)
		}
		closeErr := stmt.Close()
		if closeErr != nil {
			t.Errorf("Close: %v", closeErr)
		}
		return []string{errText(ping), errText(closeErr)}
	})
}

// Two statements prepared from one text share the server's prepared statement, which goes
// with the last close (upstream TestConnMultiplePrepareAndDeallocate).
func TestPrepareTwiceAndDeallocate(t *testing.T) {
	t.Parallel()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []int {
		ctx := caseContext(t)
		conn := mustConn(t, ctx, db)
		const text = "select 42"
		count := func() int {
			var n int
			err := conn.QueryRowContext(ctx, "select count(*) from pg_prepared_statements where statement = $1", text).Scan(&n)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		s1, err := conn.PrepareContext(ctx, text)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := conn.PrepareContext(ctx, text)
		if err != nil {
			t.Fatal(err)
		}
		if err := s1.Close(); err != nil {
			t.Errorf("closing the first: %v", err)
		}
		afterFirst := count()
		if err := s2.Close(); err != nil {
			t.Errorf("closing the second: %v", err)
		}
		afterBoth := count()
		if afterFirst != 1 || afterBoth != 0 {
			t.Errorf("prepared statements: %d after the first close, %d after both; want 1, 0", afterFirst, afterBoth)
		}
		return []int{afterFirst, afterBoth}
	})
}
