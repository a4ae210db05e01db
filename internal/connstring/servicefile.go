package connstring

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// The service files, found and read as libpq 18 finds and reads them (fe-connect.c,
// parseServiceInfo and parseServiceFile; libpq-pgservice.html):
//
//   - The service is service, else PGSERVICE (set, even to "": a section "[]"); without one no
//     file is read.
//   - The user's file first: servicefile (pgx's key; libpq 18 has only the variable), else
//     PGSERVICEFILE (set, even to ""), else ~/.pg_service.conf when it exists (on Windows
//     %APPDATA%\postgresql\.pg_service.conf). A file named by servicefile or PGSERVICEFILE
//     that cannot be opened is an error (`service file "..." not found`), and so is any error
//     in it.
//   - When the user's file has no such section: the system-wide file
//     $PGSYSCONFDIR/pg_service.conf, when it exists. libpq falls back to the directory it was
//     built with (SYSCONFDIR: Debian's libpq /etc/postgresql-common, PostgreSQL's own
//     builds PREFIX/etc); the connector, which was built with none, reads the system-wide file
//     only where PGSYSCONFDIR names it.
//   - In neither: `definition of service "..." not found`.
//
// The section found is the only one used (its keys are not merged with a section of the same
// name elsewhere), and its keys yield to the connection string's, the environment to them.
//
// parseServiceFile reads as libpq does: lines through fgets into 1024 bytes (a line of 1023
// bytes or more, its newline counted, is an error: "line N too long"); white space before and
// after a line dropped; empty lines and lines starting with "#" skipped; the section begins at
// the line "[name]" (what follows "]" is not looked at) and ends at the next line starting with
// "["; only the section's own lines are read, each key=value split at the first "=" with nothing
// trimmed around it and no quoting ("host = x" is the key "host "), the first of a key
// counting; "service" in a section is an error (nested service), and a key the connector does
// not know (knownKey) too ("syntax error in service file"). A line that starts with "ldap" in
// the section is libpq's LDAP lookup, which the connector does not make: an error.

// maxServiceFileSize bounds what is read of a service file: a larger one is an error (libpq
// reads any size).
const maxServiceFileSize = 1 << 20

// serviceLineBuf is parseServiceFile's line buffer (char buf[1024]).
const serviceLineBuf = 1024

// serviceSection is what parseServiceFile found: the section's keys in the order written (the
// first of a key kept) and their values.
type serviceSection struct {
	keys     []string
	settings map[string]string
}

// serviceFileError is a problem of a service file at a line: why, without the line's text.
type serviceFileError struct {
	line int
	kind string // "too long", "syntax", "nested", "ldap", "unknown key", "requiressl"
	key  string // the key of an "unknown key"
}

// parseServiceFile returns the section name of data, or found=false. It never holds the text
// of a line in its error (a line may hold a password), only its number and, for a key it does
// not know, the key.
func parseServiceFile(data []byte, name string) (sec *serviceSection, found bool, err *serviceFileError) {
	const n = serviceLineBuf - 1 // fgets reads at most 1023 bytes
	pos, linenr := 0, 0
	for pos < len(data) {
		piece := data[pos:min(pos+n, len(data))]
		if i := bytes.IndexByte(piece, '\n'); i >= 0 {
			piece = piece[:i+1]
		}
		pos += len(piece)
		linenr++
		if i := bytes.IndexByte(piece, 0); i >= 0 {
			piece = piece[:i] // strlen
		}
		if len(piece) >= n {
			return nil, false, &serviceFileError{line: linenr, kind: "too long"}
		}
		line := bytes.TrimRight(piece, " \t\n\v\f\r")
		line = bytes.TrimLeft(line, " \t\n\v\f\r")
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if line[0] == '[' {
			if found {
				return sec, true, nil
			}
			rest := line[1:]
			found = bytes.HasPrefix(rest, []byte(name)) && len(rest) > len(name) && rest[len(name)] == ']'
			if found {
				sec = &serviceSection{settings: map[string]string{}}
			}
			continue
		}
		if !found {
			continue
		}
		if bytes.HasPrefix(line, []byte("ldap")) {
			return nil, false, &serviceFileError{line: linenr, kind: "ldap"}
		}
		key, val, ok := bytes.Cut(line, []byte("="))
		if !ok {
			return nil, false, &serviceFileError{line: linenr, kind: "syntax"}
		}
		k := string(key)
		switch {
		case k == "service" || k == "servicefile":
			return nil, false, &serviceFileError{line: linenr, kind: "nested", key: k}
		case !knownKey(k):
			return nil, false, &serviceFileError{line: linenr, kind: "unknown key", key: k}
		case k == "requiressl":
			// Not in libpq's keyword table, which its service file parser searches.
			return nil, false, &serviceFileError{line: linenr, kind: "requiressl"}
		}
		if _, dup := sec.settings[k]; !dup {
			sec.keys = append(sec.keys, k)
			sec.settings[k] = string(val)
		}
	}
	return sec, found, nil
}

