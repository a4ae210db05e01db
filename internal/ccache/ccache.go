// Package ccache reads MIT Kerberos credential caches by the names MIT gives them
// (krb5_cc_resolve): FILE, DIR, KEYRING and KCM, in pure Go. It reads; it never writes a
// cache. What it returns is a gokrb5 credentials.CCache, the form gokrb5's client takes.
//
// Sources: MIT krb5 src/lib/krb5/ccache (cc_file.c, cc_dir.c, cc_keyring.c, cc_kcm.c,
// ccmarshal.c), src/include/kcm.h, src/lib/krb5/os/ccdefname.c and expand_path.c.
package ccache

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jcmturner/gokrb5/v8/credentials"
)

// Cache is one credential cache name, resolved. Its methods are safe for concurrent use.
type Cache interface {
	// Name is the full name, TYPE:residual, as klist prints it.
	Name() string
	// Stamp returns a value that differs from the one returned before when the cache's
	// ticket-granting ticket changed: kinit (and kinit -R), kdestroy, kswitch. Whether a
	// change of the other tickets alone changes it depends on the type: FILE and DIR see every
	// write (the file's times), KCM every credential stored (a new UUID), KEYRING a ticket
	// stored for a new service but not one stored again for a service it holds (see
	// keyringCache). It is cheap and bounded: FILE takes one stat; see each type for its cost.
	// A cache that does not exist gives a stamp with Present false and a nil error; an error
	// is a failure to look. KCM waits at most until ctx ends (then ctx's error, wrapped);
	// FILE, DIR and KEYRING do not wait and ignore ctx.
	Stamp(ctx context.Context) (Stamp, error)
	// Load reads the credentials of the cache (for a collection: its primary cache). A cache
	// that does not exist, never initialized or destroyed, gives an error that wraps
	// ErrNoCache. ctx bounds it as it bounds Stamp.
	Load(ctx context.Context) (*credentials.CCache, error)
	// Close releases what the cache holds open: KCM's connection to its daemon; nothing for
	// FILE, DIR and KEYRING. Stamp and Load after Close fail with an error that wraps
	// ErrClosed (KCM) or go on working (the others, which hold nothing). It may be called
	// more than once.
	Close() error
}

// Stamp is a cheap fingerprint of a cache's state, compared with ==. Its fields mean
// different things for each type; only equality matters.
type Stamp struct {
	Present    bool
	A, B, C, D uint64
}

// ErrNoCache is wrapped by the errors of a cache that does not exist.
var ErrNoCache = errors.New("no credential cache")

// ErrClosed is wrapped by the errors of a KCM cache used after Close.
var ErrClosed = errors.New("credential cache closed")

// UnsupportedTypeError is a cache type this package cannot read: MEMORY (private to the
// process that made it), API (Windows and macOS), or a type MIT does not know.
type UnsupportedTypeError struct {
	Type string // as written, before the colon
	Name string // the whole name
}

func (e *UnsupportedTypeError) Error() string {
	switch strings.ToUpper(e.Type) {
	case "MEMORY":
		return "credential cache " + e.Name + ": type MEMORY is private to the process that made it; use FILE, DIR, KEYRING or KCM"
	case "API":
		return "credential cache " + e.Name + ": type API (CCAPI, Windows and macOS) is not supported; use FILE, DIR, KEYRING or KCM"
	}
	return fmt.Sprintf("credential cache %s: type %q is not supported (FILE, DIR, KEYRING, KCM)", e.Name, e.Type)
}

// Options are the krb5.conf settings that name where caches live.
type Options struct {
	// KCMSocket is [libdefaults] kcm_socket: the KCM daemon's Unix socket. Empty means MIT's
	// default, /var/run/.heim_org.h5l.kcm-socket; "-" means KCM is disabled.
	KCMSocket string
}

// DefaultKCMSocket is MIT's and Heimdal's default KCM socket (cc_kcm.c DEFAULT_KCM_SOCKET_PATH).
const DefaultKCMSocket = "/var/run/.heim_org.h5l.kcm-socket"

// Resolve resolves name, TYPE:residual or a path (FILE), as krb5_cc_resolve does. It checks
// the name's syntax and opens nothing: a cache that does not exist yet resolves, and shows
// up in Stamp and Load. The type is matched without regard to case, as MIT does.
func Resolve(name string, opts Options) (Cache, error) {
	typ, residual, ok := strings.Cut(name, ":")
	if !ok || strings.HasPrefix(name, "/") || (len(typ) == 1 && isWindowsDrive(name)) {
		typ, residual = "FILE", name
	}
	switch strings.ToUpper(typ) {
	case "FILE":
		return newFile(residual)
	case "DIR":
		return newDir(residual)
	case "KEYRING":
		return newKeyring(residual)
	case "KCM":
		return newKCM(residual, opts)
	}
	return nil, &UnsupportedTypeError{Type: typ, Name: name}
}

func isWindowsDrive(name string) bool {
	c := name[0] | 0x20
	return c >= 'a' && c <= 'z' && len(name) > 2 && (name[2] == '\\' || name[2] == '/')
}
