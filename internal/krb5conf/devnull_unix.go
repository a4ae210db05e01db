//go:build unix

package krb5conf

import (
	"io/fs"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// devNullRdev is the device number of the null device: that of os.DevNull ("/dev/null") as
// stat(2) gives it, if that is a character device; on Linux it is always major 1, minor 3
// (Documentation/admin-guide/devices.txt), which is taken when /dev/null cannot be looked at.
var devNullRdev = sync.OnceValues(func() (uint64, bool) {
	var st unix.Stat_t
	if err := unix.Stat(os.DevNull, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR {
		return uint64(st.Rdev), true
	}
	if isLinux {
		return unix.Mkdev(1, 3), true
	}
	return 0, false
})

// isDevNull reports that fi is the null device: a character device whose device number is
// /dev/null's. Reading it gives end of file at once, never waits.
func isDevNull(fi fs.FileInfo) bool {
	if fi.Mode()&fs.ModeCharDevice == 0 {
		return false
	}
	sys, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	rdev, ok := devNullRdev()
	return ok && uint64(sys.Rdev) == rdev
}
