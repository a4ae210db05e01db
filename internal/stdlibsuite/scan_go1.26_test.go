//go:build !go1.27

package stdlibsuite

import (
	"database/sql"
	"testing"
)

// Before Go 1.27 database/sql converts each column's driver.Value itself: an array is its text,
// which no Go slice takes (scan_go1.27_test.go has the cases of later releases).
func TestArrayIntoSliceRefused(t *testing.T) {
	t.Parallel()
	bothDrivers(t, allModes, func(t *testing.T, db *sql.DB) []string {
		ctx := caseContext(t)
		var names []string
		err := db.QueryRowContext(ctx, "select array['John', 'Jane']::text[]").Scan(&names)
		const want = `sql: Scan error on column index 0, name "array": unsupported Scan, storing driver.Value type string into type *[]string`
		if errText(err) != want {
			t.Errorf("text[] into []string: %v; want %s", err, want)
		}
		var text string
		if err := db.QueryRowContext(ctx, "select array['John', 'Jane']::text[]").Scan(&text); err != nil || text != "{John,Jane}" {
			t.Errorf("text[] into string: %q, %v; want {John,Jane}", text, err)
		}
		return []string{errText(err), text}
	})
}
