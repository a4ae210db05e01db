//go:build !unix

package krb5conf

import (
	"io/fs"
	"os"
)

// isDevNull reports that fi is the null device os.DevNull (os.SameFile with its stat).
func isDevNull(fi fs.FileInfo) bool {
	dn, err := os.Stat(os.DevNull)
	return err == nil && os.SameFile(fi, dn)
}
