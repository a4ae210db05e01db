package intercept

import (
	"context"
	"database/sql/driver"
	"reflect"

	"github.com/ngrok/sqlmw"
)

// Rows are the rows of a query whose Next and Close pass through one interceptor, with the
// context its ConnQueryContext or StmtQueryContext returned. Their other methods are the
// driver's rows' (see [Rows.Columns]); on Go 1.27 they are a driver.RowsColumnScanner when the
// driver's rows are (rows_go1.27.go).
type Rows struct {
	ColumnTypes // of the driver's rows, under every wrapper
	intr        sqlmw.Interceptor
	ctx         context.Context
	parent      driver.Rows // the next interceptor's Rows, or the driver's
	q           *query
	last        bool // parent is the driver's rows
}

// query is what the Rows of one query's interceptors share.
type query struct {
	rows driver.Rows // the driver's, under every wrapper
	// columnScan: database/sql reads the rows with NextRow (Go 1.27); the driver's rows then
	// advance with NextRow where an interceptor calls Next.
	columnScan bool
	nils       []driver.Value // RowsNext's dest then: one nil per column
	advance    advancer
}

// wrapRows returns rows, returned by intr's query with ctx, as Rows of intr.
func wrapRows(intr sqlmw.Interceptor, ctx context.Context, rows driver.Rows) driver.Rows {
	q, last := queryOf(rows)
	return newRows(Rows{ColumnTypes: ColumnTypes{q.rows}, intr: intr, ctx: ctx, parent: rows, q: q, last: last})
}

// queryOf returns the query of rows: that of the Rows under them (looking through an
// interceptor's own wrapper with sqlmw.RowsUnwrapper), else a new one with the rows found as
// the driver's; last says whether rows are the driver's.
func queryOf(rows driver.Rows) (q *query, last bool) {
	for r, first := rows, true; ; first = false {
		switch w := r.(type) {
		case interface{ query() *query }:
			return w.query(), false
		case sqlmw.RowsUnwrapper:
			r = w.Unwrap()
		default:
			q := &query{rows: r}
			q.advance.q = q
			return q, first
		}
	}
}

func (r *Rows) query() *query { return r.q }

// next returns what the interceptor's RowsNext gets as its rows: the driver's rows advanced
// with NextRow when database/sql reads with NextRow and ScanColumn.
func (r *Rows) next() driver.Rows {
	if r.q.columnScan && r.last {
		return &r.q.advance
	}
	return r.parent
}

// Columns are the driver's rows' columns.
func (r *Rows) Columns() []string { return r.q.rows.Columns() }

func (r *Rows) Next(dest []driver.Value) error { return r.intr.RowsNext(r.ctx, r.next(), dest) }

func (r *Rows) Close() error { return r.intr.RowsClose(r.ctx, r.parent) }

// ColumnTypes gives a wrapper of a driver's rows (embedding it) the column-type methods of
// Under, those rows; a method Under lacks answers what database/sql assumes without it. The
// statement tracer's wrapper embeds it too.
type ColumnTypes struct{ Under driver.Rows }

func (c ColumnTypes) ColumnTypeDatabaseTypeName(index int) string {
	if ct, ok := c.Under.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return ct.ColumnTypeDatabaseTypeName(index)
	}
	return ""
}

func (c ColumnTypes) ColumnTypeLength(index int) (length int64, ok bool) {
	if ct, is := c.Under.(driver.RowsColumnTypeLength); is {
		return ct.ColumnTypeLength(index)
	}
	return 0, false
}

func (c ColumnTypes) ColumnTypePrecisionScale(index int) (precision, scale int64, ok bool) {
	if ct, is := c.Under.(driver.RowsColumnTypePrecisionScale); is {
		return ct.ColumnTypePrecisionScale(index)
	}
	return 0, 0, false
}

func (c ColumnTypes) ColumnTypeScanType(index int) reflect.Type {
	if ct, ok := c.Under.(driver.RowsColumnTypeScanType); ok {
		return ct.ColumnTypeScanType(index)
	}
	return reflect.TypeFor[any]()
}

// advancer is the driver's rows as the last interceptor's RowsNext sees them when database/sql
// reads with NextRow: Next advances them with NextRow, leaving dest as it is.
type advancer struct{ q *query }

func (a *advancer) Columns() []string { return a.q.rows.Columns() }
func (a *advancer) Close() error      { return a.q.rows.Close() }
func (a *advancer) Next([]driver.Value) error {
	return a.q.rows.(interface{ NextRow() error }).NextRow()
}

var (
	_ driver.RowsColumnTypeDatabaseTypeName = (*Rows)(nil)
	_ driver.RowsColumnTypeLength           = (*Rows)(nil)
	_ driver.RowsColumnTypePrecisionScale   = (*Rows)(nil)
	_ driver.RowsColumnTypeScanType         = (*Rows)(nil)
)
