package pgconnector

import (
	"io/fs"
	"os"
)

// checkRegularFile refuses a local file that pgx would read whole with os.ReadFile (sslcert,
// sslkey, the service file) when path names something other than a regular file: reading a
// FIFO waits for a writer, a device may never end, and neither can be interrupted by a context.
// Only stat is used (symbolic links followed, nothing opened), so the check itself cannot block.
// A path that is "" or does not exist is not an error here: libpq and pgx decide what that
// means. The error is a *ParseError naming key (and src.env when the path came from there) and
// the file's type, e.g. "is not a regular file: a named pipe (FIFO)".
func checkRegularFile(key string, src source, path string) error {
	if path == "" {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().IsRegular() {
		return nil
	}
	msg := key
	if p := shown(path); p != "(value not shown)" {
		msg += " " + p
	}
	if src.env != "" {
		msg += " (from " + src.env + ")"
	}
	return &ParseError{Key: key, Env: src.env, msg: msg + " is not a regular file: " + fileType(fi.Mode())}
}

// fileType names the type of a file that is not a regular file.
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
	return "of type " + m.Type().String()
}
