//go:build unix

package tlspolicy

import (
	"errors"
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

// ownerOf is the user id owning the file fi describes.
func ownerOf(fi fs.FileInfo) (uint32, bool) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Uid, true
	}
	return 0, false
}

// isNotDir tells a path of which a component is not a directory (ENOTDIR).
func isNotDir(err error) bool { return errors.Is(err, syscall.ENOTDIR) }
