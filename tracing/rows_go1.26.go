//go:build !go1.27

package tracing

import "database/sql/driver"

// newSQLRows returns r as rows of the optional interfaces its rows implement: before Go 1.27,
// database/sql has no driver.RowsColumnScanner, and pgx's rows implement no optional interface
// beyond those of sqlRows.
func newSQLRows(r sqlRows) driver.Rows { return &r }
