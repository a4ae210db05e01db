//go:build unix

package pgconnector

import "syscall"

// openNonBlocking opens a file without waiting for a writer (a FIFO) or a device.
const openNonBlocking = syscall.O_NONBLOCK
