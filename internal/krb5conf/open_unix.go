//go:build unix

package krb5conf

import (
	"os"

	"golang.org/x/sys/unix"
)

// openNonblock opens path read-only without waiting: O_NONBLOCK makes open(2)
// of a FIFO return at once (read refuses one before and after opening it), and
// dir adds O_DIRECTORY, which makes open(2) fail with ENOTDIR on anything but a
// directory. Go adds O_CLOEXEC.
func openNonblock(path string, dir bool) (*os.File, error) {
	flag := os.O_RDONLY | unix.O_NONBLOCK
	if dir {
		flag |= unix.O_DIRECTORY
	}
	return os.OpenFile(path, flag, 0)
}
