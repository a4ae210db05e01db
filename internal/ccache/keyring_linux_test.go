//go:build linux

package ccache

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/pgconnector/pgconnector/internal/harness"
	"golang.org/x/sys/unix"
)

// lockThread locks the calling goroutine, a test's, to its OS thread for good: the thread
// ends with the test. A process keyring made after the process started its threads is seen
// by the thread that made it (and threads it starts) alone, so a test that writes and reads
// one stays on one thread.
func lockThread() { runtime.LockOSThread() }

func randomName(t testing.TB) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestKeyringSession: KEYRING:session, the legacy form, concurrent use, and caches written by
// this process in the process and thread keyrings.
func TestKeyringSession(t *testing.T) {
	if !harness.InPrivateSessionKeyring(t) {
		return
	}
	k := collectionKDC(t)
	t.Run("session", func(t *testing.T) { checkCollection(t, k, "KEYRING:session:pgc") })
	t.Run("legacy", func(t *testing.T) {
		name := "KEYRING:pgclegacy"
		if err := k.KinitName(name, "alice", 0); err != nil {
			t.Fatal(err)
		}
		c := mustResolve(t, name)
		checkMatchesKlist(t, k, c, name, "alice")
		s := mustStamp(t, c)
		if err := k.Kdestroy(name, false); err != nil {
			t.Fatal(err)
		}
		if mustStamp(t, c) == s {
			t.Fatal("Stamp unchanged after kdestroy")
		}
		checkGone(t, c)
	})
	t.Run("concurrent", func(t *testing.T) {
		name := "KEYRING:session:pgcrace"
		c := mustResolve(t, name)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := c.Stamp(context.Background()); err != nil {
						errs <- err
						return
					}
					if _, err := c.Load(context.Background()); err != nil && !errors.Is(err, ErrNoCache) {
						errs <- err
						return
					}
				}
			})
		}
		for _, p := range []string{"alice", "bob", "alice"} {
			if err := k.KinitName(name, p, 0); err != nil {
				t.Error(err)
			}
		}
		if err := k.Kswitch(name, "bob"); err != nil {
			t.Error(err)
		}
		if err := k.Kdestroy(name, true); err != nil {
			t.Error(err)
		}
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("Stamp or Load while kinit, kswitch and kdestroy ran: %v", err)
		}
	})
	t.Run("process", func(t *testing.T) {
		lockThread()
		src := kinitSource(t, k, "KEYRING:session:pgcsrc")
		writeCache(t, unix.KEY_SPEC_PROCESS_KEYRING, "pgcproc", src)
		c := mustResolve(t, "KEYRING:process:pgcproc")
		checkMatchesKlist(t, k, c, "KEYRING:session:pgcsrc", "alice")
		checkLayoutChanges(t, c, unix.KEY_SPEC_PROCESS_KEYRING, "pgcproc")
	})
	t.Run("thread", func(t *testing.T) {
		src := kinitSource(t, k, "KEYRING:session:pgcsrc2")
		type result struct {
			cc       *credentials.CCache
			s1, s2   Stamp
			err      error
			sameProc bool
		}
		done := make(chan result, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread keyring ends with the thread
			var r result
			defer func() { done <- r }()
			col, err := writeCacheErr(unix.KEY_SPEC_THREAD_KEYRING, "pgcthread", src)
			if err != nil {
				r.err = err
				return
			}
			c, err := Resolve("KEYRING:thread:pgcthread", Options{})
			if err != nil {
				r.err = err
				return
			}
			if r.cc, r.err = c.Load(context.Background()); r.err != nil {
				return
			}
			if r.s1, r.err = c.Stamp(context.Background()); r.err != nil {
				return
			}
			// kdestroy as cc_keyring.c does it: clear the cache keyring, unlink it.
			cache, err := unix.KeyctlSearch(col, "keyring", "pgcthread", 0)
			if err == nil {
				_, err = unix.KeyctlInt(unix.KEYCTL_CLEAR, cache, 0, 0, 0)
			}
			if err == nil {
				_, err = unix.KeyctlInt(unix.KEYCTL_UNLINK, cache, col, 0, 0)
			}
			if err != nil {
				r.err = err
				return
			}
			r.s2, r.err = c.Stamp(context.Background())
			// Another thread does not see this thread's keyring.
			other := make(chan bool)
			go func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				s, _ := c.Stamp(context.Background())
				other <- s.Present
			}()
			r.sameProc = <-other
		}()
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		checkCCacheMatchesKlist(t, k, r.cc, "KEYRING:thread:pgcthread", "KEYRING:session:pgcsrc2", "alice")
		if !r.s1.Present || r.s2.Present {
			t.Fatalf("thread cache: stamps %+v, then after destroying it %+v", r.s1, r.s2)
		}
	})
	t.Run("malformed", func(t *testing.T) { checkMalformed(t, k) })
}

