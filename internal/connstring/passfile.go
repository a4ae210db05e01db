package connstring

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"

	"github.com/pgconnector/pgconnector/negotiation"
)

// The password file (libpq-pgpass.html; fe-connect.c, pqConnectOptions2 and passwordFromFile),
// read as libpq reads it: when neither the connection string (nor its service) nor PGPASSWORD
// gives a password, at each connect, for each host apart, with the host's own name (else its
// hostaddr) and port. A host for which the file has no entry gets no password: never another
// host's. pgx looks the file up once, for the first host, when it parses the connection string,
// and every host gets that password; the connector keeps pgx from reading the file at all
// (passfile='' in the string pgx parses) and looks it up per attempt (Connector.configureAttempt).

// maxPassfileSize bounds what is read of a password file: a larger file is an error of the
// connect (libpq reads any size; a .pgpass of a megabyte is not one a person wrote).
const maxPassfileSize = 1 << 20

// passfilePath returns the password file libpq would read: passfile (from the connection string or
// its service), else PGPASSFILE, else ~/.pgpass (%APPDATA%\postgresql\pgpass.conf on Windows);
// an empty value means the default, as in libpq. The home directory is libpq's (homeDir: $HOME,
// else the user database's entry), as for ~/.postgresql/root.crt. It returns "" when there is no
// home directory to find ~/.pgpass in.
func passfilePath(o *values) string {
	if p, _, ok := o.get("passfile", "PGPASSFILE", false); ok && p != "" {
		return p
	}
	if runtime.GOOS == "windows" {
		return homeFile("pgpass.conf")
	}
	home := homeDir()
	if home == "" {
		return ""
	}
	return filepath.Join(home, ".pgpass")
}

// passfileHost is the host name a password-file entry must match for a host of the connection
// string (host as written, else its hostaddr): "localhost" for no host and for the default Unix
// socket directory, as libpq's passwordFromFile; any other socket directory matches itself.
func passfileHost(host string) string {
	if host == "" || host == defaultSocketDir() {
		return "localhost"
	}
	return host
}

// defaultSocketDir is the Unix socket directory used when the connection string names no host:
// pgx's (pgconn/defaults.go, defaultHost: the first of /var/run/postgresql, /private/tmp, /tmp
// that exists), which on Debian is libpq's DEFAULT_PGSOCKET_DIR too. "" when none exists.
func defaultSocketDir() string {
	for _, dir := range []string{"/var/run/postgresql", "/private/tmp", "/tmp"} {
		if _, err := os.Stat(dir); err == nil {
			return dir
		}
	}
	return ""
}

// passwordFromFile returns the password of the first entry of the password file at path that
// matches host (as written in the connection string, else the hostaddr), port, dbname and user,
// or "" when none does. dbname "" means user, libpq's default. As libpq, it returns "" without an
// error when user is "", when the file does not exist or cannot be read, when it is not a regular
// file (a FIFO or a device is never opened) or when its group or others have any access; for the
// last two, ignored is libpq's warning (which libpq prints on standard error). The error is a
// file larger than maxPassfileSize, and never holds the file's content.
//
// Entries are read as libpq reads them (passfileLookup, passfile_read.go): a line with more
// than five fields gives its fifth, a backslash before any character is dropped, nothing is
// trimmed.
func passwordFromFile(path, host string, port uint16, dbname, user string) (password, ignored string, err error) {
	if dbname == "" {
		dbname = user
	}
	if path == "" || user == "" {
		return "", "", nil
	}
	data, ignored, err := readPassfile(path)
	if err != nil || data == nil {
		return "", ignored, err
	}
	defer clear(data)
	password, _ = passfileLookup(data, passfileHost(host), strconv.Itoa(int(port)), dbname, user)
	return password, "", nil
}

