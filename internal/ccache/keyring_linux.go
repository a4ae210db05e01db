//go:build linux

package ccache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/jcmturner/gokrb5/v8/credentials"
	"golang.org/x/sys/unix"
)

// keyringCache is a KEYRING cache in the layout of MIT's cc_keyring.c:
//
//	anchor keyring (session, user, persistent for a uid, process, thread; legacy = session)
//	└─ keyring "_krb_<collection>" ("_krb" in a persistent keyring): the collection
//	   ├─ user key "krb_ccache:primary": u32 version 1, u32 length, subsidiary name
//	   └─ keyring <subsidiary>: one cache
//	      ├─ user key "__krb5_princ__": v4 principal record
//	      ├─ user key "__krb5_time_offsets__" (skipped)
//	      └─ one user or big_key key per credential: one v4 credential record
//
// The process and thread anchors are those of the calling OS thread: Linux gives a process
// keyring made after a process started its threads to the thread that made it alone, and a
// Go program has many threads; they suit a program that locks a goroutine to its thread.
//
// It reads with keyctl(2) alone and never creates or links anything, except what MIT's reader
// links too: KEYCTL_SEARCH of a user or persistent collection links it into the process
// keyring (possession rights), and KEYCTL_GET_PERSISTENT links the persistent keyring there.
//
// Stamp remembers the key IDs it resolved (the primary key, the cache keyring) and then costs
// two keyctl(2) calls, KEYCTL_READ of the primary key and KEYCTL_READ of the cache keyring's
// list of key serials, and no allocation. The stamp is the cache keyring's ID with a hash of
// that list and of the primary name. What changes it:
//
//   - kinit and kinit -R (renewal) initialize the cache: krcc_initialize clears the cache
//     keyring and the new keys get new serials;
//   - kdestroy clears and unlinks the cache keyring;
//   - kswitch, or a kinit of another principal, rewrites the primary key's name;
//   - a ticket for a service the cache does not hold yet adds a key, so a serial.
//
// What does not: a ticket stored again for a service the cache already holds (kvno after
// the first expired). krcc_store (cc_keyring.c) add_key()s it with the same description,
// the server principal, and the kernel updates the existing key in place, keeping its
// serial. Only the ticket-granting ticket matters to this package's user, and its changes
// are all seen. When a remembered key is gone or the primary names another cache, Stamp
// resolves again: 3 to 5 keyctl calls.
type keyringCache struct {
	name string // "KEYRING:" + residual
	kn   keyringName

	state atomic.Pointer[keyringState] // the IDs last resolved; nil before the first
}

// keyringState is one resolution, immutable once stored.
type keyringState struct {
	primaryID  int    // krb_ccache:primary; 0 for a name with a subsidiary or none found
	subsidiary string // the cache keyring's name
	subHash    uint64
	cacheID    int // 0: no such cache keyring
}

func newKeyring(residual string) (Cache, error) {
	kn, err := parseKeyringResidual(residual)
	if err != nil {
		return nil, err
	}
	if kn.anchor == "persistent" && kn.collection != "" {
		if _, err := strconv.ParseUint(kn.collection, 10, 32); err != nil {
			return nil, fmt.Errorf("credential cache KEYRING:%s: %q is not a uid", residual, kn.collection)
		}
	}
	return &keyringCache{name: "KEYRING:" + residual, kn: kn}, nil
}

// Name is the name as given; for a collection, not the primary cache it resolves to.
func (c *keyringCache) Name() string { return c.name }

// Close does nothing: a KEYRING cache holds nothing open (the links MIT's reader makes too
// stay, as they do after MIT's).
func (c *keyringCache) Close() error { return nil }

func (c *keyringCache) Stamp(context.Context) (Stamp, error) {
	// One thread for the resolution and the reads: possession rights may come from a link in
	// the process keyring, which Linux keeps per thread for threads that existed before it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if s := c.state.Load(); s != nil && s.cacheID != 0 && (s.primaryID != 0 || c.kn.hasSub) {
		if st, ok := c.quickStamp(s); ok {
			return st, nil
		}
	}
	for range 2 {
		s, err := c.resolve()
		if err != nil {
			return Stamp{}, err
		}
		if s.cacheID == 0 {
			return Stamp{}, nil
		}
		if st, ok := c.quickStamp(s); ok {
			return st, nil
		}
		// Changed between the resolution and the reads: once more.
	}
	return Stamp{}, nil
}

// quickStamp reads the primary key (if any) and the cache keyring's serial list. ok is false
// when a key is gone or the primary names another cache.
func (c *keyringCache) quickStamp(s *keyringState) (Stamp, bool) {
	if s.primaryID != 0 {
		var buf [128]byte
		n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, s.primaryID, buf[:], 0)
		if err != nil || n > len(buf) {
			return Stamp{}, false
		}
		if name, err := primaryKeyName(buf[:n]); err != nil || string(name) != s.subsidiary {
			return Stamp{}, false
		}
	}
	var small [256]byte
	list := small[:]
	for {
		n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, s.cacheID, list, 0)
		if err != nil {
			return Stamp{}, false
		}
		if n <= len(list) {
			list = list[:n]
			break
		}
		list = make([]byte, n+64)
	}
	return Stamp{
		Present: true,
		A:       uint64(uint32(s.cacheID))<<32 | uint64(uint32(s.primaryID)),
		B:       fnv64(list),
		C:       uint64(len(list)),
		D:       s.subHash,
	}, true
}

