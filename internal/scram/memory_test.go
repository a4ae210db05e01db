package scram

import (
	"encoding/binary"
	"strconv"
	"testing"
)

// factorCount is the (salt, iteration count) pairs k's entries hold, and the most one holds.
func (k *Keys) factorCount() (total, most int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, el := range k.entries {
		n := len(el.Value.(*entry).gen.factors)
		total += n
		most = max(most, n)
	}
	return total, most
}

// A server that sends a new salt at every exchange keeps one entry per (user, password) of
// at most maxFactors salts: the keys of the older salts go with the gen they were in.
// Users and passwords are the application's, yet at most MaxEntries of them are kept.
func TestKeysBoundedAgainstANewSaltEachExchange(t *testing.T) {
	k := NewKeys(Config{})
	salt := func(i int) []byte {
		s := []byte("fresh salt 16 by")
		binary.BigEndian.PutUint32(s[12:], uint32(i))
		return s
	}
	for i := range 100 {
		if mustExchange(t, k, passwordPeer(t, testPassword, salt(i), 1), attempt{}) {
			t.Fatalf("exchange %d with a new salt was Cached", i)
		}
		total, most := k.factorCount()
		if k.Len() != 1 || most > maxFactors || total > maxFactors {
			t.Fatalf("after %d salts: %d entries, %d salts (at most %d in one), want 1 entry of at most %d",
				i+1, k.Len(), total, most, maxFactors)
		}
	}

	for i := range 2 * defaultMaxEntries {
		user := "user" + strconv.Itoa(i)
		if mustExchange(t, k, passwordPeer(t, testPassword, salt(1000+i), 1), attempt{user: user}) {
			t.Fatalf("exchange of %s was Cached", user)
		}
		if total, _ := k.factorCount(); k.Len() > defaultMaxEntries || total > defaultMaxEntries*maxFactors {
			t.Fatalf("after %d users: %d entries, %d salts, want at most %d entries", i+1, k.Len(), total, defaultMaxEntries)
		}
	}
}
