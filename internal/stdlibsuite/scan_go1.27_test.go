//go:build go1.27

package stdlibsuite

import (
	"database/sql"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// The cases of Go 1.27 and later, whose database/sql hands a scan to a driver.RowsColumnScanner
// (pgx's rows are one): arrays into Go slices and pgtype values, ranges and multiranges, native
// byte slices, and nil destinations refused before database/sql's conversions see them. The
// statement tracer's rows must be one too (tracing/rows_go1.27.go), or all of these fail.

// scanRow scans query's one row into dest, failing the test on an error.
func scanRow(t *testing.T, db *sql.DB, query string, dest any, args ...any) {
	t.Helper()
	if err := db.QueryRowContext(caseContext(t), query, args...).Scan(dest); err != nil {
		t.Fatalf("%s into %T: %v", query, dest, err)
	}
}

// wantValue fails the test when got is not want.
func wantValue(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: %#v, want %#v", what, got, want)
	}
}

// Arrays scan into Go slices, NULL elements into nil pointers, a NULL array into a nil slice;
// the slices pass back as arguments (upstream TestGoArray).
func TestGoSlices(t *testing.T) {
	t.Parallel()
	type result struct {
		Names     []string
		Null      []string
		Ints      []int64
		Int32s    []int32
		Pointers  []*string
		Matrix    [][]int32
		Count     int
		Roundtrip bool
	}
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) result {
		var r result
		scanRow(t, db, "select array['John', 'Jane']::text[]", &r.Names)
		wantValue(t, "text[] into []string", r.Names, []string{"John", "Jane"})
		scanRow(t, db, "select cardinality($1::text[])", &r.Count, r.Names)
		wantValue(t, "cardinality of the []string", r.Count, 2)
		r.Null = []string{"left over"}
		scanRow(t, db, "select null::text[]", &r.Null)
		wantValue(t, "NULL into []string", r.Null, []string(nil))

		scanRow(t, db, "select '{1,2,3}'::int8[]", &r.Ints)
		wantValue(t, "int8[] into []int64", r.Ints, []int64{1, 2, 3})
		scanRow(t, db, "select '{-1,0,2147483647}'::int4[]", &r.Int32s)
		wantValue(t, "int4[] into []int32", r.Int32s, []int32{-1, 0, 2147483647})

		scanRow(t, db, "select array['a', null, 'c']::text[]", &r.Pointers)
		if len(r.Pointers) != 3 || r.Pointers[0] == nil || *r.Pointers[0] != "a" || r.Pointers[1] != nil ||
			r.Pointers[2] == nil || *r.Pointers[2] != "c" {
			t.Errorf("text[] with a NULL into []*string: %v", r.Pointers)
		}
		scanRow(t, db, "select $1::text[] = array['a', null, 'c']::text[] is not false", &r.Roundtrip, r.Pointers)
		if !r.Roundtrip {
			t.Errorf("the []*string back as an argument differs")
		}

		scanRow(t, db, "select '{{1,2},{3,4}}'::int4[]", &r.Matrix)
		wantValue(t, "int4[][] into [][]int32", r.Matrix, [][]int32{{1, 2}, {3, 4}})
		return r
	})
}

// Arrays scan into slices of a driver.Valuer and sql.Scanner element, and pass back, in the
// modes that learn the parameter types from the server: []sql.NullString is no type of pgx's
// map (upstream TestGoArrayOfDriverValuer).
func TestGoSliceOfValuer(t *testing.T) {
	t.Parallel()
	type result struct {
		Names []sql.NullString
		Count int
		Null  []sql.NullString
	}
	bothDrivers(t, knownOIDModes, func(t *testing.T, db *sql.DB) result {
		var r result
		scanRow(t, db, "select array['John', null, 'Jane']::text[]", &r.Names)
		wantValue(t, "text[] into []sql.NullString", r.Names,
			[]sql.NullString{{String: "John", Valid: true}, {}, {String: "Jane", Valid: true}})
		scanRow(t, db, "select cardinality($1::text[])", &r.Count, r.Names)
		wantValue(t, "cardinality of the []sql.NullString", r.Count, 3)
		r.Null = r.Names
		scanRow(t, db, "select null::text[]", &r.Null)
		wantValue(t, "NULL into []sql.NullString", r.Null, []sql.NullString(nil))
		return r
	})
}

// pgtype.FlatArray scans and passes back (upstream TestPGTypeFlatArray).
func TestFlatArray(t *testing.T) {
	t.Parallel()
	type result struct {
		Names pgtype.FlatArray[string]
		Count int
		Null  pgtype.FlatArray[string]
	}
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) result {
		var r result
		scanRow(t, db, "select array['John', 'Jane']::text[]", &r.Names)
		wantValue(t, "text[] into pgtype.FlatArray", r.Names, pgtype.FlatArray[string]{"John", "Jane"})
		scanRow(t, db, "select cardinality($1::text[])", &r.Count, r.Names)
		wantValue(t, "cardinality of the pgtype.FlatArray", r.Count, 2)
		r.Null = r.Names
		scanRow(t, db, "select null::text[]", &r.Null)
		wantValue(t, "NULL into pgtype.FlatArray", r.Null, pgtype.FlatArray[string](nil))
		return r
	})
}

