package ccache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/jcmturner/gokrb5/v8/credentials"

	"github.com/pgconnector/pgconnector/internal/localfile"
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
// at most limit bytes, with package localfile: more is an *UnusableError when prefix is false,
// and left unread when it is true. Anything but a regular file is an *UnusableError at once,
// never waited on (a FIFO, a device). A file that does not exist is an error that wraps
// ErrNoCache.
func readCacheFile(path string, limit int64, prefix bool) ([]byte, error) {
	read := localfile.Read
	if prefix {
		read = localfile.ReadPrefix
	}
	b, err := read(path, limit)
	if err == nil {
		return b, nil
	}
	if reason, ok := localfile.Problem(err, "a credential cache file"); ok {
		return nil, &UnusableError{Path: path, Reason: reason}
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w at %s", ErrNoCache, path)
	}
	return nil, fmt.Errorf("reading the credential cache %s: %w", path, err)
}
