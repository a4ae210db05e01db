package ccache

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/jcmturner/gokrb5/v8/credentials"
)

// dirCache is a DIR cache (cc_dir.c). Two forms:
//
//   - DIR:dir, a collection: a directory of FILE caches named tkt*, one of which, named by the
//     file dir/primary, is the primary cache; Stamp and Load use the primary.
//   - DIR::dir/tktX, one subsidiary cache of a collection, read as a FILE cache.
//
// Stamp of a collection costs two stat calls while dir/primary keeps its inode, size and times
// (kswitch replaces it by rename, so it never changes in place), plus an open, a read and a
// close when it changed: stat(dir/primary), then stat of the subsidiary file it names. Stamp of
// a subsidiary is one stat.
type dirCache struct {
	name string // as resolved, "DIR:" + residual
	dir  string // the collection directory; empty for DIR::path
	// primaryPath is dir/primary.
	primaryPath string
	path        string // DIR::path: the subsidiary file

	// primary remembers the last dir/primary read, keyed by its stat stamp.
	primary atomic.Pointer[dirPrimary]
}

type dirPrimary struct {
	stamp Stamp  // of dir/primary; Present false when it does not exist
	file  string // the subsidiary file name it holds, "tkt" when absent
	path  string // dir/file
}

func newDir(residual string) (Cache, error) {
	if residual == "" {
		return nil, errors.New("credential cache DIR: no directory")
	}
	c := &dirCache{name: "DIR:" + residual}
	if path, ok := strings.CutPrefix(residual, ":"); ok {
		// split_path: a parent directory, and a file name that starts with "tkt".
		dir, file := filepath.Split(path)
		if dir == "" {
			return nil, fmt.Errorf("credential cache DIR:%s: subsidiary cache path %s has no parent directory", residual, path)
		}
		if !strings.HasPrefix(file, "tkt") {
			return nil, fmt.Errorf("credential cache DIR:%s: subsidiary cache path %s: file name does not begin with \"tkt\"", residual, path)
		}
		c.path = path
		return c, nil
	}
	c.dir, c.primaryPath = residual, filepath.Join(residual, "primary")
	return c, nil
}

// Name is the name as given: DIR:dir for a collection (not the primary it resolves to),
// DIR::path for a subsidiary.
func (c *dirCache) Name() string { return c.name }

func (c *dirCache) Stamp(context.Context) (Stamp, error) {
	if c.path != "" {
		return statStamp(c.path)
	}
	p, err := c.resolvePrimary()
	if err != nil {
		return Stamp{}, err
	}
	st, err := statStamp(p.path)
	if err != nil || !st.Present {
		return st, err
	}
	// Mix the primary's identity in, so that kswitch between two caches that happen to look
	// alike still changes the stamp.
	st.A ^= p.stamp.B<<1 ^ p.stamp.D
	return st, nil
}

// Close does nothing: a DIR cache holds nothing open.
func (c *dirCache) Close() error { return nil }

func (c *dirCache) Load(context.Context) (*credentials.CCache, error) {
	if c.path != "" {
		return loadFile(c.path)
	}
	p, err := c.resolvePrimary()
	if err != nil {
		return nil, err
	}
	return loadFile(p.path)
}

// resolvePrimary returns the subsidiary file that dir/primary names, from memory while the
// file's stat stamp is unchanged. A missing primary file means "tkt", as cc_dir.c writes it.
func (c *dirCache) resolvePrimary() (*dirPrimary, error) {
	path := c.primaryPath
	st, err := statStamp(path)
	if err != nil {
		return nil, fmt.Errorf("credential cache %s: %w", c.name, err)
	}
	if p := c.primary.Load(); p != nil && p.stamp == st {
		return p, nil
	}
	p := &dirPrimary{stamp: st, file: "tkt"}
	if st.Present {
		// Only the first line counts, at most 63 bytes with its newline (parsePrimaryFile).
		b, err := readCacheFile(path, primaryFileMax, true)
		switch {
		case errors.Is(err, ErrNoCache):
			p.stamp = Stamp{} // removed since the stat
		case err != nil: // not a regular file, or not readable
			return nil, fmt.Errorf("credential cache %s: primary file: %w", c.name, err)
		default:
			if p.file, err = parsePrimaryFile(b); err != nil {
				return nil, fmt.Errorf("credential cache %s: %s: %w", c.name, path, err)
			}
		}
	}
	p.path = filepath.Join(c.dir, p.file)
	c.primary.Store(p)
	return p, nil
}

// primaryFileMax is how much of a DIR primary file is read: parsePrimaryFile looks at no more.
const primaryFileMax = 64

// parsePrimaryFile checks the first line of a DIR primary file as read_primary_file in
// cc_dir.c does: at most 63 bytes with its newline (fgets into 64 bytes), a name starting
// with "tkt", with no "/" or "\".
func parsePrimaryFile(b []byte) (string, error) {
	if len(b) == 0 {
		return "", errors.New("empty primary file")
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if len(line)+1 > 63 || len(line) == len(b) {
		return "", errors.New("primary file: first line is too long or has no newline")
	}
	if !strings.HasPrefix(line, "tkt") || strings.ContainsAny(line, `/\`) {
		return "", fmt.Errorf("primary file names %q, not a file name starting with \"tkt\"", line)
	}
	return line, nil
}
