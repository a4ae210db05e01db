// Package localfile reads a file of the local machine as untrusted input: only a regular file
// (symbolic links followed), never a FIFO, socket or device, and never more than a stated number
// of bytes. The credential caches, the client keytab and krb5.conf are read through it.
//
// The type is checked with stat before the open and with fstat after it, and the open is
// non-blocking (O_NONBLOCK), so that a FIFO, whose open waits for a writer and whose read waits
// for data, or a device put in the file's place between the two checks is never waited on. The
// size is checked against the limit before anything is allocated, and the read stops one byte
// past the limit, so a file that grows after the fstat is caught too.
package localfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// NotRegularError is a path that names something other than a regular file (after symbolic
// links): a FIFO, a socket, a device or a directory. It was not opened, or opened without
// waiting and not read.
type NotRegularError struct {
	Path string
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	return e.Path + ": " + TypeName(e.Mode) + ", not a regular file"
}

// TooLargeError is a regular file of more than Limit bytes.
type TooLargeError struct {
	Path  string
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s: over the limit of %d bytes", e.Path, e.Limit)
}

// Read returns the contents of the regular file at path, at most limit bytes: a larger file is a
// *TooLargeError, anything but a regular file a *NotRegularError, both without reading. Other
// errors are those of os.Stat, os.OpenFile and Read (fs.ErrNotExist for a file that is not
// there).
func Read(path string, limit int64) ([]byte, error) {
	return read(path, limit, false)
}

// ReadPrefix is Read for a file of which only the first limit bytes matter: the rest of a
// larger file is left unread, without an error.
func ReadPrefix(path string, limit int64) ([]byte, error) {
	return read(path, limit, true)
}

func read(path string, limit int64, prefix bool) ([]byte, error) {
	if limit < 0 {
		return nil, errors.New("localfile: negative limit")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := check(path, fi, limit, prefix); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := check(path, fi, limit, prefix); err != nil {
		return nil, err
	}
	// One byte past the limit tells a file that grew since the fstat.
	b := make([]byte, 0, min(fi.Size(), limit)+1)
	for int64(len(b)) <= limit {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := f.Read(b[len(b):min(int64(cap(b)), limit+1)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if int64(len(b)) > limit {
		if !prefix {
			return nil, &TooLargeError{Path: path, Limit: limit}
		}
		b = b[:limit]
	}
	return b, nil
}

func check(path string, fi fs.FileInfo, limit int64, prefix bool) error {
	if !fi.Mode().IsRegular() {
		return &NotRegularError{Path: path, Mode: fi.Mode()}
	}
	if !prefix && fi.Size() > limit {
		return &TooLargeError{Path: path, Limit: limit}
	}
	return nil
}

// TypeName names the type of a file mode in words: "a named pipe (FIFO)", "a character device",
// "a block device", "a socket", "a directory", "a regular file".
func TypeName(m fs.FileMode) string {
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
	case m.IsRegular():
		return "a regular file"
	}
	return "a file of type " + m.Type().String()
}

// Problem says in words what is wrong with a file that Read or ReadPrefix refused for its type
// or size: "a named pipe (FIFO), not a regular file", "over the limit of 16 MiB for " + what;
// ok is false for any other error (one of the file system's).
func Problem(err error, what string) (reason string, ok bool) {
	var nr *NotRegularError
	var tl *TooLargeError
	switch {
	case errors.As(err, &nr):
		return TypeName(nr.Mode) + ", not a regular file", true
	case errors.As(err, &tl):
		return fmt.Sprintf("over the limit of %d MiB for %s", tl.Limit>>20, what), true
	}
	return "", false
}
