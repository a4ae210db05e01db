package ccache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Names and formats of MIT's KEYRING cache (cc_keyring.c).
const (
	krccCollectionPrefix = "_krb_"              // KRCC_CCCOL_PREFIX: collection keyring in its anchor
	krccPersistentName   = "_krb"               // KRCC_PERSISTENT_KEYRING_NAME: collection in a persistent keyring
	krccPrimaryKey       = "krb_ccache:primary" // KRCC_COLLECTION_PRIMARY: user key naming the primary cache
	krccPrincipalKey     = "__krb5_princ__"     // KRCC_SPEC_PRINC_KEYNAME: user key, v4 principal record
	krccOffsetsKey       = "__krb5_time_offsets__"
	krccCollectionVer    = 1 // KRCC_COLLECTION_VERSION
)

// keyringName is a parsed KEYRING residual (parse_residual in cc_keyring.c):
// anchor:collection:subsidiary, anchor:collection, or a bare collection (anchor "legacy").
type keyringName struct {
	anchor     string // session, user, persistent, process, thread or legacy
	collection string // for persistent: a uid, empty for the effective uid
	subsidiary string // empty: the collection's primary cache
	hasSub     bool
}

func parseKeyringResidual(residual string) (keyringName, error) {
	var n keyringName
	anchor, rest, ok := strings.Cut(residual, ":")
	if !ok {
		anchor, rest = "legacy", residual
	}
	n.anchor = anchor
	n.collection, n.subsidiary, n.hasSub = strings.Cut(rest, ":")
	switch anchor {
	case "session", "user", "persistent", "process", "thread", "legacy":
	default:
		return n, fmt.Errorf("credential cache KEYRING:%s: unknown anchor %q (session, user, persistent, process, thread, legacy)", residual, anchor)
	}
	if n.hasSub && n.subsidiary == "" {
		return n, fmt.Errorf("credential cache KEYRING:%s: empty subsidiary name", residual)
	}
	return n, nil
}

// parsePrimaryKey reads the payload of krb_ccache:primary (parse_index in cc_keyring.c):
// u32 version (1), u32 length, the subsidiary name; bytes after it are ignored, as MIT does.
// The name may be empty.
func parsePrimaryKey(b []byte) (string, error) {
	name, err := primaryKeyName(b)
	return string(name), err
}

// primaryKeyName is parsePrimaryKey without a copy: the name within b.
func primaryKeyName(b []byte) ([]byte, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("primary key: %d bytes, want at least 8", len(b))
	}
	if v := binary.BigEndian.Uint32(b); v != krccCollectionVer {
		return nil, fmt.Errorf("primary key: collection version %d, want %d", v, krccCollectionVer)
	}
	l := binary.BigEndian.Uint32(b[4:])
	if uint64(l) > uint64(len(b)-8) {
		return nil, fmt.Errorf("primary key: name length %d, but %d bytes follow", l, len(b)-8)
	}
	// An empty name parses (parse_index); no cache keyring has it, so the collection has no
	// primary cache (see keyringCache.resolve).
	return b[8 : 8+l], nil
}

// credentialLen is the length of the version 4 credential record at the start of b
// (k5_unmarshal_cred in ccmarshal.c): client and server principals, u16 enctype + data key,
// four u32 times, u8 is_skey, u32 flags, u32 count x {u16 type, data} addresses, the same for
// authorization data, data ticket, data second ticket; data is u32 length + bytes.
func credentialLen(b []byte) (int, error) {
	short := errors.New("malformed credential record: short")
	p := 0
	for range 2 {
		n, err := principalLen(b[p:])
		if err != nil {
			return 0, errors.New("malformed credential record: " + strings.TrimPrefix(err.Error(), "malformed "))
		}
		p += n
	}
	data := func() bool {
		if len(b)-p < 4 {
			return false
		}
		l := binary.BigEndian.Uint32(b[p:])
		if uint64(l) > uint64(len(b)-p-4) {
			return false
		}
		p += 4 + int(l)
		return true
	}
	skip := func(n int) bool {
		if len(b)-p < n {
			return false
		}
		p += n
		return true
	}
	if !skip(2) || !data() || !skip(4*4+1+4) {
		return 0, short
	}
	for range 2 { // addresses, then authorization data
		if len(b)-p < 4 {
			return 0, short
		}
		count := binary.BigEndian.Uint32(b[p:])
		p += 4
		if uint64(count)*6 > uint64(len(b)-p) {
			return 0, short
		}
		for range count {
			if !skip(2) || !data() {
				return 0, short
			}
		}
	}
	if !data() || !data() {
		return 0, short
	}
	return p, nil
}
