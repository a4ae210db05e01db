//go:build linux && (amd64 || arm64 || loong64 || mips64 || mips64le || ppc64 || ppc64le || riscv64 || s390x)

package ccache

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// statStampZ is statStamp with path also given NUL-terminated (z), so that the stat does not
// allocate: one newfstatat(2), as unix.Stat makes after copying the path.
func statStampZ(path string, z []byte) (Stamp, error) {
	var st unix.Stat_t
	var err error
	dirfd := unix.AT_FDCWD
	if _, _, e := unix.Syscall6(unix.SYS_NEWFSTATAT, uintptr(dirfd), uintptr(unsafe.Pointer(&z[0])),
		uintptr(unsafe.Pointer(&st)), 0, 0, 0); e != 0 {
		err = e
	}
	return stampOf(path, &st, err)
}
