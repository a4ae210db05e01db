//go:build unix

package tlspolicy

import "syscall"

// openNonBlocking opens a file without waiting for a reader (a FIFO) or a device.
const openNonBlocking = syscall.O_NONBLOCK
