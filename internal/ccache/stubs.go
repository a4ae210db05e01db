package ccache

import "errors"

// Stubs, replaced by dir.go, keyring_linux.go and kcm.go.

func newDir(residual string) (Cache, error)     { return nil, errors.New("DIR: not implemented") }
func newKeyring(residual string) (Cache, error) { return nil, errors.New("KEYRING: not implemented") }
