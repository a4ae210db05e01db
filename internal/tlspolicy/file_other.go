//go:build !unix

package tlspolicy

import (
	"io/fs"
	"time"
)

const openNonBlocking = 0

// fileIdentity is empty here: without a status-change time, a stat cannot tell a file
// replaced in place from the one read before, and the file is read at every connection.
type fileIdentity struct{}

func identityOf(fs.FileInfo) fileIdentity { return fileIdentity{} }

// ownerOf has no owner to give: libpq checks no key file permissions on Windows.
func ownerOf(fs.FileInfo) (uint32, bool) { return 0, false }

func isNotDir(error) bool { return false }

func (fileIdentity) known() bool { return false }

func (fileIdentity) changed() time.Time { return time.Time{} }
