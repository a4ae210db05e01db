//go:build !unix

package connstring

import "os"

// openNonblocking opens path for reading (no FIFO to block on here).
func openNonblocking(path string) (*os.File, error) {
	return os.Open(path)
}
