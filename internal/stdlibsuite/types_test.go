package stdlibsuite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"
)

// columnFacts is what database/sql's ColumnType tells of a column.
type columnFacts struct {
	Name, DatabaseTypeName string
	Length                 int64
	LengthOK               bool
	Precision, Scale       int64
	DecimalOK              bool
	Nullable, NullableOK   bool
	ScanType               string
}

// columnsOf returns the facts of the columns of query's result.
func columnsOf(t *testing.T, ctx context.Context, q queryer, query string) []columnFacts {
	t.Helper()
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	types, err := rows.ColumnTypes()
	if err != nil {
		t.Fatal(err)
	}
	facts := make([]columnFacts, len(types))
	for i, ct := range types {
		f := &facts[i]
		f.Name, f.DatabaseTypeName = ct.Name(), ct.DatabaseTypeName()
		f.Length, f.LengthOK = ct.Length()
		f.Precision, f.Scale, f.DecimalOK = ct.DecimalSize()
		f.Nullable, f.NullableOK = ct.Nullable()
		f.ScanType = fmt.Sprint(ct.ScanType())
	}
	return facts
}

// The rows tell each column's type name, length, precision and scale, scan type, and not
// whether it is nullable (upstream TestRowsColumnTypes, TestRowsColumnTypeDatabaseTypeName;
// pgx's rows have no ColumnTypeNullable).
func TestColumnTypes(t *testing.T) {
	t.Parallel()
	want := []columnFacts{
		{Name: "a", DatabaseTypeName: "INT8", ScanType: "int64"},
		{Name: "bar", DatabaseTypeName: "TEXT", Length: math.MaxInt64, LengthOK: true, ScanType: "string"},
		{Name: "dec", DatabaseTypeName: "NUMERIC", Precision: 9, Scale: 2, DecimalOK: true, ScanType: "float64"},
		// timetz has no entry in pgx's type map: its OID is the name.
		{Name: "d", DatabaseTypeName: "1266", Scale: 6, DecimalOK: true, ScanType: "string"},
		{Name: "b", DatabaseTypeName: "BYTEA", Length: math.MaxInt64, LengthOK: true, ScanType: "[]uint8"},
		{Name: "ts", DatabaseTypeName: "TIMESTAMPTZ", Scale: 6, DecimalOK: true, ScanType: "time.Time"},
		{Name: "f", DatabaseTypeName: "FLOAT4", ScanType: "float32"},
		{Name: "i", DatabaseTypeName: "INT2", ScanType: "int16"},
		{Name: "ok", DatabaseTypeName: "BOOL", ScanType: "bool"},
		{Name: "arr", DatabaseTypeName: "_INT4", ScanType: "string"},
	}
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []columnFacts {
		got := columnsOf(t, caseContext(t), db, `select 1::bigint as a, text 'bar' as bar, 1.28::numeric(9, 2) as dec,
			'12:00:00'::timetz as d, '\x00'::bytea as b, now() as ts, 1::float4 as f, 1::int2 as i,
			true as ok, '{1}'::int4[] as arr`)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("columns:\n got %+v\nwant %+v", got, want)
		}
		return got
	})
}

// Precision and scale of numeric and of the time types (upstream
// TestRowsColumnTypePrecisionScale).
func TestColumnTypePrecisionScale(t *testing.T) {
	t.Parallel()
	type ps struct {
		Column           string
		Precision, Scale int64
		OK               bool
	}
	want := []ps{
		{"numeric_column", 9, 2, true},
		{"unconstrained_numeric_column", 0, 0, false},
		{"timestamp_column", 0, 6, true},
		{"timestamp_0_column", 0, 0, true},
		{"timestamp_3_column", 0, 3, true},
		{"timestamptz_column", 0, 6, true},
		{"timestamptz_3_column", 0, 3, true},
		{"time_column", 0, 6, true},
		{"time_2_column", 0, 2, true},
		{"timetz_column", 0, 6, true},
		{"timetz_4_column", 0, 4, true},
		{"interval_column", 0, 6, true},
		{"interval_3_column", 0, 3, true},
		{"interval_day_to_second_3_column", 0, 3, true},
		{"interval_year_to_month_column", 0, 6, true},
		{"int_column", 0, 0, false},
	}
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []ps {
		ctx := caseContext(t)
		conn := mustConn(t, ctx, db)
		mustExec(t, ctx, conn, `create temporary table precision_scale (
			numeric_column numeric(9, 2),
			unconstrained_numeric_column numeric,
			timestamp_column timestamp,
			timestamp_0_column timestamp(0),
			timestamp_3_column timestamp(3),
			timestamptz_column timestamptz,
			timestamptz_3_column timestamptz(3),
			time_column time,
			time_2_column time(2),
			timetz_column timetz,
			timetz_4_column timetz(4),
			interval_column interval,
			interval_3_column interval(3),
			interval_day_to_second_3_column interval day to second(3),
			interval_year_to_month_column interval year to month,
			int_column int)`)
		var got []ps
		for _, c := range columnsOf(t, ctx, conn, "select * from precision_scale") {
			got = append(got, ps{c.Name, c.Precision, c.Scale, c.DecimalOK})
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("DecimalSize:\n got %+v\nwant %+v", got, want)
		}
		return got
	})
}