// readPassfile reads the password file at path, or returns nil (no error) for a file libpq would
// ignore, with libpq's warning for a file of another type or with group or other access. The
// type and permissions are checked before the file is opened, and again on what was opened (a
// file swapped in between is ignored); the open does not block.
func readPassfile(path string) (data []byte, ignored string, err error) {
	fi, err := os.Stat(path) // libpq stats the path too: a symbolic link is followed
	if err != nil {
		return nil, "", nil
	}
	if ignored := passfileIgnored(path, fi); ignored != "" {
		return nil, ignored, nil
	}
	f, err := openNonblocking(path)
	if err != nil {
		return nil, "", nil
	}
	defer f.Close()
	opened, err := f.Stat()
	if err != nil || !os.SameFile(fi, opened) {
		return nil, "", nil
	}
	if ignored := passfileIgnored(path, opened); ignored != "" {
		return nil, ignored, nil
	}
	tooLarge := fmt.Errorf("pgconnector: password file %q is larger than %d bytes: not read", path, maxPassfileSize)
	if opened.Size() > maxPassfileSize {
		return nil, "", tooLarge
	}
	data, err = io.ReadAll(io.LimitReader(f, maxPassfileSize+1))
	if err != nil || len(data) > maxPassfileSize {
		clear(data)
		if err != nil {
			return nil, "", nil
		}
		return nil, "", tooLarge
	}
	return data, "", nil
}

// passfileIgnored returns libpq's warning for a password file it does not read (fe-connect.c,
// passwordFromFile): one that is not a regular file, or, off Windows, one that its group or
// others may access; "" for a file libpq reads.
func passfileIgnored(path string, fi fs.FileInfo) string {
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Sprintf("password file %q is not a plain file", path)
	case runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0:
		return fmt.Sprintf("password file %q has group or world access; permissions should be u=rw (0600) or less", path)
	}
	return ""
}

// PasswordFromFile returns the password file's password for the attempt ctx carries
// (negotiation.AttemptHost: its host as written in the connection string, and port), for dbname
// and user, read now as libpq reads it at each connect; "" when the connection string or
// PGPASSWORD gives the password (every host gets that one: nothing is looked up), when there is
// no home directory to find ~/.pgpass in, or when the file has no entry. libpq's warning for a
// file it does not read (not a plain file, group or world access) goes to the note ctx carries
// (WithPassfileNote). The error is a file too large or unreadable, and never holds the file's
// content.
func PasswordFromFile(ctx context.Context, s *Settings, dbname, user string) (string, error) {
	if s.passfile == "" {
		return "", nil
	}
	host, port, _ := negotiation.AttemptHost(ctx)
	password, ignored, err := passwordFromFile(s.passfile, host, port, dbname, user)
	notePassfile(ctx, ignored)
	return password, err
}

// HasPassfile reports whether PasswordFromFile may find a password: whether there is a password
// file to look in (passfile, PGPASSFILE or a home directory for ~/.pgpass).
func HasPassfile(s *Settings) bool { return s.passfile != "" }

// PassfileNote carries, through the context of one connect, libpq's warning for a password file
// that was not read, which the connect's error gets when it is [negotiation.ErrNoPassword].
type PassfileNote struct {
	mu  sync.Mutex
	msg string
}

type passfileNoteKey struct{}

// WithPassfileNote returns ctx with a new note for PasswordFromFile to fill.
func WithPassfileNote(ctx context.Context) (context.Context, *PassfileNote) {
	n := &PassfileNote{}
	return context.WithValue(ctx, passfileNoteKey{}, n), n
}

// notePassfile records msg in the note ctx carries, if any.
func notePassfile(ctx context.Context, msg string) {
	if n, ok := ctx.Value(passfileNoteKey{}).(*PassfileNote); ok && msg != "" {
		n.mu.Lock()
		n.msg = msg
		n.mu.Unlock()
	}
}

// Wrap adds the warning to err when err is the refusal of a password request for want of a
// password: why the file gave none.
func (n *PassfileNote) Wrap(err error) error {
	n.mu.Lock()
	msg := n.msg
	n.mu.Unlock()
	if msg == "" || !errors.Is(err, negotiation.ErrNoPassword) {
		return err
	}
	return &passfileIgnoredError{err: err, msg: msg}
}

// passfileIgnoredError is a connect's error with the warning libpq would have printed.
type passfileIgnoredError struct {
	err error
	msg string
}

func (e *passfileIgnoredError) Error() string { return e.err.Error() + " (" + e.msg + ")" }
func (e *passfileIgnoredError) Unwrap() error { return e.err }
