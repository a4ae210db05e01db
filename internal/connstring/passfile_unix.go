//go:build unix

package connstring

import (
	"os"

	"golang.org/x/sys/unix"
)

// openNonblocking opens path for reading with O_NONBLOCK, so that opening a FIFO or a device
// put in place after the type check does not wait for a writer or the device.
func openNonblocking(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
}