// The length of the variable-length types, math.MaxInt64 when unbounded (upstream
// TestRowsColumnTypeLength, and the unconstrained cases of its
// TestRowsColumnTypeLengthUnbounded).
func TestColumnTypeLength(t *testing.T) {
	t.Parallel()
	type length struct {
		Column string
		Len    int64
		OK     bool
	}
	want := []length{
		{"text_column", math.MaxInt64, true},
		{"bytea_column", math.MaxInt64, true},
		{"varchar_column", 255, true},
		{"bpchar_column", 10, true},
		{"varbit_column", 50, true},
		{"int_column", 0, false},
		{"unbounded_varchar_column", math.MaxInt64, true},
		{"unbounded_varbit_column", math.MaxInt64, true},
	}
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []length {
		ctx := caseContext(t)
		conn := mustConn(t, ctx, db)
		mustExec(t, ctx, conn, `create temporary table column_length (
			text_column text,
			bytea_column bytea,
			varchar_column varchar(255),
			bpchar_column bpchar(10),
			varbit_column varbit(50),
			int_column int,
			unbounded_varchar_column varchar,
			unbounded_varbit_column varbit)`)
		var got []length
		for _, c := range columnsOf(t, ctx, conn, "select * from column_length") {
			got = append(got, length{c.Name, c.Length, c.LengthOK})
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Length:\n got %+v\nwant %+v", got, want)
		}
		return got
	})
}

// A boolean scanned into a string is "true" or "false" whatever the result format (upstream
// TestScanBoolToString).
func TestScanBoolToString(t *testing.T) {
	t.Parallel()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []string {
		ctx := caseContext(t)
		var got []string
		for _, want := range []string{"true", "false"} {
			var s string
			if err := db.QueryRowContext(ctx, "select "+want).Scan(&s); err != nil || s != want {
				t.Errorf("select %s: %q, %v", want, s, err)
			}
			got = append(got, s)
		}
		return got
	})
}

// A value scanned into an any, or an *any, is the driver.Value pgx's driver gives for the
// column's type (upstream TestScanInterfacePreservesDatabaseSQLValues).
func TestScanIntoInterface(t *testing.T) {
	t.Parallel()
	cases := []struct {
		query string
		want  any
	}{
		{"select 42::int2", int64(42)},
		{"select 42::int4", int64(42)},
		{"select 42::int8", int64(42)},
		{"select 1.5::float4", float64(1.5)},
		{"select 1.25::numeric", "1.25"},
		{"select array[1,2]::int4[]", "{1,2}"},
		{"select '9007199254740993'::jsonb", []byte("9007199254740993")},
		{"select 'null'::jsonb", []byte("null")},
		{"select 'ab'::bytea", []byte("ab")},
		{"select '2026-09-07 12:00:00'::timestamp", time.Date(2026, 9, 7, 12, 0, 0, 0, time.UTC)},
		{"select 26::oid", int64(26)},
		{"select true", true},
		{"select null::int4", nil},
	}
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []any {
		ctx := caseContext(t)
		var got []any
		for _, c := range cases {
			var v any
			if err := db.QueryRowContext(ctx, c.query).Scan(&v); err != nil {
				t.Errorf("%s into any: %v", c.query, err)
			} else if !reflect.DeepEqual(v, c.want) {
				t.Errorf("%s into any: %#v, want %#v", c.query, v, c.want)
			}
			var p *any
			if err := db.QueryRowContext(ctx, c.query).Scan(&p); err != nil {
				t.Errorf("%s into *any: %v", c.query, err)
			} else if c.want == nil && p != nil || c.want != nil && (p == nil || !reflect.DeepEqual(*p, c.want)) {
				t.Errorf("%s into *any: %#v, want a pointer to %#v", c.query, p, c.want)
			}
			got = append(got, v, p != nil)
		}
		return got
	})
}

