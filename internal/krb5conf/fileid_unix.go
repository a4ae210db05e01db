//go:build unix

package krb5conf

import (
	"io/fs"
	"syscall"
)

// fileIDOf is the device and inode of a file: what an include loop is recognised by.
func fileIDOf(fi fs.FileInfo) fileID {
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileID{uint64(sys.Dev), uint64(sys.Ino)}
	}
	return fileID{}
}
