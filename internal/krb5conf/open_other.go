//go:build !unix

package krb5conf

import "os"

// openNonblock opens path read-only: the system has no FIFOs to wait on.
func openNonblock(path string, dir bool) (*os.File, error) { return os.Open(path) }