// Scalars convert as database/sql converts driver values: into string, []byte, *string,
// sql.RawBytes, and bytes into a named string type; a NULL into a string is an error (upstream
// TestScanScalarPreservesDatabaseSQLConversions).
func TestScanScalarConversions(t *testing.T) {
	t.Parallel()
	type namedString string
	cases := []struct{ query, want string }{
		{"select true", "true"},
		{"select '2026-09-07'::date", "2026-09-07T00:00:00Z"},
		{"select decode('6162', 'hex')", "ab"},
		{"select 12::int4", "12"},
		{"select 1.5::float8", "1.5"},
	}
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []string {
		ctx := caseContext(t)
		var got []string
		for _, c := range cases {
			var s string
			if err := db.QueryRowContext(ctx, c.query).Scan(&s); err != nil || s != c.want {
				t.Errorf("%s into string: %q, %v; want %q", c.query, s, err, c.want)
			}
			var b []byte
			if err := db.QueryRowContext(ctx, c.query).Scan(&b); err != nil || string(b) != c.want {
				t.Errorf("%s into []byte: %q, %v; want %q", c.query, b, err, c.want)
			}
			var p *string
			if err := db.QueryRowContext(ctx, c.query).Scan(&p); err != nil || p == nil || *p != c.want {
				t.Errorf("%s into *string: %v, %v; want %q", c.query, p, err, c.want)
			}
			rows, err := db.QueryContext(ctx, c.query)
			if err != nil {
				t.Fatal(err)
			}
			var raw sql.RawBytes
			if !rows.Next() {
				t.Fatalf("%s: no row: %v", c.query, rows.Err())
			}
			if err := rows.Scan(&raw); err != nil || string(raw) != c.want {
				t.Errorf("%s into sql.RawBytes: %q, %v; want %q", c.query, raw, err, c.want)
			}
			got = append(got, s, string(b), string(raw))
			if err := rows.Close(); err != nil {
				t.Errorf("rows.Close: %v", err)
			}
		}
		// database/sql sets a named string type from bytes and strings only.
		var named namedString
		if err := db.QueryRowContext(ctx, "select decode('6162', 'hex')").Scan(&named); err != nil || named != "ab" {
			t.Errorf("bytea into a named string: %q, %v; want ab", named, err)
		}
		got = append(got, string(named))
		var s string
		err := db.QueryRowContext(ctx, "select null::jsonb").Scan(&s)
		if err == nil {
			t.Errorf("NULL into a string: no error")
		}
		return append(got, errText(err))
	})
}

// scanOnce is an sql.Scanner that fails its first call with err.
type scanOnce struct {
	calls int
	err   error
}

func (s *scanOnce) Scan(any) error {
	s.calls++
	if s.calls == 1 {
		return s.err
	}
	return nil
}

// An sql.Scanner's error is the Scan's, and the scanner is called once (upstream
// TestScanPreservesScannerError).
func TestScannerError(t *testing.T) {
	t.Parallel()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []string {
		ctx := caseContext(t)
		var got []string
		for _, query := range []string{"select 42::int4", "select '1'::jsonb", "select null::int4", "select '{1}'::int4[]"} {
			refused := errors.New("value refused by the scanner")
			s := &scanOnce{err: refused}
			err := db.QueryRowContext(ctx, query).Scan(s)
			if !errors.Is(err, refused) || s.calls != 1 {
				t.Errorf("%s: %v after %d calls; want the scanner's error after 1", query, err, s.calls)
			}
			got = append(got, fmt.Sprintf("%d %v", s.calls, err))
		}
		return got
	})
}

// A nil destination, or a nil pointer of a type database/sql converts into, is an error of
// Scan: not a panic, not a hang (upstream TestScanRejectsNilDestination). Before Go 1.27,
// database/sql itself dereferences some nil pointers (*string, *[]byte, *any, a nil
// *sql.NullString's Scan) and, panicking with the rows' lock held, hangs in Row.Scan's deferred
// Close, whatever the driver; those are in scan_go1.27_test.go, where pgx's ScanColumn refuses
// them first.
func TestScanNilDestination(t *testing.T) {
	t.Parallel()
	nilDestinations(t, []any{nil, (*int64)(nil), (*[]int32)(nil), (*bool)(nil), (*float64)(nil)})
}

// nilDestinations checks each of dests as the destination of a Scan, on a value and a NULL.
func nilDestinations(t *testing.T, dests []any) {
	t.Helper()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []string {
		ctx := caseContext(t)
		var got []string
		for _, dest := range dests {
			for _, query := range []string{"select 42::int4", "select null::int4", "select '{1}'::int4[]"} {
				what := fmt.Sprintf("%s into %T(nil)", query, dest)
				err := returnsWithin(t, 10*time.Second, what, func() error {
					return db.QueryRowContext(ctx, query).Scan(dest)
				})
				if err == nil {
					t.Errorf("%s: no error", what)
				}
				got = append(got, what+": "+errText(err))
			}
		}
		return got
	})
}
