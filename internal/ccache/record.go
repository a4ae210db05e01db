package ccache

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jcmturner/gokrb5/v8/credentials"
)

// fromRecords builds a gokrb5 CCache from a principal and credential records in the
// version 4 format of ccmarshal.c (k5_marshal_princ, k5_marshal_cred), as KEYRING keys and
// KCM replies carry them. Bytes after the principal are ignored, as MIT ignores them (MIT's
// own test KCM server adds a NUL); each credential record must be whole. It decodes with
// decoder, so it allocates at most decodeAllocFactor times the bytes of its records plus
// decodeAllocConst (FuzzRecords checks it).
func fromRecords(principal []byte, creds [][]byte) (cc *credentials.CCache, err error) {
	n, err := principalLen(principal)
	if err != nil {
		return nil, err
	}
	for i, c := range creds {
		if err := checkCredential(c); err != nil {
			return nil, fmt.Errorf("credential record %d: %w", i, err)
		}
	}
	cc = &credentials.CCache{Version: 4}
	d := &decoder{b: principal[:n], order: binary.BigEndian, version: 4}
	cc.DefaultPrincipal.Realm, cc.DefaultPrincipal.PrincipalName = d.principal()
	if d.err != nil { // principalLen lets through nothing decoder refuses
		return nil, fmt.Errorf("malformed principal record: %w", d.err)
	}
	for i, c := range creds {
		d = &decoder{b: c, order: binary.BigEndian, version: 4}
		cred := d.credential()
		if d.err != nil { // checkCredential lets through nothing decoder refuses
			return nil, fmt.Errorf("malformed credential record %d: %w", i, d.err)
		}
		cc.Credentials = append(cc.Credentials, cred)
	}
	return cc, nil
}

// principalLen is the length of the version 4 principal record at the start of b:
// u32 name type, u32 component count, realm, components, each u32 length + bytes.
func principalLen(b []byte) (int, error) {
	if len(b) < 8 {
		return 0, errors.New("malformed principal record: short")
	}
	count := binary.BigEndian.Uint32(b[4:8])
	if count > 64 {
		return 0, fmt.Errorf("malformed principal record: %d components", count)
	}
	p := 8
	for i := uint32(0); i <= count; i++ { // the realm, then the components
		if len(b)-p < 4 {
			return 0, errors.New("malformed principal record: short")
		}
		l := binary.BigEndian.Uint32(b[p : p+4])
		p += 4
		if uint64(l) > uint64(len(b)-p) {
			return 0, errors.New("malformed principal record: short")
		}
		p += int(l)
	}
	return p, nil
}

// checkCredential checks that b is exactly one version 4 credential record (ccmarshal.c
// k5_marshal_cred): client and server principals, u16 enctype, key data, four u32 times, u8
// is_skey, u32 flags, u32 count x {u16 address type, data}, u32 count x {u16 authdata type,
// data}, ticket data, second ticket data; data = u32 length + bytes.
func checkCredential(b []byte) error {
	short := errors.New("malformed credential record: short")
	p := 0
	for range 2 {
		n, err := principalLen(b[p:])
		if err != nil {
			return err
		}
		p += n
	}
	data := func() bool {
		if len(b)-p < 4 {
			return false
		}
		l := binary.BigEndian.Uint32(b[p:])
		p += 4
		if uint64(l) > uint64(len(b)-p) {
			return false
		}
		p += int(l)
		return true
	}
	if len(b)-p < 2 {
		return short
	}
	p += 2 // enctype
	if !data() {
		return short
	}
	if len(b)-p < 4*4+1+4 {
		return short
	}
	p += 4*4 + 1 + 4 // times, is_skey, flags
	// Addresses, then authorization data.
	for range 2 {
		if len(b)-p < 4 {
			return short
		}
		count := binary.BigEndian.Uint32(b[p:])
		p += 4
		if uint64(count) > uint64(len(b)-p)/6 {
			return fmt.Errorf("malformed credential record: %d entries in %d bytes", count, len(b)-p)
		}
		for range count {
			if len(b)-p < 2 {
				return short
			}
			p += 2
			if !data() {
				return short
			}
		}
	}
	if !data() || !data() { // ticket, second ticket
		return short
	}
	if p != len(b) {
		return fmt.Errorf("malformed credential record: %d bytes after its end", len(b)-p)
	}
	return nil
}
