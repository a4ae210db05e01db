//go:build go1.27

package tracing

import "database/sql/driver"

// sqlColumnScanRows are traced rows over rows that are a driver.RowsColumnScanner (pgx's are, as
// of Go 1.27): database/sql then reads them with NextRow and ScanColumn, never Next, and scans
// arrays into slices and ranges into pgtype values through pgx's type map.
type sqlColumnScanRows struct {
	sqlRows
	scanner driver.RowsColumnScanner
}

// NextRow advances to the next row; io.EOF after the last one.
func (r *sqlColumnScanRows) NextRow() error {
	err := r.scanner.NextRow()
	r.read(err)
	return err
}

// ScanColumn is the rows' own. A failed scan is the caller's conversion error, not the query's.
func (r *sqlColumnScanRows) ScanColumn(scanCtx driver.ScanContext, index int, dest any) error {
	return r.scanner.ScanColumn(scanCtx, index, dest)
}

// newSQLRows returns r as rows of the optional interfaces its rows implement.
func newSQLRows(r sqlRows) driver.Rows {
	if s, ok := r.Under.(driver.RowsColumnScanner); ok {
		return &sqlColumnScanRows{sqlRows: r, scanner: s}
	}
	return &r
}

var _ driver.RowsColumnScanner = (*sqlColumnScanRows)(nil)
