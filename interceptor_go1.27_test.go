//go:build go1.27

package pgconnector_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/ngrok/sqlmw"

	"github.com/pgconnector/pgconnector"
)

// destInterceptor counts RowsNext and keeps the dest of each.
type destInterceptor struct {
	sqlmw.NullInterceptor
	dests [][]driver.Value
}

func (d *destInterceptor) RowsNext(ctx context.Context, rows driver.Rows, dest []driver.Value) error {
	err := rows.Next(dest)
	if err == nil {
		d.dests = append(d.dests, append([]driver.Value(nil), dest...))
	}
	return err
}

// On Go 1.27, with interceptors installed, arrays scan into Go slices and ranges into pgtype
// values (the rows stay a driver.RowsColumnScanner), from a query and a prepared statement, with
// and without statement spans; RowsNext runs once per row with a dest of one nil per column.
func TestInterceptorsColumnScan(t *testing.T) {
	plain, _ := servers(t)
	for _, spans := range []bool{true, false} {
		d := &destInterceptor{}
		c := newConnector(t, plain.DSN(), pgconnector.WithStatementSpans(spans),
			pgconnector.WithInterceptor(sqlmw.NullInterceptor{}), pgconnector.WithInterceptor(d))
		db := sql.OpenDB(c)
		defer db.Close()
		ctx := context.Background()
		const text = "select '{1,2,3}'::int8[], int4range(1, 5) from generate_series(1, $1::int)"
		var ints []int64
		var r pgtype.Range[pgtype.Int4]
		if err := db.QueryRowContext(ctx, text, 1).Scan(&ints, &r); err != nil {
			t.Fatalf("spans=%v: %v", spans, err)
		}
		want := pgtype.Range[pgtype.Int4]{Lower: pgtype.Int4{Int32: 1, Valid: true}, Upper: pgtype.Int4{Int32: 5, Valid: true},
			LowerType: pgtype.Inclusive, UpperType: pgtype.Exclusive, Valid: true}
		if !reflect.DeepEqual(ints, []int64{1, 2, 3}) || r != want {
			t.Errorf("spans=%v: scanned %v and %+v", spans, ints, r)
		}
		st, err := db.PrepareContext(ctx, text)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := st.QueryContext(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			ints, r = nil, pgtype.Range[pgtype.Int4]{}
			if err := rows.Scan(&ints, &r); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(ints, []int64{1, 2, 3}) || r != want {
				t.Errorf("spans=%v, prepared: scanned %v and %+v", spans, ints, r)
			}
			n++
		}
		if err := rows.Err(); err != nil || n != 3 {
			t.Fatalf("spans=%v: %d rows, %v", spans, n, err)
		}
		st.Close()
		if len(d.dests) != 4 {
			t.Errorf("spans=%v: RowsNext returned %d rows, want 4", spans, len(d.dests))
		}
		for _, dest := range d.dests {
			if !reflect.DeepEqual(dest, []driver.Value{nil, nil}) {
				t.Errorf("spans=%v: RowsNext's dest %v, want one nil per column", spans, dest)
			}
		}
	}
}
