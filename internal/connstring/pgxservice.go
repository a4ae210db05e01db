package connstring

import (
	"fmt"
	"os"
	"strings"
)

// pgx reads PGSERVICE itself (pgconn/config.go, parseEnvSettings) and then the service file
// with its own reader (github.com/jackc/pgservicefile: last key and last section win, keys and
// values trimmed, an error for a line outside a section, no PGSYSCONFDIR). The connector has
// read the service as libpq does (servicefile.go) and gives pgx its keys in the string it
// parses; when PGSERVICE is set, the string also names an empty service (service='') in a
// service file holding only that empty section ("[]"), so that pgx's own read finds nothing to
// add and no file of the user's is read twice. The file is a pipe's read end as /dev/fd/N where
// the system has it (nothing is written to disk), else a temporary file removed after the parse.

// withoutPgxService calls parse with s, made as above when PGSERVICE is set.
func withoutPgxService(s string, parse func(string) error) error {
	if os.Getenv("PGSERVICE") == "" {
		return parse(s)
	}
	path, done, err := emptyServiceFile()
	if err != nil {
		return &ParseError{Key: "service", Env: "PGSERVICE", msg: "cannot make an empty service file for pgx: " + err.Error()}
	}
	defer done()
	quote := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	return parse(s + " service='' servicefile='" + quote.Replace(path) + "'")
}

// emptyServiceFile returns the path of a service file holding the empty section "[]", and the
// function that removes it.
func emptyServiceFile() (path string, done func(), err error) {
	const content = "[]\n"
	if r, w, err := os.Pipe(); err == nil {
		_, werr := w.WriteString(content) // far below a pipe's buffer
		w.Close()
		path := fmt.Sprintf("/dev/fd/%d", r.Fd())
		if fi, err := os.Stat(path); werr == nil && err == nil && fi.Mode()&os.ModeNamedPipe != 0 {
			return path, func() { r.Close() }, nil
		}
		r.Close()
	}
	f, err := os.CreateTemp("", "pgconnector-service-*.conf")
	if err != nil {
		return "", nil, err
	}
	name := f.Name()
	_, werr := f.WriteString(content)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(name)
		return "", nil, werr
	}
	return name, func() { os.Remove(name) }, nil
}
