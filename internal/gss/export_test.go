package gss

import "testing"

// SetKrbCredHook makes every KRB-CRED the initiators send go through f until the test ends.
func SetKrbCredHook(t testing.TB, f func([]byte) []byte) {
	krbCredHook = f
	t.Cleanup(func() { krbCredHook = nil })
}
