//go:build unix

package tlspolicy

import (
	"io/fs"
	"syscall"
)

// openNonBlocking opens a file without waiting for a reader or writer (a FIFO) or a device.
const openNonBlocking = syscall.O_NONBLOCK

// fileIdentity is a file's device and inode.
type fileIdentity struct{ dev, ino uint64 }

func identityOf(fi fs.FileInfo) fileIdentity {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileIdentity{dev: uint64(st.Dev), ino: uint64(st.Ino)}
	}
	return fileIdentity{}
}
