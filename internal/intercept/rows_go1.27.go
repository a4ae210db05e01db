//go:build go1.27

package intercept

import "database/sql/driver"

// ColumnScanRows are Rows over driver's rows that are a driver.RowsColumnScanner (pgx's are, as
// of Go 1.27): database/sql reads them with NextRow and ScanColumn, never Next.
type ColumnScanRows struct {
	Rows
}

// NextRow runs the interceptor's RowsNext with a dest of one nil per column; the driver's rows
// advance with NextRow where the last interceptor calls Next.
func (r *ColumnScanRows) NextRow() error {
	q := r.q
	q.columnScan = true
	if n := len(q.rows.Columns()); len(q.nils) != n {
		q.nils = make([]driver.Value, n)
	} else {
		clear(q.nils)
	}
	return r.intr.RowsNext(r.ctx, r.next(), q.nils)
}

// ScanColumn is the driver's rows' own: sqlmw has no hook for it.
func (r *ColumnScanRows) ScanColumn(scanCtx driver.ScanContext, index int, dest any) error {
	return r.q.rows.(driver.RowsColumnScanner).ScanColumn(scanCtx, index, dest)
}

// newRows returns r as rows of the optional interfaces the driver's rows implement.
func newRows(r Rows) driver.Rows {
	if _, ok := r.q.rows.(driver.RowsColumnScanner); ok {
		return &ColumnScanRows{Rows: r}
	}
	return &r
}

var _ driver.RowsColumnScanner = (*ColumnScanRows)(nil)
