//go:build unix

package tlspolicy

import (
	"errors"
	"io/fs"
	"syscall"
	"time"
)

// openNonBlocking opens a file without waiting for a reader or writer (a FIFO) or a device.
const openNonBlocking = syscall.O_NONBLOCK

// fileIdentity is a file's device, inode and status-change time (ctime).
type fileIdentity struct {
	dev, ino uint64
	ctime    int64 // nanoseconds since the epoch
	ok       bool
}

func identityOf(fi fs.FileInfo) fileIdentity {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileIdentity{dev: uint64(st.Dev), ino: uint64(st.Ino), ctime: ctimeOf(st), ok: true}
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

// known says whether the identity was read from the file (a stat of the system).
func (id fileIdentity) known() bool { return id.ok }

// changed is the file's status-change time.
func (id fileIdentity) changed() time.Time { return time.Unix(0, id.ctime) }