// TestKeyringUser kinits into KEYRING:user, shared by every process of the uid, under a new
// collection name that the harness destroys at the test's end, or after a killed test.
func TestKeyringUser(t *testing.T) {
	k := collectionKDC(t)
	checkCollection(t, k, harness.UserKeyringCache(t))
}

// TestKeyringPersistent kinits into KEYRING:persistent:<uid> for an unused uid (as root), so
// that no one's persistent keyring is touched; the harness invalidates that keyring at the
// test's end, or after a killed test.
func TestKeyringPersistent(t *testing.T) {
	name, _ := harness.PersistentKeyringCache(t)
	checkCollection(t, collectionKDC(t), name)
}

// cacheKeys is one cache read key by key: its principal record and its credential records.
type cacheKeys struct {
	principal []byte
	creds     [][]byte
	types     []string
}

// kinitSource kinits alice into name and reads its keys with keyctl directly.
func kinitSource(t *testing.T, k *harness.KDC, name string) cacheKeys {
	t.Helper()
	if err := k.KinitName(name, "alice", 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Kdestroy(name, true) })
	full := resolvedName(t, k, name)
	sub := full[strings.LastIndexByte(full, ':')+1:]
	cache, err := unix.KeyctlSearch(unix.KEY_SPEC_SESSION_KEYRING, "keyring", sub, 0)
	if err != nil {
		t.Fatalf("searching the cache keyring %s: %v", sub, err)
	}
	list := mustRead(t, cache)
	var ck cacheKeys
	for i := 0; i+4 <= len(list); i += 4 {
		id := int(int32(binary.NativeEndian.Uint32(list[i:])))
		desc, err := unix.KeyctlString(unix.KEYCTL_DESCRIBE, id)
		if err != nil {
			t.Fatal(err)
		}
		f := strings.SplitN(desc, ";", 5)
		switch f[4] {
		case krccPrincipalKey:
			ck.principal = mustRead(t, id)
		case krccOffsetsKey:
		default:
			ck.creds = append(ck.creds, mustRead(t, id))
			ck.types = append(ck.types, f[0])
		}
	}
	if ck.principal == nil || len(ck.creds) == 0 {
		t.Fatalf("cache %s: no principal or no credentials", full)
	}
	return ck
}

func mustRead(t *testing.T, id int) []byte {
	t.Helper()
	b, err := keyctlRead(id)
	if err != nil {
		t.Fatalf("reading key %d: %v", id, err)
	}
	return b
}

// writeCache writes src into anchor in MIT's layout, collection and cache named name, and
// unlinks the collection at the end of the test.
func writeCache(t testing.TB, anchor int, name string, src cacheKeys) int {
	t.Helper()
	col, err := writeCacheErr(anchor, name, src)
	t.Cleanup(func() { _, _ = unix.KeyctlInt(unix.KEYCTL_UNLINK, col, anchor, 0, 0) })
	if err != nil {
		t.Fatal(err)
	}
	return col
}

func writeCacheErr(anchor int, name string, src cacheKeys) (int, error) {
	col, err := unix.AddKey("keyring", krccCollectionPrefix+name, nil, anchor)
	if err != nil {
		return 0, err
	}
	if _, err := unix.AddKey("user", krccPrimaryKey, primaryPayload(name), col); err != nil {
		return col, err
	}
	cache, err := unix.AddKey("keyring", name, nil, col)
	if err != nil {
		return col, err
	}
	if _, err := unix.AddKey("user", krccPrincipalKey, src.principal, cache); err != nil {
		return col, err
	}
	for i, c := range src.creds {
		if _, err := unix.AddKey(src.types[i], fmt.Sprintf("cred%d", i), c, cache); err != nil {
			return col, err
		}
	}
	return col, nil
}

func primaryPayload(name string) []byte {
	b := binary.BigEndian.AppendUint32(nil, krccCollectionVer)
	b = binary.BigEndian.AppendUint32(b, uint32(len(name)))
	return append(b, name...)
}

