//go:build !unix

package ccache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// statStamp fingerprints a file by size and mtime: one stat.
func statStamp(path string) (Stamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Stamp{}, nil
		}
		return Stamp{}, fmt.Errorf("credential cache %s: %w", path, err)
	}
	return Stamp{Present: true, C: uint64(fi.Size()), D: uint64(fi.ModTime().UnixNano())}, nil
}
