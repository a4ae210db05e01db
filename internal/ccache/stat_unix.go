//go:build unix

package ccache

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// statStamp fingerprints a file by device, inode, size, mtime and ctime: one stat.
func statStamp(path string) (Stamp, error) {
	var st unix.Stat_t
	return stampOf(path, &st, unix.Stat(path, &st))
}

// stampOf is the stamp of path from its stat st, or the stat's error err.
func stampOf(path string, st *unix.Stat_t, err error) (Stamp, error) {
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return Stamp{}, nil
		}
		return Stamp{}, fmt.Errorf("credential cache %s: %w", path, err)
	}
	return Stamp{Present: true, A: uint64(st.Dev), B: uint64(st.Ino), C: uint64(st.Size),
		D: uint64(st.Mtim.Nano()) ^ uint64(st.Ctim.Nano())<<1}, nil
}
