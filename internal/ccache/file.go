package ccache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/jcmturner/gokrb5/v8/credentials"
)

// fileCache is FILE:path (cc_file.c). Stamp is one stat, without an allocation.
type fileCache struct {
	path string
	z    []byte // path NUL-terminated, for the stat
}

func newFile(path string) (Cache, error) {
	if path == "" {
		return nil, errors.New("credential cache FILE: no path")
	}
	if strings.IndexByte(path, 0) >= 0 {
		return nil, errors.New("credential cache FILE: the path contains a NUL byte")
	}
	return &fileCache{path: path, z: append([]byte(path), 0)}, nil
}

func (f *fileCache) Name() string { return "FILE:" + f.path }

func (f *fileCache) Stamp(context.Context) (Stamp, error) { return statStampZ(f.path, f.z) }

// Load reads the file as loadFile does. It does not wait: ctx is not looked at.
func (f *fileCache) Load(context.Context) (*credentials.CCache, error) { return loadFile(f.path) }

// Close does nothing: a FILE cache holds nothing open.
func (f *fileCache) Close() error { return nil }

// MaxFileSize is the largest FILE cache read, in bytes: 16 MiB. MIT sets no limit; a cache
// that kinit writes is a kilobyte or two, and one with a few hundred service tickets well under
// a megabyte.
const MaxFileSize = 16 << 20

// UnusableError is a credential cache that exists but cannot be read as one: a FILE or DIR
// cache that is not a regular file (a FIFO, a device, a directory), one over MaxFileSize, or
// contents that are not in MIT's format. Its credentials are unusable until the file changes;
// MIT's library finds no usable ticket in such a cache either (and on a FIFO waits for a
// writer). The message names the file and the problem, never the file's contents.
type UnusableError struct {
	Path   string // the file
	Reason string // what is wrong, e.g. "a named pipe (FIFO), not a regular file"
}

func (e *UnusableError) Error() string {
	return "credential cache " + e.Path + ": " + e.Reason
}

// loadFile reads and decodes the FILE cache at path (parseFile). A file that does not exist
// or is empty is an error that wraps ErrNoCache; one that is not a regular file, is over
// MaxFileSize or is malformed is an *UnusableError.
func loadFile(path string) (*credentials.CCache, error) {
	b, err := readCacheFile(path, MaxFileSize, false)
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("%w at %s (empty file)", ErrNoCache, path)
	}
	cc, err := parseFile(b)
	if err != nil {
		return nil, &UnusableError{Path: path, Reason: err.Error()}
	}
	return cc, nil
}

// readCacheFile reads the regular file at path (symbolic links followed, as MIT follows them),
// at most limit bytes: more is an *UnusableError when prefix is false, and left unread when it
// is true. Anything but a regular file is an *UnusableError at once: the type is checked with
// stat before the open, and again with fstat after it, and the open is non-blocking, so that
// a FIFO (whose open waits for a writer, and whose read for data) or a device put in the
// file's place between the two is never waited on. A file that does not exist is an error
// that wraps ErrNoCache.
func readCacheFile(path string, limit int64, prefix bool) ([]byte, error) {
	fi, err := os.Stat(path)
	if err == nil {
		err = checkRegular(path, fi, limit, prefix)
	}
	if err != nil {
		return nil, fileError(path, err)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fileError(path, err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err == nil {
		err = checkRegular(path, fi, limit, prefix)
	}
	if err != nil {
		return nil, fileError(path, err)
	}
	// The file may have grown since the fstat: read one byte over the limit to know.
	b := make([]byte, 0, min(fi.Size(), limit)+1)
	b, err = readAtMost(f, b, limit+1)
	if err != nil {
		return nil, fmt.Errorf("reading the credential cache %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		if !prefix {
			return nil, tooLarge(path, limit)
		}
		b = b[:limit]
	}
	return b, nil
}

// readAtMost appends to b what r holds, up to max bytes in all.
func readAtMost(r io.Reader, b []byte, max int64) ([]byte, error) {
	for int64(len(b)) < max {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):min(int64(cap(b)), max)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
	return b, nil
}

func checkRegular(path string, fi fs.FileInfo, limit int64, prefix bool) error {
	if !fi.Mode().IsRegular() {
		return &UnusableError{Path: path, Reason: fileType(fi.Mode()) + ", not a regular file"}
	}
	if !prefix && fi.Size() > limit {
		return tooLarge(path, limit)
	}
	return nil
}

func tooLarge(path string, limit int64) error {
	return &UnusableError{Path: path, Reason: fmt.Sprintf("over the limit of %d MiB for a credential cache file", limit>>20)}
}

// fileError maps a stat or open error of path: not there is ErrNoCache.
func fileError(path string, err error) error {
	var ue *UnusableError
	switch {
	case errors.As(err, &ue):
		return err
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w at %s", ErrNoCache, path)
	}
	return fmt.Errorf("reading the credential cache %s: %w", path, err)
}

// fileType names the type of a file that is not regular.
func fileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	}
	return "a file of type " + m.Type().String()
}