// checkLayoutChanges changes the cache written by writeCache under anchor as kinit, kswitch and
// kdestroy do, and checks the stamps.
func checkLayoutChanges(t *testing.T, c Cache, anchor int, name string) {
	col, err := unix.KeyctlSearch(anchor, "keyring", krccCollectionPrefix+name, 0)
	if err != nil {
		t.Fatal(err)
	}
	cache, err := unix.KeyctlSearch(col, "keyring", name, 0)
	if err != nil {
		t.Fatal(err)
	}
	s1 := mustStamp(t, c)
	if !s1.Present {
		t.Fatal("Stamp: not present")
	}
	// A new ticket: a key more.
	extra, err := unix.AddKey("user", "extra", []byte("x"), cache)
	if err != nil {
		t.Fatal(err)
	}
	s2 := stampChanged(t, c, s1, "adding a key")
	if _, err := unix.KeyctlInt(unix.KEYCTL_UNLINK, extra, cache, 0, 0); err != nil {
		t.Fatal(err)
	}
	s3 := stampChanged(t, c, s2, "removing a key")
	if s3 != s1 {
		t.Fatalf("Stamp after adding and removing a key: %+v, at first %+v", s3, s1)
	}
	// kswitch: the primary key rewritten in place, naming another (here: missing) cache.
	if _, err := unix.AddKey("user", krccPrimaryKey, primaryPayload("other"), col); err != nil {
		t.Fatal(err)
	}
	if s := mustStamp(t, c); s.Present {
		t.Fatalf("Stamp after switching to a missing cache: %+v", s)
	}
	if _, err := c.Load(context.Background()); !errors.Is(err, ErrNoCache) {
		t.Fatalf("Load after switching to a missing cache: %v", err)
	}
	// An empty primary name: MIT's parse_index takes it, and no cache has it.
	if _, err := unix.AddKey("user", krccPrimaryKey, primaryPayload(""), col); err != nil {
		t.Fatal(err)
	}
	if s, err := c.Stamp(context.Background()); err != nil || s.Present {
		t.Fatalf("Stamp with an empty primary name: %+v, %v; want not present, no error", s, err)
	}
	if _, err := c.Load(context.Background()); !errors.Is(err, ErrNoCache) {
		t.Fatalf("Load with an empty primary name: %v, want ErrNoCache", err)
	}
	if _, err := unix.AddKey("user", krccPrimaryKey, primaryPayload(name), col); err != nil {
		t.Fatal(err)
	}
	if s := mustStamp(t, c); s != s1 {
		t.Fatalf("Stamp after switching back: %+v, want %+v", s, s1)
	}
}

// checkMalformed writes broken caches into the process keyring: errors, no panic.
func checkMalformed(t *testing.T, k *harness.KDC) {
	src := kinitSource(t, k, "KEYRING:session:pgcbad")
	for i, tc := range []struct {
		what    string
		primary []byte // nil: a good one
		mod     func(*cacheKeys)
		stamp   bool // Stamp fails too
	}{
		{what: "short primary key", primary: []byte{0, 0, 0, 1, 0}, stamp: true},
		{what: "primary name length past the end", primary: []byte{0, 0, 0, 1, 0, 0, 0, 9, 't', 'k', 't'}, stamp: true},
		{what: "primary version 2", primary: []byte{0, 0, 0, 2, 0, 0, 0, 3, 't', 'k', 't'}, stamp: true},
		{what: "short principal", mod: func(c *cacheKeys) { c.principal = c.principal[:6] }},
		{what: "principal of 1000 components", mod: func(c *cacheKeys) {
			c.principal = binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 1), 1000)
		}},
		{what: "short credential", mod: func(c *cacheKeys) { c.creds[0] = c.creds[0][:len(c.creds[0])/2] }},
		{what: "credential with bytes after it", mod: func(c *cacheKeys) { c.creds[0] = append(c.creds[0], 0) }},
		{what: "credential of 3 bytes", mod: func(c *cacheKeys) { c.creds[0] = []byte{0, 0, 0} }},
	} {
		t.Run(tc.what, func(t *testing.T) {
			lockThread()
			ck := cacheKeys{principal: src.principal, types: src.types}
			for _, c := range src.creds {
				ck.creds = append(ck.creds, append([]byte(nil), c...))
			}
			if tc.mod != nil {
				tc.mod(&ck)
			}
			name := "pgcbad" + strconv.Itoa(i)
			col := writeCache(t, unix.KEY_SPEC_PROCESS_KEYRING, name, ck)
			if tc.primary != nil {
				if _, err := unix.AddKey("user", krccPrimaryKey, tc.primary, col); err != nil {
					t.Fatal(err)
				}
			}
			c := mustResolve(t, "KEYRING:process:"+name)
			_, err := c.Load(context.Background())
			if err == nil || errors.Is(err, ErrNoCache) {
				t.Fatalf("Load: %v, want a malformed-input error", err)
			}
			t.Logf("Load: %v", err)
			if _, err := c.Stamp(context.Background()); (err != nil) != tc.stamp {
				t.Fatalf("Stamp: %v", err)
			}
		})
	}
}

func TestKeyringNames(t *testing.T) {
	for _, bad := range []string{"KEYRING:bogus:x", "KEYRING:persistent:abc", "KEYRING:persistent:-1", "KEYRING:session:x:"} {
		if _, err := Resolve(bad, Options{}); err == nil {
			t.Errorf("Resolve(%q) = nil error", bad)
		}
	}
	for _, good := range []string{"KEYRING:session:x", "KEYRING:persistent:", "KEYRING:legacyname", "keyring:thread:a:b"} {
		if _, err := Resolve(good, Options{}); err != nil {
			t.Errorf("Resolve(%q): %v", good, err)
		}
	}
}