// readService finds the service's section as libpq does (see above) and keeps it in v. The
// error is a *ParseError naming the service and the file; it never holds a line of the file.
func (v *values) readService(name source) error {
	fail := func(msg string) *ParseError {
		return &ParseError{Key: "service", Env: name.env, msg: msg}
	}
	forService := " for service " + shown(name.value)
	if name.env != "" {
		forService += " (from " + name.env + ")"
	}
	var tried []string
	// look reads the file at path, if it is to be read, and reports whether the section was
	// found; mustExist: a file that cannot be opened is an error.
	look := func(key string, src source, path string, mustExist bool) (bool, error) {
		if err := checkRegularFile(key, src, path); err != nil {
			return false, err
		}
		data, err := readServiceFile(path)
		if err != nil {
			if !mustExist && errors.Is(err, fs.ErrNotExist) {
				return false, nil
			}
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return false, fail("service file " + shownPath(path) + " not found (" + strings.TrimPrefix(forService, " ") + ": " + err.Error() + ")")
		}
		defer clear(data)
		tried = append(tried, shownPath(path))
		sec, found, perr := parseServiceFile(data, name.value)
		if perr != nil {
			e := fail(perr.message(shownPath(path)))
			if perr.kind == "requiressl" {
				e.Key = "requiressl"
			}
			return false, e
		}
		if found {
			v.service, v.serviceKeys, v.servicePath = sec.settings, sec.keys, path
		}
		return found, nil
	}

	var userPath string
	var userSrc source
	explicit := false // named by servicefile or PGSERVICEFILE: it must exist
	if s, ok := v.inString("servicefile"); ok {
		userPath, userSrc, explicit = s.value, s, true
	} else if e, ok := os.LookupEnv("PGSERVICEFILE"); ok {
		userPath, userSrc, explicit = e, source{value: e, env: "PGSERVICEFILE", known: true}, true
	} else if p := userServiceFile(); p != "" {
		userPath, userSrc = p, source{value: p, known: true}
	}
	if explicit || userPath != "" {
		if found, err := look("servicefile", userSrc, userPath, explicit); err != nil || found {
			return err
		}
	}
	if dir, ok := os.LookupEnv("PGSYSCONFDIR"); ok {
		path := dir + string(filepath.Separator) + "pg_service.conf" // libpq: "%s/pg_service.conf"
		if _, err := os.Stat(path); err == nil {
			src := source{value: path, env: "PGSYSCONFDIR", known: true}
			if found, err := look("service", src, path, true); err != nil || found {
				return err
			}
		}
	}
	msg := "definition of service " + shown(name.value) + " not found"
	if name.env != "" {
		msg += " (service from " + name.env + ")"
	}
	switch len(tried) {
	case 0:
		msg += ": no service file (servicefile, else PGSERVICEFILE, else ~/.pg_service.conf; then $PGSYSCONFDIR/pg_service.conf)"
	default:
		msg += " in " + strings.Join(tried, " nor ")
	}
	return fail(msg)
}

// message is the error's text, libpq's words with the file (path as shown) and line.
func (e *serviceFileError) message(path string) string {
	switch e.kind {
	case "too long":
		return fmt.Sprintf("line %d too long in service file %s (%d bytes or more)", e.line, path, serviceLineBuf-1)
	case "nested":
		return fmt.Sprintf("nested %s specifications not supported in service file %s, line %d", e.key, path, e.line)
	case "ldap":
		return fmt.Sprintf("service file %s, line %d: LDAP lookups are not supported", path, e.line)
	case "unknown key":
		u := unknownKeyError(e.key, "invalid connection option", false)
		return fmt.Sprintf("syntax error in service file %s, line %d: %s", path, e.line, strings.TrimPrefix(u.msg, "pgconnector: "))
	case "requiressl":
		return fmt.Sprintf("syntax error in service file %s, line %d: requiressl is not allowed in a service file (libpq does not accept it there): use sslmode", path, e.line)
	}
	return fmt.Sprintf("syntax error in service file %s, line %d: no \"=\" (the form is key=value)", path, e.line)
}

// userServiceFile is ~/.pg_service.conf (libpq's home directory, pqGetHomeDirectory) when it
// exists, else "".
func userServiceFile() string {
	var dir string
	if runtime.GOOS == "windows" {
		if d := os.Getenv("APPDATA"); d != "" {
			dir = filepath.Join(d, "postgresql")
		}
	} else {
		dir = homeDir()
	}
	if dir == "" {
		return ""
	}
	p := filepath.Join(dir, ".pg_service.conf")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// readServiceFile reads the service file at path, at most maxServiceFileSize bytes, opened
// without blocking (checkRegularFile has refused what is not a regular file).
func readServiceFile(path string) ([]byte, error) {
	f, err := openNonblocking(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "open", Path: path, Err: errors.New("not a regular file")}
	}
	data, err := io.ReadAll(io.LimitReader(f, maxServiceFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxServiceFileSize {
		clear(data)
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("larger than %d bytes: not read", maxServiceFileSize)}
	}
	return data, nil
}
