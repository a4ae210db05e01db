package connstring

import (
	"os"

	"github.com/pgconnector/pgconnector/internal/localfile"
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
	return &ParseError{Key: key, Env: src.env, msg: msg + " is not a regular file: " + localfile.TypeName(fi.Mode())}
}