// A two-dimensional array scans into pgtype.Array with its dimensions and passes back; NULL
// is the invalid array (upstream TestPGTypeArray).
func TestPgtypeArray(t *testing.T) {
	t.Parallel()
	type result struct {
		Matrix pgtype.Array[int64]
		Equal  bool
		Null   pgtype.Array[int64]
	}
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) result {
		var r result
		scanRow(t, db, "select '{{1,2,3},{4,5,6}}'::bigint[]", &r.Matrix)
		wantValue(t, "bigint[][] into pgtype.Array", r.Matrix, pgtype.Array[int64]{
			Elements: []int64{1, 2, 3, 4, 5, 6},
			Dims:     []pgtype.ArrayDimension{{Length: 2, LowerBound: 1}, {Length: 3, LowerBound: 1}},
			Valid:    true,
		})
		scanRow(t, db, "select '{{1,2,3},{4,5,6}}'::bigint[] = $1::bigint[]", &r.Equal, r.Matrix)
		wantValue(t, "the pgtype.Array back as an argument equals the literal", r.Equal, true)
		r.Null = r.Matrix
		scanRow(t, db, "select null::bigint[]", &r.Null)
		wantValue(t, "NULL into pgtype.Array", r.Null, pgtype.Array[int64]{})
		return r
	})
}

// A range scans into pgtype.Range and passes back; NULL is the zero range (upstream
// TestConnQueryPGTypeRange).
func TestRange(t *testing.T) {
	t.Parallel()
	type result struct {
		Range, Null, Empty pgtype.Range[pgtype.Int4]
		Equal              bool
	}
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) result {
		var r result
		scanRow(t, db, "select int4range(1, 5)", &r.Range)
		wantValue(t, "int4range into pgtype.Range", r.Range, int4Range(1, 5))
		scanRow(t, db, "select int4range(1, 5) = $1::int4range", &r.Equal, r.Range)
		wantValue(t, "the pgtype.Range back as an argument equals int4range(1, 5)", r.Equal, true)
		r.Null = r.Range
		scanRow(t, db, "select null::int4range", &r.Null)
		wantValue(t, "NULL into pgtype.Range", r.Null, pgtype.Range[pgtype.Int4]{})
		scanRow(t, db, "select 'empty'::int4range", &r.Empty)
		wantValue(t, "an empty range into pgtype.Range", r.Empty,
			pgtype.Range[pgtype.Int4]{LowerType: pgtype.Empty, UpperType: pgtype.Empty, Valid: true})
		return r
	})
}

// A multirange scans into pgtype.Multirange and passes back; NULL is nil (upstream
// TestConnQueryPGTypeMultirange; PostgreSQL 14 and later).
func TestMultirange(t *testing.T) {
	t.Parallel()
	type result struct {
		Multirange, Null pgtype.Multirange[pgtype.Range[pgtype.Int4]]
		Equal            bool
	}
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) result {
		var r result
		scanRow(t, db, "select int4multirange(int4range(1, 5), int4range(7, 9))", &r.Multirange)
		wantValue(t, "int4multirange into pgtype.Multirange", r.Multirange,
			pgtype.Multirange[pgtype.Range[pgtype.Int4]]{int4Range(1, 5), int4Range(7, 9)})
		scanRow(t, db, "select int4multirange(int4range(1, 5), int4range(7, 9)) = $1::int4multirange", &r.Equal, r.Multirange)
		wantValue(t, "the pgtype.Multirange back as an argument equals the literal", r.Equal, true)
		r.Null = r.Multirange
		scanRow(t, db, "select null::int4multirange", &r.Null)
		wantValue(t, "NULL into pgtype.Multirange", r.Null, pgtype.Multirange[pgtype.Range[pgtype.Int4]](nil))
		return r
	})
}

// Byte slices of pgx's own types are pgx's to fill, not database/sql's: an int2[] into
// pgtype.FlatArray[byte], a bytea into pgtype.PreallocBytes in its own backing array
// (upstream TestScanNativeByteSlices).
func TestNativeByteSlices(t *testing.T) {
	t.Parallel()
	type result struct {
		Flat        pgtype.FlatArray[byte]
		Prealloc    pgtype.PreallocBytes
		SameBacking bool
	}
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) result {
		var r result
		scanRow(t, db, "select array[1,2,3]::int2[]", &r.Flat)
		wantValue(t, "int2[] into pgtype.FlatArray[byte]", r.Flat, pgtype.FlatArray[byte]{1, 2, 3})
		backing := make([]byte, 16)
		r.Prealloc = pgtype.PreallocBytes(backing)
		scanRow(t, db, "select decode('6162', 'hex')", &r.Prealloc)
		wantValue(t, "bytea into pgtype.PreallocBytes", r.Prealloc, pgtype.PreallocBytes("ab"))
		r.SameBacking = len(r.Prealloc) > 0 && &r.Prealloc[0] == &backing[0]
		if !r.SameBacking {
			t.Errorf("the pgtype.PreallocBytes has a new backing array")
		}
		return r
	})
}

// The nil destinations that database/sql before Go 1.27 dereferences (see
// TestScanNilDestination), and nil pointers to slices and pgtype values, are errors of Scan.
func TestScanNilDestinationColumnScanner(t *testing.T) {
	t.Parallel()
	nilDestinations(t, []any{
		(*string)(nil), (*[]byte)(nil), (*any)(nil), (*sql.NullString)(nil),
		(*[]string)(nil), (*pgtype.FlatArray[int32])(nil), (*pgtype.Range[pgtype.Int4])(nil),
	})
}