func fnv64(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, x := range b {
		h ^= uint64(x)
		h *= 1099511628211
	}
	return h
}

// gone reports errors of keyctl(2) that mean the key does not exist (any more).
func gone(err error) bool {
	return errors.Is(err, unix.ENOKEY) || errors.Is(err, unix.EKEYREVOKED) || errors.Is(err, unix.EKEYEXPIRED)
}

// resolve finds the collection, its primary name and the cache keyring (krcc_resolve), and
// remembers the result. A missing collection or cache gives a state with cacheID 0.
func (c *keyringCache) resolve() (*keyringState, error) {
	s := &keyringState{}
	col, err := c.collection()
	if err != nil {
		return nil, err
	}
	if col != 0 {
		s.subsidiary = c.kn.subsidiary
		if !c.kn.hasSub {
			if err := c.readPrimary(col, s); err != nil {
				return nil, err
			}
		}
		var id int
		var err error
		if s.subsidiary == "" {
			// An empty primary name (parse_index accepts it): no cache keyring is named so,
			// and MIT finds no cache. No search for an empty description.
			err = unix.ENOKEY
		} else {
			id, err = unix.KeyctlSearch(col, "keyring", s.subsidiary, 0)
		}
		switch {
		case err == nil:
			s.cacheID = id
		case gone(err):
			if c.kn.anchor == "legacy" && !c.kn.hasSub && s.primaryID == 0 {
				// get_primary_name links a cache made by pre-collection code from the session
				// keyring; this reader looks for it there instead.
				if id, err := unix.KeyctlSearch(unix.KEY_SPEC_SESSION_KEYRING, "keyring", s.subsidiary, 0); err == nil {
					s.cacheID = id
				}
			}
		default:
			return nil, fmt.Errorf("credential cache %s: searching cache keyring %q: %w", c.name, s.subsidiary, err)
		}
	}
	s.subHash = fnv64([]byte(s.subsidiary))
	c.state.Store(s)
	return s, nil
}

