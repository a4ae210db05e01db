//go:build !linux

package ccache

import "errors"

// newKeyring: KEYRING caches live in the Linux kernel's key retention service.
func newKeyring(residual string) (Cache, error) {
	return nil, errors.New("credential cache KEYRING:" + residual + ": KEYRING caches exist only on Linux")
}
