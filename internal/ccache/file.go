package ccache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

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

func (f *fileCache) Load(context.Context) (*credentials.CCache, error) { return loadFile(f.path) }

// Close does nothing: a FILE cache holds nothing open.
func (f *fileCache) Close() error { return nil }

func loadFile(path string) (cc *credentials.CCache, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w at %s", ErrNoCache, path)
		}
		return nil, fmt.Errorf("reading the credential cache %s: %w", path, err)
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("%w at %s (empty file)", ErrNoCache, path)
	}
	defer func() {
		if r := recover(); r != nil {
			cc, err = nil, fmt.Errorf("credential cache %s: malformed: %v", path, r)
		}
	}()
	cc = new(credentials.CCache)
	if err := cc.Unmarshal(b); err != nil {
		return nil, fmt.Errorf("credential cache %s: %w", path, err)
	}
	return cc, nil
}
