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

func (fileIdentity) known() bool { return false }

func (fileIdentity) changed() time.Time { return time.Time{} }