// readPrimary reads krb_ccache:primary into s. Without one, the primary is the collection's
// name (for a persistent collection, the uid as written), or "tkt" for an empty one, as
// get_primary_name would create it.
func (c *keyringCache) readPrimary(col int, s *keyringState) error {
	id, err := unix.KeyctlSearch(col, "user", krccPrimaryKey, 0)
	var b []byte
	if err == nil {
		b, err = keyctlRead(id)
	}
	if gone(err) {
		s.subsidiary = c.kn.collection
		if s.subsidiary == "" {
			s.subsidiary = "tkt"
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("credential cache %s: reading %s: %w", c.name, krccPrimaryKey, err)
	}
	name, err := parsePrimaryKey(b)
	if err != nil {
		return fmt.Errorf("credential cache %s: %w", c.name, err)
	}
	s.primaryID, s.subsidiary = id, name
	return nil
}

// collection finds the collection keyring (get_collection); 0 when it does not exist.
func (c *keyringCache) collection() (int, error) {
	anchor, dest, keyName := 0, 0, krccCollectionPrefix+c.kn.collection
	switch c.kn.anchor {
	case "session", "legacy":
		anchor = unix.KEY_SPEC_SESSION_KEYRING
	case "process":
		anchor = unix.KEY_SPEC_PROCESS_KEYRING
	case "thread":
		anchor = unix.KEY_SPEC_THREAD_KEYRING
	case "user":
		anchor, dest = unix.KEY_SPEC_USER_KEYRING, unix.KEY_SPEC_PROCESS_KEYRING
	case "persistent":
		uid := uint64(os.Geteuid())
		if c.kn.collection != "" {
			uid, _ = strconv.ParseUint(c.kn.collection, 10, 32) // checked by newKeyring
		}
		id, err := unix.KeyctlInt(unix.KEYCTL_GET_PERSISTENT, int(uid), unix.KEY_SPEC_PROCESS_KEYRING, 0, 0)
		switch {
		case err == nil:
			anchor = id
		case errors.Is(err, unix.EOPNOTSUPP) && uid == uint64(os.Geteuid()):
			anchor = unix.KEY_SPEC_USER_KEYRING
		default:
			return 0, fmt.Errorf("credential cache %s: persistent keyring of uid %d: %w", c.name, uid, err)
		}
		dest, keyName = unix.KEY_SPEC_PROCESS_KEYRING, krccPersistentName
	}
	id, err := unix.KeyctlSearch(anchor, "keyring", keyName, dest)
	if gone(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("credential cache %s: searching collection keyring %q: %w", c.name, keyName, err)
	}
	return id, nil
}

// Load reads the cache as krcc_start_seq_get and krcc_next_cred do: the principal key, then
// every other key of the cache keyring but the time offsets, each one credential record. Keys
// unlinked while reading (ENOKEY, EACCES) are skipped, as MIT skips them. When the cache itself
// changes under the reader (kinit clears it and adds new keys, kdestroy clears and unlinks
// it, and keys of an unlinked keyring are no longer possessed: EACCES), Load starts again, up
// to three times.
func (c *keyringCache) Load(context.Context) (*credentials.CCache, error) {
	runtime.LockOSThread() // as in Stamp
	defer runtime.UnlockOSThread()
	var err error
	for range 3 {
		var cc *credentials.CCache
		var retry bool
		cc, retry, err = c.load()
		if !retry {
			return cc, err
		}
	}
	return nil, err
}

func (c *keyringCache) load() (cc *credentials.CCache, retry bool, err error) {
	s, err := c.resolve()
	if err != nil {
		return nil, false, err
	}
	if s.cacheID == 0 {
		return nil, false, fmt.Errorf("%w: %s (cache keyring %q not found)", ErrNoCache, c.name, s.subsidiary)
	}
	// changed is an error of a key of this cache: the cache changed under the reader.
	changed := func(err error) bool { return gone(err) || errors.Is(err, unix.EACCES) }
	princID, err := unix.KeyctlSearch(s.cacheID, "user", krccPrincipalKey, 0)
	if gone(err) {
		// Uninitialized, or cleared by kinit or kdestroy a moment ago.
		return nil, true, fmt.Errorf("%w: %s (cache keyring %q has no principal)", ErrNoCache, c.name, s.subsidiary)
	}
	if err != nil {
		return nil, changed(err), fmt.Errorf("credential cache %s: searching %s: %w", c.name, krccPrincipalKey, err)
	}
	offsetsID, err := unix.KeyctlSearch(s.cacheID, "user", krccOffsetsKey, 0)
	if err != nil && !gone(err) {
		return nil, changed(err), fmt.Errorf("credential cache %s: searching %s: %w", c.name, krccOffsetsKey, err)
	}
	principal, err := keyctlRead(princID)
	if err != nil {
		return nil, changed(err), fmt.Errorf("credential cache %s: reading %s: %w", c.name, krccPrincipalKey, err)
	}
	list, err := keyctlRead(s.cacheID)
	if err != nil {
		return nil, changed(err), fmt.Errorf("credential cache %s: reading cache keyring %q: %w", c.name, s.subsidiary, err)
	}
	// A malformed record may be a principal or offsets key that kinit added after the
	// searches above (then its description tells), or a key of a cache that changed since
	// the list was read: then start again.
	special := func(id int) bool {
		d, err := unix.KeyctlString(unix.KEYCTL_DESCRIBE, id)
		if err != nil {
			return false
		}
		d = d[strings.LastIndexByte(d, ';')+1:]
		return d == krccPrincipalKey || d == krccOffsetsKey
	}
	malformed := func(err error) (*credentials.CCache, bool, error) {
		now, lerr := keyctlRead(s.cacheID)
		return nil, lerr != nil || string(now) != string(list), err
	}
	var creds [][]byte
	sawPrinc := false
	for i := 0; i+4 <= len(list); i += 4 {
		id := int(int32(binary.NativeEndian.Uint32(list[i:])))
		if id == princID || id == offsetsID {
			sawPrinc = sawPrinc || id == princID
			continue
		}
		b, err := keyctlRead(id)
		if changed(err) {
			continue
		}
		if err != nil {
			return nil, false, fmt.Errorf("credential cache %s: reading credential key %d: %w", c.name, id, err)
		}
		if n, err := credentialLen(b); err != nil {
			if special(id) {
				continue
			}
			return malformed(fmt.Errorf("credential cache %s: key %d: %w", c.name, id, err))
		} else if n != len(b) {
			if special(id) {
				continue
			}
			return malformed(fmt.Errorf("credential cache %s: key %d: malformed credential record: %d bytes after it", c.name, id, len(b)-n))
		}
		creds = append(creds, b)
	}
	if !sawPrinc { // re-initialized between the search and the list
		return nil, true, fmt.Errorf("%w: %s (changed while reading)", ErrNoCache, c.name)
	}
	cc, err = fromRecords(principal, creds)
	if err != nil {
		return nil, false, fmt.Errorf("credential cache %s: %w", c.name, err)
	}
	return cc, false, nil
}

// keyctlRead returns the whole payload of a key (keyctl_read_alloc): a user or big_key
// payload, or for a keyring its member serials as host-order int32s.
func keyctlRead(id int) ([]byte, error) {
	buf := make([]byte, 512)
	for {
		n, err := unix.KeyctlBuffer(unix.KEYCTL_READ, id, buf, 0)
		if err != nil {
			return nil, err
		}
		if n <= len(buf) {
			return buf[:n], nil
		}
		buf = make([]byte, n)
	}
}
