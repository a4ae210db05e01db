//go:build !go1.27

package intercept

import "database/sql/driver"

// newRows returns r: before Go 1.27 database/sql has no driver.RowsColumnScanner.
func newRows(r Rows) driver.Rows { return &r }
